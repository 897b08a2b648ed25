"""The rules the validator holds a profiler to, over one recording (:class:`~.recording.Recording`).

Each rule registers with the clauses it judges (:func:`rule`, into the one registry
:mod:`conformance.core.registry`): ids of the catalog (``profharness clauses --layer validator``), the
four documents' clauses or, for what they do not cover (crashes, hangs, a profiler's lifecycle), the
harness's own ``VAL-*`` rules. A finding (:class:`conformance.core.findings.Finding`) names one of its
rule's clauses, the OS thread, the callback (or hook) that was running, and the seqs of the trace records
that are its evidence.

The hooks the profiler registered go to the hook checker (:func:`hook_abi`, the ``hook`` layer's rules,
FE2-06/08/09/10/12, see :mod:`~.hooks`); :func:`check_recording` leaves it to the caller (it is asked once
per hook however many runs registered it).

Model checkers reused: :func:`clr_model.moved_refs.check_gc_events` (MR2-09, MR2-17) and
:func:`clr_model.async_safety.check` (DSS-23, DSS-24). The rest are read here from the recording.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from clr_model import api, async_safety
from clr_model.api import BufferShape, Fact, HookKind
from clr_model.clauses import Layer
from clr_model.errors import InvalidInput
from clr_model.events import InfoCall, ProfilerCallback, begins, int_arg
from clr_model.hresults import hresult_failed
from clr_model.moved_refs import check_gc_events
from conformance.core import registry
from conformance.core.errors import HarnessError
from conformance.core.findings import Finding
from conformance.core.hangs import ThreadReport
from conformance.core.runner import RunOutcome, RunResult
from conformance.core.trace import CallbackRecord, CallRecord, MarkRecord, ProbeErrorRecord
from conformance.validator.hooks import HookChecks, fault_line, registered_hooks
from conformance.validator.recording import Recording

#: The hook registrations whose tailcall hook must not be NULL when an enter or leave hook is set
#: (VAL-NULL-TAILCALL): the FunctionEnter2-style, fast-path and slow-path ones.
_NULL_TAILCALL_KINDS = (
    HookKind.FUNCTION_ENTER2,
    HookKind.FUNCTION_ENTER3,
    HookKind.FUNCTION_ENTER3_WITH_INFO,
)


@dataclass
class RuleContext:
    """What a rule reads: the recording and its run."""

    rec: Recording
    run: RunResult

    def finding(
        self,
        clause: str,
        message: str,
        records: list[int],
        *,
        thread: int | None = None,
        callback: str | None = None,
    ) -> Finding:
        return Finding.of(self.run, clause, message, records, thread=thread, callback=callback)

    def at(self, clause: str, index: int, message: str, more: list[int] | None = None) -> Finding:
        ev = self.rec.events[index]
        return self.finding(
            clause, message, [ev.seq, *(more or [])], thread=ev.thread, callback=self.rec.callback_at(index)
        )


def finding_at(rec: Recording, run: RunResult, clause: str, index: int, message: str) -> Finding:
    """A finding at event ``index`` of ``rec``: its record, thread and the callback it happened in."""
    return RuleContext(rec, run).at(clause, index, message)


Rule = Callable[["RuleContext"], Iterator[Finding]]


def rule(*clauses: str, what: str) -> Callable[[Rule], Rule]:
    """Register a validator rule for ``clauses`` (the one registry, :mod:`conformance.core.registry`)."""
    return registry.rule(*clauses, layer=Layer.VALIDATOR, what=what)


# --- buffers (BUF-04, BUF-08) ---------------------------------------------------------------------------


@rule("BUF-04", what="a NULL buffer goes with a size of 0")
def null_buffer_with_size(c: RuleContext) -> Iterator[Finding]:
    """BUF-04: a NULL buffer goes with a size of 0 (every caller-allocated buffer of the API table)."""
    table = api.buffer_methods()
    for i, ev in enumerate(c.rec.events):
        if isinstance(ev, InfoCall) and ev.name in table and begins(ev):
            params = table[ev.name]
            size, buf = int_arg(ev.args, params.size), int_arg(ev.args, params.buffer)
            if buf == 0 and size:
                yield c.at("BUF-04", i, f"{ev.name} with {params.buffer}=NULL and {params.size}={size}")


def _identity(ev: InfoCall, params: BufferShape) -> tuple[object, ...]:
    """What a retry of the same question repeats: the by-value arguments except the buffer's own."""
    skip = {params.size, params.buffer, params.count}
    return tuple(
        sorted(
            (k, v)
            for k, v in ev.args.items()
            if k not in skip and not k.startswith("p") and isinstance(v, int | str)
        )
    )


