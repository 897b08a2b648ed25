"""The capture file: one instant of one thread, self-describing and versioned.

A capture holds what an asynchronous stack walk depended on at the instant a thread was stopped: its
registers (the ucontext general registers plus fs_base on x64; the i386 general registers plus gs_base on
x86, the ``arch`` field says which; and the runtime's CONTEXT when there is one: 1232 or more bytes on
x64, the 716-byte x86 CONTEXT on x86), the stack from SP up to min(SP + 64 KiB, the thread's stack end),
code bytes around the IP and around candidate return addresses, the module map, the JIT code map, what the
live runtime answered (a naive-seed DoStackSnapshot) and the managed frames the scenario knows are on the
stack.

File layout (all integers little-endian)::

    offset  size  field
    0       8     magic  89 50 48 43 41 50 0D 0A  ("\\x89PHCAP\\r\\n": binary, and line-ending mangling shows)
    8       4     format version (:data:`FORMAT_VERSION`)
    12      4     manifest length M (at most :data:`MAX_MANIFEST_BYTES`)
    16      4     CRC-32 of the manifest bytes
    20      M     manifest: UTF-8 JSON of :class:`CaptureManifest` (its JSON Schema: :func:`capture_schema`)
    20+M    ...   segment payloads, each where its manifest entry says (``offset``, ``stored_size``),
                  zlib-compressed or stored, with the CRC-32 of the uncompressed bytes in the entry

A segment is either ``memory`` (bytes of the process at ``address``) or a ``blob`` (bytes that are not
process memory at an address: the CONTEXT record, an embedded ``.eh_frame``). Memory segments never
overlap; payloads never overlap and lie inside the file after the manifest.

Readers reject a truncated, corrupt or hostile file with one :class:`~emu.errors.CaptureFormatError`
naming the file and the offset or manifest field: sizes past the end of the file, overlapping segments or
payloads, memory ending above ``2**64 - 4096`` (page rounding would overflow) or, in an x86 capture, above
``2**32`` (or module map entries, stack bounds or registers beyond 32 bits), more than
:data:`MAX_SEGMENTS` segments, decompressed sizes above the limits (checked while decompressing, so a
zlib bomb costs at most the declared size), or a path that is not absolute and normal (a module, a
ReadyToRun image or embedded CFI: the captured process's file, which a replay with disk access opens; a
relative path would be read from wherever the replay runs, a ``..`` part names one file as another).
Reading is linear in the file size. Writes are atomic: a
temporary name in the same folder, fsync, then rename.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from clr_model.abi import ISA, Arch
from clr_model.context import X86_CONTEXT, ContextError, ContextLayout, runtime_context_layout
from clr_model.words import FROZEN, U16, U32, U64
from conformance.core.fsio import file_header
from emu.errors import CaptureFormatError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_MANIFEST_BYTES",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_BYTES",
    "MAX_TOTAL_BYTES",
    "RUNTIME_MODULES",
    "STACK_CAPTURE_BYTES",
    "Capture",
    "CaptureArch",
    "CaptureManifest",
    "CodeRange",
    "EmbeddedCfi",
    "JitMap",
    "JitMethod",
    "KnownCallees",
    "KnownFrame",
    "LiveFrame",
    "LiveWalk",
    "ModuleEntry",
    "ReadyToRunModule",
    "RuntimeContext",
    "SegmentEntry",
    "SegmentPayload",
    "StackInfo",
    "X64Registers",
    "X86Registers",
    "capture_schema",
    "is_runtime_module",
    "names_a_file",
    "read_capture",
    "write_capture",
]

MAGIC = b"\x89PHCAP\r\n"
FORMAT_NAME: Final = "profharness-capture"
FORMAT_VERSION: Final = 1
_HEADER = struct.Struct("<8sIII")
MAX_MANIFEST_BYTES = 16 << 20
MAX_SEGMENTS = 4096
MAX_SEGMENT_BYTES = 64 << 20
MAX_TOTAL_BYTES = 512 << 20
#: memory may not end above this (2**64 - one page): rounding an end up to a page must not overflow
MAX_ADDRESS_END = 2**64 - 4096
#: an x86 capture's memory, modules and stack lie in the 32-bit address space: they end at 2**32 at most
X86_ADDRESS_END = 2**32
#: how much stack a capture holds above SP at most (perf's maximum is 65528; its default 8 KiB is too little)
STACK_CAPTURE_BYTES = 64 << 10

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._:@/+-]{1,128}$")]


class CaptureArch(StrEnum):
    X64 = "x64"
    #: 32-bit x86 (i386) captures: :class:`X86Registers`, 32-bit addresses, the 716-byte x86 CONTEXT
    X86 = "x86"


class _Registers(BaseModel):
    """The registers of a capture: by name, and its stack and instruction pointers (named by the ISA)."""

    model_config = FROZEN
    arch: Arch
    #: the fields that are no integer register (besides ``arch``)
    not_general: ClassVar[frozenset[str]] = frozenset()

    def general(self) -> dict[str, int]:
        """The integer registers by name: every field but ``arch`` and :attr:`not_general`."""
        return {k: v for k, v in self.model_dump().items() if k != "arch" and k not in self.not_general}

    @property
    def sp(self) -> int:
        return int(getattr(self, ISA[self.arch].sp))

    @property
    def ip(self) -> int:
        return int(getattr(self, ISA[self.arch].ip))


class X64Registers(_Registers):
    """The ucontext general registers (``gregs``, sys/ucontext.h names, lower case) plus ``fs_base``."""

    arch: Literal["x64"] = "x64"
    not_general: ClassVar[frozenset[str]] = frozenset({"csgsfs", "err", "trapno", "oldmask", "cr2"})
    r8: U64 = 0
    r9: U64 = 0
    r10: U64 = 0
    r11: U64 = 0
    r12: U64 = 0
    r13: U64 = 0
    r14: U64 = 0
    r15: U64 = 0
    rdi: U64 = 0
    rsi: U64 = 0
    rbp: U64 = 0
    rbx: U64 = 0
    rdx: U64 = 0
    rax: U64 = 0
    rcx: U64 = 0
    rsp: U64
    rip: U64
    efl: U64 = 0
    csgsfs: U64 = 0
    err: U64 = 0
    trapno: U64 = 0
    oldmask: U64 = 0
    cr2: U64 = 0
    fs_base: U64 = 0


class X86Registers(_Registers):
    """The i386 general registers (ucontext ``gregs`` names of sys/ucontext.h, lower case: ``efl`` is
    EFLAGS), the segment selectors, and ``gs_base``: the base of the GS segment, which the i386 ABI uses
    for thread-local storage (what ``PTRACE_GETREGS`` from a 64-bit tracer reports as ``gs_base``)."""

    arch: Literal["x86"] = "x86"
    not_general: ClassVar[frozenset[str]] = frozenset({"cs", "ss", "ds", "es", "fs", "gs"})
    eax: U32 = 0
    ecx: U32 = 0
    edx: U32 = 0
    ebx: U32 = 0
    esp: U32
    ebp: U32 = 0
    esi: U32 = 0
    edi: U32 = 0
    eip: U32
    efl: U32 = 0
    cs: U16 = 0
    ss: U16 = 0
    ds: U16 = 0
    es: U16 = 0
    fs: U16 = 0
    gs: U16 = 0
    gs_base: U32 = 0


def _registers_tag(value: Any) -> str:
    """The ``arch`` tag of a registers object or mapping (x64 when a mapping has none, as version 1
    files written before x86 captures existed always say it anyway)."""
    if isinstance(value, Mapping):
        return str(value.get("arch", "x64"))
    return str(getattr(value, "arch", "x64"))


#: the registers of either architecture, told apart by their ``arch`` field
Registers = Annotated[
    Annotated[X64Registers, Tag("x64")] | Annotated[X86Registers, Tag("x86")],
    Discriminator(_registers_tag),
]


def context_layout_for(arch: CaptureArch, runtime: str) -> ContextLayout | None:
    """The CONTEXT layout a capture of ``arch`` taken in ``runtime`` carries (x86: always the 716-byte
    x86 CONTEXT; x64: the runtime's, None when the harness does not know the runtime)."""
    if arch is CaptureArch.X86:
        return X86_CONTEXT
    return runtime_context_layout(runtime)


class SegmentEntry(BaseModel):
    """Where one segment's bytes are in the file and what they are."""

    model_config = FROZEN
    name: Name
    kind: Literal["memory", "blob"]
    role: Literal["stack", "code", "data", "context", "eh_frame", "eh_frame_hdr", "other"]
    #: process address of the first byte (memory segments only)
    address: U64 | None = None
    #: uncompressed size
    size: Annotated[int, Field(ge=0, le=MAX_SEGMENT_BYTES)]
    #: absolute file offset and size of the stored (possibly compressed) bytes
    offset: Annotated[int, Field(ge=0, lt=2**63)]
    stored_size: Annotated[int, Field(ge=0, lt=2**63)]
    compression: Literal["zlib", "none"] = "zlib"
    crc32: U32

    @model_validator(mode="after")
    def _address_fits_kind(self) -> SegmentEntry:
        if self.kind == "memory":
            if self.address is None:
                raise ValueError("a memory segment needs an address")
            if self.size == 0:
                raise ValueError("a memory segment may not be empty")
            if self.address + self.size > MAX_ADDRESS_END:
                raise ValueError(f"memory at {self.address:#x}+{self.size:#x} ends above 2**64 - 4096")
        elif self.address is not None:
            raise ValueError("a blob segment has no address")
        if self.compression == "none" and self.stored_size != self.size:
            raise ValueError("a stored (uncompressed) segment's stored_size must equal its size")
        return self


class RuntimeContext(BaseModel):
    """The runtime's Win32 CONTEXT at the instant (layout and size from :mod:`clr_model.context`)."""

    model_config = FROZEN
    #: the runtime version the CONTEXT belongs to, e.g. "8.0.4"
    runtime: Annotated[str, Field(min_length=1, max_length=64)]
    size: Annotated[int, Field(gt=0, lt=2**16)]
    #: the blob segment holding the bytes
    segment: Name


class StackInfo(BaseModel):
    """The captured stack: [sp, captured_end); ``truncated`` is stated, never guessed."""

    model_config = FROZEN
    sp: U64
    captured_end: U64
    #: the end (highest address) of the thread's stack; None when the capturer did not know it
    stack_end: U64 | None
    #: True when the capture stops before the stack end (or the end is unknown)
    truncated: bool
    segment: Name

    @model_validator(mode="after")
    def _consistent(self) -> StackInfo:
        limit = self.sp + STACK_CAPTURE_BYTES
        want_end = limit if self.stack_end is None else min(limit, self.stack_end)
        if self.captured_end != want_end:
            raise ValueError(
                f"captured_end {self.captured_end:#x} is not min(sp + 64 KiB, stack_end) = {want_end:#x}"
            )
        want_trunc = self.stack_end is None or limit < self.stack_end
        if self.truncated != want_trunc:
            raise ValueError(f"truncated is {self.truncated}, the bounds say {want_trunc}")
        return self


def names_a_file(path: str | None) -> bool:
    """Whether a /proc/PID/maps path names a file a replay could read: an absolute path (so not anonymous
    memory, not a pseudo name such as "[stack]", "[vdso]" or "anon_inode:[perf_event]"), and not a memfd
    ("/memfd:doublemapper (deleted)": .NET 8 maps its JIT code, stubs and write-barrier copy through one;
    no path holds those bytes, so they count as anonymous executable memory, carried by the capture's code
    segments)."""
    return bool(path) and str(path).startswith("/") and not str(path).startswith("/memfd:")


def _contained_path(value: str) -> str:
    """A path a capture names (issue 13, containment): the kernel's name of a mapping in the captured
    process, which a replay with disk access opens. It is absolute and normal, as /proc/PID/maps spells
    paths: a relative one would be read from wherever the replay runs, and a ``..`` or ``.`` part, an
    empty part or a control character would make a path that names one file spelled as another."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise ValueError(f"{value!r} holds a control character")
    parts = value.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{value!r} is not a normal path (an empty, '.' or '..' part)")
    return value


def _mapping_name(value: str) -> str:
    """A /proc/PID/maps name: a file's path (see :func:`_contained_path`) or a pseudo name ("[stack]",
    "[anon:...]", "anon_inode:[perf_event]")."""
    if value.startswith("[") or value.startswith("anon_inode:"):
        if any(ord(c) < 0x20 or c == "\x7f" for c in value):
            raise ValueError(f"{value!r} holds a control character")
        return value
    return _contained_path(value)


#: the path of a file in the captured process (modules, ReadyToRun images, embedded CFI)
FilePath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_contained_path)]
#: what /proc/PID/maps names a mapping: a file's path or a pseudo name
MappingName = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_mapping_name)]


#: The runtime's own native modules, by file name without ".so" (and prefixes of it: a cross-targeting
#: JIT such as libclrjit_unix_x64_x64 is a JIT too). Code in them is the CLR's helper code to a stack
#: walk, not the program's native code: the one table the capture writer's places ("helper:runtime") and
#: the replay's model (a helper frame on top) read.
RUNTIME_MODULES: Final = ("libcoreclr", "libclrjit", "libclrgc", "libmscordaccore")


def is_runtime_module(path: str) -> bool:
    """Whether the file ``path`` (a path or a file name; "" for none) is one of :data:`RUNTIME_MODULES`."""
    stem = path.rsplit("/", 1)[-1].split(".so", 1)[0].lower()
    return bool(stem) and stem.startswith(RUNTIME_MODULES)


class ModuleEntry(BaseModel):
    """One mapping of /proc/PID/maps, with the build-id of its file when it has one."""

    model_config = FROZEN
    start: U64
    end: U64
    offset: U64 = 0
    perms: Annotated[str, Field(pattern=r"^[r-][w-][x-][ps]$")]
    #: the file (or a pseudo name such as "[stack]"); None for anonymous memory
    path: MappingName | None = None
    #: hex GNU build-id of the file
    build_id: Annotated[str, Field(pattern=r"^[0-9a-f]{2,128}$")] | None = None
    #: executable memory no file holds (stubs, the write-barrier copy, JIT code)
    anonymous_executable: bool = False

    @property
    def is_file(self) -> bool:
        return names_a_file(self.path)

    @model_validator(mode="after")
    def _consistent(self) -> ModuleEntry:
        if self.end <= self.start:
            raise ValueError(f"end {self.end:#x} is not above start {self.start:#x}")
        marked = "x" in self.perms and not self.is_file
        if self.anonymous_executable != marked:
            raise ValueError(f"anonymous_executable is {self.anonymous_executable}, perms/path say {marked}")
        return self


class CodeRange(BaseModel):
    model_config = FROZEN
    start: U64
    end: U64
    #: the code version: as the capture adapter writes it, "jit" (a method's only version), "version<i>" (the
    #: i-th by address of several), "osr" (an OSR version: the replay unwinds it and the Tier0 frame it runs
    #: on as one frame, emu.unwind.OSR_TIER), "r2r"; any other short name is accepted
    tier: Annotated[str, Field(min_length=1, max_length=32)] = "jit"

    @model_validator(mode="after")
    def _ordered(self) -> CodeRange:
        if self.end <= self.start:
            raise ValueError(f"end {self.end:#x} is not above start {self.start:#x}")
        return self


class JitMethod(BaseModel):
    """One FunctionID and every code range it had up to the instant (no tier is ever dropped)."""

    model_config = FROZEN
    function_id: Annotated[int, Field(gt=0, lt=2**64)]
    name: Annotated[str, Field(max_length=1024)] | None = None
    ranges: Annotated[tuple[CodeRange, ...], Field(min_length=1)]


class ReadyToRunModule(BaseModel):
    model_config = FROZEN
    path: FilePath
    start: U64
    end: U64


class JitMap(BaseModel):
    """FunctionID -> code ranges (every tier) and the ReadyToRun modules' ranges, as at the instant."""

    model_config = FROZEN
    methods: tuple[JitMethod, ...] = ()
    ready_to_run: tuple[ReadyToRunModule, ...] = ()

    @model_validator(mode="after")
    def _no_overlap(self) -> JitMap:
        spans = sorted((r.start, r.end, m.function_id) for m in self.methods for r in m.ranges)
        for (_s0, e0, f0), (s1, _e1, f1) in itertools.pairwise(spans):
            if s1 < e0:
                raise ValueError(f"code ranges of FunctionIDs {f0:#x} and {f1:#x} overlap at {s1:#x}")
        return self


