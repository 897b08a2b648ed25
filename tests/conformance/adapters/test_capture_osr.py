"""The capture's JIT map labels an OSR code version ``tier="osr"`` (issue 24) from the first bytes the probe
recorded for the range when it wrote the map (the OSR entry reads the Tier0 frame's saved RBP); a method's
only version is never labelled so, whatever its bytes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from conformance.adapters.capture import write_captures
from conformance.core.trace import read_trace
from emu.capture import read_capture
from tests.conformance.adapters.test_capture import JIT, sample, write_trace

OSR_HEAD = bytes.fromhex("488b4500504883ec70488d6c2470")  # mov rax,[rbp]; push rax; sub rsp,0x70; lea rbp,...
PLAIN_HEAD = bytes.fromhex("554889e54883ec20")  # push rbp; mov rbp,rsp; sub rsp,0x20


def _range(start: int, size: int, head: bytes) -> dict[str, object]:
    return {"start": start, "size": size, "prologue": base64.b64encode(head).decode()}


def test_an_osr_version_is_labelled_osr_in_the_jit_map(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write_trace(path, [sample(0)])
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in records:
        if rec.get("name") == "capture_jit_map":
            rec["out"]["methods"] = [
                # Work: its Tier0 version and the OSR version the patchpoint entered
                {"functionId": 0x1111, "reJitId": 0, "name": "App.C::Work", "versions": [
                    {"start": JIT, "ranges": [_range(JIT, 0x100, PLAIN_HEAD)]},
                    {"start": JIT + 0x800, "ranges": [_range(JIT + 0x800, 0x80, OSR_HEAD)]}]},
                # Run: one version whose bytes begin like an OSR entry: no other version, so not OSR
                {"functionId": 0x2222, "reJitId": 0, "name": "App.C::Run", "versions": [
                    {"start": JIT + 0x400, "ranges": [_range(JIT + 0x400, 0x80, OSR_HEAD)]}]},
            ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    written = write_captures(read_trace(path, strict=True), tmp_path / "out", runtime="8.0.4",
                             scenario="capture-sampling")  # fmt: skip
    jit = read_capture(written.paths[0]).manifest.jit
    tiers = {m.name: [(r.start, r.tier) for r in m.ranges] for m in jit.methods}
    assert tiers == {
        "App.C::Work": [(JIT, "version0"), (JIT + 0x800, "osr")],
        "App.C::Run": [(JIT + 0x400, "jit")],
    }