@rule("BUF-08", what="a truncated answer (*pcX > cX) is asked again with a large enough buffer")
def truncated_without_retry(c: RuleContext) -> Iterator[Finding]:
    """BUF-08: *pcX > cX means the answer was truncated: allocate *pcX and call again."""
    table = api.buffer_methods()
    events = c.rec.events
    for i, ev in enumerate(events):
        if not (isinstance(ev, InfoCall) and ev.name in table and ev.phase != "enter"):
            continue
        params = table[ev.name]
        size, buf = int_arg(ev.args, params.size), int_arg(ev.args, params.buffer)
        needed = int_arg(ev.out, params.count)
        if not size or not buf or needed is None or needed <= size:
            continue
        key = _identity(ev, params)
        retried = any(
            isinstance(later, InfoCall)
            and later.name == ev.name
            and later.thread == ev.thread
            and _identity(later, params) == key
            and (int_arg(later.args, params.size) or 0) >= needed
            for later in events[i + 1 :]
        )
        if not retried:
            yield c.at(
                "BUF-08",
                i,
                f"{ev.name} answered {params.count}={needed} for {params.size}={size} "
                "(truncated) and was not called again with a large enough buffer",
            )


# --- walks (DSS-13, DSS-19, DSS-22) and the model's DSS-23/24 ---------------------------------------------


@rule("DSS-13", "DSS-19", "DSS-22",
      what="cross-thread walks only while suspended; a seed in JIT-compiled code; SuspendRuntime not from "
      "a managed thread")  # fmt: skip
def walks_and_suspension(c: RuleContext) -> Iterator[Finding]:
    suspended_by: dict[int, int] = {}  # thread -> seq of its SuspendRuntime that succeeded
    gc_suspended = False
    for i, ev in enumerate(c.rec.events):
        if isinstance(ev, ProfilerCallback):
            if ev.name == "RuntimeSuspendFinished" and begins(ev):
                gc_suspended = True
            elif ev.name == "RuntimeResumeStarted" and begins(ev):
                gc_suspended = False
            continue
        if not isinstance(ev, InfoCall):
            continue
        if ev.name == "SuspendRuntime" and begins(ev) and ev.thread in c.rec.managed_threads:
            yield c.at("DSS-22", i, f"SuspendRuntime from thread {ev.thread}, which runs managed code")
        if (
            ev.name == "SuspendRuntime"
            and ev.phase != "enter"
            and ev.hr is not None
            and not hresult_failed(ev.hr)
        ):
            suspended_by[ev.thread] = ev.seq
        elif ev.name == "ResumeRuntime" and ev.phase != "enter":
            suspended_by.pop(ev.thread, None)
        elif ev.name == "DoStackSnapshot" and begins(ev):
            target = int_arg(ev.args, "thread")
            if target and target != ev.thread and not suspended_by and not gc_suspended:
                yield c.at(
                    "DSS-13",
                    i,
                    f"DoStackSnapshot of thread {target} from thread {ev.thread} while the "
                    "target is not suspended (no SuspendRuntime in force)",
                )
            seed = ev.args.get("seed")
            if isinstance(seed, dict) and not int_arg(seed, "functionId"):
                rip = int_arg(seed, "rip") or 0
                yield c.at(
                    "DSS-19",
                    i,
                    f"DoStackSnapshot seeded at {rip:#x}, outside JIT-compiled code "
                    "(GetFunctionFromIP gives no FunctionID)",
                )


