"""clr_model.buffers: the caller-allocated buffer protocol and the single/double-pass clients."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.buffers import (
    NUL,
    BufferCallFailed,
    BufferNeverSettled,
    BufferUnderfilled,
    BufferViolation,
    CallerBrokeContract,
    ObservedCall,
    check_observed,
    double_pass,
    expected,
    expected_content,
    expected_string,
    single_pass,
    string_elements,
    utf16_units,
)
from clr_model.errors import InvalidInput, ModelError
from clr_model.hresults import HResult
from clr_model.strategies.buffers import (
    GrowingImpl,
    ModelImpl,
    RuntimeLikeImpl,
    any_requests,
    growing_impls,
    observed_calls,
    requests,
    string_requests,
    strings,
)

S_OK = HResult.S_OK.value
INSUFFICIENT = HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER.value
FAST = settings(max_examples=75, deadline=None)


def _conforming(data: list[int], size: int, present: bool) -> ObservedCall:
    model = expected(data, size, present)
    return ObservedCall(c_buffer_size_start=size, buffer_present=present, hr=model.hresult,
                        pc_buffer_max=model.pc_buffer_max, elements_written=model.elements_written,
                        content=_buffer(model.elements or (), size if present else 0))


def _buffer(written: tuple[int, ...], size: int) -> tuple[int | None, ...]:
    """A buffer of ``size`` slots holding ``written`` and untouched (None) after it."""
    return (*written, *[None] * (size - len(written)))


def _string_call(text: str, cch: int, present: bool) -> ObservedCall:
    model = expected_string(text, cch, present)
    return ObservedCall(c_buffer_size_start=cch, buffer_present=present, hr=model.hresult,
                        pc_buffer_max=model.pc_buffer_max, elements_written=model.elements_written,
                        content=_buffer(model.elements, cch if present else 0))


def _clauses(call: ObservedCall, **inputs: object) -> list[str]:
    return sorted({v.clause for v in check_observed(call, **inputs)})  # type: ignore[arg-type]


# BUF-01 ---------------------------------------------------------------------------------------------

def test_BUF_01_never_past_the_buffer_example() -> None:
    assert expected([1, 2, 3], 2, True).elements_written == 2
    over = ObservedCall(c_buffer_size_start=2, buffer_present=True, hr=S_OK, pc_buffer_max=3,
                        elements_written=3)
    assert [v.clause for v in check_observed(over, available=3)] == ["BUF-01"]


def test_BUF_01_written_beyond_example() -> None:
    # GetModuleInfo's "safe default": a NUL stored into element 0 of a zero-element buffer.
    prestored = ObservedCall(c_buffer_size_start=0, buffer_present=True, hr=S_OK, pc_buffer_max=82,
                             elements_written=0, written_beyond=1, content=())
    violations = check_observed(prestored, full_answer=string_elements("x" * 81), string=True)
    assert [v.clause for v in violations] == ["BUF-01"]
    assert violations[0].message.startswith("wrote past element 0")


@FAST
@given(requests())
def test_BUF_01_never_past_the_buffer_property(req: tuple[list[int], int, bool]) -> None:
    data, size, present = req
    assert expected(data, size, present).elements_written <= size


@FAST
@given(requests(), st.integers(1, 5))
def test_BUF_01_written_beyond_is_buf01_only_property(req: tuple[list[int], int, bool], beyond: int) -> None:
    data, size, present = req
    call = _conforming(data, size, present).model_copy(update={"written_beyond": beyond})
    assert [v.clause for v in check_observed(call, full_answer=data)] == ["BUF-01"]


# BUF-02 ---------------------------------------------------------------------------------------------

def test_BUF_02_total_whatever_the_size_example() -> None:
    assert [expected(7, n, True).pc_buffer_max for n in (0, 1, 6, 7, 100)] == [7] * 5
    wrong = ObservedCall(c_buffer_size_start=3, buffer_present=True, hr=S_OK, pc_buffer_max=3,
                         elements_written=3)
    assert [v.clause for v in check_observed(wrong, available=7)] == ["BUF-02"]


@FAST
@given(requests())
def test_BUF_02_total_whatever_the_size_property(req: tuple[list[int], int, bool]) -> None:
    data, size, present = req
    assert expected(data, size, present).pc_buffer_max == len(data)


# BUF-03 ---------------------------------------------------------------------------------------------

def test_BUF_03_as_many_as_fit_example() -> None:
    assert expected([10, 11, 12], 2, True).elements == (10, 11)
    assert expected([10, 11, 12], 9, True).elements == (10, 11, 12)
    short = ObservedCall(c_buffer_size_start=5, buffer_present=True, hr=S_OK, pc_buffer_max=3,
                         elements_written=2)
    assert [v.clause for v in check_observed(short, available=3)] == ["BUF-03"]


def test_BUF_03_expected_content_example() -> None:
    assert expected_content([10, 11, 12], 2) == (10, 11)
    assert expected_content([10, 11, 12], 0, False) == ()
    assert expected_content(string_elements("ab"), 2, string=True) == (0x61, NUL)
    assert expected_content(string_elements("ab"), 9, string=True) == (0x61, 0x62, NUL)
    with pytest.raises(InvalidInput, match="ends with its NUL"):
        expected_content([0x61, 0x62], 1, string=True)
    wrong = ObservedCall(c_buffer_size_start=3, buffer_present=True, hr=S_OK, pc_buffer_max=3,
                         elements_written=2, content=(10, 99, None))
    messages = [(v.clause, v.message) for v in check_observed(wrong, full_answer=[10, 11, 12])]
    assert messages == [("BUF-03", "2 elements written, expected min(total, size) = 3"),
                        ("BUF-03", "element 1 = 0x63, expected 0xb (the full answer's prefix)")]


@FAST
@given(requests())
def test_BUF_03_as_many_as_fit_property(req: tuple[list[int], int, bool]) -> None:
    data, size, present = req
    outcome = expected(data, size, present)
    assert outcome.elements == tuple(data[: min(len(data), size)])
    assert expected_content(data, size, present) == outcome.elements
    assert check_observed(_conforming(data, size, present), available=len(data)) == []
    assert check_observed(_conforming(data, size, present), full_answer=data) == []


@FAST
@given(requests(), st.data())
def test_BUF_03_doctored_element_is_buf03_property(
    req: tuple[list[int], int, bool], data: st.DataObject
) -> None:
    full, size, present = req
    call = _conforming(full, size, present)
    if not call.elements_written:
        return
    i = data.draw(st.integers(0, call.elements_written - 1))
    content = list(call.content or ())
    content[i] = full[i] + 1
    doctored = call.model_copy(update={"content": tuple(content)})
    assert [v.clause for v in check_observed(doctored, full_answer=full)] == ["BUF-03"]


# BUF-04 ---------------------------------------------------------------------------------------------

def test_BUF_04_null_needs_zero_example() -> None:
    with pytest.raises(CallerBrokeContract, match="BUF-04"):
        expected(3, 2, False)
    call = ObservedCall(c_buffer_size_start=2, buffer_present=False, hr=S_OK, pc_buffer_max=3,
                        elements_written=0)
    assert [v.clause for v in check_observed(call)] == ["BUF-04"]
    assert expected(3, 0, False).elements_written == 0
    rejected = ObservedCall(c_buffer_size_start=0, buffer_present=False, hr=HResult.E_INVALIDARG.value,
                            pc_buffer_max=None, elements_written=0)
    assert _clauses(rejected) == ["BUF-02", "BUF-04"]  # not BUF-10: the legal form was refused
    assert _clauses(rejected, available=3) == ["BUF-02", "BUF-04"]


@FAST
@given(st.integers(0, 100), st.integers(1, 2**32 - 1))
def test_BUF_04_null_needs_zero_property(total: int, size: int) -> None:
    with pytest.raises(CallerBrokeContract):
        expected(total, size, False)


# BUF-05 ---------------------------------------------------------------------------------------------

def test_BUF_05_s_ok_when_returned_example() -> None:
    assert expected([1], 1, True).hresult == S_OK
    failed = ObservedCall(c_buffer_size_start=4, buffer_present=True, hr=HResult.E_FAIL.value,
                          pc_buffer_max=2, elements_written=2)
    assert [v.clause for v in check_observed(failed, available=2)] == ["BUF-05"]


@FAST
@given(requests())
def test_BUF_05_s_ok_when_returned_property(req: tuple[list[int], int, bool]) -> None:
    data, size, present = req
    outcome = expected(data, size, present)
    if outcome.elements_written > 0:
        assert outcome.hresult == S_OK and outcome.pc_buffer_max == len(data)
        assert "BUF-05" in outcome.clauses


# BUF-06 ---------------------------------------------------------------------------------------------

def test_BUF_06_single_pass_reallocates_example() -> None:
    result = single_pass(ModelImpl(data=list(range(10))), initial=4)
    assert result.elements == list(range(10))
    assert [(c.c_buffer_size_start, c.pc_buffer_max) for c in result.log] == [(4, 10), (10, 10)]
    assert single_pass(ModelImpl(data=[1, 2]), initial=8).elements == [1, 2]


@FAST
@given(growing_impls(), st.integers(0, 30))
def test_BUF_06_single_pass_property(impl: GrowingImpl, initial: int) -> None:
    result = single_pass(impl, initial)
    assert result.elements == impl.data  # nothing truncated, nothing invented
    for before, after in zip(result.log, result.log[1:], strict=False):
        assert after.c_buffer_size_start == before.pc_buffer_max


# BUF-07 ---------------------------------------------------------------------------------------------

def test_BUF_07_double_pass_example() -> None:
    result = double_pass(ModelImpl(data=[5, 6, 7]))
    assert [(c.c_buffer_size_start, c.buffer_present) for c in result.log] == [(0, False), (3, True)]
    assert result.elements == [5, 6, 7]
    assert double_pass(ModelImpl(data=[])).elements == []


@FAST
@given(growing_impls())
def test_BUF_07_double_pass_property(impl: GrowingImpl) -> None:
    result = double_pass(impl)
    assert result.log[0].c_buffer_size_start == 0 and not result.log[0].buffer_present
    if len(result.log) > 1:
        assert result.log[1].c_buffer_size_start == result.log[0].pc_buffer_max
    assert result.elements == impl.data


# BUF-08 ---------------------------------------------------------------------------------------------

def test_BUF_08_truncation_test_example() -> None:
    impl = ModelImpl(data=[1, 2, 3], grow=2, steps=1)  # grows once, at the first call
    result = single_pass(impl, initial=3)
    assert result.log[0].pc_buffer_max == 5 > result.log[0].c_buffer_size_start
    assert result.elements == [1, 2, 3, 3, 4]


@FAST
@given(growing_impls(), st.integers(0, 30))
def test_BUF_08_truncation_test_property(impl: GrowingImpl, initial: int) -> None:
    log = single_pass(impl, initial).log
    assert all(c.pc_buffer_max > c.c_buffer_size_start for c in log[:-1])
    assert log[-1].pc_buffer_max <= log[-1].c_buffer_size_start


# BUF-09 ---------------------------------------------------------------------------------------------

def test_BUF_09_too_small_example() -> None:
    outcome = expected([1, 2, 3], 2, True)
    assert (outcome.hresult, outcome.pc_buffer_max, outcome.elements_written) == (S_OK, 3, 2)
    assert "BUF-09" in outcome.clauses
    name = expected_string("abc", 2, True)  # the NUL counts: 4 needed
    assert (name.pc_buffer_max, name.elements_written, name.text, name.truncated) == (4, 2, "a", True)
    assert expected_string("abc", 4, True).text == "abc"
    # An error answer that writes nothing breaks the HRESULT choice (BUF-09) and the fill (BUF-03).
    runtime = ObservedCall(c_buffer_size_start=2, buffer_present=True, hr=INSUFFICIENT, pc_buffer_max=4,
                           elements_written=0)
    assert [v.clause for v in check_observed(runtime, available=4)] == ["BUF-03", "BUF-09"]


def test_BUF_09_insufficient_buffer_with_lone_nul_example() -> None:
    """GetModuleInfo/GetModuleInfo2: 0x8007007A and the NUL pre-stored in element 0. The NUL is one element
    written (the page: "filled with as many elements as possible"): BUF-03 for the fill, BUF-09 for the
    HRESULT; at cch 1 the lone NUL is exactly the model's truncated string, so only BUF-09 remains."""
    path = string_elements("/tmp/app.dll")
    total = len(path)
    cut = ObservedCall(c_buffer_size_start=total - 1, buffer_present=True, hr=INSUFFICIENT,
                       pc_buffer_max=total, elements_written=1, content=_buffer((NUL,), total - 1))
    violations = check_observed(cut, full_answer=path, string=True)
    assert [v.clause for v in violations] == ["BUF-03", "BUF-03", "BUF-09"]
    assert violations[0].message == f"1 elements written, expected min(total, size) = {total - 1}"
    assert violations[-1].message.startswith("returned 0x8007007A")
    one = ObservedCall(c_buffer_size_start=1, buffer_present=True, hr=INSUFFICIENT, pc_buffer_max=total,
                       elements_written=1, content=(NUL,))
    assert _clauses(one, full_answer=path, string=True) == ["BUF-09"]


