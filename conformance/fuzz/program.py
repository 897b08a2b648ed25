"""An example as a program: one byte string that a small interpreter turns into a runtime's events.

Hypothesis draws one ``st.binary`` per example (one draw is cheap; a rule-based state machine's hundreds
of draws per example are not) and shrinks it; this interpreter reads it as a sequence of steps. Each step
is an op byte and the step's parameters. The op names a :data:`RULES` entry; a step whose rule's
precondition (the model's ordering: a class loads from a loaded module, a method is JIT-compiled for a
loaded class, objects are allocated of loaded classes on live threads, MovedReferences2 only inside a GC,
MR2-01) does not hold is skipped, so every byte string is a valid example. Reading past the end gives 0
and an op byte below :data:`END_BELOW` ends the program, so the shrinker's favourite moves (zeroing bytes,
cutting the tail) make shorter, simpler programs: every parameter's 0 is its simplest value (no name
growth, nothing moved, one batch, the first thing of a kind).

How many bytes a step reads depends on its own bytes only, never on the world (a pick among the threads
is one byte whatever their number), so cutting one step out (:func:`without_step`) leaves every other
step's bytes meaning what they meant; and as a skipped step does nothing, no step's effect depends on an
earlier one having been skipped or not.

The same rules drive :class:`conformance.fuzz.machine.FuzzMachine` (hypothesis' rule-based state machine,
one ``st.binary`` parameter block per rule) for the stateful engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from conformance.fuzz.behaviours import DEFAULT_WORLD
from conformance.fuzz.names import Dictionary
from conformance.fuzz.world import BATCH_OBSERVED, GENERATIONS, GcPlan, World

__all__ = ["END_BELOW", "RULES", "Program", "Reader", "StepRule", "decode"]

T = TypeVar("T")

#: An op byte below this ends the program (2.3% per step: random programs mostly reach the step limit).
END_BELOW = 6
#: A name's first byte at or above this draws it from the dictionary, when there is one (half the time).
DRAWN_FROM = 128
#: Names are made of these (ASCII, Latin-1, a BMP symbol and one outside the BMP: UTF-16 surrogates).
LETTERS = "abcdefghijklmnopqrstuvwxyz.ABCXYZ_0123456789é€𝄞"
#: ... in the observed world (behaviour ``names.ascii``).
ASCII_LETTERS = LETTERS[:-3]
#: At most this many fake threads live at once, and this many objects before allocation stops.
MAX_THREADS = 8
MAX_OBJECTS = 2000
#: A heap larger than this is moved by a drawn pattern (every k-th object, a block every j-th): a few
#: numbers shrink better than hundreds of bits.
PATTERN_ABOVE = 48
#: A burst allocates this many objects: enough for MovedReferences2 batches of 512 ranges.
BURST = 600
#: Object sizes beyond the ordinary: ones that need the 64-bit lengths of MovedReferences2 (MR2-03/15).
SPECIAL_SIZES = (24, 2**32 - 8, 2**32 + 24, 5 * 2**30)
#: Gaps beyond the ordinary (ranges far apart; blocks near 2**64).
SPECIAL_GAPS = (2**32, 2**40)


class Reader:
    """The bytes of one step (or a whole program), read front to back; past the end every byte is 0."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        pos = self.pos
        self.pos = pos + 1
        return self.data[pos] if pos < len(self.data) else 0

    def number(self, nbytes: int) -> int:
        value = 0
        for _ in range(nbytes):
            value = value << 8 | self.byte()
        return value

    def below(self, n: int) -> int:
        """A number in [0, n) (0 when n is 0 or 1); as many bytes as n needs, at least one."""
        nbytes = max(1, (n - 1).bit_length() + 7 >> 3)
        value = self.number(nbytes)
        return value % n if n > 1 else 0

    def flag(self) -> bool:
        return self.byte() & 1 == 1

    def rare(self, in_256: int) -> bool:
        """True for ``in_256`` of the 256 byte values (the highest: 0 is False)."""
        return self.byte() >= 256 - in_256

    def pick(self, items: Sequence[T]) -> T:
        """One of ``items`` (one byte whatever their number: only the first 256 can be picked)."""
        return items[self.byte() % len(items)]


# --- parameters ---------------------------------------------------------------------------------------


def names(world: World, r: Reader, pool: Sequence[str] = ()) -> list[str]:
    """One name; in the documented world also a name and a longer one the later questions get: an answer
    that grows between the size query and the fill of a double-pass client (BUF-07/08; no runtime changes a
    name: the observed world never does). The bytes read are the same in both worlds."""
    return named(world, r, pool)[0]