@rule("DSS-23", "DSS-24", "VAL-LOAD", what="asynchronous-walk safety by clr_model.async_safety")
def model_async_rules(c: RuleContext) -> Iterator[Finding]:
    """DSS-23 and DSS-24 by clr_model.async_safety (DSS-22/25 need native suspensions it cannot see)."""
    try:
        violations = async_safety.check(c.rec.events)
    except InvalidInput as err:
        yield c.finding("VAL-LOAD", f"the recording cannot be judged for DSS-23/24: {err}", [])
        return
    for v in violations:
        if v.clause in ("DSS-23", "DSS-24") and v.index is not None:
            yield c.at(v.clause, v.index, v.message)


# --- the GC (MR2-09, MR2-13, MR2-17, VAL-QI-IN-GC) ----------------------------------------------------


@rule("MR2-09", "MR2-17", "VAL-LOAD",
      what="no inspection during MovedReferences2; earlier ObjectIDs remapped, by clr_model.moved_refs")
def model_gc_rules(c: RuleContext) -> Iterator[Finding]:
    level = c.rec.callback_level
    try:
        violations = check_gc_events(c.rec.events, implements_callback4=level >= 4 or level == 0)
    except InvalidInput as err:
        yield c.finding("VAL-LOAD", f"the recording cannot be judged for MR2-09/17: {err}", [])
        return
    for v in violations:
        if v.clause in ("MR2-09", "MR2-17") and v.index is not None:
            yield c.at(v.clause, v.index, v.message)


@rule("MR2-13", what="a profiler without ICorProfilerCallback4 gets MovedReferences (32-bit lengths)")
def only_callback3(c: RuleContext) -> Iterator[Finding]:
    """MR2-13: a profiler without ICorProfilerCallback4 gets MovedReferences, whose ULONG lengths cannot say
    how long a block of 4 GiB or more is."""
    level = c.rec.callback_level
    if not 0 < level < 4:
        return
    for i, ev in enumerate(c.rec.events):
        if isinstance(ev, ProfilerCallback) and ev.name == "MovedReferences" and begins(ev):
            yield c.at(
                "MR2-13",
                i,
                f"the profiler implements callbacks only up to ICorProfilerCallback{level}: "
                "the runtime falls back to MovedReferences with 32-bit lengths",
            )
            return


@rule("VAL-QI-IN-GC", what="no QueryInterface on ICorProfilerInfo inside a GC callback")
def query_interface_in_gc(c: RuleContext) -> Iterator[Finding]:
    for i, ev in enumerate(c.rec.events):
        if isinstance(ev, InfoCall) and ev.name == "QueryInterface":
            inside = [name for name in c.rec.context[i] if name in api.names_with(Fact.GC)]
            if inside:
                yield c.at("VAL-QI-IN-GC", i, f"QueryInterface on ICorProfilerInfo inside {inside[-1]}")


# --- hooks (FE2-10, FE2-11, VAL-NULL-TAILCALL) ----------------------------------------------------------


@rule("FE2-10", "FE2-11", what="a hook calls nothing that blocks or triggers a GC")
def calls_from_hooks(c: RuleContext) -> Iterator[Finding]:
    for i, ev in enumerate(c.rec.events):
        if not (isinstance(ev, InfoCall) and begins(ev)):
            continue
        hooks = [name for name in c.rec.context[i] if name in c.rec.hook_names]
        if not hooks:
            continue
        if ev.triggers_gc:
            yield c.at("FE2-11", i, f"{hooks[-1]} hook calls {ev.name}, which triggers a garbage collection")
        elif ev.name in api.names_with(Fact.BLOCKS):
            yield c.at("FE2-10", i, f"{hooks[-1]} hook calls {ev.name}, which blocks")