class LiveFrame(BaseModel):
    """One StackSnapshotCallback of the live walk."""

    model_config = FROZEN
    function_id: U64
    ip: U64
    sp: U64 | None = None


class LiveWalk(BaseModel):
    """What the live runtime said at the instant: DoStackSnapshot seeded from the ucontext as it was."""

    model_config = FROZEN
    seed: Literal["naive", "none", "recovered"] = "naive"
    hresult: U32
    frames: tuple[LiveFrame, ...] = ()


class RecoveryStep(BaseModel):
    """One frame the probe's seed recovery visited (docs/seeding.md): its IP, SP and how it was found."""

    model_config = FROZEN
    ip: U64
    sp: U64
    rule: Literal["context", "cfi", "leaf", "scan", "frame_pointer", "epilogue"]


class RecoveredSeed(BaseModel):
    """The seed the probe recovered at the instant: the first managed frame's registers."""

    model_config = FROZEN
    ip: U64
    sp: U64
    fp: U64 | None = None
    #: what GetFunctionFromIP said for the seed's IP on the profiler thread
    function_id: U64


class LiveRecovery(BaseModel):
    """The recovered-seed attempt of a sample (``capture --seed recovered``): whether a managed frame was
    found, the frames visited, the seed, and the live walk seeded with it (None when none ran)."""

    model_config = FROZEN
    status: Literal["walked", "no-managed-frame", "park-timeout", "not-parked"]
    #: where the seed was recovered: in the signal handler (the code map knew every IP) or on the profiler
    #: thread while the sampled thread was parked (GetFunctionFromIP)
    path: Literal["handler", "profiler-thread"] | None = None
    reason: Annotated[str, Field(max_length=1024)] | None = None
    steps: Annotated[tuple[RecoveryStep, ...], Field(max_length=1024)] = ()
    seed: RecoveredSeed | None = None
    walk: LiveWalk | None = None