def named(world: World, r: Reader, pool: Sequence[str] = ()) -> tuple[list[str], int | None]:
    """:func:`names`, drawn half the time from ``pool`` when there is one (the dictionary: the profiler's
    strings, the app's names), and which of ``pool`` it is (None: invented). A drawn name reads one byte
    more (the index's high byte); without a pool the bytes read are those of an invented name."""
    b = r.byte()
    length = 1 + b % 12
    seed = r.byte()
    picked = (r.byte() << 8 | seed) % len(pool) if pool and b >= DRAWN_FROM else None
    letters = LETTERS if world.may("names.unicode") else ASCII_LETTERS
    if picked is None:
        base = "".join(letters[(seed + 7 * i) % len(letters)] for i in range(length))
    else:
        base = pool[picked]
    grow = r.byte()
    if not grow & 1 or not world.may("names.grow"):
        return [base], picked
    extra = 1 + (grow >> 1) % 40
    return [base, base + "".join(letters[(seed + 11 * i + 3) % len(letters)] for i in range(extra))], picked


def size(world: World, r: Reader) -> int:
    b = r.byte()
    if b < 224 or not world.may("alloc.huge"):
        return 16 + b % 224
    return SPECIAL_SIZES[(b - 224) % len(SPECIAL_SIZES)]


def gap(world: World, r: Reader) -> int:
    b = r.byte()
    if b < 128:
        return 0
    if b < 192 or not world.may("alloc.far"):
        return 1 + (b - 128) % 64
    return SPECIAL_GAPS[b % len(SPECIAL_GAPS)]


def bits(block: bytes, n: int) -> list[bool]:
    """The first ``n`` bits of ``block``, low bit first."""
    return [bool(block[k >> 3] >> (k & 7) & 1) for k in range(n)]


def generations(r: Reader) -> list[int]:
    collected = r.below(3)
    return [1 if g <= collected else 0 for g in range(GENERATIONS)]


def thread(world: World, r: Reader) -> int:
    """A live fake thread (every rule that makes callbacks needs one); one byte."""
    b = r.byte()
    threads = sorted(world.threads)
    return threads[b % len(threads)] if threads else 0


# --- the rules ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRule:
    """One thing a runtime may do next: when it may (``allowed``), and doing it (``run``)."""

    name: str
    allowed: Callable[[World], bool]
    run: Callable[[World, Reader], None]


def _thread_created(world: World, r: Reader) -> None:
    world.create_thread()


def _load_module(world: World, r: Reader) -> None:
    """A module; with ``--app`` the first is the app's own (the bytes read are the same)."""
    tid = thread(world, r)
    d = world.dictionary
    given, picked = named(world, r, d.module_names)
    if d.app_types and world.app_module is None:
        world.load_module(tid, [d.app_module], app=True)
        return
    if picked is not None:
        world.does("names.strings")
    world.load_module(tid, given)


def _load_class(world: World, r: Reader) -> None:
    """A class: invented, named by a profiler's string, or (``--app``) one of the app's types, loaded once
    into the app's module with its token (a class of the app's module is always one of them; a step that
    would load one twice does nothing)."""
    module = r.pick(sorted(world.modules))
    tid = thread(world, r)
    d = world.dictionary
    given, picked = named(world, r, d.class_names)
    app_type = None
    if picked is not None and picked < len(d.loadable):
        app_type = d.loadable[picked]
    elif module == world.app_module and d.loadable:
        app_type = d.loadable[(picked or 0) % len(d.loadable)]
    if app_type is None and module == world.app_module:
        return  # the app's module has only the app's types (none the world loads)
    if app_type is not None:
        if app_type in world.app_classes.values():
            return
        world.load_class(tid, module, [app_type.name], app_type)
        return
    if picked is not None:
        world.does("names.strings")
    world.load_class(tid, module, given)


def _jit(world: World, r: Reader) -> None:
    """A method: of an app class, one of its methods (each compiled once: else the step does nothing);
    else invented or named by a profiler's string."""
    cls = r.pick(sorted(world.classes))
    tid = thread(world, r)
    app_type = world.app_classes.get(cls)
    methods = app_type.methods if app_type is not None else ()
    pool = [m.name for m in methods] if methods else world.dictionary.strings
    given, picked = named(world, r, pool)
    code_size = 1 + r.below(4096)
    if app_type is not None:
        if not methods:
            return
        method = methods[picked if picked is not None else 0]
        if method.token in world.app_methods:
            return
        world.jit(tid, cls, [method.name], code_size, method.token)
        return
    if picked is not None:
        world.does("names.strings")
    bodies = world.dictionary.il
    # the body: one of the pool's, picked by the code size already read (a step reads no more for it)
    world.jit(tid, cls, given, code_size, il=bodies[code_size % len(bodies)] if bodies else None)


