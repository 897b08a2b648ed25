"""The DoStackSnapshot model: which callbacks a walk makes, in which order, with what, and what it returns.

Input: a thread (frames leaf first), the walking situation (:class:`ThreadState`), ``infoFlags``, an
optional seed, ``contextSize``, ``clientData``, the platform, and what the profiler's callback returns.
Output: a :class:`Snapshot` with the exact conforming outcome (HRESULT + callbacks, each with the clause
ids that justify it) and every other outcome the document allows (:meth:`Snapshot.conforms`).

Where the page is silent or contradicts itself the model follows the ``model_choice`` of the clause
(DSS-11, 12, 13, 26, 27, 28, 29, 30). The model is total: any input gives a :class:`Snapshot` or raises
a :class:`~clr_model.errors.ModelError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Literal, NamedTuple, TypedDict, Unpack

from pydantic import BaseModel, Field

from clr_model.context import AMD64_CONTEXT, X86_CONTEXT, Arch, ContextLayout
from clr_model.errors import InvalidInput
from clr_model.flags import CorPrfSnapshotInfo
from clr_model.hresults import HResult, format_hresult, hresult_failed
from clr_model.violations import Violation as Violation
from clr_model.words import FROZEN, U32, U64

__all__ = [
    "COR_PRF_SNAPSHOT_DEFAULT",
    "COR_PRF_SNAPSHOT_REGISTER_CONTEXT",
    "COR_PRF_SNAPSHOT_X86_OPTIMIZED",
    "Callback",
    "CallbackBehaviour",
    "ContextTooSmall",
    "Frame",
    "FrameContext",
    "ManagedFrame",
    "ObservedCallback",
    "Os",
    "Platform",
    "Seed",
    "SeedNotOnStack",
    "Snapshot",
    "SnapshotInput",
    "ThreadModel",
    "ThreadState",
    "UnmanagedFrame",
    "Violation",
    "WalkOutcome",
    "align",
    "author_violations",
    "check_observed",
    "function_from_ip",
    "seed_for",
    "seed_from_context",
    "snapshot",
]


#: COR_PRF_SNAPSHOT_INFO (corprof.idl)
COR_PRF_SNAPSHOT_DEFAULT = int(CorPrfSnapshotInfo.COR_PRF_SNAPSHOT_DEFAULT)
COR_PRF_SNAPSHOT_REGISTER_CONTEXT = int(CorPrfSnapshotInfo.COR_PRF_SNAPSHOT_REGISTER_CONTEXT)
COR_PRF_SNAPSHOT_X86_OPTIMIZED = 0x2

_S_OK = int(HResult.S_OK)
_ABORTED = int(HResult.CORPROF_E_STACKSNAPSHOT_ABORTED)
_UNMANAGED_CTX = int(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX)
_INVALIDARG = int(HResult.E_INVALIDARG)
_NOTIMPL = int(HResult.E_NOTIMPL)


class ContextTooSmall(InvalidInput):
    """DSS-12: a seed whose contextSize is below the runtime's sizeof(CONTEXT) (undefined: see the clause)."""


class SeedNotOnStack(InvalidInput):
    """DSS-08: a seed in managed code that matches no managed frame of the thread."""




class ManagedFrame(BaseModel):
    """A frame of JIT-compiled (or NGEN / ReadyToRun) code of one managed function."""

    model_config = FROZEN
    kind: Literal["managed"] = "managed"
    function_id: Annotated[int, Field(gt=0, lt=2**64)]
    ip: U64
    sp: U64
    #: Whether ``ip`` lies in JIT/NGEN code the runtime knows (a seed built from this frame is valid).
    in_jit_code: bool = True


class UnmanagedFrame(BaseModel):
    """A frame of unmanaged code: plain native code, a P/Invoke (or COM) target, or CLR helper code."""

    model_config = FROZEN
    kind: Literal["native", "pinvoke", "helper"]
    ip: U64
    sp: U64


