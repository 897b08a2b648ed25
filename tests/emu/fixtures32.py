"""32-bit x86 fixtures without a runtime: build ``fixture32/program.c`` with ``gcc -m32``, stop it with ptrace
(:class:`emu.ptrace.Tracee`) at a chosen place, capture the stopped thread with
:func:`emu.procfs.capture_process` (arch "x86"), and give the frames the program itself recorded (its ground
truth, see the program's comment).

Places (the mode the program runs in, and where it is stopped):

- ``stub``: the IP at the first instruction of a stub with no unwind information that tail-jumps
- ``stub_ret``: inside a stub with no unwind information that returns to its caller
- ``native``: inside a C function without a frame pointer
- ``managed``: inside the "JIT" method B, at its call; ``managed_entry`` at its first instruction,
  ``managed_push`` after its ``push ebp``, ``managed_ret`` at its ``ret``
- ``deep``: the stub under 32 more C frames
- ``scan``: inside the C leaf, with an EBP-less "JIT" method C between the C helper and method B
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emu.capture import (
    CodeRange,
    JitMap,
    JitMethod,
    KnownFrame,
    SegmentPayload,
    X86Registers,
    read_capture,
    write_capture,
)
from emu.procfs import capture_process
from emu.ptrace import Tracee

SOURCE = Path(__file__).with_name("fixture32") / "program.c"
PLACES = (
    "stub", "stub_ret", "native", "managed", "managed_entry", "managed_push", "managed_ret", "deep", "scan",
)  # fmt: skip
FID_A, FID_B, FID_C = 0x0700_1000, 0x0700_2000, 0x0700_3000
NAMES = {FID_A: "Fixture32.A", FID_B: "Fixture32.B", FID_C: "Fixture32.C"}
MODE = {"deep": "deep", "stub_ret": "ret", "scan": "scan"}
PLACE_KIND = {"stub": "helper:stub", "stub_ret": "helper:stub", "deep": "helper:stub", "native": "native",
              "scan": "native"}  # fmt: skip
_GCC_FLAGS = ["-m32", "-O1", "-g0", "-fasynchronous-unwind-tables", "-Wl,--build-id"]
_PROBE = "int main(void) { return 0; }\n"


def compiler_available() -> bool:
    """gcc can build and link a 32-bit program here (gcc-multilib)."""
    if shutil.which("gcc") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_PROBE)
        done = subprocess.run(
            ["gcc", "-m32", "-o", str(Path(tmp) / "probe"), str(src)], capture_output=True, check=False
        )
        return done.returncode == 0


def build(out_dir: Path) -> Path:
    exe = out_dir / "emu-fixture32"
    subprocess.run(["gcc", *_GCC_FLAGS, "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
    return exe


@dataclass(frozen=True)
class Stopped:
    place: str
    setup: dict[str, Any]
    registers: X86Registers
    #: (ip, sp) leaf first, as the program recorded them (down to main's caller in libc)
    truth: tuple[tuple[int, int], ...]
    #: which truth frames are "managed" (index, FunctionID, name)
    managed: tuple[tuple[int, int, str], ...]
    #: the managed frames the program knows are on the stack, leaf first
    known: tuple[int, ...]
    #: the first word of the thread's TCB (at ``gs_base``): glibc's i386 TCB begins with a pointer to itself
    tcb_self: int


def jit_map(setup: dict[str, Any]) -> JitMap:
    def method(fid: int, start: int, size: int) -> JitMethod:
        return JitMethod(
            function_id=fid, name=NAMES[fid], ranges=(CodeRange(start=start, end=start + size, tier="tier0"),)
        )

    size, frameless = int(setup["managed_size"]), int(setup["frameless_size"])
    return JitMap(
        methods=(
            method(FID_A, setup["a"], size),
            method(FID_B, setup["b"], size),
            method(FID_C, setup["c"], frameless),
        )
    )


def truth(place: str, setup: dict[str, Any], regs: X86Registers, raw: bytes) -> list[tuple[int, int]]:
    """The stopped stack's frames from the program's ``struct truth`` (read at the stop), down to main."""
    deep_n = int(setup["deep"]) + 1
    words = [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]
    recs = [(words[2 * i], words[2 * i + 1]) for i in range(5 + deep_n)]
    leaf, helper, outer, run, stub_ret = recs[:5]
    deep = recs[5:]
    base = 2 * (5 + deep_n)
    slot_a, slot_b, slot_c = words[base : base + 2], words[base + 2 : base + 4], words[base + 4 : base + 6]
    rest = [
        (slot_b[1], slot_b[0] + 8),  # jit A, as jit B's caller (B's EBP + 8 is its CFA)
        (slot_a[1], slot_a[0] + 8),  # c_outer, as jit A's caller
        outer,  # run
        run,  # main (its caller in libc is not recorded: see the program's comment)
    ]
    top = (regs.eip, regs.esp)
    if place.startswith("managed"):
        return [top, *rest]
    if place == "deep":
        return [top, leaf, *deep, helper, *rest]
    if place == "stub_ret":
        return [top, stub_ret, helper, *rest]
    if place == "scan":
        return [top, leaf, helper, (slot_c[1], slot_c[0]), *rest]  # jit C records its CFA itself
    return [top, leaf, helper, *rest]


def breakpoint_for(place: str, setup: dict[str, Any]) -> int:
    b = int(setup["b"])
    points = {
        "stub": int(setup["stub"]),
        "deep": int(setup["stub"]),
        "stub_ret": int(setup["stub_ret"]) + int(setup["stub_ret_stop"]),
        "native": int(setup["leaf_point"]),
        "scan": int(setup["leaf_point"]),
        "managed": b + int(setup["managed_call"]),
        "managed_entry": b,
        "managed_push": b + 1,
        "managed_ret": b + int(setup["managed_last"]),
    }
    return points[place]


def _managed_frames(setup: dict[str, Any], frames: Sequence[tuple[int, int]]) -> list[tuple[int, int, str]]:
    ranges = [(FID_A, setup["a"], setup["managed_size"]), (FID_B, setup["b"], setup["managed_size"]),
              (FID_C, setup["c"], setup["frameless_size"])]  # fmt: skip
    out = []
    for i, (ip, _sp) in enumerate(frames):
        pc = ip if i == 0 else ip - 1
        for fid, start, size in ranges:
            if start <= pc < start + size:
                out.append((i, fid, NAMES[fid]))
    return out


def capture_at(exe: Path, place: str, out: Path, *, embed_cfi: bool = True) -> Stopped:
    """Run the fixture, stop it at ``place``, capture it to ``out``; the program's own frame records."""
    # an empty environment: the captured stack reaches the stack's end, where the environment strings are
    proc = subprocess.Popen([str(exe), MODE.get(place, "plain")], stdout=subprocess.PIPE, env={}, cwd="/")
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        if not ready:
            raise TimeoutError("fixture printed no setup line in 10 s")
        setup: dict[str, Any] = json.loads(proc.stdout.readline())
        with Tracee.attach(proc.pid) as tracee:
            tracee.set_breakpoint(breakpoint_for(place, setup))
            go = setup["go"]
            tracee.write(go, (1).to_bytes(4, "little"))
            tracee.cont_until_breakpoint()
            regs = tracee.registers()
            assert isinstance(regs, X86Registers), regs
            known = (FID_C, FID_B, FID_A) if place == "scan" else (FID_B, FID_A)
            capture_process(
                proc.pid, regs, out, place=PLACE_KIND.get(place, "managed"),
                scenario=f"emu-fixture32/{place}",
                jit=jit_map(setup), known_managed=[KnownFrame(function_id=f, name=NAMES[f]) for f in known],
                embed_cfi=embed_cfi,
            )  # fmt: skip
            frames = truth(place, setup, regs, tracee.read(setup["truth"], setup["truth_size"]))
            tcb_self = int.from_bytes(tracee.read(regs.gs_base, 4), "little")
        return Stopped(
            place=place, setup=setup, registers=regs, truth=tuple(frames),
            managed=tuple(_managed_frames(setup, frames)), known=known, tcb_self=tcb_self,
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def expected_record(stopped: Stopped) -> dict[str, Any]:
    """The JSON written beside a committed capture: the program's own frames (ip, sp) leaf first, and how
    each must be found (by design of the program)."""
    return {
        "place": stopped.place,
        "frames": [{"ip": ip, "sp": sp} for ip, sp in stopped.truth],
        "trust": expected_trust(stopped.place),
        "managed": [{"index": i, "function_id": f, "name": n} for i, f, n in stopped.managed],
        "known": list(stopped.known),
    }


#: how each frame of a place must be found (by design of the program, not by reading a replay), leaf first
def expected_trust(place: str) -> list[str]:
    tail = ["frame_pointer", "frame_pointer", "cfi", "cfi"]  # jit A, c_outer, run, main
    if place.startswith("managed"):
        return ["context", *tail]
    if place == "native":
        return ["context", "cfi", "cfi", *tail]
    if place in ("stub", "stub_ret"):
        return ["context", "emulated", "cfi", *tail]
    if place == "deep":
        return ["context", "emulated", *["cfi"] * 32, "cfi", "cfi", *tail]
    if place == "scan":
        return ["context", "cfi", "cfi", "scan", *tail]
    raise ValueError(place)


def keep_cfi_of(path: Path, module: str) -> Path:
    """Rewrite the capture at ``path`` with only ``module``'s embedded CFI (the others' blobs dropped).

    The committed captures keep the program's CFI only: the frames the program knows end at ``main``,
    and every one of them is found with the program's CFI or none; the C library's CFI (over 100 KB) is
    what the walk needs past them, so their replay without disk files stops at the C library's frame
    (``module_unavailable``) on every machine."""
    cap = read_capture(path)
    kept = tuple(c for c in cap.manifest.cfi if c.path == module)
    blobs = {name for c in kept for name in (c.eh_frame, c.eh_frame_hdr) if name}
    dropped = {s.name for s in cap.manifest.segments if s.role in ("eh_frame", "eh_frame_hdr")} - blobs
    fields = cap.manifest.model_dump(mode="python", exclude={"segments"})
    fields["cfi"] = kept
    payloads = [
        SegmentPayload(name=s.name, kind=s.kind, role=s.role, address=s.address, data=cap.segments[s.name])
        for s in cap.manifest.segments
        if s.name not in dropped
    ]
    return write_capture(path, fields, payloads)


#: the committed captures (each about 10 KB with the program's CFI only)
COMMITTED = ("stub", "stub_ret", "native", "managed", "managed_push", "deep", "scan")


def regenerate(out_dir: Path, places: Sequence[str] = COMMITTED) -> list[Stopped]:
    """Rebuild the committed captures: ``python -m tests.emu.fixtures32 tests/data/captures/x86``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        for place in places:
            target = out_dir / f"fixture32-{place}.phcap"
            stopped = capture_at(exe, place, target)
            keep_cfi_of(target, str(exe))
            (out_dir / f"fixture32-{place}.expected.json").write_text(
                json.dumps(expected_record(stopped), indent=1) + "\n"
            )
            done.append(stopped)
    return done


if __name__ == "__main__":
    import sys

    regenerate(
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data" / "captures" / "x86"
    )
