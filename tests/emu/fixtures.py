"""Native fixtures without a runtime, one :class:`NativeFixture` per architecture: build the architecture's
C program with gcc, stop it with ptrace (:class:`emu.ptrace.Tracee`) at a chosen place, capture the stopped
thread with :func:`emu.procfs.capture_process`, and give the frames the program itself recorded (its ground
truth, see each program's comment).

Everything that differs between the two programs is data of their fixture (:data:`X64`: ``fixture/program.c``;
:data:`X86`: ``fixture32/program.c``, built with ``gcc -m32``): the places and where each is stopped (a sum of
addresses the program prints), the mode the program runs in, the layout of its ``struct truth``, the frames
each place has and how each must be found, the "managed" methods and the frames known to be managed.

Places: ``stub`` (the IP at the first instruction of a stub with no unwind information that tail-jumps),
``native`` (inside a C function without a frame pointer), ``managed`` (inside the "JIT" method B, at its
call), ``deep`` (the stub under more C frames); x86 also ``stub_ret`` (inside a stub with no unwind
information that returns to its caller), ``managed_entry``/``managed_push``/``managed_ret`` (at method B's
first instruction, after its ``push ebp``, at its ``ret``) and ``scan`` (inside the C leaf, with an EBP-less
"JIT" method C between the C helper and method B).

Rebuild the committed captures with ``python -m tests.emu.fixtures x64|x86 [FOLDER]``.
"""

from __future__ import annotations

import functools
import json
import select
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clr_model.abi import ISA, Arch
from emu.capture import (
    CodeRange,
    JitMap,
    JitMethod,
    KnownFrame,
    SegmentPayload,
    X64Registers,
    X86Registers,
    read_capture,
    write_capture,
)
from emu.procfs import capture_process
from emu.ptrace import Tracee

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "captures"
_PROBE = "int main(void) { return 0; }\n"


@dataclass(frozen=True)
class Method:
    """A "managed" method of the program: its FunctionID, its name, the setup keys of its start and size."""

    function_id: int
    name: str
    start: str
    size: str


@dataclass(frozen=True)
class Stopped:
    place: str
    setup: dict[str, Any]
    registers: X64Registers | X86Registers
    #: (ip, sp) leaf first, as the program recorded them
    truth: tuple[tuple[int, int], ...]
    #: which truth frames are "managed" (index, FunctionID, name)
    managed: tuple[tuple[int, int, str], ...]
    #: the managed frames the program knows are on the stack, leaf first
    known: tuple[int, ...]
    #: the first word of the thread's TCB (at the thread pointer): glibc's TCB begins with a pointer to itself
    tcb_self: int