Frame = Annotated[ManagedFrame | UnmanagedFrame, Field(discriminator="kind")]


class ThreadModel(BaseModel):
    """The target thread's stack, leaf (last pushed, top) first."""

    model_config = FROZEN
    frames: tuple[Frame, ...] = ()

    @property
    def top_kind(self) -> str | None:
        return self.frames[0].kind if self.frames else None


class ThreadState(StrEnum):
    """Who walks whom, and how the target is stopped."""

    #: the current thread, from inside an ICorProfilerCallback method (synchronous, DSS-17)
    CURRENT_IN_CALLBACK = "current-in-callback"
    #: the current thread, not in a callback (hijacked instruction pointer: asynchronous, DSS-18)
    CURRENT_OUTSIDE_CALLBACK = "current-outside-callback"
    #: the current thread, interrupted by a signal whose handler walks it (asynchronous)
    CURRENT_SIGNAL_INTERRUPTED = "current-signal-interrupted"
    #: another, running thread: the CLR suspends it on request (DSS-02)
    OTHER_SUSPENDED_BY_CLR = "other-suspended-by-clr"
    #: another thread the profiler suspended itself
    OTHER_SUSPENDED_BY_PROFILER = "other-suspended-by-profiler"
    #: another thread while the runtime is suspended (ICorProfilerInfo10::SuspendRuntime)
    OTHER_RUNTIME_SUSPENDED = "other-runtime-suspended"

    @property
    def is_current(self) -> bool:
        return self.value.startswith("current-")

    @property
    def is_synchronous(self) -> bool:
        return self is ThreadState.CURRENT_IN_CALLBACK


class Os(StrEnum):
    WINDOWS = "windows"
    #: no safe suspension of an arbitrary thread: cross-thread walks only while the runtime is suspended
    UNIX = "unix"


class Platform(BaseModel):
    model_config = FROZEN
    os: Os = Os.WINDOWS
    arch: Arch = Arch.AMD64
    #: the runtime's sizeof(CONTEXT); None = the layout's declared size (1232 AMD64, 716 x86)
    context_size: Annotated[int, Field(gt=0, lt=2**32)] | None = None

    @property
    def layout(self) -> ContextLayout:
        return AMD64_CONTEXT if self.arch is Arch.AMD64 else X86_CONTEXT

    @property
    def runtime_context_size(self) -> int:
        return self.context_size if self.context_size is not None else self.layout.size

    @property
    def valid_info_flags(self) -> int:
        if self.arch is Arch.X86:
            return COR_PRF_SNAPSHOT_REGISTER_CONTEXT | COR_PRF_SNAPSHOT_X86_OPTIMIZED
        return COR_PRF_SNAPSHOT_REGISTER_CONTEXT


class Seed(BaseModel):
    """The registers of a seed CONTEXT that matter to the walk."""

    model_config = FROZEN
    ip: U64
    sp: U64
    #: whether ``ip`` points into JIT-compiled or NGEN code (DSS-21)
    in_managed_code: bool = True

    def to_context(self, layout: ContextLayout, flags: int | None = None) -> bytes:
        """A CONTEXT of ``layout`` carrying this seed (CONTROL | INTEGER by default)."""
        value = layout.arch_flag | 0x3 if flags is None else flags
        return layout.pack({"ContextFlags": value, layout.ip_field: self.ip, layout.sp_field: self.sp})


class CallbackBehaviour(BaseModel):
    """What the profiler's StackSnapshotCallback returns at delivery index k (S_OK after the list)."""

    model_config = FROZEN
    returns: tuple[U32, ...] = ()

    def at(self, index: int) -> int:
        return self.returns[index] if index < len(self.returns) else _S_OK


class SnapshotInput(BaseModel):
    model_config = FROZEN
    thread: ThreadModel
    state: ThreadState = ThreadState.CURRENT_IN_CALLBACK
    info_flags: U32 = COR_PRF_SNAPSHOT_DEFAULT
    seed: Seed | None = None
    #: the contextSize argument (ignored without a seed)
    context_size: U32 = 0
    client_data: U64 = 0
    platform: Platform = Platform()
    callback: CallbackBehaviour = CallbackBehaviour()


