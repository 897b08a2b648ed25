"""Judge one example: the validator's rules over its recording, and the model's own view of the heap.

The recording is the fake runtime's trace, read whole (:func:`conformance.core.trace.read_trace_whole`: the
same records as ``read_trace``, faster), made events by :func:`conformance.validator.recording.read_recording`
and judged by :func:`conformance.validator.rules.check_recording` unchanged (the same findings a live run
behind the recording proxy gives). Beyond them the model knows what no live run can: which ObjectIDs were
live objects when the profiler inspected one (the heap version in force, ``fuzz.heap`` marks). An
inspection of an ObjectID no live object has is MR2-17: after a compacting GC every ObjectID the profiler
kept must be remapped (MR2-07/08) before it is used again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clr_model import api, il
from clr_model.api import Fact
from clr_model.clauses import Layer
from clr_model.events import InfoCall, Mark, ObjectInspection
from clr_model.il_metadata import Assembly, MetadataError
from conformance.core import registry
from conformance.core.errors import HarnessError
from conformance.core.findings import Finding
from conformance.core.runner import RunResult
from conformance.core.trace import read_trace_whole
from conformance.fuzz.child import ExampleOutcome
from conformance.fuzz.world import HEAP_MARK
from conformance.validator.il_rules import FUZZ_MODULE_MARK, ILBodies
from conformance.validator.recording import Recording, read_recording
from conformance.validator.rules import check_recording

#: What a fuzz run calls its runtime and scenario in findings.
RUNTIME = "fake"
SCENARIO = "fuzz"


def run_result(trace: Path, outcome: ExampleOutcome) -> RunResult:
    return RunResult(
        scenario=SCENARIO,
        runtime=RUNTIME,
        runtime_source="profharness-fakeruntime",
        outcome=outcome.outcome,
        signal=outcome.signal,
        seconds=outcome.seconds,
        run_dir=trace.parent,
        trace_path=trace,
        stderr_tail=outcome.stderr_tail,
    )


def heaps_of(commands: Sequence[Mapping[str, Any]]) -> list[frozenset[int]]:
    """The heap of every version the commands set (``objects`` adds, ``heap`` replaces), version 0 empty."""
    heaps: list[frozenset[int]] = [frozenset()]
    live: set[int] = set()
    for cmd in commands:
        op = cmd.get("op")
        if op not in ("objects", "heap"):
            continue
        ids = {int(o[0]) for o in cmd.get("objects", [])}
        live = live | ids if op == "objects" else ids
        version = int(cmd.get("version", len(heaps)))
        while len(heaps) <= version:
            heaps.append(frozenset(live))
        heaps[version] = frozenset(live)
    return heaps


@registry.rule("MR2-17", layer=Layer.FUZZ, what="every inspected ObjectID is a live object's in the fake "
               "runtime's heap then in force")
def heap_findings(rec: Recording, heaps: list[frozenset[int]], run: RunResult) -> list[Finding]:
    """MR2-17 by the model: every inspected ObjectID is a live object's in the heap then in force."""
    found: list[Finding] = []
    version = 0
    ever: set[int] = set()
    for h in heaps:
        ever |= h
    for i, ev in enumerate(rec.events):
        if isinstance(ev, Mark) and ev.name == HEAP_MARK:
            v = ev.data.get("version")
            if isinstance(v, int) and 0 <= v < len(heaps):
                version = v
            continue
        if not isinstance(ev, ObjectInspection) or ev.object_id is None:
            continue
        if ev.within in api.names_with(Fact.MOVES):
            continue  # MR2-09's (the rules report it)
        oid = ev.object_id
        if oid in heaps[version]:
            continue
        if oid in ever:
            what = "an ObjectID from before a compacting GC that moved that object"
        else:
            what = "an ObjectID no live object has (a wrong remapping)"
        found.append(Finding.of(run, "MR2-17", f"{ev.name} inspects {oid:#x}, {what}", [ev.seq],
                                thread=ev.thread, callback=rec.callback_at(i)))
    return found


#: the fake runtime's mark naming the assembly a module's IL bodies come from (fakeruntime.cpp), which the
#: validator's IL rule reads as well
IL_MODULE_MARK = FUZZ_MODULE_MARK
_SET_IL = "SetILFunctionBody"
_CONTROL_PREFIX = "ICorProfilerFunctionControl::"


def _il_resolver(path: str, cache: dict[str, Assembly | None]) -> Assembly | None:
    if path not in cache:
        try:
            cache[path] = Assembly(Path(path).read_bytes())
        except (OSError, MetadataError):
            cache[path] = None
    return cache[path]


def validator_checks_fuzz_bodies() -> bool:
    """Whether the validator's IL rule (:class:`~conformance.validator.il_rules.ILBodies`, issue 25 part 5)
    judges the fake runtime's bodies itself: it does when it reads the fake runtime's module mark, and
    :func:`judge` runs it (``check_recording`` loads the validator's rules, il_rules among them, every time).
    Read from the rule's own declaration, never from what the registry happens to hold when this runs (that
    depended on which modules were imported first), so the IL checker runs once per body, always the same."""
    return ("mark", FUZZ_MODULE_MARK) in ILBodies.reads and "conformance.validator.il_rules" in (
        registry.RULE_MODULES[Layer.VALIDATOR])


