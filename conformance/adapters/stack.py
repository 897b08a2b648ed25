"""The stack adapter: recorded DoStackSnapshot walks -> the DoStackSnapshot model's inputs and observations.

One recorded walk is a ``call`` record named ``DoStackSnapshot`` (its ``args``: what the probe passed, its
``out.frames``: what it resolved) and the ``frame`` records of its callbacks (``walk`` = the call's
``args.walk``). This module turns

* the scenario's ground truth (reflection frames: ``{"token", "type", "method", "module", "pinvoke"}``)
  into the model's :class:`~clr_model.stacksnapshot.ThreadModel` (:func:`thread_from_reflection`),
* the walk's frame records into :class:`~clr_model.stacksnapshot.ObservedCallback` (:func:`observed`),
  with functions named by :mod:`conformance.adapters.identity`,
* the plan entry that asked for the walk into what the model must assume (:class:`WalkRequest`: the
  callback's replies, infoFlags, clientData as the harness wrote them),

and compares them (:func:`compare_walk`): every violation, stable one-line disagreements, a picture.
It imports only the trace model and :mod:`clr_model` (never the suite or the CLI).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from clr_model.context import runtime_context_size
from clr_model.hresults import HResult, format_hresult
from clr_model.stacksnapshot import (
    CallbackBehaviour,
    FrameContext,
    ManagedFrame,
    ObservedCallback,
    Os,
    Platform,
    Seed,
    Snapshot,
    SnapshotInput,
    ThreadModel,
    ThreadState,
    UnmanagedFrame,
    Violation,
    WalkOutcome,
    align,
    snapshot,
)
from conformance.adapters.identity import FunctionIdentities, FunctionKey, ObservedNames, short_label
from conformance.core.errors import HarnessError
from conformance.core.trace import CallRecord, FrameRecord, ProbeErrorRecord, Trace

__all__ = [
    "CONTEXT_SIZE_NAMES",
    "ReflectionFrame",
    "TraceWalk",
    "WalkComparison",
    "WalkInputError",
    "WalkRequest",
    "compare_walk",
    "find_walk",
    "need_walk",
    "observed",
    "plan_value",
    "platform_for",
    "reflection_frames",
    "summary",
    "thread_from_reflection",
]

_S_OK = int(HResult.S_OK)
#: synthetic addresses of the model's frames: frame n of the thread at ip (n + 1) * _STEP, sp ip + 0x100
_STEP = 0x1000


class WalkInputError(HarnessError):
    """The trace or the plan lacks what a comparison needs (a mark, a call record, a plan entry)."""


def platform_for(version: str, os: Os = Os.UNIX) -> Platform:
    """The model's platform for runtime ``version``: its sizeof(CONTEXT) from the one table of that fact
    (:func:`clr_model.context.runtime_context_size`; the layout's declared size when the harness does not
    know the runtime)."""
    return Platform(os=os, context_size=runtime_context_size(version))


#: the plan's symbolic seed ``contextSize`` names and their bytes, from the runtime's sizeof(CONTEXT) (as the
#: probe's ``stack_seeded`` computes them, experiments_stack.cpp)
CONTEXT_SIZE_NAMES: Mapping[str, Callable[[int], int]] = MappingProxyType(
    {
        "zero": lambda runtime: 0,
        "small": lambda runtime: 16,
        "runtime-1": lambda runtime: runtime - 1,
        "runtime": lambda runtime: runtime,
        "larger": lambda runtime: runtime + 256,
    }
)


# --------------------------------------------------------------------------------------------------
# The plan: what the harness asked for


def plan_value(value: Any, where: str) -> int:
    """A number of the effective plan (symbolic names are resolved before judges see the plan:
    :func:`conformance.core.plans.resolve_plan`); anything else is a one-line error naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WalkInputError(f"{where}: {value!r} is not a number (is the plan resolved?)")
    return value