class FrameContext(BaseModel):
    """The registers of a per-frame CONTEXT the model predicts (and the probe records)."""

    model_config = FROZEN
    ip: U64
    sp: U64


class ObservedCallback(BaseModel):
    """One StackSnapshotCallback invocation as seen (by the probe) or predicted (by the model)."""

    model_config = FROZEN
    func_id: U64
    ip: U64
    client_data: U64
    context_size: U32 = 0
    context: FrameContext | None = None
    #: what the callback returned, when known
    hr: U32 | None = None


class Callback(ObservedCallback):
    """A predicted callback with the clause ids that justify it. ``frame_info`` is opaque: not predicted."""

    frame_info: None = None
    clauses: tuple[str, ...] = ()


class WalkOutcome(BaseModel):
    """One outcome of a walk: the HRESULT and the callbacks, with the clauses that justify them."""

    model_config = FROZEN
    hresult: U32
    callbacks: tuple[Callback, ...]
    #: clause ids that justify the HRESULT, the most specific first
    clauses: tuple[str, ...]
    #: why this alternative conforms (empty for the exact outcome)
    reason: str = ""


class CompareOptions(TypedDict, total=False):
    """The keyword options of :meth:`Snapshot.closest` and :meth:`Snapshot.conforms` (defaults: closest's)."""

    compare_addresses: bool
    names: Mapping[int, str] | None


class Snapshot(BaseModel):
    """The model's answer: the exact outcome and every outcome the document also allows."""

    model_config = FROZEN
    input: SnapshotInput
    synchronous: bool
    #: alternatives[0] is the exact conforming outcome
    alternatives: tuple[WalkOutcome, ...]
    #: DSS-20: how many managed frames at the top an unseeded asynchronous walk may skip
    may_skip_top_managed: int = 0

    @property
    def exact(self) -> WalkOutcome:
        return self.alternatives[0]

    @property
    def hresult(self) -> int:
        return self.exact.hresult

    @property
    def callbacks(self) -> tuple[Callback, ...]:
        return self.exact.callbacks

    def conforms(
        self, observed: Sequence[ObservedCallback], observed_hr: int, **options: Unpack[CompareOptions]
    ) -> list[Violation]:
        """Every violation of an observed walk against the closest allowed outcome; [] when it matches one
        (``options``: as :meth:`closest`'s)."""
        return self.closest(observed, observed_hr, **options)[1]

    def closest(
        self,
        observed: Sequence[ObservedCallback],
        observed_hr: int,
        *,
        compare_addresses: bool = True,
        names: Mapping[int, str] | None = None,
    ) -> tuple[WalkOutcome, list[Violation]]:
        """The allowed outcome the observed walk matches (violations []), or else the closest one (the most
        callbacks in common, then the fewest violations, then the document's order) with all its
        violations. ``names`` (FunctionID -> a name) makes the messages name functions instead of giving
        their ids."""
        observed = tuple(observed)
        hr = observed_hr & 0xFFFFFFFF
        found = [
            (alt, _diff(alt, observed, hr, self, compare_addresses, names or {})) for alt in self.alternatives
        ]
        for alt, problems in found:
            if not problems:
                return alt, []
        ids = [o.func_id for o in observed]

        def rank(i: int) -> tuple[int, int, int]:
            alt, problems = found[i]
            return (-len(align([c.func_id for c in alt.callbacks], ids)), len(problems), i)

        return found[min(range(len(found)), key=rank)]


# --------------------------------------------------------------------------------------------------
# The seed procedure (DSS-19) and seeds from CONTEXT bytes (DSS-06)


def function_from_ip(thread: ThreadModel, ip: int) -> int:
    """ICorProfilerInfo::GetFunctionFromIP over the thread model: the FunctionID, 0 for unmanaged code."""
    for frame in thread.frames:
        if frame.ip == ip:
            if isinstance(frame, ManagedFrame) and frame.in_jit_code:
                return frame.function_id
            return 0
    return 0


