"""Caller-allocated buffers (caller-allocated-buffers.md): BUF-01..05, BUF-09, BUF-10 on live runtimes.

The ``buffers-basic`` scenario throws from ``Trio<int, long, double>.Pick<byte, short, char, bool>``; at
ExceptionThrown the probe's ``buffer_probe`` experiment calls a dozen ICorProfilerInfo buffer methods at
the sizes (NULL, 0), 0, 1, needed-1, needed, needed+k with sentinel-filled buffers and guard elements
(``conformance/native/src/experiments_buffers.cpp``), one ``call`` record per size.

The judges are thin: for every (method, size) they turn the record into a
:class:`clr_model.buffers.ObservedCall` (hr, *pcBufferMax, elements changed, guard -> ``written_beyond``,
the buffer's elements with untouched ones as None) and hand it, with the model's inputs, to
:func:`clr_model.buffers.check_observed`, which predicts and names the clause of each disagreement. The
inputs are independent of the call being judged: the full answer comes from the scenario's
``expect.buffers`` mark where it knows it (module path, assembly name, type-argument ClassIDs; field count
for the total), otherwise from the runtime's own answers to other calls (the total from the (NULL, 0) call,
the content from the call at size ``needed``; a string's text up to its first NUL, the model adding the
NUL). Each clause gets one verdict per runtime over all methods and sizes; ``observed`` names the first
disagreement (method, size, what the model says).
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
    string_elements,
)
from clr_model.errors import ModelError
from clr_model.hresults import format_hresult, hresult_failed
from conformance.core.trace import CallRecord, Trace
from conformance.suite.registry import experiment, judge
from conformance.suite.verdicts import Evidence, Judge, Judgement, Status

__all__ = [
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
    extent: int
    guard_intact: bool
    hex: str | None
    wide: bool

    @property
    def label(self) -> str:
        buffer = "buffer" if self.present else "NULL"
        return f"{self.method} size={self.size} ({buffer})"

    def elements(self) -> list[int]:
        """The buffer's elements (0xCD pass), each read little-endian as an unsigned int."""
        raw = bytes.fromhex(self.hex or "")
        width = self.element_size
        if width <= 0:
            return []
        return [int.from_bytes(raw[i : i + width], "little") for i in range(0, len(raw) - width + 1, width)]

    def observed(self) -> ObservedCall:
        """The record as the model's observation. Elements at or past ``extent`` (the last changed one + 1)
        were unchanged in both sentinel passes: untouched (None). The guard only tells whether anything
        past the buffer changed: ``written_beyond`` 1 is a lower bound."""
        content: tuple[int | None, ...] | None = None
        if self.present and self.hex is not None:
            values = self.elements()[: self.size]
            content = tuple(v if i < self.extent else None for i, v in enumerate(values))
        return ObservedCall(
            c_buffer_size_start=self.size,
            buffer_present=self.present,
            hr=self.hr,
            pc_buffer_max=self.pc_max,
            elements_written=self.changed,
            written_beyond=0 if self.guard_intact or not self.present else 1,
            content=content,
        )


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

    @property
    def wide(self) -> bool:
        return any(c.wide for c in self.calls)


@dataclass(frozen=True)
class Disagreement:
    call: BufferCall
    what: str  # what the model says

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
        extent=int(out.get("extent", out.get("changed", 0))),
        guard_intact=bool(out.get("guardIntact", True)),
        hex=out.get("hex") if isinstance(out.get("hex"), str) else None,
        wide="text" in out,
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
    elements: dict[str, list[int]]  # method -> elements (ClassIDs)
    totals: dict[str, int]  # method -> element count (non-string methods)

    @staticmethod
    def empty() -> Truth:
        return Truth({}, {}, {})


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
    elements: dict[str, list[int]] = {}
    totals: dict[str, int] = {}
    if isinstance(data.get("modulePath"), str):
        texts["GetModuleInfo"] = texts["GetModuleInfo2"] = data["modulePath"]
    if isinstance(data.get("assemblyName"), str):
        texts["GetAssemblyInfo"] = data["assemblyName"]
    for key, method in (("classTypeArgs", "GetClassIDInfo2"), ("methodTypeArgs", "GetFunctionInfo2")):
        values = data.get(key)
        if isinstance(values, list) and all(isinstance(v, int) and v >= 0 for v in values):
            elements[method] = list(values)
    if isinstance(data.get("instanceFields"), int):
        totals["GetClassLayout"] = data["instanceFields"]
    return Truth(texts, elements, totals)


# --- the model's inputs for one method ---------------------------------------------------------------


