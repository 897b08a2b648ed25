"""Issue 22, item 3 ("Reach"): the fake world's names come also from the profiler's own string table and
from the user's assembly (``--app``), so a profiler that tracks only the objects of a class it knows by
name (``profilers/named.h``: "Contoso.Orders.OrderLine", checked with GetClassIDInfo, GetModuleMetaData and
IMetaDataImport::GetTypeDefProps) meets that class; its planted remapping error (``+ 8``, MR2-08) is found
as MR2-17 (the judge's rule for an inspected ObjectID no live object has)."""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.fuzz.behaviours import WORLDS, allowed
from conformance.fuzz.machine import fuzz, replay
from conformance.fuzz.names import profiler_strings, read_app
from conformance.fuzz.program import decode
from tests.conformance.fuzz.fixtures import CLSID, build

TRACKED = "Contoso.Orders.OrderLine"
#: The C# library that declares the tracked class (and a generic type the world does not load).
APP_SOURCE = """
namespace Contoso.Orders {
    public class OrderLine {
        public int Quantity;
        public OrderLine() {}
        public void Add(int n) { Quantity += n; }
    }
    public class Box<T> { public T Item; public T Get() { return Item; } }
}
"""
EXAMPLES = 500
SEED = 1


@pytest.fixture(scope="module")
def plus8() -> Path:
    return build("named_plus8")


@pytest.fixture(scope="module")
def correct() -> Path:
    return build("named_correct")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("app")
    (folder / "Contoso.cs").write_text(APP_SOURCE)
    out = folder / "Contoso.dll"
    subprocess.run(["mcs", "-target:library", f"-out:{out}", str(folder / "Contoso.cs")], check=True,
                   capture_output=True, timeout=120)
    return out


def class_names(commands: list[dict[str, object]]) -> set[str]:
    return {str(c["names"][0]) for c in commands if c["op"] == "class"}  # type: ignore[index]


def test_the_profiler_strings_hold_its_class_name_constant(plus8: Path) -> None:
    strings = profiler_strings(plus8)
    assert TRACKED in strings
    assert all(" " not in s and len(s) >= 4 for s in strings)


def test_the_app_metadata_gives_types_methods_arity_and_tokens(app: Path) -> None:
    d = read_app(app)
    assert d.app_module == "Contoso.dll"
    by_name = {t.name: t for t in d.app_types}
    assert set(by_name) == {TRACKED, "Contoso.Orders.Box`1"}  # <Module> left out
    line, box = by_name[TRACKED], by_name["Contoso.Orders.Box`1"]
    # TypeDef row 1 is <Module>: the declared types are rows 2 and 3, in declaration order
    assert (line.token, box.token) == (0x02000002, 0x02000003)
    assert (line.arity, box.arity) == (0, 1)
    assert sorted(m.name for m in line.methods) == [".ctor", "Add"]
    assert sorted(m.token for m in line.methods + box.methods) == [0x06000001, 0x06000002, 0x06000003,
                                                                    0x06000004]
    assert d.loadable == (line,)  # a generic type's classes are instantiations: not loaded


