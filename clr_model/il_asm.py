"""A small CIL assembler: instructions with symbolic labels to code bytes, and code plus header fields and
exception clauses to a method body (ECMA-335 Partition II §25.4). The IL checker's tests and generators
build bodies with it; it encodes what it is given, valid or not (a checker test needs broken bodies too).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from clr_model.il import EHClause
from clr_model.il_opcodes import BY_NAME, Operand, operand_size

__all__ = ["Ins", "Label", "assemble", "encode_body"]


@dataclass(frozen=True)
class Label:
    """A position in the program: the offset of the instruction after it."""

    name: str


@dataclass(frozen=True)
class Ins:
    """One instruction: its name and operand (an int, a float, a label name for a branch, a tuple of label
    names for a switch; None when it takes none)."""

    name: str
    operand: int | float | str | tuple[str, ...] | None = None

    @property
    def size(self) -> int:
        op = BY_NAME[self.name]
        if op.operand is Operand.SWITCH:
            targets = self.operand if isinstance(self.operand, tuple) else ()
            return op.size + 4 + 4 * len(targets)
        return op.size + operand_size(op.operand)


def assemble(program: Sequence[Ins | Label]) -> tuple[bytes, dict[str, int]]:
    """The code bytes of ``program`` and every label's offset."""
    labels: dict[str, int] = {}
    at = 0
    for item in program:
        if isinstance(item, Label):
            labels[item.name] = at
        else:
            at += item.size
    out = bytearray()
    for item in program:
        if isinstance(item, Label):
            continue
        op = BY_NAME[item.name]
        out += bytes([op.code]) if op.size == 1 else bytes([op.code >> 8, op.code & 0xFF])
        end = len(out) + item.size - op.size
        kind, value = op.operand, item.operand
        number = value if isinstance(value, int | float) else 0
        if kind is Operand.SWITCH:
            names = value if isinstance(value, tuple) else ()
            out += struct.pack("<I", len(names))
            out += b"".join(struct.pack("<i", labels[n] - end) for n in names)
        elif kind in (Operand.BRANCH8, Operand.BRANCH32):
            delta = labels[value] - end if isinstance(value, str) else int(number)
            out += struct.pack("<b" if kind is Operand.BRANCH8 else "<i", delta)
        elif kind is Operand.FLOAT32:
            out += struct.pack("<f", float(number))
        elif kind is Operand.FLOAT64:
            out += struct.pack("<d", float(number))
        elif kind is not Operand.NONE:
            width = operand_size(kind)
            out += (int(number) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out), labels


def encode_body(
    code: bytes,
    *,
    max_stack: int = 8,
    local_signature: int = 0,
    init_locals: bool = False,
    clauses: Sequence[EHClause] = (),
    tiny: bool | None = None,
    fat_clauses: bool | None = None,
) -> bytes:
    """A method body: a tiny header when ``tiny`` (None: when the code, stack and locals allow one and there
    are no clauses), else a fat header, the code and (with clauses) one EH section, small unless
    ``fat_clauses`` or an offset or length needs the fat form."""
    if tiny is None:
        tiny = len(code) < 64 and max_stack <= 8 and not local_signature and not clauses and not init_locals
    if tiny:
        return bytes([(len(code) << 2 | 0x2) & 0xFF]) + code
    flags = 0x3 | (0x8 if clauses else 0) | (0x10 if init_locals else 0)
    out = bytearray(struct.pack("<HHII", flags | 3 << 12, max_stack, len(code), local_signature)) + code
    if not clauses:
        return bytes(out)
    out += bytes(-len(out) % 4)
    small_fits = all(c.try_offset < 1 << 16 and c.try_length < 256 and c.handler_offset < 1 << 16
                     and c.handler_length < 256 and c.flags < 1 << 16 for c in clauses) and len(clauses) <= 20
    fat = fat_clauses if fat_clauses is not None else not small_fits
    if fat:
        out += struct.pack("<I", 0x41 | (4 + 24 * len(clauses)) << 8)
        for c in clauses:
            out += struct.pack("<IIIIII", c.flags, c.try_offset, c.try_length, c.handler_offset,
                               c.handler_length, c.class_token_or_filter)
    else:
        out += struct.pack("<BBH", 0x01, 4 + 12 * len(clauses), 0)
        for c in clauses:
            out += struct.pack("<HHBHBI", c.flags, c.try_offset, c.try_length, c.handler_offset,
                               c.handler_length, c.class_token_or_filter)
    return bytes(out)