def seed_for(thread: ThreadModel) -> Seed | None:
    """The documented seed procedure: from the top, skip frames GetFunctionFromIP calls unmanaged (0),
    and seed from the first managed frame's registers. None when the thread has no managed frame."""
    for frame in thread.frames:
        if function_from_ip(thread, frame.ip) != 0:
            return Seed(ip=frame.ip, sp=frame.sp, in_managed_code=True)
    return None


def seed_from_context(layout: ContextLayout, data: bytes, *, in_managed_code: bool) -> Seed:
    """The seed a Win32 CONTEXT buffer carries (its instruction and stack pointers)."""
    layout.validate(data)
    regs = layout.unpack(data, [layout.ip_field, layout.sp_field])
    return Seed(ip=regs[layout.ip_field], sp=regs[layout.sp_field], in_managed_code=in_managed_code)


# --------------------------------------------------------------------------------------------------
# The walk


class _Report(NamedTuple):
    """One callback the walk will make (internal: the model's edges are the pydantic types around it; a
    tuple, since a walk makes one per frame)."""

    func_id: int
    ip: int
    sp: int
    clauses: tuple[str, ...]


def _reports(frames: Sequence[ManagedFrame | UnmanagedFrame], start: int) -> list[_Report]:
    """One report per managed frame, one per run of unmanaged frames (DSS-03, DSS-15), leaf first (DSS-16)."""
    out: list[_Report] = []
    in_run = False
    make = tuple.__new__  # _Report(...) without its keyword-argument __new__ (one per frame)
    for frame in frames[start:]:
        if isinstance(frame, ManagedFrame):
            out.append(make(_Report, (frame.function_id, frame.ip, frame.sp, _MANAGED_REPORT)))
            in_run = False
        elif not in_run:
            out.append(make(_Report, (0, frame.ip, frame.sp, _UNMANAGED_REPORT)))
            in_run = True
    return out


_MANAGED_REPORT = ("DSS-03", "DSS-16")
_UNMANAGED_REPORT = ("DSS-03", "DSS-15", "DSS-16")


def _leading_run(frames: Sequence[ManagedFrame | UnmanagedFrame]) -> _Report:
    top = frames[0]
    return _Report(func_id=0, ip=top.ip, sp=top.sp, clauses=("DSS-30", "DSS-15"))


_U64_END = 2**64
_U32_END = 2**32
_object_new = object.__new__
_object_setattr = object.__setattr__
#: the fields a delivered callback's constructor is given (``frame_info`` keeps its default), and a
#: FrameContext's: one set per class, shared by the instances built without validation (pydantic never
#: changes a frozen model's set in place: ``model_copy`` copies it first, assignment is refused before)
_CALLBACK_FIELDS_SET = {"func_id", "ip", "client_data", "context_size", "context", "hr", "clauses"}
_CONTEXT_FIELDS_SET = {"ip", "sp"}


