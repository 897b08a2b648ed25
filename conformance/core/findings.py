"""Finding: one way a profiler broke a rule, with its evidence — the one result type of every layer that holds
a profiler to the contract (the validator's rules, the hook checker's faults in a validation, the fuzzer).

A finding names its clause (an id of the catalog, :mod:`clr_model.clauses`; the title comes from there),
the run it was seen in (runtime, scenario, trace), the OS thread and the callback (or hook) that was
running, and the seqs of the trace records that are its evidence.
"""

from __future__ import annotations

from typing import Protocol, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict

from conformance.core.symbols import Site

__all__ = ["Finding", "RunOf", "Where", "clause_title"]


class RunOf(Protocol):
    """What a finding needs to know of its run (a :class:`conformance.core.runner.RunResult`)."""

    @property
    def runtime(self) -> str: ...
    @property
    def scenario(self) -> str: ...
    @property
    def trace_path(self) -> object: ...


def clause_title(clause: str) -> str:
    """The clause's title from the catalog (the one list of titles); the id itself if it is not there."""
    from clr_model.clauses import CATALOG

    found = CATALOG.get(clause)
    return found.title if found is not None else clause


class Where(TypedDict, total=False):
    """Where a finding happened, as far as the recording says: the thread, the callback open on it, the
    profiler's own code (function and file:line)."""

    thread: int | None
    callback: str | None
    site: Site | None


class Finding(BaseModel):
    """One way the profiler broke a rule, with its evidence."""

    model_config = ConfigDict(frozen=True)

    clause: str
    title: str
    message: str
    runtime: str
    scenario: str
    thread: int | None = None
    callback: str | None = None
    records: list[int]
    trace: str
    #: shown, never a failure (a rule no document states, or what could not be judged)
    note: bool = False
    #: the profiler's own code it happened in (function and file:line), when the recording says
    site: Site | None = None

    @classmethod
    def of(
        cls,
        run: RunOf,
        clause: str,
        message: str,
        records: list[int],
        *,
        note: bool = False,
        **where: Unpack[Where],
    ) -> Finding:
        """A finding of ``run`` (its runtime, scenario and trace), titled from the catalog."""
        return cls(
            note=note,
            clause=clause,
            title=clause_title(clause),
            message=message,
            runtime=run.runtime,
            scenario=run.scenario,
            records=records,
            trace=str(run.trace_path),
            **where,
        )

    def line(self) -> str:
        where = (
            f" [thread {self.thread}" + (f", in {self.callback}" if self.callback else "") + "]"
            if self.thread is not None
            else ""
        )
        return f"{self.clause} {self.runtime} {self.scenario}{where}: {self.message} (records {self.records})"
