"""Hypothesis strategies for CONTEXT layouts, values and (adversarial) buffers."""

from __future__ import annotations

from hypothesis import strategies as st

from clr_model.context import AMD64_CONTEXT, AMD64_PAL_XSTATE, X86_CONTEXT, ContextLayout

__all__ = ["context_buffers", "context_sizes", "context_values", "layouts", "scalar_fields"]


def layouts() -> st.SearchStrategy[ContextLayout]:
    """The declared layouts, and the AMD64 one at runtime-specific larger sizes."""
    return st.one_of(
        st.sampled_from([AMD64_CONTEXT, X86_CONTEXT, AMD64_PAL_XSTATE]),
        st.integers(0, 200).map(lambda n: AMD64_CONTEXT.with_size(AMD64_CONTEXT.size + 16 * n)),
    )


def scalar_fields(layout: ContextLayout) -> list[str]:
    """Fields of at most 8 bytes that overlap no other field (safe to give together to ``pack``)."""
    items = sorted(layout.fields.items(), key=lambda kv: kv[1])
    out: list[str] = []
    for name, (offset, size) in items:
        if size > 8:
            continue
        overlaps = any(
            other != name and o_off < offset + size and offset < o_off + o_size
            for other, (o_off, o_size) in layout.fields.items()
            if o_size <= 8
        )
        if not overlaps:
            out.append(name)
    return out


@st.composite
def context_values(draw: st.DrawFn, layout: ContextLayout) -> dict[str, int]:
    """A value for some non-overlapping scalar fields, ContextFlags valid for the layout."""
    names = draw(st.lists(st.sampled_from(scalar_fields(layout)), unique=True, max_size=12))
    values = {name: draw(st.integers(0, (1 << (8 * layout.field_size(name))) - 1)) for name in names}
    values["ContextFlags"] = layout.arch_flag | draw(st.integers(0, layout.part_flags)) & layout.part_flags
    return values


def context_sizes(layout: ContextLayout) -> st.SearchStrategy[int]:
    """Sizes around the layout's: 0, too short by a little or a lot, exact, larger, and arbitrary."""
    n = layout.size
    return st.one_of(
        st.sampled_from([0, 1, n - 1, n, n + 1, n + layout.alignment, 2 * n]),
        st.integers(0, 4 * n),
    )


@st.composite
def context_buffers(draw: st.DrawFn, layout: ContextLayout) -> bytes:
    """Arbitrary bytes of an adversarial length: garbage flags, short buffers, long buffers."""
    size = draw(context_sizes(layout))
    return draw(st.binary(min_size=size, max_size=size))