#: what each report's clauses become in its callback
_DELIVERED_CLAUSES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _deliver(
    reports: Sequence[_Report], inp: SnapshotInput, walk_clauses: tuple[str, ...], reason: str
) -> WalkOutcome:
    with_ctx = bool(inp.info_flags & COR_PRF_SNAPSHOT_REGISTER_CONTEXT)
    size = inp.platform.runtime_context_size if with_ctx else 0
    client_data = inp.client_data
    returns = inp.callback.returns
    # The callbacks are built without validation (one per frame: most of a long walk's cost) from the
    # walk's own values, each checked to be of its field's type and range: the input's are validated
    # already; any other (a model_construct'ed input) goes through validation, and fails, as it always did.
    trusted = type(client_data) is int and type(size) is int
    trusted = trusted and 0 <= client_data < _U64_END and 0 <= size < _U32_END
    new, setattr_ = _object_new, _object_setattr
    callbacks: list[Callback] = []
    for index, rep in enumerate(reports):
        returned = returns[index] if index < len(returns) else _S_OK
        func_id, ip, sp, rep_clauses = rep
        clauses = _DELIVERED_CLAUSES.get(rep_clauses)
        if clauses is None:
            clauses = _DELIVERED_CLAUSES.setdefault(rep_clauses, (*rep_clauses, "DSS-04", "DSS-05", "DSS-14"))
        if (
            trusted and type(func_id) is int and type(ip) is int and type(sp) is int
            and type(returned) is int and 0 <= func_id < _U64_END and 0 <= ip < _U64_END
            and 0 <= sp < _U64_END and 0 <= returned < _U32_END
        ):  # fmt: skip
            context: FrameContext | None = None
            if with_ctx:
                context = new(FrameContext)
                setattr_(context, "__dict__", {"ip": ip, "sp": sp})
                setattr_(context, "__pydantic_fields_set__", _CONTEXT_FIELDS_SET)
                setattr_(context, "__pydantic_extra__", None)
                setattr_(context, "__pydantic_private__", None)
            callback = new(Callback)
            setattr_(callback, "__dict__", {
                "func_id": func_id, "ip": ip, "client_data": client_data, "context_size": size,
                "context": context, "hr": returned, "frame_info": None, "clauses": clauses,
            })  # fmt: skip
            setattr_(callback, "__pydantic_fields_set__", _CALLBACK_FIELDS_SET)
            setattr_(callback, "__pydantic_extra__", None)
            setattr_(callback, "__pydantic_private__", None)
            callbacks.append(callback)
        else:
            callbacks.append(
                Callback(
                    func_id=func_id,
                    ip=ip,
                    client_data=client_data,
                    context_size=size,
                    context=FrameContext(ip=ip, sp=sp) if with_ctx else None,
                    hr=returned,
                    clauses=clauses,
                )
            )
        if returned != _S_OK:
            return WalkOutcome(
                hresult=_ABORTED, callbacks=tuple(callbacks), clauses=("DSS-26",), reason=reason
            )
    return WalkOutcome(hresult=_S_OK, callbacks=tuple(callbacks), clauses=walk_clauses, reason=reason)


def _error(hr: int, clauses: tuple[str, ...], reason: str = "") -> WalkOutcome:
    return WalkOutcome(hresult=hr, callbacks=(), clauses=clauses, reason=reason)


