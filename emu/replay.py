"""Replay a capture: unwind it, build the DoStackSnapshot seed, and ask the model what the walk does.

:func:`replay_capture` (``profharness replay CAPTURE... [--json]``) reads a capture file and returns a
:class:`ReplayResult`: every frame with its IP, SP and trust (how it was found), the FunctionID of managed
frames (GetFunctionFromIP over the capture's JIT map), the seed, the callbacks the model
(:mod:`clr_model.stacksnapshot`) predicts for a walk seeded with it, and why the unwind stopped.

The seed follows the documented procedure (DSS-19): GetFunctionFromIP on the context's IP; while it gives
0, walk the native frames; seed from the registers of the first managed frame. The result holds no time,
path or other per-run value, so one capture always replays to byte-identical JSON.

:func:`replay_light` gives the same replay with its frames and the model's callbacks as tuples
(:class:`LightReplay`): a replay's cost is mostly the Python objects made per frame, so a caller that reads
the results of many samples (:func:`recovery_table`) takes those, and :meth:`LightReplay.to_model` builds
the :class:`ReplayResult` (:func:`replay` is ``replay_light(...).to_model()``).

:func:`recovery_table` summarises a folder of captures per place kind: samples, the share where the
replay recovers, leaf first, the managed frames the scenario knows (``known_managed``), and beside it the
share where the live naive-seed walk did.
"""

from __future__ import annotations

import bisect
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import capstone  # type: ignore[import-untyped]
import capstone.x86  # type: ignore[import-untyped]
import numpy as np
from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer

from clr_model.context import (
    AMD64_CONTEXT,
    CONTEXT_AMD64,
    CONTEXT_I386,
    CONTROL,
    INTEGER,
    X86_CONTEXT,
    Arch,
    amd64_layout_for_size,
    runtime_context_layout,
)
from clr_model.errors import InvalidInput
from clr_model.hresults import HResult, format_hresult
from clr_model.stacksnapshot import (
    COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
    Callback,
    ManagedFrame,
    ObservedCallback,
    Os,
    Platform,
    Seed,
    SnapshotInput,
    ThreadModel,
    ThreadState,
    UnmanagedFrame,
    snapshot,
)
from clr_model.words import FROZEN, U64
from emu.capture import (
    Capture,
    CaptureArch,
    KnownCallees,
    KnownFrame,
    LiveRecovery,
    LiveWalk,
    is_runtime_module,
    read_capture,
)
from emu.errors import EmuError, MemoryFault
from emu.memory import CaptureMemory
from emu.unwind import (
    CodeMap,
    RawUnwind,
    StopKind,
    Trust,
    UnwindResult,
    UnwoundFrame,
    looks_like_return_address,
    walk_frames,
)

__all__ = [
    "LightCallback",
    "LightFrame",
    "LightReplay",
    "ModelWalk",
    "RecoveredSeedCheck",
    "RecoveryRow",
    "ReplayFrame",
    "ReplayResult",
    "ReplaySeed",
    "ReplayStop",
    "recovered_leaf_first",
    "recovery_table",
    "render_recovery_table",
    "render_text",
    "replay",
    "replay_capture",
    "replay_light",
    "seed_context",
]



class ReplayFrame(BaseModel):
    model_config = FROZEN
    index: int
    ip: U64
    sp: U64
    trust: Trust
    #: "ready_to_run": ReadyToRun code whose method the JIT map does not list (no FunctionID known)
    kind: Literal["managed", "ready_to_run", "native", "stub"]
    function_id: U64 | None = None
    function: str | None = None
    #: basename of the module file and the IP's offset from the mapping's file start
    module: str | None = None
    module_offset: U64 | None = None
    #: the IP the runtime reports for this frame when it is not ``ip``: the return address its
    #: InlinedCallFrame recorded, for a ReadyToRun frame that called native code and for a top frame
    #: interrupted inside its inlined P/Invoke's transition (see :func:`_reported_ips`)
    reported_ip: U64 | None = None


class ReplaySeed(BaseModel):
    """The seed CONTEXT the documented procedure builds (DSS-19): the first managed frame's registers."""

    model_config = FROZEN
    frame_index: int
    function_id: U64
    ip: U64
    sp: U64
    fp: U64 | None
    #: the runtime's sizeof(CONTEXT) the seed is built for
    context_size: int
    #: frames walked (native) before the first managed frame
    native_frames_skipped: int


class ReplayStop(BaseModel):
    model_config = FROZEN
    kind: StopKind
    detail: str


class ModelWalk(BaseModel):
    """What :mod:`clr_model.stacksnapshot` predicts for DoStackSnapshot seeded with :class:`ReplaySeed`."""

    model_config = FROZEN
    hresult: str
    callbacks: tuple[Callback, ...]
    #: where the model's input is an approximation of the replayed thread
    notes: tuple[str, ...] = ()


#: The model's seed clauses a recovered seed is checked against (docs/seeding.md).
SEED_CLAUSES = ("DSS-06", "DSS-07", "DSS-08", "DSS-19", "DSS-21", "DSS-29")


class RecoveredSeedCheck(BaseModel):
    """The probe's recovered-seed attempt of a capture (``capture --seed recovered``) against the replay."""

    model_config = FROZEN
    #: the probe's outcome (walked, no-managed-frame, park-timeout, not-parked)
    status: str
    #: the walk seeded with it: HRESULT name (None when none ran)
    hresult: str | None
    #: whether that walk recovered the scenario's known managed frames leaf first (None without known frames)
    recovered: bool | None
    #: whether its managed frames equal the replay's (the model walk from the replay's own seed: FunctionIDs
    #: and IPs, leaf first); None when it did not succeed
    agrees: bool | None
    #: whether the recovered seed is the replay's seed (the same frame: IP and SP)
    seed_is_replay_seed: bool | None
    #: the seed and its walk against the model's seed clauses (SEED_CLAUSES), "DSS-nn: message" each
    violations: tuple[str, ...] = ()


