"""Property tests of the IL checker (clr_model/il.py): generated valid bodies (branches, switches, nested
try/catch and try/finally, locals, calls; tiny and fat headers, small and fat EH sections) pass, and every
single-byte mutation of a branch operand, a header field or an EH clause offset is caught exactly when a
reference check says the mutated body is invalid.

The reference check works from the generator's own record of the program (each instruction's offset,
size, stack effect, flow and targets; the clauses), not from the checker's decoder, and simulates the
stack by a plain fixpoint over all instructions instead of the checker's worklist: two independent ways to
the same verdict.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clr_model.il import EHClause, check_body
from clr_model.il_asm import Ins, Label, assemble, encode_body
from clr_model.il_metadata import CallSignature, RecordedMetadata
from clr_model.il_opcodes import BY_NAME, Flow, Operand

ADD = 0x0A000001  # static int32 Add(int32, int32)
TYPE = 0x02000001
LOCALS_2, LOCALS_4, CALLI_SIG = 0x11000001, 0x11000003, 0x11000002
RESOLVER = RecordedMetadata(
    rows={0x01: 1, 0x02: 1, 0x06: 1, 0x0A: 1, 0x11: 3},
    signatures={0x06000001: CallSignature(0), ADD: CallSignature(2, returns_value=True),
                CALLI_SIG: CallSignature(1)},
    locals={LOCALS_2: 2, LOCALS_4: 4},
)
VOID = CallSignature(0)
T = TypeVar("T")
SHORT = {"br": "br.s", "brtrue": "brtrue.s", "brfalse": "brfalse.s", "beq": "beq.s", "blt.un": "blt.un.s",
         "leave": "leave.s"}


EXAMPLES = 150  # per property in CI (derandomized: the same examples every run); ten times that with --long


def run(long_profile: bool, strategy: st.SearchStrategy[T], body: Callable[[T], None]) -> None:
    """``body`` over ``strategy``'s examples: a fixed derandomized set in CI, a random larger one nightly."""

    @settings(max_examples=EXAMPLES * 10 if long_profile else EXAMPLES, derandomize=not long_profile,
              database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much])
    @given(strategy)
    def prop(example: T) -> None:
        body(example)

    prop()


# ---- the generator ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """A clause by labels."""

    kind: int  # 0 catch, 1 filter, 2 finally, 4 fault
    try_start: str
    try_end: str
    handler_start: str
    handler_end: str
    filter_start: str | None = None


