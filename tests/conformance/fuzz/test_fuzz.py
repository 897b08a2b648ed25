"""Issue 11: the fake runtime and the fuzzer, against fixture profilers with planted bugs.

Fast by design (CI): bugs are looked for with fixed seeds and shrunk; the clean runs take 40 examples (the
probe 20), and the acceptance's 2,000 with ``--long`` (the nightly profile), or as many as
``PROFHARNESS_FUZZ_EXAMPLES`` says.
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main as cli_main
from conformance.core.errors import HarnessError
from conformance.core.runner import RunOutcome
from conformance.core.trace import read_trace
from conformance.fuzz.child import FakeRuntime
from conformance.fuzz.judge import judge
from conformance.fuzz.machine import (
    REPRODUCER_FORMAT,
    YOUNG_THRESHOLD,
    collector_for_fuzzing,
    fuzz,
    load_reproducer,
    replay,
)
from conformance.fuzz.probe import FUZZ_PLAN, probe_target
from conformance.fuzz.program import END_BELOW, decode
from conformance.fuzz.world import World
from conformance.validator.recording import read_recording
from tests.conformance.fuzz.fixtures import CLSID, build

#: The acceptance's clean run (issue 11): 2,000 examples.
LONG_EXAMPLES = 2000


def clean_examples(long_profile: bool, short: int) -> int:
    if "PROFHARNESS_FUZZ_EXAMPLES" in os.environ:
        return int(os.environ["PROFHARNESS_FUZZ_EXAMPLES"])
    return LONG_EXAMPLES if long_profile else short


def reproducer_events(path: Path) -> list[str]:
    return [c["name"] for c in json.loads(path.read_text())["commands"] if c["op"] == "event"]


def test_fake_runtime_delivers_initialize_and_shutdown_and_records_them(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with FakeRuntime(build("noop"), CLSID) as runtime:
        outcome = runtime.run_example(trace, [])
        assert outcome.outcome is RunOutcome.OK and outcome.callback_level == 11
        rec = read_recording(read_trace(trace, strict=True))
    names = [(getattr(e, "name", None), getattr(e, "phase", None)) for e in rec.events]
    assert names[0] == ("Initialize", "enter") and names[-1] == ("Shutdown", "return")
    assert ("SetEventMask2", "whole") in names
    assert rec.callback_level == 11


def test_an_example_line_by_line_records_what_the_same_example_in_one_line_does(tmp_path: Path) -> None:
    """The child's protocol takes a command per line or a whole example as one JSON array (what
    :class:`FakeRuntime` sends): the same commands give the same records either way (OS thread ids and the
    pid aside), and the two replies come in the same order."""
    world = World(world="documented")  # a name that grows: only a document's (names.grow)
    tid = world.create_thread()
    other = world.create_thread()
    cls = world.load_class(tid, world.load_module(tid, ["a.dll", "a-longer-name.dll"]), ["C"])
    world.allocate(other, cls, [24, 32, 40])
    world.gc(tid, [1, 0, 0, 0, 0])
    lines = [{"op": "start", "trace": str(tmp_path / "lines.jsonl")}, *world.commands, {"op": "end"}]
    with FakeRuntime(build("noop"), CLSID) as runtime:  # no calls: no stack addresses in the records
        assert runtime.run_example(tmp_path / "array.jsonl", world.commands).outcome is RunOutcome.OK
        proc = subprocess.run([str(runtime.executable), str(runtime.profiler), CLSID], check=True, timeout=30,
                              input="".join(json.dumps(c) + "\n" for c in [*lines, {"op": "quit"}]),
                              capture_output=True, text=True)
    assert [json.loads(r)["op"] for r in proc.stdout.splitlines()] == ["ready", "started", "ended"]

    def records(path: Path) -> list[dict[str, object]]:
        out = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            record.pop("os_tid"), record.pop("pid", None)
            record.pop("caller", None)  # a return address into the profiler: where the process mapped it
            record.get("args", {}).pop("osThreadId", None)
            record.get("args", {}).pop("pICorProfilerInfoUnk", None)
            out.append(record)
        return out

    got = records(tmp_path / "lines.jsonl")
    assert len(got) > world.events and got == records(tmp_path / "array.jsonl")


def test_a_name_growing_between_the_passes_is_BUF_08_for_a_client_without_retry(tmp_path: Path) -> None:
    world = World(world="documented")  # a name that grows: only a document's (names.grow)
    world.load_module(world.create_thread(), ["a.dll", "a-longer-name.dll"])
    trace = tmp_path / "trace.jsonl"
    for name, expected in (("no_retry", {"BUF-08"}), ("correct", set())):
        with FakeRuntime(build(name), CLSID) as runtime:
            outcome = runtime.run_example(trace, world.commands)
        assert {f.clause for f in judge(trace, outcome, world.commands)} == expected, name


def test_MR2_17_off_by_one_remapping_is_found_shrunk_and_replayed(tmp_path: Path) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(build("mr2_off_by_one"), CLSID, max_examples=500, seed=1, reproducer=out)
    assert report.first_failure is not None and report.first_failure <= 500
    assert {f.clause for f in report.findings} == {"MR2-17"}
    events = reproducer_events(out)
    # near-minimal: a thread, a module, a class, two adjacent objects (ObjectAllocated, or an exception's
    # thrown object), one compacting GC: 17 events at the least (a range holds contiguous objects only, issue
    # 22: the shrinker keeps a few more allocations than two)
    assert events.count("GarbageCollectionStarted") == 1 and events.count("MovedReferences2") == 1
    assert events.count("ThreadCreated") == 1 and events.count("ModuleLoadStarted") == 1
    assert 17 <= len(events) <= 24, events
    assert {(f.clause, f.callback) for f in replay(out)} == {(f.clause, f.callback) for f in report.findings}


def test_BUF_08_no_retry_is_found_shrunk_to_one_module_load_and_replayed(tmp_path: Path) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(build("no_retry"), CLSID, max_examples=500, seed=3, reproducer=out, world="documented")
    assert report.first_failure is not None and report.first_failure <= 500
    assert [f.clause for f in report.findings] == ["BUF-08"]
    # minimal: the thread it happens on and the one module load whose name grows (nothing else)
    assert reproducer_events(out) == ["ThreadCreated", "ThreadAssignedToOSThread", "ModuleLoadStarted",
                                      "ModuleLoadFinished", "ModuleAttachedToAssembly"]
    assert [(f.clause, f.callback) for f in replay(out)] == [("BUF-08", "ModuleLoadFinished")]


def test_crash_on_a_rare_stack_shape_is_a_VAL_CRASH_finding_shrunk_and_replayed(tmp_path: Path) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(build("rare_stack_crash"), CLSID, max_examples=500, seed=2, reproducer=out)
    assert report.first_failure is not None and report.first_failure <= 500
    assert [(f.clause, f.callback) for f in report.findings] == [("VAL-CRASH", "ExceptionThrown")]
    # minimal: a thread, a module, a class, a JIT-compiled method (an exception needs a managed frame to
    # catch it, issue 22), the exception (its object's ObjectAllocated, ExceptionThrown, the search and catch
    # in the leaf frame)
    events = reproducer_events(out)
    assert len(events) == 16 and events[9:11] == ["ObjectAllocated", "ExceptionThrown"], events
    assert {"ThreadCreated", "ModuleLoadFinished", "ClassLoadFinished", "JITCompilationFinished"} <= {*events}
    assert events[-3:] == ["ExceptionSearchCatcherFound", "ExceptionCatcherEnter", "ExceptionCatcherLeave"]
    stacks = [c["frames"] for c in json.loads(out.read_text())["commands"] if c["op"] == "stack"]
    assert len(stacks[-1]) == 7 and stacks[-1][3][0] == 0  # the planted shape: 7 frames, native 4th
    assert [(f.clause, f.callback) for f in replay(out)] == [("VAL-CRASH", "ExceptionThrown")]


def test_the_stateful_engine_finds_BUF_08_too(tmp_path: Path) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(build("no_retry"), CLSID, max_examples=100, seed=3, reproducer=out, engine="stateful",
                  world="documented",
                  shrink=False)  # its shrinking (hypothesis' state machine) takes seconds: not in CI
    assert {f.clause for f in report.findings} == {"BUF-08"} and report.first_failure is not None
    assert "ModuleLoadFinished" in reproducer_events(out)
    assert {f.clause for f in replay(out)} == {"BUF-08"}


def test_a_hanging_profiler_is_a_VAL_HANG_finding_not_a_stuck_harness(tmp_path: Path) -> None:
    out = tmp_path / "repro.json"
    report = fuzz(build("hang_in_gc"), CLSID, max_examples=50, seed=1, reproducer=out, hang_s=0.3,
                  shrink=False)
    assert [(f.clause, f.callback) for f in report.findings] == [("VAL-HANG", "GarbageCollectionStarted")]
    assert report.restarts >= 1
    assert [f.clause for f in replay(out, hang_s=0.3)] == ["VAL-HANG"]


@pytest.mark.parametrize("name", ["correct", "noop", "metadata_walker"])
def test_correct_fixtures_fuzz_clean(name: str, long_profile: bool) -> None:
    examples = clean_examples(long_profile, 40)
    report = fuzz(build(name), CLSID, max_examples=examples, seed=7)
    assert report.findings == [] and report.examples >= examples
    assert report.restarts == 0  # one child for every example


def test_the_harness_probe_fuzzes_clean_in_one_reused_process(long_profile: bool) -> None:
    target = probe_target()
    assert not target.fresh
    examples = clean_examples(long_profile, 20)
    report = fuzz(target.profiler, target.clsid, max_examples=examples, seed=11, env=target.env,
                  fresh=target.fresh)
    assert report.findings == [] and report.examples >= examples and report.restarts == 0


def test_the_probe_walks_once_per_planned_walk_in_every_example_of_a_reused_process(tmp_path: Path) -> None:
    """The probe's plan starts from scratch at every Initialize (plan.cpp, load_plan): each example of a
    reused fake runtime walks once per exception per walk the plan asks for (before: once more each time)."""
    target = probe_target()
    planned = [e["id"] for e in FUZZ_PLAN["experiments"] if e["at"] == "ExceptionThrown"]
    world = World()
    tid = world.create_thread()
    cls = world.load_class(tid, world.load_module(tid, ["m.dll"]), ["C"])
    world.jit(tid, cls, ["M"], 64)
    world.exception(tid, world.frames_for([0, None, 0], [1, 2, 3]), 0, cls)
    probe_trace = tmp_path / "probe-trace.jsonl"
    walks: list[list[str]] = []
    with FakeRuntime(target.profiler, target.clsid, env=target.env, workdir=tmp_path) as runtime:
        for _ in range(4):
            outcome = runtime.run_example(tmp_path / "trace.jsonl", world.commands)
            assert outcome.outcome is RunOutcome.OK
            walks.append(sorted(c.experiment or "" for c in read_trace(probe_trace).calls("DoStackSnapshot")))
        assert runtime.restarts == 0
    assert walks == [sorted(planned)] * 4


def test_fuzzing_sets_the_garbage_collector_for_it_and_back_after() -> None:
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0 and thresholds[0] < YOUNG_THRESHOLD
    with collector_for_fuzzing():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *thresholds[1:])
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    gc.freeze()  # a caller's own freeze is the caller's: left as it is
    try:
        frozen = gc.get_freeze_count()
        with collector_for_fuzzing():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_cli_finds_BUF_08_and_replays_its_reproducer(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "repro.json"
    lib = str(build("no_retry"))
    assert cli_main(["fuzz", lib, "--clsid", CLSID, "--max-examples", "200", "--seed", "3",
                     "--reproducer", str(out), "--no-shrink", "--world", "documented"]) == 1
    printed = capsys.readouterr().out
    assert "BUF-08" in printed and "first failing example: #2; reproducer" in printed
    assert cli_main(["fuzz", "--replay", str(out)]) == 1
    assert "BUF-08" in capsys.readouterr().out


def test_cli_replay_of_a_file_that_is_no_reproducer_is_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    for text, what in (("{}", "not a reproducer"),
                       ('{"format": "profharness-fuzz-reproducer 1", "profiler": "p", "clsid": "c", '
                        '"commands": [1]}', "commands[0]")):
        bad.write_text(text)
        assert cli_main(["fuzz", "--replay", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and what in err


def test_cli_env_that_is_not_name_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["fuzz", str(build("noop")), "--clsid", CLSID, "--env", "NOEQUALS"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NAME=VALUE" in err


def _program_reproducer(path: Path, program: bytes | None, commands: list[dict[str, Any]]) -> Path:
    data = {"format": REPRODUCER_FORMAT, "profiler": "/p/lib.so", "clsid": CLSID, "env": {}, "findings": [],
            "program": program.hex() if program is not None else None, "commands": commands}  # fmt: skip
    path.write_text(json.dumps(data))
    return path


#: thread_created; load_module (thread 0, a one-letter name); thread_created
THREE_STEPS = bytes([END_BELOW, END_BELOW + 1, 0, 0, 0, 0, END_BELOW])


def test_a_reproducers_commands_are_its_programs_first_steps(tmp_path: Path) -> None:
    """What the fuzzer writes: the commands of the program's steps up to the step limit it ran with (which
    the reproducer does not keep: any number of steps follows from the program). A null program (the
    stateful engine's) leaves the commands as they are."""
    assert decode(THREE_STEPS, 30).steps == ["thread_created", "load_module", "thread_created"]
    for k in range(4):
        commands = decode(THREE_STEPS, k).world.commands
        path = _program_reproducer(tmp_path / f"{k}.json", THREE_STEPS, commands)
        assert load_reproducer(path)["commands"] == json.loads(json.dumps(commands))
    edited = [{"op": "event", "thread": 0, "name": "ThreadCreated", "args": {}}]
    assert load_reproducer(_program_reproducer(tmp_path / "null.json", None, edited))["commands"] == edited


def test_a_reproducer_whose_commands_do_not_follow_from_its_program_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Edited commands, commands cut inside a step, another example's program: one line naming the first
    command that differs (or the commands field), before any child starts."""
    commands = json.loads(json.dumps(decode(THREE_STEPS, 30).world.commands))
    renamed = json.loads(json.dumps(commands))
    k = next(i for i, c in enumerate(renamed) if c["op"] == "module")
    renamed[k]["names"] = ["b"]
    other = bytes([END_BELOW, END_BELOW, END_BELOW + 1, 0, 0, 0, 0])  # two threads, then load_module
    follow = r"does not follow from the reproducer's program, whose steps give"
    redo = r"\(edited, or another example's: set program to null to play edited commands\)$"
    cases = [
        (THREE_STEPS, renamed, rf"commands\[{k}\]: {follow} 'module' there {redo}"),
        (THREE_STEPS, commands[:-2], r"commands: 8 commands do not follow from the reproducer's program, "
                                     rf"whose steps end after 3, 7, 10 commands {redo}"),
        (other, commands, rf"commands\[3\]: {follow} 'thread' there"),
    ]  # fmt: skip
    for program, given, pattern in cases:
        path = _program_reproducer(tmp_path / "r.json", program, given)
        with pytest.raises(HarnessError, match=rf"^{re.escape(str(path))}: {pattern}") as info:
            load_reproducer(path)
        assert "\n" not in str(info.value)
        assert cli_main(["fuzz", "--replay", str(path)]) == 2  # refused before any child starts
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "follow from the reproducer's program" in err
    path = tmp_path / "r.json"
    for bad in ("xyz", 7):
        data = json.loads(_program_reproducer(path, THREE_STEPS, commands).read_text())
        path.write_text(json.dumps({**data, "program": bad}))
        with pytest.raises(HarnessError, match=r": program: not a hex string of the example's bytes"):
            load_reproducer(path)
