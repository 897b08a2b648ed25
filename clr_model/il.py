"""The IL checker: a method body (header, code, exception-handling sections) against ECMA-335.

:func:`check_body` returns every :class:`ILFinding` of one body, each with a stable rule id and the IL
offset it concerns; an empty list is a valid body. What it checks, after ECMA-335 (Partition II §25.4 the
method header and its data sections, Partition III §1.7 instruction boundaries and the evaluation stack,
Partition I §12.4.2 and Partition II §19 exception-handling blocks, Partition III's leave, ret,
endfinally, endfilter and rethrow):

- the header: tiny (code size in the upper six bits, max stack 8, no locals, no sections) or fat (flags,
  header size 3, max stack, code size, local signature token), the code inside the bytes given;
- every opcode defined (:mod:`clr_model.il_opcodes`), every operand inside the code;
- branch and switch targets inside the code and on instruction starts (a prefixed instruction starts at
  its first prefix);
- exception-handling clauses: a known kind, blocks inside the code and on instruction boundaries, no two
  handlers starting at one address; every two blocks disjoint or nested, inner clauses before the clauses
  that enclose them (a note: :data:`NOTES`); control entering a
  block only at a try's first instruction and leaving one only by leave (not out of a finally, fault or
  filter), throw, rethrow, endfinally or endfilter; no ret inside a block; endfinally, endfilter and
  rethrow only in their kind of handler;
- the evaluation stack simulated along every path from the entry and every handler: no underflow, never
  above max stack, the same depth wherever paths merge, empty at ``jmp`` (and at a try block's entry: a
  note),
  empty but for the return value at ``ret``, no path falling off the end of the code;
- tokens resolved through the caller's :class:`~clr_model.il_metadata.MetadataResolver` (a token of the
  wrong table or no row is a finding of its own, IL-TOKEN, never a crash), argument and local numbers
  within the method's signature and its local signature.

The rule ids and what each means: :data:`RULES` (failures: each rests on a sentence of ECMA-335 the
catalog quotes) and :data:`NOTES` (what the checker reports but no sentence we could quote states: the
harness's observations, shown as notes, never failures).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from clr_model.il_metadata import CallSignature, MetadataResolver
from clr_model.il_opcodes import OPCODES, TWO_BYTE_PREFIX, Flow, OpCode, Operand, operand_size

#: A method body's bytes: a copy or a view into an assembly's image.
Bytes = bytes | bytearray | memoryview

__all__ = [
    "NOTES",
    "RULES",
    "Bytes",
    "EHClause",
    "ILFinding",
    "Instruction",
    "MethodBody",
    "check_body",
    "decode",
    "parse_body",
]

#: Every rule id the checker reports, with what it means. Each rule id is also the id of the ECMA-335
#: clause it rests on (clr_model/catalog/il.toml: the sentence quoted, the section, the fix), so a finding's
#: ``rule`` is its clause: ``clr_model.clauses.clause(finding.rule)``.
RULES: dict[str, str] = {
    "IL-HEADER-FORMAT": "the first byte's two low bits name neither a tiny (2) nor a fat (3) header",
    "IL-HEADER-TINY-SIZE": "a tiny header whose code size (six bits) is shorter than the body handed over",
    "IL-HEADER-FAT-SIZE": "a fat header whose size field is not 3 (twelve bytes)",
    "IL-HEADER-FLAGS": "header flags outside FatFormat, MoreSects and InitLocals",
    "IL-HEADER-CODE-SIZE": "the code size runs past the bytes of the body",
    "IL-HEADER-LOCALS": "a local signature token that is not a StandAloneSig holding a LOCAL_SIG",
    "IL-OPCODE": "an undefined opcode",
    "IL-CODE-TRUNCATED": "an instruction's operand runs past the end of the code",
    "IL-PREFIX": "a prefix with no instruction after it, or before one it does not apply to; tail. without "
                 "ret after the call",
    "IL-BRANCH-RANGE": "a branch or switch target outside the code",
    "IL-BRANCH-MID-INSTRUCTION": "a branch or switch target that is not the start of an instruction",
    "IL-EH-SECTION": "a method data section truncated, of an unknown kind, or of an inconsistent size",
    "IL-EH-FLAGS": "an exception clause of no known kind (exception, filter, finally, fault)",
    "IL-EH-RANGE": "a try, handler or filter block outside the code",
    "IL-EH-BOUNDARY": "a try, handler or filter block not starting or ending on an instruction boundary",
    "IL-EH-HANDLER-START": "two handler blocks that start at the same address",
    "IL-EH-BRANCH": "a branch or fall-through into a block (but a try's start) or out of one; leave out of "
                    "a finally, fault or filter block",
    "IL-EH-RET": "ret inside a try, filter or handler block",
    "IL-EH-INSTRUCTION": "endfinally outside a finally or fault handler, endfilter outside a filter, rethrow "
                         "outside a catch handler",
    "IL-STACK-UNDERFLOW": "an instruction pops more items than the evaluation stack holds",
    "IL-MAXSTACK": "the evaluation stack grows above the header's max stack",
    "IL-STACK-MERGE": "paths reach an instruction with different stack depths",
    "IL-STACK-EMPTY": "jmp with a non-empty evaluation stack",
    "IL-STACK-RET": "ret with more than the return value on the stack",
    "IL-STACK-ENDFILTER": "endfilter with more than its one value on the stack",
    "IL-FALLTHROUGH-END": "control falls through the end of the code",
    "IL-TOKEN": "a token of the wrong table, naming no row, or of the wrong signature kind",
    "IL-ARG-INDEX": "an argument number beyond the method's arguments",
    "IL-LOCAL-INDEX": "a local number beyond the method's locals",
}


#: What the checker also reports though no sentence of ECMA-335 we could quote states it (Partition I
#: §12.4.2.5-12.4.2.8, on protected blocks' nesting and the control flow into them, is in no transcription
#: we could read): the harness's observations (clr_model/catalog/val.toml, kind observation), each a note,
#: never a failure. Their ids are VAL-IL-*, so a finding's rule is still its clause.
NOTES: dict[str, str] = {
    "VAL-IL-EH-NESTING": "two blocks that overlap without nesting, or an inner clause after its enclosing "
                         "one",
    "VAL-IL-TRY-STACK": "a try block entered with a non-empty evaluation stack",
}


class ILFinding(BaseModel):
    """One way a method body breaks ECMA-335: the rule, the IL offset (None: the header), a message. A rule
    of :data:`NOTES` is a note: the body may be valid."""

    model_config = ConfigDict(frozen=True)

    rule: str = Field(pattern=r"^(VAL-)?IL-[A-Z0-9-]+$")
    offset: int | None = Field(default=None, description="IL offset in the code (None: the header)")
    message: str

    @property
    def note(self) -> bool:
        """Whether the rule is one no quoted sentence states (:data:`NOTES`): shown, never a failure."""
        return self.rule in NOTES

    def __str__(self) -> str:
        where = f" at IL_{self.offset:04X}" if self.offset is not None else ""
        return f"{self.rule}{where}: {self.message}"


@dataclass(frozen=True)
class EHClause:
    """One exception-handling clause (Partition II §25.4.6), fat or small alike."""

    flags: int  # 0 typed exception, 1 filter, 2 finally, 4 fault
    try_offset: int
    try_length: int
    handler_offset: int
    handler_length: int
    class_token_or_filter: int

    @property
    def try_end(self) -> int:
        return self.try_offset + self.try_length

    @property
    def handler_end(self) -> int:
        return self.handler_offset + self.handler_length


@dataclass(frozen=True)
class MethodBody:
    """A parsed method header: its fields, the code bytes and the clauses of its EH sections."""

    tiny: bool
    flags: int
    max_stack: int
    local_signature: int
    code: bytes
    clauses: tuple[EHClause, ...]
    size: int  # bytes from the header's start to the end of the last section


class Instruction(NamedTuple):
    """A decoded instruction: its offset, opcode, size (opcode and operand), integer operand (a token,
    a number; None when it has none or it is a float) and branch/switch targets."""

    offset: int
    opcode: OpCode
    size: int
    operand: int | None
    targets: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.offset + self.size


_TINY, _FAT, _FORMAT_MASK = 0x2, 0x3, 0x3
_MORE_SECTS, _INIT_LOCALS = 0x08, 0x10
_SECT_EH, _SECT_OPT_IL, _SECT_FAT, _SECT_MORE = 0x01, 0x02, 0x40, 0x80
_EXCEPTION, _FILTER, _FINALLY, _FAULT = 0, 1, 2, 4
#: the note on blocks that overlap without nesting or come in the wrong order (:data:`NOTES`)
_NESTING = "VAL-IL-EH-NESTING"


class _Findings:
    """Findings of one body, each (rule, offset) once."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, int | None], ILFinding] = {}

    def add(self, rule: str, offset: int | None, message: str) -> None:
        if (rule, offset) not in self.items:
            self.items[(rule, offset)] = ILFinding(rule=rule, offset=offset, message=message)

    def sorted(self) -> list[ILFinding]:
        return sorted(self.items.values(), key=lambda f: (-1 if f.offset is None else f.offset, f.rule))


