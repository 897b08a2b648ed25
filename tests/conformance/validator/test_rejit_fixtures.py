"""Issue 25's ReJIT fixtures (profilers/docs/rejit_rewriter.cpp, rejit_in_callback.cpp,
rewrite_every_jit.cpp, sharing rejit_body.h), written from the ReJIT pages, validated on the standard
workload on both bundled runtimes: the faulty one found with its clause at its own source line (the line
found by text in its source), the one the documents allow shown as a note at its request, the correct
one clean. What is expected comes from the fixtures' sources and the runs' own counts, never from what the
validator printed."""

from __future__ import annotations

import pytest

from conformance.core.runtimes import Runtime
from conformance.validator.report import render_text
from tests.conformance.validator.test_docs_fixtures import source_line, validate, versions
from tests.conformance.validator.test_docs_fixtures_deeper import at_line, groups_of


@pytest.mark.live
def test_REJIT_09_rejit_rewriter_is_clean_and_rejit_in_callback_is_found_at_its_request(
    runtimes: list[Runtime],
) -> None:
    """rejit_rewriter requests recompilations from its own thread and rewrites in GetReJITParameters: no
    finding, no note, and the runs recompiled methods (ReJIT compilations counted from the recording).
    rejit_in_callback makes the same request inside JITCompilationFinished: REJIT-09 at that line."""
    correct = validate("rejit_rewriter", None, runtimes, workload="standard")
    text = render_text(correct)
    assert correct.groups == [] and all(r.outcome == "ok" for r in correct.runs), text
    rejits = [r.counts.rejits or 0 for r in correct.runs if r.counts is not None]
    assert len(rejits) == len(runtimes) and min(rejits) > 0, text
    faulty = validate("rejit_in_callback", None, runtimes, workload="standard")
    request = "HRESULT hr = info_->RequestReJIT(1, &module, &method);"
    group = at_line(faulty, "REJIT-09", "rejit_in_callback", request)
    assert group.runtimes == versions(runtimes) and not group.note
    assert group.first.callback == "JITCompilationFinished"
    assert {g.clause for g in faulty.findings} == {"REJIT-09"}, render_text(faulty)


@pytest.mark.live
def test_VAL_REJIT_AGAIN_a_rewriter_requesting_again_on_every_jit_event_is_a_note_at_its_request(
    runtimes: list[Runtime],
) -> None:
    """rewrite_every_jit requests a method again at each of its JIT compilations (tier-up, on-stack
    replacement, the recompiled versions' own): no document forbids it (REJIT-07), so a note at the request
    thread's RequestReJIT, on both runtimes, and no failure."""
    result = validate("rewrite_every_jit", None, runtimes, workload="standard")
    text = render_text(result)
    assert result.findings == [], text
    request = "HRESULT hr = info_->RequestReJIT(ULONG(batch.size()), modules.data(), methods.data());"
    line = source_line("rewrite_every_jit", request)
    source = "profilers/docs/rewrite_every_jit.cpp"
    [group] = [g for g in result.groups if g.clause == "VAL-REJIT-AGAIN" and g.site is not None
               and g.site.line == line and (g.site.file or "").endswith(source)]  # fmt: skip
    assert group.note and group.runtimes == versions(runtimes)
    assert "recompilations" in group.first.message
    assert groups_of(result, "REJIT-09") == []