class ReplayResult(BaseModel):
    model_config = FROZEN
    capture: str
    place: str
    arch: str
    frames: tuple[ReplayFrame, ...]
    seed: ReplaySeed | None
    model: ModelWalk
    stop: ReplayStop
    emulated_instructions: int
    #: the scenario's known managed frames (FunctionIDs, leaf first), None when the capture has none
    known_managed: tuple[int | str, ...] | None
    #: the scenario's phase at the instant, by its own account (None when it has no phase cell)
    phase: str | None = None
    #: whether the replay recovers them leaf first (None without known frames)
    recovered: bool | None
    #: the live naive-seed walk: HRESULT name and whether it recovered them (None without a live walk)
    live_hresult: str | None
    live_recovered: bool | None
    #: whether the live walk succeeded and its managed frames equal the model's (FunctionIDs and IPs,
    #: leaf first); None without a successful live walk
    live_matches: bool | None = None
    #: the recovered-seed attempt (captures taken with ``--seed recovered``)
    live_recovery: RecoveredSeedCheck | None = None

    @model_serializer(mode="wrap")
    def _without_absent_recovery(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The JSON of a replay without a recovered-seed attempt is what it was before the field existed
        (the committed expected replays, byte-identical replays of older captures)."""
        data = handler(self)
        if isinstance(data, dict) and data.get("live_recovery") is None:
            data.pop("live_recovery", None)
        return data


#: a replayed frame's kind ("ready_to_run": ReadyToRun code whose method the JIT map does not list)
FrameKind = Literal["managed", "ready_to_run", "native", "stub"]


class LightFrame(NamedTuple):
    """A :class:`ReplayFrame`'s fields as a plain tuple, in its order (what :func:`replay_light` gives: one
    per frame, the cheapest object to make; :meth:`LightReplay.to_model` makes the models), but for its
    ``index``, the tuple's place in :attr:`LightReplay.frames`."""

    ip: int
    sp: int
    trust: Trust
    kind: FrameKind
    function_id: int | None
    function: str | None
    module: str | None
    module_offset: int | None
    reported_ip: int | None


class LightCallback(NamedTuple):
    """One StackSnapshotCallback of the model's exact outcome for the replay's seed, as :class:`ModelWalk`
    holds it: ``func_id`` (0 for a run of unmanaged frames), ``ip`` (the IP reported, the recorded one
    where the frame has ``reported_ip``), and the frame's own IP and SP (its FrameContext). The other
    fields of every such callback are the same (clientData 0, the seed's contextSize, S_OK returned,
    the clauses of :mod:`clr_model.stacksnapshot`)."""

    func_id: int
    ip: int
    frame_ip: int
    sp: int


@dataclass(frozen=True, slots=True)
class LightReplay:
    """What :func:`replay` gives, with the frames and the model's callbacks as tuples
    (:class:`LightFrame`, :class:`LightCallback`) rather than pydantic models: for a caller that reads
    them (a table over many samples), not one that renders or serialises them. :meth:`to_model` gives
    the :class:`ReplayResult` :func:`replay` gives, byte for byte (its model walk asked of
    :mod:`clr_model.stacksnapshot` itself)."""

    capture: str
    place: str
    arch: str
    frames: tuple[LightFrame, ...]
    seed: ReplaySeed | None
    #: the model's exact outcome for the seed (DSS-19): its HRESULT's name, its callbacks, its notes
    hresult: str
    callbacks: tuple[LightCallback, ...]
    notes: tuple[str, ...]
    stop: StopKind
    stop_detail: str
    emulated_instructions: int
    known_managed: tuple[int | str, ...] | None
    phase: str | None
    recovered: bool | None
    live_hresult: str | None
    live_recovered: bool | None
    live_matches: bool | None
    #: the model's input beyond the frames and seed: the seed's contextSize and the architecture
    context_size: int
    model_arch: Arch
    live: LiveWalk | None
    #: the probe's recovered-seed attempt, judged in to_model (None without one)
    live_recovery: LiveRecovery | None = None
    names: Mapping[int, str] | None = None
    callees: KnownCallees | None = None

    def to_model(self) -> ReplayResult:
        """The :class:`ReplayResult` of this replay (frames, seed and the model's walk as models)."""
        frames = _frame_models(self.frames)
        model = _model_walk(frames, self.seed, self.place, self.context_size, self.model_arch)
        return ReplayResult(
            capture=self.capture,
            place=self.place,
            arch=self.arch,
            frames=tuple(frames),
            seed=self.seed,
            model=model,
            stop=ReplayStop(kind=self.stop, detail=self.stop_detail),
            emulated_instructions=self.emulated_instructions,
            known_managed=self.known_managed,
            phase=self.phase,
            recovered=self.recovered,
            live_hresult=self.live_hresult,
            live_recovered=self.live_recovered,
            live_matches=_live_matches(self.live, model) if self.live is not None else None,
            live_recovery=_check_recovery(
                self.live_recovery, frames, self.seed, model, self.place, self.context_size,
                self.model_arch is Arch.X86, self.known_managed, self.names or {}, self.callees,
            ) if self.live_recovery is not None else None,
        )  # fmt: skip


_U64_END = 2**64


_Model = TypeVar("_Model", bound=BaseModel)


def _unvalidated(cls: type[_Model], values: dict[str, Any], given: Iterable[str]) -> _Model:
    """The instance of ``cls`` that validating ``values`` would build (every field, in the model's order;
    ``given``: the fields passed rather than defaulted), built without running validation: for values the
    caller has checked to be of the fields' types already. (pydantic's own ``model_construct`` costs more
    than validation; tests/emu/test_replay_fast.py holds the two equal.)"""
    return _built(cls, values, set(given))


_object_new = object.__new__
_object_setattr = object.__setattr__


def _built(cls: type[_Model], values: dict[str, Any], fields_set: set[str]) -> _Model:
    """:func:`_unvalidated` with the set of the fields given made already (one per class, shared by its
    instances built so: pydantic never changes a frozen model's set in place)."""
    obj = _object_new(cls)
    _object_setattr(obj, "__dict__", values)
    _object_setattr(obj, "__pydantic_fields_set__", fields_set)
    _object_setattr(obj, "__pydantic_extra__", None)
    _object_setattr(obj, "__pydantic_private__", None)
    return obj


_REPLAY_FRAME_GIVEN = (
    "index", "ip", "sp", "trust", "kind", "function_id", "function", "module", "module_offset",
)  # fmt: skip
_MANAGED_GIVEN = ("function_id", "ip", "sp")
_UNMANAGED_GIVEN = ("kind", "ip", "sp")
#: the same as sets, one per class, shared by the instances built without validation: pydantic never
#: changes a frozen model's set in place (``model_copy`` copies it first; assignment is refused before)
_REPLAY_FRAME_SET = set(_REPLAY_FRAME_GIVEN)
_MANAGED_SET = set(_MANAGED_GIVEN)
_UNMANAGED_SET = set(_UNMANAGED_GIVEN)


def _replay_frame(
    index: int, ip: int, sp: int, trust: Trust, kind: Literal["managed", "ready_to_run", "native", "stub"],
    function_id: int | None, function: str | None, module: str | None, module_offset: int | None,
) -> ReplayFrame:
    """ReplayFrame(...) built without pydantic's validation when the numbers are u64 ints already (the
    unwinder's always are: validation would give the same object); anything else is validated (and fails
    as it would)."""
    if (
        type(index) is int and type(ip) is int and type(sp) is int
        and 0 <= ip < _U64_END and 0 <= sp < _U64_END
        and (function_id is None or (type(function_id) is int and 0 <= function_id < _U64_END))
        and (module_offset is None or (type(module_offset) is int and 0 <= module_offset < _U64_END))
    ):  # fmt: skip
        return _unvalidated(ReplayFrame, {
            "index": index, "ip": ip, "sp": sp, "trust": trust, "kind": kind, "function_id": function_id,
            "function": function, "module": module, "module_offset": module_offset, "reported_ip": None,
        }, _REPLAY_FRAME_GIVEN)  # fmt: skip
    return ReplayFrame(
        index=index, ip=ip, sp=sp, trust=trust, kind=kind, function_id=function_id, function=function,
        module=module, module_offset=module_offset,
    )  # fmt: skip


