"""`profharness clauses`: table and JSON views of the clause catalog."""

from __future__ import annotations

import argparse
import json

import pytest

from clr_model.clauses import CATALOG, Document, Layer
from conformance.cli import clauses as cmd_clauses
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
    keys = {"id", "title", "paraphrase", "document", "section", "kind", "layers", "quote", "question",
            "model_choice"}
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
    assert ids == ["DSS-09", "DSS-22", "DSS-23", "DSS-24", "DSS-25"]


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