@registry.rule(*sorted(il.RULES), *sorted(il.NOTES), "REJIT-37", layer=Layer.FUZZ,
               what="every IL body the profiler hands the fake runtime (SetILFunctionBody, "
               "ICorProfilerFunctionControl::SetILFunctionBody) is a valid ECMA-335 body against the "
               "metadata of the assembly the method's original body came from; SetILFunctionBody's body "
               "comes from the module's method allocator")  # fmt: skip
def il_findings(rec: Recording, heaps: list[frozenset[int]], run: RunResult) -> list[Finding]:
    """The IL checker (:func:`clr_model.il.check_body`) over every body handed over: the fake runtime records
    the bytes (out ``body``, hex; ``allocated``: in a block of the method allocator, whose end is then the
    body's known length), and names the assembly of each module's original bodies (a ``fuzz.il.module``
    mark): the body's tokens, locals and arguments resolve against it. Each finding is its own IL-* clause
    at the call, in the callback it was made in. Where the validator has an IL rule of its own (the recording
    proxy's bodies, the same record shape), that rule judges the fake runtime's records and this one leaves
    the IL checks to it, so no body is reported twice. REJIT-37 (a body in no block the method allocator gave)
    is this rule's alone: only the fake runtime knows every block its allocator handed out."""
    del heaps
    checked_by_validator = validator_checks_fuzz_bodies()
    paths: dict[int, str] = {}
    cache: dict[str, Assembly | None] = {}
    found: list[Finding] = []
    for i, ev in enumerate(rec.events):
        if isinstance(ev, Mark) and ev.name == IL_MODULE_MARK:
            module, path = ev.data.get("moduleId"), ev.data.get("path")
            if isinstance(module, int) and isinstance(path, str):
                paths[module] = path
            continue
        if not isinstance(ev, InfoCall) or ev.phase == "return":
            continue
        if ev.name != _SET_IL and not ev.name.startswith(_CONTROL_PREFIX):
            continue
        if ev.name == _SET_IL and ev.out.get("allocated") is False:  # REJIT-37: the fake runtime's blocks
            found.append(Finding.of(run, "REJIT-37", "the body handed to SetILFunctionBody lies in no block "
                                    "the module's method allocator (GetILFunctionBodyAllocator) handed out",
                                    [ev.seq], thread=ev.thread, callback=rec.callback_at(i)))  # fmt: skip
        text = ev.out.get("body")
        if not isinstance(text, str) or checked_by_validator:
            continue
        try:
            data = bytes.fromhex(text)
        except ValueError:
            continue
        token = ev.args.get("methodid", ev.args.get("methodId"))
        module = ev.args.get("moduleId")
        path = paths.get(module) if isinstance(module, int) else None
        assembly = _il_resolver(path, cache) if path else None
        if assembly is None or not isinstance(token, int):
            continue  # a body of a method with no real IL: nothing to resolve its tokens against
        if ev.name.startswith(_CONTROL_PREFIX):  # the size handed over with it (REJIT-23)
            declared = ev.args.get("cbNewILMethodHeader")
            length = declared if isinstance(declared, int) else None
        else:
            length = len(data) if ev.out.get("allocated") is True else None
        for f in il.check_body(data, assembly, token, length=length):
            message = f"the body {ev.name} was given for method 0x{token:08X}: {f}"
            found.append(Finding.of(run, f.rule, message, [ev.seq], thread=ev.thread, note=f.note,
                                    callback=rec.callback_at(i)))
    return found


def api_calls(recording: Recording) -> Counter[str]:
    """How often the profiler called each ICorProfilerInfo method in a recording (a call recorded as enter
    and return counts once; an ObjectID's inspection is a call too). The fake runtime does not record
    IMetaDataImport calls: they are not counted."""
    return Counter(ev.name for ev in recording.events
                   if isinstance(ev, ObjectInspection) or (isinstance(ev, InfoCall) and ev.phase != "return"))


def judge(
    trace: Path, outcome: ExampleOutcome, commands: Sequence[Mapping[str, Any]],
    calls: Counter[str] | None = None,
) -> list[Finding]:
    """Every finding of one example (the validator's rules, then the model's heap check); ``calls``, when
    given, gets the example's :func:`api_calls`."""
    run = run_result(trace, outcome)
    recording = read_recording(read_trace_whole(trace))
    if calls is not None:
        calls.update(api_calls(recording))
    findings = check_recording(recording, run)
    heaps = heaps_of(commands)
    for rule in registry.functions(Layer.FUZZ):
        findings += rule(recording, heaps, run)
    if outcome.errors:
        raise HarnessError(f"the fake runtime could not carry out the example: {outcome.errors[0]}")
    return findings