class _Gen:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.count = 0
        self.specs: list[Spec] = []
        self.short = draw(st.booleans())
        self.uses_locals = False

    def label(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def branch(self, name: str, target: str) -> Ins:
        return Ins(SHORT[name] if self.short and name in SHORT else name, target)

    def block(self, nest: int, exit_: list[Ins | Label]) -> list[Ins | Label]:
        """Statements (each starting and ending at depth 0) whose branches stay in this block, then
        ``exit_``."""
        n = self.draw(st.integers(1, 4))
        labels = [self.label("s") for _ in range(n + 1)]
        pick = st.sampled_from(labels)
        out: list[Ins | Label] = []
        for k in range(n):
            out.append(Label(labels[k]))
            kinds = ["push", "cond", "compare", "br", "ternary", "switch", "local", "call"]
            kind = self.draw(st.sampled_from([*kinds, "try", "try"] if nest < 2 else kinds))
            if kind == "push":
                m = self.draw(st.integers(1, 4))
                out += [Ins("ldc.i4.s", self.draw(st.integers(-128, 127))) for _ in range(m)]
                out += [Ins("add")] * (m - 1) + [Ins("pop")]
            elif kind == "cond":
                out += [Ins("ldc.i4.0"), self.branch(self.draw(st.sampled_from(["brtrue", "brfalse"])),
                                                     self.draw(pick))]
            elif kind == "compare":
                out += [Ins("ldc.i4.1"), Ins("ldc.i4.2"),
                        self.branch(self.draw(st.sampled_from(["beq", "blt.un"])), self.draw(pick))]
            elif kind == "br":
                out += [self.branch("br", self.draw(pick))]
            elif kind == "ternary":  # a merge at depth 1
                join = self.label("j")
                out += [Ins("ldc.i4.1"), Ins("ldc.i4.0"), self.branch("brtrue", join), Ins("ldc.i4.2"),
                        Ins("add"), Label(join), Ins("pop")]
            elif kind == "switch":
                targets = tuple(self.draw(st.lists(pick, min_size=0, max_size=4)))
                out += [Ins("ldc.i4.1"), Ins("switch", targets)]
            elif kind == "local":
                self.uses_locals = True
                out += [Ins("ldc.i4.3"), Ins("stloc.1"), Ins("ldloc.0"), Ins("pop")]
            elif kind == "call":
                out += [Ins("ldc.i4.1"), Ins("ldc.i4.2"), Ins("call", ADD), Ins("pop")]
            else:
                out += self.protected(nest)
        out.append(Label(labels[n]))
        return out + exit_

    def protected(self, nest: int) -> list[Ins | Label]:
        kind = self.draw(st.sampled_from([0, 1, 2, 4]))
        t, te, f, h, he = (self.label(x) for x in ("t", "te", "f", "h", "he"))
        end = self.label("end")
        leave = [self.branch("leave", end)]
        body = [Label(t), *self.block(nest + 1, leave), Label(te)]
        if kind == 1:  # a filter block: the exception object in, a verdict out
            body += [Label(f), Ins("pop"), Ins("ldc.i4.1"), Ins("endfilter")]
        if kind in (0, 1):
            handler = [Label(h), Ins("pop"), *self.block(nest + 1, leave), Label(he)]
        else:
            handler = [Label(h), *self.block(nest + 1, [Ins("endfinally")]), Label(he)]
        self.specs.append(Spec(kind, t, te, h, he, f if kind == 1 else None))  # inner clauses came first
        return [*body, *handler, Label(end)]


@dataclass(frozen=True)
class Truth:
    """The generator's record of one instruction."""

    offset: int
    size: int
    pops: int
    pushes: int
    flow: Flow
    targets: tuple[int, ...]
    operand_at: int  # offset of the operand bytes
    operand: Operand

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Generated:
    data: bytes
    tiny: bool
    code_size: int
    max_stack: int
    local_signature: int
    locals_used: int
    truth: tuple[Truth, ...]
    clauses: tuple[EHClause, ...]
    fat_clauses: bool


def _truth(program: list[Ins | Label], labels: dict[str, int]) -> list[Truth]:
    out: list[Truth] = []
    at = 0
    for item in program:
        if isinstance(item, Label):
            continue
        op = BY_NAME[item.name]
        pops, pushes = op.pops, op.pushes
        if item.name == "call":
            pops, pushes = 2, 1
        elif item.name == "ret":
            pops = 0
        value = item.operand
        targets = (tuple(labels[n] for n in value) if isinstance(value, tuple)
                   else (labels[value],) if isinstance(value, str) else ())
        out.append(Truth(at, item.size, pops, pushes, op.flow, targets, at + op.size, op.operand))
        at += item.size
    return out


@st.composite
def generated(draw: st.DrawFn) -> Generated:
    gen = _Gen(draw)
    program = gen.block(0, [Ins("ret")])
    try:
        code, labels = assemble(program)
    except struct.error:  # a short branch too far: use the long forms
        gen_long = {v: k for k, v in SHORT.items()}
        program = [Ins(gen_long.get(i.name, i.name), i.operand) if isinstance(i, Ins) else i for i in program]
        code, labels = assemble(program)
    truth = _truth(program, labels)
    clauses = tuple(EHClause(s.kind, labels[s.try_start], labels[s.try_end] - labels[s.try_start],
                             labels[s.handler_start], labels[s.handler_end] - labels[s.handler_start],
                             TYPE if s.kind == 0 else labels[s.filter_start] if s.filter_start else 0)
                    for s in gen.specs)
    need = _max_depth(truth, clauses)
    max_stack = draw(st.integers(need, need + 3))
    local_signature = draw(st.sampled_from([LOCALS_2, LOCALS_4])) if gen.uses_locals else 0
    fits_tiny = len(code) < 64 and max_stack <= 8 and not clauses and not local_signature
    tiny = fits_tiny and draw(st.booleans())
    fat_clauses = draw(st.booleans())
    data = encode_body(code, max_stack=max_stack, local_signature=local_signature, clauses=clauses, tiny=tiny,
                       init_locals=bool(local_signature) and draw(st.booleans()), fat_clauses=fat_clauses)
    return Generated(data, tiny, len(code), 8 if tiny else max_stack, local_signature,
                     2 if gen.uses_locals else 0, tuple(truth), clauses,
                     fat_clauses or not all(c.try_length < 256 and c.handler_length < 256 for c in clauses))


def _max_depth(truth: list[Truth], clauses: tuple[EHClause, ...]) -> int:
    depths = _reference_depths(truth, truth[-1].end, 1 << 30, clauses)
    assert depths is not None, "the generator built an invalid body"
    return max((depths[t.offset] - t.pops + t.pushes for t in truth if t.offset in depths), default=0)


# ---- the reference check ---------------------------------------------------------------------------------

class _Invalid(Exception):
    pass


def _reference_depths(truth: list[Truth], size: int, max_stack: int,
                      clauses: tuple[EHClause, ...]) -> dict[int, int] | None:
    """Depth before each reachable instruction by a fixpoint over all instructions; None when some path
    underflows, overflows max stack, merges unequal depths, enters a try non-empty, returns non-empty or
    falls off the end."""
    try_starts = {c.try_offset for c in clauses}
    depth: dict[int, int] = {}

    def seed(at: int, d: int) -> None:
        if depth.setdefault(at, d) != d:
            raise _Invalid

    try:
        seed(0, 0)
        for c in clauses:
            seed(c.handler_offset, 1 if c.flags in (0, 1) else 0)
            if c.flags == 1:
                seed(c.class_token_or_filter, 1)
        while True:
            before = dict(depth)
            for t in truth:
                if t.offset not in depth:
                    continue
                d = depth[t.offset]
                if (t.offset in try_starts and d) or t.pops > d:
                    raise _Invalid
                after = d - t.pops + t.pushes
                if after > max_stack or (t.flow is Flow.RETURN and after):
                    raise _Invalid
                if t.flow in (Flow.NEXT, Flow.COND):
                    if t.end >= size:
                        raise _Invalid
                    seed(t.end, after)
                if t.flow in (Flow.BRANCH, Flow.COND):
                    for target in t.targets:
                        seed(target, after)
                if t.flow is Flow.LEAVE:
                    seed(t.targets[0], 0)
            if depth == before:
                return depth
    except _Invalid:
        return None


def reference_valid(truth: list[Truth], size: int, max_stack: int, clauses: tuple[EHClause, ...],
                    locals_ok: bool) -> bool:
    if not locals_ok or not truth or truth[-1].end != size:
        return False
    starts = {t.offset for t in truth}
    if any(target not in starts for t in truth for target in t.targets):
        return False
    blocks: list[list[tuple[str, int, int]]] = []
    for c in clauses:
        mine = [("try", c.try_offset, c.try_offset + c.try_length),
                ("handler", c.handler_offset, c.handler_offset + c.handler_length)]
        if c.flags == 1:
            mine.append(("filter", c.class_token_or_filter, c.handler_offset))
        for _, start, end in mine:
            if not (start < end <= size and start in starts and (end in starts or end == size)):
                return False
        if any(x[1] < y[2] and y[1] < x[2] for k, x in enumerate(mine) for y in mine[k + 1:]):
            return False  # a clause's own blocks overlapping
        blocks.append(mine)
    for i in range(len(clauses)):
        for j in range(i + 1, len(clauses)):
            for name_a, sa, ea in blocks[i]:
                for name_b, sb, eb in blocks[j]:
                    same = (sa, ea) == (sb, eb)
                    if same and not name_a == name_b == "try":
                        return False
                    if sa == sb and name_a == name_b == "handler":
                        return False  # two handlers starting at one address (Partition II §19)
                    a_in_b, b_in_a = sb <= sa and ea <= eb, sa <= sb and eb <= ea
                    if sa < eb and sb < ea and not (a_in_b or b_in_a):
                        return False
                    if name_b == "try" and not same and b_in_a:
                        return False  # an inner clause after its enclosing one
    if not _regions_ok(truth, size, clauses, starts):
        return False
    return _reference_depths(truth, size, max_stack, clauses) is not None


def _regions_ok(truth: list[Truth], size: int, clauses: tuple[EHClause, ...], starts: set[int]) -> bool:
    """No ret in a block, endfinally only in a finally/fault handler, endfilter only in a filter, control
    enters a block only at a try's start and leaves one only by leave (not out of a finally, fault or
    filter)."""
    kinds = {0: "catch", 1: "catch", 2: "finally", 4: "fault"}
    blocks = [b for c in clauses for b in ((c.try_offset, c.try_offset + c.try_length, "try"),
                                           (c.handler_offset, c.handler_offset + c.handler_length,
                                            kinds[c.flags]))]
    blocks += [(c.class_token_or_filter, c.handler_offset, "filter") for c in clauses if c.flags == 1]

    def within(at: int) -> set[tuple[int, int, str]]:
        return {b for b in blocks if b[0] <= at < b[1]}

    def enters(here: set[tuple[int, int, str]], target: int) -> bool:
        return any(not (b[2] == "try" and b[0] == target) for b in within(target) - here)

    for t in truth:
        here = within(t.offset)
        handlers = sorted((b for b in here if b[2] != "try"), key=lambda b: b[1] - b[0])
        if t.flow is Flow.RETURN and here:
            return False
        if t.flow is Flow.END_FINALLY and (not handlers or handlers[0][2] not in ("finally", "fault")):
            return False
        if t.flow is Flow.END_FILTER and (not handlers or handlers[0][2] != "filter"):
            return False
        if t.flow is Flow.LEAVE:
            target = t.targets[0]
            if any(b[2] in ("finally", "fault", "filter") for b in here - within(target)) \
                    or enters(here, target):
                return False
            continue
        successors = list(t.targets) if t.flow in (Flow.BRANCH, Flow.COND) else []
        if t.flow in (Flow.NEXT, Flow.COND) and t.end < size:
            successors.append(t.end)
        if any(here - within(s) or enters(here, s) for s in successors if s in starts):
            return False
    return True


def _verdict(g: Generated, data: bytes) -> list[str]:
    return [f.rule for f in check_body(data, RESOLVER, method=VOID)]


# ---- properties ------------------------------------------------------------------------------------------

# every rule of the checker (each its own catalog clause) stays silent on every generated valid body
@pytest.mark.clause("IL-HEADER-FORMAT", "IL-HEADER-TINY-SIZE", "IL-HEADER-FAT-SIZE", "IL-HEADER-FLAGS",
                    "IL-HEADER-CODE-SIZE", "IL-HEADER-LOCALS", "IL-OPCODE", "IL-CODE-TRUNCATED",
                    "IL-PREFIX", "IL-BRANCH-RANGE", "IL-BRANCH-MID-INSTRUCTION", "IL-EH-SECTION",
                    "IL-EH-FLAGS", "IL-EH-RANGE", "IL-EH-BOUNDARY", "IL-EH-HANDLER-START",
                    "IL-EH-BRANCH", "IL-EH-RET", "IL-EH-INSTRUCTION", "IL-STACK-UNDERFLOW", "IL-MAXSTACK",
                    "IL-STACK-MERGE", "IL-STACK-EMPTY", "IL-STACK-RET", "IL-STACK-ENDFILTER",
                    "IL-FALLTHROUGH-END", "IL-TOKEN", "IL-ARG-INDEX", "IL-LOCAL-INDEX",
                    "VAL-IL-EH-NESTING", "VAL-IL-TRY-STACK")
def test_generated_valid_bodies_pass(long_profile: bool) -> None:
    def check(g: Generated) -> None:
        assert _verdict(g, g.data) == []
        assert reference_valid(list(g.truth), g.code_size, g.max_stack, g.clauses, True)

    run(long_profile, generated(), check)


def _header_size(g: Generated) -> int:
    return 1 if g.tiny else 12


@st.composite
def branch_mutation(draw: st.DrawFn) -> tuple[Generated, int, int]:
    g = draw(generated().filter(lambda g: any(t.targets for t in g.truth)))
    t = draw(st.sampled_from([t for t in g.truth if t.targets]))
    if t.operand is Operand.SWITCH:
        k = draw(st.integers(0, len(t.targets) - 1))
        at = t.operand_at + 4 + 4 * k + draw(st.integers(0, 3))
    else:
        at = t.operand_at + draw(st.integers(0, 0 if t.operand is Operand.BRANCH8 else 3))
    at += _header_size(g)
    value = draw(st.integers(0, 255).filter(lambda v: v != g.data[at]))
    return g, at, value


@pytest.mark.clause("IL-BRANCH-RANGE", "IL-BRANCH-MID-INSTRUCTION", "IL-EH-BRANCH", "IL-STACK-MERGE",
                    "IL-FALLTHROUGH-END")
def test_branch_operand_mutations_are_caught_or_shown_valid(long_profile: bool) -> None:
    run(long_profile, branch_mutation(), _branch_mutated)


def _branch_mutated(m: tuple[Generated, int, int]) -> None:
    g, at, value = m
    data = bytearray(g.data)
    data[at] = value
    code_at = at - _header_size(g)
    truth = list(g.truth)
    for n, t in enumerate(truth):  # the instruction whose operand changed gets its new target(s)
        if t.offset <= code_at < t.end:
            code = bytes(data[_header_size(g):_header_size(g) + g.code_size])
            if t.operand is Operand.SWITCH:
                count = len(t.targets)
                deltas = struct.unpack_from(f"<{count}i", code, t.operand_at + 4)
                truth[n] = replace(t, targets=tuple(t.end + d for d in deltas))
            else:
                fmt = "<b" if t.operand is Operand.BRANCH8 else "<i"
                truth[n] = replace(t, targets=(t.end + struct.unpack_from(fmt, code, t.operand_at)[0],))
    valid = reference_valid(truth, g.code_size, g.max_stack, g.clauses, True)
    found = _verdict(g, bytes(data))
    assert bool(found) != valid, (found, valid)


@st.composite
def header_mutation(draw: st.DrawFn) -> tuple[Generated, int, int]:
    g = draw(generated())
    at = draw(st.integers(0, _header_size(g) - 1))
    value = draw(st.integers(0, 255).filter(lambda v: v != g.data[at]))
    return g, at, value


def _truncated(truth: tuple[Truth, ...], size: int) -> list[Truth]:
    return [t for t in truth if t.offset < size]


@pytest.mark.clause("IL-HEADER-FORMAT", "IL-HEADER-TINY-SIZE", "IL-HEADER-FAT-SIZE", "IL-HEADER-FLAGS",
                    "IL-HEADER-CODE-SIZE", "IL-HEADER-LOCALS", "IL-MAXSTACK", "IL-CODE-TRUNCATED")
def test_header_mutations_are_caught_or_shown_valid(long_profile: bool) -> None:
    run(long_profile, header_mutation(), _header_mutated)


def _header_mutated(m: tuple[Generated, int, int]) -> None:
    g, at, value = m
    data = bytearray(g.data)
    data[at] = value
    found = _verdict(g, bytes(data))
    valid = False
    if g.tiny:
        if value & 3 == 2 and value >> 2 < g.code_size:  # still tiny, the code cut shorter
            valid = reference_valid(_truncated(g.truth, value >> 2), value >> 2, 8, (), True)
    else:
        word, max_stack, code_size, local_sig = struct.unpack_from("<HHII", data)
        flags, words = word & 0xFFF, word >> 12
        clauses = g.clauses if flags & 0x08 else ()
        count = RESOLVER.local_count(local_sig) if local_sig else 0
        locals_ok = count is not None and count >= g.locals_used
        truth = _truncated(g.truth, code_size)
        if clauses and g.code_size < code_size <= ((12 + g.code_size + 3) & ~3) - 12:
            # the code grown over the zero padding before the EH section: unreachable nops after it
            nop = BY_NAME["nop"]
            truth = [*g.truth, *(Truth(at, 1, 0, 0, nop.flow, (), at + 1, nop.operand)
                                 for at in range(g.code_size, code_size))]
        if (flags & 3 == 3 and words == 3 and not flags & ~0x1B and not (flags & 0x08 and not g.clauses)
                and (code_size <= g.code_size or truth[-1].end == code_size)
                and (code_size == g.code_size or not clauses or code_size > g.code_size)):
            valid = reference_valid(truth, code_size, max_stack, clauses, locals_ok)
    assert bool(found) != valid, (found, valid, at, value)


@st.composite
def eh_mutation(draw: st.DrawFn) -> tuple[Generated, int, int, int, int]:
    g = draw(generated().filter(lambda g: bool(g.clauses)))
    index = draw(st.integers(0, len(g.clauses) - 1))
    # try offset, try length, handler offset, handler length; a filter clause's filter offset
    field = draw(st.integers(0, 4 if g.clauses[index].flags == 1 else 3))
    if g.fat_clauses:
        position, width = (4, 8, 12, 16, 20)[field], 4
    else:
        position, width = (2, 4, 5, 7, 8)[field], (2, 1, 2, 1, 4)[field]
    base = ((12 + g.code_size + 3) & ~3) + 4 + index * (24 if g.fat_clauses else 12) + position
    at = base + draw(st.integers(0, width - 1))
    value = draw(st.integers(0, 255).filter(lambda v: v != g.data[at]))
    return g, index, field, at, value


@pytest.mark.clause("IL-EH-RANGE", "IL-EH-BOUNDARY", "IL-EH-HANDLER-START", "VAL-IL-EH-NESTING",
                    "IL-EH-BRANCH")
def test_eh_offset_mutations_are_caught_or_shown_valid(long_profile: bool) -> None:
    run(long_profile, eh_mutation(), _eh_mutated)


def _eh_mutated(m: tuple[Generated, int, int, int, int]) -> None:
    g, index, field, at, value = m
    data = bytearray(g.data)
    old = data[at]
    data[at] = value
    c = g.clauses[index]
    names = ("try_offset", "try_length", "handler_offset", "handler_length", "class_token_or_filter")
    shift = 8 * (at - _field_start(g, field, index))
    mutated = replace(c, **{names[field]: getattr(c, names[field]) + ((value - old) << shift)})
    clauses = (*g.clauses[:index], mutated, *g.clauses[index + 1:])
    valid = reference_valid(list(g.truth), g.code_size, g.max_stack, clauses, True)
    found = _verdict(g, bytes(data))
    assert bool(found) != valid, (found, valid, mutated)


def _field_start(g: Generated, field: int, index: int) -> int:
    position = (4, 8, 12, 16, 20)[field] if g.fat_clauses else (2, 4, 5, 7, 8)[field]
    return ((12 + g.code_size + 3) & ~3) + 4 + index * (24 if g.fat_clauses else 12) + position


# ---- totality ----------------------------------------------------------------------------------------------

def _any_body() -> st.SearchStrategy[bytes]:
    fat = st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 300), st.sampled_from(
        [0, LOCALS_2, 0x11000009, TYPE]), st.binary(max_size=300)).map(
        lambda t: struct.pack("<HHII", t[0] | 0x3003, t[1], t[2], t[3]) + t[4])
    return st.one_of(st.binary(max_size=300), fat)


def test_any_bytes_get_findings_never_an_exception(long_profile: bool) -> None:
    """The checker is total: arbitrary bytes (and fat headers over arbitrary code and sections) give a list
    of findings, never an exception; a finding's offset lies in the code."""

    def check(data: bytes) -> None:
        for finding in check_body(data, RESOLVER, 0x06000001, length=len(data)):
            assert finding.offset is None or 0 <= finding.offset < max(len(data), 1)

    run(long_profile, _any_body(), check)


def test_bytes_that_are_no_assembly_raise_one_metadata_error(long_profile: bool) -> None:
    from clr_model.il_metadata import Assembly, MetadataError

    def check(data: bytes) -> None:
        try:
            assembly = Assembly(data)
        except MetadataError:
            return
        list(assembly.method_bodies())

    run(long_profile, st.one_of(st.binary(max_size=400), st.binary(max_size=400).map(lambda b: b"MZ" + b)),
        check)
