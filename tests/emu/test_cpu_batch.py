"""The CPU's register batches (issue 23, part 5) read and write what unicorn's own batch methods do.

:meth:`emu.cpu.Cpu.write_registers` and :meth:`~emu.cpu.Cpu.read_registers` make their ctypes arrays once
per list of names and call unicorn's batch functions with them; a second CPU written through unicorn's
``reg_write_batch`` and read one register at a time must hold and give the same values, on x64 and x86.
"""

from __future__ import annotations

from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from emu.cpu import Cpu, register_id
from emu.machine import REGISTERS


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["x64", "x86"]), st.data())
def test_batches_equal_unicorns_own(arch: Literal["x64", "x86"], data: st.DataObject) -> None:
    names = list(REGISTERS[arch])
    names = data.draw(st.permutations(names))[: data.draw(st.integers(1, len(names)))]
    bits = 64 if arch == "x64" else 32
    values = [data.draw(st.integers(0, 2**bits - 1)) for _ in names]
    fast, slow = Cpu(arch), Cpu(arch)
    assert fast._batch(tuple(names)) is not None  # the batch path is the one under test
    fast.write_registers(list(zip(names, values, strict=True)))
    slow.uc.reg_write_batch([(register_id(n), v) for n, v in zip(names, values, strict=True)])
    assert [fast[n] for n in names] == [slow[n] for n in names]
    assert fast.read_registers(names) == [slow[n] for n in names]
    ids = [register_id(n) for n in names]
    assert fast.read_registers(names) == [int(v) for v in slow.uc.reg_read_batch(ids)]


def test_x87_registers_take_the_general_path() -> None:
    cpu = Cpu("x64")
    assert cpu._batch(("rax", "st0")) is None
    cpu.write_registers([("rax", 5), ("st0", 3 << 64 | 7)])
    assert cpu.read_registers(["rax", "st0"]) == [5, 3 << 64 | 7]