def _align4(value: int) -> int:
    return (value + 3) & ~3


def parse_body(data: Bytes, *, length: int | None = None) -> tuple[MethodBody | None, list[ILFinding]]:
    """The header, code and EH clauses of the body at the start of ``data`` (bytes after the body are
    ignored), and the header findings; None when the code cannot be located. ``length``: how many bytes the
    writer handed over as the body (its allocation), when known: a tiny header announcing fewer code bytes
    than follow it is then a finding."""
    found = _Findings()
    body = _parse(data, length, found)
    return body, found.sorted()


def _parse(data: Bytes, length: int | None, found: _Findings) -> MethodBody | None:
    if not data:
        found.add("IL-HEADER-FORMAT", None, "an empty body: no header byte")
        return None
    first = data[0]
    if first & _FORMAT_MASK == _TINY:
        size = first >> 2
        if 1 + size > len(data):
            found.add("IL-HEADER-CODE-SIZE", None,
                      f"the tiny header announces {size} code bytes; the body holds {len(data) - 1}")
            return None
        return MethodBody(True, _TINY, 8, 0, bytes(data[1:1 + size]), (), 1 + size)
    if first & _FORMAT_MASK != _FAT:
        found.add("IL-HEADER-FORMAT", None,
                  f"first byte 0x{first:02X}: its low two bits ({first & 3}) name neither a tiny (2) nor a "
                  "fat (3) header")
        return None
    if len(data) < 12:
        found.add("IL-HEADER-CODE-SIZE", None, f"a fat header needs 12 bytes; the body holds {len(data)}")
        return None
    word, max_stack, code_size, local_sig = struct.unpack_from("<HHII", data, 0)
    flags, header_words = word & 0x0FFF, word >> 12
    if header_words != 3:
        found.add("IL-HEADER-FAT-SIZE", None, f"the fat header's size field is {header_words}, not 3")
        if header_words < 3:
            return None
    if flags & ~(_FAT | _MORE_SECTS | _INIT_LOCALS):
        found.add("IL-HEADER-FLAGS", None,
                  f"flags 0x{flags:03X}: bits 0x{flags & ~(_FAT | _MORE_SECTS | _INIT_LOCALS):03X} are "
                  "none of FatFormat (0x3), MoreSects (0x8), InitLocals (0x10)")
    start = 4 * header_words
    if start + code_size > len(data):
        found.add("IL-HEADER-CODE-SIZE", None,
                  f"the fat header announces {code_size} code bytes; the body holds "
                  f"{max(len(data) - start, 0)}")
        return None
    code = bytes(data[start:start + code_size])
    end = start + code_size
    clauses: list[EHClause] = []
    if flags & _MORE_SECTS:
        end = _sections(data, _align4(end), clauses, found)
    return MethodBody(False, flags, max_stack, local_sig, code, tuple(clauses), end)