@rule("VAL-NULL-TAILCALL", what="enter/leave hooks come with a tailcall hook")
def null_tailcall_hook(c: RuleContext) -> Iterator[Finding]:
    registrations = {r.method: r.parameters for r in api.hook_registrations(_NULL_TAILCALL_KINDS)}
    for i, ev in enumerate(c.rec.events):
        if isinstance(ev, InfoCall) and ev.name in registrations and begins(ev):
            enter, leave, tail = (ev.args.get(n) for n in registrations[ev.name])

            def address(h: object) -> int:
                return int_arg(h, "address") or 0 if isinstance(h, dict) else 0

            if (address(enter) or address(leave)) and not address(tail):
                yield c.at(
                    "VAL-NULL-TAILCALL",
                    i,
                    f"{ev.name} with a NULL tailcall hook: a tail call jumps to address 0",
                )


# --- lifecycle ------------------------------------------------------------------------------------------


@rule("VAL-AFTER-SHUTDOWN", "VAL-RELEASED-INFO",
      what="no ICorProfilerInfo call after Shutdown or after the last Release")
def after_shutdown_and_release(c: RuleContext) -> Iterator[Finding]:
    """VAL-AFTER-SHUTDOWN: a call after Shutdown returned, made outside any callback (a call inside a
    callback the runtime still makes after Shutdown, as 3.1 does with ThreadCreated, answers the runtime);
    VAL-RELEASED-INFO: a call through the wrapper after its last reference was released."""
    released_at: int | None = None
    reported_release = reported_shutdown = False
    open_on: dict[int, int] = {}  # OS thread -> callbacks (and hooks) open on it
    for record in c.rec.trace.records:
        if isinstance(record, CallbackRecord):
            phase = (record.model_extra or {}).get("phase")
            if phase == "enter":
                open_on[record.os_tid] = open_on.get(record.os_tid, 0) + 1
            elif phase == "return":
                open_on[record.os_tid] = max(0, open_on.get(record.os_tid, 0) - 1)
            continue
        if not isinstance(record, CallRecord):
            continue
        extra = record.model_extra or {}
        if record.name == "Release" and (int_arg(record.out, "refs") or 0) <= 0:
            released_at = record.seq
            continue
        if record.name == "QueryInterface" and record.hr == 0:
            released_at = None
            continue
        if extra.get("afterShutdown") is True and not reported_shutdown and not open_on.get(record.os_tid):
            reported_shutdown = True
            yield c.finding(
                "VAL-AFTER-SHUTDOWN",
                f"{record.name} called after Shutdown returned",
                [record.seq],
                thread=record.os_tid,
            )
        if released_at is not None and not reported_release and not record.name.startswith("ICorProfiler"):
            reported_release = True
            yield c.finding(
                "VAL-RELEASED-INFO",
                f"{record.name} called through an ICorProfilerInfo the "
                f"profiler released (record {released_at})",
                [released_at, record.seq],
                thread=record.os_tid,
            )


def _note(c: RuleContext, name: str) -> MarkRecord | None:
    found = c.rec.notes.get(name)
    return found[-1] if found else None


@rule("VAL-THREAD-AT-SHUTDOWN", "VAL-ENUM-LEAK",
      what="no profiler thread alive and no enumerator unreleased at Shutdown")