def test_BUF_09_string_count_and_termination_example() -> None:
    app = string_elements("app")
    assert app == (0x61, 0x70, 0x70, NUL)
    no_nul = ObservedCall(c_buffer_size_start=3, buffer_present=True, hr=S_OK, pc_buffer_max=3,
                          elements_written=3, content=app[:3])
    messages = [(v.clause, v.message) for v in check_observed(no_nul, full_answer=app, string=True)]
    assert messages == [
        ("BUF-09", "*pcBufferMax=3 leaves out the NUL terminator, expected 4 (the count includes the NUL)"),
        ("BUF-09", "element 2 = 0x70: the string is not NUL-terminated, expected the NUL in its last written "
                   "element 2"),
    ]
    doubled = no_nul.model_copy(update={"pc_buffer_max": 5})
    assert _clauses(doubled, full_answer=app, string=True) == ["BUF-02", "BUF-09"]


@FAST
@given(st.text(max_size=12).filter(lambda s: "\x00" not in s), st.integers(0, 30), st.booleans())
def test_BUF_09_strings_count_the_nul_property(text: str, cch: int, present: bool) -> None:
    cch = cch if present else 0
    outcome = expected_string(text, cch, present)
    assert outcome.pc_buffer_max == utf16_units(text) + 1
    assert outcome.elements_written == min(cch, utf16_units(text) + 1)
    assert text.encode("utf-16-le", "surrogatepass").startswith(
        outcome.text.encode("utf-16-le", "surrogatepass"))
    assert outcome.truncated == (outcome.elements_written < outcome.pc_buffer_max)
    if not outcome.truncated:
        assert outcome.text == text