def _light_frames(result: RawUnwind) -> list[LightFrame]:
    """The result's frames as :class:`LightFrame` tuples (no ``reported_ip`` yet: see :func:`_reported_ips`),
    the loop written out (one per frame: what a long replay does most)."""
    code = result.code
    names = code.names
    # per module of the map: whether it names a file, the file's base name, the IP's offset from it
    files: dict[int, tuple[bool, str | None, int]] = {}
    make = tuple.__new__
    out: list[LightFrame] = []
    for ip, sp, trust, _registers, fid, mod, r2r in result.frames:
        if mod is None:
            is_file, file_name, offset = False, None, None
        else:
            got = files.get(id(mod))
            if got is None:
                is_file = code.is_file(mod)
                got = files[id(mod)] = (is_file, code.file_name(mod) if is_file else None,
                                        mod.offset - mod.start)  # fmt: skip
            is_file, file_name, delta = got
            offset = ip + delta if is_file else None
        kind: FrameKind
        if fid:
            kind = "managed"
        elif r2r:
            kind = "ready_to_run"
        elif mod is not None and not is_file:
            kind = "stub"
        else:
            kind = "native"
        out.append(make(LightFrame, (ip, sp, trust, kind, fid, names.get(fid) if fid else None, file_name,
                                     offset, None)))  # fmt: skip
    return out


def _frame_models(frames: Sequence[LightFrame]) -> list[ReplayFrame]:
    """Each light frame as its :class:`ReplayFrame`: ``_replay_frame`` of it, the loop written out, then
    ``model_copy(update={"reported_ip": ...})`` where it has one. A frame whose numbers are not u64 ints
    goes through :func:`_replay_frame` (validation, which fails as it would)."""
    built = _built
    fields_set = _REPLAY_FRAME_SET
    out: list[ReplayFrame] = []
    for i, (ip, sp, trust, kind, fid, function, file_name, offset, reported) in enumerate(frames):
        if (
            type(i) is int and type(ip) is int and type(sp) is int and 0 <= ip < _U64_END
            and 0 <= sp < _U64_END and (fid is None or (type(fid) is int and 0 <= fid < _U64_END))
            and (offset is None or (type(offset) is int and 0 <= offset < _U64_END))
        ):  # fmt: skip
            frame = built(ReplayFrame, {
                "index": i, "ip": ip, "sp": sp, "trust": trust, "kind": kind, "function_id": fid,
                "function": function, "module": file_name, "module_offset": offset, "reported_ip": None,
            }, fields_set)  # fmt: skip
        else:
            frame = _replay_frame(i, ip, sp, trust, kind, fid, function, file_name, offset)
        if reported is not None:
            frame = frame.model_copy(update={"reported_ip": reported})
        out.append(frame)
    return out


def _frame_kind(f: UnwoundFrame, file_module: bool) -> Literal["managed", "ready_to_run", "native", "stub"]:
    if f.function_id:
        return "managed"
    if f.ready_to_run:
        return "ready_to_run"
    if f.module is not None and not file_module:
        return "stub"
    return "native"


def _known_ids(known: Sequence[KnownFrame], by_name: Mapping[str, int]) -> list[int | str]:
    out: list[int | str] = []
    for k in known:
        if k.function_id is not None:
            out.append(k.function_id)
        else:
            out.append(by_name.get(k.name, k.name))
    return out


def recovered_leaf_first(
    known: Sequence[int | str],
    managed: Sequence[int],
    names: Mapping[int, str] | None = None,
    callees: KnownCallees | None = None,
) -> bool:
    """The known managed frames, leaf first and in order, are the first managed frames, or follow only
    frames the scenario says may sit above them at this place (``callees``: its own methods there and the
    CoreLib code they call; ``names`` gives each FunctionID's method name)."""
    if not known:
        return False
    top = 0
    if callees is not None:
        names = names or {}
        while top < len(managed) and managed[top] != known[0] and callees.allows(names.get(managed[top])):
            top += 1
    return list(managed[top : top + len(known)]) == list(known)


def _live_recovered(
    live: LiveWalk, known: Sequence[int | str], names: Mapping[int, str], callees: KnownCallees | None
) -> bool:
    if live.hresult != int(HResult.S_OK):
        return False
    return recovered_leaf_first(known, [f.function_id for f in live.frames if f.function_id], names, callees)


def replay(capture: Capture, *, allow_disk: bool = True, max_frames: int = 1024) -> ReplayResult:
    """Replay a capture already read (see the module docstring)."""
    return replay_light(capture, allow_disk=allow_disk, max_frames=max_frames).to_model()


def _layout_size(capture: Capture) -> int:
    """The runtime's sizeof(CONTEXT) the seed is built for (read from the manifest once per capture)."""
    got = capture.cache.get("replay:context_size")
    if type(got) is int:
        return got
    man = capture.manifest
    layout = AMD64_CONTEXT
    if man.arch is CaptureArch.X86:
        layout = X86_CONTEXT  # the x86 CONTEXT: 716 bytes whatever the runtime
    elif man.context is not None:
        layout = runtime_context_layout(man.context.runtime) or amd64_layout_for_size(man.context.size)
    capture.cache["replay:context_size"] = layout.size
    return layout.size


_S_OK_NAME = format_hresult(int(HResult.S_OK))