class KnownFrame(BaseModel):
    """A managed frame the scenario knows is on the stack (leaf first in the list)."""

    model_config = FROZEN
    function_id: Annotated[int, Field(gt=0, lt=2**64)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=1024)]


_CalleeName = Annotated[str, Field(min_length=1, max_length=1024)]
_CalleePrefix = Annotated[str, Field(min_length=1, max_length=256)]


class KnownCallees(BaseModel):
    """What the scenario says may sit above its known frames at the instant: the phase it was in (its own
    account, read from its phase cell by the sampling handler), its own methods the innermost known frame
    calls there, and name prefixes of the code those call into (CoreLib). A replay recovers the known frames
    when every managed frame above them is one of these."""

    model_config = FROZEN
    phase: Annotated[str, Field(max_length=64)] | None = None
    names: Annotated[tuple[_CalleeName, ...], Field(max_length=256)] = ()
    prefixes: Annotated[tuple[_CalleePrefix, ...], Field(max_length=64)] = ()

    def allows(self, name: str | None) -> bool:
        """Whether a managed frame of this name may sit above the known frames (a frame whose method has no
        name, such as a dynamic method's, never does)."""
        return name is not None and (name in self.names or name.startswith(self.prefixes))


class EmbeddedCfi(BaseModel):
    """A module's ``.eh_frame`` (and ``.eh_frame_hdr``) carried in the capture, so no file is needed."""

    model_config = FROZEN
    path: FilePath
    build_id: Annotated[str, Field(pattern=r"^[0-9a-f]{2,128}$")] | None = None
    #: runtime address = link-time address + load_bias
    load_bias: U64
    eh_frame_vaddr: U64
    eh_frame: Name
    eh_frame_hdr_vaddr: U64 | None = None
    eh_frame_hdr: Name | None = None


