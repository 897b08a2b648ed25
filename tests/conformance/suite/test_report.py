"""Reports: the terminal matrix, JSON, JUnit XML (schema-checked) and HTML."""

from __future__ import annotations

import json
from pathlib import Path

import xmlschema

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
