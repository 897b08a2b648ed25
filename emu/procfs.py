"""Capture a stopped Linux process's thread through /proc (for native programs, tests and tools).

The live runtime side captures inside the probe's signal handler; this module builds the same capture
file from outside, for a thread some tracer (ptrace, gdb) holds stopped: the module map from
``/proc/PID/maps`` (build-ids read from the files), memory from ``/proc/PID/mem``, and the registers the
tracer read. What it copies is what the capture format promises: the stack from SP to
min(SP + 64 KiB, the end of the stack mapping), code around the IP and around every stack word that points
into executable memory (candidate return addresses), and, when asked, the ``.eh_frame`` of each module
those addresses fall in, so the capture replays with no file on disk.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clr_model.abi import ISA
from emu.capture import (
    STACK_CAPTURE_BYTES,
    EmbeddedCfi,
    JitMap,
    KnownFrame,
    LiveWalk,
    ModuleEntry,
    SegmentPayload,
    StackInfo,
    X64Registers,
    X86Registers,
    names_a_file,
    write_capture,
)
from emu.cfi import CfiError, load_bias, read_elf
from emu.errors import EmuError

__all__ = ["capture_process", "parse_maps", "read_process_memory"]


def parse_maps(text: str) -> list[ModuleEntry]:
    """``/proc/PID/maps`` lines as module entries, build-ids read from file-backed executable mappings."""
    out: list[ModuleEntry] = []
    ids: dict[str, str | None] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5:
            continue
        span, perms, offset = parts[0], parts[1], parts[2]
        path = parts[5].strip() if len(parts) > 5 else None
        start_s, end_s = span.split("-")
        start, end = int(start_s, 16), int(end_s, 16)
        if start >= 1 << 63:  # [vsyscall]: kernel-half pages are not process memory a capture holds
            continue
        build_id: str | None = None
        is_file = names_a_file(path)
        if is_file and path is not None and "x" in perms:
            if path not in ids:
                try:
                    ids[path] = read_elf(path).build_id
                except CfiError:
                    ids[path] = None
            build_id = ids[path]
        out.append(
            ModuleEntry(
                start=start, end=end, offset=int(offset, 16), perms=perms, path=path or None,
                build_id=build_id, anonymous_executable="x" in perms and not is_file,
            )
        )  # fmt: skip
    return out


def read_process_memory(pid: int, address: int, size: int) -> bytes:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        data = os.pread(fd, size, address)
    except OSError as exc:
        raise EmuError(f"pid {pid}: cannot read {size} bytes at {address:#x}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) != size:
        raise EmuError(f"pid {pid}: short read of {size} bytes at {address:#x}")
    return data


def _merge(windows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(windows):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def capture_process(
    pid: int,
    registers: X64Registers | X86Registers,
    out: str | os.PathLike[str],
    *,
    place: str = "unknown",
    scenario: str | None = None,
    tid: int | None = None,
    jit: JitMap | None = None,
    known_managed: Sequence[KnownFrame] | None = None,
    live: LiveWalk | None = None,
    embed_cfi: bool = True,
    ip_window: int = 256,
    candidate_window: int = 64,
) -> Path:
    """Write a capture of the stopped thread of ``pid`` whose registers are ``registers`` to ``out``
    (an x86 capture when they are :class:`X86Registers`: a 32-bit process, 4-byte stack words)."""
    modules = parse_maps(Path(f"/proc/{pid}/maps").read_text())
    sp, ip = registers.sp, registers.ip
    word = ISA[registers.arch].word

    def mapping(addr: int) -> ModuleEntry | None:
        return next((m for m in modules if m.start <= addr < m.end), None)

    stack_map = mapping(sp)
    if stack_map is None:
        raise EmuError(f"pid {pid}: SP {sp:#x} is in no mapping")
    captured_end = min(sp + STACK_CAPTURE_BYTES, stack_map.end)
    stack = read_process_memory(pid, sp, captured_end - sp)
    windows: list[tuple[int, int]] = []
    hit_modules: list[ModuleEntry] = []

    def add_window(addr: int, half: int) -> None:
        m = mapping(addr)
        if m is None or "x" not in m.perms or "r" not in m.perms:
            return
        windows.append((max(addr - half, m.start), min(addr + half, m.end)))
        if m.is_file and m not in hit_modules:
            hit_modules.append(m)

    add_window(ip, ip_window)
    for k in range(0, len(stack) - word + 1, word):
        add_window(int.from_bytes(stack[k : k + word], "little"), candidate_window)
    payloads = [SegmentPayload(name="stack", kind="memory", role="stack", address=sp, data=stack)]
    for i, (lo, hi) in enumerate(_merge(windows)):
        payloads.append(
            SegmentPayload(name=f"code.{i}", kind="memory", role="code", address=lo,
                           data=read_process_memory(pid, lo, hi - lo))
        )  # fmt: skip
    cfi: list[EmbeddedCfi] = []
    if embed_cfi:
        seen: set[str] = set()
        for m in hit_modules:
            if m.path is None or m.path in seen:
                continue
            seen.add(m.path)
            try:
                elf = read_elf(m.path)
            except CfiError:
                continue
            bias = load_bias(elf.loads, m.start, m.offset)
            if elf.eh_frame is None or bias is None:
                continue
            n = len(cfi)
            payloads.append(
                SegmentPayload(name=f"cfi.{n}.eh_frame", kind="blob", role="eh_frame", data=elf.eh_frame)
            )
            if elf.eh_frame_hdr is not None:
                payloads.append(
                    SegmentPayload(name=f"cfi.{n}.eh_frame_hdr", kind="blob", role="eh_frame_hdr",
                                   data=elf.eh_frame_hdr)
                )  # fmt: skip
            cfi.append(
                EmbeddedCfi(
                    path=m.path, build_id=elf.build_id, load_bias=bias, eh_frame_vaddr=elf.eh_frame_vaddr,
                    eh_frame=f"cfi.{n}.eh_frame",
                    eh_frame_hdr_vaddr=elf.eh_frame_hdr_vaddr if elf.eh_frame_hdr is not None else None,
                    eh_frame_hdr=f"cfi.{n}.eh_frame_hdr" if elf.eh_frame_hdr is not None else None,
                )
            )  # fmt: skip
    manifest: dict[str, Any] = dict(
        arch=registers.arch,
        place=place,
        scenario=scenario,
        pid=pid,
        tid=tid if tid is not None else pid,
        registers=registers,
        stack=StackInfo(
            sp=sp,
            captured_end=captured_end,
            stack_end=stack_map.end,
            truncated=sp + STACK_CAPTURE_BYTES < stack_map.end,
            segment="stack",
        ),
        modules=tuple(modules),
        jit=jit or JitMap(),
        cfi=tuple(cfi),
        live=live,
        known_managed=tuple(known_managed) if known_managed is not None else None,
    )
    return write_capture(out, manifest, payloads)