def shutdown_leftovers(c: RuleContext) -> Iterator[Finding]:
    note = _note(c, "proxy.shutdown")
    if note is None:
        return
    extra = note.model_extra or {}
    alive = extra.get("profilerThreadsAlive") or []
    if alive:
        yield c.finding(
            "VAL-THREAD-AT-SHUTDOWN",
            f"profiler thread(s) {alive} still run after Shutdown "
            "returned (3.1 destroys the profiler under them; 8.0 never releases it)",
            [note.seq],
            thread=alive[0] if isinstance(alive[0], int) else None,
        )
    leaks = extra.get("liveEnumerators") or []
    if leaks:
        made = [
            r.seq
            for r in c.rec.trace.records
            if isinstance(r, CallRecord) and r.name == "EnumThreads" and r.out.get("enumerator") in leaks
        ]
        yield c.finding(
            "VAL-ENUM-LEAK", f"{len(leaks)} ICorProfilerThreadEnum never released", [*made, note.seq]
        )


# --- crashes, hangs, loading ----------------------------------------------------------------------------


def _stack_text(frames: object, limit: int = 6) -> str:
    if not isinstance(frames, list):
        return ""
    parts = []
    for f in frames[:limit]:
        if isinstance(f, dict):
            parts.append(str(f.get("symbol") or f"{f.get('module', '?')}+{int_arg(f, 'offset') or 0:#x}"))
    return " < ".join(parts)


def _thread_line(t: ThreadReport) -> str:
    """One thread of a watchdog report: ``tid name: callback in call (three innermost native frames)``."""
    where = t.open_callback or t.last_callback or "-"
    call = f" in {t.open_call}" if t.open_call else ""
    return f"{t.os_tid} {t.name}: {where}{call} ({' < '.join(t.frames[:3]) or 'no stack'})"


@rule("VAL-CRASH", "VAL-HANG", "VAL-LOAD", what="the process neither crashes nor hangs under the profiler")
def crashes_and_hangs(c: RuleContext) -> Iterator[Finding]:
    crash, hang = _note(c, "proxy.crash"), _note(c, "proxy.hang")
    if crash is not None:
        extra = crash.model_extra or {}
        callbacks = extra.get("callbacks") or []
        callback = callbacks[-1] if isinstance(callbacks, list) and callbacks else None
        where = f"in {callback}" if callback else "outside any callback"
        initialized = any(isinstance(e, ProfilerCallback) and e.name == "Initialize" for e in c.rec.events)
        if extra.get("shutdownReturned") is True:
            where += ", after Shutdown returned"
        elif not initialized:
            where += ", before Initialize (while the profiler was being created)"
        call = f", inside {extra.get('call')}" if extra.get("call") else ""
        yield c.finding(
            "VAL-CRASH",
            f"{extra.get('signal')} {where}{call} on thread {crash.os_tid}; stack: "
            f"{_stack_text(extra.get('stack'))}",
            [crash.seq],
            thread=crash.os_tid,
            callback=str(callback) if callback else None,
        )
    if hang is not None:
        extra = hang.model_extra or {}
        stuck = int_arg(extra, "stuckOsTid")
        threads = extra.get("threads") or []
        stuck_cb = None
        lines = []
        for th in threads if isinstance(threads, list) else []:
            if not isinstance(th, dict):
                continue
            cbs = th.get("callbacks") or []
            last = cbs[-1] if cbs else th.get("lastCallback")
            if th.get("osTid") == stuck and cbs:
                stuck_cb = cbs[-1]
            lines.append(f"{th.get('osTid')}: {last or '-'} ({_stack_text(th.get('stack'), 3)})")
        yield c.finding(
            "VAL-HANG",
            f"a callback ran {extra.get('busyMs')} ms (limit {extra.get('limitMs')} ms) on "
            f"thread {stuck}; threads: " + "; ".join(lines),
            [hang.seq],
            thread=stuck,
            callback=str(stuck_cb) if stuck_cb else None,
        )
    if crash is None and hang is None and c.run.outcome is not RunOutcome.OK:
        open_cbs = _open_callbacks(c.rec)
        hung = c.run.outcome is RunOutcome.HUNG
        detail = "; ".join(f"thread {t}: {' > '.join(s)}" for t, s in open_cbs.items()) or "no callback open"
        thread, callback = next(iter(open_cbs), None), next(iter(open_cbs.values()))[-1] if open_cbs else None
        threads = ""
        if hung:
            # the harness's watchdog fired, not the proxy's (nothing the proxy tracks stayed open, e.g. a
            # profiler thread stuck in SuspendRuntime outside any callback): its report of every thread
            threads = "; threads: " + (
                "; ".join(_thread_line(t) for t in c.run.threads)
                or (c.run.threads_problem or "none reported")
            )
            blocked = next((t for t in c.run.threads if t.open_callback or t.open_call), None)
            if thread is None and blocked is not None:
                thread, callback = blocked.os_tid, blocked.open_callback
        yield c.finding(
            "VAL-HANG" if hung else "VAL-CRASH",
            f"the process {c.run.describe_failure().split(' on ', 1)[-1]}; open callbacks: {detail}{threads}",
            [],
            thread=thread,
            callback=callback,
        )
    for record in c.rec.trace.records:
        if isinstance(record, ProbeErrorRecord):
            yield c.finding("VAL-LOAD", f"{record.what} ({record.where})", [record.seq], thread=record.os_tid)