@FAST
@given(string_requests())
def test_BUF_09_string_observations_property(req: tuple[str, int, bool]) -> None:
    text, cch, present = req
    full = string_elements(text)
    call = _string_call(text, cch, present)
    assert check_observed(call, full_answer=full, string=True) == []
    n = call.elements_written
    if 0 < n < len(full):  # a cut string: its NUL replaced by the next code unit -> termination only
        content = (*(call.content or ())[: n - 1], full[n - 1], *(call.content or ())[n:])
        doctored = call.model_copy(update={"content": content})
        assert [v.clause for v in check_observed(doctored, full_answer=full, string=True)] == ["BUF-09"]
    if 0 < cch < len(full):  # the runtime's error answer is BUF-09 for the HRESULT, whatever it wrote
        failed = call.model_copy(update={"hr": INSUFFICIENT})
        assert _clauses(failed, full_answer=full, string=True) == ["BUF-09"]


@FAST
@given(st.lists(st.integers(0, 9), max_size=20), st.integers(0, 25))
def test_BUF_09_runtime_style_clients_agree_property(data: list[int], initial: int) -> None:
    assert single_pass(RuntimeLikeImpl(data=list(data)), initial).elements == data
    assert double_pass(RuntimeLikeImpl(data=list(data))).elements == data


