"""Caller-allocated buffers (caller-allocated-buffers.md): BUF-01..05, BUF-09, BUF-10 on live runtimes.

The ``buffers-basic`` scenario throws from ``Trio<int, long, double>.Pick<byte, short, char, bool>``; at
ExceptionThrown the probe's ``buffer_probe`` experiment calls a dozen ICorProfilerInfo buffer methods at
the sizes (NULL, 0), 0, 1, needed-1, needed, needed+k with sentinel-filled buffers and guard elements
(``conformance/native/src/experiments_buffers.cpp``), one ``call`` record per size. The plan
(``Evidence.plan``) says which methods were asked for (its ``buf-*`` entries); each must be recorded.

Each method is judged on two layers, and every fact once:

* **the protocol**: for every (method, size) the record becomes a :class:`clr_model.buffers.ObservedCall`
  and :func:`clr_model.buffers.check_observed` compares it with the model given the method's full answer,
  which names the clause of each disagreement (a wrong count BUF-02, a short fill BUF-03, an HRESULT BUF-05
  / BUF-09 / BUF-10, a write past the buffer BUF-01). The full answer is the runtime's own, from the call
  at size ``needed`` (a string up to its first NUL, the model adding the NUL), so a runtime that answers
  the same way at every size is consistent; without it the scenario's truth, else the (NULL, 0) total.
* **the truth** (table :data:`SOURCES`): where the scenario knows the answer (mark ``expect.buffers``: the
  module path, the assembly name, AppDomain.CurrentDomain.FriendlyName, Environment.Version, the type
  arguments' RuntimeTypeHandles, each field's token and offset, how many app domains hold the assembly),
  the runtime's full answer is compared with it: a different total is a BUF-02 disagreement, different
  contents a BUF-03 one. Where no scenario can know the answer (:data:`SELF_CONSISTENCY_ONLY`: native code
  addresses and sizes, IL-to-native maps, AppDomainIDs) the verdict says "self-consistency only".

``Judgement.disagreements`` lists every disagreement, one stable line each: the protocol's in recording
order ("GetModuleInfo size=0 (buffer): wrote past element 0"), then the truth's ("GetAppDomainInfo: answers
'clrhost', the scenario's AppDomain.CurrentDomain.FriendlyName is 'app'"). Nothing that varies between
machines or runs appears: for a method whose answer is a path, sizes and counts are written relative to
``needed`` and the total; element values of IDs, addresses and paths are left out. ``observed`` is a
one-line summary naming the first disagreement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from clr_model.buffers import (
    BufferViolation,
    CallerBrokeContract,
    ObservedCall,
    check_observed,
    expected,
    string_elements,
)
from clr_model.errors import ModelError
from clr_model.hresults import format_hresult, hresult_failed
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, ProbeErrorRecord, Trace
from conformance.suite.registry import JudgeFn, experiment, judge
from conformance.suite.verdicts import Evidence, Judgement, Status

__all__ = [
    "BUFFERS_BASIC",
    "SELF_CONSISTENCY_ONLY",
    "SOURCES",
    "BufferCall",
    "Disagreement",
    "MethodCalls",
    "Truth",
    "collect",
    "judge_buf01",
    "judge_buf02",
    "judge_buf03",
    "judge_buf04",
    "judge_buf05",
    "judge_buf09",
    "judge_buf10",
    "read_truth",
]

SCENARIO = "buffers-basic"
TRUTH_MARK = "expect.buffers"
#: the plan's experiment that runs one method's buffer calls
PROBE_RUN = "buffer_probe"

BUFFERS_BASIC = experiment("buffers-basic", scenario=SCENARIO)

#: the plan entries every BUF judge reads: one buffer_probe entry per method (the scenario's plan.json)
PLAN_ENTRIES: tuple[str, ...] = tuple(
    f"buf-{m}"
    for m in (
        "GetModuleInfo",
        "GetModuleInfo2",
        "GetAssemblyInfo",
        "GetAppDomainInfo",
        "GetRuntimeInformation",
        "GetClassIDInfo2",
        "GetFunctionInfo2",
        "GetCodeInfo2",
        "GetILToNativeMapping",
        "GetNativeCodeStartAddresses",
        "GetAppDomainsContainingModule",
        "GetClassLayout",
    )
)


# --- the recorded calls --------------------------------------------------------------------------------


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


# --- the scenario's ground truth ----------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where the scenario's truth for one method comes from (a key of the ``expect.buffers`` payload)."""

    key: str
    #: how the scenario knows it, for verdict lines
    what: str
    kind: Literal["text", "elements", "count", "fields"]
    #: the values vary between machines or runs (a path, IDs): left out of disagreement lines
    values_vary: bool = False
    #: the length varies between machines (a path): counts and sizes written relative to the total
    length_varies: bool = False


