"""Caller-allocated buffers (caller-allocated-buffers.md): BUF-01..05, BUF-09, BUF-10 on live runtimes.

The ``buffers-basic`` scenario throws from ``Trio<int, long, double>.Pick<byte, short, char, bool>``; at
ExceptionThrown the probe's ``buffer_probe`` experiment calls a dozen ICorProfilerInfo buffer methods at
the sizes (NULL, 0), 0, 1, needed-1, needed, needed+k with sentinel-filled buffers and guard elements
(``conformance/native/src/experiments_buffers.cpp``), one ``call`` record per size.

For every (method, size) the judges ask :mod:`clr_model.buffers` what a conforming method does. The inputs
are independent of the call being judged: the total comes from the (NULL, 0) call (and, where the scenario
knows it, from its ``expect.buffers`` mark: module path, assembly name, type-argument ClassIDs, field
count), the content from the call at size ``needed`` (checked against the scenario's ground truth where it
has one). Each clause gets one verdict per runtime over all methods and sizes; ``observed`` names the first
disagreement (method, size, field, observed vs expected).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clr_model.buffers import (
    CallerBrokeContract,
    ObservedCall,
    check_observed,
    expected,
    expected_string,
    utf16_units,
)
from clr_model.errors import ModelError
from clr_model.hresults import HResult, format_hresult, hresult_failed
from conformance.trace import CallRecord, Trace
from conformance.verdicts import Evidence, Judge, Judgement, LiveExperiment, Status

__all__ = [
    "EXPERIMENTS",
    "BufferCall",
    "Disagreement",
    "MethodCalls",
    "collect",
    "judge_buf01",
    "judge_buf02",
    "judge_buf03",
    "judge_buf04",
    "judge_buf05",
    "judge_buf09",
    "judge_buf10",
]

SCENARIO = "buffers-basic"
TRUTH_MARK = "expect.buffers"
_S_OK = HResult.S_OK.value
_ARGUMENT_ERRORS = {HResult.E_INVALIDARG.value, HResult.E_POINTER.value}


@dataclass(frozen=True)
class BufferCall:
    """One buffer_probe ``call`` record."""

    seq: int
    method: str
    size: int
    present: bool
    hr: int
    pc_max: int | None
    element_size: int
    changed: int
    guard_intact: bool
    hex: str | None
    wide: bool
    nul_at: int | None

    @property
    def label(self) -> str:
        buffer = "buffer" if self.present else "NULL"
        return f"{self.method} size={self.size} ({buffer})"

    def elements(self, count: int) -> list[str]:
        """The first ``count`` elements of the buffer (0xCD pass) as hex strings."""
        width = 2 * self.element_size
        text = self.hex or ""
        return [
            text[i * width : (i + 1) * width] for i in range(min(count, len(text) // width if width else 0))
        ]


@dataclass
class MethodCalls:
    """Every call of one method, and what the judges compare them with."""

    method: str
    calls: list[BufferCall] = field(default_factory=list)

    @property
    def null_zero(self) -> BufferCall | None:
        return next((c for c in self.calls if not c.present and c.size == 0), None)

    @property
    def needed(self) -> int | None:
        first = self.null_zero
        return first.pc_max if first is not None else None

    @property
    def reference(self) -> BufferCall | None:
        """The full answer: the call with a buffer of exactly ``needed`` elements."""
        needed = self.needed
        if needed is None:
            return None
        return next((c for c in self.calls if c.present and c.size == needed), None)


@dataclass(frozen=True)
class Disagreement:
    call: BufferCall
    what: str  # field: observed vs expected

    def __str__(self) -> str:
        return f"{self.call.label}: {self.what}"


def _call_from_record(record: CallRecord) -> BufferCall | None:
    args, out = record.args, record.out
    if "cBufferSizeStart" not in args or "bufferPresent" not in args:
        return None
    pc = out.get("pcBufferMax")
    return BufferCall(
        seq=record.seq,
        method=record.name,
        size=int(args["cBufferSizeStart"]),
        present=bool(args["bufferPresent"]),
        hr=record.hr,
        pc_max=int(pc) if isinstance(pc, int) else None,
        element_size=int(args.get("elementSize", 1)),
        changed=int(out.get("changed", 0)),
        guard_intact=bool(out.get("guardIntact", True)),
        hex=out.get("hex") if isinstance(out.get("hex"), str) else None,
        wide="text" in out,
        nul_at=out.get("nulAt") if isinstance(out.get("nulAt"), int) else None,
    )


def collect(trace: Trace) -> list[MethodCalls]:
    """The buffer_probe calls of a trace, grouped by method in recording order."""
    groups: dict[str, MethodCalls] = {}
    for record in trace.calls():
        call = _call_from_record(record)
        if call is None:
            continue
        groups.setdefault(call.method, MethodCalls(call.method)).calls.append(call)
    return list(groups.values())


# --- ground truth from the scenario ------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """What the scenario itself knows (mark ``expect.buffers``); None where it knows nothing."""

    texts: dict[str, str]  # method -> the string the method should return
    elements: dict[str, list[str]]  # method -> element hex strings (ClassIDs)
    totals: dict[str, int]  # method -> element count

    @staticmethod
    def empty() -> Truth:
        return Truth({}, {}, {})


def _le_hex(value: int, width: int = 8) -> str:
    return bytes((value % 2 ** (8 * width)).to_bytes(width, "little")).hex()


def read_truth(trace: Trace) -> Truth:
    marks = trace.marks(TRUTH_MARK)
    if not marks or marks[0].payload is None:
        return Truth.empty()
    try:
        data = json.loads(marks[0].payload)
    except json.JSONDecodeError:
        return Truth.empty()
    if not isinstance(data, dict):
        return Truth.empty()
    texts: dict[str, str] = {}
    elements: dict[str, list[str]] = {}
    totals: dict[str, int] = {}
    if isinstance(data.get("modulePath"), str):
        texts["GetModuleInfo"] = texts["GetModuleInfo2"] = data["modulePath"]
    if isinstance(data.get("assemblyName"), str):
        texts["GetAssemblyInfo"] = data["assemblyName"]
    for key, method in (("classTypeArgs", "GetClassIDInfo2"), ("methodTypeArgs", "GetFunctionInfo2")):
        values = data.get(key)
        if isinstance(values, list) and all(isinstance(v, int) for v in values):
            elements[method] = [_le_hex(v) for v in values]
    if isinstance(data.get("instanceFields"), int):
        totals["GetClassLayout"] = data["instanceFields"]
    for method, text in texts.items():
        totals[method] = utf16_units(text) + 1
    for method, items in elements.items():
        totals[method] = len(items)
    return Truth(texts, elements, totals)


# --- the model's prediction for one call -------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    hresult: int
    pc_max: int
    written: int
    content: list[str]  # element hex strings the first `written` elements must hold
    truncated: bool


def _decode_text(call: BufferCall) -> str | None:
    if call.hex is None:
        return None
    # Up to the NUL; a full answer without one is taken whole (BUF-09 then reports the missing NUL).
    units = call.nul_at if call.nul_at is not None else call.size
    raw = bytes.fromhex(call.hex[: 4 * units])
    return raw.decode("utf-16-le", "surrogatepass")


def _units_hex(text: str) -> list[str]:
    raw = text.encode("utf-16-le", "surrogatepass")
    return [raw[i : i + 2].hex() for i in range(0, len(raw), 2)]


def predict(group: MethodCalls, call: BufferCall, truth: Truth) -> Prediction | None:
    """The model's answer for ``call``; None when the inputs are missing (no total, no full answer).

    Raises CallerBrokeContract for a NULL buffer with a non-zero size (BUF-04).
    """
    needed = group.needed
    reference = group.reference
    if needed is None:
        return None
    if call.wide:
        text = truth.texts.get(group.method)
        if text is None and reference is not None:
            text = _decode_text(reference)
        if text is None:
            return None
        s = expected_string(text, call.size, call.present)
        shown = _units_hex(s.text)
        content = [*shown, "0000"][: s.elements_written] if s.elements_written else []
        return Prediction(s.hresult, needed, s.elements_written, content, s.truncated)
    if reference is None or hresult_failed(reference.hr):
        outcome = expected(needed, call.size, call.present)
        return Prediction(
            outcome.hresult,
            outcome.pc_buffer_max,
            outcome.elements_written,
            [],
            outcome.elements_written < outcome.pc_buffer_max,
        )
    data = reference.elements(needed)
    outcome_e = expected(data, call.size, call.present)
    return Prediction(
        outcome_e.hresult,
        outcome_e.pc_buffer_max,
        outcome_e.elements_written,
        list(outcome_e.elements or ()),
        outcome_e.elements_written < outcome_e.pc_buffer_max,
    )


def _fmt(hr: int) -> str:
    return format_hresult(hr)


# --- per-clause checks -------------------------------------------------------------------------------

Check = Callable[[MethodCalls, BufferCall, Prediction, Truth], list[str]]


def _model_violations(group: MethodCalls, call: BufferCall, clause: str) -> list[str]:
    """The clause's violations according to clr_model.buffers.check_observed."""
    observed = ObservedCall(
        c_buffer_size_start=call.size,
        buffer_present=call.present,
        hr=call.hr,
        pc_buffer_max=call.pc_max,
        elements_written=call.changed,
    )
    return [v.message for v in check_observed(observed, group.needed) if v.clause == clause]