def snapshot(inp: SnapshotInput) -> Snapshot:
    """What DoStackSnapshot does for ``inp`` (see the module docstring and the DSS clauses)."""
    platform = inp.platform
    sync = inp.state.is_synchronous
    kind_clause = "DSS-17" if sync else "DSS-18"
    who = ("DSS-01",) if inp.state.is_current else ("DSS-02", "DSS-13")

    def result(alternatives: list[WalkOutcome], skip: int = 0) -> Snapshot:
        unique: list[WalkOutcome] = []
        for alt in alternatives:
            if all((alt.hresult, alt.callbacks) != (u.hresult, u.callbacks) for u in unique):
                unique.append(alt)
        return Snapshot(input=inp, synchronous=sync, alternatives=tuple(unique), may_skip_top_managed=skip)

    # DSS-27: undefined infoFlags bits are rejected before anything else.
    if inp.info_flags & ~platform.valid_info_flags:
        return result([_error(_INVALIDARG, ("DSS-27",))])

    # DSS-02 / DSS-13: without safe thread suspension only a suspended runtime allows cross-thread walks.
    if (
        not inp.state.is_current
        and platform.os is Os.UNIX
        and inp.state is not ThreadState.OTHER_RUNTIME_SUSPENDED
    ):
        return result([_error(_NOTIMPL, ("DSS-02", "DSS-13"))])

    frames = inp.thread.frames
    top = inp.thread.top_kind
    seed = inp.seed

    # DSS-12: a seed shorter than the runtime's CONTEXT is undefined.
    if seed is not None and inp.context_size < platform.runtime_context_size:
        raise ContextTooSmall(
            f"DSS-12: seed contextSize {inp.context_size} is below the runtime's sizeof(CONTEXT) "
            f"{platform.runtime_context_size}"
        )

    first_managed = next((i for i, f in enumerate(frames) if isinstance(f, ManagedFrame)), None)
    walk_clauses: tuple[str, ...] = (*who, kind_clause)
    if sync:
        walk_clauses += ("DSS-10",)

    def unseeded() -> tuple[list[_Report], list[WalkOutcome], int]:
        reports = _reports(frames, first_managed) if first_managed is not None else []
        extra: list[WalkOutcome] = []
        skip = 0
        if top in ("native", "pinvoke"):
            # DSS-30: the other reading reports the unmanaged code on top as a run.
            extra.append(
                _deliver(
                    [_leading_run(frames), *reports], inp, walk_clauses, "DSS-30: unmanaged top reported"
                )
            )
        if top == "helper" and not sync and seed is None:
            # DSS-20: without a seed, managed frames at the top may be skipped (never others).
            while skip < len(reports) and reports[skip].func_id != 0:
                skip += 1
            for k in range(1, skip + 1):
                extra.append(
                    _deliver(reports[k:], inp, (*walk_clauses, "DSS-20"), f"DSS-20: {k} top frame(s) skipped")
                )
        return reports, extra, skip

    if seed is not None and not seed.in_managed_code:
        # DSS-21 (and DSS-29: where the runtime would drop the seed, the unseeded walk also conforms).
        alternatives = [_error(_UNMANAGED_CTX, ("DSS-21",))]
        if top in ("native", "pinvoke"):
            reports, extra, _ = unseeded()
            alternatives.append(_deliver(reports, inp, (*walk_clauses, "DSS-29"), "DSS-29: seed ignored"))
            alternatives.extend(extra)
        return result(alternatives)

    if seed is not None and top == "helper":
        # DSS-08: the walk starts at the seed's frame.
        start = next(
            (
                i
                for i, f in enumerate(frames)
                if isinstance(f, ManagedFrame) and f.ip == seed.ip and f.sp == seed.sp
            ),
            None,
        )
        if start is None:
            raise SeedNotOnStack(
                f"DSS-08: seed ip={seed.ip:#x} sp={seed.sp:#x} matches no managed frame of the thread"
            )
        reports = _reports(frames, start)
        return result([_deliver(reports, inp, (*walk_clauses, "DSS-08", "DSS-11"), "")])

    reports, extra, skip = unseeded()
    clauses = walk_clauses + (("DSS-07", "DSS-11") if seed is not None else ())
    return result([_deliver(reports, inp, clauses, ""), *extra], skip)


# --------------------------------------------------------------------------------------------------
# Comparing an observed walk with the model