@dataclass(frozen=True)
class WalkRequest:
    """The plan entry (``experiments[].id``) that asked for a walk: its ``args`` as the harness wrote them."""

    entry: str
    args: Mapping[str, Any]
    #: where the probe runs it ("mark:walk-now", "ExceptionThrown", ...)
    at: str = ""

    @classmethod
    def from_plan(cls, plan: Mapping[str, Any], entry: str) -> WalkRequest:
        for item in plan.get("experiments") or []:
            if isinstance(item, Mapping) and item.get("id") == entry:
                args = item.get("args") or {}
                if not isinstance(args, Mapping):
                    raise WalkInputError(f"plan entry {entry!r}: 'args' must be an object")
                return cls(entry, args, str(item.get("at") or ""))
        raise WalkInputError(f"the plan has no experiment entry {entry!r}")

    def number(self, name: str, default: int) -> int:
        """``args[name]`` as a number; ``default`` when the plan leaves it to the probe."""
        if name not in self.args:
            return default
        return plan_value(self.args[name], f"plan entry {self.entry!r} args.{name}")

    def info_flags(self, walk: TraceWalk) -> int:
        """infoFlags as planned (the probe's default, the value it passed, when the plan has none)."""
        return self.number("infoFlags", int(walk.arg("infoFlags", 0))) & 0xFFFFFFFF

    def client_data(self, walk: TraceWalk) -> int:
        """clientData as planned (the value the probe chose when the plan has none)."""
        return self.number("clientData", int(walk.arg("clientData", 0))) & (2**64 - 1)

    def callback(self) -> CallbackBehaviour:
        """What the probe's StackSnapshotCallback is to return: ``abortReply`` at ``abortAt`` (DSS-26),
        S_OK everywhere else. Only the plan says so, never the probe's record of what it did."""
        at = self.number("abortAt", -1)
        if at < 0:
            return CallbackBehaviour()
        reply = self.number("abortReply", _S_OK) & 0xFFFFFFFF
        return CallbackBehaviour(returns=(*([_S_OK] * at), reply))

    def model_input(
        self,
        walk: TraceWalk,
        thread: ThreadModel,
        state: ThreadState,
        platform: Platform,
        *,
        seed: Seed | None = None,
        context_size: int = 0,
    ) -> SnapshotInput:
        """The model's input for this entry's walk of ``thread`` in ``state``: infoFlags, clientData and the
        callback's replies as planned (the probe's own values where the plan leaves them to it)."""
        return SnapshotInput(
            thread=thread,
            state=state,
            info_flags=self.info_flags(walk),
            seed=seed,
            context_size=context_size,
            client_data=self.client_data(walk),
            platform=platform,
            callback=self.callback(),
        )

    def get(self, name: str, default: Any = None) -> Any:
        return self.args.get(name, default)

    def context_size(self, runtime_size: int | None) -> int | None:
        """The seed's contextSize in bytes as planned (``args.contextSize``: a name of
        :data:`CONTEXT_SIZE_NAMES` or a number); None when the plan leaves it to the probe."""
        if "contextSize" not in self.args:
            return None
        raw = self.args["contextSize"]
        where = f"plan entry {self.entry!r} args.contextSize"
        if not isinstance(raw, str):
            return plan_value(raw, where)
        if raw not in CONTEXT_SIZE_NAMES:
            raise WalkInputError(f"{where}: {raw!r} is none of {', '.join(CONTEXT_SIZE_NAMES)}")
        if runtime_size is None:
            raise WalkInputError(
                f"{where}: {raw!r} needs the runtime's sizeof(CONTEXT), not known to the harness"
            )
        return CONTEXT_SIZE_NAMES[raw](runtime_size)

    def require(self, ok: bool, lacks: str) -> None:
        """A judge relies on a property of this entry (without it the plan no longer exercises its clause):
        a one-line input error naming the entry and what it lacks."""
        if not ok:
            raise WalkInputError(f"plan entry {self.entry!r} lacks {lacks}")


# --------------------------------------------------------------------------------------------------
# Ground truth: the scenario's reflection frames


@dataclass(frozen=True)
class ReflectionFrame:
    """One frame of the scenario's own reflection stack (System.Diagnostics.StackTrace)."""

    token: int
    type: str
    method: str
    module: str
    #: a P/Invoke method: its frame is unmanaged code (the native target)
    pinvoke: bool = False

    @property
    def key(self) -> FunctionKey:
        return FunctionKey.of(self.module, self.token)

    @property
    def label(self) -> str:
        return f"{self.type or '?'}::{self.method or '?'}"


def reflection_frames(raw: Any, where: str) -> tuple[ReflectionFrame, ...]:
    """Reflection frames from a mark payload's list; a bad entry is a one-line error naming ``where``."""
    if not isinstance(raw, list):
        raise WalkInputError(f"{where}: a list of frames is needed")
    out: list[ReflectionFrame] = []
    for n, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise WalkInputError(f"{where}: frame {n} is not an object")
        try:
            out.append(
                ReflectionFrame(
                    token=int(entry.get("token") or 0),
                    type=str(entry.get("type") or ""),
                    method=str(entry.get("method") or ""),
                    module=str(entry.get("module") or ""),
                    pinvoke=bool(entry.get("pinvoke")),
                )
            )
        except (TypeError, ValueError) as exc:
            raise WalkInputError(f"{where}: frame {n}: {exc}") from exc
    return tuple(out)