def replay_light(capture: Capture, *, allow_disk: bool = True, max_frames: int = 1024) -> LightReplay:
    """:func:`replay`, its frames and the model's callbacks as tuples (see :class:`LightReplay`)."""
    man = capture.manifest
    result = walk_frames(capture, allow_disk=allow_disk, max_frames=max_frames)
    code = result.code
    x86 = man.arch is CaptureArch.X86
    frames = _reported_ips(_light_frames(result), result, x86=x86)
    context_size = _layout_size(capture)
    seed: ReplaySeed | None = None
    for i, (ip, sp, _trust, registers, fid, _module, _r2r) in enumerate(result.frames):
        if fid:  # DSS-19: GetFunctionFromIP != 0: the first managed frame seeds the walk
            seed = ReplaySeed(
                frame_index=i, function_id=fid, ip=ip, sp=sp, fp=registers.get("ebp" if x86 else "rbp"),
                context_size=context_size, native_frames_skipped=i,
            )  # fmt: skip
            break
    callbacks = _light_model_walk(frames, seed.frame_index if seed is not None else None)
    known = _known_ids(man.known_managed, code.ids_by_name()) if man.known_managed is not None else None
    managed_ids = [f[4] for f in frames if f[4]]
    live = man.live
    live_matches: bool | None = None
    if live is not None and live.hresult == int(HResult.S_OK):
        live_matches = [(f.function_id, f.ip) for f in live.frames if f.function_id] == [
            (c.func_id, c.ip) for c in callbacks if c.func_id
        ]
    return LightReplay(
        capture=os.path.basename(capture.path or "<memory>"),
        place=man.place,
        arch=man.arch.value,
        frames=tuple(frames),
        seed=seed,
        hresult=_S_OK_NAME,
        callbacks=callbacks,
        notes=_model_notes(sum(1 for f in frames if f[3] == "ready_to_run")),
        stop=result.stop,
        stop_detail=result.detail,
        emulated_instructions=result.emulated_instructions,
        known_managed=tuple(known) if known is not None else None,
        phase=man.known_callees.phase if man.known_callees is not None else None,
        recovered=recovered_leaf_first(known, managed_ids, code.names, man.known_callees)
        if known is not None
        else None,
        live_hresult=format_hresult(live.hresult) if live is not None else None,
        live_recovered=_live_recovered(live, known, code.names, man.known_callees)
        if live is not None and known is not None
        else None,
        live_matches=live_matches,
        context_size=context_size,
        model_arch=Arch.X86 if x86 else Arch.AMD64,
        live=live,
        live_recovery=man.live_recovery,
        names=code.names if man.live_recovery is not None else None,
        callees=man.known_callees,
    )


def _check_recovery(
    rec: LiveRecovery, frames: Sequence[ReplayFrame], replay_seed: ReplaySeed | None, model: ModelWalk,
    place: str, context_size: int, x86: bool, known: Sequence[int | str] | None, names: Mapping[int, str],
    callees: KnownCallees | None,
) -> RecoveredSeedCheck:  # fmt: skip
    """The probe's recovered seed and its walk against the replay of the same capture and the model's seed
    clauses: DSS-19 (the seed's IP is managed code: the replay's frame there has the FunctionID the probe's
    GetFunctionFromIP gave), DSS-21/29 (a seed in JIT code is never refused as unmanaged), DSS-07/08 (the
    walk starts at the seed's frame: the model walk from this seed, compared callback by callback), DSS-06
    (the seed is a CONTEXT of the runtime's layout: the model reads its registers from one)."""
    walk = rec.walk
    hresult = format_hresult(walk.hresult) if walk is not None else None
    ok = walk is not None and walk.hresult == int(HResult.S_OK)
    recovered: bool | None = None
    if known is not None:
        managed = [f.function_id for f in walk.frames if f.function_id] if walk is not None else []
        recovered = ok and recovered_leaf_first(known, managed, names, callees)
    violations: list[str] = []
    seed = rec.seed
    same: bool | None = None
    if seed is not None:
        same = replay_seed is not None and (replay_seed.ip, replay_seed.sp) == (seed.ip, seed.sp)
        at = next((f for f in frames if f.ip == seed.ip and f.sp == seed.sp), None)
        if at is None or not at.function_id:
            violations.append(
                f"DSS-19: seed ip={seed.ip:#x} sp={seed.sp:#x} is not a managed frame of the replay"
            )
        elif at.function_id != seed.function_id:
            violations.append(
                f"DSS-19: GetFunctionFromIP gave {seed.function_id:#x} for the seed, the JIT map "
                f"{at.function_id:#x}"
            )
        refused = walk is not None and walk.hresult == int(HResult.CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX)
        if refused and at is not None and at.function_id:
            violations.append("DSS-21: a seed in JIT-compiled code was refused as unmanaged")
        if walk is not None and at is not None and at.function_id:
            own = ReplaySeed(
                frame_index=at.index, function_id=at.function_id, ip=seed.ip, sp=seed.sp, fp=seed.fp,
                context_size=context_size, native_frames_skipped=at.index,
            )  # fmt: skip
            try:
                snap_input = _model_input(frames, own, place, context_size, Arch.X86 if x86 else Arch.AMD64)
                observed = [
                    ObservedCallback(func_id=f.function_id, ip=f.ip, client_data=0) for f in walk.frames
                ]
                for v in snapshot(snap_input).conforms(observed, walk.hresult, compare_addresses=False):
                    if v.clause in SEED_CLAUSES:
                        violations.append(f"{v.clause}: {v.message}")
            except InvalidInput as exc:
                violations.append(str(exc).splitlines()[0])
    elif rec.status == "walked":
        violations.append("DSS-19: a walk ran without a recovered seed")
    return RecoveredSeedCheck(
        status=rec.status, hresult=hresult, recovered=recovered,
        agrees=_recovered_agrees(walk, model, replay_seed, same) if ok and walk is not None else None,
        seed_is_replay_seed=same, violations=tuple(violations),
    )  # fmt: skip


def _recovered_agrees(
    walk: LiveWalk, model: ModelWalk, replay_seed: ReplaySeed | None, same: bool | None
) -> bool:
    """The recovered-seed walk's managed frames (FunctionIDs and IPs, leaf first) equal the replay's, from
    the replay's seed. The seed's own frame may carry either of two IPs, both from the replay: the seed's
    (the walk started from the seed's registers, DSS-08) or the return address the runtime's Frame recorded
    for it (the replay's reported IP: the runtime walked from its Frame chain, the seed ignored, DSS-07/29;
    observed when the thread was in preemptive mode, e.g. waiting for a GC)."""
    expected = [(c.func_id, c.ip) for c in model.callbacks if c.func_id]
    got = [(f.function_id, f.ip) for f in walk.frames if f.function_id]
    if got == expected:
        return True
    if same and replay_seed is not None and expected and expected[0][0] == replay_seed.function_id:
        expected[0] = (replay_seed.function_id, replay_seed.ip)
    return got == expected


def _light_model_walk(frames: Sequence[LightFrame], first_managed: int | None) -> tuple[LightCallback, ...]:
    """The callbacks of the model's exact outcome (:func:`clr_model.stacksnapshot.snapshot`) for the input
    :func:`_model_walk` gives it, which is always the same kind of input: the current thread interrupted
    by a signal (asynchronous), Unix, COR_PRF_SNAPSHOT_REGISTER_CONTEXT, contextSize the runtime's own,
    the profiler's callback returning S_OK, and the seed (when there is one) the first managed frame. For
    that input every path of the model gives S_OK and one callback per managed frame and one per run of
    unmanaged frames (DSS-03, DSS-15, DSS-16), from the first managed frame on: seeded with a helper on
    top, the walk starts at the seed's frame, the first managed one (DSS-08); otherwise the exact outcome
    starts at the first managed frame too (DSS-07: the seed is ignored; the alternatives DSS-20 and DSS-30
    allow are not the exact outcome). A frame with a ``reported_ip`` gives that IP (as in
    :func:`_model_walk`). tests/emu/test_replay_light.py holds this equal to the model's on every committed
    capture and on generated frame sequences."""
    if first_managed is None:
        return ()
    reported = {(f[4], f[0]): f[8] for f in frames if f[8] is not None}
    make = tuple.__new__
    out: list[LightCallback] = []
    in_run = False
    for k in range(first_managed, len(frames)):
        f = frames[k]
        fid, ip = f[4], f[0]
        if fid:
            shown = reported.get((fid, ip), ip) if reported else ip
            out.append(make(LightCallback, (fid, shown, ip, f[1])))
            in_run = False
        elif not in_run:
            out.append(make(LightCallback, (0, ip, ip, f[1])))
            in_run = True
    return tuple(out)


