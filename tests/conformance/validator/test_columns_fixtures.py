"""Every validator fixture (profilers/*.cpp and the document-written profilers/docs/*.cpp) recorded with the
binary trace on .NET 8 and judged both ways (issue 23 part 2): by the columns
(:mod:`conformance.validator.columns`, what ``validate`` uses) and with every record decoded into its dict
(the path before): the same findings, clauses exercised, record count and proxy notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.core.findings import Finding
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.runtimes import Runtime
from conformance.validator import api
from conformance.validator.rules import judge_run
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_fixture, build_profiler

pytestmark = pytest.mark.live

DOCS = PROFILERS / "docs"
#: judged both ways in every run: a fixture for each rule with a Quiet contract (FE2-10/11, DET, SHD-01 and
#: VAL-RELEASED-INFO, MR2-17/08, MR2-09, DSS-03 walks, FE2-05), a clean tracker that remaps through every GC,
#: and a clean one; the rest (about 50 more validate runs, several minutes) in the nightly profile (--long)
EVERY_RUN = frozenset({
    "correct", "after_shutdown", "elt_block", "elt_gc", "fast_hook_gc", "inspect_in_mr2", "stale_ids",
    "docs/object_tracker", "docs/withinfo_hooks", "docs/attach_detach_bad", "docs/objrefs_inspector",
    "docs/sampler_walk_all", "docs/method_timing_tracer",
})  # fmt: skip
ALL = [*(p.stem for p in sorted(PROFILERS.glob("*.cpp"))),
       *(f"docs/{p.stem}" for p in sorted(DOCS.glob("*.cpp")))]  # fmt: skip
FIXTURES = [name if name in EVERY_RUN else pytest.param(name, marks=pytest.mark.long) for name in ALL]


def _judged(trace: Path, outcome: RunOutcome, *, columnar: bool) -> tuple[list[str], list[str], int, str]:
    found: list[Finding] = []
    run = RunResult(scenario="app", runtime="8", runtime_source="test", outcome=outcome, seconds=1.0,
                    run_dir=trace.parent, trace_path=trace)  # fmt: skip
    judged = judge_run(run, found.append, columnar=columnar)
    findings = sorted(json.dumps(f.model_dump(mode="json"), sort_keys=True) for f in found)
    marks = json.dumps(judged.marks, sort_keys=True, default=str)
    return findings, sorted(judged.exercised), judged.records, marks


def test_every_run_set_names_fixtures_that_exist() -> None:
    assert EVERY_RUN <= set(ALL), sorted(EVERY_RUN - set(ALL))


@pytest.mark.parametrize("fixture", FIXTURES)
def test_columns_judge_every_fixture_as_the_dicts(runtimes: list[Runtime], fixture: str) -> None:
    if fixture.startswith("docs/"):
        so = build_profiler(DOCS / f"{fixture[5:]}.cpp", "validator-docs", [DOCS])
    else:
        so = build_fixture(fixture)
    result = api.validate(so, FIXTURE_CLSID, runtime="8.0", env={"PROFHARNESS_TRACE_FORMAT": "binary"})
    traces = [(Path(r.trace), r.outcome) for r in result.runs if r.trace and Path(r.trace).is_file()]
    assert traces, f"{fixture}: no recording"
    for trace, outcome in traces:
        assert trace.read_bytes()[:8] == b"PHFRAMES", trace
        state = RunOutcome(outcome) if outcome in {o.value for o in RunOutcome} else RunOutcome.FAILED
        assert _judged(trace, state, columnar=True) == _judged(trace, state, columnar=False), trace
