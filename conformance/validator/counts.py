"""A run's summary counts, read from its recording in the judging pass (issue 21): the DoStackSnapshot calls
the profiler made (their return records, and how many returned S_OK), and the proxy's own tallies in its
``proxy.shutdown`` mark (the shadow heap's compacting GCs and GCs with address reuse; the
JITCompilationStarted tally and its recompilations) and ``proxy.osr`` marks (a recompilation made from the
method's own frame: an on-stack replacement). Nothing here is taken from the app."""

from __future__ import annotations

from typing import Any

from conformance.validator.result import RunCounts
from conformance.validator.stream import StreamRule

__all__ = ["CountRun"]

_S_OK = 0


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class CountRun(StreamRule):
    """Counts what the run exercised (:meth:`counts` after the pass)."""

    reads = (("call", "DoStackSnapshot"), ("mark", "proxy.shutdown"), ("mark", "proxy.osr"))

    walks = 0
    walks_ok = 0
    osr = 0
    shutdown: dict[str, Any] | None = None

    def on(self, r: dict[str, Any]) -> None:
        kind = r["kind"]
        if kind == "call":
            if r.get("phase", "whole") != "enter":
                self.walks += 1
                if r.get("hr") == _S_OK:
                    self.walks_ok += 1
        elif r["name"] == "proxy.osr":
            self.osr += 1
        else:
            self.shutdown = r

    def counts(self, not_applicable: dict[str, str] | None = None) -> RunCounts:
        heap = (self.shutdown or {}).get("heap")
        heap = heap if isinstance(heap, dict) and heap.get("enabled") is True else {}
        jit = (self.shutdown or {}).get("jit")
        jit = jit if isinstance(jit, dict) and jit.get("monitored") is True else {}
        return RunCounts(walks=self.walks, walks_ok=self.walks_ok, gcs=_int(heap.get("gcs")),
                         compacting_gcs=_int(heap.get("compactingGcs")), reuse_gcs=_int(heap.get("reuseGcs")),
                         compilations=_int(jit.get("compilations")), functions=_int(jit.get("functions")),
                         recompilations=_int(jit.get("recompilations")), osr=self.osr,
                         rejits=self.j.counts.get("ReJITCompilationStarted", 0) if self.j.counts else None,
                         not_applicable=dict(not_applicable or {}))  # fmt: skip