def thread_from_reflection(
    frames: Sequence[ReflectionFrame],
    ids: FunctionIdentities,
    *,
    above: Sequence[ReflectionFrame] = (),
    helper_on_top: bool = False,
    native_after: int | None = None,
    dispatched: Sequence[int] = (),
    where: str = "the reflection stack",
) -> ThreadModel:
    """The model's thread, leaf first: [CLR helper code], ``above`` (frames the walk sees above the
    reflection stack), ``frames`` (native code after index ``native_after``: a reverse P/Invoke; and after
    each index of ``dispatched``: a frame the runtime's own native code called, such as an exception filter
    funclet run by the first pass of exception dispatch, whose caller DSS-15 reports as a run of unmanaged
    frames), and the native code that started the thread (the host calling Main, the runtime's thread
    start).

    A P/Invoke method is unmanaged code; managed frames get model FunctionIDs from ``ids`` and every frame
    synthetic, distinct addresses (the model's seed procedure can find them; they are never compared).

    ``native_after`` (-1: none) must agree with the P/Invoke frames (one truth per fact): it is the first
    (leaf-most) index i where a managed frame i is followed by a P/Invoke frame (native code that called into
    managed code: a reverse P/Invoke), -1 when there is none; otherwise a one-line error naming ``where``."""
    if native_after is not None:
        starts = [i for i in range(len(frames) - 1) if not frames[i].pinvoke and frames[i + 1].pinvoke]
        if native_after != (starts[0] if starts else -1):
            shown = ", ".join(map(str, starts)) or "none"
            raise WalkInputError(
                f"{where}: nativeAfter {native_after} disagrees with the P/Invoke frames"
                f" (a managed frame followed by a P/Invoke frame at index: {shown})"
            )
    bad = [i for i in dispatched if not 0 <= i < len(frames) - 1 or frames[i].pinvoke]
    if bad:
        raise WalkInputError(
            f"{where}: dispatched frame index {bad[0]} is not a managed frame with a caller"
            f" ({len(frames)} frame(s))"
        )
    kinds: list[ReflectionFrame | str] = ["helper"] if helper_on_top else []
    kinds.extend(above)
    for i, f in enumerate(frames):
        kinds.append(f)
        if i == native_after or i in dispatched:
            kinds.append("native")
    kinds.append("native")
    model: list[ManagedFrame | UnmanagedFrame] = []
    for n, item in enumerate(kinds):
        ip = (n + 1) * _STEP
        if isinstance(item, str):
            model.append(UnmanagedFrame.model_validate({"kind": item, "ip": ip, "sp": ip + 0x100}))
        elif item.pinvoke:
            model.append(UnmanagedFrame(kind="pinvoke", ip=ip, sp=ip + 0x100))
        else:
            model.append(ManagedFrame(function_id=ids.model_id(item.key, item.label), ip=ip, sp=ip + 0x100))
    return ThreadModel(frames=tuple(model))


# --------------------------------------------------------------------------------------------------
# Observed walks


@dataclass(frozen=True)
class TraceWalk:
    """One recorded DoStackSnapshot: its call record and its callbacks' frame records (index order)."""

    call: CallRecord
    frames: tuple[FrameRecord, ...]

    @property
    def hr(self) -> int:
        return self.call.hr & 0xFFFFFFFF

    @property
    def seqs(self) -> tuple[int, ...]:
        """The records that show the walk: the call, then its frames."""
        return (self.call.seq, *(f.seq for f in self.frames))

    def arg(self, name: str, default: Any = None) -> Any:
        return self.call.args.get(name, default)


def find_walk(trace: Trace, experiment: str, role: str | None = None) -> TraceWalk | None:
    """The first DoStackSnapshot of plan entry ``experiment`` (``args.role == role`` when given), not a
    capture walk (``args.purpose == "capture"``: the one that only captures a seed); None if there is none."""
    for call in trace.calls("DoStackSnapshot", experiment):
        if call.args.get("purpose") == "capture":
            continue
        if role is not None and call.args.get("role") != role:
            continue
        walk = call.args.get("walk")
        frames = trace.frames(int(walk)) if isinstance(walk, int) else []
        return TraceWalk(call, tuple(sorted(frames, key=lambda f: f.index)))
    return None


