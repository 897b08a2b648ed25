"""The grammar of generated scenario programs: stack shapes and heap shapes, as plain data.

A program belongs to one *family*, named after the registered live experiment whose judges read its trace:

* :class:`StackProgram` (experiment ``stack-walks``): three sections, each a chain of :class:`Step` frames
  between ``Main`` and a leaf. The throw section ends in a method that catches what its callee throws (the
  mark ``expect.throw`` just before the throw; the plan walks at ExceptionThrown); the walk-now section ends
  in a leaf that sends ``walk-now`` from a :data:`LeafContext` (plain code, a catch, a filter, a finally on
  the normal path or during unwinding); the reverse section has a reverse P/Invoke between two chains and
  sends ``walk-reverse``. Every mark carries the program's own reflection stack, as ``stack-walks`` does.
* :class:`HeapProgram` (experiment ``gc-moves``): tagged objects (``Tag = i + 1`` live, ``-(k + 1)`` dead,
  ``Twin = ~Tag``) held in one of several holders, garbage, large and pinned objects between them, a few
  warm-up GCs of each kind, then the captures ``ids.before`` / ``ids.after`` around exactly one GC.

Sizes are what shrinking minimises: :meth:`StackProgram.size` counts frames, :meth:`HeapProgram.size` the
knobs away from the smallest program.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, get_args

__all__ = [
    "GC_KINDS",
    "HANDLERS",
    "HOLDERS",
    "LEAF_CONTEXTS",
    "STEP_KINDS",
    "GcKind",
    "Handler",
    "HeapProgram",
    "Holder",
    "LeafContext",
    "Program",
    "StackProgram",
    "Step",
    "StepKind",
    "program_from_dict",
]

StepKind = Literal[
    "plain",  # a static method marked NoInlining
    "inlined",  # an AggressiveInlining method called from optimised code (a hot loop first): inlined away
    "optimized",  # a hot loop before the call: optimised code (3.1: at once; 8.0: on-stack replacement)
    "generic-ref",  # G<string>.Go<object>: shared (__Canon) code with a generic context argument
    "generic-value",  # G<int>.Go<long>: an exact instantiation over value types
    "virtual",  # an override called through its abstract base class
    "interface",  # a struct's method called through an interface (boxed: an unboxing stub)
    "struct",  # an instance method of a value type, called directly
    "delegate",  # a static method called through a Func<int, int> delegate
    "lambda",  # a closure (a display class method) called through a delegate
    "recursion",  # one method calling itself `depth` times
    "dynamic-call",  # a DynamicMethod (Reflection.Emit) calling the next method
    "dynamic-tail",  # a DynamicMethod calling the next method with the explicit `tail.` prefix
    "reverse",  # P/Invoke into the probe (profharness_call_back), which calls back into managed code
    "try-finally",  # the call inside try { } finally { }
    "try-catch",  # the call inside try { } catch { } (nothing is thrown through it)
    "async",  # an async method that completes synchronously (its state machine's MoveNext calls on)
]
STEP_KINDS: tuple[StepKind, ...] = get_args(StepKind)

LeafContext = Literal["plain", "catch", "filter", "finally", "finally-unwind"]
LEAF_CONTEXTS: tuple[LeafContext, ...] = get_args(LeafContext)

#: how the throw section's catcher handles its callee's exception: catch, a filter (when) that accepts it,
#: or a finally inside the catch's try
Handler = Literal["catch", "filter", "finally"]
HANDLERS: tuple[Handler, ...] = get_args(Handler)

Holder = Literal["array", "object-array", "large-array", "list"]
HOLDERS: tuple[Holder, ...] = get_args(Holder)

#: the deepest recursion a step may have (the issue asks for hundreds of frames)
MAX_RECURSION = 400


@dataclass(frozen=True)
class Step:
    """One shape of frame(s) in a chain; ``depth`` is the number of frames of a recursion (1 otherwise)."""

    kind: StepKind
    depth: int = 1

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}")
        if self.kind == "recursion":
            if not 2 <= self.depth <= MAX_RECURSION:
                raise ValueError(f"recursion depth {self.depth} outside 2..{MAX_RECURSION}")
        elif self.depth != 1:
            raise ValueError(f"step {self.kind!r} has depth 1, not {self.depth}")

    @property
    def label(self) -> str:
        return f"recursion({self.depth})" if self.kind == "recursion" else self.kind


def _chain_text(chain: tuple[Step, ...]) -> str:
    return " > ".join(s.label for s in chain) or "-"


@dataclass(frozen=True)
class StackProgram:
    """Three chains of frames, each ending in a walk (see the module comment)."""

    family: ClassVar[str] = "stack"

    throw_chain: tuple[Step, ...] = ()
    handler: Handler = "catch"
    now_chain: tuple[Step, ...] = ()
    now_leaf: LeafContext = "plain"
    reverse_before: tuple[Step, ...] = ()
    reverse_after: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if self.handler not in HANDLERS:
            raise ValueError(f"unknown handler {self.handler!r}")
        if self.now_leaf not in LEAF_CONTEXTS:
            raise ValueError(f"unknown leaf context {self.now_leaf!r}")

    def chains(self) -> tuple[tuple[Step, ...], ...]:
        return (self.throw_chain, self.now_chain, self.reverse_before, self.reverse_after)

    def shapes(self) -> frozenset[str]:
        """The shapes this program visits (``step:KIND``, ``leaf:CONTEXT``, ``handler:KIND``)."""
        steps = {f"step:{s.kind}" for chain in self.chains() for s in chain}
        return frozenset({*steps, f"leaf:{self.now_leaf}", f"handler:{self.handler}"})

    def size(self) -> int:
        """Generated frames (a recursion counts its depth), plus one for a leaf or handler that is not the
        simplest: what shrinking makes small."""
        frames = sum(s.depth for chain in self.chains() for s in chain)
        return frames + (self.now_leaf != "plain") + (self.handler != "catch")

    def describe(self) -> str:
        return (
            f"throw: {_chain_text(self.throw_chain)} (handler {self.handler}); "
            f"walk-now: {_chain_text(self.now_chain)} (leaf {self.now_leaf}); "
            f"reverse: {_chain_text(self.reverse_before)} | native | {_chain_text(self.reverse_after)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **asdict(self)}


@dataclass(frozen=True)
class GcKind:
    """One forced GC: ``GC.Collect(generation, Forced, blocking=True, compacting)``; ``compact_loh`` sets
    GCSettings.LargeObjectHeapCompactionMode = CompactOnce first (gen 2 only)."""

    generation: int = 2
    compacting: bool = True
    compact_loh: bool = False

    def __post_init__(self) -> None:
        if self.generation not in (0, 1, 2):
            raise ValueError(f"GC generation {self.generation} is not 0, 1 or 2")
        if self.compact_loh and self.generation != 2:
            raise ValueError("LOH compaction needs a gen 2 GC")

    @property
    def label(self) -> str:
        loh = "+loh" if self.compact_loh else ""
        return f"gen{self.generation}{'' if self.compacting else ' sweep'}{loh}"


GC_KINDS: tuple[GcKind, ...] = (
    GcKind(0),
    GcKind(1),
    GcKind(2),
    GcKind(2, compacting=False),
    GcKind(2, compact_loh=True),
)


@dataclass(frozen=True)
class HeapProgram:
    """Tagged objects around one GC (see the module comment)."""

    family: ClassVar[str] = "heap"

    #: tracked live objects (Tag i + 1)
    live: int = 16
    #: after every ``dead_every``-th live object a dead one (Tag -(k + 1)); 0: no dead objects
    dead_every: int = 0
    #: unreferenced byte[] of this many bytes after each live object (0: none)
    garbage_bytes: int = 0
    holder: Holder = "array"
    #: every ``pinned_every``-th live object is pinned (GCHandle) during the GC between the captures; 0: none
    pinned_every: int = 0
    #: a live large byte[] (LOH) after every ``large_every``-th live object; 0: none
    large_every: int = 0
    #: GCs after the objects are built, before the captures
    warmup: tuple[GcKind, ...] = ()
    #: live objects allocated after the warm-up GCs (young), the last ones of the live list
    young: int = 0
    #: the one GC between the captures
    between: GcKind = field(default_factory=GcKind)

    def __post_init__(self) -> None:
        if not 1 <= self.live <= 5000:
            raise ValueError(f"live {self.live} outside 1..5000")
        if not 0 <= self.young <= self.live:
            raise ValueError(f"young {self.young} outside 0..live")
        for name in ("dead_every", "garbage_bytes", "pinned_every", "large_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.holder not in HOLDERS:
            raise ValueError(f"unknown holder {self.holder!r}")

    @property
    def dead(self) -> int:
        return 0 if self.dead_every == 0 else self.live // self.dead_every

    def shapes(self) -> frozenset[str]:
        found = {f"holder:{self.holder}", f"between:{self.between.label}"}
        found.update(f"warmup:{g.label}" for g in self.warmup)
        for name, on in (
            ("dead", self.dead_every),
            ("garbage", self.garbage_bytes),
            ("pinned", self.pinned_every),
            ("large", self.large_every),
            ("young", self.young),
        ):
            if on:
                found.add(f"heap:{name}")
        return frozenset(found)

    def size(self) -> int:
        return (
            self.live
            + self.dead
            + (self.garbage_bytes > 0)
            + (self.holder != "array")
            + (self.pinned_every > 0)
            + (self.large_every > 0)
            + len(self.warmup)
            + self.young
            + (self.between != GcKind())
        )

    def describe(self) -> str:
        parts = [f"{self.live} live", f"{self.dead} dead", f"holder {self.holder}"]
        if self.garbage_bytes:
            parts.append(f"{self.garbage_bytes} B garbage each")
        if self.pinned_every:
            parts.append(f"every {self.pinned_every}th pinned")
        if self.large_every:
            parts.append(f"a large object every {self.large_every}")
        if self.warmup:
            parts.append("warm-up " + ", ".join(g.label for g in self.warmup))
        if self.young:
            parts.append(f"{self.young} young")
        parts.append(f"GC between the captures: {self.between.label}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, **asdict(self)}


Program = StackProgram | HeapProgram


def _steps(raw: Any) -> tuple[Step, ...]:
    return tuple(Step(kind=s["kind"], depth=int(s.get("depth", 1))) for s in raw or ())


def _gc(raw: Any) -> GcKind:
    return GcKind(int(raw["generation"]), bool(raw["compacting"]), bool(raw["compact_loh"]))


def program_from_dict(data: dict[str, Any]) -> Program:
    """The inverse of ``to_dict`` (a finding's ``finding.json`` names its program this way)."""
    family = data.get("family")
    if family == StackProgram.family:
        return StackProgram(
            throw_chain=_steps(data.get("throw_chain")),
            handler=data.get("handler", "catch"),
            now_chain=_steps(data.get("now_chain")),
            now_leaf=data.get("now_leaf", "plain"),
            reverse_before=_steps(data.get("reverse_before")),
            reverse_after=_steps(data.get("reverse_after")),
        )
    if family == HeapProgram.family:
        fields = {k: v for k, v in data.items() if k not in ("family", "warmup", "between")}
        return HeapProgram(
            **fields,
            warmup=tuple(_gc(g) for g in data.get("warmup", ())),
            between=_gc(data["between"]) if "between" in data else GcKind(),
        )
    raise ValueError(f"unknown program family {family!r}")