@rule("VAL-LOAD", what="the profiler's Initialize succeeds")
def initialize_failed(c: RuleContext) -> Iterator[Finding]:
    """VAL-LOAD: the profiler's Initialize returned a failure: the runtime unloads it and nothing it was
    meant to do happens (often a missing configuration: an environment variable, a companion library)."""
    for i, ev in enumerate(c.rec.events):
        if (
            isinstance(ev, ProfilerCallback)
            and ev.name in api.names_with(Fact.INITIALIZES)
            and ev.phase != "enter"
            and ev.hr is not None
            and hresult_failed(ev.hr)
        ):
            yield c.at(
                "VAL-LOAD",
                i,
                f"the profiler's {ev.name} returned {ev.hr:#010x}: the runtime unloads it (missing "
                "configuration? try --env K=V or --preload LIB)",
            )


def _open_callbacks(rec: Recording) -> dict[int, list[str]]:
    stacks: dict[int, list[str]] = {}
    for ev in rec.events:
        if isinstance(ev, ProfilerCallback):
            stack = stacks.setdefault(ev.thread, [])
            if ev.phase == "enter":
                stack.append(ev.name)
            elif ev.phase == "return" and stack:
                stack.pop()
    return {t: s for t, s in stacks.items() if s}


def check_recording(rec: Recording, run: RunResult) -> list[Finding]:
    """Every finding of every rule over one run's recording."""
    ctx = RuleContext(rec, run)
    found: list[Finding] = []
    for fn in registry.functions(Layer.VALIDATOR):
        mine = registry.clauses_of(fn)
        for finding in fn(ctx):
            if finding.clause not in mine:
                raise HarnessError(f"validator rule {fn.__qualname__} made a {finding.clause} finding; it is "
                                   f"registered for {', '.join(sorted(mine))}")
            found.append(finding)
    return found


def hook_abi(rec: Recording, run: RunResult, checks: HookChecks) -> tuple[list[Finding], list[str]]:
    """FE2-06/08/09/10/12: every registered hook the checker can read, under the checker (``checks`` asks
    it once per hook however many runs registered it). Returns the findings (one per rule a hook broke,
    at the call that registered it) and a note for each hook that could not be checked."""
    ctx = RuleContext(rec, run)
    found: list[Finding] = []
    notes: list[str] = []
    for hook in registered_hooks(rec):
        answer = checks.check(hook)
        name = answer.symbol or f"{hook.address:#x}"
        if answer.problem is not None:
            notes.append(f"{hook.registration} {hook.parameter} {name} not checked: {answer.problem}")
            continue
        for fault in answer.faults:
            found.append(
                ctx.at(
                    fault.clause,
                    hook.index,
                    f"{hook.parameter} hook {name} ({hook.registration}): {fault_line(fault)}",
                )
            )
    return found, notes
