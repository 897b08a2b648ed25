"""`profharness clauses`: table and JSON views of the clause catalog; `--where ID`: every hop of a clause."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from clr_model.clauses import CATALOG, Document, Layer
from conformance.cli import clauses as cmd_clauses
from conformance.cli import where
from conformance.core.errors import HarnessError


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="profharness clauses")
    cmd_clauses.add_arguments(parser)
    rc = cmd_clauses.main(parser.parse_args(argv))
    return rc, capsys.readouterr().out


def test_table_lists_every_clause_once(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run([], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["id", "kind", "layers"]
    ids = [line.split()[0] for line in lines[1:-1]]
    assert ids == list(CATALOG)
    assert lines[-1] == f"{len(CATALOG)} clause(s)"


def test_table_row_shows_kind_layers_title(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _run(["--document", "DSS"], capsys)
    row = next(line for line in out.splitlines() if line.startswith("DSS-16"))
    assert "ordering" in row
    assert "emu,live,model" in row
    assert "leaf first, main last" in row


def test_json_has_all_fields_and_sorted_layers(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(["--json", "--document", "DoStackSnapshot.md"], capsys)
    assert rc == 0
    data = json.loads(out)
    assert [d["id"] for d in data] == [c for c in CATALOG if c.startswith("DSS-")]
    keys = {
        "id",
        "title",
        "paraphrase",
        "document",
        "section",
        "kind",
        "layers",
        "quote",
        "question",
        "model_choice",
    }
    for item in data:
        assert set(item) == keys
        assert item["layers"] == sorted(item["layers"])
        assert item["document"] == Document.DO_STACK_SNAPSHOT.value
    dss26 = next(d for d in data if d["id"] == "DSS-26")
    assert dss26["kind"] == "ambiguity"
    assert "CORPROF_E_STACKSNAPSHOT_ABORTED" in dss26["model_choice"]


def test_layer_filter(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _run(["--json", "--layer", "validator"], capsys)
    data = json.loads(out)
    assert data, "some clause is checked by the validator"
    assert all("validator" in d["layers"] for d in data)
    expected = [c.id for c in CATALOG.values() if Layer.VALIDATOR in c.layers]
    assert [d["id"] for d in data] == expected


def test_layer_and_document_filters_combine(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _run(["--json", "--layer", "validator", "--document", "dss"], capsys)
    ids = [d["id"] for d in json.loads(out)]
    assert ids == ["DSS-03", "DSS-13", "DSS-19", "DSS-22", "DSS-23"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--layer", "bogus"], "--layer 'bogus'"), (["--document", "nope.md"], "--document 'nope.md'")],
)
def test_bad_filter_is_a_one_line_harness_error(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(HarnessError) as info:
        _run(argv, capsys)
    assert needle in info.value.message
    assert "\n" not in info.value.message


# --- --where: every hop of a clause, derived from the code ------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]


def _hop_path(path: str) -> Path:
    return ROOT / path


def test_where_dss05_prints_every_hop_kind_with_existing_paths(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(["--where", "DSS-05"], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"DSS-05: {CATALOG['DSS-05'].title}"
    kinds = {line.split()[0] for line in lines[1:]}
    assert set(where.HOPS) <= kinds
    for line in lines[1:]:
        kind, rest = line.split(maxsplit=1)
        if rest == "(none)":
            assert kind in ("rule", "expectation"), f"DSS-05 has no {kind} hop"
            continue
        location = rest.split()[0]
        path, number = location.rsplit(":", 1)
        assert _hop_path(path).is_file(), line
        assert int(number) >= 1, line
    assert "clr_model/catalog/dss.toml:" in out and "conformance/checks/stack.py:" in out
    assert "conformance/scenarios/stack-walks/plan.json:" in out and "now-regctx" in out
    assert "conformance/native/src/experiments_stack.cpp:" in out and "'stack_walk'" in out
    assert "test_DSS_05_" in out


@pytest.mark.parametrize(
    ("clause", "needles"),
    [
        ("VAL-CRASH", ("clr_model/catalog/val.toml:", "rule        conformance/validator/rules.py:",
                       "validator CrashesAndHangs", "test_VAL_CRASH_")),
        ("FE2-08", ("clr_model/catalog/fe2.toml:", "rule        emu/hookcheck/check.py:",
                    "hook hookcheck:register-preserved", "judge       conformance/checks/hook_abi.py:",
                    "hookcheck:reference_enter2", "test_FE2_08_")),
    ],
)  # fmt: skip
def test_where_prints_every_hop_of_a_validator_and_a_hook_clause(
    clause: str, needles: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20: a harness rule (VAL-*) and a hook-checker clause have their hops like DSS-05: the catalog,
    the rule or judge that registered for it (the one registry), its tests."""
    rc, out = _run(["--where", clause], capsys)
    assert rc == 0
    for needle in needles:
        assert needle in out, (needle, out)
    for line in out.splitlines()[1:]:
        rest = line.split(maxsplit=1)[1]
        if rest != "(none)":
            path, number = rest.split()[0].rsplit(":", 1)
            assert _hop_path(path).is_file() and int(number) >= 1, line


def test_where_line_numbers_point_at_the_thing_named() -> None:
    hops = {h.kind: h for h in reversed(where.where("DSS-05"))}

    def source(hop: where.Hop) -> str:
        return _hop_path(hop.path).read_text().splitlines()[hop.line - 1]

    assert "DSS-05" in source(hops["catalog"])
    judge_lines = _hop_path(hops["judge"].path).read_text().splitlines()[hops["judge"].line - 1 :]
    assert next(line for line in judge_lines if line.startswith("def ")).startswith("def judge_dss05")
    assert '"stack_walk"' in source(hops["native"])
    assert "now-default" in source(hops["plan"]) or "now-regctx" in source(hops["plan"])
    assert source(hops["test"]).lstrip().startswith("def test_")


def test_where_json_groups_hops_by_kind(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(["--where", "dss-05", "--json"], capsys)
    data = json.loads(out)
    assert rc == 0 and data["id"] == "DSS-05" and list(data["hops"]) == list(where.HOPS)
    assert data["hops"]["judge"][0]["path"] == "conformance/checks/stack.py"


def test_where_shows_expectation_entries_and_overlay_plan_keys() -> None:
    from conformance.suite.expectations import load_expectations

    entry = next(e for e in load_expectations().entries if e.clause == "DSS-02")
    hops = [h for h in where.where("DSS-02") if h.kind == "expectation"]
    assert [(h.path, h.line) for h in hops] == [(f"conformance/expectations/{entry.file.name}", entry.line)]


def test_where_an_unknown_id_is_one_line_saying_how_to_find_ids(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HarnessError) as info:
        _run(["--where", "XYZ-99"], capsys)
    assert "--where 'XYZ-99': no such clause" in info.value.message
    assert "profharness clauses" in info.value.message and "\n" not in info.value.message


def test_every_live_clause_has_a_catalog_entry_a_judge_and_a_test() -> None:
    missing = []
    for clause in CATALOG.values():
        if Layer.LIVE not in clause.layers:
            continue
        kinds = {h.kind for h in where.where(clause.id)}
        missing += [f"{clause.id}: no {kind}" for kind in ("catalog", "judge", "test") if kind not in kinds]
    assert not missing, missing


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``profharness clauses | head -1``: no BrokenPipeError traceback (stdout is a pipe nobody reads)."""
    import subprocess
    import sys

    code = (
        "import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1); "
        "from conformance.cli import main; sys.exit(main(['clauses']))"
    )
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