@dataclass(frozen=True)
class ModelInputs:
    """What :func:`clr_model.buffers.check_observed` is given besides the observation."""

    available: int | None
    full_answer: tuple[int, ...] | None
    string: bool


def _reference_text(reference: BufferCall) -> str:
    """The string the full-answer call holds, up to its first NUL (all of it when it has none)."""
    units = reference.elements()
    end = units.index(0) if 0 in units else len(units)
    return b"".join(u.to_bytes(2, "little") for u in units[:end]).decode("utf-16-le", "surrogatepass")


def model_inputs(group: MethodCalls, truth: Truth) -> ModelInputs | None:
    """The model's inputs for ``group``, from the scenario's truth or the runtime's other answers; None when
    there are none (no total, or a string without any full answer)."""
    reference = group.reference
    if group.wide:
        text = truth.texts.get(group.method)
        if text is None and reference is not None and reference.hex is not None:
            text = _reference_text(reference)
        if text is None:
            return None
        return ModelInputs(None, string_elements(text), True)
    total = truth.totals.get(group.method)
    known = truth.elements.get(group.method)
    if known is not None:
        return ModelInputs(None, tuple(known), False)
    if reference is not None and not hresult_failed(reference.hr) and reference.hex is not None:
        content = tuple(reference.elements())
        if total is None or total == len(content):
            return ModelInputs(None, content, False)
    total = total if total is not None else group.needed
    return ModelInputs(total, None, False) if total is not None else None


def _fmt(hr: int) -> str:
    return format_hresult(hr)


# --- per-clause verdicts -----------------------------------------------------------------------------


def model_disagreements(call: BufferCall, inputs: ModelInputs | None, clause: str) -> list[str]:
    """The clause's disagreements with the model for one call (check_observed's messages)."""
    available = inputs.available if inputs is not None else None
    full = inputs.full_answer if inputs is not None else None
    string = inputs.string if inputs is not None else False
    violations = check_observed(call.observed(), available, full_answer=full, string=string)
    return [v.message for v in violations if v.clause == clause]


@dataclass(frozen=True)
class ClauseRule:
    clause: str
    expected: str


RULES: dict[str, ClauseRule] = {
    "BUF-01": ClauseRule("BUF-01", "nothing written beyond cBufferSizeStart elements (guard untouched)"),
    "BUF-02": ClauseRule("BUF-02", "*pcBufferMax = total available at every size"),
    "BUF-03": ClauseRule(
        "BUF-03",
        "min(total, size) elements written, the full answer's prefix "
        "(a truncated string: size-1 units + NUL)",
    ),
    "BUF-04": ClauseRule(
        "BUF-04",
        "(NULL, 0) accepted by every method; (NULL, n>0) is the caller's error (answer unconstrained)",
    ),
    "BUF-05": ClauseRule("BUF-05", "S_OK when the whole answer is returned"),
    "BUF-09": ClauseRule(
        "BUF-09",
        "model choice: S_OK and a truncated fill for 0 < size < total; strings count "
        "their NUL and stay NUL-terminated when cut",
    ),
    "BUF-10": ClauseRule(
        "BUF-10",
        "model choice: S_OK with *pcBufferMax = total when no element is returned (size 0, NULL or not)",
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
            if first is not None:  # what the model can say without a total
                disagreements.extend(
                    Disagreement(first, what) for what in model_disagreements(first, None, rule.clause)
                )
            continue
        try:
            inputs = model_inputs(group, truth)
        except ModelError as exc:
            unjudged.append(f"{group.method}: model: {exc}")
            continue
        if inputs is None:
            unjudged.append(f"{group.method}: no full answer to compare with")
            continue
        for call in group.calls:
            try:
                expected(inputs.available or 0, call.size, call.present)
            except CallerBrokeContract:
                continue  # the probe's deliberate caller error: BUF-04's business, judged there
            try:
                found = model_disagreements(call, inputs, rule.clause)
            except ModelError as exc:
                unjudged.append(f"{call.label}: model: {exc}")
                continue
            judged.append(call)
            disagreements.extend(Disagreement(call, what) for what in found)
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
    error (the model raises CallerBrokeContract), whose answer is reported but not judged. The model
    (check_observed) names an argument error for the legal form as a BUF-04 disagreement."""
    expected_line = RULES["BUF-04"].expected
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
            bad.extend(Disagreement(call, what) for what in model_disagreements(call, None, "BUF-04"))
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


BUFFERS_BASIC = experiment("buffers-basic", scenario=SCENARIO)
for _clause, _fn, _what in (
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
):
    judge(_clause, BUFFERS_BASIC, what=_what)(_fn)


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