# BUF-10 ---------------------------------------------------------------------------------------------

def test_BUF_10_nothing_returned_example() -> None:
    for outcome in (expected(5, 0, False), expected(5, 0, True), expected(0, 3, True)):
        assert outcome.hresult == S_OK and outcome.elements_written == 0 and "BUF-10" in outcome.clauses
    failing = ObservedCall(c_buffer_size_start=0, buffer_present=False, hr=INSUFFICIENT, pc_buffer_max=5,
                           elements_written=0)
    assert [v.clause for v in check_observed(failing, available=5)] == ["BUF-10"]


@FAST
@given(st.integers(0, 2**32 - 1))
def test_BUF_10_nothing_returned_property(total: int) -> None:
    outcome = expected(total, 0, False)
    assert (outcome.hresult, outcome.pc_buffer_max, outcome.elements_written) == (S_OK, total, 0)


# BUF-11 ---------------------------------------------------------------------------------------------

def test_BUF_11_growth_is_bounded_example() -> None:
    with pytest.raises(BufferNeverSettled, match="double pass"):
        double_pass(ModelImpl(data=[1], grow=1, steps=10**9), max_rounds=3)
    with pytest.raises(BufferNeverSettled, match="single pass"):
        single_pass(ModelImpl(data=[1], grow=1, steps=10**9), initial=0, max_rounds=3)
    grown = double_pass(ModelImpl(data=[1], grow=1, steps=2))  # grew between the two calls
    assert grown.elements == [1, 1, 2] and len(grown.log) == 3