@pytest.mark.parametrize("content", [b"not an assembly\n", b"MZ" + bytes(200)], ids=["text", "truncated-pe"])
def test_a_bad_app_is_one_clear_line(tmp_path: Path, correct: Path, content: bytes,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.dll"
    bad.write_bytes(content)
    rc = cli_main(["fuzz", str(correct), "--clsid", CLSID, "--seed", "1", "--max-examples", "5",
                   "--app", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"--app {bad}: not a .NET assembly" in err[0], err


def test_MR2_17_named_class_plus8_is_found_from_the_string_table_and_replayed(
    plus8: Path, tmp_path: Path
) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(plus8, CLSID, max_examples=EXAMPLES, seed=SEED, reproducer=out)
    assert report.first_failure is not None and report.first_failure <= EXAMPLES
    assert {f.clause for f in report.findings} == {"MR2-17"}
    data = json.loads(out.read_text())
    assert TRACKED in class_names(data["commands"]) and TRACKED in data["dictionary"]["strings"]
    assert {f.clause for f in replay(out)} == {"MR2-17"}


def test_the_named_class_profiler_without_the_error_is_clean_and_reached(correct: Path) -> None:
    report = fuzz(correct, CLSID, max_examples=EXAMPLES, seed=SEED)
    assert report.findings == [] and report.examples == EXAMPLES
    # the clean verdict is not from never reaching its tracking: tracked objects were inspected
    assert report.reached["GetClassFromObject"][0] > 0
    assert report.reached["GetClassIDInfo"][1] >= report.reached["GetClassIDInfo"][0] > 0


@pytest.mark.long  # (MR2-17 found by the reach of the profiler's strings is held every run, just above)
def test_MR2_17_named_class_plus8_is_found_with_app_alone(plus8: Path, app: Path, tmp_path: Path) -> None:
    """Without the string table the world never names a class "Contoso.Orders.OrderLine" (no tracked
    object, nothing found); with ``--app`` naming it in a real assembly it does, with its TypeDef token."""
    blind = fuzz(plus8, CLSID, max_examples=EXAMPLES, seed=SEED, strings=False)
    assert blind.findings == [] and "GetClassFromObject" not in blind.reached
    out = tmp_path / "repro.json"
    report = fuzz(plus8, CLSID, max_examples=EXAMPLES, seed=SEED, strings=False, app=app, reproducer=out)
    assert report.first_failure is not None and report.first_failure <= EXAMPLES
    assert {f.clause for f in report.findings} == {"MR2-17"}
    data = json.loads(out.read_text())
    assert data["dictionary"]["strings"] == []
    tracked = [c for c in data["commands"] if c["op"] == "class" and c["names"] == [TRACKED]]
    assert tracked and tracked[0]["token"] == 0x02000002
    assert {f.clause for f in replay(out)} == {"MR2-17"}


def test_the_summary_lists_the_runtime_calls_reached(
    correct: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli_main(["fuzz", str(correct), "--clsid", CLSID, "--seed", "1", "--max-examples", "60"])
    out = capsys.readouterr().out
    assert rc == 0, out
    table = out.split("runtime calls reached:\n", 1)[1].splitlines()
    assert table[0].split() == ["method", "examples", "calls"]
    rows = {line.split()[0]: (int(line.split()[1]), int(line.split()[2])) for line in table[1:]
            if len(line.split()) == 3 and line.startswith("  ")}
    assert rows["SetEventMask2"] == (60, 60)  # once per example, in Initialize
    assert rows["GetClassIDInfo"][0] > 0 and rows["GetModuleMetaData"] == rows["GetClassIDInfo"]


def test_worlds_with_a_dictionary_do_only_their_rows_and_keep_tokens_unique(app: Path) -> None:
    """Names drawn from a dictionary are observed-world names (rows ``names.strings``, ``names.app``); the
    app's types load once each into the app's module with their own tokens, no two classes of a module
    share a TypeDef token and no two functions of a module a MethodDef token (the fake runtime finds a
    class's name by its token)."""
    dictionary = replace(read_app(app), strings=(TRACKED, "Fabrikam.Billing", "Run"))
    rng = random.Random(3)
    used: set[str] = set()
    for world_name in WORLDS:
        for _ in range(300):
            world = decode(rng.randbytes(240), 30, world_name, dictionary).world
            assert all(allowed(b, world_name) for b in world.used)
            used |= world.used
            for kind in ("class", "function"):
                keys = [(c["module"], c["token"]) for c in world.commands if c["op"] == kind]
                assert len(keys) == len(set(keys)), kind
            app_classes = [c for c in world.commands
                           if c["op"] == "class" and c["module"] == world.app_module]
            assert all(c["names"] == [TRACKED] and c["token"] == 0x02000002 for c in app_classes)
    assert {"names.strings", "names.app"} <= used


def test_hypothesis_is_steered_by_the_distinct_runtime_calls_of_each_example(
    correct: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every example reports to :func:`hypothesis.target` the number of distinct runtime methods its
    profiler called: at least QueryInterface and SetEventMask2 (Initialize), more where a class was
    loaded (GetClassIDInfo, GetModuleMetaData) or a tracked object inspected (GetClassFromObject)."""
    from conformance.fuzz import machine

    seen: list[tuple[float, str]] = []
    real = machine.target

    def spy(observation: float, *, label: str = "") -> float:
        seen.append((observation, label))
        return real(observation, label=label)

    monkeypatch.setattr(machine, "target", spy)
    report = fuzz(correct, CLSID, max_examples=80, seed=SEED)
    assert len(seen) == report.examples == 80
    assert {label for _, label in seen} == {machine.TARGET_LABEL}
    assert min(v for v, _ in seen) >= 2 and max(v for v, _ in seen) >= 4
