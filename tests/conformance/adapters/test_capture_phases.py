"""The scenario's phases, the red zone and the JIT map's prologues and ReadyToRun methods, from the trace to
the capture (issue 8)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.adapters.capture import write_captures
from conformance.core.errors import HarnessError
from conformance.core.trace import Trace, read_trace
from emu.capture import read_capture
from tests.conformance.adapters.test_capture import IP, JIT, SP, sample, write_trace

PHASES = [
    {"phase": 0, "place": "managed", "callees": ["App.C::Busy"], "calleePrefixes": []},
    {"phase": 1, "place": "helper:write-barrier", "callees": ["App.C::Store"],
     "calleePrefixes": ["System.Runtime.CompilerServices.CastHelpers::"]},
]  # fmt: skip


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def with_changes(trace: Trace, path: Path, *, phases: Any = PHASES, r2r: bool = True) -> Trace:
    """``trace`` written again with the scenario's phases in its capture.stack mark, prologues on the JIT
    map's ranges and one ReadyToRun method."""
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "mark" and rec.get("name") == "capture.stack":
            payload = json.loads(rec["payload"])
            payload["phases"] = phases
            rec["payload"] = json.dumps(payload)
        if rec.get("name") == "capture_jit_map":
            for m in rec["out"]["methods"]:
                for v in m["versions"]:
                    for r in v["ranges"]:
                        r["prologue"] = b64(b"\x55\x48\x8b\xec" + bytes(12))
            if r2r:
                rec["out"]["methods"].append(
                    {"functionId": 0x3333, "reJitId": 0, "name": "System.GC::Collect", "tier": "r2r",
                     "versions": [{"start": JIT + 0xC00, "ranges": [{"start": JIT + 0xC00, "size": 0x40}]}]}
                )  # fmt: skip
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return read_trace(path, strict=True)


def phased(index: int, phase: int | None, where: dict[str, Any]) -> dict[str, Any]:
    rec = sample(index)
    rec["out"]["where"] = where
    if phase is not None:
        rec["out"]["phase"] = phase
    rec["out"]["stack"]["redZone"] = b64(b"\x77" * 128)
    # a return address inside Run's second code version, whose first bytes no window holds
    rec["out"]["candidateCode"].append({"address": JIT + 0x810, "bytes": b64(b"\xdd" * 8)})
    return rec


def test_the_phase_names_the_helper_kind_and_its_callees(tmp_path: Path) -> None:
    stub = {"kind": "anonymous-executable", "module": None}
    managed = {"kind": "managed", "functionId": 0x1111, "module": None}
    path = tmp_path / "trace.jsonl"
    trace = with_changes(
        write_trace(path, [phased(0, 1, stub), phased(1, 1, managed), phased(2, None, stub)]), path
    )
    caps = [read_capture(p).manifest for p in write_captures(trace, tmp_path / "out", runtime="8.0.4").paths]
    # the scenario's own account names the helper kind; managed code stays managed whatever the phase;
    # a sample with no phase falls back to where the IP is
    assert [c.place for c in caps] == ["helper:write-barrier", "managed", "helper:stub"]
    callees = caps[0].known_callees
    assert callees is not None and callees.phase == "helper:write-barrier"
    assert callees.names == ("App.C::Store",)
    assert callees.allows("System.Runtime.CompilerServices.CastHelpers::StelemRef")
    assert caps[2].known_callees is None


def test_red_zone_prologues_and_ready_to_run_methods_reach_the_capture(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = with_changes(write_trace(path, [phased(0, 0, {"kind": "managed"})]), path)
    cap = read_capture(write_captures(trace, tmp_path / "out", runtime="8.0.4").paths[0])
    m = cap.manifest
    red = [s for s in m.segments if s.name == "red-zone"]
    assert [(s.address, s.role, cap.segments[s.name]) for s in red] == [(SP - 128, "stack", b"\x77" * 128)]
    # the first bytes of a method a code window falls in are carried (Run's second version, where a return
    # address points); those of a method no window touches are not (GC::Collect at JIT + 0xC00); where the
    # instant's window holds a method's start (Work at JIT), its bytes win
    code = {s.address: cap.segments[s.name] for s in m.segments if s.role == "code"}
    assert code[JIT + 0x800][:4] == b"\x55\x48\x8b\xec"
    assert not any(a <= JIT + 0xC00 < a + len(b) for a, b in code.items())
    assert code[IP - 0x40][:0x40] == b"\xaa" * 0x40
    tiers = {j.function_id: {r.tier for r in j.ranges} for j in m.jit.methods}
    assert tiers[0x3333] == {"r2r"} and tiers[0x1111] == {"jit"}


def test_a_phase_the_scenario_never_declared_is_an_error_naming_the_record(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = with_changes(write_trace(path, [phased(0, 7, {"kind": "managed"})]), path)
    with pytest.raises(HarnessError, match=r"trace.jsonl: seq \d+: phase 7 is not one the scenario declares"):
        write_captures(trace, tmp_path / "out", runtime="8.0.4")


BAD_PHASES = [
    {"phase": 0},  # not a list
    [{"phase": "x", "place": "managed"}],  # not an integer phase
    [{"phase": 0, "place": "m", "callees": [3]}],  # a callee that is no name
]


@pytest.mark.parametrize("phases", BAD_PHASES)
def test_malformed_phases_are_one_line_naming_the_mark(tmp_path: Path, phases: Any) -> None:
    path = tmp_path / "trace.jsonl"
    trace = with_changes(write_trace(path, [phased(0, 0, {"kind": "managed"})]), path, phases=phases)
    with pytest.raises(HarnessError, match=r"mark capture.stack payload.phases"):
        write_captures(trace, tmp_path / "out", runtime="8.0.4")