@dataclass(frozen=True)
class NativeFixture:
    """One architecture's fixture program and what it knows of its own stack, as data."""

    arch: Arch
    #: the executable's name and the capture's scenario prefix
    name: str
    #: the committed files' prefix (``<prefix>-<place>.phcap`` and ``.expected.json``)
    prefix: str
    source: Path
    flags: tuple[str, ...]
    #: the folder of the committed captures
    data: Path
    places: tuple[str, ...]
    committed: tuple[str, ...]
    methods: tuple[Method, ...]
    #: place -> the program's mode argument ("plain" where not given)
    modes: Mapping[str, str]
    #: place -> the capture's place kind
    kinds: Mapping[str, str]
    #: place -> the breakpoint: setup keys (addresses, offsets) and numbers, summed
    breakpoints: Mapping[str, tuple[str | int, ...]]
    #: the program's ``struct truth``: its records (return address, CFA) before ``deep[]``, and the
    #: "managed" methods' slots (frame pointer or CFA, return address) after it
    records: tuple[str, ...]
    slots: tuple[str, ...]
    #: place -> its frames leaf first: "context" (the stopped registers), a record, "deep" (every deep
    #: record), "frame:X" (the method of slot X, its CFA two words above its saved frame pointer) or
    #: "self:X" (slot X holds the method's CFA itself)
    frames: Mapping[str, tuple[str, ...]]
    #: place -> how each frame must be found (by design of the program, not by reading a replay)
    trust: Mapping[str, tuple[str, ...]]
    #: place -> the managed frames known to be on the stack, leaf first
    known: Mapping[str, tuple[int, ...]]
    #: the register holding the thread pointer (the TLS base)
    thread_pointer: str
    #: the committed captures keep only the program's CFI (see :func:`keep_cfi_of`)
    program_cfi_only: bool

    @property
    def names(self) -> dict[int, str]:
        return {m.function_id: m.name for m in self.methods}

    def compiler_available(self) -> bool:
        """gcc can build and link a program with the fixture's flags here (x86: gcc-multilib)."""
        return _links(self.flags)

    def build(self, out_dir: Path) -> Path:
        exe = out_dir / self.name
        cmd = ["gcc", *self.flags, "-o", str(exe), str(self.source)]
        subprocess.run(cmd, check=True, capture_output=True)
        return exe

    def jit_map(self, setup: Mapping[str, Any]) -> JitMap:
        def method(m: Method) -> JitMethod:
            start = int(setup[m.start])
            code = CodeRange(start=start, end=start + int(setup[m.size]), tier="tier0")
            return JitMethod(function_id=m.function_id, name=m.name, ranges=(code,))

        return JitMap(methods=tuple(method(m) for m in self.methods))

    def breakpoint_for(self, place: str, setup: Mapping[str, Any]) -> int:
        return sum(term if isinstance(term, int) else int(setup[term]) for term in self.breakpoints[place])

    def truth(self, place: str, setup: Mapping[str, Any], context: tuple[int, int], raw: bytes
              ) -> list[tuple[int, int]]:
        """The stopped stack's frames from the program's ``struct truth`` (read at the stop)."""
        word = ISA[self.arch].word
        words = [int.from_bytes(raw[i : i + word], "little") for i in range(0, len(raw), word)]
        count = len(self.records) + int(setup["deep"]) + 1
        recs = [(words[2 * i], words[2 * i + 1]) for i in range(count)]
        named = dict(zip(self.records, recs, strict=False))
        slots = {name: words[2 * (count + j) : 2 * (count + j) + 2] for j, name in enumerate(self.slots)}
        out: list[tuple[int, int]] = []
        for token in self.frames[place]:
            kind, _, slot = token.partition(":")
            if token == "context":
                out.append(context)
            elif token == "deep":
                out.extend(recs[len(self.records) :])
            elif kind == "frame":
                out.append((slots[slot][1], slots[slot][0] + 2 * word))
            elif kind == "self":
                out.append((slots[slot][1], slots[slot][0]))
            else:
                out.append(named[token])
        return out

    def managed_frames(self, setup: Mapping[str, Any], frames: Sequence[tuple[int, int]]
                       ) -> list[tuple[int, int, str]]:
        """(index, FunctionID, name) of the frames in a "managed" method (a caller's IP is a return address:
        the call is the byte before it)."""
        out = []
        for i, (ip, _sp) in enumerate(frames):
            pc = ip if i == 0 else ip - 1
            for m in self.methods:
                if int(setup[m.start]) <= pc < int(setup[m.start]) + int(setup[m.size]):
                    out.append((i, m.function_id, m.name))
        return out

    def capture_at(self, exe: Path, place: str, out: Path, *, embed_cfi: bool = True) -> Stopped:
        """Run the fixture, stop it at ``place``, capture it to ``out``; the program's own frame records."""
        # an empty environment: the captured stack reaches the stack's end, where the environment strings are
        proc = subprocess.Popen([str(exe), self.modes.get(place, "plain")], stdout=subprocess.PIPE, env={},
                                cwd="/")
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 10)
            if not ready:
                raise TimeoutError("fixture printed no setup line in 10 s")
            setup: dict[str, Any] = json.loads(proc.stdout.readline())
            known = self.known[place]
            # the tracee stays stopped (attached) while it is captured and its own records are read
            with Tracee.attach(proc.pid) as tracee:
                tracee.set_breakpoint(self.breakpoint_for(place, setup))
                tracee.write(setup["go"], (1).to_bytes(4, "little"))
                tracee.cont_until_breakpoint()
                regs = tracee.registers()
                assert regs.arch == self.arch, regs
                capture_process(
                    proc.pid, regs, out, place=self.kinds[place], scenario=f"{self.name}/{place}",
                    jit=self.jit_map(setup), known_managed=[KnownFrame(function_id=f, name=self.names[f])
                                                            for f in known],
                    embed_cfi=embed_cfi,
                )  # fmt: skip
                frames = self.truth(place, setup, (regs.ip, regs.sp),
                                    tracee.read(setup["truth"], setup["truth_size"]))
                word = ISA[self.arch].word
                tcb_self = int.from_bytes(tracee.read(getattr(regs, self.thread_pointer), word), "little")
            return Stopped(
                place=place, setup=setup, registers=regs, truth=tuple(frames),
                managed=tuple(self.managed_frames(setup, frames)), known=known, tcb_self=tcb_self,
            )  # fmt: skip
        finally:
            proc.kill()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()

    def expected_trust(self, place: str) -> list[str]:
        return list(self.trust[place])

    def committed_capture(self, place: str) -> Path:
        return self.data / f"{self.prefix}-{place}.phcap"

    def committed_record(self, place: str) -> dict[str, Any]:
        """The record committed beside :meth:`committed_capture` (:meth:`expected_record`)."""
        loaded: dict[str, Any] = json.loads((self.data / f"{self.prefix}-{place}.expected.json").read_text())
        return loaded

    def expected_record(self, stopped: Stopped) -> dict[str, Any]:
        """The JSON written beside a committed capture: the program's own frames (ip, sp) leaf first, how
        each must be found, the managed ones and the managed frames known to be on the stack."""
        return {
            "place": stopped.place,
            "frames": [{"ip": ip, "sp": sp} for ip, sp in stopped.truth],
            "trust": self.expected_trust(stopped.place),
            "managed": [{"index": i, "function_id": f, "name": n} for i, f, n in stopped.managed],
            "known": list(stopped.known),
        }

    def regenerate(self, out_dir: Path | None = None, places: Sequence[str] | None = None) -> list[Stopped]:
        """Rebuild the committed captures (``python -m tests.emu.fixtures x64|x86 [FOLDER]``)."""
        folder = out_dir or self.data
        folder.mkdir(parents=True, exist_ok=True)
        done = []
        with tempfile.TemporaryDirectory() as tmp:
            exe = self.build(Path(tmp))
            for place in places or self.committed:
                target = folder / f"{self.prefix}-{place}.phcap"
                stopped = self.capture_at(exe, place, target)
                if self.program_cfi_only:
                    keep_cfi_of(target, str(exe))
                (folder / f"{self.prefix}-{place}.expected.json").write_text(
                    json.dumps(self.expected_record(stopped), indent=1) + "\n"
                )
                done.append(stopped)
        return done