class CaptureManifest(BaseModel):
    """The manifest of a capture file (see the module docstring for the file layout)."""

    model_config = FROZEN
    format: Literal["profharness-capture"] = FORMAT_NAME
    version: Literal[1] = FORMAT_VERSION
    arch: CaptureArch = CaptureArch.X64
    #: where the thread was stopped: "managed", "native", "helper:<kind>" (alloc, gc, monitor, jit, stub...)
    place: Annotated[str, Field(pattern=r"^[a-z0-9]+(:[a-z0-9_-]+)?$")] = "unknown"
    scenario: Annotated[str, Field(max_length=256)] | None = None
    pid: U32 | None = None
    tid: U32 | None = None
    registers: Registers
    context: RuntimeContext | None = None
    stack: StackInfo
    modules: Annotated[tuple[ModuleEntry, ...], Field(max_length=65536)] = ()
    jit: JitMap = JitMap()
    cfi: tuple[EmbeddedCfi, ...] = ()
    live: LiveWalk | None = None
    #: the recovered-seed attempt (captures taken with ``--seed recovered``)
    live_recovery: LiveRecovery | None = None
    known_managed: tuple[KnownFrame, ...] | None = None
    #: the frames that may sit above ``known_managed`` (None: none may; the known frames start at the top)
    known_callees: KnownCallees | None = None
    segments: Annotated[tuple[SegmentEntry, ...], Field(max_length=MAX_SEGMENTS)] = ()

    @model_validator(mode="after")
    def _cross_checks(self) -> CaptureManifest:
        if self.registers.arch != self.arch.value:
            raise ValueError(f"registers: {self.registers.arch} registers in an {self.arch.value} capture")
        if self.arch is CaptureArch.X86:
            self._fits_32_bits()
        by_name: dict[str, SegmentEntry] = {}
        for seg in self.segments:
            if seg.name in by_name:
                raise ValueError(f"segments: name {seg.name!r} used twice")
            by_name[seg.name] = seg
        memory = sorted((s for s in self.segments if s.kind == "memory"), key=lambda s: s.address or 0)
        for a, b in itertools.pairwise(memory):
            assert a.address is not None and b.address is not None
            if b.address < a.address + a.size:
                raise ValueError(
                    f"segments: memory segments {a.name!r} and {b.name!r} overlap at {b.address:#x}"
                )

        def need(name: str | None, kind: str, what: str) -> SegmentEntry:
            seg = by_name.get(name or "")
            if seg is None or seg.kind != kind:
                raise ValueError(f"{what}: no {kind} segment named {name!r}")
            return seg

        stack = need(self.stack.segment, "memory", "stack.segment")
        if stack.address != self.stack.sp or stack.size != self.stack.captured_end - self.stack.sp:
            raise ValueError("stack.segment: does not cover [stack.sp, stack.captured_end)")
        if self.stack.sp != self.registers.sp:
            sp_name = "rsp" if self.arch is CaptureArch.X64 else "esp"
            raise ValueError(
                f"stack.sp: {self.stack.sp:#x} is not registers.{sp_name} {self.registers.sp:#x}"
            )
        if self.context is not None:
            blob = need(self.context.segment, "blob", "context.segment")
            layout = context_layout_for(self.arch, self.context.runtime)
            if layout is not None and self.context.size != layout.size:
                raise ValueError(
                    f"context.size: {self.context.size} is not sizeof(CONTEXT) {layout.size} of runtime "
                    f"{self.context.runtime}"
                )
            if blob.size != self.context.size:
                raise ValueError(
                    f"context.segment: holds {blob.size} bytes, context.size is {self.context.size}"
                )
        for i, cfi in enumerate(self.cfi):
            need(cfi.eh_frame, "blob", f"cfi.{i}.eh_frame")
            if (cfi.eh_frame_hdr is None) != (cfi.eh_frame_hdr_vaddr is None):
                raise ValueError(f"cfi.{i}: eh_frame_hdr and eh_frame_hdr_vaddr go together")
            if cfi.eh_frame_hdr is not None:
                need(cfi.eh_frame_hdr, "blob", f"cfi.{i}.eh_frame_hdr")
        return self

    def _fits_32_bits(self) -> None:
        """An x86 capture lives below 2**32: memory, modules, stack bounds and the JIT map."""
        top = X86_ADDRESS_END
        for i, seg in enumerate(self.segments):
            if seg.kind == "memory" and seg.address is not None and seg.address + seg.size > top:
                raise ValueError(
                    f"segments.{i} ({seg.name}): memory at {seg.address:#x}+{seg.size:#x} ends above 2**32 "
                    "in an x86 capture"
                )
        for i, m in enumerate(self.modules):
            if m.end > top:
                raise ValueError(f"modules.{i}: ends at {m.end:#x}, above 2**32 in an x86 capture")
        for name in ("captured_end", "stack_end"):
            value = getattr(self.stack, name)
            if value is not None and value > top:
                raise ValueError(f"stack.{name}: {value:#x} is above 2**32 in an x86 capture")
        for method in self.jit.methods:
            for r in method.ranges:
                if r.end > top:
                    raise ValueError(
                        f"jit: FunctionID {method.function_id:#x} has code up to {r.end:#x}, above 2**32 "
                        "in an x86 capture"
                    )


