"""The proxy's shadow heap (``conformance/native/common/shadow_heap.cpp``) held equal to the reference
model (:mod:`clr_model.shadow_heap`): a small driver (``tools/shadow_heap_driver.cpp``, built here with g++)
reads the same commands as JSON lines and prints its verdicts; hypothesis draws sequences of several GCs
from the model's own layouts (tests/clr_model/test_shadow_heap.py: several batches, address reuse in the
same GC), with generations not collected, sweeping GCs (surviving blocks), allocations over old objects,
and the stale-address cap (``left_gcs`` / ``left_max``) on and off."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clr_model.shadow_heap import ShadowHeap
from conformance.core.paths import NATIVE_DIR
from tests.clr_model.test_shadow_heap import BASE, Layout, layouts

Command = dict[str, Any]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path_factory.mktemp("shadow_heap") / "shadow_heap_driver"
    subprocess.run(
        [gxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE_DIR / 'include'}",
         str(NATIVE_DIR / "tools" / "shadow_heap_driver.cpp"), str(NATIVE_DIR / "common" / "shadow_heap.cpp"),
         str(NATIVE_DIR / "common" / "json.cpp"), "-o", str(exe)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return exe


@dataclass
class Sequence:
    commands: list[Command] = field(default_factory=list)


def _probes(layout: Layout) -> Iterator[int]:
    sizes = dict(layout.before)
    for start, size in layout.before:
        yield from (start, start + 1, start + 8, start + size - 1, start + size)
        new = layout.after.get(start)
        if new is not None:
            yield from (new, new + 8, new + size - 1)
    yield BASE - 8
    yield max(sizes) + 0x1000


@st.composite
def sequences(draw: st.DrawFn) -> Sequence:
    seq = Sequence()
    cmds = seq.commands
    for _ in range(draw(st.integers(1, 4))):
        layout = draw(layouts())
        shift = 8 * draw(st.sampled_from([0, 0, 4, 64, 512]))
        before = [(s + shift, z) for s, z in layout.before]
        after = {s + shift: n + shift for s, n in layout.after.items()}
        for start, size in before:
            cmds.append({"op": "allocate", "id": start, "size": size})
        generations: list[list[int]] = []
        collected = [0]
        if draw(st.booleans()):  # an older generation below a split point that this GC does not collect
            split = BASE + 8 * draw(st.integers(0, 64))
            generations = [[BASE - 0x10000, split, 2], [split, BASE + 0x10000, 0]]
            collected = draw(st.sampled_from([[0], [0, 1], [0, 1, 2]]))
        cmds.append({"op": "gc_started", "collected": collected, "generations": generations})
        if draw(st.booleans()):
            for batch in layout.batches:
                blocks = [[o + shift, n + shift, ln] for o, n, ln in batch]
                cmds.append({"op": "moved", "blocks": blocks})
        else:  # a sweeping GC: the survivors stay, reported as surviving blocks
            survivors = sorted((s, z) for s, z in before if s in after)
            cmds.append({"op": "surviving", "blocks": [[s, z] for s, z in survivors]})
        cmds.append({"op": "gc_finished"})
        cmds.extend({"op": "classify", "id": p + shift} for p in _probes(layout))
        cmds.append({"op": "objects"})
    cmds.append({"op": "counts"})
    return seq


@st.composite
def interleaved(draw: st.DrawFn) -> Sequence:
    """sequences() with more allocations after some of its own, overlapping it, one another and objects known
    from an earlier GC, each group followed by verdicts: the native heap answers beside the allocations it
    has not merged yet, and merges allocations that overlap one another one at a time."""
    seq = Sequence()
    for c in draw(sequences()).commands:
        seq.commands.append(c)
        if c["op"] != "allocate" or not draw(st.booleans()):
            continue
        for _ in range(draw(st.integers(0, 3))):
            start = c["id"] + 8 * draw(st.integers(-8, 8))
            seq.commands.append({"op": "allocate", "id": start, "size": 8 * draw(st.integers(1, 6))})
        seq.commands.extend({"op": "classify", "id": c["id"] + d} for d in (-8, 0, 1, 8, 24))
    return seq


def model_answers(commands: list[Command], left_gcs: int | None, left_max: int | None) -> list[object]:
    heap = ShadowHeap(left_gcs=left_gcs, left_max=left_max)
    out: list[object] = []
    for c in commands:
        op = c["op"]
        if op == "allocate":
            heap.allocate(c["id"], c["size"])
        elif op == "gc_started":
            heap.gc_started(c["collected"], [tuple(g) for g in c["generations"]])
        elif op == "moved":
            heap.moved(tuple(b) for b in c["blocks"])
        elif op == "surviving":
            heap.surviving(tuple(b) for b in c["blocks"])
        elif op == "gc_finished":
            heap.gc_finished()
        elif op == "classify":
            v = heap.classify(c["id"])
            out.append({"verdict": v.verdict.value, "objectStart": v.object_start, "offset": v.offset})
        elif op == "objects":
            out.append([[s, z] for s, z in sorted(heap.objects().items())])
        elif op == "counts":
            out.append({"gcs": heap.gc_count, "compactingGcs": heap.compacting_gcs,
                        "reuseGcs": heap.reuse_gcs})
    return out


def native_answers(
    driver: Path, commands: list[Command], left_gcs: int | None, left_max: int | None
) -> list[object]:
    text = "".join(json.dumps(c) + "\n" for c in commands)
    args = [str(driver), str(left_gcs or 0), str(left_max or 0)]
    done = subprocess.run(args, input=text, capture_output=True, text=True, check=True, timeout=60)
    return [json.loads(line) for line in done.stdout.splitlines()]


def _check(driver: Path, seq: Sequence, left_gcs: int | None, left_max: int | None) -> None:
    expected = model_answers(seq.commands, left_gcs, left_max)
    got = native_answers(driver, seq.commands, left_gcs, left_max)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"answer {k}: native {g} != model {e}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequences())
def test_native_shadow_heap_answers_as_the_model_does(driver: Path, seq: Sequence) -> None:
    _check(driver, seq, None, None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequences(), st.integers(1, 3), st.integers(1, 12))
def test_the_stale_address_cap_forgets_as_the_model_does(
    driver: Path, seq: Sequence, left_gcs: int, left_max: int
) -> None:
    _check(driver, seq, left_gcs, left_max)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(interleaved())
def test_verdicts_between_allocations_answer_as_the_model_does(driver: Path, seq: Sequence) -> None:
    _check(driver, seq, None, None)


def test_the_cap_forgets_the_oldest_gcs_addresses_first(driver: Path) -> None:
    """An address left two GCs ago is stale with left_gcs=2 and forgotten (unknown) with left_gcs=1."""
    cmds: list[Command] = [
        {"op": "allocate", "id": BASE, "size": 32},
        {"op": "gc_started", "collected": [0], "generations": []},
        {"op": "moved", "blocks": [[BASE, BASE + 0x100, 32]]},
        {"op": "gc_finished"},
        {"op": "gc_started", "collected": [0], "generations": []},
        {"op": "moved", "blocks": [[BASE + 0x100, BASE + 0x200, 32]]},
        {"op": "gc_finished"},
        {"op": "classify", "id": BASE},
        {"op": "classify", "id": BASE + 0x100},
    ]
    stale = {"verdict": "stale", "objectStart": BASE + 0x200, "offset": None}
    unknown = {"verdict": "unknown", "objectStart": None, "offset": None}
    assert native_answers(driver, cmds, 2, None) == [stale, stale]
    assert native_answers(driver, cmds, 1, None) == [unknown, stale]
    assert native_answers(driver, cmds, None, 1) == [unknown, stale]
    assert model_answers(cmds, 1, None) == [unknown, stale] == model_answers(cmds, None, 1)


def test_bad_input_is_one_line_and_exit_2(driver: Path) -> None:
    done = subprocess.run([str(driver)], input='{"op": "allocate"}\n', capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["stdin:1: expected an integer id"]
