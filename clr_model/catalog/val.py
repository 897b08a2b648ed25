"""The harness's own rules (``VAL-*``): what the validator holds a profiler to that none of the four contract
documents states. Each says in ``reason`` why it holds without a document sentence."""

from __future__ import annotations

from clr_model.catalog.base import Clause, Document, Kind, Layer

_D = Document.HARNESS
_V = frozenset({Layer.VALIDATOR})


def _rule(id: str, title: str, paraphrase: str, reason: str, section: str = "lifecycle") -> Clause:
    return Clause(id=id, title=title, paraphrase=paraphrase, reason=reason, document=_D, section=section,
                  kind=Kind.AUTHOR_RULE, layers=_V)  # fmt: skip


CLAUSES: tuple[Clause, ...] = (
    _rule("VAL-CRASH", "the profiler crashed the process",
          "The process ended on a fatal signal (or an abort) while the profiler ran: in a callback or "
          "hook, in a call it made, or on one of its threads.",
          "A profiler runs inside the application: a crash it causes takes the application down.",
          section="crashes and hangs"),
    _rule("VAL-HANG", "a callback never returned (hang)",
          "A callback, hook or profiling-API call stayed open past the hang limit, or the process stopped "
          "making progress under the profiler.",
          "A callback that never returns stops the thread the runtime called it on (and a GC waiting for "
          "it).",
          section="crashes and hangs"),
    _rule("VAL-LOAD", "the profiler could not be loaded behind the proxy",
          "The profiler could not be loaded or created, or its Initialize failed, so nothing it was meant to "
          "do happened.",
          "A profiler that does not load checks nothing: every other rule would pass vacuously.",
          section="loading"),
    _rule("VAL-AFTER-SHUTDOWN", "ICorProfilerInfo used after Shutdown returned",
          "The profiler called ICorProfilerInfo after its Shutdown callback returned, outside any callback.",
          "After Shutdown the runtime tears the profiling services down: a call then reaches released "
          "state."),
    _rule("VAL-RELEASED-INFO", "ICorProfilerInfo used after its last reference was released",
          "The profiler called ICorProfilerInfo through an interface whose last reference it had released.",
          "COM: an interface pointer whose last reference was released must not be used."),
    _rule("VAL-THREAD-AT-SHUTDOWN", "a profiler thread still runs after Shutdown returned",
          "A thread the profiler started still runs when its Shutdown callback has returned.",
          "After Shutdown the runtime may release the profiler (3.1 does): a thread still running in it "
          "runs in freed memory."),
    _rule("VAL-ENUM-LEAK", "an enumerator is never released",
          "An enumerator the profiler obtained (EnumThreads) is never released.",
          "COM: every reference an out-parameter hands over is the caller's to release."),
    _rule("VAL-NULL-TAILCALL", "enter/leave hooks registered with a NULL tailcall hook",
          "The profiler registered enter and leave hooks with a NULL tailcall hook.",
          "Seen as a risk in profilers: a tail call would call the NULL hook.", section="hooks"),
    _rule("VAL-QI-IN-GC", "QueryInterface on ICorProfilerInfo inside a GC callback",
          "The profiler called QueryInterface on ICorProfilerInfo inside a garbage-collection callback.",
          "Seen as a risk in profilers: QueryInterface may take locks the GC holds.",
          section="garbage collection"),
)
