"""Issue 11: the program interpreter (conformance/fuzz/program.py), without a child process.

Every byte string must decode to an example the model's ordering allows, and a step's bytes must mean the
same whatever steps come before it (what lets a reproducer lose whole steps while it shrinks).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clr_model.moved_refs import U64_MAX
from conformance.fuzz.program import END_BELOW, RULES, Reader, decode, without_step
from conformance.fuzz.world import World

_programs = st.binary(min_size=0, max_size=400)


def _rich_world() -> World:
    """A world in which every rule's precondition holds (and picks have several things to choose from)."""
    world = World()
    threads = [world.create_thread() for _ in range(3)]
    module = world.load_module(threads[0], ["m.dll"])
    classes = [world.load_class(threads[0], module, [f"C{k}"]) for k in range(3)]
    for k in range(3):
        world.jit(threads[1], classes[k], [f"M{k}"], 64)
    world.allocate(threads[2], classes[0], [24] * 5)
    return world


def _events(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in commands if c["op"] == "event"]


def test_an_empty_or_zero_program_has_no_steps() -> None:
    assert decode(b"", 30).steps == []
    assert decode(bytes(200), 30).steps == []
    assert decode(bytes([END_BELOW - 1, END_BELOW + 1]), 30).steps == []


def test_reading_past_the_end_gives_zeros_and_numbers_are_in_range() -> None:
    r = Reader(b"\xff\x01")
    assert r.below(256) == 255 and r.byte() == 1 and r.byte() == 0 and r.below(4096) == 0
    assert Reader(b"\xff\xff").below(4096) == 0xFFFF % 4096
    assert Reader(b"").below(0) == 0 and Reader(b"\x07").below(1) == 0


@settings(max_examples=300, deadline=None)
@given(_programs)
def test_every_program_keeps_the_models_ordering(data: bytes) -> None:
    """A class loads from a loaded module, a method is JIT-compiled for a loaded class, callbacks run on
    live threads, and MovedReferences2/MovedReferences come only between GarbageCollectionStarted and
    GarbageCollectionFinished (MR2-01), MovedReferences right after its MovedReferences2."""
    world = decode(data, 30).world
    modules: set[int] = set()
    classes: set[int] = set()
    threads: set[int] = {0}
    in_gc = False
    previous = ""
    for cmd in world.commands:
        op = cmd["op"]
        if op == "module":
            modules.add(cmd["id"])
        elif op == "class":
            assert cmd["module"] in modules
            classes.add(cmd["id"])
        elif op == "function":
            assert cmd["class"] in classes
        elif op == "thread":
            threads.add(cmd["id"])
        elif op == "thread_gone":
            threads.discard(cmd["id"])
        elif op == "event":
            name = cmd["name"]
            assert cmd["thread"] in threads or name == "ThreadCreated", name
            if name == "GarbageCollectionStarted":
                assert not in_gc
                in_gc = True
            elif name == "GarbageCollectionFinished":
                assert in_gc
                in_gc = False
            elif name == "MovedReferences2":
                assert in_gc
            elif name == "MovedReferences":
                assert in_gc and previous == "MovedReferences2"
            previous = name
    assert not in_gc


@settings(max_examples=200, deadline=None)
@given(_programs)
def test_a_steps_width_does_not_depend_on_the_world(data: bytes) -> None:
    """Each step reads as many bytes in any other world as it did in its own."""
    program = decode(data, 30)
    by_name = {rule.name: rule for rule in RULES}
    for name, (lo, hi) in zip(program.steps, program.spans, strict=True):
        rule = by_name[name]
        world = _rich_world()
        assert rule.allowed(world)
        r = Reader(data, lo + 1)
        rule.run(world, r)
        assert min(r.pos, len(data)) == hi, name


@settings(max_examples=100, deadline=None)
@given(_programs, st.integers(0, 29))
def test_cutting_a_step_out_keeps_the_steps_before_it(data: bytes, index: int) -> None:
    program = decode(data, 30)
    if index >= len(program.steps):
        return
    cut = decode(without_step(data, program.spans, index), 30)
    assert cut.steps[:index] == program.steps[:index]
    assert cut.spans[:index] == program.spans[:index]


def test_adversarial_gcs_are_reachable() -> None:
    """The programs can ask for what a live runtime rarely does: a 600-object burst moved in batches of
    512 ranges, and (in the documented world) ranges that end at the top of the address space."""
    ops = {rule.name: END_BELOW + k for k, rule in enumerate(RULES)}
    thread, module, cls = ops["thread_created"], ops["load_module"], ops["load_class"]
    setup = bytes([thread, module, 0, 0, 0, 0, cls, 0, 0, 0, 0, 0])
    burst = bytes([ops["allocate"], 0, 0, 255])
    pattern = bytes(12)  # move every object, a new block at each: 600 ranges
    gc = bytes([ops["compacting_gc"], 0, 0]) + pattern + bytes([0, 1]) + bytes(6) + bytes([0, 0, 0])
    world = decode(setup + burst + gc, 30, "documented").world  # "top" is only a document's (gc.top)
    moved = [c for c in _events(world.commands) if c["name"] == "MovedReferences2"]
    assert [c["args"]["cMovedObjectIDRanges"] for c in moved] == [512, 88]  # batches of 512 ranges
    ends = [o + n for c in moved for o, n in zip(c["args"]["newObjectIDRangeStart"],
                                                 c["args"]["cObjectIDRangeLength"], strict=True)]
    assert max(ends) == U64_MAX  # "top": the highest end the model allows (start + length < 2**64)


@settings(max_examples=300, deadline=None)
@given(_programs)
def test_every_step_sends_a_command_and_ends_count_them(data: bytes) -> None:
    """load_reproducer decodes at most as many steps as a reproducer has commands: that needs every step
    to send at least one command; ``ends`` says how many commands there are after each step."""
    program = decode(data, 30)
    assert len(program.ends) == len(program.steps)
    assert all(a < b for a, b in zip([0, *program.ends], program.ends, strict=False))
    assert program.ends[-1:] == ([len(program.world.commands)] if program.steps else [])
