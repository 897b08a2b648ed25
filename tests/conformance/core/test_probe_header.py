"""The probe's own interface header: vtable slots computed by the compiler, anchored by published facts;
HRESULT constants equal to clr_model.hresults; generated files up to date with tools/interfaces.txt."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from clr_model.hresults import HResult
from conformance.core.paths import NATIVE_DIR

TOOLS = NATIVE_DIR / "tools"
INCLUDE = NATIVE_DIR / "include"
SLOTS_TSV = NATIVE_DIR / "slots.tsv"

#: Published or idl-verified slot facts (counting IUnknown's 3). DoStackSnapshot, SuspendRuntime and
#: ResumeRuntime are the published anchors; the callback facts were counted in corprof.idl.
ANCHORS: list[tuple[str, str, int]] = [
    ("IUnknown", "QueryInterface", 0),
    ("IUnknown", "Release", 2),
    ("ICorProfilerInfo2", "DoStackSnapshot", 36),
    ("ICorProfilerInfo10", "SuspendRuntime", 97),
    ("ICorProfilerInfo10", "ResumeRuntime", 98),
    ("ICorProfilerCallback", "Initialize", 3),
    ("ICorProfilerCallback", "Shutdown", 4),
    ("ICorProfilerCallback2", "GarbageCollectionStarted", 73),
    ("ICorProfilerCallback4", "MovedReferences2", 87),
]


def read_slot_table() -> list[tuple[str, str, int]]:
    with SLOTS_TSV.open(newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        return [(row["interface"], row["method"], int(row["slot"])) for row in reader]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_interfaces", TOOLS / "gen_interfaces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compiler_slots(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, int]]:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path_factory.mktemp("slots") / "slot_dump"
    subprocess.run(
        [gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", f"-I{TOOLS}",
         str(TOOLS / "slot_dump.cpp"), "-o", str(exe)],
        check=True, capture_output=True, text=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        iface, method, slot = line.split("\t")
        rows.append((iface, method, int(slot)))
    return rows


def test_compiler_slots_equal_slot_table(compiler_slots: list[tuple[str, str, int]]) -> None:
    assert compiler_slots == read_slot_table()


def test_slot_dump_covers_every_declared_method(compiler_slots: list[tuple[str, str, int]]) -> None:
    header = (INCLUDE / "profharness" / "interfaces.h").read_text()
    declared: list[tuple[str, str]] = []
    current = ""
    for line in header.splitlines():
        struct = re.match(r"^struct (\w+)( : public \w+)? \{$", line)
        if struct:
            current = struct.group(1)
        method = re.match(r"^\s+virtual .* STDMETHODCALLTYPE (\w+)\(", line)
        if method:
            declared.append((current, method.group(1)))
    assert declared == [(i, m) for i, m, _ in compiler_slots]
    assert len(declared) > 200


def test_slot_table_anchored_by_published_facts() -> None:
    table = {(i, m): s for i, m, s in read_slot_table()}
    for iface, method, slot in ANCHORS:
        assert table[(iface, method)] == slot, f"{iface}::{method}"


def test_slot_table_is_contiguous_per_interface_chain() -> None:
    rows = read_slot_table()
    by_iface: dict[str, list[int]] = {}
    for iface, _, slot in rows:
        by_iface.setdefault(iface, []).append(slot)
    for iface, slots in by_iface.items():
        assert slots == list(range(slots[0], slots[0] + len(slots))), iface
    # each versioned interface starts right after its predecessor ends
    for family in ("ICorProfilerCallback", "ICorProfilerInfo"):
        chain = [family] + [f"{family}{n}" for n in range(2, 12) if f"{family}{n}" in by_iface]
        for prev, nxt in itertools.pairwise(chain):
            assert by_iface[nxt][0] == by_iface[prev][-1] + 1, (prev, nxt)
        assert by_iface[family][0] == 3


def test_slot_table_rejects_a_missing_method() -> None:
    """The anchors catch a dropped method: removing one Info method shifts DoStackSnapshot."""
    gen = load_generator()
    text = (TOOLS / "interfaces.txt").read_text().replace(
        "HRESULT GetObjectSize(ObjectID objectId, ULONG* pcSize)\n", "")
    ifaces = gen.parse(text, "mutated")
    rows = [r.split("\t") for r in gen.render_slots_tsv(ifaces).splitlines()[1:]]
    table = {(i, m): int(s) for i, m, s in rows}
    assert table[("ICorProfilerInfo2", "DoStackSnapshot")] == 35


def test_generated_files_up_to_date() -> None:
    gen = load_generator()
    for path, text in gen.outputs().items():
        assert Path(path).read_text() == text, f"{path} is stale: run tools/gen_interfaces.py"


def header_hresults() -> dict[str, int]:
    text = (INCLUDE / "profharness" / "hresults.h").read_text()
    found = re.findall(r"inline constexpr HRESULT (\w+) = hr_of\(0x([0-9A-Fa-f]{8})u\);", text)
    return {name: int(value, 16) for name, value in found}


def test_header_hresults_equal_model_table() -> None:
    constants = header_hresults()
    assert len(constants) >= 10
    for name, value in constants.items():
        assert name in HResult.__members__, f"{name} missing from clr_model.hresults"
        assert HResult[name].value == value, name


def test_probe_sources_use_only_declared_hresults() -> None:
    declared = set(header_hresults())
    used: set[str] = set()
    for path in (NATIVE_DIR / "src").glob("*.*"):
        used |= set(re.findall(r"\b((?:S|E|CLASS_E|CORPROF_E|HRESULT_ERROR)_[A-Z_]+)\b", path.read_text()))
    assert used <= declared, used - declared