#: the scenario's truth, per method (one table: what the scenario reports and how it knows it)
SOURCES: dict[str, Source] = {
    "GetModuleInfo": Source("modulePath", "Assembly.Location", "text", values_vary=True, length_varies=True),
    "GetModuleInfo2": Source("modulePath", "Assembly.Location", "text", values_vary=True, length_varies=True),
    "GetAssemblyInfo": Source("assemblyName", "Assembly.GetName().Name", "text"),
    "GetAppDomainInfo": Source("appDomainName", "AppDomain.CurrentDomain.FriendlyName", "text"),
    "GetRuntimeInformation": Source("runtimeVersion", "Environment.Version", "text"),
    "GetClassIDInfo2": Source("classTypeArgs", "class type arguments (RuntimeTypeHandle)", "elements",
                              values_vary=True),
    "GetFunctionInfo2": Source("methodTypeArgs", "method type arguments (RuntimeTypeHandle)", "elements",
                               values_vary=True),
    "GetClassLayout": Source("fields", "instance fields (FieldInfo.MetadataToken, offset)", "fields"),
    "GetAppDomainsContainingModule": Source("appDomainsHoldingModule", "app domains holding the assembly",
                                            "count", values_vary=True),
}

#: what no scenario can know, per method: judged only against the runtime's own other answers
SELF_CONSISTENCY_ONLY: dict[str, str] = {
    "GetCodeInfo2": "code regions",
    "GetILToNativeMapping": "IL-to-native map",
    "GetNativeCodeStartAddresses": "native code addresses",
    "GetAppDomainsContainingModule": "AppDomainIDs; their number is the scenario's",
}

#: GetRuntimeInformation's version string is Environment.Version from .NET 5 on; earlier runtimes answer the
#: CLR 4 compatibility version (3.1: "v4.0.30319"), which no managed API of theirs reports
FIRST_MAJOR_WITH_REAL_VERSION = 5


@dataclass(frozen=True)
class Known:
    """The scenario's answer for one method: the full answer (a string with its NUL) and/or the total."""

    source: Source
    full: tuple[int, ...] | None
    total: int | None
    text: str | None = None
    #: compare as a set (the contract gives no order: GetClassLayout's fields)
    unordered: bool = False


@dataclass(frozen=True)
class Truth:
    """What the scenario knows, per method, and why some of what it reports cannot be compared."""

    known: dict[str, Known]
    not_comparable: dict[str, str]

    @staticmethod
    def empty() -> Truth:
        return Truth({}, {})