def align(expected: Sequence[int], observed: Sequence[int]) -> list[tuple[int, int]]:
    """The longest common subsequence of two FunctionID sequences as (expected index, observed index)
    pairs, in order: the callbacks an observed walk has in common with a predicted one."""
    n, m = len(expected), len(observed)
    # lengths[i][j]: LCS length of expected[i:] and observed[j:]
    lengths = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if expected[i] == observed[j]:
                lengths[i][j] = lengths[i + 1][j + 1] + 1
            else:
                lengths[i][j] = max(lengths[i + 1][j], lengths[i][j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if expected[i] == observed[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif lengths[i + 1][j] >= lengths[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _who(func_id: int, names: Mapping[int, str]) -> str:
    if func_id == 0:
        return "an unmanaged run (FunctionID 0)"
    return names.get(func_id) or f"FunctionID {func_id:#x}"


def _chain(func_id: int, names: Mapping[int, str]) -> str:
    return "[unmanaged]" if func_id == 0 else _who(func_id, names)


def _diff(
    alt: WalkOutcome,
    observed: Sequence[ObservedCallback],
    hr: int,
    snap: Snapshot,
    compare_addresses: bool,
    names: Mapping[int, str],
) -> list[Violation]:
    """Every way ``observed`` differs from ``alt``, each with its clause (not only the first)."""
    expected = alt.callbacks
    inp = snap.input
    out: list[Violation] = []
    if hr != alt.hresult:
        out.append(
            Violation(
                clause=alt.clauses[0] if alt.clauses else "DSS-14",
                message=f"DoStackSnapshot returned {format_hresult(hr)}, the model says "
                f"{format_hresult(alt.hresult)}",
            )
        )
    exp_ids = [c.func_id for c in expected]
    obs_ids = [o.func_id for o in observed]
    error_clause = alt.clauses[0] if alt.hresult != _S_OK and alt.hresult != _ABORTED and alt.clauses else ""
    if not observed and expected:
        # a walk that failed and delivered nothing is one disagreement: its HRESULT (reported above)
        if not (hresult_failed(hr) and hr != alt.hresult):
            shown = " > ".join(_chain(f, names) for f in exp_ids)
            out.append(
                Violation(clause="DSS-03", message=f"no callback; the model has {len(expected)}: {shown}")
            )
        return out
    if observed and not expected:
        shown = " > ".join(_chain(f, names) for f in obs_ids)
        out.append(
            Violation(
                clause=error_clause or ("DSS-26" if alt.hresult == _ABORTED else "DSS-03"),
                message=f"{len(observed)} callback(s) where the model has none: {shown}",
            )
        )
        return out

    pairs = align(exp_ids, obs_ids)
    paired_exp = {i for i, _ in pairs}
    paired_obs = {j for _, j in pairs}
    lost = [i for i in range(len(expected)) if i not in paired_exp]
    extra = [j for j in range(len(observed)) if j not in paired_obs]
    # a managed frame reported in another place than the model's: out of order (DSS-16)
    moved: list[tuple[int, int]] = []
    for j in list(extra):
        if obs_ids[j] == 0:
            continue
        i = next((i for i in lost if exp_ids[i] == obs_ids[j]), None)
        if i is not None:
            moved.append((i, j))
            lost.remove(i)
            extra.remove(j)
    seeded_start = inp.seed is not None and inp.thread.top_kind == "helper"
    first_exp = pairs[0][0] if pairs else len(expected)
    first_obs = pairs[0][1] if pairs else len(observed)

    # (sort position, violation): sequence faults in walk order
    found: list[tuple[int, Violation]] = []

    def flag(j: int, clause: str, message: str) -> None:
        """A violation at observed callback #j (and sorted there)."""
        found.append((j, Violation(clause=clause, message=message, index=j)))

    for i, j in moved:
        who = _who(obs_ids[j], names)
        flag(j, "DSS-16", f"{who} comes out of order: the model has it at #{i} (leaf first)")

    def gap_of(index: int, side: int) -> int:
        """How many aligned pairs come before ``index`` (0: expected side, 1: observed side)."""
        return sum(1 for p in pairs if p[side] < index)

    for gap in range(len(pairs) + 1):
        gap_lost = [i for i in lost if gap_of(i, 0) == gap]
        gap_extra = [j for j in extra if gap_of(j, 1) == gap]
        substituted = list(zip(gap_lost, gap_extra, strict=False))
        for i, j in substituted:
            e, o = exp_ids[i], obs_ids[j]
            if seeded_start and i < first_exp:
                clause = "DSS-08"
            elif (e == 0) != (o == 0):
                clause = "DSS-30" if o == 0 and j == 0 and inp.thread.top_kind == "helper" else "DSS-15"
            else:
                clause = "DSS-03"
            flag(j, clause, f"a callback for {_who(o, names)} where the model has {_who(e, names)} "
                 f"(its #{i})")
        for i in gap_lost[len(substituted) :]:
            e = exp_ids[i]
            if e == 0:
                clause = "DSS-15"
            elif seeded_start and i < first_exp:
                clause = "DSS-08"
            elif snap.may_skip_top_managed and i < first_exp:
                clause = "DSS-20"
            else:
                clause = "DSS-03"
            found.append(
                (
                    first_obs if gap == 0 else pairs[gap - 1][1] + 1,
                    Violation(clause=clause, message=f"no callback for {_who(e, names)}, the model's #{i}"),
                )
            )
        for j in gap_extra[len(substituted) :]:
            o = obs_ids[j]
            if alt.hresult == _ABORTED and j >= len(expected):
                clause, msg = "DSS-26", f"a callback for {_who(o, names)} after the walk was to stop"
            elif error_clause:
                clause, msg = error_clause, f"a callback for {_who(o, names)} where the model fails the walk"
            elif o == 0 and j == 0:
                clause, msg = (
                    "DSS-30",
                    "a FunctionID 0 callback for the unmanaged code on top (the model has none)",
                )
            elif o == 0:
                clause, msg = "DSS-15", "a FunctionID 0 callback where the model has no unmanaged run"
            elif seeded_start and j < first_obs:
                clause, msg = "DSS-08", f"a callback for {_who(o, names)} above the seed's frame"
            elif o in exp_ids:
                clause, msg = "DSS-03", f"{_who(o, names)} reported again"
            else:
                clause, msg = "DSS-03", f"a callback for {_who(o, names)}, not a frame of the thread"
            flag(j, clause, msg)

    for i, j in sorted([*pairs, *moved], key=lambda p: p[1]):
        exp, obs = expected[i], observed[j]
        if obs.client_data != exp.client_data:  # DSS-04: the model's prediction for this callback
            got, wanted = obs.client_data, exp.client_data
            flag(j, "DSS-04", f"clientData {got:#x}, the model's callback gets {wanted:#x}")
        if (obs.context is None) != (exp.context is None) or obs.context_size != exp.context_size:
            flag(
                j,
                "DSS-05",
                f"context {'present' if obs.context else 'absent'} (size {obs.context_size}), infoFlags "
                f"{inp.info_flags:#x} calls for {'one' if exp.context else 'none'} (size {exp.context_size})",
            )
        if obs.hr is not None and exp.hr is not None and obs.hr != exp.hr:
            flag(
                j,
                "DSS-26",
                f"the callback returned {format_hresult(obs.hr)}, the model's callback returns "
                f"{format_hresult(exp.hr)}",
            )
        if compare_addresses:
            if obs.ip != exp.ip:
                flag(j, "DSS-03", f"ip {obs.ip:#x}, the frame's is {exp.ip:#x}")
            if obs.context is not None and exp.context is not None and obs.context != exp.context:
                flag(
                    j,
                    "DSS-05",
                    f"context ip/sp {obs.context.ip:#x}/{obs.context.sp:#x}, the frame's are "
                    f"{exp.context.ip:#x}/{exp.context.sp:#x}",
                )
    found.sort(key=lambda f: f[0])
    out.extend(v for _, v in found)
    return out


def check_observed(
    model_input: SnapshotInput,
    observed_callbacks: Sequence[ObservedCallback],
    observed_hr: int,
    *,
    compare_addresses: bool = True,
    names: Mapping[int, str] | None = None,
) -> list[Violation]:
    """Compare a live DoStackSnapshot (its callbacks and HRESULT) with the model: every violation, each
    with its clause; [] when it conforms. ``names`` (FunctionID -> name) is used in the messages."""
    return snapshot(model_input).conforms(
        observed_callbacks, observed_hr, compare_addresses=compare_addresses, names=names
    )


def author_violations(inp: SnapshotInput) -> list[Violation]:
    """Rules for the profiler making the call (validator layer): DSS-09 (a seed for asynchronous walks)."""
    out: list[Violation] = []
    if not inp.state.is_synchronous and inp.seed is None:
        out.append(
            Violation(clause="DSS-09", message=f"asynchronous walk ({inp.state.value}) without a seed")
        )
    return out
