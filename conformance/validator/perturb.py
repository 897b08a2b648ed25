"""Reproducible races (issue 21): ``validate --perturb SEED [--repeat N]``.

The recording proxy delays chosen points of a run by a schedule the seed alone decides
(``conformance/native/proxy/perturb.h``): the calls the profiler makes while its Initialize runs (every one of
them, for 20 to 50 ms: the window in which a thread started there races the instance being stored), the
return of Initialize, each callback's entry and return, ThreadCreated, ThreadDestroyed and Shutdown. The
delay of the index-th occurrence of a point kind is a function of (seed, kind, index) (splitmix64), never of
the clock, so a seed replays its schedule for the same sequence of points. Each delay is at most 50 ms (and a
quarter of the hang limit), each kind has a budget per run, and a run's delays together stay under half the
hang limit, so a correct profiler neither hangs nor looks hung.

This module holds the Python reference of the native schedule (:func:`delay_us`, held equal to it by a test
through a small driver), the environment that asks the proxy for it, and the seeds' text for reports. The
proxy writes a ``proxy.perturb`` mark (the seed) when Initialize arrives and a ``proxy.perturb.delays`` mark
(per kind: points seen, delays applied, their milliseconds) at the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "DELAYS_MARK",
    "MAX_SEED",
    "POINTS",
    "RULES",
    "SEED_ENV",
    "START_MARK",
    "PointRule",
    "delay_us",
    "delays_of",
    "draw",
    "environment",
    "seeds_text",
]

#: the variable naming the seed for the proxy (unset: no perturbation)
SEED_ENV = "PROFHARNESS_PROXY_PERTURB"
#: the largest seed (the proxy reads an unsigned 64-bit integer)
MAX_SEED = (1 << 64) - 1
START_MARK = "proxy.perturb"
DELAYS_MARK = "proxy.perturb.delays"
_MASK = (1 << 64) - 1


class PointRule(NamedTuple):
    """A point kind's schedule: the chance it is delayed (out of 256), the delay's range in microseconds
    (inclusive), and the kind's budget per run in milliseconds."""

    chance: int
    min_us: int
    max_us: int
    budget_ms: int


#: point kind -> its rule, in the native enumeration's order (perturb.h ``kRules``)
RULES: dict[str, PointRule] = {
    "initialize-call": PointRule(256, 20_000, 50_000, 300),
    "initialize-return": PointRule(128, 1_000, 50_000, 50),
    "callback-enter": PointRule(16, 100, 10_000, 250),
    "callback-return": PointRule(16, 100, 10_000, 250),
    "thread-created": PointRule(64, 1_000, 20_000, 100),
    "thread-destroyed": PointRule(64, 1_000, 20_000, 100),
    "shutdown": PointRule(128, 1_000, 50_000, 50),
}
POINTS = tuple(RULES)


def _mix(z: int) -> int:
    """splitmix64's output function on a state advanced once (perturb.h ``mix``)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def draw(seed: int, point: int, index: int) -> int:
    """The schedule's 64-bit draw for the ``index``-th occurrence (from 0) of point kind number ``point``."""
    return _mix(_mix(_mix(seed & _MASK) ^ point) ^ (index & _MASK))


def delay_us(seed: int, point: int, index: int) -> int:
    """The delay in microseconds (0: none) the schedule of ``seed`` gives that occurrence, before the budgets
    and the hang limit (perturb.h ``delay_us``)."""
    r = draw(seed, point, index)
    rule = RULES[POINTS[point]]
    if (r & 0xFF) >= rule.chance:
        return 0
    return rule.min_us + (r >> 8) % (rule.max_us - rule.min_us + 1)


def environment(seed: int) -> dict[str, str]:
    """The variables that ask the proxy for the schedule of ``seed`` (an unsigned 64-bit integer)."""
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed {seed}: not an unsigned 64-bit integer")
    return {SEED_ENV: str(seed)}


def delays_of(mark: Mapping[str, object] | None) -> dict[str, int]:
    """Per point kind, the delays a run's ``proxy.perturb.delays`` mark says were applied (empty without
    one: the run ended before its end, e.g. killed from outside)."""
    if not mark:
        return {}
    applied = mark.get("delays")
    if not isinstance(applied, dict):
        return {}
    return {str(k): v for k, v in applied.items() if isinstance(v, int) and not isinstance(v, bool)}


def seeds_text(seeds: Iterable[int]) -> str:
    """Seeds as ascending runs: ``3-5,9``."""
    ordered = sorted(set(seeds))
    parts: list[str] = []
    start = prev = None
    for s in ordered:
        if prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)