@FAST
@given(growing_impls(settles=False), st.integers(1, 6))
def test_BUF_11_growth_is_bounded_property(impl: GrowingImpl, rounds: int) -> None:
    with pytest.raises(BufferNeverSettled):
        double_pass(impl, max_rounds=rounds)
    assert len(impl.data) > 0 and impl.calls == rounds + 1


# BUF-12 ---------------------------------------------------------------------------------------------

def test_BUF_12_ulong32_counts_example() -> None:
    assert expected(2**32 - 1, 0, False).pc_buffer_max == 2**32 - 1
    with pytest.raises(InvalidInput, match="BUF-12"):
        expected(2**32, 0, False)
    with pytest.raises(InvalidInput, match="cBufferSizeStart=-1"):
        expected(1, -1, True)


@FAST
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)))
def test_BUF_12_ulong32_counts_property(bad: int) -> None:
    with pytest.raises(InvalidInput):
        expected(bad, 0, False)
    with pytest.raises(InvalidInput):
        expected(0, bad, True)


# totality, observed calls, odd implementations -------------------------------------------------------

@FAST
@given(any_requests())
def test_expected_is_total(req: tuple[object, object, object]) -> None:
    try:
        expected(*req)  # type: ignore[call-overload]
    except ModelError:
        pass


@FAST
@given(observed_calls())
def test_check_observed_is_total_and_names_clauses(obs: tuple[ObservedCall, int | None]) -> None:
    call, total = obs
    for violation in check_observed(call, available=total):
        assert violation.clause.startswith("BUF-") and str(violation)


@FAST
@given(observed_calls(), st.one_of(st.none(), st.lists(st.integers(-2, 3), max_size=8)), st.booleans())
def test_check_observed_with_full_answer_is_total(
    obs: tuple[ObservedCall, int | None], full: list[int] | None, string: bool
) -> None:
    call, total = obs
    try:
        violations = check_observed(call, total, full_answer=full, string=string)
    except ModelError:
        return
    assert all(v.clause.startswith("BUF-") and v.message for v in violations)


@FAST
@given(st.one_of(st.text(max_size=5), st.integers(), st.none(), st.lists(st.integers(-1, 2), max_size=4)),
       st.integers(-1, 6), st.booleans(), st.booleans())
def test_expected_content_and_string_elements_are_total(full: object, size: int, present: bool,
                                                        string: bool) -> None:
    try:
        expected_content(full, size, present, string=string)  # type: ignore[arg-type]
    except ModelError:
        pass
    try:
        string_elements(full)  # type: ignore[arg-type]
    except ModelError:
        pass


@FAST
@given(strings())
def test_string_elements_roundtrip(text: str) -> None:
    full = string_elements(text)
    assert full[-1] == NUL and len(full) == utf16_units(text) + 1
    assert expected_string(text, len(full), True).elements == full


def test_failed_call_and_underfilled_buffer_are_typed() -> None:
    with pytest.raises(BufferCallFailed, match="E_FAIL"):
        single_pass(lambda size, buf: (HResult.E_FAIL.value, 0), initial=1)
    with pytest.raises(BufferUnderfilled, match="slot 0"):
        single_pass(lambda size, buf: (S_OK, 1), initial=2)
    with pytest.raises(InvalidInput, match="expected"):
        single_pass(lambda size, buf: S_OK, initial=2)  # type: ignore[arg-type,return-value]


def test_check_observed_names_the_field_and_both_values_BUF_02_03_09() -> None:
    """Each disagreement is a BufferViolation naming the observed field and the two values, so a judge can
    write it without what varies between machines (a path's length) or runs (a ClassID)."""
    cut = ObservedCall(c_buffer_size_start=80, buffer_present=True, hr=0x8007007A, pc_buffer_max=80,
                       elements_written=1, content=(0, *([None] * 79)))
    found = check_observed(cut, full_answer=string_elements("x" * 80), string=True)
    assert all(isinstance(v, BufferViolation) and v.size == 80 for v in found)
    fields = {(v.clause, v.field, v.got, v.want) for v in found if isinstance(v, BufferViolation)}
    assert fields == {
        ("BUF-09", "count-without-nul", 80, 81),
        ("BUF-03", "written", 1, 80),
        ("BUF-03", "element", 0, ord("x")),
        ("BUF-09", "hresult", 0x8007007A, 0),
    }
