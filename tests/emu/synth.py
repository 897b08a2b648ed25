"""Small synthetic captures for tests: code, stack words and registers, written by the real writer."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from emu.capture import (
    STACK_CAPTURE_BYTES,
    CodeRange,
    JitMap,
    JitMethod,
    ModuleEntry,
    SegmentPayload,
    StackInfo,
    X64Registers,
    read_capture,
    write_capture,
)
from emu.errors import CaptureFormatError

CODE = 0x7F00_0000_0000  # an anonymous executable page (stubs, or JIT code when in the JIT map)
STACK = 0x7FFF_0000_0000  # a 16 KiB stack mapping
STACK_SIZE = 0x4000
FID = 0x1234


def manifest_fields(
    *,
    rsp: int,
    rip: int,
    stack_len: int,
    regs: dict[str, int] | None = None,
    jit: JitMap | None = None,
    extra_modules: Sequence[ModuleEntry] = (),
    place: str = "helper:stub",
    **more: Any,
) -> dict[str, Any]:
    end = STACK + STACK_SIZE
    return {
        "place": place,
        "registers": X64Registers(rsp=rsp, rip=rip, **(regs or {})),
        "stack": StackInfo(
            sp=rsp,
            captured_end=min(rsp + STACK_CAPTURE_BYTES, end),
            stack_end=end,
            truncated=rsp + STACK_CAPTURE_BYTES < end,
            segment="stack",
        ),
        "modules": (
            ModuleEntry(start=CODE, end=CODE + 0x1000, perms="r-xp", anonymous_executable=True),
            ModuleEntry(start=STACK, end=end, perms="rw-p", path="[stack]"),
            *extra_modules,
        ),
        "jit": jit or JitMap(),
        **more,
    }


def write_synthetic(
    path: Path,
    *,
    code: bytes,
    code_at: int = CODE,
    stack_words: Sequence[int],
    rsp: int | None = None,
    rip: int | None = None,
    regs: dict[str, int] | None = None,
    managed: bool = False,
    jit: JitMap | None = None,
    **more: Any,
) -> Path:
    """A capture whose stack runs from ``rsp`` (default: the top 4 KiB of the stack mapping) to the stack
    end, holding ``stack_words`` first (then zeros), and whose code page holds ``code`` at ``code_at``."""
    rsp = rsp if rsp is not None else STACK + STACK_SIZE - 0x1000
    stack = b"".join(w.to_bytes(8, "little") for w in stack_words)
    stack += bytes(STACK + STACK_SIZE - rsp - len(stack))
    jit = jit or (
        JitMap(
            methods=(
                JitMethod(function_id=FID, name="Synth.M", ranges=(CodeRange(start=CODE, end=CODE + 0x100),)),
            )
        )
        if managed
        else None
    )
    fields = manifest_fields(
        rsp=rsp, rip=rip if rip is not None else code_at, stack_len=len(stack), regs=regs, jit=jit, **more
    )
    payloads = [
        SegmentPayload(name="stack", kind="memory", role="stack", address=rsp, data=stack),
        SegmentPayload(name="code", kind="memory", role="code", address=code_at, data=code),
    ]
    return write_capture(path, fields, payloads)


def rewrite(capture: Any, path: Path, **changes: Any) -> Path:
    """Write ``capture`` again with manifest fields changed (segments kept as they are)."""
    from emu.capture import Capture

    assert isinstance(capture, Capture)
    fields = capture.manifest.model_dump(mode="python", exclude={"segments"})
    fields.update(changes)
    payloads = [
        SegmentPayload(
            name=s.name, kind=s.kind, role=s.role, address=s.address, data=capture.segments[s.name]
        )
        for s in capture.manifest.segments
    ]
    return write_capture(path, fields, payloads)


def with_code(capture: Any, path: Path, address: int, code: bytes) -> Path:
    """Write ``capture`` again with ``code`` at ``address`` in the code segment that holds it."""
    from emu.capture import Capture

    assert isinstance(capture, Capture)
    payloads = []
    for seg in capture.manifest.segments:
        data = bytearray(capture.segments[seg.name])
        at = address - seg.address if seg.role == "code" and seg.address is not None else -1
        if 0 <= at <= len(data) - len(code):
            data[at : at + len(code)] = code
        payloads.append(SegmentPayload(name=seg.name, kind=seg.kind, role=seg.role, address=seg.address,
                                       data=bytes(data)))  # fmt: skip
    fields = capture.manifest.model_dump(mode="python", exclude={"segments"})
    return write_capture(path, fields, payloads)


def expect_error(tmp_path: Path, data: bytes, pattern: str) -> str:
    """Reading ``data`` as a capture fails with one line naming the file and matching ``pattern``, in
    bounded time."""
    path = tmp_path / "bad.phcap"
    path.write_bytes(data)
    t0 = time.monotonic()
    with pytest.raises(CaptureFormatError) as info:
        read_capture(path)
    assert time.monotonic() - t0 < 2.0
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert re.search(pattern, message), message
    return message