def _allocate(world: World, r: Reader) -> None:
    cls = r.pick(sorted(world.classes))
    tid = thread(world, r)
    if r.rare(3):  # a burst: enough objects for MovedReferences2 batches of 512 ranges
        world.allocate(tid, cls, [24] * BURST, [0, 8] * (BURST // 2))
        return
    count = 1 + r.below(8)
    sizes = [size(world, r) for _ in range(count)]
    gaps = [gap(world, r) for _ in range(r.below(count + 1))]
    world.allocate(tid, cls, sizes, gaps)


def _exception(world: World, r: Reader) -> None:
    """An exception thrown on a stack of any shape (up to 40 frames, runs of native code among them),
    caught in a managed frame with no unmanaged one at or below it (none such: the step does nothing; an
    exception no managed frame catches ends a runtime's process)."""
    tid = thread(world, r)
    shape: list[int | None] = []
    for _ in range(r.below(41)):
        b = r.byte() % 17
        shape.append(None if b >= 14 else b)  # a run of unmanaged frames 3 times in 17
    frames = world.frames_for(shape, [16 * i + 1 for i in range(len(shape))])
    first_native = next((i for i, (fid, _) in enumerate(frames) if not fid), len(frames))
    k = r.byte() % (first_native + 1)
    cls = r.pick(sorted(world.classes))
    if first_native == 0:
        return
    world.exception(tid, frames, min(k, first_native - 1), cls)


def _gc(world: World, r: Reader) -> None:
    world.gc(thread(world, r), generations(r))


def _compacting_gc(world: World, r: Reader) -> None:
    """A compacting GC: any subset of the objects moved in blocks of any split, new space anywhere (up to
    2**64, adjacent blocks, lengths over 4 GiB, the arrays in any order), in batches of 1..8 or 512."""
    tid = thread(world, r)
    collected = generations(r)
    n = len(world.heap)
    block = bytes(r.byte() for _ in range(2 * PATTERN_ABOVE // 8))  # the same width whatever the heap
    if n > PATTERN_ABOVE:
        every, cut = 1 + block[0] % 4, 1 + block[1] % 4
        moved = [k % every == 0 for k in range(n)]
        split = [k % cut == 0 for k in range(n - 1)]
    else:
        moved = bits(block, n)
        split = bits(block[PATTERN_ABOVE // 8 :], max(0, n - 1))
    gaps = [gap(world, r) for _ in range(r.below(9))]
    top = r.flag()
    base = r.below(2**40 + 1)
    reverse = r.flag()
    rotation = r.below(8)
    b = r.byte()
    batch = BATCH_OBSERVED if b < 128 else 1 + b % 8
    d = r.byte()
    delta0 = 0 if d < 128 else 2 + d % 3
    plan = GcPlan(moved=moved, split=split, gaps=gaps, top=top, base_offset=base, reverse=reverse,
                  array_rotation=rotation, batch=batch, delta0=delta0)
    world.compacting_gc(tid, collected, plan)


def _thread_destroyed(world: World, r: Reader) -> None:
    world.destroy_thread(r.pick(sorted(world.threads)))


#: The rules, cheapest first (the shrinker lowers op bytes, so it prefers the earlier ones).
RULES: tuple[StepRule, ...] = (
    StepRule("thread_created", lambda w: len(w.threads) < MAX_THREADS, _thread_created),
    StepRule("load_module", lambda w: bool(w.threads), _load_module),
    StepRule("load_class", lambda w: bool(w.modules and w.threads), _load_class),
    StepRule("jit", lambda w: bool(w.classes and w.threads), _jit),
    StepRule("gc", lambda w: bool(w.threads) and w.may("gc.plain"), _gc),
    StepRule("allocate", lambda w: bool(w.threads and w.classes) and len(w.heap) < MAX_OBJECTS, _allocate),
    StepRule("exception", lambda w: bool(w.threads and w.classes), _exception),
    StepRule("compacting_gc", lambda w: bool(w.threads), _compacting_gc),
    StepRule("thread_destroyed", lambda w: bool(w.threads), _thread_destroyed),
)


@dataclass
class Program:
    """A decoded example: its world (the commands), and per step its rule, the bytes it read and how many
    of the world's commands there are after it (every step sends at least one)."""

    world: World
    steps: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)


def decode(
    data: bytes, max_steps: int, world_name: str = DEFAULT_WORLD, dictionary: Dictionary | None = None
) -> Program:
    """The example ``data`` encodes (at most ``max_steps`` steps) in world ``world_name``, its names drawn
    also from ``dictionary``."""
    world = World(world=world_name, dictionary=dictionary or Dictionary())
    program = Program(world)
    r = Reader(data)
    while len(program.steps) < max_steps and r.pos < len(data):
        start = r.pos
        op = r.byte()
        if op < END_BELOW:
            break
        rule = RULES[(op - END_BELOW) % len(RULES)]
        if not rule.allowed(world):
            continue  # the model does not allow it now: skipped
        before = len(world.commands)
        rule.run(world, r)
        if len(world.commands) == before:
            continue  # the world had nothing to do it with (an exception with no managed frame): skipped
        program.steps.append(rule.name)
        program.spans.append((start, min(r.pos, len(data))))
        program.ends.append(len(world.commands))
    return program


def without_step(data: bytes, spans: Sequence[tuple[int, int]], index: int) -> bytes:
    """``data`` with step ``index``'s bytes cut out (a shrinking move that keeps the other steps whole)."""
    lo, hi = spans[index]
    return data[:lo] + data[hi:]