def _ints(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise HarnessError(f"{where}: expected a list of non-negative integers, got {value!r}")
    return list(value)


def _field_elements(value: Any, where: str) -> tuple[int, ...]:
    """Each field as a COR_FIELD_OFFSET element read little-endian: ridOfField | ulOffset << 32."""
    if not isinstance(value, list):
        raise HarnessError(f"{where}: expected a list of {{token, offset}}, got {value!r}")
    out = []
    for i, f in enumerate(value):
        token, offset = (f.get("token"), f.get("offset")) if isinstance(f, dict) else (None, None)
        if not (isinstance(token, int) and isinstance(offset, int)) or not (0 <= token < 2**32 > offset >= 0):
            raise HarnessError(f"{where}[{i}]: expected {{token, offset}} as unsigned 32-bit ints, got {f!r}")
        out.append(token | offset << 32)
    return tuple(out)


def read_truth(trace: Trace) -> Truth:
    """The scenario's ground truth (mark ``expect.buffers``); a missing or malformed mark is a HarnessError
    naming it. A key the payload lacks leaves its methods to self-consistency (the verdict says so)."""
    marks = trace.marks(TRUTH_MARK)
    if len(marks) != 1:
        raise HarnessError(f"{trace.path}: expected one mark {TRUTH_MARK!r} (the scenario's ground truth), "
                           f"found {len(marks)}")
    where = f"mark {TRUTH_MARK!r} (seq {marks[0].seq})"
    try:
        data = json.loads(marks[0].payload or "")
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{where}: payload is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise HarnessError(f"{where}: payload must be a JSON object")
    known: dict[str, Known] = {}
    not_comparable: dict[str, str] = {}
    for method, source in SOURCES.items():
        value = data.get(source.key)
        at = f"{where}: {source.key}"
        if value is None:
            continue
        if source.kind == "text":
            if not isinstance(value, str):
                raise HarnessError(f"{at}: expected a string, got {value!r}")
            known[method] = Known(source, string_elements(value), None, text=value)
        elif source.kind == "elements":
            full = tuple(_ints(value, at))
            known[method] = Known(source, full, len(full))
        elif source.kind == "fields":
            full = _field_elements(value, at)
            known[method] = Known(source, full, len(full), unordered=True)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            known[method] = Known(source, None, value)
        elif value == -1:
            not_comparable[method] = f"the scenario cannot tell {source.what}"
        else:
            raise HarnessError(f"{at}: expected a count (or -1: unknown), got {value!r}")
    version = known.get("GetRuntimeInformation")
    if version is not None and version.text is not None:
        major = version.text.split(".")[0]
        if not major.isdigit():
            raise HarnessError(f"{where}: runtimeVersion {version.text!r} is not a version")
        if int(major) < FIRST_MAJOR_WITH_REAL_VERSION:
            del known["GetRuntimeInformation"]
            not_comparable["GetRuntimeInformation"] = (
                f"before .NET {FIRST_MAJOR_WITH_REAL_VERSION} the CLR 4 compatibility version, not "
                f"Environment.Version {version.text}"
            )
    return Truth(known, not_comparable)


# --- one method: the model's inputs and the truth's disagreements -------------------------------------


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


def own_answer(group: MethodCalls) -> tuple[int, ...] | None:
    """The runtime's own full answer: what the call at size ``needed`` wrote (a string up to its first NUL,
    plus the NUL; other elements up to the last one written, never the sentinels after it); None without a
    successful one. What a runtime writes into a buffer that holds everything is its answer, and the count
    it gives is measured against that: a count above it is BUF-02's (``*pcBufferMax`` is not the total),
    not BUF-03's (the buffer holds as many elements as there are)."""
    reference = group.reference
    if reference is None or reference.hex is None or hresult_failed(reference.hr):
        return None
    if group.wide:
        return string_elements(_reference_text(reference))
    return tuple(reference.elements()[: reference.extent])


@dataclass
class Assessment:
    """How one method is judged: the model's inputs, what the truth says, and on what basis."""

    method: str
    inputs: ModelInputs | None
    #: (clause, line): disagreements of the runtime's full answer with the scenario's truth
    truth_lines: list[tuple[str, str]] = field(default_factory=list)
    #: why the answer is judged for self-consistency only (None: against the scenario's truth)
    self_only: str | None = None
    unjudged: str | None = None


def _text_of(full: Sequence[int]) -> str:
    units = [u for u in full[:-1]] if full and full[-1] == 0 else list(full)
    return b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", "replace")


def _truth_lines(method: str, own: tuple[int, ...], known: Known, string: bool) -> list[tuple[str, str]]:
    source = known.source
    lines: list[tuple[str, str]] = []
    whose = f"the scenario's {source.what}"
    total = known.total if known.full is None else len(known.full)
    if total is not None and len(own) != total:
        if source.length_varies:
            lines.append(("BUF-02", f"{method}: the total differs from {whose}"))
        else:
            lines.append(("BUF-02", f"{method}: the total is {len(own)}, {whose} gives {total}"))
    if known.full is None:
        return lines
    same = sorted(own) == sorted(known.full) if known.unordered else own == known.full
    if not same:
        if string and not source.values_vary:
            lines.append(("BUF-03", f"{method}: answers {_text_of(own)!r}, {whose} is {known.text!r}"))
        elif string:
            lines.append(("BUF-03", f"{method}: answers another string than {whose}"))
        elif known.unordered:
            lines.append(("BUF-03", f"{method}: the elements are not {whose}"))
        else:
            first = next((i for i, (a, b) in enumerate(zip(own, known.full, strict=False)) if a != b), None)
            at = f"element {first}" if first is not None else "the elements"
            lines.append(("BUF-03", f"{method}: {at} differs from {whose}"))
    return lines


def assess(group: MethodCalls, truth: Truth) -> Assessment:
    """The model's inputs for ``group`` and the truth's disagreements (see the module docstring)."""
    method = group.method
    string = group.wide
    out = Assessment(method, None)
    known = truth.known.get(method)
    if known is None:
        out.self_only = truth.not_comparable.get(method) or SELF_CONSISTENCY_ONLY.get(method) or (
            f"the scenario reported no {SOURCES[method].key}" if method in SOURCES else "no independent truth"
        )
    elif method in SELF_CONSISTENCY_ONLY:
        out.self_only = SELF_CONSISTENCY_ONLY[method]
    try:
        own = own_answer(group)
    except ModelError as exc:
        out.unjudged = f"the runtime's full answer is not a string ({exc})"
        return out
    if own is not None:
        out.inputs = ModelInputs(None, own, string)
        if known is not None:
            out.truth_lines = _truth_lines(method, own, known, string)
    elif known is not None and known.full is not None:
        out.inputs = ModelInputs(None, known.full, string)
    elif known is not None and known.total is not None:
        out.inputs = ModelInputs(known.total, None, string)
    elif group.needed is not None and not string:
        out.inputs = ModelInputs(group.needed, None, string)
    if out.inputs is None:
        first = group.null_zero
        out.unjudged = (
            "no (NULL, 0) call" if first is None
            else f"(NULL, 0) returned {format_hresult(first.hr)} without *pcBufferMax" if group.needed is None
            else "no full answer to compare with"
        )
    return out


# --- stable disagreement lines ------------------------------------------------------------------------


def _relative(value: int, base: int | None, name: str) -> str:
    """``value`` as written in a stable line for a length that varies between machines: 0 and 1 as they are,
    others relative to ``base`` (``needed-1``, ``total``)."""
    if base is None or value in (0, 1):
        return str(value)
    return name if value == base else f"{name}{value - base:+d}"


def stable_line(group: MethodCalls, call: BufferCall, violation: Any, total: int | None) -> str:
    """One disagreement as a line that is the same on every machine and run (see the module docstring)."""
    source = SOURCES.get(group.method)
    length_varies = source is not None and source.length_varies
    values_vary = source is None or source.values_vary
    needed = group.needed

    def count(value: int | None, base: int | None = total, name: str = "total") -> str:
        if value is None:
            return "unset"
        return _relative(value, base, name) if length_varies else str(value)

    buffer = "buffer" if call.present else "NULL"
    label = f"{group.method} size={count(call.size, needed, 'needed')} ({buffer})"
    if not isinstance(violation, BufferViolation):
        return f"{label}: {violation.message}"
    v = violation
    fmt = format_hresult
    what: str
    if v.field == "beyond":
        what = f"wrote past element {count(call.size, needed, 'needed')}"
    elif v.field == "overfill":
        what = f"{count(v.got)} elements written into a buffer of {count(v.want)}"
    elif v.field == "null-sized":
        what = "InfoBuffer is NULL but cBufferSizeStart is not 0"
    elif v.field == "rejected":
        what = f"the legal (NULL, 0) form rejected with {fmt(v.got or 0)}"
    elif v.field == "unset":
        what = "*pcBufferMax was not set"
    elif v.field == "count":
        what = f"*pcBufferMax={count(v.got)}, expected the total {count(v.want)}"
    elif v.field == "count-without-nul":
        what = f"*pcBufferMax={count(v.got)} leaves out the NUL terminator, expected {count(v.want)}"
    elif v.field == "written":
        what = f"{count(v.got)} elements written, expected min(total, size) = {count(v.want)}"
    elif v.field == "element":
        at = "an element" if length_varies else f"element {v.element}"
        values = "" if values_vary else f" ({_value(v.got)}, expected {_value(v.want)})"
        what = f"{at} differs from the full answer's prefix{values}"
    elif v.field == "unterminated":
        what = "the string is not NUL-terminated in its last written element"
    else:  # hresult
        suffix = v.message.split(" expected ")[0].removeprefix(f"returned {fmt(v.got or 0)}")
        what = f"returned {fmt(v.got or 0)}{suffix.rstrip(',')}, expected {fmt(v.want or 0)}"
    return f"{label}: {what}"


def _value(value: int | None) -> str:
    return "untouched" if value is None else f"{value:#x}"


# --- per-clause verdicts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Disagreement:
    call: BufferCall
    what: str  # what the model says (its message, with this run's values)
    line: str  # the stable line an expectation pins

    def __str__(self) -> str:
        return f"{self.call.label}: {self.what}"


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


#: clauses the model judges without the total (a write past the buffer, the (NULL, 0) form, an HRESULT when
#: nothing is returned): a method without a total is still judged for them
TOTAL_FREE = frozenset({"BUF-01", "BUF-04", "BUF-10"})


def planned_methods(plan: Mapping[str, Any]) -> dict[str, str]:
    """method -> plan entry id, for every buffer_probe entry of the plan the harness wrote."""
    out: dict[str, str] = {}
    for entry in plan.get("experiments", []):
        if isinstance(entry, dict) and entry.get("run") == PROBE_RUN:
            args = entry.get("args", {})
            method = args.get("method") if isinstance(args, dict) else None
            if not isinstance(method, str):
                raise HarnessError(f"plan entry {entry.get('id')!r}: buffer_probe without args.method")
            out[method] = str(entry.get("id"))
    return out


def _frames(plan: Mapping[str, Any]) -> list[str]:
    frames = {
        str(e.get("args", {}).get("frame", "Pick"))
        for e in plan.get("experiments", [])
        if isinstance(e, dict) and e.get("run") == PROBE_RUN
    }
    return sorted(frames)


def _not_run(ev: Evidence, groups: list[MethodCalls], expected_line: str) -> Judgement | None:
    """Nothing recorded (n/a, with why) or a planned method missing (error): never a conformance."""
    planned = planned_methods(ev.plan)
    if not planned:
        raise HarnessError("the plan has no buffer_probe entry: nothing asks the probe for buffer calls")
    errors = [r.what for r in ev.trace.of_kind(ProbeErrorRecord) if r.what.startswith(PROBE_RUN)]
    probe = f"; probe errors: {'; '.join(errors[:3])}" if errors else ""
    if not groups:
        frames = ", ".join(repr(f) for f in _frames(ev.plan))
        return Judgement(
            status=Status.NOT_APPLICABLE,
            observed=f"no buffer_probe call recorded for any of the {len(planned)} planned methods: the "
            f"frame {frames} the plan names was never on the stack at ExceptionThrown{probe}",
            expected=expected_line,
        )
    missing = sorted(set(planned) - {g.method for g in groups})
    if missing:
        return Judgement(
            status=Status.ERROR,
            observed="planned but never recorded: "
            + ", ".join(f"{m} ({planned[m]})" for m in missing)
            + probe,
            expected=expected_line,
        )
    return None


def _basis(assessments: Sequence[Assessment]) -> str:
    truth = [a.method for a in assessments if a.self_only is None and a.unjudged is None]
    selfish = [f"{a.method} ({a.self_only})" for a in assessments if a.self_only is not None]
    parts = []
    if truth:
        parts.append(f"{len(truth)} methods against the scenario's truth")
    if selfish:
        parts.append(f"self-consistency only: {'; '.join(selfish)}")
    return "; ".join(parts)


def _judge_clause(ev: Evidence, rule: ClauseRule) -> Judgement:
    groups = collect(ev.trace)
    if (na := _not_run(ev, groups, rule.expected)) is not None:
        return na
    truth = read_truth(ev.trace)
    expected_line = (
        f"{rule.expected}; totals and contents from the scenario's truth where it knows them, else the "
        "runtime's own (self-consistency only)"
    )
    found: list[Disagreement] = []
    truth_lines: list[str] = []
    unjudged: list[str] = []
    judged: list[BufferCall] = []
    assessments = [assess(g, truth) for g in groups]
    for group, a in zip(groups, assessments, strict=True):
        inputs = a.inputs
        total = None
        if inputs is not None:
            total = len(inputs.full_answer) if inputs.full_answer is not None else inputs.available
        for call in group.calls:
            try:
                expected(total or 0, call.size, call.present)
            except CallerBrokeContract:
                continue  # the probe's deliberate caller error: BUF-04's business, judged there
            try:
                violations = check_observed(
                    call.observed(),
                    inputs.available if inputs is not None else None,
                    full_answer=inputs.full_answer if inputs is not None else None,
                    string=inputs.string if inputs is not None else False,
                )
            except ModelError as exc:
                unjudged.append(f"{group.method} size={call.size}: model: {exc}")
                continue
            judged.append(call)
            found += [
                Disagreement(call, v.message, stable_line(group, call, v, total))
                for v in violations
                if v.clause == rule.clause
            ]
        if a.unjudged is not None and rule.clause not in TOTAL_FREE:
            unjudged.append(f"{group.method}: {a.unjudged}")
        truth_lines += [line for clause, line in a.truth_lines if clause == rule.clause]
    methods = sorted({c.method for c in judged})
    scope = f"{len(judged)} calls of {len(methods)} methods"
    basis = _basis(assessments)
    lines = [d.line for d in found] + truth_lines + [f"{u}: cannot be judged" for u in unjudged]
    if lines:
        bad_methods = sorted({d.call.method for d in found} | {t.split(":")[0] for t in truth_lines})
        first = str(found[0]) if found else lines[0]
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{first} ({len(lines)} disagreements in {len(bad_methods)} methods: "
            f"{', '.join(bad_methods)}; {scope}; {basis})",
            expected=expected_line,
            evidence=tuple(sorted({d.call.seq for d in found}))[:40],
            disagreements=tuple(dict.fromkeys(lines)),
        )
    return Judgement(
        status=Status.CONFORMS,
        observed=f"as the model predicts for {scope}; {basis}",
        expected=expected_line,
        evidence=tuple(c.seq for c in judged)[:40],
    )


def _rule_judge(clause: str, what: str) -> JudgeFn:
    """Register the judge of ``clause`` (a rule of :data:`RULES`) over every recorded buffer call."""

    def judge_clause(ev: Evidence) -> Judgement:
        return _judge_clause(ev, RULES[clause])

    judge_clause.__name__ = judge_clause.__qualname__ = f"judge_{clause.lower().replace('-', '')}"
    return judge(clause, BUFFERS_BASIC, what=what, uses=PLAN_ENTRIES)(judge_clause)


judge_buf01 = _rule_judge("BUF-01", "no buffer method writes beyond cBufferSizeStart (guard)")
judge_buf02 = _rule_judge("BUF-02", "*pcBufferMax is the total at every size")
judge_buf03 = _rule_judge("BUF-03", "min(total, size) elements written, the full answer's prefix")
judge_buf05 = _rule_judge("BUF-05", "S_OK when the whole answer fits")
judge_buf09 = _rule_judge("BUF-09", "too-small buffer: S_OK + truncated, NUL-terminated fill (model choice)")
judge_buf10 = _rule_judge("BUF-10", "no element returned: S_OK + total (model choice)")


@judge("BUF-04", BUFFERS_BASIC, what="a NULL buffer with size 0 is accepted", uses=PLAN_ENTRIES)
def judge_buf04(ev: Evidence) -> Judgement:
    """BUF-04 puts the NULL rule on the caller: a NULL buffer with size 0 is the legal form, which the
    runtime must accept (not reject as an argument error); a NULL buffer with a non-zero size is a caller
    error (the model raises CallerBrokeContract), whose answer is reported but not judged. The model
    (check_observed) names an argument error for the legal form as a BUF-04 disagreement. No truth is
    needed: the verdict is the runtime's answer to the form alone."""
    expected_line = RULES["BUF-04"].expected
    groups = collect(ev.trace)
    if (na := _not_run(ev, groups, expected_line)) is not None:
        return na
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
            bad += [
                Disagreement(call, v.message, stable_line(group, call, v, None))
                for v in check_observed(call.observed(), None)
                if v.clause == "BUF-04"
            ]
    without = sorted({g.method for g in groups} - {c.method for c in legal})
    lines = [d.line for d in bad] + [f"{m}: no (NULL, 0) call recorded" for m in without]
    answers = ", ".join(f"{c.method} {format_hresult(c.hr)}" for c in broken)
    tail = f"; caller-error calls (NULL, n>0) answered: {answers}" if broken else ""
    if lines:
        first = str(bad[0]) if bad else lines[0]
        return Judgement(
            status=Status.DIVERGES,
            observed=f"{first} ({len(lines)} of {len(groups)} methods){tail}",
            expected=expected_line,
            evidence=tuple(d.call.seq for d in bad),
            disagreements=tuple(lines),
        )
    return Judgement(
        status=Status.CONFORMS,
        observed=f"(NULL, 0) accepted by {len(legal)} methods{tail}",
        expected=expected_line,
        evidence=tuple(c.seq for c in legal + broken),
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
                    "hr": format_hresult(c.hr),
                    "pcBufferMax": c.pc_max,
                    "changed": c.changed,
                    "guardIntact": c.guard_intact,
                }
                for c in g.calls
            ],
        }
        for g in collect(trace)
    ]
