"""Containment (issue 13): the paths in the files the harness reads cannot make it write or load files out
of the run's folder. Each such path is refused with one :class:`HarnessError` line naming the file and the
field.

- A fuzz reproducer (``conformance.fuzz.machine.load_reproducer``) is replayed in a fresh work directory:
  its commands may not hold the fake runtime protocol's own ops (``start`` names the file the child
  truncates and writes), and an ``env`` value that names a path must lie under ``{workdir}`` with no
  ``..`` part. Its ``profiler`` (the library under test, which the user may override on the command line)
  may not hold a ``..`` part.
- A plan (``conformance.core.plans``) holds no paths: a string spelling one out of the run's folder
  (absolute, ``~``, a ``..`` part) is refused wherever it is.
- A capture (``emu.capture``) names files of the captured process (modules, ReadyToRun images, embedded
  CFI), which a replay with disk access opens: they are absolute and normal, as /proc/PID/maps spells
  them; a relative path, a ``..``, ``.`` or empty part, or a control character is refused.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli_main
from conformance.core.errors import HarnessError
from conformance.core.scenarios import _read_plan
from conformance.fuzz.machine import load_reproducer
from emu.capture import read_capture
from tests.robustness.conftest import OUTCOMES
from tests.robustness.inputs import DATA, SAMPLES

REPRODUCER = SAMPLES / "buf08-no-retry.reproducer.json"
PLAN = Path(__file__).resolve().parents[2] / "conformance" / "scenarios" / "stack-walks" / "plan.json"
CAPTURE = DATA / "captures" / "live" / "8.0.4" / "helper-gc.phcap"


def _one_line(exc: pytest.ExceptionInfo[HarnessError], path: Path, field: str) -> str:
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: {field}"), message
    return message


# --------------------------------------------------------------------------------------------------
# Reproducers


def _reproducer(tmp_path: Path, **changes: Any) -> Path:
    data = json.loads(REPRODUCER.read_text())
    data.update(changes)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "value",
    ["/tmp/elsewhere.jsonl", "~/trace.jsonl", "./trace.jsonl", "../trace.jsonl", "{workdir}/../trace.jsonl",
     "{workdir}/a/../../trace.jsonl", "{workdir}x/trace.jsonl"],
)  # fmt: skip
def test_a_reproducer_env_path_out_of_the_work_directory_is_refused(tmp_path: Path, value: str) -> None:
    path = _reproducer(tmp_path, env={"PROFHARNESS_TRACE": value})
    with pytest.raises(HarnessError) as exc:
        load_reproducer(path)
    assert "outside the replay's work directory" in _one_line(exc, path, "env['PROFHARNESS_TRACE']")
    OUTCOMES[("containment", "reproducer env paths out of {workdir}: refused")] += 1


def test_a_reproducer_env_path_inside_the_work_directory_and_other_values_are_read(tmp_path: Path) -> None:
    env = {"PROFHARNESS_TRACE": "{workdir}/probe-trace.jsonl", "PROFHARNESS_PLAN": '{"version": 1}', "X": "1"}
    assert load_reproducer(_reproducer(tmp_path, env=env))["env"] == env


@pytest.mark.parametrize("op", ["start", "end", "sync", "quit", "ready"])
def test_a_reproducer_command_of_the_harness_protocol_is_refused(tmp_path: Path, op: str) -> None:
    """``{"op": "start", "trace": PATH}`` would make the fake runtime truncate PATH: refused before any child
    starts, and the file is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    commands = [{"op": "event", "thread": 0, "name": "ThreadCreated", "args": {}},
                {"op": op, "trace": str(victim)}]  # fmt: skip
    path = _reproducer(tmp_path, commands=commands)
    with pytest.raises(HarnessError) as exc:
        load_reproducer(path)
    _one_line(exc, path, "commands[1]")
    assert cli_main(["fuzz", "--replay", str(path)]) == 2
    assert victim.read_text() == "keep me\n"
    OUTCOMES[("containment", "reproducer commands of the harness protocol: refused")] += 1


def test_a_reproducer_command_with_a_trace_field_is_refused(tmp_path: Path) -> None:
    path = _reproducer(tmp_path, commands=[{"op": "event", "trace": "/tmp/x"}])
    with pytest.raises(HarnessError) as exc:
        load_reproducer(path)
    _one_line(exc, path, "commands[0]")


