"""The fuzz-runtime grammar, strategies, renderer and finding signatures (no live runtime)."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.cli.fuzz_runtime import duration
from conformance.fuzz_runtime.differential import RuntimeFinding, known_elsewhere, shape_free
from conformance.fuzz_runtime.render import render
from conformance.fuzz_runtime.shapes import (
    GC_KINDS,
    HANDLERS,
    HOLDERS,
    LEAF_CONTEXTS,
    STEP_KINDS,
    GcKind,
    HeapProgram,
    StackProgram,
    Step,
    program_from_dict,
)
from conformance.fuzz_runtime.strategies import BETWEEN_KINDS, known_programs, programs
from conformance.suite.verdicts import AppliedExpectation, Status, Verdict, VerdictOutcome


def test_known_programs_visit_every_shape_of_the_grammar() -> None:
    """Known shapes first: one explicit program per shape, so a short run visits each one."""
    visited = set().union(*(p.shapes() for p in known_programs()))
    grammar = {f"step:{k}" for k in STEP_KINDS}
    grammar |= {f"leaf:{c}" for c in LEAF_CONTEXTS} | {f"handler:{h}" for h in HANDLERS}
    grammar |= {f"holder:{h}" for h in HOLDERS} | {f"warmup:{g.label}" for g in GC_KINDS}
    grammar |= {f"between:{g.label}" for g in (GcKind(), *BETWEEN_KINDS)}
    grammar |= {f"heap:{n}" for n in ("dead", "garbage", "pinned", "large", "young")}
    assert grammar <= visited, sorted(grammar - visited)


def test_a_known_recursion_has_hundreds_of_frames() -> None:
    depths = [s.depth for p in known_programs(["stack"]) for c in p.chains() for s in c]  # type: ignore[union-attr]
    assert max(depths) >= 200


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Step("recursion", 1), "recursion depth"),
        (lambda: Step("plain", 3), "depth 1"),
        (lambda: Step("nope"), "unknown step kind"),  # type: ignore[arg-type]
        (lambda: StackProgram(now_leaf="nowhere"), "unknown leaf context"),  # type: ignore[arg-type]
        (lambda: GcKind(1, compact_loh=True), "LOH compaction needs a gen 2 GC"),
        (lambda: HeapProgram(live=4, young=5), "young 5 outside"),
    ],
)
def test_the_grammar_refuses_programs_it_cannot_render(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


@settings(max_examples=60, deadline=None)
@given(programs())
def test_every_generated_program_renders_deterministically_and_round_trips(
    program: StackProgram | HeapProgram,
) -> None:
    first, again = render(program), render(program)
    assert (
        first.app_cs == again.app_cs and first.id == again.id
    )  # no clock, no random: the compile cache hits
    assert first.app_cs.startswith("// fuzz-runtime ")  # a scenario's app.cs starts with its description
    assert program_from_dict(program.to_dict()) == program


@settings(max_examples=40, deadline=None)
@given(programs(), programs())
def test_different_programs_are_different_files(
    a: StackProgram | HeapProgram, b: StackProgram | HeapProgram
) -> None:
    assert (render(a).id == render(b).id) == (a == b)


def test_a_stack_program_sends_the_marks_the_stack_walks_judges_read() -> None:
    text = render(StackProgram(now_chain=(Step("reverse"),), now_leaf="filter")).app_cs
    for mark in ("expect.throw", "walk-now", "walk-reverse"):
        assert f'"{mark}"' in text
    assert "profharness_call_back" in text and "when (Probe.Mark(" in text


def test_a_heap_program_follows_the_gc_moves_tag_rule() -> None:
    text = render(HeapProgram(live=10, dead_every=3, pinned_every=2, holder="list")).app_cs
    for mark in ("expect.objects", "ids.before", "ids.after"):
        assert f'"{mark}"' in text
    assert "Tagged.Create(i + 1)" in text and "Tagged.Create(-(deadMade + 1))" in text
    assert "GCHandleType.Pinned" in text


def test_shape_free_lines_forget_frame_positions_and_function_labels() -> None:
    a = "walk-now: GetFunctionFromIP(ip of frame #5, [unmanaged]) returned E_FAIL, expected FunctionID 0"
    b = "walk-now: GetFunctionFromIP(ip of frame #3, [unmanaged]) returned E_FAIL, expected FunctionID 0"
    assert shape_free(a) == shape_free(b)
    assert shape_free("now-default: DSS-16 at #2: StackWalks::Leaf") == shape_free(
        "now-default: DSS-16 at #7: P::Now0"
    )
    assert shape_free("now-default: DSS-16 at #2: x") != shape_free("now-default: DSS-03 at #2: x")
    counts = ("DSS-14: 15 callbacks, the model has 14", "DSS-14: 7 callbacks, the model has 6")
    assert shape_free(counts[0]) == shape_free(counts[1])
    assert "0x80131360" in shape_free("returned 0x80131360 CORPROF_E_STACKSNAPSHOT_UNSAFE")


def _verdict(lines: list[str], listed: list[str]) -> Verdict:
    return Verdict(
        clause="DSS-19",
        runtime="8.0.4",
        experiment="stack-walks",
        status=Status.DIVERGES,
        observed="o",
        expected="e",
        disagreements=lines,
        expectation=AppliedExpectation(status=(Status.DIVERGES,), why="w" * 12, disagreements=tuple(listed)),
        outcome=VerdictOutcome.UNEXPECTED,
    )


def test_a_listed_divergence_at_another_frame_is_known_but_a_new_line_is_not() -> None:
    listed = ["walk-now: GetFunctionFromIP(ip of frame #5, [unmanaged]) returned E_FAIL"]
    assert known_elsewhere(
        _verdict(["walk-now: GetFunctionFromIP(ip of frame #9, [unmanaged]) returned E_FAIL"], listed)
    )
    assert not known_elsewhere(_verdict([*listed, "walk-now: something new"], listed))


def test_a_finding_has_one_signature_per_disagreement_and_errors_forget_paths() -> None:
    f = RuntimeFinding(
        "p", "DSS-01", "8.0.4", "stack-walks", "diverges", "m", "o", "e", ("a at #1", "b at #2")
    )
    assert {s[3] for s in f.signatures()} == {"a at #N", "b at #N"}
    e1 = RuntimeFinding(
        "p", "DSS-01", "8.0.4", "x", "error", "m", "judge failed: /tmp/a/trace.jsonl: no mark", "e"
    )
    e2 = RuntimeFinding(
        "q", "DSS-01", "8.0.4", "x", "error", "m", "judge failed: /tmp/b/trace.jsonl: no mark", "e"
    )
    assert e1.signatures() == e2.signatures()


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0)])
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


def test_a_bad_duration_is_one_line() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        duration("soon")


@given(st.sampled_from(known_programs()))
def test_known_programs_are_small(program: StackProgram | HeapProgram) -> None:
    assert program.size() <= 2700  # the largest is the gc-moves sized heap (2000 live + 666 dead)
