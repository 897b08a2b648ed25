"""The caller-allocated buffer protocol (caller-allocated-buffers.md) and its two client strategies.

The model (:func:`expected`, :func:`expected_string`) says what a conforming method answers for a given
request; :func:`check_observed` compares a recorded call with it; :func:`single_pass` and
:func:`double_pass` are the client procedures of the page's Remarks, run against any implementation
given as a callable ``impl(c_buffer_size_start, buffer) -> (hr, pc_buffer_max)`` that fills ``buffer``
(a list of ``c_buffer_size_start`` slots, or None for a NULL buffer) in place.

Decisions the page leaves open are the catalog's model choices: BUF-09 (a too-small buffer gets S_OK
and a truncated fill; strings count their NUL) and BUF-10 (no element returned: S_OK, total in
*pcBufferMax). BUF-11: both strategies re-check after every call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from clr_model.errors import InvalidInput, ModelError
from clr_model.hresults import HResult, format_hresult, hresult_failed, to_unsigned
from clr_model.violations import Violation as Violation

__all__ = [
    "ULONG32_MAX",
    "BufferCallFailed",
    "BufferNeverSettled",
    "BufferOutcome",
    "BufferUnderfilled",
    "CallRecord",
    "CallerBrokeContract",
    "ClientResult",
    "Impl",
    "ObservedCall",
    "StringOutcome",
    "Violation",
    "check_observed",
    "double_pass",
    "expected",
    "expected_string",
    "single_pass",
    "utf16_units",
]

T = TypeVar("T")

ULONG32_MAX = 2**32 - 1
_INSUFFICIENT = HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER.value


class CallerBrokeContract(InvalidInput):
    """The request itself breaks a caller rule (BUF-04: NULL buffer with a non-zero size)."""


class BufferCallFailed(ModelError):
    """A client strategy got a failure HRESULT it cannot recover from."""


class BufferNeverSettled(ModelError):
    """A client strategy gave up: *pcBufferMax kept growing beyond the buffer it allocated (BUF-11)."""


class BufferUnderfilled(ModelError):
    """The implementation claimed n elements fit but left some of the first n slots unwritten."""


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name}: expected an int, got {type(value).__name__}")
    if not 0 <= value <= ULONG32_MAX:
        raise InvalidInput(f"{name}={value} is not a ULONG32 element count (BUF-12)")
    return value


@dataclass(frozen=True)
class BufferOutcome(Generic[T]):
    """What a conforming method does for one request."""

    hresult: int
    pc_buffer_max: int
    elements_written: int
    elements: tuple[T, ...] | None = None  # the written elements, when the available data were given
    clauses: tuple[str, ...] = ()  # the clauses that decided this outcome


@overload
def expected(available: int, c_buffer_size_start: int, buffer_present: bool) -> BufferOutcome[object]: ...


@overload
def expected(available: Sequence[T], c_buffer_size_start: int, buffer_present: bool) -> BufferOutcome[T]: ...


def expected(
    available: Sequence[T] | int, c_buffer_size_start: int, buffer_present: bool
) -> BufferOutcome[T] | BufferOutcome[object]:
    """The model's answer to ``GetBuffer(cBufferSizeStart, pcBufferMax, InfoBuffer)``.

    ``available`` is the data (or just their count). Raises :class:`CallerBrokeContract` for a NULL
    buffer with a non-zero size (BUF-04) and :class:`InvalidInput` for counts outside ULONG32 (BUF-12).
    """
    size = _count("cBufferSizeStart", c_buffer_size_start)
    data: Sequence[T] | None = None
    if isinstance(available, int) and not isinstance(available, bool):
        total = _count("available", available)
    elif isinstance(available, Sequence) and not isinstance(available, str | bytes):
        data = available
        total = _count("available", len(available))
    else:
        raise InvalidInput(f"available: expected a sequence or a count, got {type(available).__name__}")
    if not buffer_present and size != 0:
        raise CallerBrokeContract(f"BUF-04: InfoBuffer is NULL but cBufferSizeStart={size}")
    capacity = size if buffer_present else 0
    written = min(total, capacity)  # BUF-01, BUF-03
    clauses: list[str] = ["BUF-01", "BUF-02", "BUF-03"]
    if written > 0:
        clauses.append("BUF-05")
        if written < total:
            clauses.append("BUF-09")
    else:
        clauses.append("BUF-10")
    return BufferOutcome(
        hresult=HResult.S_OK.value,
        pc_buffer_max=total,  # BUF-02: independent of the buffer's size
        elements_written=written,
        elements=tuple(data[:written]) if data is not None else None,
        clauses=tuple(clauses),
    )


def utf16_units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (WCHARs), without the terminator."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True)
class StringOutcome:
    """What a conforming WCHAR method does: counts include the NUL terminator (BUF-09 model choice)."""

    hresult: int
    pc_buffer_max: int  # wcslen + 1
    elements_written: int  # WCHARs written, the NUL included
    text: str  # what the caller reads back as a C string (up to the NUL)
    truncated: bool
    clauses: tuple[str, ...]


def expected_string(text: str, cch: int, buffer_present: bool) -> StringOutcome:
    """The model's answer for a WCHAR buffer of ``cch`` characters holding ``text``.

    The count includes the terminating NUL, as dotnet/runtime's GetModuleInfo2 and GetAppDomainInfo
    count it (``trueLen = wcslen + 1``). A truncated fill writes ``cch - 1`` characters and a NUL, so the
    caller always reads a terminated (possibly cut) string. A cut may split a surrogate pair; the text
    then ends with a lone high surrogate, which is what the caller would see.
    """
    if not isinstance(text, str):
        raise InvalidInput(f"text: expected str, got {type(text).__name__}")
    if "\x00" in text:
        raise InvalidInput(f"text contains a NUL at {text.index(chr(0))}; a C string cannot hold one")
    units = text.encode("utf-16-le", "surrogatepass")
    outcome = expected(len(units) // 2 + 1, cch, buffer_present)
    kept = max(outcome.elements_written - 1, 0)
    shown = units[: 2 * kept].decode("utf-16-le", "surrogatepass")
    return StringOutcome(
        hresult=outcome.hresult,
        pc_buffer_max=outcome.pc_buffer_max,
        elements_written=outcome.elements_written,
        text=shown,
        truncated=outcome.elements_written < outcome.pc_buffer_max,
        clauses=outcome.clauses,
    )


class ObservedCall(BaseModel):
    """One recorded call of a buffer method (from a live trace or a profiler under validation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    c_buffer_size_start: int = Field(ge=0, le=ULONG32_MAX)
    buffer_present: bool
    hr: int = Field(ge=-(2**31), le=ULONG32_MAX)
    pc_buffer_max: int | None = Field(default=None, ge=0, le=ULONG32_MAX, description="None: not set")
    elements_written: int = Field(ge=0, description="elements (not bytes) the method wrote")


def check_observed(call: ObservedCall, available: int | None = None) -> list[Violation]:
    """Compare one observed call with the model. ``available``: the true total, when known.

    Mismatches are attributed to one clause each: writing past the buffer BUF-01; *pcBufferMax BUF-02;
    the fill BUF-03; the HRESULT BUF-05 (elements returned), BUF-09 (buffer too small) or BUF-10 (no
    element returned). A runtime answering 0x8007007A with nothing written for a too-small buffer gets a
    single BUF-09 divergence.
    """
    out: list[Violation] = []
    hr = to_unsigned(call.hr)
    size = call.c_buffer_size_start
    if not call.buffer_present and size != 0:
        return [Violation(clause="BUF-04", message=f"InfoBuffer is NULL but cBufferSizeStart={size}")]
    capacity = size if call.buffer_present else 0
    if call.elements_written > capacity:
        out.append(Violation(clause="BUF-01",
                             message=f"{call.elements_written} elements written into a buffer of {capacity}"))
    total = available if available is not None else call.pc_buffer_max
    if total is None:
        if call.pc_buffer_max is None and not hresult_failed(hr):
            out.append(Violation(clause="BUF-02", message="*pcBufferMax was not set"))
        return out
    model = expected(total, size, call.buffer_present)
    if call.pc_buffer_max != model.pc_buffer_max:
        out.append(Violation(clause="BUF-02", message=f"*pcBufferMax={call.pc_buffer_max}, "
                             f"expected the total {model.pc_buffer_max}"))
    too_small = 0 < capacity < total
    if too_small and hr == _INSUFFICIENT and call.elements_written == 0:
        out.append(Violation(clause="BUF-09", message=f"too-small buffer ({size} < {total}): "
                             f"{format_hresult(hr)} and nothing written; the model expects S_OK and "
                             f"{model.elements_written} elements"))
        return out
    if call.elements_written != model.elements_written and call.elements_written <= capacity:
        out.append(Violation(clause="BUF-03", message=f"{call.elements_written} elements written, "
                             f"expected min({total}, {capacity}) = {model.elements_written}"))
    if hr != model.hresult:
        clause = "BUF-09" if too_small else ("BUF-05" if model.elements_written > 0 else "BUF-10")
        out.append(Violation(clause=clause, message=f"returned {format_hresult(hr)}, expected "
                             f"{format_hresult(model.hresult)}"))
    return out


# --- client strategies -------------------------------------------------------------------------------

Impl = Callable[[int, list[T | None] | None], tuple[int, int]]


@dataclass(frozen=True)
class CallRecord:
    """One call a strategy made: what it asked and what it got."""

    c_buffer_size_start: int
    buffer_present: bool
    hr: int
    pc_buffer_max: int


@dataclass(frozen=True)
class ClientResult(Generic[T]):
    elements: list[T]
    log: list[CallRecord] = field(default_factory=list)


def _call(impl: Impl[T], size: int, log: list[CallRecord]) -> tuple[list[T | None] | None, int, int]:
    buffer: list[T | None] | None = [None] * size if size > 0 else None
    answer = impl(size, buffer)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise InvalidInput(f"impl({size}) returned {answer!r}, expected (hr, pc_buffer_max)")
    hr, pc_max = to_unsigned(answer[0]), _count("pc_buffer_max", answer[1])
    log.append(CallRecord(c_buffer_size_start=size, buffer_present=buffer is not None, hr=hr,
                          pc_buffer_max=pc_max))
    if hresult_failed(hr) and not (hr == _INSUFFICIENT and pc_max > size):
        raise BufferCallFailed(f"call #{len(log) - 1} (cBufferSizeStart={size}) failed: {format_hresult(hr)}")
    return buffer, hr, pc_max


def _take(buffer: list[T | None] | None, n: int, log: list[CallRecord]) -> list[T]:
    got = (buffer or [])[:n]
    missing = [i for i, v in enumerate(got) if v is None]
    if len(got) < n or missing:
        where = missing[0] if missing else len(got)
        raise BufferUnderfilled(f"call #{len(log) - 1}: *pcBufferMax={n} but slot {where} was not written")
    return [v for v in got if v is not None]


def single_pass(impl: Impl[T], initial: int, max_rounds: int = 8) -> ClientResult[T]:
    """BUF-06/BUF-08: call with a buffer of ``initial`` elements; while *pcBufferMax exceeds the buffer,
    reallocate *pcBufferMax elements and call again (at most ``max_rounds`` calls)."""
    size = _count("initial", initial)
    log: list[CallRecord] = []
    for _ in range(max(max_rounds, 1)):
        buffer, _hr, pc_max = _call(impl, size, log)
        if pc_max <= size:  # BUF-08: not truncated
            return ClientResult(elements=_take(buffer, pc_max, log), log=log)
        size = pc_max
    raise BufferNeverSettled(f"single pass: *pcBufferMax still grew after {len(log)} calls "
                             f"(last {log[-1].pc_buffer_max} > {log[-1].c_buffer_size_start})")


def double_pass(impl: Impl[T], max_rounds: int = 8) -> ClientResult[T]:
    """BUF-07: ask with a zero-length (NULL) buffer, then allocate exactly *pcBufferMax and call again;
    if the answer grew meanwhile, retry with the new size (BUF-11), at most ``max_rounds`` sized calls."""
    log: list[CallRecord] = []
    _buffer, _hr, size = _call(impl, 0, log)
    if size == 0:
        return ClientResult(elements=[], log=log)
    for _ in range(max(max_rounds, 1)):
        buffer, _hr, pc_max = _call(impl, size, log)
        if pc_max <= size:
            return ClientResult(elements=_take(buffer, pc_max, log), log=log)
        size = pc_max
    raise BufferNeverSettled(f"double pass: *pcBufferMax still grew after {len(log)} calls "
                             f"(last {log[-1].pc_buffer_max} > {log[-1].c_buffer_size_start})")
