"""The HRESULT table: values from winerror.h / corerror.xml, formatting, signed/unsigned forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.hresults import HResult, format_hresult, hresult_failed, name_of, to_unsigned


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("S_OK", 0x0),
        ("S_FALSE", 0x1),
        ("E_NOTIMPL", 0x80004001),
        ("E_FAIL", 0x80004005),
        ("E_INVALIDARG", 0x80070057),
        ("E_OUTOFMEMORY", 0x8007000E),
        ("CLASS_E_NOAGGREGATION", 0x80040110),
        ("CORPROF_E_NOT_MANAGED_THREAD", 0x80131355),
        ("CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD", 0x8013135E),
        ("CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX", 0x8013135F),
        ("CORPROF_E_STACKSNAPSHOT_UNSAFE", 0x80131360),
        ("CORPROF_E_STACKSNAPSHOT_ABORTED", 0x80131361),
        ("CORPROF_E_ASYNCHRONOUS_UNSAFE", 0x80131364),
        ("CORPROF_E_INCONSISTENT_WITH_FLAGS", 0x80131374),
        ("CORPROF_E_CALLBACK4_REQUIRED", 0x8013137B),
        ("CORPROF_E_SUSPENSION_IN_PROGRESS", 0x80131388),
    ],
)
def test_values_match_the_headers(name: str, value: int) -> None:
    assert HResult[name] == value


def test_names_and_values_are_unique() -> None:
    assert len({h.value for h in HResult}) == len(HResult)


def test_format_known_and_unknown() -> None:
    assert format_hresult(0x8013135F) == "0x8013135F CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX"
    assert format_hresult(-2146233505) == "0x8013135F CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX"
    assert format_hresult(0x80131999) == "0x80131999"
    assert name_of(0x12345) is None


def test_failed_and_out_of_range() -> None:
    assert HResult.E_FAIL.failed and not HResult.S_FALSE.failed
    with pytest.raises(ValueError, match="not a 32-bit HRESULT"):
        to_unsigned(2**32)
    with pytest.raises(ValueError):
        to_unsigned(-(2**31) - 1)


@settings(max_examples=100)
@given(st.integers(-(2**31), 2**31 - 1))
def test_signed_and_unsigned_forms_agree(signed: int) -> None:
    unsigned = to_unsigned(signed)
    assert 0 <= unsigned < 2**32
    assert hresult_failed(unsigned) == (signed < 0)
    assert format_hresult(signed) == format_hresult(unsigned)
