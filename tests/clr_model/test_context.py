"""CONTEXT layouts: offsets from winnt.h / pal.h, pack/unpack round trips, validation errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model import context as ctx
from clr_model.context import (
    AMD64_CONTEXT,
    AMD64_PAL_XSTATE,
    X86_CONTEXT,
    ContextError,
    ContextFieldError,
    ContextFlagsError,
    ContextLayout,
    ContextMisaligned,
    ContextTooShort,
    amd64_layout_for_size,
    runtime_context_layout,
    runtime_context_size,
)
from clr_model.errors import ModelError
from clr_model.strategies.context import context_buffers, context_values, layouts


@pytest.mark.parametrize(
    ("name", "offset", "size"),
    [
        ("P1Home", 0x00, 8),
        ("P6Home", 0x28, 8),
        ("ContextFlags", 0x30, 4),
        ("MxCsr", 0x34, 4),
        ("SegCs", 0x38, 2),
        ("SegSs", 0x42, 2),
        ("EFlags", 0x44, 4),
        ("Dr0", 0x48, 8),
        ("Dr7", 0x70, 8),
        ("Rax", 0x78, 8),
        ("Rsp", 0x98, 8),
        ("Rbp", 0xA0, 8),
        ("R15", 0xF0, 8),
        ("Rip", 0xF8, 8),
        ("FltSave", 0x100, 512),
        ("Xmm0", 0x1A0, 16),
        ("Xmm15", 0x290, 16),
        ("VectorRegister", 0x300, 416),
        ("VectorControl", 0x4A0, 8),
        ("LastExceptionFromRip", 0x4C8, 8),
    ],
)
def test_amd64_offsets_match_winnt_h(name: str, offset: int, size: int) -> None:
    assert AMD64_CONTEXT.fields[name] == (offset, size)


def test_amd64_size_and_alignment() -> None:
    assert (AMD64_CONTEXT.size, AMD64_CONTEXT.alignment) == (1232, 16)


@pytest.mark.parametrize(
    ("name", "offset", "size"),
    [
        ("ContextFlags", 0x00, 4),
        ("Dr0", 0x04, 4),
        ("Dr7", 0x18, 4),
        ("FloatSave", 0x1C, 112),
        ("SegGs", 0x8C, 4),
        ("SegDs", 0x98, 4),
        ("Edi", 0x9C, 4),
        ("Eax", 0xB0, 4),
        ("Ebp", 0xB4, 4),
        ("Eip", 0xB8, 4),
        ("SegCs", 0xBC, 4),
        ("EFlags", 0xC0, 4),
        ("Esp", 0xC4, 4),
        ("SegSs", 0xC8, 4),
        ("ExtendedRegisters", 0xCC, 512),
    ],
)
def test_x86_offsets_match_winnt_h(name: str, offset: int, size: int) -> None:
    assert X86_CONTEXT.fields[name] == (offset, size)


def test_x86_size_and_alignment() -> None:
    assert (X86_CONTEXT.size, X86_CONTEXT.alignment) == (716, 4)


def test_pal_xstate_tail_is_a_prefix_compatible_extension() -> None:
    assert AMD64_PAL_XSTATE.size == 3104
    for name, place in AMD64_CONTEXT.fields.items():
        assert AMD64_PAL_XSTATE.fields[name] == place
    assert AMD64_PAL_XSTATE.fields["XStateFeaturesMask"] == (0x4D0, 8)
    assert AMD64_PAL_XSTATE.fields["Ymm0H"] == (0x4E0, 16)
    assert AMD64_PAL_XSTATE.fields["KMask0"] == (0x5E0, 8)
    assert AMD64_PAL_XSTATE.fields["Zmm0H"] == (0x620, 32)
    assert AMD64_PAL_XSTATE.fields["Zmm31"] == (0xC20 - 64, 64)


def test_flag_constants() -> None:
    assert ctx.CONTEXT_AMD64 == 0x00100000
    assert ctx.CONTEXT_AMD64_FULL == 0x0010000B
    assert ctx.CONTEXT_AMD64_ALL == 0x0010001F
    assert ctx.CONTEXT_I386 == 0x00010000
    assert ctx.CONTEXT_I386_FULL == 0x00010007
    assert ctx.CONTEXT_I386_ALL == 0x0001003F
    assert ctx.amd64_flags(ctx.CONTROL, ctx.INTEGER) == 0x00100003
    assert ctx.x86_flags(ctx.CONTROL) == 0x00010001


def test_pack_places_registers_little_endian() -> None:
    data = AMD64_CONTEXT.pack({"ContextFlags": ctx.CONTEXT_AMD64_FULL, "Rip": 0x1122334455667788, "Rsp": 8})
    assert len(data) == 1232
    assert data[0x30:0x34] == bytes.fromhex("0b001000")
    assert data[0xF8:0x100] == bytes.fromhex("8877665544332211")
    expected = {"Rip": 0x1122334455667788, "Rsp": 8, "Rax": 0}
    assert AMD64_CONTEXT.unpack(data, ["Rip", "Rsp", "Rax"]) == expected


def test_pack_refuses_bad_values() -> None:
    with pytest.raises(ContextFieldError, match="no field 'Rzz'"):
        AMD64_CONTEXT.pack({"Rzz": 1})
    with pytest.raises(ContextFieldError, match="SegCs"):
        AMD64_CONTEXT.pack({"SegCs": 0x10000})
    with pytest.raises(ContextFieldError, match="overlap"):
        AMD64_CONTEXT.pack({"FltSave": 0, "Xmm3": 1})
    with pytest.raises(ContextFieldError, match="SegCs"):
        AMD64_CONTEXT.pack({"SegCs": -1})


def test_validate_names_each_problem() -> None:
    good = AMD64_CONTEXT.pack({"ContextFlags": ctx.CONTEXT_AMD64_FULL})
    AMD64_CONTEXT.validate(good, address=0x7000)
    with pytest.raises(ContextTooShort, match="1231 bytes given"):
        AMD64_CONTEXT.validate(good[:-1])
    with pytest.raises(ContextMisaligned, match="0x7008"):
        AMD64_CONTEXT.validate(good, address=0x7008)
    x86_flags = AMD64_CONTEXT.pack({"ContextFlags": ctx.CONTEXT_I386_FULL})
    with pytest.raises(ContextFlagsError, match="architecture bit"):
        AMD64_CONTEXT.validate(x86_flags)
    with pytest.raises(ContextFlagsError, match="undefined bits 0x200"):
        AMD64_CONTEXT.validate(AMD64_CONTEXT.pack({"ContextFlags": ctx.CONTEXT_AMD64 | 0x200}))
    X86_CONTEXT.validate(X86_CONTEXT.pack({"ContextFlags": ctx.CONTEXT_I386_ALL}), address=0x1004)


def test_with_size_is_prefix_compatible_and_refuses_smaller() -> None:
    big = AMD64_CONTEXT.with_size(1232 + 64)
    assert big.size == 1296 and big.declared_size == 1232
    assert big.fields["Rip"] == AMD64_CONTEXT.fields["Rip"]
    assert AMD64_CONTEXT.with_size(1232) is AMD64_CONTEXT
    with pytest.raises(ContextTooShort):
        AMD64_CONTEXT.with_size(1000)
    with pytest.raises(ContextMisaligned):
        AMD64_CONTEXT.with_size(1240)
    data = big.pack({"Rip": 5})
    assert AMD64_CONTEXT.unpack(data[:1232], ["Rip"]) == {"Rip": 5}


def test_layout_for_runtime_sizes() -> None:
    assert amd64_layout_for_size(1232) is AMD64_CONTEXT
    assert amd64_layout_for_size(3104) is AMD64_PAL_XSTATE
    assert amd64_layout_for_size(3104 + 128).fields["Zmm16"] == AMD64_PAL_XSTATE.fields["Zmm16"]
    with pytest.raises(ContextTooShort):
        amd64_layout_for_size(716)


def test_layout_refuses_fields_outside_the_structure() -> None:
    with pytest.raises(ContextFieldError):
        ContextLayout(ctx.Arch.X86, "bad", 8, {"ContextFlags": (6, 4)})


@settings(max_examples=150)
@given(st.data())
def test_pack_unpack_round_trip_and_validates(data: st.DataObject) -> None:
    layout = data.draw(layouts())
    values = data.draw(context_values(layout))
    packed = layout.pack(values)
    assert len(packed) == layout.size
    assert layout.unpack(packed, values) == values
    layout.validate(packed)


@settings(max_examples=150)
@given(st.data())
def test_validate_is_total_on_adversarial_buffers(data: st.DataObject) -> None:
    layout = data.draw(layouts())
    buf = data.draw(context_buffers(layout))
    address = data.draw(st.none() | st.integers(0, 2**48))
    try:
        layout.validate(buf, address=address)
    except ContextError as exc:
        assert isinstance(exc, ModelError)
        assert str(exc).startswith(layout.name)
    else:
        assert len(buf) >= layout.size


@pytest.mark.parametrize(
    ("version", "size"),
    [("3.1.23", 1232), ("8.0.4", 3104), ("8.0.0-rc.1", 3104), ("5.0.0", None), ("", None)],
)
def test_runtime_context_size_by_version(version: str, size: int | None) -> None:
    assert runtime_context_size(version) == size


def test_runtime_context_layouts_are_the_declared_layouts() -> None:
    assert runtime_context_layout("3.1.23") is AMD64_CONTEXT
    assert runtime_context_layout("8.0.4") is AMD64_PAL_XSTATE
    assert runtime_context_layout("9.0.0") is None