def _check_01(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    problems = _model_violations(group, call, "BUF-01")
    if call.present and not call.guard_intact:
        problems.append(
            f"wrote past element {call.size} (guard changed), expected nothing beyond "
            f"cBufferSizeStart={call.size}"
        )
    return problems


def _check_02(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    problems: list[str] = []
    if call.pc_max != p.pc_max:
        problems.append(f"*pcBufferMax={call.pc_max}, expected the total {p.pc_max}")
    total = truth.totals.get(group.method)
    if call is group.null_zero and total is not None and call.pc_max != total:
        problems.append(f"*pcBufferMax={call.pc_max}, expected {total} (the scenario's own count)")
    return problems


def _check_03(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    if call.hr in _ARGUMENT_ERRORS:
        return [f"rejected with {_fmt(call.hr)}, expected {p.written} elements"]
    problems: list[str] = []
    if call.changed != p.written:
        problems.append(f"{call.changed} elements written, expected min(total, size) = {p.written}")
    got = call.elements(p.written)
    if p.content and got != p.content:
        first = next((i for i, (a, b) in enumerate(zip(got, p.content, strict=False)) if a != b), len(got))
        seen = got[first] if first < len(got) else "(missing)"
        problems.append(f"element {first} = {seen}, expected {p.content[first]} (full answer's prefix)")
    if call is group.reference:
        want = truth.elements.get(group.method)
        if want is not None and got != want:
            problems.append(f"full answer {got}, expected the scenario's ClassIDs {want}")
    return problems


def _check_05(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    if p.written == 0 or p.truncated:
        return []  # BUF-05 speaks of a complete answer; BUF-09 / BUF-10 decide the rest
    return [f"returned {_fmt(call.hr)}, expected {_fmt(p.hresult)}"] if call.hr != p.hresult else []


def _check_09(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    problems: list[str] = []
    if call is group.reference and call.wide and group.needed is not None:
        # The string question: does the count include the terminating NUL?
        if call.nul_at != group.needed - 1:
            problems.append(
                f"NUL at {call.nul_at} in the full answer, expected at {group.needed - 1} "
                f"(the count includes the NUL)"
            )
    if not (p.written > 0 and p.truncated):
        return problems
    if call.hr != p.hresult:
        problems.append(f"returned {_fmt(call.hr)} for a too-small buffer, expected {_fmt(p.hresult)}")
    if call.wide and call.nul_at != p.written - 1:
        problems.append(f"truncated string NUL at {call.nul_at}, expected at {p.written - 1}")
    return problems


def _check_10(group: MethodCalls, call: BufferCall, p: Prediction, truth: Truth) -> list[str]:
    if p.written != 0:
        return []
    return (
        [f"returned {_fmt(call.hr)} with no element returned, expected {_fmt(p.hresult)}"]
        if call.hr != p.hresult
        else []
    )


@dataclass(frozen=True)
class ClauseRule:
    clause: str
    expected: str
    check: Check


RULES: dict[str, ClauseRule] = {
    "BUF-01": ClauseRule(
        "BUF-01", "nothing written beyond cBufferSizeStart elements (guard untouched)", _check_01
    ),
    "BUF-02": ClauseRule("BUF-02", "*pcBufferMax = total available at every size", _check_02),
    "BUF-03": ClauseRule(
        "BUF-03",
        "min(total, size) elements written, byte for byte the full answer's prefix "
        "(a truncated string: size-1 units + NUL)",
        _check_03,
    ),
    "BUF-05": ClauseRule("BUF-05", "S_OK when the whole answer is returned", _check_05),
    "BUF-09": ClauseRule(
        "BUF-09",
        "model choice: S_OK and a truncated fill for 0 < size < total; strings count "
        "their NUL and stay NUL-terminated when cut",
        _check_09,
    ),
    "BUF-10": ClauseRule(
        "BUF-10",
        "model choice: S_OK with *pcBufferMax = total when no element is returned (size 0, NULL or not)",
        _check_10,
    ),
}


def _judge_clause(trace: Trace, rule: ClauseRule) -> Judgement:
    groups = collect(trace)
    truth = read_truth(trace)
    if not groups:
        return Judgement(
            status=Status.NOT_APPLICABLE, observed="no buffer_probe call in the trace", expected=rule.expected
        )
    disagreements: list[Disagreement] = []
    judged: list[BufferCall] = []
    unjudged: list[str] = []
    for group in groups:
        if group.needed is None:
            first = group.null_zero
            why = (
                f"(NULL, 0) call returned {_fmt(first.hr)} without *pcBufferMax"
                if first
                else "no (NULL, 0) call"
            )
            unjudged.append(f"{group.method}: {why}")
            if first is not None and rule.clause in ("BUF-02", "BUF-10"):
                disagreements.append(Disagreement(first, f"{why}; expected S_OK and the total"))
            continue
        for call in group.calls:
            try:
                prediction = predict(group, call, truth)
            except CallerBrokeContract:
                continue  # BUF-04's business
            except ModelError as exc:
                unjudged.append(f"{call.label}: model: {exc}")
                continue
            if prediction is None:
                unjudged.append(f"{call.label}: no full answer to compare with")
                continue
            judged.append(call)
            disagreements.extend(
                Disagreement(call, what) for what in rule.check(group, call, prediction, truth)
            )
    methods = sorted({c.method for c in judged})
    scope = f"{len(judged)} calls of {len(methods)} methods"
    if disagreements:
        bad_methods = sorted({d.call.method for d in disagreements})
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{disagreements[0]} ({len(disagreements)} disagreements in {len(bad_methods)} methods: "
            f"{', '.join(bad_methods)}; {scope})",
            expected=rule.expected,
            evidence=tuple(sorted({d.call.seq for d in disagreements}))[:40],
        )
    if not judged:
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"nothing to judge: {'; '.join(unjudged)[:300]}",
            expected=rule.expected,
        )
    note = f"; not judged: {'; '.join(unjudged)}" if unjudged else ""
    return Judgement(
        status=Status.CONFORMS,
        observed=f"as the model predicts for {scope} ({', '.join(methods)}){note}",
        expected=rule.expected,
        evidence=tuple(c.seq for c in judged)[:40],
    )


def judge_buf01(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-01"])


def judge_buf02(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-02"])


def judge_buf03(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-03"])


def judge_buf05(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-05"])


def judge_buf09(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-09"])


def judge_buf10(ev: Evidence) -> Judgement:
    return _judge_clause(ev.trace, RULES["BUF-10"])


def judge_buf04(ev: Evidence) -> Judgement:
    """BUF-04 puts the NULL rule on the caller: a NULL buffer with size 0 is the legal form, which the
    runtime must accept (not reject as an argument error); a NULL buffer with a non-zero size is a caller
    error (the model raises CallerBrokeContract), whose answer is reported but not judged."""
    expected_line = (
        "(NULL, 0) accepted by every method; (NULL, n>0) is the caller's error (answer unconstrained)"
    )
    groups = collect(ev.trace)
    legal: list[BufferCall] = []
    broken: list[BufferCall] = []
    bad: list[Disagreement] = []
    for group in groups:
        for call in group.calls:
            if call.present:
                continue
            try:
                expected(group.needed or 0, call.size, call.present)
            except CallerBrokeContract:
                broken.append(call)
                continue
            legal.append(call)
            if call.hr in _ARGUMENT_ERRORS:
                bad.append(
                    Disagreement(
                        call, f"rejected with {_fmt(call.hr)}, expected the legal NULL form to be accepted"
                    )
                )
    answers = ", ".join(f"{c.method} {_fmt(c.hr)}" for c in broken)
    tail = f"; caller-error calls (NULL, n>0) answered: {answers}" if broken else ""
    if bad:
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{bad[0]} ({len(bad)} of {len(legal)}){tail}",
            expected=expected_line,
            evidence=tuple(d.call.seq for d in bad),
        )
    if not legal:
        return Judgement(
            status=Status.NOT_APPLICABLE, observed="no (NULL, 0) call in the trace", expected=expected_line
        )
    return Judgement(
        status=Status.CONFORMS,
        observed=f"(NULL, 0) accepted by {len(legal)} methods{tail}",
        expected=expected_line,
        evidence=tuple(c.seq for c in legal + broken),
    )


def _judges(pairs: Sequence[tuple[str, Callable[[Evidence], Judgement], str]]) -> tuple[Judge, ...]:
    return tuple(Judge(clause=c, judge=f, what=w) for c, f, w in pairs)


EXPERIMENTS: tuple[LiveExperiment, ...] = (
    LiveExperiment(
        id="buffers-basic",
        scenario=SCENARIO,
        judges=_judges(
            (
                ("BUF-01", judge_buf01, "no buffer method writes beyond cBufferSizeStart (guard elements)"),
                ("BUF-02", judge_buf02, "*pcBufferMax is the total at every size"),
                (
                    "BUF-03",
                    judge_buf03,
                    "min(total, size) elements written, equal to the full answer's prefix",
                ),
                ("BUF-04", judge_buf04, "a NULL buffer with size 0 is accepted"),
                ("BUF-05", judge_buf05, "S_OK when the whole answer fits"),
                (
                    "BUF-09",
                    judge_buf09,
                    "too-small buffer: S_OK + truncated, NUL-terminated fill (model choice)",
                ),
                ("BUF-10", judge_buf10, "no element returned: S_OK + total (model choice)"),
            )
        ),
    ),
)


def summary(trace: Trace) -> list[dict[str, Any]]:
    """Per method: needed and each call's (size, present, hr, *pcBufferMax, changed, guard) - for reports."""
    return [
        {
            "method": g.method,
            "needed": g.needed,
            "calls": [
                {
                    "size": c.size,
                    "present": c.present,
                    "hr": _fmt(c.hr),
                    "pcBufferMax": c.pc_max,
                    "changed": c.changed,
                    "guardIntact": c.guard_intact,
                }
                for c in g.calls
            ],
        }
        for g in collect(trace)
    ]