@dataclass(frozen=True)
class SegmentPayload:
    """Bytes to write as one segment (the writer fills in offsets, sizes and checksums)."""

    name: str
    kind: Literal["memory", "blob"]
    role: Literal["stack", "code", "data", "context", "eh_frame", "eh_frame_hdr", "other"]
    data: bytes
    address: int | None = None
    compress: bool = True


@dataclass(frozen=True)
class Capture:
    """A capture in memory: its manifest and every segment's bytes by name."""

    manifest: CaptureManifest
    segments: Mapping[str, bytes]
    path: str | None = field(default=None, compare=False)
    #: derived state a replay may keep for the next replay of the same capture (code map, CPU)
    cache: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def memory_ranges(self) -> list[tuple[int, bytes]]:
        """(address, bytes) of every memory segment, by address."""
        out = [
            (s.address, self.segments[s.name])
            for s in self.manifest.segments
            if s.kind == "memory" and s.address is not None
        ]
        return sorted(out, key=lambda r: r[0])

    def blob(self, name: str) -> bytes:
        return self.segments[name]

    def context_bytes(self) -> bytes | None:
        ctx = self.manifest.context
        return None if ctx is None else self.segments[ctx.segment]


def capture_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`CaptureManifest` (``profharness schema capture``)."""
    schema = CaptureManifest.model_json_schema()
    schema["$comment"] = (
        f"manifest of a {FORMAT_NAME} file, version {FORMAT_VERSION}; layout in emu/capture.py's docstring"
    )
    return schema


# --------------------------------------------------------------------------------------------------
# Writing


def write_capture(
    path: str | os.PathLike[str],
    manifest: CaptureManifest | Mapping[str, Any],
    payloads: Sequence[SegmentPayload],
) -> Path:
    """Write the manifest fields (a :class:`CaptureManifest`, or its fields but ``segments`` as a mapping,
    since a manifest cannot validate before its segments exist) with ``payloads`` to ``path`` atomically.

    The result is read back through the same validation a reader applies before it is renamed into place,
    so an invalid capture is never published."""
    target = Path(path)
    if isinstance(manifest, CaptureManifest):
        fields: dict[str, Any] = manifest.model_dump(mode="python", exclude={"segments"})
    else:
        fields = {k: v for k, v in manifest.items() if k != "segments"}
    stored: list[tuple[SegmentPayload, bytes]] = []
    for p in payloads:
        body = zlib.compress(p.data, 6) if p.compress else p.data
        stored.append((p, body))
    # the manifest's length depends on the offsets it holds: iterate until it is stable (twice at most
    # in practice, since offsets only grow by a few digits)
    manifest_bytes = b""
    for _ in range(8):
        offset = _HEADER.size + len(manifest_bytes)
        entries: list[SegmentEntry] = []
        for p, body in stored:
            entries.append(
                SegmentEntry(
                    name=p.name,
                    kind=p.kind,
                    role=p.role,
                    address=p.address,
                    size=len(p.data),
                    offset=offset,
                    stored_size=len(body),
                    compression="zlib" if p.compress else "none",
                    crc32=zlib.crc32(p.data),
                )
            )
            offset += len(body)
        try:
            full = CaptureManifest.model_validate({**fields, "segments": entries})
        except ValidationError as exc:
            raise CaptureFormatError(f"{target}: {_first_error(exc)} (not written)") from None
        candidate = full.model_dump_json().encode()
        if len(candidate) == len(manifest_bytes):
            manifest_bytes = candidate
            break
        manifest_bytes = candidate
    else:  # pragma: no cover - the lengths converge
        raise CaptureFormatError(f"{target}: manifest length did not converge (not written)")
    if len(manifest_bytes) > MAX_MANIFEST_BYTES:
        raise CaptureFormatError(f"{target}: manifest of {len(manifest_bytes)} bytes is over the limit")
    data = b"".join(
        [_HEADER.pack(MAGIC, FORMAT_VERSION, len(manifest_bytes), zlib.crc32(manifest_bytes)), manifest_bytes]
        + [body for _, body in stored]
    )
    parse_capture(data, str(target))  # never publish what a reader would reject
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


# --------------------------------------------------------------------------------------------------
# Reading


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    parts = list(err["loc"])
    if len(parts) > 1 and parts[0] == "registers" and parts[1] in {a.value for a in CaptureArch}:
        del parts[1]  # the union's tag: "registers.rip", not "registers.x64.rip"
    loc = ".".join(str(part) for part in parts) or "manifest"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg}"


def read_capture(path: str | os.PathLike[str]) -> Capture:
    """Read and validate a capture file; any problem is one :class:`CaptureFormatError` line."""
    name = str(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_TOTAL_BYTES + MAX_MANIFEST_BYTES + _HEADER.size:
            raise CaptureFormatError(f"{name}: offset 0: file of {size} bytes is over the limit")
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CaptureFormatError(f"{name}: cannot read: {exc.strerror or exc}") from None
    return parse_capture(data, name)


def parse_capture(data: bytes, name: str = "<capture>") -> Capture:
    """Validate the bytes of a capture file (see :func:`read_capture`)."""
    _magic, _version, mlen, mcrc = file_header(
        data, _HEADER, kind="capture", magic=MAGIC, version=FORMAT_VERSION, name=name,
        error=CaptureFormatError,
    )  # fmt: skip
    if mlen > MAX_MANIFEST_BYTES:
        raise CaptureFormatError(f"{name}: offset 12: manifest length {mlen} is over the limit")
    end = _HEADER.size + mlen
    if end > len(data):
        raise CaptureFormatError(
            f"{name}: offset 12: manifest length {mlen} runs past the end of the file ({len(data)} bytes)"
        )
    raw = data[_HEADER.size : end]
    if zlib.crc32(raw) != mcrc:
        raise CaptureFormatError(f"{name}: offset {_HEADER.size}: manifest checksum mismatch (corrupt)")
    try:
        json.loads(raw)  # a cheap first pass that gives a byte offset for malformed JSON
    except (ValueError, RecursionError) as exc:
        pos = getattr(exc, "pos", 0)
        raise CaptureFormatError(f"{name}: offset {_HEADER.size + pos}: manifest is not JSON") from None
    try:
        manifest = CaptureManifest.model_validate_json(raw)
    except ValidationError as exc:
        raise CaptureFormatError(f"{name}: {_first_error(exc)}") from None
    total = 0
    spans = sorted((s.offset, s.stored_size, i) for i, s in enumerate(manifest.segments))
    last_end = end
    for off, stored, i in spans:
        seg = manifest.segments[i]
        where = f"segments.{i} ({seg.name})"
        if off < last_end:
            raise CaptureFormatError(
                f"{name}: offset {off}: {where} overlaps the manifest or another segment's payload"
            )
        if off + stored > len(data):
            raise CaptureFormatError(
                f"{name}: offset {off}: {where} stored_size {stored} runs past the end of the file "
                f"({len(data)} bytes)"
            )
        last_end = off + stored
        total += seg.size
        if total > MAX_TOTAL_BYTES:
            raise CaptureFormatError(f"{name}: {where}: segments hold over {MAX_TOTAL_BYTES} bytes in all")
    segments: dict[str, bytes] = {}
    for i, seg in enumerate(manifest.segments):
        stored_bytes = data[seg.offset : seg.offset + seg.stored_size]
        if seg.compression == "none":
            body = stored_bytes
        else:
            dec = zlib.decompressobj()
            try:
                body = dec.decompress(stored_bytes, seg.size + 1)
            except zlib.error as exc:
                raise CaptureFormatError(
                    f"{name}: offset {seg.offset}: segments.{i} ({seg.name}): {exc}"
                ) from None
            if len(body) != seg.size or not dec.eof or dec.unconsumed_tail:
                raise CaptureFormatError(
                    f"{name}: offset {seg.offset}: segments.{i} ({seg.name}) does not decompress to its "
                    f"size {seg.size}"
                )
        if zlib.crc32(body) != seg.crc32:
            raise CaptureFormatError(
                f"{name}: offset {seg.offset}: segments.{i} ({seg.name}) checksum mismatch"
            )
        segments[seg.name] = body
    if manifest.context is not None:
        layout = context_layout_for(manifest.arch, manifest.context.runtime)
        if layout is not None:
            try:
                layout.validate(segments[manifest.context.segment])
            except ContextError as exc:
                raise CaptureFormatError(f"{name}: context: {exc}") from None
    return Capture(manifest=manifest, segments=segments, path=name)
