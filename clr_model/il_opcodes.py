"""Every CIL instruction as data: one table (``il_opcodes.txt`` beside this module, package data), from
ECMA-335 Partition III (the instruction set, the opcode encodings of §1.2 and each instruction's stack
transition).

A row: the encoding (one byte, or ``FE xx`` for the two-byte ones), the name, the operand kind (how many
bytes follow the opcode and what they mean), how many stack items the instruction pops and pushes (``var``
when the count comes from a signature: calls, ``ret``), and its control flow (what may run next).

Undefined encodings (``24``, ``77``, ``A6``..``B2``, ``FE 08`` ...) have no row: decoding one is a finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from importlib import resources

__all__ = ["BY_NAME", "OPCODES", "TWO_BYTE_PREFIX", "VAR", "Flow", "OpCode", "Operand", "operand_size"]

#: The first byte of every two-byte opcode.
TWO_BYTE_PREFIX = 0xFE

#: A pop or push count that the instruction's operand (a signature) or the method's return type decides.
VAR = -1


class Operand(Enum):
    """What follows the opcode (Partition III §1.2 and the operand column of each instruction)."""

    NONE = "none"
    INT8 = "i1"  # an int8 (ldc.i4.s) or uint8 (unaligned., no.)
    INT32 = "i4"
    INT64 = "i8"
    FLOAT32 = "r4"
    FLOAT64 = "r8"
    BRANCH8 = "br1"  # an int8 offset from the next instruction's start
    BRANCH32 = "br4"  # an int32 offset from the next instruction's start
    SWITCH = "switch"  # uint32 N, then N int32 offsets from the end of the switch instruction
    METHOD = "method"  # a MethodDef, MemberRef or MethodSpec token
    FIELD = "field"  # a FieldDef or MemberRef token
    TYPE = "type"  # a TypeDef, TypeRef or TypeSpec token
    TOKEN = "tok"  # ldtoken: a type, method or field token
    STRING = "string"  # a user-string (#US) token
    SIGNATURE = "sig"  # calli: a StandAloneSig token
    VAR8 = "var1"  # a uint8 argument or local number
    VAR16 = "var2"  # a uint16 argument or local number


class Flow(Enum):
    """What may execute after the instruction."""

    NEXT = "next"  # the following instruction
    BRANCH = "branch"  # the target only
    COND = "cond"  # the target(s) or the following instruction
    LEAVE = "leave"  # the target only, the evaluation stack emptied
    RETURN = "return"  # nothing in this method (ret)
    THROW = "throw"  # nothing in this method (throw, rethrow)
    END_FINALLY = "endfinally"  # back to the runtime, the stack emptied (endfinally / endfault)
    END_FILTER = "endfilter"  # back to the runtime (endfilter)
    JMP = "jmp"  # control leaves for another method, the stack must be empty
    PREFIX = "prefix"  # modifies the instruction that follows


_SIZES = {
    Operand.NONE: 0, Operand.INT8: 1, Operand.INT32: 4, Operand.INT64: 8, Operand.FLOAT32: 4,
    Operand.FLOAT64: 8, Operand.BRANCH8: 1, Operand.BRANCH32: 4, Operand.METHOD: 4, Operand.FIELD: 4,
    Operand.TYPE: 4, Operand.TOKEN: 4, Operand.STRING: 4, Operand.SIGNATURE: 4, Operand.VAR8: 1,
    Operand.VAR16: 2,
}


def operand_size(kind: Operand) -> int:
    """The fixed operand size of ``kind`` in bytes (a switch's is 4 + 4 * N: read N first)."""
    return 4 if kind is Operand.SWITCH else _SIZES[kind]


@dataclass(frozen=True)
class OpCode:
    """One instruction: ``code`` is the opcode value (``0xFExx`` for the two-byte ones)."""

    code: int
    name: str
    operand: Operand
    pops: int  # or VAR
    pushes: int  # or VAR
    flow: Flow

    @property
    def size(self) -> int:
        """Bytes of the opcode itself (1 or 2)."""
        return 2 if self.code > 0xFF else 1


#: the table's file name (package data of clr_model): a row a line, ``#`` lines are comments
TABLE_NAME = "il_opcodes.txt"


def _parse(table: str) -> dict[int, OpCode]:
    rows: dict[int, OpCode] = {}
    for line in table.strip().splitlines():
        if line.startswith("#"):
            continue
        code, name, operand, pops, pushes, flow = line.split()
        value = int(code, 16)
        rows[value] = OpCode(value, name, Operand(operand), VAR if pops == "v" else int(pops),
                             VAR if pushes == "v" else int(pushes), Flow(flow))
    return rows


#: opcode value (``0xFExx`` for the two-byte ones) -> instruction.
OPCODES: dict[int, OpCode] = _parse(resources.files("clr_model").joinpath(TABLE_NAME).read_text("utf-8"))

#: instruction name -> instruction.
BY_NAME: dict[str, OpCode] = {op.name: op for op in OPCODES.values()}
