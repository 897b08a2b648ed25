"""conformance.fuzz_runtime.search without a runtime: a stub differential shows how a round ends."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.fuzz_runtime.differential import Differential, RuntimeFinding
from conformance.fuzz_runtime.search import FuzzSettings, shrink_round
from conformance.fuzz_runtime.shapes import Program


@dataclass
class _Result:
    findings: list[RuntimeFinding]


@dataclass
class _Stub:
    """Runs nothing: every program ``diverges`` (when asked to) with one DSS-01 line on runtime 9.9."""

    diverges: bool = False
    runs: list[Program] = field(default_factory=list)
    asked: int = 0  # programs hypothesis drew (each is asked about before it runs)

    def cached(self, program: Program, runtimes: Sequence[str] | None = None) -> bool:
        self.asked += 1
        return False

    def run(self, program: Program, runtimes: Sequence[str] | None = None) -> Any:
        self.runs.append(program)
        if not self.diverges:
            return _Result([])
        line = "now-default: DSS-01 at #1: a planted line"
        finding = RuntimeFinding("p", "DSS-01", "9.9", "stack-walks", "diverges", "m", "o", "e", (line,))
        return _Result([finding])


def _differential(stub: _Stub) -> Differential:
    return stub  # type: ignore[return-value]


def test_a_round_stops_at_its_deadline_instead_of_drawing_every_example() -> None:
    """Past the deadline the round stops at the next program, though max_examples allows thousands more."""
    stub = _Stub()
    settings = FuzzSettings(max_examples=5000, seed=1)
    assert shrink_round(_differential(stub), settings, set(), deadline=time.monotonic() - 1.0) is None
    assert stub.runs == [] and stub.asked == 1
    stub = _Stub()
    assert shrink_round(_differential(stub), FuzzSettings(max_examples=30, seed=1), set()) is None
    assert len(stub.runs) == 30  # without a deadline the round runs its examples


def test_a_shrink_out_of_time_keeps_the_smallest_program_so_far() -> None:
    stub = _Stub(diverges=True)
    settings = FuzzSettings(max_examples=50, seed=3, shrink_s=0.0)
    found = shrink_round(_differential(stub), settings, set())
    assert found is not None
    finding, program = found
    assert finding.clause == "DSS-01" and program == stub.runs[0]
    assert len(stub.runs) == 1  # no shrinking run once its time is up