@functools.cache
def _links(flags: tuple[str, ...]) -> bool:
    if shutil.which("gcc") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_PROBE)
        arch_flags = [f for f in flags if f.startswith("-m")]
        cmd = ["gcc", *arch_flags, "-o", str(Path(tmp) / "probe"), str(src)]
        done = subprocess.run(cmd, capture_output=True, check=False)
        return done.returncode == 0


def keep_cfi_of(path: Path, module: str) -> Path:
    """Rewrite the capture at ``path`` with only ``module``'s embedded CFI (the others' blobs dropped).

    The committed x86 captures keep the program's CFI only: the frames the program knows end at ``main``,
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


def _every(places: Sequence[str], value: Any, **overrides: Any) -> dict[str, Any]:
    return {place: overrides.get(place, value) for place in places}


_COMMON_FLAGS = ("-O1", "-g0", "-fasynchronous-unwind-tables", "-Wl,--build-id")
#: the frames below the C helper, leaf first: jit B's caller jit A, its caller c_outer, then two C frames
_TAIL_TRUST = ("frame_pointer", "frame_pointer", "cfi", "cfi")

_X64_PLACES = ("stub", "native", "managed", "deep")
_X64_REST = ("frame:b", "frame:a", "outer", "main")  # jit A, c_outer, main, libc
_X64_A, _X64_B = 0x7F00_1000, 0x7F00_2000
X64 = NativeFixture(
    arch="x64", name="emu-fixture", prefix="fixture", source=HERE / "fixture" / "program.c",
    flags=_COMMON_FLAGS, data=DATA, places=_X64_PLACES, committed=_X64_PLACES,
    methods=(Method(_X64_A, "Fixture.A", "a", "managed_size"),
             Method(_X64_B, "Fixture.B", "b", "managed_size")),
    modes={"deep": "deep"},
    kinds={"stub": "helper:stub", "deep": "helper:stub", "native": "native", "managed": "managed"},
    breakpoints={"stub": ("stub",), "deep": ("stub",), "native": ("leaf_point",),
                 "managed": ("b", "managed_call")},
    records=("leaf", "helper", "outer", "main"), slots=("a", "b"),
    frames=_every(_X64_PLACES, ("context", "leaf", "helper", *_X64_REST), managed=("context", *_X64_REST),
                  deep=("context", "leaf", "deep", "helper", *_X64_REST)),
    trust={
        "managed": ("context", *_TAIL_TRUST),
        "native": ("context", "cfi", "cfi", *_TAIL_TRUST),
        "stub": ("context", "emulated", "cfi", *_TAIL_TRUST),
        "deep": ("context", "emulated", *["cfi"] * 64, "cfi", "cfi", *_TAIL_TRUST),
    },
    known=_every(_X64_PLACES, (_X64_B, _X64_A)),
    thread_pointer="fs_base", program_cfi_only=False,
)  # fmt: skip

_X86_PLACES = ("stub", "stub_ret", "native", "managed", "managed_entry", "managed_push", "managed_ret",
               "deep", "scan")
_X86_MANAGED = ("managed", "managed_entry", "managed_push", "managed_ret")
_X86_REST = ("frame:b", "frame:a", "outer", "run")  # jit A, c_outer, run, main (B's EBP + 8 is its CFA)
_X86_A, _X86_B, _X86_C = 0x0700_1000, 0x0700_2000, 0x0700_3000
X86 = NativeFixture(
    arch="x86", name="emu-fixture32", prefix="fixture32", source=HERE / "fixture32" / "program.c",
    flags=("-m32", *_COMMON_FLAGS), data=DATA / "x86", places=_X86_PLACES,
    committed=("stub", "stub_ret", "native", "managed", "managed_push", "deep", "scan"),
    methods=(Method(_X86_A, "Fixture32.A", "a", "managed_size"),
             Method(_X86_B, "Fixture32.B", "b", "managed_size"),
             Method(_X86_C, "Fixture32.C", "c", "frameless_size")),
    modes={"deep": "deep", "stub_ret": "ret", "scan": "scan"},
    kinds=_every(_X86_PLACES, "managed", stub="helper:stub", stub_ret="helper:stub", deep="helper:stub",
                 native="native", scan="native"),
    breakpoints={
        "stub": ("stub",), "deep": ("stub",), "stub_ret": ("stub_ret", "stub_ret_stop"),
        "native": ("leaf_point",), "scan": ("leaf_point",), "managed": ("b", "managed_call"),
        "managed_entry": ("b",), "managed_push": ("b", 1), "managed_ret": ("b", "managed_last"),
    },
    records=("leaf", "helper", "outer", "run", "stub_ret"), slots=("a", "b", "c"),
    frames=_every(_X86_PLACES, ("context", "leaf", "helper", *_X86_REST),
                  **dict.fromkeys(_X86_MANAGED, ("context", *_X86_REST)),
                  deep=("context", "leaf", "deep", "helper", *_X86_REST),
                  stub_ret=("context", "stub_ret", "helper", *_X86_REST),
                  scan=("context", "leaf", "helper", "self:c", *_X86_REST)),  # jit C records its CFA itself
    trust=_every(_X86_PLACES, ("context", "emulated", "cfi", *_TAIL_TRUST),
                 **dict.fromkeys(_X86_MANAGED, ("context", *_TAIL_TRUST)),
                 native=("context", "cfi", "cfi", *_TAIL_TRUST),
                 deep=("context", "emulated", *["cfi"] * 32, "cfi", "cfi", *_TAIL_TRUST),
                 scan=("context", "cfi", "cfi", "scan", *_TAIL_TRUST)),
    known=_every(_X86_PLACES, (_X86_B, _X86_A), scan=(_X86_C, _X86_B, _X86_A)),
    thread_pointer="gs_base", program_cfi_only=True,
)  # fmt: skip

FIXTURES: Mapping[Arch, NativeFixture] = {"x64": X64, "x86": X86}


if __name__ == "__main__":
    import sys

    fixture = FIXTURES[sys.argv[1]]  # type: ignore[index]
    fixture.regenerate(Path(sys.argv[2]) if len(sys.argv) > 2 else None)
