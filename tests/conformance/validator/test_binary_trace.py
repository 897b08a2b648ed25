"""The binary trace (issue 23) judged like the JSON trace: fixtures recorded by the proxy with
PROFHARNESS_TRACE_FORMAT=binary (a clean one, one with findings, one that crashes the process: the proxy's
crash path flushes its buffered records), each recording judged by every validator rule as it is and as the
JSON Lines it decodes to: the same findings, record for record the same input. The binary records are the
writer's JSON records by construction (tests/conformance/core/test_trace_writer.py proves the encoding on
every kind of value); this shows the readers and the judges do not care which file they were given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.core.binary_trace import raw_records
from conformance.core.findings import Finding
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.runtimes import Runtime
from conformance.validator import api
from conformance.validator.rules import judge_run
from tests.conformance.validator.fixtures import FIXTURE_CLSID, build_fixture

pytestmark = pytest.mark.live

BINARY = {"PROFHARNESS_TRACE_FORMAT": "binary"}


def _findings(run: RunResult) -> list[str]:
    """The findings as JSON, the recording's own path (which a finding names) made one placeholder."""
    found: list[Finding] = []
    judge_run(run, found.append)
    texts = (json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in found)
    return sorted(t.replace(str(run.trace_path), "<trace>") for t in texts)


@pytest.mark.parametrize("fixture", ["correct", "stale_ids", "crash"])
def test_binary_trace_judged_as_its_json_lines(runtimes: list[Runtime], tmp_path: Path, fixture: str) -> None:
    result = api.validate(build_fixture(fixture), FIXTURE_CLSID, runtime="all", env=BINARY)
    assert [r.runtime for r in result.runs] == [rt.version for rt in runtimes]
    for summary in result.runs:
        binary = Path(summary.trace)
        assert binary.read_bytes()[:8] == b"PHFRAMES", summary
        as_jsonl = tmp_path / f"{fixture}-{summary.runtime}.jsonl"
        records = []
        for _number, record, what in raw_records(binary):
            assert what is None, what
            if record is not None:
                records.append(record)
        as_jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
        assert records and records[0]["seq"] == 0
        if fixture == "crash":  # the crash record made it out of the buffers
            assert summary.outcome == "crashed" and any(r.get("name") == "proxy.crash" for r in records)
        outcome = RunOutcome(summary.outcome) if summary.outcome != "exited" else RunOutcome.FAILED
        runs = [
            RunResult(scenario="app", runtime=summary.runtime, runtime_source="test", outcome=outcome,
                      signal=summary.signal, seconds=1.0, run_dir=path.parent, trace_path=path)
            for path in (binary, as_jsonl)
        ]  # fmt: skip
        judged = [_findings(run) for run in runs]
        assert judged[0] == judged[1], summary
        if fixture == "stale_ids":
            assert judged[0], "the fixture's findings"