@pytest.mark.parametrize("profiler", ["../lib.so", "/opt/x/../../etc/lib.so", "", "lib\0.so"])
def test_a_reproducer_profiler_with_a_dotdot_part_or_no_name_is_refused(
    tmp_path: Path, profiler: str
) -> None:
    path = _reproducer(tmp_path, profiler=profiler)
    with pytest.raises(HarnessError) as exc:
        load_reproducer(path)
    _one_line(exc, path, "profiler")


def test_the_real_reproducer_replays_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sample, pointed at the fixture profiler it was found with, replays to its finding (exit 1)."""
    from tests.conformance.fuzz.fixtures import build

    path = _reproducer(tmp_path, profiler=str(build("no_retry")))
    assert cli_main(["fuzz", "--replay", str(path)]) == 1
    assert "BUF-08" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# Plans


@pytest.mark.parametrize(
    ("where", "value"),
    [(("experiments", 0, "args", "module"), "/usr/lib/libc.so.6"),
     (("experiments", 0, "args", "out"), "../../report.json"),
     (("experiments", 1, "id"), "~/walk"),
     (("trace",), "/tmp/trace.jsonl")],
)  # fmt: skip
def test_a_plan_value_that_is_a_path_out_of_the_run_folder_is_refused(
    tmp_path: Path, where: tuple[Any, ...], value: str
) -> None:
    plan = json.loads(PLAN.read_text())
    node = plan
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    label = ".".join(str(p) for p in where).replace(".0", "[0]").replace(".1", "[1]")
    with pytest.raises(HarnessError) as exc:
        _read_plan(path)
    assert "a path out of the run's folder" in _one_line(exc, path, label)
    OUTCOMES[("containment", "plan values that are paths out of the run folder: refused")] += 1


# --------------------------------------------------------------------------------------------------
# Captures


def _reframed(manifest: dict[str, Any], raw: bytes) -> bytes:
    """A capture with ``manifest`` in place of its own (same segments, a valid length and checksum)."""
    header = struct.Struct("<8sIII")
    magic, version, mlen, _crc = header.unpack_from(raw, 0)
    text = json.dumps(manifest, separators=(",", ":")).encode()
    assert len(text) <= mlen, "the edit must not grow the manifest past its segments"
    text += b" " * (mlen - len(text))
    framed: bytes = header.pack(magic, version, mlen, zlib.crc32(text))
    return bytes(framed + text + raw[header.size + mlen :])


def _module_index(manifest: dict[str, Any]) -> int:
    return next(i for i, m in enumerate(manifest["modules"]) if (m.get("path") or "").endswith(".so"))


@pytest.mark.parametrize(
    "bad",
    ["libcoreclr.so", "/usr/lib/../lib/libc.so", "/usr/./lib/libc.so", "/usr//lib/libc.so",
     "/usr/lib/libc.so\n", "anon"],
)  # fmt: skip
def test_a_capture_module_path_that_is_not_absolute_and_normal_is_refused(tmp_path: Path, bad: str) -> None:
    raw = CAPTURE.read_bytes()
    header = struct.Struct("<8sIII")
    mlen = header.unpack_from(raw, 0)[2]
    manifest = json.loads(raw[header.size : header.size + mlen])
    i = _module_index(manifest)
    manifest["modules"][i]["path"] = bad
    path = tmp_path / "bad.phcap"
    path.write_bytes(_reframed(manifest, raw))
    with pytest.raises(HarnessError) as exc:
        read_capture(path)
    _one_line(exc, path, f"modules.{i}.path")
    OUTCOMES[("containment", "capture module paths not absolute and normal: refused")] += 1


def test_capture_pseudo_names_and_real_paths_are_read(tmp_path: Path) -> None:
    from emu.capture import SegmentPayload, write_capture

    cap = read_capture(CAPTURE)
    fields = cap.manifest.model_dump(mode="python", exclude={"segments"})
    i = next(k for k, m in enumerate(fields["modules"]) if m["path"] is None and "x" not in m["perms"])
    fields["modules"][i]["path"] = "anon_inode:[perf_event]"
    payloads = [SegmentPayload(name=s.name, kind=s.kind, role=s.role, data=cap.segments[s.name],
                               address=s.address) for s in cap.manifest.segments]  # fmt: skip
    path = write_capture(tmp_path / "ok.phcap", fields, payloads)
    again = read_capture(path)
    module = again.manifest.modules[i]
    assert module.path == "anon_inode:[perf_event]" and not module.is_file
    assert all(m.path is None or m.path.startswith(("/", "[")) for m in cap.manifest.modules)
