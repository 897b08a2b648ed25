"""The caller-allocated buffer protocol (caller-allocated-buffers.md) and its two client strategies.

The model (:func:`expected`, :func:`expected_string`) says what a conforming method answers for a given
request; :func:`check_observed` compares a recorded call with it; :func:`single_pass` and
:func:`double_pass` are the client procedures of the page's Remarks, run against any implementation
given as a callable ``impl(c_buffer_size_start, buffer) -> (hr, pc_buffer_max)`` that fills ``buffer``
(a list of ``c_buffer_size_start`` slots, or None for a NULL buffer) in place.

Elements are unsigned integers: an element's bytes read little-endian (a WCHAR is its UTF-16 code unit,
a ClassID its value). :func:`expected_content` says which elements a conforming method writes for a full
answer; :func:`string_elements` is the full answer of a WCHAR method for a text.

Decisions the page leaves open are the catalog's model choices: BUF-09 (a too-small buffer gets S_OK
and a truncated fill; strings count their NUL and a cut string ends with a NUL) and BUF-10 (no element
returned: S_OK, total in *pcBufferMax). BUF-11: both strategies re-check after every call.

How :func:`check_observed` attributes an observation (each observed field to one clause):

* anything changed past cBufferSizeStart (``written_beyond``, e.g. a guard) -> BUF-01, whatever the
  size: a NUL "pre-stored" into a zero-element buffer is a write past it;
* *pcBufferMax not the total -> BUF-02, except a WCHAR count that leaves out the NUL -> BUF-09;
* the number of elements written, or an element differing from the full answer's prefix -> BUF-03,
  whatever the HRESULT (the page: "this buffer will be filled with as many elements as possible").
  A lone NUL in element 0 of a too-small string buffer is one element written, the wrong one;
* the last written element of a string that is written but is not the NUL -> BUF-09 (termination);
* the HRESULT: BUF-09 for 0 < size < total, BUF-05 when elements are returned, BUF-10 when none are;
  an argument error for the legal (NULL, 0) form -> BUF-04.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clr_model.errors import InvalidInput, ModelError
from clr_model.hresults import HResult, format_hresult, hresult_failed, to_unsigned
from clr_model.violations import Violation as Violation

__all__ = [
    "NUL",
    "ULONG32_MAX",
    "BufferCallFailed",
    "BufferNeverSettled",
    "BufferOutcome",
    "BufferUnderfilled",
    "BufferViolation",
    "CallField",
    "CallerBrokeContract",
    "ClientCall",
    "ClientResult",
    "Impl",
    "ObservedCall",
    "StringOutcome",
    "Violation",
    "check_observed",
    "double_pass",
    "expected",
    "expected_content",
    "expected_string",
    "single_pass",
    "string_elements",
    "utf16_units",
]

T = TypeVar("T")

ULONG32_MAX = 2**32 - 1
NUL = 0  # the WCHAR terminator as an element
_INSUFFICIENT = HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER.value
_ARGUMENT_ERRORS = frozenset({HResult.E_INVALIDARG.value, HResult.E_POINTER.value})


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


def _text(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"text: expected str, got {type(text).__name__}")
    if "\x00" in text:
        raise InvalidInput(f"text contains a NUL at {text.index(chr(0))}; a C string cannot hold one")
    return text


def string_elements(text: str) -> tuple[int, ...]:
    """The full answer of a WCHAR method for ``text``: its UTF-16 code units and the terminating NUL,
    which the count includes (BUF-09 model choice)."""
    raw = _text(text).encode("utf-16-le", "surrogatepass")
    return (*(int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)), NUL)


def _full_answer(full_answer: Sequence[int], string: bool) -> tuple[int, ...]:
    if isinstance(full_answer, str | bytes) or not isinstance(full_answer, Sequence):
        raise InvalidInput(f"full_answer: expected a sequence of elements, got {type(full_answer).__name__}")
    for i, e in enumerate(full_answer):
        if isinstance(e, bool) or not isinstance(e, int) or e < 0:
            raise InvalidInput(f"full_answer[{i}]={e!r} is not an element (an unsigned int)")
    full = tuple(full_answer)
    _count("available", len(full))
    if string:
        if not full or full[-1] != NUL:
            raise InvalidInput("full_answer: a string's full answer ends with its NUL terminator (BUF-09)")
        if NUL in full[:-1]:
            raise InvalidInput(f"full_answer: a NUL at {full.index(NUL)} inside the string")
    return full


def expected_content(
    full_answer: Sequence[int], c_buffer_size_start: int, buffer_present: bool = True, *, string: bool = False
) -> tuple[int, ...]:
    """The elements a conforming method writes into the buffer, given the method's full answer.

    Any buffer: the first min(total, size) elements of the full answer (BUF-03). A string
    (``string=True``; the full answer ends with its NUL, see :func:`string_elements`) cut by a too-small
    buffer keeps ``size - 1`` code units and a NUL in its last element (BUF-09 model choice), so the caller
    always reads a terminated string. Raises :class:`CallerBrokeContract` for (NULL, n > 0) (BUF-04).
    """
    full = _full_answer(full_answer, string)
    outcome = expected(len(full), c_buffer_size_start, buffer_present)
    n = outcome.elements_written
    if string and 0 < n < len(full):
        return (*full[: n - 1], NUL)
    return full[:n]


@dataclass(frozen=True)
class StringOutcome:
    """What a conforming WCHAR method does: counts include the NUL terminator (BUF-09 model choice)."""

    hresult: int
    pc_buffer_max: int  # wcslen + 1
    elements_written: int  # WCHARs written, the NUL included
    text: str  # what the caller reads back as a C string (up to the NUL)
    truncated: bool
    clauses: tuple[str, ...]
    elements: tuple[int, ...] = ()  # the code units written, the NUL included


def expected_string(text: str, cch: int, buffer_present: bool) -> StringOutcome:
    """The model's answer for a WCHAR buffer of ``cch`` characters holding ``text``.

    The count includes the terminating NUL, as dotnet/runtime's GetModuleInfo2 and GetAppDomainInfo
    count it (``trueLen = wcslen + 1``). A truncated fill writes ``cch - 1`` characters and a NUL, so the
    caller always reads a terminated (possibly cut) string. A cut may split a surrogate pair; the text
    then ends with a lone high surrogate, which is what the caller would see.
    """
    full = string_elements(text)
    outcome = expected(len(full), cch, buffer_present)
    written = expected_content(full, cch, buffer_present, string=True)
    units = b"".join(u.to_bytes(2, "little") for u in written[:-1])
    return StringOutcome(
        hresult=outcome.hresult,
        pc_buffer_max=outcome.pc_buffer_max,
        elements_written=outcome.elements_written,
        text=units.decode("utf-16-le", "surrogatepass"),
        truncated=outcome.elements_written < outcome.pc_buffer_max,
        clauses=outcome.clauses,
        elements=written,
    )


class ObservedCall(BaseModel):
    """One recorded call of a buffer method (from a live trace or a profiler under validation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    c_buffer_size_start: int = Field(ge=0, le=ULONG32_MAX)
    buffer_present: bool
    hr: int = Field(ge=-(2**31), le=ULONG32_MAX)
    pc_buffer_max: int | None = Field(default=None, ge=0, le=ULONG32_MAX, description="None: not set")
    elements_written: int = Field(ge=0, description="elements (not bytes) the method wrote")
    written_beyond: int = Field(
        default=0, ge=0, description="elements changed past cBufferSizeStart (a lower bound: a guard that "
        "only shows that something changed gives 1)")
    content: tuple[int | None, ...] | None = Field(
        default=None, description="the buffer's first elements after the call, None where an element was "
        "left untouched; None: not recorded")

    @model_validator(mode="after")
    def _content_fits(self) -> ObservedCall:
        if self.content is not None:
            if len(self.content) > self.c_buffer_size_start:
                raise ValueError(f"content holds {len(self.content)} elements, more than cBufferSizeStart="
                                 f"{self.c_buffer_size_start}")
            if any(e is not None and e < 0 for e in self.content):
                raise ValueError("content: elements are unsigned")
        return self


#: which observed field a :class:`BufferViolation` is about
CallField = Literal[
    "beyond",  # something changed past cBufferSizeStart (BUF-01)
    "overfill",  # more elements written than the buffer holds (BUF-01)
    "null-sized",  # the request itself: NULL buffer with a non-zero size (BUF-04)
    "rejected",  # the legal (NULL, 0) form refused with an argument error (BUF-04)
    "unset",  # *pcBufferMax not set (BUF-02)
    "count",  # *pcBufferMax is not the total (BUF-02)
    "count-without-nul",  # a string's *pcBufferMax leaves out the NUL (BUF-09)
    "written",  # number of elements written (BUF-03)
    "element",  # an element differs from the full answer's prefix (BUF-03)
    "unterminated",  # a string's last written element is not the NUL (BUF-09)
    "hresult",  # the HRESULT (BUF-05, BUF-09, BUF-10)
]


class BufferViolation(Violation):
    """A disagreement of one observed call with the model, with the field it is about and the two values
    (``got`` observed, ``want`` the model's; an HRESULT, a count or an element), so a caller can render it
    without the values that vary between machines or runs (a path's length, a ClassID)."""

    field: CallField
    got: int | None = None
    want: int | None = None
    element: int | None = Field(default=None, description="index of the element (element, unterminated)")
    size: int = Field(default=0, description="the call's cBufferSizeStart")


def _element(value: int | None) -> str:
    return "untouched" if value is None else f"{value:#x}"


def _check_content(call: ObservedCall, full: tuple[int, ...], string: bool) -> list[Violation]:
    """BUF-03 (the first element that differs from the full answer's prefix) and, for a string, BUF-09
    (its last written element is written but is not the NUL)."""
    if call.content is None:
        return []
    want = expected_content(full, call.c_buffer_size_start, call.buffer_present, string=string)
    out: list[Violation] = []
    seen: set[str] = set()
    size = call.c_buffer_size_start
    for i, (got, exp) in enumerate(zip(call.content, want, strict=False)):
        if got == exp:
            continue
        field: CallField
        if string and i == len(want) - 1 and got is not None:
            clause, field = "BUF-09", "unterminated"
            message = (f"element {i} = {_element(got)}: the string is not NUL-terminated, expected the NUL "
                       f"in its last written element {i}")
        else:
            clause, field = "BUF-03", "element"
            message = f"element {i} = {_element(got)}, expected {exp:#x} (the full answer's prefix)"
        if clause not in seen:
            seen.add(clause)
            out.append(BufferViolation(clause=clause, message=message, field=field, got=got, want=exp,
                                       element=i, size=size))
    return out


def check_observed(
    call: ObservedCall,
    available: int | None = None,
    *,
    full_answer: Sequence[int] | None = None,
    string: bool = False,
) -> list[Violation]:
    """Compare one observed call with the model and name the clause each disagreement breaks.

    ``available``: the true total, when known; ``full_answer``: the method's complete answer (its length is
    the total), when known, which lets the buffer's ``content`` be compared; ``string``: a WCHAR buffer
    (the full answer ends with its NUL, see :func:`string_elements`). The attribution is the module's
    (see its docstring): one clause per observed field; a runtime answering 0x8007007A for a too-small
    buffer breaks BUF-09 (the HRESULT) and, as it fills fewer elements than fit, BUF-03.
    """
    out: list[Violation] = []
    hr = to_unsigned(call.hr)
    size = call.c_buffer_size_start

    def add(clause: str, field: CallField, message: str, got: int | None = None, want: int | None = None
            ) -> None:
        out.append(
            BufferViolation(clause=clause, message=message, field=field, got=got, want=want, size=size)
        )

    if not call.buffer_present and size != 0:
        add("BUF-04", "null-sized", f"InfoBuffer is NULL but cBufferSizeStart={size}", got=size)
        return out
    full: tuple[int, ...] | None = None
    total = available
    if full_answer is not None:
        full = _full_answer(full_answer, string)
        if available is not None and available != len(full):
            raise InvalidInput(f"available={available} but the full answer holds {len(full)} elements")
        total = len(full)
    elif string and available is not None and available < 1:
        raise InvalidInput(f"available={available}: a string's count includes its NUL, so it is at least 1")
    if total is not None:
        total = _count("available", total)
    capacity = size if call.buffer_present else 0
    if call.written_beyond > 0:
        beyond = call.written_beyond
        add("BUF-01", "beyond", f"wrote past element {size} (at least {beyond} elements beyond "
            f"cBufferSizeStart={size}), expected none", got=beyond)
    elif call.elements_written > capacity:
        add("BUF-01", "overfill", f"{call.elements_written} elements written into a buffer of {capacity}",
            got=call.elements_written, want=capacity)
    rejected = not call.buffer_present and hr in _ARGUMENT_ERRORS
    if rejected:
        add("BUF-04", "rejected", f"the legal (NULL, 0) form rejected with {format_hresult(hr)}, expected it "
            "to be accepted", got=hr, want=HResult.S_OK.value)
    if total is None:
        if call.pc_buffer_max is None:
            add("BUF-02", "unset", "*pcBufferMax was not set")
        if capacity == 0 and hr != HResult.S_OK.value and not rejected:  # nothing fits, whatever the total
            add("BUF-10", "hresult", f"returned {format_hresult(hr)} with no element returned, expected "
                f"{format_hresult(HResult.S_OK.value)}", got=hr, want=HResult.S_OK.value)
        return out
    model = expected(total, size, call.buffer_present)
    if call.pc_buffer_max != model.pc_buffer_max:
        if call.pc_buffer_max is None:
            add("BUF-02", "unset", f"*pcBufferMax was not set, expected the total {model.pc_buffer_max}",
                want=model.pc_buffer_max)
        elif string and call.pc_buffer_max == total - 1:
            add("BUF-09", "count-without-nul", f"*pcBufferMax={call.pc_buffer_max} leaves out the NUL "
                f"terminator, expected {total} (the count includes the NUL)", got=call.pc_buffer_max,
                want=total)
        else:
            add("BUF-02", "count", f"*pcBufferMax={call.pc_buffer_max}, expected the total "
                f"{model.pc_buffer_max}", got=call.pc_buffer_max, want=model.pc_buffer_max)
    if call.elements_written != model.elements_written and call.elements_written <= capacity:
        add("BUF-03", "written", f"{call.elements_written} elements written, expected min(total, size) = "
            f"{model.elements_written}", got=call.elements_written, want=model.elements_written)
    if full is not None:
        out.extend(_check_content(call, full, string))
    if hr != model.hresult and not rejected:
        if 0 < capacity < total:
            clause, what = "BUF-09", " for a too-small buffer"
        elif model.elements_written > 0:
            clause, what = "BUF-05", ""
        else:
            clause, what = "BUF-10", " with no element returned"
        add(clause, "hresult", f"returned {format_hresult(hr)}{what}, expected "
            f"{format_hresult(model.hresult)}", got=hr, want=model.hresult)
    return out


# --- client strategies -------------------------------------------------------------------------------

Impl = Callable[[int, list[T | None] | None], tuple[int, int]]


@dataclass(frozen=True)
class ClientCall:
    """One call a strategy made: what it asked and what it got."""

    c_buffer_size_start: int
    buffer_present: bool
    hr: int
    pc_buffer_max: int


@dataclass(frozen=True)
class ClientResult(Generic[T]):
    elements: list[T]
    log: list[ClientCall] = field(default_factory=list)


def _call(impl: Impl[T], size: int, log: list[ClientCall]) -> tuple[list[T | None] | None, int, int]:
    buffer: list[T | None] | None = [None] * size if size > 0 else None
    answer = impl(size, buffer)
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise InvalidInput(f"impl({size}) returned {answer!r}, expected (hr, pc_buffer_max)")
    hr, pc_max = to_unsigned(answer[0]), _count("pc_buffer_max", answer[1])
    log.append(ClientCall(c_buffer_size_start=size, buffer_present=buffer is not None, hr=hr,
                          pc_buffer_max=pc_max))
    if hresult_failed(hr) and not (hr == _INSUFFICIENT and pc_max > size):
        raise BufferCallFailed(f"call #{len(log) - 1} (cBufferSizeStart={size}) failed: {format_hresult(hr)}")
    return buffer, hr, pc_max


def _take(buffer: list[T | None] | None, n: int, log: list[ClientCall]) -> list[T]:
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
    log: list[ClientCall] = []
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
    log: list[ClientCall] = []
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
