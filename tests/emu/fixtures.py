"""Native fixtures without a runtime: build ``fixture/program.c`` with gcc, stop it with ptrace at a chosen
place, capture the stopped thread with :func:`emu.procfs.capture_process`, and give the frames the program
itself recorded (its ground truth, see the program's comment).

Places: ``stub`` (the IP at the first instruction of a stub with no unwind information that tail-jumps),
``native`` (inside a C function without a frame pointer), ``managed`` (inside the "JIT" code, at its call),
``deep`` (the stub under 64 more C frames).
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu.capture import CodeRange, JitMap, JitMethod, KnownFrame, X64Registers
from emu.procfs import capture_process, read_process_memory
from emu.ptrace import Tracee

SOURCE = Path(__file__).with_name("fixture") / "program.c"
PLACES = ("stub", "native", "managed", "deep")
FID_A, FID_B = 0x7F00_1000, 0x7F00_2000

def compiler_available() -> bool:
    return shutil.which("gcc") is not None


def build(out_dir: Path) -> Path:
    exe = out_dir / "emu-fixture"
    subprocess.run(
        ["gcc", "-O1", "-g0", "-fasynchronous-unwind-tables", "-Wl,--build-id", "-o", str(exe), str(SOURCE)],
        check=True,
        capture_output=True,
    )
    return exe


@dataclass(frozen=True)
class Stopped:
    place: str
    setup: dict[str, Any]
    registers: X64Registers
    #: (ip, sp) leaf first, as the program recorded them (down to main's caller in libc)
    truth: tuple[tuple[int, int], ...]
    #: which truth frames are "managed" (FunctionID) and their names
    managed: tuple[tuple[int, int, str], ...]


def jit_map(setup: dict[str, Any]) -> JitMap:
    size = int(setup["managed_size"])

    def method(fid: int, name: str, start: int) -> JitMethod:
        return JitMethod(
            function_id=fid, name=name, ranges=(CodeRange(start=start, end=start + size, tier="tier0"),)
        )

    return JitMap(methods=(method(FID_A, "Fixture.A", setup["a"]), method(FID_B, "Fixture.B", setup["b"])))


def truth(place: str, setup: dict[str, Any], regs: X64Registers, raw: bytes) -> list[tuple[int, int]]:
    """The stopped stack's frames from the program's ``struct truth`` (read at the stop)."""
    deep_n = int(setup["deep"]) + 1
    words = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]
    recs = [(words[2 * i], words[2 * i + 1]) for i in range(4 + deep_n)]
    leaf, helper, outer, main = recs[:4]
    deep = recs[4:]
    slot_a = words[2 * (4 + deep_n) : 2 * (4 + deep_n) + 2]
    slot_b = words[2 * (4 + deep_n) + 2 : 2 * (4 + deep_n) + 4]
    rest = [
        (slot_b[1], slot_b[0] + 16),  # jit A, as jit B's caller
        (slot_a[1], slot_a[0] + 16),  # c_outer, as jit A's caller
        outer,  # main
        main,  # libc
    ]
    top = (regs.rip, regs.rsp)
    if place == "managed":
        return [top, *rest]
    if place == "deep":
        return [top, leaf, *deep, helper, *rest]
    return [top, leaf, helper, *rest]


def breakpoint_for(place: str, setup: dict[str, Any]) -> int:
    if place in ("stub", "deep"):
        return int(setup["stub"])
    if place == "native":
        return int(setup["leaf_point"])
    if place == "managed":
        return int(setup["b"]) + int(setup["managed_call"])
    raise ValueError(place)


def capture_at(exe: Path, place: str, out: Path, *, embed_cfi: bool = True) -> Stopped:
    """Run the fixture, stop it at ``place``, capture it to ``out``; the program's own frame records."""
    # an empty environment: the captured stack reaches the stack's end, where the environment strings are
    proc = subprocess.Popen(
        [str(exe), "deep" if place == "deep" else "plain"], stdout=subprocess.PIPE, env={}, cwd="/"
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        if not ready:
            raise TimeoutError("fixture printed no setup line in 10 s")
        setup: dict[str, Any] = json.loads(proc.stdout.readline())
        pid = proc.pid
        known = [
            KnownFrame(function_id=FID_B, name="Fixture.B"),
            KnownFrame(function_id=FID_A, name="Fixture.A"),
        ]
        # the tracee stays stopped (attached) while it is captured and its own records are read
        with Tracee.attach(pid) as tracee:
            tracee.set_breakpoint(breakpoint_for(place, setup))
            tracee.write(setup["go"], (1).to_bytes(4, "little"))
            tracee.cont_until_breakpoint()
            regs = tracee.registers()
            assert isinstance(regs, X64Registers), regs
            capture_process(
                pid, regs, out, place={"stub": "helper:stub", "deep": "helper:stub"}.get(place, place),
                scenario=f"emu-fixture/{place}", jit=jit_map(setup), known_managed=known, embed_cfi=embed_cfi,
            )  # fmt: skip
            frames = truth(place, setup, regs, read_process_memory(pid, setup["truth"], setup["truth_size"]))
        managed_ips = {setup["b"] + setup["managed_call"]: FID_B, setup["b"] + setup["managed_ret"]: FID_B,
                       setup["a"] + setup["managed_ret"]: FID_A}  # fmt: skip
        names = {FID_A: "Fixture.A", FID_B: "Fixture.B"}
        managed = tuple(
            (i, managed_ips[ip], names[managed_ips[ip]])
            for i, (ip, _) in enumerate(frames)
            if ip in managed_ips
        )
        return Stopped(place=place, setup=setup, registers=regs, truth=tuple(frames), managed=managed)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def expected_record(stopped: Stopped) -> dict[str, Any]:
    """The JSON written beside a committed capture: the program's own frames (ip, sp) leaf first."""
    return {
        "place": stopped.place,
        "frames": [{"ip": ip, "sp": sp} for ip, sp in stopped.truth],
        "managed": [{"index": i, "function_id": f, "name": n} for i, f, n in stopped.managed],
    }


def frames_of(records: Sequence[dict[str, int]]) -> list[tuple[int, int]]:
    return [(r["ip"], r["sp"]) for r in records]


#: how each frame of a place must be found (by design of the program, not by reading a replay), leaf first
def expected_trust(place: str) -> list[str]:
    tail = ["frame_pointer", "frame_pointer", "cfi", "cfi"]  # jit A, c_outer, main, libc
    if place == "managed":
        return ["context", *tail]
    if place == "native":
        return ["context", "cfi", "cfi", *tail]
    if place == "stub":
        return ["context", "emulated", "cfi", *tail]
    if place == "deep":
        return ["context", "emulated", *["cfi"] * 64, "cfi", "cfi", *tail]
    raise ValueError(place)


def regenerate(out_dir: Path) -> None:
    """Rebuild the committed captures: ``python -m tests.emu.fixtures tests/data/captures``."""
    import tempfile

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        for place in PLACES:
            stopped = capture_at(exe, place, out_dir / f"fixture-{place}.phcap")
            (out_dir / f"fixture-{place}.expected.json").write_text(
                json.dumps(expected_record(stopped), indent=1) + "\n"
            )


if __name__ == "__main__":
    import sys

    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data" / "captures")