def _model_notes(ready_to_run: int) -> tuple[str, ...]:
    """Where the model's input is an approximation of the replayed thread (:attr:`ModelWalk.notes`)."""
    if not ready_to_run:
        return ()
    return (
        f"{ready_to_run} ReadyToRun frame(s) without a FunctionID in the JIT map were given to the model "
        "as unmanaged",
    )


#: how far before a frame's return address the runtime's recorded P/Invoke return address may lie
_PINVOKE_BEGIN_WINDOW = 64


def _frame_words(frames: Sequence[LightFrame], i: int, memory: CaptureMemory) -> Iterator[int]:
    """The words of frame ``i``'s own stack area, from its SP up to the next frame's (512 bytes for the
    last frame), up to the first that cannot be read."""
    end = frames[i + 1].sp if i + 1 < len(frames) else frames[i].sp + 512
    for slot in range(frames[i].sp, end, 8):
        try:
            yield memory.read_u64(slot)
        except MemoryFault:
            return


def _reported_ips(
    frames: list[LightFrame], result: UnwindResult | RawUnwind, *, x86: bool = False
) -> list[LightFrame]:
    """The IP the runtime reports for a frame whose InlinedCallFrame is active: a ReadyToRun frame that
    called native code (a P/Invoke or QCall), and (x64) a top frame interrupted in managed code inside its
    inlined P/Invoke's preemptive-mode window (:func:`_top_in_pinvoke_transition`).

    ReadyToRun code enters native code through the JIT_PInvokeBegin helper, which records the
    InlinedCallFrame in the calling frame's locals with the helper call's return address; the runtime's
    walk resumes below the native run from that Frame, so it reports that address (a few bytes before the
    return address of the native call itself). The replay reads it where the runtime does: the word in the
    frame's own stack area that returns into the same method within 64 bytes before the return address."""
    memory, code = result.memory, result.code
    if memory is None:
        return frames
    out = list(frames)
    if not x86 and frames:
        recorded = _top_in_pinvoke_transition(frames, result)
        if recorded is not None:
            out[0] = frames[0]._replace(reported_ip=recorded)
    if not x86:
        for i, word in _funclet_call_sites(frames, memory, code):
            out[i] = frames[i]._replace(reported_ip=word)
    for i in range(1, len(frames)):
        f = frames[i]
        # (by index: f.function_id, its callee's, f.trust; once per frame of every replay)
        if not f[4] or frames[i - 1][4] or f[2] is Trust.CONTEXT:
            continue
        rng = code.method_range(f.ip - 1)
        if rng is None or not code.in_ready_to_run(f.ip - 1):
            continue
        for word in _frame_words(frames, i, memory):
            if (
                f.ip - _PINVOKE_BEGIN_WINDOW <= word < f.ip
                and code.method_range(word - 1) == rng
                and looks_like_return_address(memory, word)
            ):
                out[i] = f._replace(reported_ip=word)
                break
    return out


#: how far above a funclet's SP its return address may lie (bytes): its frame holds only outgoing arguments
#: and the PSPSym copy
_FUNCLET_FRAME_BYTES = 4096


def _funclet_allocated(memory: CaptureMemory, code: CodeMap, start: int, at: int) -> int | None:
    """The stack a funclet's prolog has put below its return address when the thread is at ``at`` (0 at its
    first instruction, 8 after ``push rbp``, 8 + N from the end of ``sub rsp, N`` on), when the code at
    ``start`` is the prolog the x64 JIT gives a funclet that uses the parent's frame (PSPSym):
    ``push rbp; sub rsp, N; mov rbp, [rdi + d]`` (the parent's frame pointer, from the establisher frame
    the runtime passes in RDI); None for any other code or where it is not captured. Decoded once per
    capture (``code.funclet_prologs``)."""
    if start not in code.funclet_prologs:
        code.funclet_prologs[start] = _funclet_prolog(memory, start)
    prolog = code.funclet_prologs[start]
    if prolog is None:
        return None
    sub_end, frame = prolog
    return 0 if at == start else 8 if at < sub_end else 8 + frame


def _funclet_prolog(memory: CaptureMemory, start: int) -> tuple[int, int] | None:
    """(the end of ``sub rsp, N``, N) of the PSPSym funclet prolog at ``start``
    (:func:`_funclet_allocated`)."""
    run = _straight_line(memory, start, start + 16)
    if len(run) < 3:
        return None
    push, sub, load = run[:3]
    x86 = capstone.x86
    if push.id != x86.X86_INS_PUSH or push.operands[0].reg != x86.X86_REG_RBP:
        return None
    if sub.id != x86.X86_INS_SUB or [o.type for o in sub.operands] != [x86.X86_OP_REG, x86.X86_OP_IMM]:
        return None
    if sub.operands[0].reg != x86.X86_REG_RSP or load.id != x86.X86_INS_MOV or len(load.operands) != 2:
        return None
    dst, src = load.operands
    if dst.type != x86.X86_OP_REG or dst.reg != x86.X86_REG_RBP or src.type != x86.X86_OP_MEM:
        return None
    if src.mem.base != x86.X86_REG_RDI or src.mem.index != 0:
        return None
    return sub.address + sub.size, int(sub.operands[1].imm)


