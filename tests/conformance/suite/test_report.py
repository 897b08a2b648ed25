"""Reports: the terminal matrix, JSON, JUnit XML (schema-checked) and HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import xmlschema

from conformance.core.errors import InputError
from conformance.suite import report
from conformance.suite.verdicts import AppliedExpectation, Status, SuiteResult, Verdict, VerdictOutcome

DATA = Path(__file__).parent / "data"


def sample() -> SuiteResult:
    def v(clause: str, runtime: str, status: Status, outcome: VerdictOutcome, **kw: object) -> Verdict:
        return Verdict(
            clause=clause,
            runtime=runtime,
            experiment="stack-sync",
            status=status,
            observed=kw.pop("observed", "7 frames"),  # type: ignore[arg-type]
            expected="7 frames",
            trace="/tmp/t.jsonl",
            trace_sha256="ab" * 32,
            outcome=outcome,
            outcome_message=f"{clause}[{runtime}]: {status}",
            **kw,  # type: ignore[arg-type]
        )

    return SuiteResult(
        runtimes=["3.1.23", "8.0.4"],
        runtime_sources={"3.1.23": "bundled", "8.0.4": "bundled"},
        seconds=1.5,
        runs=[],
        verdicts=[
            v("DSS-16", "3.1.23", Status.CONFORMS, VerdictOutcome.AS_DOCUMENTED),
            v("DSS-16", "8.0.4", Status.CONFORMS, VerdictOutcome.AS_DOCUMENTED),
            v(
                "DSS-02",
                "3.1.23",
                Status.DIVERGES,
                VerdictOutcome.EXPECTED_DIVERGENCE,
                observed="0x80131360 <script>",
                expectation=AppliedExpectation(
                    status=(Status.DIVERGES,),
                    why="Linux cannot suspend a thread safely.",
                    disagreements=("0x80131360 <script>",),
                    source="common.toml:12",
                ),
                disagreements=["0x80131360 <script>", "a new line"],
                picture=({"label": "App::Thrower", "ok": True}, {"label": "App::Main", "ok": False}),
                evidence=[{"seq": 3, "kind": "call", "name": "DoStackSnapshot"}],
            ),
            v("DSS-02", "8.0.4", Status.DIVERGES, VerdictOutcome.UNEXPECTED, observed="0x80131360"),
            v("MR2-08", "8.0.4", Status.ERROR, VerdictOutcome.ERROR, observed="crashed (SIGSEGV)"),
        ],
    )


def test_matrix_shows_every_clause_and_runtime() -> None:
    text = report.render_matrix(sample())
    assert "DSS-02" in text and "DSS-16" in text and "MR2-08" in text
    assert "diverges*" in text and "DIVERGES !" in text and "ERROR" in text
    assert "2 unexpected" in text


def test_matrix_is_a_rich_table_coloured_only_on_a_terminal() -> None:
    import io

    from rich.console import Console

    plain = report.render_matrix(sample())
    assert "\x1b[" not in plain
    assert plain.splitlines()[0].split() == ["clause", "what", "3.1.23", "8.0.4"]
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, color_system="standard", width=160).print(
        report.matrix_renderable(sample())
    )
    coloured = buffer.getvalue()
    assert "\x1b[" in coloured and "diverges*" in coloured


def test_expected_not_applicable_shows_as_na_star() -> None:
    result = sample()
    allowed = AppliedExpectation(status=(Status.NOT_APPLICABLE,), why="The run cannot always exercise it.")
    na = result.verdicts[0].model_copy(update={"status": Status.NOT_APPLICABLE, "expectation": allowed})
    result = result.model_copy(update={"verdicts": [na, *result.verdicts[1:]]})
    row = next(line for line in report.render_matrix(result).splitlines() if line.startswith("DSS-16"))
    assert row.split()[-2:] == ["n/a*", "ok"]


def test_json_report(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    report.write_json(sample(), out)
    data = json.loads(out.read_text())
    assert data["ok"] is False
    assert data["clauses_with_live_verdict"] == ["DSS-02", "DSS-16"]
    assert all(v["trace_sha256"] == "ab" * 32 for v in data["verdicts"])


def test_junit_validates_against_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "r.xml"
    report.write_junit(sample(), out)
    schema = xmlschema.XMLSchema(DATA / "junit.xsd")
    schema.validate(out)
    text = out.read_text()
    assert 'name="DSS-16[8.0.4]"' in text and "<failure" in text and "<error" in text


def test_junit_schema_rejects_a_broken_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text('<testsuites><testsuite tests="x"><testcase/></testsuite></testsuites>')
    assert not xmlschema.XMLSchema(DATA / "junit.xsd").is_valid(bad)


def test_html_escapes_and_draws_frames() -> None:
    page = report.render_html(sample())
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<svg" in page and "App::Thrower" in page and "#fbb" in page
    assert "Linux cannot suspend a thread safely." in page and "common.toml:12" in page
    assert "a new line <b>(not in an expectation)</b>" in page


def test_a_clause_judged_twice_on_a_runtime_shows_its_weightiest_verdict() -> None:
    result = sample()
    extra = result.verdicts[1].model_copy(
        update={"experiment": "other", "status": Status.DIVERGES, "outcome": VerdictOutcome.UNEXPECTED}
    )
    result = result.model_copy(update={"verdicts": [*result.verdicts, extra]})
    row = next(line for line in report.render_matrix(result).splitlines() if line.startswith("DSS-16"))
    assert row.split()[-3:] == ["ok", "DIVERGES", "!"]
    page = report.render_html(result)
    assert "ev-DSS-16-8.0.4-other" in page


def shared_evidence() -> SuiteResult:
    """Three verdicts of one run showing the same large record (as the MovedReferences2 judges do), one of
    them with a record of its own, and one verdict without evidence."""
    moved = {"seq": 9, "kind": "callback", "name": "MovedReferences2", "ranges": list(range(2000))}
    mark = {"seq": 4, "kind": "mark", "name": "ids.before", "ids": [7, 7, 7]}
    result = sample()
    verdicts = [
        result.verdicts[0].model_copy(update={"clause": "MR2-10", "evidence": [mark, moved]}),
        result.verdicts[1].model_copy(update={"clause": "MR2-16", "evidence": [moved]}),
        result.verdicts[2].model_copy(update={"clause": "MR2-17", "evidence": [moved, mark]}),
        *result.verdicts[3:],
    ]
    return result.model_copy(update={"verdicts": verdicts})


def test_json_report_stores_each_evidence_record_once_and_reads_back_the_verdicts(tmp_path: Path) -> None:
    result = shared_evidence()
    out = tmp_path / "r.json"
    report.write_json(result, out)
    data = json.loads(out.read_text())
    assert data["report_format"] == report.REPORT_FORMAT
    records = data["evidence_records"]
    assert sorted(r["seq"] for r in records.values()) == [4, 9]  # each record once
    assert out.read_text().count('"MovedReferences2"') == 1
    refs = [v["evidence_refs"] for v in data["verdicts"]]
    assert [[records[k]["seq"] for k in r] for r in refs[:3]] == [[4, 9], [9], [9, 4]]
    assert all("evidence" not in v for v in data["verdicts"])
    back = report.read_json(out)
    assert back == result  # every verdict, its evidence in its order, and the rest of the result
    assert [v.evidence for v in back.verdicts] == [v.evidence for v in result.verdicts]


def test_json_report_text_is_the_document_with_each_record_on_one_line(tmp_path: Path) -> None:
    result = shared_evidence()
    out = tmp_path / "r.json"
    report.write_json(result, out)
    text = out.read_text()
    assert json.loads(text) == report.json_document(result)
    record_lines = [line for line in text.splitlines() if '"kind":' in line]
    assert len(record_lines) == 2 and all(line.startswith('    "') for line in record_lines)


def test_a_format_1_report_with_inline_evidence_still_reads(tmp_path: Path) -> None:
    result = shared_evidence()
    old = json.loads(result.model_dump_json())  # format 1: the verdicts' records inline, no report_format
    out = tmp_path / "old.json"
    out.write_text(json.dumps(old, indent=2))
    assert report.read_json(out) == result


def test_a_missing_evidence_reference_is_one_line_naming_the_verdict_and_the_key(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    report.write_json(shared_evidence(), out)
    data = json.loads(out.read_text())
    lost = data["verdicts"][1]["evidence_refs"][0]
    del data["evidence_records"][lost]
    out.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        report.read_json(out)
    message = caught.value.message
    assert "\n" not in message
    assert message == (
        f"{out}: verdicts[0] (MR2-10 on 3.1.23, experiment stack-sync): evidence reference {lost!r} is not in"
        " evidence_records"
    )


def test_a_report_that_is_no_suite_result_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    for text, wanted in [
        ("[1, 2]", "not a suite result"),
        ("{\n  \"verdicts\": [", f"{out}:2: not JSON"),
        (json.dumps({"verdicts": [], "report_format": 9}), "report_format 9"),
        (json.dumps({"verdicts": [{"clause": "X", "evidence_refs": "k"}]}), "evidence_refs: not a list"),
        (json.dumps({"verdicts": [{"clause": "X"}]}), ": runtimes: Field required"),
    ]:
        out.write_text(text)
        with pytest.raises(InputError, match=re.escape(wanted)) as caught:
            report.read_json(out)
        assert "\n" not in caught.value.message


def test_expectations_update_reads_the_same_observations_from_both_formats(tmp_path: Path) -> None:
    from conformance.suite.expectations import observations

    result = shared_evidence()
    report.write_json(result, tmp_path / "r.json")
    assert observations(json.loads((tmp_path / "r.json").read_text())) == observations(
        json.loads(result.model_dump_json())
    )


def test_json_report_passes_its_schema_and_a_format_1_report_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from conformance.cli import main

    assert main(["schema", "conformance"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == report.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    report.write_json(shared_evidence(), tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
    inline = json.loads(shared_evidence().model_dump_json())
    with pytest.raises(jsonschema.ValidationError, match="report_format"):
        jsonschema.validate(inline, schema, cls=jsonschema.Draft202012Validator)
    data["verdicts"][0]["evidence"] = [{"seq": 1}]  # a record inline: not format 2
    with pytest.raises(jsonschema.ValidationError, match="evidence"):
        jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