def need_walk(trace: Trace, experiment: str, role: str | None = None) -> TraceWalk:
    """:func:`find_walk`, or a one-line error naming the experiment (and the probe's own error, if any)."""
    walk = find_walk(trace, experiment, role)
    if walk is None:
        what = f"{experiment} ({role})" if role else experiment
        problems = [p.what for p in trace.of_kind(ProbeErrorRecord) if p.where == experiment]
        why = f": the probe says {'; '.join(problems)}" if problems else ""
        raise WalkInputError(f"{trace.path}: no DoStackSnapshot call record of experiment {what}{why}")
    return walk


def observed(walk: TraceWalk, ids: FunctionIdentities, names: ObservedNames) -> list[ObservedCallback]:
    """The walk's callbacks as the model's observations (FunctionIDs translated by ``ids``)."""
    out: list[ObservedCallback] = []
    for f in walk.frames:
        ctx = f.context
        out.append(
            ObservedCallback(
                func_id=ids.observed(f.funcId, names),
                ip=f.ip,
                client_data=f.clientData,
                context_size=f.contextSize,
                context=None if ctx is None else FrameContext(ip=ctx.rip, sp=ctx.rsp),
                hr=f.hr,
            )
        )
    return out


def summary(hr: int, labels: Sequence[str]) -> str:
    """``0x00000000 S_OK, 3 callback(s): Probe::Mark > StackWalks::Leaf > [unmanaged]``."""
    shown = " > ".join(short_label(label) for label in labels) if labels else "no callback"
    return f"{format_hresult(hr)}, {len(labels)} callback(s): {shown}"


# --------------------------------------------------------------------------------------------------
# Comparing


@dataclass
class WalkComparison:
    """One recorded walk compared with the model: every violation, each with its clause."""

    #: how disagreement lines name the walk (a plan entry id, "init-walk (Initialize)", ...)
    name: str
    walk: TraceWalk
    input: SnapshotInput
    observed: list[ObservedCallback]
    ids: FunctionIdentities
    compare_addresses: bool = False
    closest: WalkOutcome = field(init=False)
    violations: list[Violation] = field(init=False)

    def __post_init__(self) -> None:
        self.closest, self.violations = self.snapshot.closest(
            self.observed,
            self.walk.hr,
            compare_addresses=self.compare_addresses,
            names=self.ids.short_labels(),
        )

    @cached_property
    def snapshot(self) -> Snapshot:
        return snapshot(self.input)

    def relevant(self, clauses: Sequence[str] | None) -> list[Violation]:
        """The violations of ``clauses`` (None: all)."""
        return [v for v in self.violations if clauses is None or v.clause in clauses]

    def lines(self, clauses: Sequence[str] | None = None) -> list[str]:
        """One stable disagreement line per violation of ``clauses``: walk, clause, frame index, what."""
        return [f"{self.name}: {v}" for v in self.relevant(clauses)]

    @property
    def observed_text(self) -> str:
        return summary(self.walk.hr, [self.ids.label(o.func_id) for o in self.observed])

    @property
    def expected_text(self) -> str:
        exact = self.snapshot.exact
        text = summary(exact.hresult, [self.ids.label(c.func_id) for c in exact.callbacks])
        skip = self.snapshot.may_skip_top_managed
        return text + (f" (or up to {skip} top managed frame(s) skipped)" if skip else "")

    def picture(self) -> list[dict[str, Any]]:
        """The observed frames, leaf first, each ok when it is where the closest allowed walk has it and
        no violation names it."""
        exp_ids = [c.func_id for c in self.closest.callbacks]
        aligned = {j for _, j in align(exp_ids, [o.func_id for o in self.observed])}
        bad = {v.index for v in self.violations if v.index is not None}
        return [
            {"label": self.ids.label(o.func_id), "ok": j in aligned and j not in bad}
            for j, o in enumerate(self.observed)
        ]


def compare_walk(
    name: str,
    walk: TraceWalk,
    model_input: SnapshotInput,
    ids: FunctionIdentities,
    names: ObservedNames,
    *,
    compare_addresses: bool = False,
    planned_context_size: int | None = None,
) -> WalkComparison:
    """Compare one recorded walk with the model's answer to ``model_input``.

    ``planned_context_size``: the seed's contextSize in bytes as the plan asked for it
    (:meth:`WalkRequest.context_size`); a walk that passed another size is a DSS-12 disagreement."""
    comparison = WalkComparison(
        name, walk, model_input, observed(walk, ids, names), ids, compare_addresses=compare_addresses
    )
    if planned_context_size is not None:
        passed = walk.arg("contextSize")
        if passed != planned_context_size:
            comparison.violations.append(
                Violation(
                    clause="DSS-12",
                    message=f"the seed's contextSize is {passed}, the plan asked for {planned_context_size}",
                )
            )
    return comparison
