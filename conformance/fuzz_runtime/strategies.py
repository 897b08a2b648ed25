"""Hypothesis strategies for generated programs, and the known shapes (one explicit program per shape).

Every choice shrinks towards the smallest program: empty chains, plain frames, a plain leaf, a catch
handler, one live object, no dead, garbage, pinned or large objects, no warm-up GC, a gen 2 compacting GC
between the captures (the first of each ``sampled_from``). :func:`known_programs` gives, per family, one
small program for every shape of the grammar, so a short run visits each shape once on every runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from conformance.fuzz_runtime.shapes import (
    GC_KINDS,
    HANDLERS,
    HOLDERS,
    LEAF_CONTEXTS,
    MAX_RECURSION,
    STEP_KINDS,
    GcKind,
    HeapProgram,
    Program,
    StackProgram,
    Step,
)

__all__ = [
    "BETWEEN_KINDS",
    "FAMILIES",
    "heap_programs",
    "known_programs",
    "programs",
    "stack_programs",
    "steps",
]

FAMILIES: tuple[str, ...] = (StackProgram.family, HeapProgram.family)

#: the GC between the captures compacts (the gc-moves judges read the MovedReferences2 ranges of that GC)
BETWEEN_KINDS: tuple[GcKind, ...] = tuple(g for g in GC_KINDS if g.compacting and g != GcKind())

_SIMPLE_KINDS = tuple(k for k in STEP_KINDS if k != "recursion")


def steps() -> st.SearchStrategy[Step]:
    """One step; a recursion is a few frames or hundreds."""
    depth = st.one_of(st.integers(2, 6), st.integers(100, MAX_RECURSION))
    return st.one_of(
        st.sampled_from(_SIMPLE_KINDS).map(Step),
        depth.map(lambda d: Step("recursion", d)),
    )


def _chains(max_size: int) -> st.SearchStrategy[tuple[Step, ...]]:
    return st.lists(steps(), max_size=max_size).map(tuple)


def stack_programs(max_chain: int = 5) -> st.SearchStrategy[StackProgram]:
    return st.builds(
        StackProgram,
        throw_chain=_chains(max_chain),
        handler=st.sampled_from(HANDLERS),
        now_chain=_chains(max_chain),
        now_leaf=st.sampled_from(LEAF_CONTEXTS),
        reverse_before=_chains(max(1, max_chain // 2)),
        reverse_after=_chains(max(1, max_chain // 2)),
    )


@st.composite
def heap_programs(draw: st.DrawFn, max_live: int = 3000) -> HeapProgram:
    live = draw(st.integers(1, max_live))
    return HeapProgram(
        live=live,
        dead_every=draw(st.sampled_from((0, 3, 2, 7))),
        garbage_bytes=draw(st.sampled_from((0, 16, 200, 4000))),
        holder=draw(st.sampled_from(HOLDERS)),
        pinned_every=draw(st.sampled_from((0, 5, 2, 50))),
        large_every=draw(st.sampled_from((0, 100, 10))),
        warmup=tuple(draw(st.lists(st.sampled_from(GC_KINDS), max_size=4))),
        young=draw(st.integers(0, live)),
        between=draw(st.sampled_from((GcKind(), *BETWEEN_KINDS))),
    )


def programs(families: Sequence[str] = FAMILIES) -> st.SearchStrategy[Program]:
    chosen: list[st.SearchStrategy[Program]] = []
    if StackProgram.family in families:
        chosen.append(stack_programs())
    if HeapProgram.family in families:
        chosen.append(heap_programs())
    if not chosen:
        raise ValueError(f"no program family among {list(families)} (known: {', '.join(FAMILIES)})")
    return st.one_of(*chosen)


def _known_stack() -> list[StackProgram]:
    out: list[StackProgram] = []
    for kind in STEP_KINDS:
        if kind == "recursion":
            # hundreds of frames in the walk-now section, a few in the others
            out.append(StackProgram(throw_chain=(Step(kind, 3),), now_chain=(Step(kind, 300),),
                                    reverse_after=(Step(kind, 3),)))  # fmt: skip
            continue
        one = (Step(kind),)
        out.append(StackProgram(throw_chain=one, now_chain=one, reverse_before=one, reverse_after=one))
    # every leaf context and every handler, each once in a program of no other shape
    out += [StackProgram(now_leaf=leaf) for leaf in LEAF_CONTEXTS[1:]]
    out += [StackProgram(handler=handler) for handler in HANDLERS[1:]]
    return out


def _known_heap() -> list[HeapProgram]:
    out = [HeapProgram(live=64, holder=h) for h in HOLDERS]
    out += [
        HeapProgram(live=64, dead_every=3),
        HeapProgram(live=64, garbage_bytes=200),
        HeapProgram(live=64, pinned_every=5),
        HeapProgram(live=64, large_every=10),
        HeapProgram(live=64, young=32, warmup=(GcKind(2),)),
        HeapProgram(live=2000, dead_every=3, garbage_bytes=16),  # the size of the gc-moves scenario
    ]
    out += [HeapProgram(live=64, warmup=(g,)) for g in GC_KINDS]
    out += [HeapProgram(live=64, young=32, between=g) for g in BETWEEN_KINDS]
    return list(dict.fromkeys(out))


def known_programs(families: Sequence[str] = FAMILIES) -> list[Program]:
    """One small program per shape of the grammar, for each family asked (stack first)."""
    out: list[Program] = []
    if StackProgram.family in families:
        out.extend(_known_stack())
    if HeapProgram.family in families:
        out.extend(_known_heap())
    return out