def _sections(data: Bytes, at: int, clauses: list[EHClause], found: _Findings) -> int:
    """Read the data sections from ``at`` into ``clauses``; the end of the last one."""
    while True:
        if at + 4 > len(data):
            found.add("IL-EH-SECTION", None, f"MoreSects is set but the section header at byte {at} is "
                      "past the body's end")
            return at
        kind = data[at]
        fat = bool(kind & _SECT_FAT)
        size = int.from_bytes(data[at + 1:at + 4], "little") if fat else data[at + 1]
        clause_size = 24 if fat else 12
        if kind & ~(_SECT_EH | _SECT_OPT_IL | _SECT_FAT | _SECT_MORE) or not kind & _SECT_EH \
                or kind & _SECT_OPT_IL:
            found.add("IL-EH-SECTION", None, f"section kind 0x{kind:02X} at byte {at} is not an EH table")
            return at
        if size < 4 or (size - 4) % clause_size:
            found.add("IL-EH-SECTION", None,
                      f"section at byte {at}: DataSize {size} is not 4 + {clause_size} * n")
            if size < 4:
                return at
        if at + size > len(data):
            found.add("IL-EH-SECTION", None,
                      f"section at byte {at}: its {size} bytes run past the body's end")
            return at
        for n in range((size - 4) // clause_size):
            base = at + 4 + n * clause_size
            if fat:
                clauses.append(EHClause(*struct.unpack_from("<IIIIII", data, base)))
            else:
                f, t, tl, h, hl, c = struct.unpack_from("<HHBHBI", data, base)
                clauses.append(EHClause(f, t, tl, h, hl, c))
        at += size
        if not kind & _SECT_MORE:
            return at
        at = _align4(at)


def decode(code: bytes) -> tuple[list[Instruction], list[ILFinding]]:
    """Every instruction of ``code`` in order, and the decoding findings (an undefined opcode or a
    truncated operand ends the decoding)."""
    found = _Findings()
    return _decode(code, found), found.sorted()


# how _decode reads each operand kind
_NONE, _SWITCH, _BR8, _BR32, _SIGNED, _UNSIGNED = range(6)
_MODES = {
    Operand.NONE: _NONE, Operand.FLOAT32: _NONE, Operand.FLOAT64: _NONE, Operand.SWITCH: _SWITCH,
    Operand.BRANCH8: _BR8, Operand.BRANCH32: _BR32, Operand.INT8: _SIGNED, Operand.INT32: _SIGNED,
    Operand.INT64: _SIGNED, Operand.VAR8: _UNSIGNED, Operand.VAR16: _UNSIGNED,
}
#: opcode value -> (instruction, opcode size, operand width (a switch: 4, its count), operand reading)
_DECODING: dict[int, tuple[OpCode, int, int, int]] = {
    code: (op, op.size, operand_size(op.operand),
           _UNSIGNED if op.flow is Flow.PREFIX and op.operand is Operand.INT8  # unaligned., no.: uint8
           else _MODES.get(op.operand, _UNSIGNED))  # tokens: uint32
    for code, op in OPCODES.items()
}


#: the most code bytes a tiny header's six-bit size can announce (Partition II §25.4.2)
_TINY_MAX = 63

#: opcodes ECMA-335 defines that CoreCLR's JIT rejects (its opcode.def lists them as unused; a body with one
#: ends in InvalidProgramException, observed on both bundled runtimes): ``no.``
NOT_IN_CORECLR = frozenset({0xFE19})


def _decode(code: bytes, found: _Findings) -> list[Instruction]:
    out: list[Instruction] = []
    at, n = 0, len(code)
    decoding = _DECODING
    while at < n:
        value = code[at]
        if value == TWO_BYTE_PREFIX:
            if at + 1 >= n:
                found.add("IL-CODE-TRUNCATED", at, "the code ends inside a two-byte opcode")
                break
            value = 0xFE00 | code[at + 1]
        row = decoding.get(value)
        if row is None:
            shown = f"FE {value & 0xFF:02X}" if value > 0xFF else f"{value:02X}"
            found.add("IL-OPCODE", at, f"opcode {shown} is not defined by ECMA-335")
            break
        if value in NOT_IN_CORECLR:
            found.add("IL-OPCODE", at, f"{row[0].name} (FE {value & 0xFF:02X}) is defined by ECMA-335 but "
                      "CoreCLR does not implement it (observed: InvalidProgramException on 3.1.23 and 8.0.4)")
            break
        op, size, width, mode = row
        start = at + size
        end = start + width
        if end > n:
            found.add("IL-CODE-TRUNCATED", at,
                      f"{op.name}'s operand runs past the end of the code ({n} bytes)")
            break
        if mode == _NONE:
            out.append(Instruction(at, op, size + width, None, ()))
        elif mode == _BR8:
            out.append(Instruction(at, op, size + 1, None, (end + int.from_bytes(code[start:end], "little",
                                                                                   signed=True),)))
        elif mode == _BR32:
            out.append(Instruction(at, op, size + 4, None, (end + int.from_bytes(code[start:end], "little",
                                                                                   signed=True),)))
        elif mode == _SIGNED:
            number = int.from_bytes(code[start:end], "little", signed=True)
            out.append(Instruction(at, op, size + width, number, ()))
        elif mode == _UNSIGNED:
            out.append(Instruction(at, op, size + width, int.from_bytes(code[start:end], "little"), ()))
        else:  # switch: uint32 N, then N int32 offsets from the switch's end
            count = int.from_bytes(code[start:end], "little")
            end = start + 4 + 4 * count
            if end > n:
                found.add("IL-CODE-TRUNCATED", at, f"switch's {count} targets run past the end of the code")
                break
            targets = tuple(end + d for (d,) in struct.iter_unpack("<i", code[start + 4:end]))
            out.append(Instruction(at, op, end - at, count, targets))
        at = end
    if out and out[-1].opcode.flow is Flow.PREFIX and out[-1].end == n:
        found.add("IL-PREFIX", out[-1].offset,
                  f"{out[-1].opcode.name} ends the code: no instruction follows it")
    return out


# token tables each operand kind accepts (Partition III §1.9 and each instruction's operand)
_TABLES: dict[Operand, frozenset[int]] = {
    Operand.METHOD: frozenset({0x06, 0x0A, 0x2B}),
    Operand.FIELD: frozenset({0x04, 0x0A}),
    Operand.TYPE: frozenset({0x01, 0x02, 0x1B}),
    Operand.TOKEN: frozenset({0x01, 0x02, 0x1B, 0x04, 0x06, 0x0A, 0x2B}),
    Operand.STRING: frozenset({0x70}),
    Operand.SIGNATURE: frozenset({0x11}),
}
_ARG_OPS = frozenset({0x0E, 0x0F, 0x10, 0xFE09, 0xFE0A, 0xFE0B})
_LOCAL_OPS = frozenset({0x11, 0x12, 0x13, 0xFE0C, 0xFE0D, 0xFE0E})
_ARG_N = {0x02: 0, 0x03: 1, 0x04: 2, 0x05: 3}
_LOCAL_N = {0x06: 0, 0x07: 1, 0x08: 2, 0x09: 3, 0x0A: 0, 0x0B: 1, 0x0C: 2, 0x0D: 3}
_CALLS = frozenset({0x28, 0x6F, 0x73, 0x29})
_TOKEN, _ARGUMENT, _LOCAL = range(3)
#: opcode -> what its operand names: a token (the tables it may name), an argument or a local (its number
#: when the opcode fixes it, None when the operand gives it)
_CHECKS: dict[int, tuple[int, frozenset[int] | int | None]] = {
    **{code: (_TOKEN, _TABLES[op.operand]) for code, op in OPCODES.items() if op.operand in _TABLES},
    **{code: (_ARGUMENT, n) for code, n in _ARG_N.items()},
    **{code: (_ARGUMENT, None) for code in _ARG_OPS},
    **{code: (_LOCAL, n) for code, n in _LOCAL_N.items()},
    **{code: (_LOCAL, None) for code in _LOCAL_OPS},
}


def check_body(
    data: Bytes,
    resolver: MetadataResolver,
    method_token: int | None = None,
    *,
    method: CallSignature | None = None,
    length: int | None = None,
) -> list[ILFinding]:
    """Every finding of the method body at the start of ``data`` (bytes after it are ignored). The method's
    own signature (for ``ret`` and argument numbers) is ``method``, or read through ``resolver`` from
    ``method_token``; without either, those two checks are skipped. ``length``: see :func:`parse_body`."""
    found = _Findings()
    body = _parse(data, length, found)
    if body is None:
        return found.sorted()
    if method is None and method_token is not None:
        method = resolver.method_signature(method_token)
        if method is None:
            found.add("IL-TOKEN", None,
                      f"the method token 0x{method_token:08X} resolves to no method signature")
    locals_: int | None = 0
    if body.local_signature:
        locals_ = resolver.local_count(body.local_signature)
        if locals_ is None:
            found.add("IL-HEADER-LOCALS", None, f"local signature token 0x{body.local_signature:08X} is not "
                      "a StandAloneSig row holding a LOCAL_SIG")
    code = body.code
    instructions = _decode(code, found)
    starts = _starts(instructions)
    size = len(code)
    decoded = instructions[-1].end if instructions else 0
    if decoded < size:  # decoding stopped (reported): past that point any offset may be a boundary
        starts.update(range(decoded, size))
    _check_branches(instructions, starts, size, found)
    _check_prefixes(instructions, found)
    sound = _check_clauses(body.clauses, starts, size, resolver, found)
    if sound is not None:
        _check_regions(instructions, sound, starts, found)
    signatures = _check_operands(instructions, resolver, method, locals_, found)
    complete = bool(instructions) and decoded == size
    if size == 0:
        found.add("IL-FALLTHROUGH-END", 0, "the code is empty: control falls through its end")
    if complete:
        _simulate(body, instructions, starts, signatures, method, found)
    _blame_a_tiny_header(body, length, found)
    return found.sorted()


def _blame_a_tiny_header(body: MethodBody, length: int | None, found: _Findings) -> None:
    """IL-HEADER-TINY-SIZE: a tiny header on a body handed over with more than 63 bytes of code, whose
    announced code is broken (it ends inside an instruction or falls off its end): the rewriter grew a tiny
    body and kept its header (the six-bit size wrapped). A body merely handed over in a larger block (an
    allocation with room to spare) whose announced code is sound is not blamed."""
    if not body.tiny or length is None or length - 1 <= _TINY_MAX:
        return
    broken = {"IL-CODE-TRUNCATED", "IL-FALLTHROUGH-END", "IL-OPCODE", "IL-BRANCH-RANGE"}
    if any(rule in broken for rule, _ in found.items):
        found.add("IL-HEADER-TINY-SIZE", None,
                  f"a tiny header announces {len(body.code)} code bytes (at most {_TINY_MAX} fit its six "
                  f"bits) but {length - 1} bytes follow it and the announced code is cut short: a body over "
                  f"{_TINY_MAX} bytes needs a fat header")


def _starts(instructions: list[Instruction]) -> set[int]:
    """Offsets where an instruction (with its prefixes) starts: the legal branch targets."""
    starts: set[int] = set()
    prefixed = False
    for ins in instructions:
        if not prefixed:
            starts.add(ins.offset)
        prefixed = ins.opcode.flow is Flow.PREFIX
    return starts


def _names(*names: str) -> frozenset[int]:
    return frozenset(op.code for op in OPCODES.values() if op.name in names or op.name.split(".")[0] in names)


_MEMORY = _names("ldind", "stind", "ldfld", "stfld", "ldobj", "stobj", "initblk", "cpblk")
#: prefix -> the instructions it may precede (Partition III §2: each prefix's "valid" instructions;
#: constrained. also before call and ldftn for static virtual methods, ECMA-335 augments in .NET 7)
_PREFIXED: dict[int, frozenset[int]] = {
    0xFE12: _MEMORY,  # unaligned.
    0xFE13: _MEMORY | _names("ldsfld", "stsfld"),  # volatile.
    0xFE14: _names("call", "calli", "callvirt"),  # tail.
    0xFE16: _names("callvirt", "call", "ldftn"),  # constrained.
    0xFE1E: _names("ldelema", "call"),  # readonly. (call: an array's Address method)
}


def _check_prefixes(instructions: list[Instruction], found: _Findings) -> None:
    """Each prefix before an instruction it applies to (other prefixes may come between); tail. calls
    followed by ret; unaligned. with an alignment of 1, 2 or 4."""
    pending: list[Instruction] = []
    for n, ins in enumerate(instructions):
        if ins.opcode.flow is Flow.PREFIX:
            pending.append(ins)
            if ins.opcode.code == 0xFE12 and ins.operand not in (1, 2, 4):
                found.add("IL-PREFIX", ins.offset, f"unaligned. {ins.operand}: the alignment is 1, 2 or 4")
            continue
        for prefix in pending:
            allowed = _PREFIXED.get(prefix.opcode.code)
            if allowed is not None and ins.opcode.code not in allowed:
                found.add("IL-PREFIX", prefix.offset, f"{prefix.opcode.name} before {ins.opcode.name}, "
                          "an instruction it does not apply to")
            elif prefix.opcode.code == 0xFE14 and (n + 1 == len(instructions)
                                                    or instructions[n + 1].opcode.code != 0x2A):
                found.add("IL-PREFIX", prefix.offset, f"tail. {ins.opcode.name} is not followed by ret")
        pending.clear()


def _check_branches(instructions: list[Instruction], starts: set[int], size: int, found: _Findings) -> None:
    for ins in instructions:
        for target in ins.targets:
            if not 0 <= target < size:
                found.add("IL-BRANCH-RANGE", ins.offset,
                          f"{ins.opcode.name} targets IL_{target:04X}, outside the code (0..{size})")
            elif target not in starts:
                found.add("IL-BRANCH-MID-INSTRUCTION", ins.offset,
                          f"{ins.opcode.name} targets IL_{target:04X}, inside an instruction")


def _blocks(clause: EHClause) -> list[tuple[str, int, int]]:
    blocks = [("try", clause.try_offset, clause.try_end),
              ("handler", clause.handler_offset, clause.handler_end)]
    if clause.flags == _FILTER:
        blocks.append(("filter", clause.class_token_or_filter, clause.handler_offset))
    return blocks


def _check_clauses(clauses: tuple[EHClause, ...], starts: set[int], size: int, resolver: MetadataResolver,
                   found: _Findings) -> list[EHClause] | None:
    """Each clause's kind, blocks and catch type; every two clauses' nesting. The clauses when all are
    sound (for the region rules), else None."""
    bounds = starts | {size}
    sound: list[int] = []
    for index, clause in enumerate(clauses):
        where = clause.try_offset
        ok = True
        if clause.flags not in (_EXCEPTION, _FILTER, _FINALLY, _FAULT):
            found.add("IL-EH-FLAGS", where, f"clause {index}: flags 0x{clause.flags:X} name no clause kind")
            ok = False
        for name, start, end in _blocks(clause):
            if end > size or start >= end:
                found.add("IL-EH-RANGE", where,
                          f"clause {index}: its {name} block [IL_{start:04X}, IL_{end:04X}) is outside the "
                          f"code (0..{size}) or empty")
                ok = False
            elif start not in starts or end not in bounds:
                found.add("IL-EH-BOUNDARY", where, f"clause {index}: its {name} block [IL_{start:04X}, "
                          f"IL_{end:04X}) does not start and end on instruction boundaries")
                ok = False
        if clause.flags == _EXCEPTION:
            token = clause.class_token_or_filter
            if token >> 24 not in _TABLES[Operand.TYPE] or not resolver.token_exists(token):
                found.add("IL-TOKEN", where, f"clause {index}: catch type token 0x{token:08X} names no type")
        if ok:
            sound.append(index)
    for i in sound:
        a = clauses[i]
        own = _blocks(a)
        for k, (name_x, sx, ex) in enumerate(own):
            for name_y, sy, ey in own[k + 1:]:
                if _overlap((sx, ex), (sy, ey)):
                    found.add(_NESTING, a.try_offset,
                              f"clause {i}: its {name_x} and {name_y} blocks overlap")
    for i, j, name_a, sa, ea, name_b, sb, eb in _overlapping_pairs(clauses, sound):
        b = clauses[j]
        if sa == sb and name_a == name_b == "handler":
            found.add("IL-EH-HANDLER-START", clauses[j].handler_offset,
                      f"clauses {i} and {j}: both handlers start at IL_{sa:04X}")
        if (sa, ea) == (sb, eb):
            if not (name_a == name_b == "try") and not (name_a == name_b == "handler"):
                found.add(_NESTING, clauses[i].try_offset,
                          f"clauses {i} and {j}: {name_a} and {name_b} blocks are the same range")
        elif not (_inside((sa, ea), (sb, eb)) or _inside((sb, eb), (sa, ea))):
            found.add(_NESTING, clauses[i].try_offset,
                      f"clauses {i} and {j}: {name_a} [IL_{sa:04X}, IL_{ea:04X}) and {name_b} "
                      f"[IL_{sb:04X}, IL_{eb:04X}) overlap without nesting")
        elif name_b == "try" and (sb, eb) != (sa, ea) and _inside((sb, eb), (sa, ea)):
            found.add(_NESTING, b.try_offset,
                      f"clause {j}'s try block lies inside clause {i}'s {name_a} block but comes "
                      "after it: inner clauses come first")
    if len(sound) != len(clauses) or any(f.rule in (_NESTING, "IL-EH-HANDLER-START")
                                         for f in found.items.values()):
        return None
    return list(clauses)


def _check_regions(instructions: list[Instruction], clauses: list[EHClause], starts: set[int],
                   found: _Findings) -> None:
    """Control flow against the blocks (Partition I §12.4.2.8, Partition III leave, ret, endfinally,
    endfilter, rethrow): a block is entered only at a try block's first instruction (by fall-through or
    branch) or by the runtime (handlers, filters); it is left only by leave, throw, rethrow, endfinally or
    endfilter, never by a branch, fall-through or ret; leave does not leave a finally, fault or filter
    block; endfinally lies in a finally or fault handler, endfilter in a filter, rethrow in a catch."""
    if not clauses:
        for ins in instructions:
            if ins.opcode.code in _HANDLER_ONLY:
                found.add("IL-EH-INSTRUCTION", ins.offset, f"{ins.opcode.name} outside any handler")
        return
    # every block: (start, end, what); what is "try", "filter", or the handler's kind
    blocks: list[tuple[int, int, str]] = []
    for c in clauses:
        blocks.append((c.try_offset, c.try_end, "try"))
        blocks.append((c.handler_offset, c.handler_end, _HANDLER_KIND.get(c.flags, "catch")))
        if c.flags == _FILTER:
            blocks.append((c.class_token_or_filter, c.handler_offset, "filter"))

    def inside(offset: int) -> frozenset[int]:
        return frozenset(n for n, (start, end, _) in enumerate(blocks) if start <= offset < end)

    def entered(source: frozenset[int], target: int) -> frozenset[int]:
        """Blocks the target is in and the source is not, less try blocks starting at the target."""
        return frozenset(n for n in inside(target) - source
                         if not (blocks[n][2] == "try" and blocks[n][0] == target))

    for ins in instructions:
        here = inside(ins.offset)
        op, flow = ins.opcode, ins.opcode.flow
        name = op.name
        if flow is Flow.RETURN and here:
            what = blocks[min(here, key=_size(blocks))][2]
            found.add("IL-EH-RET", ins.offset,
                      f"ret inside a {what} block: leave to a ret outside every block")
        handlers = [n for n in here if blocks[n][2] != "try"]
        innermost = blocks[min(handlers, key=_size(blocks))][2] if handlers else None
        if flow is Flow.END_FINALLY and innermost not in ("finally", "fault"):
            found.add("IL-EH-INSTRUCTION", ins.offset, "endfinally outside a finally or fault handler")
        elif flow is Flow.END_FILTER and innermost != "filter":
            found.add("IL-EH-INSTRUCTION", ins.offset, "endfilter outside a filter block")
        elif op.code == 0xFE1A and not any(blocks[n][2] == "catch" for n in handlers):
            found.add("IL-EH-INSTRUCTION", ins.offset, "rethrow outside a catch handler")
        if flow is Flow.LEAVE:
            target = ins.targets[0]
            if target not in starts:
                continue
            left = here - inside(target)
            if any(blocks[n][2] in ("finally", "fault", "filter") for n in left):
                found.add("IL-EH-BRANCH", ins.offset, f"{name} leaves a finally, fault or filter block")
            elif entered(here, target):
                found.add("IL-EH-BRANCH", ins.offset,
                          f"{name} to IL_{target:04X} enters a block other than at a try block's start")
            continue
        nexts = list(ins.targets) if flow in (Flow.BRANCH, Flow.COND) else []
        if flow in (Flow.NEXT, Flow.COND, Flow.PREFIX):
            nexts.append(ins.end)
        for target in nexts:
            if target not in starts:
                continue  # outside the code or mid-instruction: reported as such
            what = "falls through" if target == ins.end and flow is not Flow.BRANCH else "branches"
            if here - inside(target):
                found.add("IL-EH-BRANCH", ins.offset,
                          f"{name} {what} out of a block to IL_{target:04X}: only leave, throw, endfinally "
                          "or endfilter leave one")
            elif entered(here, target):
                found.add("IL-EH-BRANCH", ins.offset,
                          f"{name} {what} into a block at IL_{target:04X}, not at a try block's start")


_HANDLER_ONLY = frozenset({0xDC, 0xFE11, 0xFE1A})  # endfinally, endfilter, rethrow
_HANDLER_KIND = {_EXCEPTION: "catch", _FILTER: "catch", _FINALLY: "finally", _FAULT: "fault"}


def _size(blocks: list[tuple[int, int, str]]) -> Callable[[int], int]:
    return lambda n: blocks[n][1] - blocks[n][0]


def _overlapping_pairs(clauses: tuple[EHClause, ...], sound: list[int]
                       ) -> list[tuple[int, int, str, int, int, str, int, int]]:
    """Every pair of blocks of two clauses i < j that overlap, as (i, j, block of i, block of j), in the
    order of a loop over i, j and their blocks: found by a sweep over the blocks sorted by start (blocks that
    do not overlap can break no nesting rule), so a body of many disjoint clauses costs n log n, not n^2."""
    blocks = sorted((start, end, k, index, name) for index in sound
                    for k, (name, start, end) in enumerate(_blocks(clauses[index])))
    pairs: list[tuple[int, int, int, int]] = []  # (i, j, k of i's block, k of j's block)
    found: dict[tuple[int, int, int, int], tuple[str, int, int, str, int, int]] = {}
    active: list[tuple[int, int, int, int, str]] = []
    for block in blocks:
        start, end, k, index, name = block
        active = [other for other in active if other[1] > start]
        for o_start, o_end, o_k, o_index, o_name in active:
            if o_index == index:
                continue
            if o_index < index:
                key = (o_index, index, o_k, k)
                found[key] = (o_name, o_start, o_end, name, start, end)
            else:
                key = (index, o_index, k, o_k)
                found[key] = (name, start, end, o_name, o_start, o_end)
            pairs.append(key)
        active.append(block)
    return [(i, j, *found[(i, j, ka, kb)]) for i, j, ka, kb in sorted(set(pairs))]


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _inside(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _check_operands(instructions: list[Instruction], resolver: MetadataResolver, method: CallSignature | None,
                    locals_: int | None, found: _Findings) -> dict[int, CallSignature]:
    """Tokens, argument and local numbers; the call signatures by offset for the stack simulation."""
    signatures: dict[int, CallSignature] = {}
    arguments = method.stack_args if method is not None else None
    checks = _CHECKS
    for ins in instructions:
        op = ins.opcode
        check = checks.get(op.code)
        if check is None:
            continue
        what, fact = check
        if what == _TOKEN:
            assert isinstance(fact, frozenset)
            token = ins.operand or 0
            if token >> 24 not in fact:
                found.add("IL-TOKEN", ins.offset,
                          f"{op.name} token 0x{token:08X}: table 0x{token >> 24:02X} is not one it takes")
            elif not resolver.token_exists(token):
                found.add("IL-TOKEN", ins.offset, f"{op.name} token 0x{token:08X} names no row")
            elif op.code in _CALLS:
                signature = resolver.method_signature(token)
                if signature is None:
                    found.add("IL-TOKEN", ins.offset,
                              f"{op.name} token 0x{token:08X} resolves to no method signature")
                else:
                    signatures[ins.offset] = signature
            continue
        number = fact if isinstance(fact, int) else ins.operand
        if what == _ARGUMENT:
            if number is not None and arguments is not None and number >= arguments:
                found.add("IL-ARG-INDEX", ins.offset,
                          f"{op.name} names argument {number}; the method has {arguments}")
        elif number is not None and locals_ is not None and number >= locals_:
            found.add("IL-LOCAL-INDEX", ins.offset,
                      f"{op.name} names local {number}; the method has {locals_}")
    return signatures


def _simulate(body: MethodBody, instructions: list[Instruction], starts: set[int],
              signatures: dict[int, CallSignature], method: CallSignature | None, found: _Findings) -> None:
    """The evaluation stack's depth along every path from the entry and every handler."""
    index = {ins.offset: n for n, ins in enumerate(instructions)}
    size = len(body.code)
    try_starts = {c.try_offset for c in body.clauses}
    depth_at: dict[int, int] = {}
    work: list[tuple[int, int]] = [(0, 0)]
    for clause in body.clauses:
        if clause.flags not in (_EXCEPTION, _FILTER, _FINALLY, _FAULT):
            continue  # reported: how the handler is entered is unknown
        if clause.handler_offset in index:
            work.append((clause.handler_offset, 1 if clause.flags in (_EXCEPTION, _FILTER) else 0))
        if clause.flags == _FILTER and clause.class_token_or_filter in index:
            work.append((clause.class_token_or_filter, 1))
    max_stack = body.max_stack
    returns = method.returns_value if method is not None else None

    def reach(source: int, target: int, depth: int) -> None:
        if target not in starts:
            return  # reported by the branch check
        known = depth_at.get(target)
        if known is None:
            work.append((target, depth))
        elif known != depth:
            found.add("IL-STACK-MERGE", target, f"reached with stack depth {depth} from IL_{source:04X} and "
                      f"{known} from another path")

    while work:
        offset, depth = work.pop()
        if offset in depth_at:
            if depth_at[offset] != depth:
                found.add("IL-STACK-MERGE", offset,
                          f"reached with stack depths {depth_at[offset]} and {depth}")
            continue
        n = index[offset]
        while True:
            ins = instructions[n]
            offset = ins.offset
            if offset in depth_at:
                if depth_at[offset] != depth:
                    found.add("IL-STACK-MERGE", offset,
                              f"reached with stack depths {depth_at[offset]} and {depth}")
                break
            depth_at[offset] = depth
            op = ins.opcode
            if offset in try_starts and depth:
                found.add("VAL-IL-TRY-STACK", offset,
                          f"a try block is entered with {depth} items on the stack")
            pops, pushes = op.pops, op.pushes
            if op.code in _CALLS:
                signature = signatures.get(offset)
                if signature is None:
                    break  # the token is reported; the path's depth is unknown from here
                pops = signature.stack_args + (1 if op.code == 0x29 else 0)
                if op.code == 0x73:
                    pops, pushes = signature.params, 1
                else:
                    pushes = 1 if signature.returns_value else 0
            elif op.flow is Flow.RETURN:
                if returns is None:
                    break
                pops = 1 if returns else 0
            elif op.flow is Flow.JMP and depth:
                found.add("IL-STACK-EMPTY", offset, f"jmp with {depth} items on the stack")
            if pops > depth:
                found.add("IL-STACK-UNDERFLOW", offset, f"{op.name} pops {pops} with {depth} on the stack")
                break
            depth += pushes - pops
            if depth > max_stack:
                found.add("IL-MAXSTACK", offset, f"{op.name} leaves {depth} items on the stack; max stack is "
                          f"{max_stack}")
            flow = op.flow
            if flow is Flow.RETURN:
                if depth:
                    found.add("IL-STACK-RET", offset, f"ret leaves {depth} more items than the return value")
                break
            if flow is Flow.LEAVE:
                reach(offset, ins.targets[0], 0)
                break
            if flow in (Flow.BRANCH, Flow.COND):
                for target in ins.targets:
                    reach(offset, target, depth)
                if flow is Flow.BRANCH:
                    break
            elif flow is Flow.END_FILTER:
                if depth:
                    found.add("IL-STACK-ENDFILTER", offset,
                              f"endfilter leaves {depth} more items than its one value")
                break
            elif flow in (Flow.THROW, Flow.END_FINALLY, Flow.JMP):
                break
            n += 1
            if n == len(instructions):
                found.add("IL-FALLTHROUGH-END", offset,
                          f"{op.name} falls through the end of the code ({size})")
                break
