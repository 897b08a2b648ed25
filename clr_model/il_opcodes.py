"""Every CIL instruction as data: one table, from ECMA-335 Partition III (the instruction set, the
opcode encodings of §1.2 and each instruction's stack transition).

A row: the encoding (one byte, or ``FE xx`` for the two-byte ones), the name, the operand kind (how many
bytes follow the opcode and what they mean), how many stack items the instruction pops and pushes (``var``
when the count comes from a signature: calls, ``ret``), and its control flow (what may run next).

Undefined encodings (``24``, ``77``, ``A6``..``B2``, ``FE 08`` ...) have no row: decoding one is a finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

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


# encoding | name | operand | pops | pushes | flow.  Pops/pushes count stack items; "v" = from a signature.
_TABLE = """
00 nop none 0 0 next
01 break none 0 0 next
02 ldarg.0 none 0 1 next
03 ldarg.1 none 0 1 next
04 ldarg.2 none 0 1 next
05 ldarg.3 none 0 1 next
06 ldloc.0 none 0 1 next
07 ldloc.1 none 0 1 next
08 ldloc.2 none 0 1 next
09 ldloc.3 none 0 1 next
0A stloc.0 none 1 0 next
0B stloc.1 none 1 0 next
0C stloc.2 none 1 0 next
0D stloc.3 none 1 0 next
0E ldarg.s var1 0 1 next
0F ldarga.s var1 0 1 next
10 starg.s var1 1 0 next
11 ldloc.s var1 0 1 next
12 ldloca.s var1 0 1 next
13 stloc.s var1 1 0 next
14 ldnull none 0 1 next
15 ldc.i4.m1 none 0 1 next
16 ldc.i4.0 none 0 1 next
17 ldc.i4.1 none 0 1 next
18 ldc.i4.2 none 0 1 next
19 ldc.i4.3 none 0 1 next
1A ldc.i4.4 none 0 1 next
1B ldc.i4.5 none 0 1 next
1C ldc.i4.6 none 0 1 next
1D ldc.i4.7 none 0 1 next
1E ldc.i4.8 none 0 1 next
1F ldc.i4.s i1 0 1 next
20 ldc.i4 i4 0 1 next
21 ldc.i8 i8 0 1 next
22 ldc.r4 r4 0 1 next
23 ldc.r8 r8 0 1 next
25 dup none 1 2 next
26 pop none 1 0 next
27 jmp method 0 0 jmp
28 call method v v next
29 calli sig v v next
2A ret none v 0 return
2B br.s br1 0 0 branch
2C brfalse.s br1 1 0 cond
2D brtrue.s br1 1 0 cond
2E beq.s br1 2 0 cond
2F bge.s br1 2 0 cond
30 bgt.s br1 2 0 cond
31 ble.s br1 2 0 cond
32 blt.s br1 2 0 cond
33 bne.un.s br1 2 0 cond
34 bge.un.s br1 2 0 cond
35 bgt.un.s br1 2 0 cond
36 ble.un.s br1 2 0 cond
37 blt.un.s br1 2 0 cond
38 br br4 0 0 branch
39 brfalse br4 1 0 cond
3A brtrue br4 1 0 cond
3B beq br4 2 0 cond
3C bge br4 2 0 cond
3D bgt br4 2 0 cond
3E ble br4 2 0 cond
3F blt br4 2 0 cond
40 bne.un br4 2 0 cond
41 bge.un br4 2 0 cond
42 bgt.un br4 2 0 cond
43 ble.un br4 2 0 cond
44 blt.un br4 2 0 cond
45 switch switch 1 0 cond
46 ldind.i1 none 1 1 next
47 ldind.u1 none 1 1 next
48 ldind.i2 none 1 1 next
49 ldind.u2 none 1 1 next
4A ldind.i4 none 1 1 next
4B ldind.u4 none 1 1 next
4C ldind.i8 none 1 1 next
4D ldind.i none 1 1 next
4E ldind.r4 none 1 1 next
4F ldind.r8 none 1 1 next
50 ldind.ref none 1 1 next
51 stind.ref none 2 0 next
52 stind.i1 none 2 0 next
53 stind.i2 none 2 0 next
54 stind.i4 none 2 0 next
55 stind.i8 none 2 0 next
56 stind.r4 none 2 0 next
57 stind.r8 none 2 0 next
58 add none 2 1 next
59 sub none 2 1 next
5A mul none 2 1 next
5B div none 2 1 next
5C div.un none 2 1 next
5D rem none 2 1 next
5E rem.un none 2 1 next
5F and none 2 1 next
60 or none 2 1 next
61 xor none 2 1 next
62 shl none 2 1 next
63 shr none 2 1 next
64 shr.un none 2 1 next
65 neg none 1 1 next
66 not none 1 1 next
67 conv.i1 none 1 1 next
68 conv.i2 none 1 1 next
69 conv.i4 none 1 1 next
6A conv.i8 none 1 1 next
6B conv.r4 none 1 1 next
6C conv.r8 none 1 1 next
6D conv.u4 none 1 1 next
6E conv.u8 none 1 1 next
6F callvirt method v v next
70 cpobj type 2 0 next
71 ldobj type 1 1 next
72 ldstr string 0 1 next
73 newobj method v 1 next
74 castclass type 1 1 next
75 isinst type 1 1 next
76 conv.r.un none 1 1 next
79 unbox type 1 1 next
7A throw none 1 0 throw
7B ldfld field 1 1 next
7C ldflda field 1 1 next
7D stfld field 2 0 next
7E ldsfld field 0 1 next
7F ldsflda field 0 1 next
80 stsfld field 1 0 next
81 stobj type 2 0 next
82 conv.ovf.i1.un none 1 1 next
83 conv.ovf.i2.un none 1 1 next
84 conv.ovf.i4.un none 1 1 next
85 conv.ovf.i8.un none 1 1 next
86 conv.ovf.u1.un none 1 1 next
87 conv.ovf.u2.un none 1 1 next
88 conv.ovf.u4.un none 1 1 next
89 conv.ovf.u8.un none 1 1 next
8A conv.ovf.i.un none 1 1 next
8B conv.ovf.u.un none 1 1 next
8C box type 1 1 next
8D newarr type 1 1 next
8E ldlen none 1 1 next
8F ldelema type 2 1 next
90 ldelem.i1 none 2 1 next
91 ldelem.u1 none 2 1 next
92 ldelem.i2 none 2 1 next
93 ldelem.u2 none 2 1 next
94 ldelem.i4 none 2 1 next
95 ldelem.u4 none 2 1 next
96 ldelem.i8 none 2 1 next
97 ldelem.i none 2 1 next
98 ldelem.r4 none 2 1 next
99 ldelem.r8 none 2 1 next
9A ldelem.ref none 2 1 next
9B stelem.i none 3 0 next
9C stelem.i1 none 3 0 next
9D stelem.i2 none 3 0 next
9E stelem.i4 none 3 0 next
9F stelem.i8 none 3 0 next
A0 stelem.r4 none 3 0 next
A1 stelem.r8 none 3 0 next
A2 stelem.ref none 3 0 next
A3 ldelem type 2 1 next
A4 stelem type 3 0 next
A5 unbox.any type 1 1 next
B3 conv.ovf.i1 none 1 1 next
B4 conv.ovf.u1 none 1 1 next
B5 conv.ovf.i2 none 1 1 next
B6 conv.ovf.u2 none 1 1 next
B7 conv.ovf.i4 none 1 1 next
B8 conv.ovf.u4 none 1 1 next
B9 conv.ovf.i8 none 1 1 next
BA conv.ovf.u8 none 1 1 next
C2 refanyval type 1 1 next
C3 ckfinite none 1 1 next
C6 mkrefany type 1 1 next
D0 ldtoken tok 0 1 next
D1 conv.u2 none 1 1 next
D2 conv.u1 none 1 1 next
D3 conv.i none 1 1 next
D4 conv.ovf.i none 1 1 next
D5 conv.ovf.u none 1 1 next
D6 add.ovf none 2 1 next
D7 add.ovf.un none 2 1 next
D8 mul.ovf none 2 1 next
D9 mul.ovf.un none 2 1 next
DA sub.ovf none 2 1 next
DB sub.ovf.un none 2 1 next
DC endfinally none 0 0 endfinally
DD leave br4 0 0 leave
DE leave.s br1 0 0 leave
DF stind.i none 2 0 next
E0 conv.u none 1 1 next
FE00 arglist none 0 1 next
FE01 ceq none 2 1 next
FE02 cgt none 2 1 next
FE03 cgt.un none 2 1 next
FE04 clt none 2 1 next
FE05 clt.un none 2 1 next
FE06 ldftn method 0 1 next
FE07 ldvirtftn method 1 1 next
FE09 ldarg var2 0 1 next
FE0A ldarga var2 0 1 next
FE0B starg var2 1 0 next
FE0C ldloc var2 0 1 next
FE0D ldloca var2 0 1 next
FE0E stloc var2 1 0 next
FE0F localloc none 1 1 next
FE11 endfilter none 1 0 endfilter
FE12 unaligned. i1 0 0 prefix
FE13 volatile. none 0 0 prefix
FE14 tail. none 0 0 prefix
FE15 initobj type 1 0 next
FE16 constrained. type 0 0 prefix
FE17 cpblk none 3 0 next
FE18 initblk none 3 0 next
FE19 no. i1 0 0 prefix
FE1A rethrow none 0 0 throw
FE1C sizeof type 0 1 next
FE1D refanytype none 1 1 next
FE1E readonly. none 0 0 prefix
"""


def _parse(table: str) -> dict[int, OpCode]:
    rows: dict[int, OpCode] = {}
    for line in table.strip().splitlines():
        code, name, operand, pops, pushes, flow = line.split()
        value = int(code, 16)
        rows[value] = OpCode(value, name, Operand(operand), VAR if pops == "v" else int(pops),
                             VAR if pushes == "v" else int(pushes), Flow(flow))
    return rows


#: opcode value (``0xFExx`` for the two-byte ones) -> instruction.
OPCODES: dict[int, OpCode] = _parse(_TABLE)

#: instruction name -> instruction.
BY_NAME: dict[str, OpCode] = {op.name: op for op in OPCODES.values()}
