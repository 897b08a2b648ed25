"""Hypothesis strategies for the caller-allocated buffer protocol (clr_model.buffers).

Besides requests and observed calls, this module has small reference implementations of a buffer
method (``ModelImpl`` follows the model; ``RuntimeLikeImpl`` answers a too-small buffer the way
dotnet/runtime's GetModuleInfo2 does) whose data can grow between calls, to drive the client strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from clr_model.buffers import ULONG32_MAX, ObservedCall
from clr_model.hresults import HResult

__all__ = [
    "GrowingImpl",
    "ModelImpl",
    "RuntimeLikeImpl",
    "any_requests",
    "growing_impls",
    "observed_calls",
    "requests",
    "sizes_around",
    "string_requests",
    "strings",
]


def sizes_around(n: int) -> st.SearchStrategy[int]:
    """The interesting buffer sizes for n available elements: 0, 1, n-1, n, n+k."""
    edge = sorted({s for s in (0, 1, n - 1, n, n + 1) if 0 <= s <= ULONG32_MAX})
    return st.one_of(st.sampled_from(edge), st.integers(n, n + 64), st.integers(0, max(n, 0)))


@st.composite
def requests(draw: st.DrawFn, max_elements: int = 40) -> tuple[list[int], int, bool]:
    """A valid request: (available data, cBufferSizeStart, buffer present); NULL buffers have size 0."""
    data = draw(st.lists(st.integers(0, 2**16), max_size=max_elements))
    present = draw(st.booleans())
    size = draw(sizes_around(len(data))) if present else 0
    return data, size, present


def any_requests() -> st.SearchStrategy[tuple[object, object, object]]:
    """Anything at all, including out-of-range counts, NULL with a size, and wrong types (totality)."""
    counts = st.one_of(st.integers(-5, 40), st.integers(2**32 - 2, 2**32 + 2), st.booleans(), st.none(),
                       st.floats(allow_nan=False, allow_infinity=False))
    available = st.one_of(counts, st.lists(st.integers(), max_size=10), st.text(max_size=5))
    return st.tuples(available, counts, st.one_of(st.booleans(), st.integers(-1, 2)))


@st.composite
def observed_calls(draw: st.DrawFn) -> tuple[ObservedCall, int | None]:
    """An observed call, conforming or not, and the true total (sometimes unknown)."""
    total = draw(st.integers(0, 50))
    present = draw(st.booleans())
    size = draw(sizes_around(total))
    written = draw(st.integers(0, size + 2))
    hr = draw(st.sampled_from([HResult.S_OK.value, HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER.value,
                               HResult.E_INVALIDARG.value, HResult.S_FALSE.value]))
    pc_max = draw(st.one_of(st.none(), st.just(total), st.integers(0, 60)))
    content = draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(0, 2**16)),
                                                 max_size=min(size, 60)).map(tuple)))
    call = ObservedCall(c_buffer_size_start=size, buffer_present=present, hr=hr, pc_buffer_max=pc_max,
                        elements_written=written, written_beyond=draw(st.integers(0, 3)), content=content)
    return call, draw(st.one_of(st.none(), st.just(total)))


def strings() -> st.SearchStrategy[str]:
    """C strings: any text without a NUL, surrogates and non-BMP characters included."""
    return st.text(max_size=12).filter(lambda s: "\x00" not in s)


@st.composite
def string_requests(draw: st.DrawFn) -> tuple[str, int, bool]:
    """A valid WCHAR request: (text, cch, buffer present); NULL buffers have size 0."""
    text = draw(strings())
    present = draw(st.booleans())
    cch = draw(sizes_around(len(text.encode("utf-16-le", "surrogatepass")) // 2 + 1)) if present else 0
    return text, cch, present


@dataclass
class GrowingImpl:
    """A buffer method over ``data`` that appends ``grow`` elements at each of its first ``steps`` calls
    (e.g. a name or a module list changing between the two calls of a double pass)."""

    data: list[int]
    grow: int = 0
    steps: int = 0
    calls: int = field(default=0)

    def _advance(self) -> None:
        if self.calls < self.steps:
            base = len(self.data)
            self.data.extend(range(base, base + self.grow))
        self.calls += 1

    def __call__(self, size: int, buffer: list[int | None] | None) -> tuple[int, int]:
        self._advance()
        if buffer is not None:
            for i, value in enumerate(self.data[: min(size, len(buffer))]):
                buffer[i] = value
        return HResult.S_OK.value, len(self.data)


class ModelImpl(GrowingImpl):
    """Follows the model exactly (BUF-02/03/05, BUF-09 and BUF-10 choices)."""


class RuntimeLikeImpl(GrowingImpl):
    """dotnet/runtime's GetModuleInfo2 style: a too-small buffer gets 0x8007007A and nothing copied."""

    def __call__(self, size: int, buffer: list[int | None] | None) -> tuple[int, int]:
        self._advance()
        if buffer is not None and 0 < size < len(self.data):
            return HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER.value, len(self.data)
        if buffer is not None:
            for i, value in enumerate(self.data[:size]):
                buffer[i] = value
        return HResult.S_OK.value, len(self.data)


@st.composite
def growing_impls(draw: st.DrawFn, settles: bool = True) -> GrowingImpl:
    """An implementation (model-like or runtime-like) whose data grow for a few calls, then settle;
    with ``settles=False`` they grow at every call, forever."""
    data = draw(st.lists(st.integers(0, 1000), max_size=20))
    grow = draw(st.integers(1, 5))
    steps = draw(st.integers(0, 3)) if settles else 10**9
    kind = draw(st.sampled_from([ModelImpl, RuntimeLikeImpl]))
    return kind(data=data, grow=grow, steps=steps)