def _funclet_call_sites(
    frames: Sequence[LightFrame], memory: CaptureMemory, code: CodeMap
) -> Iterator[tuple[int, int]]:
    """(frame index, the IP the runtime reports for it) of every frame that is a funclet (x64: a ``finally``
    the method's body calls, an exception handler) found by the frame pointer: the return address into the
    parent's body, the funclet's call site (what DSS-07 and DSS-08's judges compare the live walk's first
    frame with, and every frame's IP under DSS-03).

    A funclet's RBP is its parent's frame pointer (:func:`_funclet_allocated`), so the frame-pointer unwind
    goes from the funclet straight to the parent's caller: the replay has one frame for the method, as the
    runtime's walk does, which reports the parent's frame, at the call site, and not the funclet's
    (observed on 8.0.4: a sample in a ``lock`` statement's finally funclet, whose Tier0 body calls it,
    tests/data/captures/rare/8.0.4-finally-funclet.phcap; on top of the stack at the funclet's first
    instruction, its caller's return address on top: 8.0.4-funclet-entry.phcap). The call site is where the
    funclet's prolog put it: the word in the frame's stack area (up to ``_FUNCLET_FRAME_BYTES`` above its
    SP) as many bytes above its SP as the prolog has pushed and allocated there, a return address into the
    same method, before the frame's address, after a ``call rel32`` to a later address of the method, where
    the code is that prolog.

    On the replay's hot path, so the stack is read and unpacked once, and only the few values in it that
    return from a forward ``call rel32`` into JIT code are looked at further; most stacks have none."""
    if len(frames) < 2:
        return
    base = frames[0].sp
    size = (frames[-1].sp - base) & ~7
    try:
        data = memory.read(base, size)
    except MemoryFault:  # up to the first byte the capture lacks
        gap = memory.missing(base, size)
        data = memory.read(base, (gap - base) & ~7) if gap is not None else b""
    words = np.frombuffer(data, dtype="<u8")
    lo, hi = code.jit_span
    values = np.unique(words[(words >= lo + 5) & (words <= hi)]).tolist()
    seen = code.forward_calls  # each return address's call decoded once per capture
    targets: dict[int, int] = {}
    for w in values:
        t = seen.get(w, -1)
        if t == -1:
            t = seen[w] = _forward_call(memory, w)
        if t:
            targets[w] = t
    if not targets:
        return
    sps = [f.sp for f in frames]
    found: set[int] = set()
    for k in np.flatnonzero(np.isin(words, list(targets))).tolist():
        word = int(words[k])
        start = targets[word]
        slot = base + 8 * k
        i = bisect.bisect_right(sps, slot) - 1
        if i in found or not 0 <= i < len(frames) - 1:
            continue
        f, caller = frames[i], frames[i + 1]
        if not f.function_id or caller.trust is not Trust.FRAME_POINTER:
            continue
        if slot >= f.sp + _FUNCLET_FRAME_BYTES:
            continue
        at = f.ip if f.trust is Trust.CONTEXT else f.ip - 1
        rng = code.method_range(at)
        if rng is None or not rng[0] + 5 <= word < at or not start <= at or code.method_range(start) != rng:
            continue
        allocated = _funclet_allocated(memory, code, start, at)
        if allocated is not None and slot == f.sp + allocated:
            found.add(i)
            yield i, word


def _forward_call(memory: CaptureMemory, ret: int) -> int | None:
    """The target of the ``call rel32`` that ends at ``ret`` when it is later than ``ret``, else None."""
    try:
        call = memory.read(ret - 5, 5)
    except MemoryFault:
        return None
    if call[0] != 0xE8:
        return None
    target = ret + int.from_bytes(call[1:], "little", signed=True)
    return target if target > ret else None


#: how far from the return address an inlined P/Invoke's InlinedCallFrame records its GC mode switches lie
#: (bytes): the JIT puts a few instructions between the switch to preemptive mode and the call, and between
#: the return and the switch back; ReadyToRun code, the native call and its arguments between the helpers
_TRANSITION_BYTES = 64

_TRANSFERS = (capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET, capstone.CS_GRP_INT,
              capstone.CS_GRP_IRET)  # fmt: skip


@functools.cache
def _x64() -> Any:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def _straight_line(memory: CaptureMemory, start: int, end: int, *, through_calls: bool = False) -> list[Any]:
    """The instructions decoded from ``start`` while they begin before ``end``, up to and including the
    first control transfer (jump, call, return, interrupt; calls go on with ``through_calls``), [] where
    the bytes are not captured."""
    try:
        data = memory.read(start, end - start + 15)
    except MemoryFault:
        return []
    out: list[Any] = []
    for ins in _x64().disasm(data, start):
        if ins.address >= end:
            break
        out.append(ins)
        if any(ins.group(g) for g in _TRANSFERS) and not (through_calls and ins.group(capstone.CS_GRP_CALL)):
            break
    return out


def _calls_to(memory: CaptureMemory, ret: int) -> list[list[Any]]:
    """Straight-line runs that end with a call returning to ``ret``, starting 2 to 64 bytes before it,
    nearest first."""
    runs = []
    for start in range(ret - 2, ret - _TRANSITION_BYTES, -1):
        run = _straight_line(memory, start, ret)
        if run and run[-1].group(capstone.CS_GRP_CALL) and run[-1].address + run[-1].size == ret:
            runs.append(run)
    return runs


def _mode_store(ins: Any) -> tuple[int, int] | None:
    """``mov byte ptr [reg + disp], imm`` with imm 0 or 1 (the JIT's store to the Thread's GC mode byte,
    m_fPreemptiveGCDisabled): (disp, imm); None for any other instruction."""
    if ins.id != capstone.x86.X86_INS_MOV or len(ins.operands) != 2:
        return None
    dst, src = ins.operands
    if dst.type != capstone.x86.X86_OP_MEM or dst.size != 1 or src.type != capstone.x86.X86_OP_IMM:
        return None
    if dst.mem.base == 0 or dst.mem.index != 0 or src.imm not in (0, 1):
        return None
    return int(dst.mem.disp), int(src.imm)


def _address_of(ins: Any) -> tuple[int, int, int, int] | None:
    """``lea reg, [base + disp]``: (reg, base, index, disp); None for any other instruction."""
    if ins.id != capstone.x86.X86_INS_LEA or len(ins.operands) != 2:
        return None
    reg, mem = ins.operands
    return int(reg.reg), int(mem.mem.base), int(mem.mem.index), int(mem.mem.disp)


