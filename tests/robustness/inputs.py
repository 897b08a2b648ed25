"""The files profharness reads, one row each: a real sample of it, how the harness reads it, and what a
rejection must name (issue 13: one typed error naming the file and the offset, line or field).

The mutators turn a real file into bad input the way files go bad: cut short (a crash mid-write, a full
disk), a flipped byte (a bad disk, a hand edit), bytes inserted or deleted, a line repeated or dropped, a
number blown up (sizes past the file, addresses near 2**64), and for JSON a value of the wrong type
anywhere in the structure. ``generated_json`` builds whole documents from nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from conformance.core.runner import RunOutcome, RunResult
from conformance.core.scenarios import _read_plan
from conformance.core.trace import read_trace
from conformance.fuzz.machine import load_reproducer
from conformance.suite.expectations import load_file
from conformance.validator.recording import read_recording
from conformance.validator.rules import check_recording
from emu.capture import read_capture
from emu.replay import replay

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
#: real files of the kinds tests/data has no sample of: a recording proxy's trace (``profharness validate``
#: of the project's probe, validate-basic on 8.0.4) and a fuzz reproducer (``profharness fuzz`` of the
#: no_retry fixture profiler, seed 3, --world documented: BUF-08)
SAMPLES = Path(__file__).resolve().parent / "samples"


def _trace(path: Path) -> object:
    trace = read_trace(path)  # tolerant: keeps what precedes the first bad record
    read_trace(path, strict=True)  # strict: the problem is an error
    return trace


def _capture(path: Path) -> object:
    capture = read_capture(path)
    # a capture that reads must also replay in bounded time (a hostile one: cycles, addresses near 2**64)
    return replay(capture, allow_disk=False, max_frames=256)


def _expectations(path: Path) -> object:
    return load_file(path)


def _plan(path: Path) -> object:
    return _read_plan(path)


def _reproducer(path: Path) -> object:
    return load_reproducer(path)


def _recording(path: Path) -> object:
    """What ``profharness validate`` does with a proxy trace: read it (tolerantly), turn it into a
    :class:`Recording`, and run every rule over it."""
    recording = read_recording(read_trace(path))
    run = RunResult(scenario="validate-basic", runtime="8.0.4", runtime_source="sample",
                    outcome=RunOutcome.OK, seconds=0.0, run_dir=path.parent, trace_path=path)  # fmt: skip
    return check_recording(recording, run)


@dataclass(frozen=True)
class Reader:
    """One kind of file: a real sample, the harness's reader, and what its errors must name."""

    name: str
    sample: Path
    read: Callable[[Path], object]
    #: a rejection must match this (after the file's own path): line, offset or field
    where: re.Pattern[str]


READERS: tuple[Reader, ...] = (
    Reader("trace", DATA / "traces" / "buffers-basic-8.0.4.jsonl", _trace, re.compile(r"^:\d+: ")),
    Reader(
        "capture",
        DATA / "captures" / "live" / "8.0.4" / "helper-gc.phcap",
        _capture,
        re.compile(r"^: (offset \d+|[A-Za-z_][\w.\[\]]*|segment \S+|manifest)[:, ]"),
    ),
    Reader(
        "expectations",
        ROOT / "conformance" / "expectations" / "8.0.4.toml",
        _expectations,
        re.compile(r"^:\d+[:,]? |^: (line \d+|\[[A-Z0-9-]+\])"),
    ),
    Reader(
        "plan",
        ROOT / "conformance" / "scenarios" / "stack-walks" / "plan.json",
        _plan,
        re.compile(r"^:\d+(:\d+)?: |^: \S+"),
    ),
    Reader(
        "reproducer",
        SAMPLES / "buf08-no-retry.reproducer.json",
        _reproducer,
        re.compile(r"^:\d+(:\d+)?: |^: (format|profiler|clsid|program|commands(\[\d+\])?|env(\[.*\])?): "),
    ),
    Reader(
        "recording",
        SAMPLES / "validate-basic-8.0.4.proxy.jsonl",
        _recording,
        re.compile(r"^:\d+: |^: seq \d+: "),
    ),
)

# --------------------------------------------------------------------------------------------------
# Mutators

#: numbers that break sizes, offsets and addresses: zero, negative, 2**64 - 1, 2**64, huge, 2**32, a float
_BIG_NUMBERS = (b"0", b"-1", b"18446744073709551615", b"18446744073709551616", b"99999999999999999999999",
                b"4294967296", b"1e308")  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` gone bad in one to three ways (see the module docstring)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("truncate", "flip", "insert", "delete", "line", "number")))
        if not out:
            out += draw(st.binary(min_size=1, max_size=8))
            continue
        at = draw(st.integers(0, len(out) - 1))
        match kind:
            case "truncate":
                del out[at:]
            case "flip":
                out[at] ^= 1 << draw(st.integers(0, 7))
            case "insert":
                out[at:at] = draw(st.binary(min_size=1, max_size=16))
            case "delete":
                del out[at : at + draw(st.integers(1, 64))]
            case "line":
                lines = bytes(out).split(b"\n")
                k = draw(st.integers(0, len(lines) - 1))
                if draw(st.booleans()):
                    lines.insert(k, lines[k])
                else:
                    del lines[k]
                out = bytearray(b"\n".join(lines))
            case "number":
                digits = [m.span() for m in re.finditer(rb"\d+", bytes(out))]
                if digits:
                    lo, hi = draw(st.sampled_from(digits))
                    big = draw(st.sampled_from(_BIG_NUMBERS))
                    out[lo:hi] = big
    return bytes(out)


_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def json_replaced(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with the value at one path (drawn from the document's own structure) replaced."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if len(paths) > 2000:
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(doc, ())
    path = draw(st.sampled_from(paths))
    value = draw(JSON_VALUES)
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    node = copy
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return copy