def _inline_switch_ips(memory: CaptureMemory, ret: int) -> frozenset[int]:
    """JIT-compiled code switches the Thread's GC mode itself: every instruction after the store that
    switches it to preemptive mode (``mov byte ptr [thread + d], 0``) up to the native call returning to
    ``ret``, and from ``ret`` up to and including the store that switches it back (``mov byte ptr [thread +
    d], 1``, not yet executed there), all straight-line code."""
    after = _straight_line(memory, ret, ret + _TRANSITION_BYTES // 2)
    back = next((k for k, ins in enumerate(after) if (_mode_store(ins) or (0, 0))[1] == 1), None)
    if back is None:
        return frozenset()
    disp = after[back].operands[0].mem.disp
    for before in _calls_to(memory, ret):
        if len(before) >= 2 and _mode_store(before[0]) == (disp, 0):
            return frozenset(ins.address for ins in (*before[1:], *after[: back + 1]))
    return frozenset()


def _helper_pair_ips(memory: CaptureMemory, ret: int) -> frozenset[int]:
    """ReadyToRun code has helpers switch it: ``lea reg, [icf]; call [JIT_PInvokeBegin]`` returns to
    ``ret`` in preemptive mode, then comes the native call, then ``lea reg, [icf]; call [JIT_PInvokeEnd]``
    switches back: every instruction from ``ret`` up to and including that second helper call (not yet
    made there), all straight-line code."""
    # (decoding from a byte inside an instruction can give another ``lea`` before the same call: any will do
    # whose operands the second helper call's ``lea`` repeats)
    icfs = {_address_of(run[-2]) for run in _calls_to(memory, ret) if len(run) >= 2} - {None}
    if not icfs:
        return frozenset()
    after = _straight_line(memory, ret, ret + _TRANSITION_BYTES, through_calls=True)
    calls = [k for k, ins in enumerate(after) if ins.group(capstone.CS_GRP_CALL)]
    for k in calls[1:]:  # the first call is the native one
        if _address_of(after[k - 1]) in icfs:
            return frozenset(ins.address for ins in after[: k + 1])
    return frozenset()


def _top_in_pinvoke_transition(frames: Sequence[LightFrame], result: UnwindResult | RawUnwind) -> int | None:
    """The return address the top frame's InlinedCallFrame recorded, when the thread was interrupted in
    managed code while in an inlined P/Invoke's preemptive mode (:func:`_inline_switch_ips`,
    :func:`_helper_pair_ips`). Its IP is managed code, but the runtime sees a thread in preemptive mode: it
    throws the seed out and walks from the Frame chain, whose first Frame is that InlinedCallFrame, so it
    reports the frame at the recorded return address (DSS-07: the seed is ignored; the walk starts where it
    would without one). The replay finds it as in :func:`_reported_ips`: a word of the frame's own stack
    area that returns into the same method near the IP."""
    memory, code = result.memory, result.code
    top = frames[0]
    if memory is None or not top.function_id or top.trust is not Trust.CONTEXT:
        return None
    rng = code.method_range(top.ip)
    if rng is None:
        return None
    for word in _frame_words(frames, 0, memory):
        if (
            abs(word - top.ip) <= _TRANSITION_BYTES
            and code.method_range(word - 1) == rng
            and looks_like_return_address(memory, word)
            and (top.ip in _inline_switch_ips(memory, word) or top.ip in _helper_pair_ips(memory, word))
        ):
            return word
    return None


def _live_matches(live: LiveWalk, model: ModelWalk) -> bool | None:
    if live.hresult != int(HResult.S_OK):
        return None
    live_frames = [(f.function_id, f.ip) for f in live.frames if f.function_id]
    return live_frames == [(c.func_id, c.ip) for c in model.callbacks if c.func_id]


def seed_context(seed: ReplaySeed) -> bytes:
    """The seed as CONTEXT bytes of the runtime's size (CONTROL | INTEGER; Rip, Rsp, Rbp). A seed of
    716 bytes is an x86 seed (no AMD64 CONTEXT is that small): the x86 CONTEXT with Eip, Esp, Ebp."""
    if seed.context_size == X86_CONTEXT.size:
        x86 = {"ContextFlags": CONTEXT_I386 | CONTROL | INTEGER, "Eip": seed.ip, "Esp": seed.sp}
        if seed.fp is not None:
            x86["Ebp"] = seed.fp
        return X86_CONTEXT.pack(x86)
    layout = amd64_layout_for_size(seed.context_size)
    values = {"ContextFlags": CONTEXT_AMD64 | CONTROL | INTEGER, "Rip": seed.ip, "Rsp": seed.sp}
    if seed.fp is not None:
        values["Rbp"] = seed.fp
    return layout.pack(values)


def _model_walk(
    frames: Sequence[ReplayFrame],
    seed: ReplaySeed | None,
    place: str,
    context_size: int,
    arch: Arch = Arch.AMD64,
) -> ModelWalk:
    inp = _model_input(frames, seed, place, context_size, arch)
    snap = snapshot(inp)
    # the IP the runtime reports for a frame is the one its InlinedCallFrame recorded, where there is one
    reported = {(f.function_id, f.ip): f.reported_ip for f in frames if f.reported_ip is not None}
    callbacks = snap.callbacks
    if reported:
        callbacks = tuple(
            c.model_copy(update={"ip": reported[(c.func_id, c.ip)]}) if (c.func_id, c.ip) in reported else c
            for c in callbacks
        )
    notes = _model_notes(sum(1 for f in frames if f.kind == "ready_to_run"))
    return ModelWalk(hresult=format_hresult(snap.hresult), callbacks=callbacks, notes=notes)




def _model_input(
    frames: Sequence[ReplayFrame],
    seed: ReplaySeed | None,
    place: str,
    context_size: int,
    arch: Arch = Arch.AMD64,
) -> SnapshotInput:
    thread: list[ManagedFrame | UnmanagedFrame] = []
    top_run = True
    built = _built
    helper_place = place.startswith("helper")
    # the model's input frames are built without validation where their numbers are u64 ints (the
    # unwinder's always are); anything else is validated, and fails, as it always did
    for f in frames:
        ip, sp, fid = f.ip, f.sp, f.function_id
        valid = type(ip) is int and type(sp) is int and 0 <= ip < _U64_END and 0 <= sp < _U64_END
        if fid:
            if valid and type(fid) is int and 0 < fid < _U64_END:
                thread.append(built(ManagedFrame, {"kind": "managed", "function_id": fid, "ip": ip, "sp": sp,
                                                   "in_jit_code": True}, _MANAGED_SET))  # fmt: skip
            else:
                thread.append(ManagedFrame(function_id=fid, ip=ip, sp=sp))
            top_run = False
            continue
        kind: Literal["native", "pinvoke", "helper"] = "native"
        if top_run and (helper_place or f.kind == "stub" or is_runtime_module(f.module or "")):
            kind = "helper"
        if valid:
            thread.append(built(UnmanagedFrame, {"kind": kind, "ip": ip, "sp": sp}, _UNMANAGED_SET))
        else:
            thread.append(UnmanagedFrame(kind=kind, ip=ip, sp=sp))
    # ThreadModel(frames=...) gives these very frames back (instances are not validated again): built so
    return SnapshotInput(
        thread=built(ThreadModel, {"frames": tuple(thread)}, {"frames"}),
        state=ThreadState.CURRENT_SIGNAL_INTERRUPTED,
        info_flags=COR_PRF_SNAPSHOT_REGISTER_CONTEXT,
        seed=Seed(ip=seed.ip, sp=seed.sp, in_managed_code=True) if seed is not None else None,
        context_size=context_size,
        platform=Platform(os=Os.UNIX, arch=arch, context_size=context_size),
    )


def replay_capture(path: str | os.PathLike[str], *, allow_disk: bool = True) -> ReplayResult:
    """Read the capture at ``path`` and replay it (:class:`~emu.errors.CaptureFormatError` if unreadable)."""
    return replay(read_capture(path), allow_disk=allow_disk)


def render_text(result: ReplayResult) -> str:
    """Frames, trust per frame, the seed, the model's callbacks and the stop reason, for a terminal."""
    lines = [f"{result.capture}: place {result.place}, {len(result.frames)} frame(s), {result.arch}"]
    for f in result.frames:
        where = f.function or (
            f"{f.module}+{f.module_offset:#x}" if f.module and f.module_offset is not None else f.kind
        )
        fid = f" FunctionID {f.function_id:#x}" if f.function_id else ""
        if f.reported_ip is not None:
            fid += f" (reported at {f.reported_ip:#x})"
        lines.append(f"  #{f.index:<3} ip {f.ip:#018x} sp {f.sp:#018x}  {f.trust.value:<13} {where}{fid}")
    lines.append(f"  stop: {result.stop.kind.value}: {result.stop.detail}")
    if result.emulated_instructions:
        lines.append(f"  emulated: {result.emulated_instructions} instruction(s)")
    if result.seed is None:
        lines.append("  seed: none (no managed frame)")
    else:
        s = result.seed
        fp = f" rbp {s.fp:#x}" if s.fp is not None else ""
        lines.append(
            f"  seed: frame #{s.frame_index} FunctionID {s.function_id:#x} rip {s.ip:#x} rsp {s.sp:#x}{fp} "
            f"(CONTEXT {s.context_size} bytes, {s.native_frames_skipped} native frame(s) walked)"
        )
    shown = " > ".join("[unmanaged]" if c.func_id == 0 else f"{c.func_id:#x}" for c in result.model.callbacks)
    lines.append(
        f"  model: {result.model.hresult}, {len(result.model.callbacks)} callback(s): {shown or '-'}"
    )
    if result.known_managed is not None:
        lines.append(f"  known managed frames recovered leaf first: {'yes' if result.recovered else 'NO'}")
    if result.live_hresult is not None:
        live = (
            ""
            if result.live_recovered is None
            else f" (recovered: {'yes' if result.live_recovered else 'no'})"
        )
        lines.append(f"  live naive-seed walk: {result.live_hresult}{live}")
    rec = result.live_recovery
    if rec is not None:
        known = "" if rec.recovered is None else f" (recovered: {'yes' if rec.recovered else 'no'})"
        agrees = "" if rec.agrees is None else f", agrees with the replay: {'yes' if rec.agrees else 'NO'}"
        same = "" if rec.seed_is_replay_seed is None else (
            f", seed {'is' if rec.seed_is_replay_seed else 'is NOT'} the replay's")
        lines.append(f"  live recovered-seed walk: {rec.hresult or rec.status}{known}{agrees}{same}")
        lines.extend(f"    {v}" for v in rec.violations)
    return "\n".join(lines)



class RecoveryRow(BaseModel):
    model_config = FROZEN
    place: str
    samples: int
    #: samples whose replay recovers the known managed frames leaf first, and the share (0..1)
    recovered: int
    recovered_share: float
    #: samples with a live naive-seed walk, those that recovered the known frames, and the share
    live_samples: int
    live_recovered: int
    live_share: float | None
    #: samples whose capture could not be read or replayed (counted as not recovered)
    failed: int
    #: samples with a recovered-seed attempt, those whose walk recovered the known frames, and the share
    recovered_seed_samples: int = 0
    recovered_seed_recovered: int = 0
    recovered_seed_share: float | None = None
    #: of those, the successful walks whose managed frames equal the replay's, and the share of attempts
    agree: int = 0
    agree_share: float | None = None
    #: attempts whose seed or walk broke one of the model's seed clauses
    seed_violations: int = 0


def recovery_table(paths: Iterable[str | os.PathLike[str]]) -> tuple[RecoveryRow, ...]:
    """Per place kind over captures (files, or folders searched for ``*.phcap``): samples, replay recovery
    of the known managed frames leaf first, and the live naive-seed success beside it."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        files.extend(sorted(path.rglob("*.phcap")) if path.is_dir() else [path])
    acc: dict[str, list[int]] = {}
    zero = [0, 0, 0, 0, 0, 0, 0, 0, 0]
    for f in files:
        try:
            res = replay_light(read_capture(f))
            # the recovered seed is judged against the model (to_model); the light path has no model
            check = res.to_model().live_recovery if res.live_recovery is not None else None
        except EmuError:
            try:
                place = read_capture(f).manifest.place
            except EmuError:
                place = "unreadable"
            row = acc.setdefault(place, list(zero))
            row[0] += 1
            row[4] += 1
            continue
        row = acc.setdefault(res.place, list(zero))
        row[0] += 1
        row[1] += bool(res.recovered)
        if res.live_recovered is not None:
            row[2] += 1
            row[3] += res.live_recovered
        if check is not None:
            row[5] += 1
            row[6] += bool(check.recovered)
            row[7] += bool(check.agrees)
            row[8] += bool(check.violations)
    out = []
    for place in sorted(acc):
        n, rec, ln, lrec, failed, rn, rrec, agree, bad = acc[place]
        out.append(
            RecoveryRow(
                place=place, samples=n, recovered=rec, recovered_share=rec / n if n else 0.0,
                live_samples=ln, live_recovered=lrec, live_share=lrec / ln if ln else None, failed=failed,
                recovered_seed_samples=rn, recovered_seed_recovered=rrec,
                recovered_seed_share=rrec / rn if rn else None, agree=agree,
                agree_share=agree / rn if rn else None, seed_violations=bad,
            )
        )  # fmt: skip
    return tuple(out)


def render_recovery_table(rows: Sequence[RecoveryRow]) -> str:
    """The table; with the columns of the recovered seed when some capture has a recovered-seed attempt:
    its success (known frames recovered), its agreement with the replay, and the attempts that broke a
    seed clause."""
    w = max([24, *(len(r.place) + 1 for r in rows)])
    seeded = any(r.recovered_seed_samples for r in rows)
    head = f"{'place':<{w}} {'samples':>7} {'replay recovered':>17} {'live naive seed':>16}"
    if seeded:
        head += f" {'live recovered seed':>20} {'agrees w/ replay':>17} {'seed clauses':>13}"
    head += f" {'failed':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        live = f"{r.live_share:.1%}" if r.live_share is not None else "n/a"
        line = f"{r.place:<{w}} {r.samples:>7} {r.recovered_share:>17.1%} {live:>16}"
        if seeded:
            rec = f"{r.recovered_seed_share:.1%}" if r.recovered_seed_share is not None else "n/a"
            agree = f"{r.agree_share:.1%}" if r.agree_share is not None else "n/a"
            bad = f"{r.seed_violations} broken" if r.seed_violations else "ok"
            line += f" {rec:>20} {agree:>17} {bad:>13}"
        lines.append(f"{line} {r.failed:>6}")
    return "\n".join(lines)
