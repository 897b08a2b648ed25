"""The validator (issue 10): input checks, the proxy's generated forwarding, the buffer table, and every
fixture profiler validated on each bundled runtime with the finding its one fault must give."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema

from conformance.cli import main as cli_main
from conformance.core import probe
from conformance.core.runtimes import Runtime
from conformance.core.trace import read_trace
from conformance.validator import api
from conformance.validator.launch import (
    TARGET_TRACE_FILE,
    ValidatorInputError,
    check_profiler,
    parse_clsid,
    parse_env,
)
from conformance.validator.result import ValidationResult
from tests.conformance.validator.fixtures import FIXTURE_CLSID, PROFILERS, build_fixture, same_source
from tests.conformance.validator.test_report import JUNIT_XSD


def test_clsid_is_normalised_and_a_bad_one_is_one_line() -> None:
    assert parse_clsid("6d1b2c3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d") == FIXTURE_CLSID
    with pytest.raises(ValidatorInputError, match="not a CLSID"):
        parse_clsid("{1234}")


def test_env_items_need_a_name_and_a_value() -> None:
    assert parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(ValidatorInputError, match="NAME=VALUE"):
        parse_env(["novalue"])


def test_profiler_must_be_an_elf_shared_object(tmp_path: Path) -> None:
    with pytest.raises(ValidatorInputError, match="no such profiler file"):
        check_profiler(tmp_path / "missing.so")
    text = tmp_path / "text.so"
    text.write_text("not a library\n")
    with pytest.raises(ValidatorInputError, match="not an ELF file"):
        check_profiler(text)
    executable = tmp_path / "exec.so"  # an x86-64 ELF header of type ET_EXEC (2)
    executable.write_bytes(
        b"\x7fELF\x02\x01\x01" + bytes(9) + (2).to_bytes(2, "little") + (62).to_bytes(2, "little")
    )
    with pytest.raises(ValidatorInputError, match="not a shared object"):
        check_profiler(executable)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["validate", "/nonexistent/lib.so", "--clsid", FIXTURE_CLSID], "no such profiler file"),
        (["validate", __file__, "--clsid", FIXTURE_CLSID], "not an ELF file"),
        (["validate", "PLACEHOLDER", "--clsid", "nope"], "not a CLSID"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if "PLACEHOLDER" in argv:
        argv[argv.index("PLACEHOLDER")] = str(build_fixture("correct"))
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "nan"), ("--timeout", "inf"),
     ("--hang-seconds", "nan")],
)  # fmt: skip
def test_cli_bad_seconds_exit_2_with_one_line(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--timeout SECONDS (the harness's watchdog per run) and --hang-seconds take a positive, finite number
    of seconds; anything else is one line, exit 2, before the profiler is even looked at."""
    argv = ["validate", "/nonexistent/lib.so", "--clsid", FIXTURE_CLSID, option, value]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{option} " in err[0] and "must be a positive number of seconds" in err[0], err


def test_cli_timeout_reaches_validate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--timeout is the run limit api.validate gets (timeout_s); without it, the default of 600 s."""
    seen: list[float] = []

    def fake_validate(profiler: Path, clsid: str, **options: object) -> ValidationResult:
        seen.append(float(options["timeout_s"]))  # type: ignore[arg-type]
        return ValidationResult(profiler=str(profiler), clsid=clsid, runs=[], groups=[], rules=[])

    monkeypatch.setattr(api, "validate", fake_validate)
    argv = ["validate", "lib.so", "--clsid", FIXTURE_CLSID]
    assert cli_main([*argv, "--timeout", "42.5"]) == 0
    assert cli_main(argv) == 0
    assert seen == [42.5, 600.0]
    capsys.readouterr()


#: fixture -> the clauses its one fault must give, on every bundled runtime (no fixture's fault is
#: specific to one runtime: NOT_ON lists none). DSS-24 (a lock held across a call that can trigger a GC)
#: has no fixture: the proxy sees no lock operations of the profiler's, so no live recording can show it
#: (clr_model.async_safety judges it on sequences that carry LockAcquire/LockRelease).
FIXTURES: dict[str, set[str]] = {
    "correct": set(),
    "null_buffer": {"BUF-04"},
    "truncated": {"BUF-08"},
    "cross_walk": {"DSS-13"},
    "native_seed": {"DSS-19"},
    "suspend_managed": {"DSS-22"},
    "destroyed_walk": {"DSS-23"},
    "bad_hook": {"FE2-08"},
    "elt_block": {"FE2-10", "REJIT-09"},  # its blocking call is RequestReJIT, on a runtime thread
    "elt_gc": {"FE2-11"},
    "fast_hook_gc": {"FE2-11"},  # the same fault in a fast-path hook (seen through the proxy's trampolines)
    "inspect_in_mr2": {"MR2-09"},
    "callback3_only": {"MR2-13"},
    "stale_ids": {"MR2-17"},
    "crash": {"VAL-CRASH"},
    "abort": {"VAL-CRASH"},
    "terminate": {"VAL-CRASH"},
    "pure_virtual": {"VAL-CRASH"},
    "ctor_race": {"VAL-CRASH"},
    "hang": {"VAL-HANG"},
    "after_shutdown": {"SHD-01", "VAL-RELEASED-INFO", "VAL-THREAD-AT-SHUTDOWN"},
    # its thread never calls the runtime: a note on 8.0; 3.1 crashes in its destructor (ALSO_ON)
    "thread_at_shutdown": set(),
    "enum_leak": {"VAL-ENUM-LEAK"},
    "hooks_after_initialize": {"SEL-01"},
    "load_started": {"LDS-03", "LDS-04"},  # its questions in the Finished callbacks, about earlier IDs: none
    "stale_walk_frame": {"SSC-01"},  # inside the walk callbacks, and with 0 after: none
    "clause_info": {"EXC-01"},  # in the clause callbacks (catch, finally; Enter and Leave): none
    "null_tailcall": set(),  # allowed (corprof.idl): a note
    "qi_in_gc": set(),  # no document restricts it: a note
    "needs_env": {"VAL-LOAD"},  # without its FIXTURE_GREETING (test_env_and_preload gives it)
    "needs_companion": {"VAL-LOAD"},  # without its preloaded companion (likewise)
}
#: fixture -> the notes it must give on every runtime (shown, never a failure: no document states the rule,
#: or the thread it names never calls the runtime again)
NOTES: dict[str, set[str]] = {
    "thread_at_shutdown": {"VAL-THREAD-AT-SHUTDOWN"},
    "null_tailcall": {"VAL-NULL-TAILCALL"},
    "qi_in_gc": {"VAL-QI-IN-GC"},
}
#: (fixture, runtime version prefix) -> why the fixture's fault cannot show on that runtime
NOT_ON: dict[tuple[str, str], str] = {}
#: (fixture, runtime version prefix) -> clauses found there besides the fixture's own, and why
ALSO_ON: dict[tuple[str, str], tuple[set[str], str]] = {
    ("thread_at_shutdown", "3.1"): (
        {"VAL-CRASH"},
        "3.1 releases the profiler after Shutdown: deleting it destroys its still-joinable std::thread, "
        "which aborts the process (8.0 never releases the profiler)",
    ),
}


def _children() -> set[int]:
    """The process ids of this process's children (every thread's)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            found |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            continue
    return found


def _processes_in(run_dirs: set[Path]) -> list[int]:
    """Processes whose working directory is one of ``run_dirs`` (what a run left behind)."""
    left = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if Path(os.readlink(proc / "cwd")) in run_dirs:
                    left.append(int(proc.name))
            except OSError:
                continue
    return left


@pytest.mark.live
@pytest.mark.parametrize(
    "fixture",
    sorted(FIXTURES),
    ids=[f"{'+'.join(sorted(FIXTURES[n])) or 'clean'}-{n}" for n in sorted(FIXTURES)],
)
def test_fixture_gives_its_finding_on_every_runtime(fixture: str, runtimes: list[Runtime]) -> None:
    so = build_fixture(fixture)
    before = _children()
    result = api.validate(so, FIXTURE_CLSID, hang_s=3.0)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    for rt in runtimes:
        mine = {g.clause for g in result.findings if rt.version in g.runtimes}
        skipped = [
            why for (name, prefix), why in NOT_ON.items() if name == fixture and rt.version.startswith(prefix)
        ]
        also: set[str] = set()
        for (name, prefix), (extra, _why) in ALSO_ON.items():
            if name == fixture and rt.version.startswith(prefix):
                also |= extra
        assert mine == (set() if skipped else FIXTURES[fixture] | also), api.table(result)
        noted = {g.clause for g in result.groups if g.note and rt.version in g.runtimes}
        assert noted >= NOTES.get(fixture, set()), api.table(result)
    if fixture == "hang":  # the proxy's watchdog fired at hang_s, not the harness's (a margin later)
        for group in result.findings:
            for seen in group.occurrences:
                assert "(limit 3000 ms)" in seen.message and seen.records, seen.message
        assert {r.outcome for r in result.runs} >= {"killed"}, api.table(result)
    for group in result.findings:
        assert group.clause in api.rule_ids()
        assert all(seen.records for seen in group.occurrences) or group.clause == "VAL-HANG"
    assert not result.notes, result.notes
    # containment: the harness never loaded the profiler itself, and every child was reaped
    assert str(so) not in Path("/proc/self/maps").read_text()
    assert _children() <= before
    assert _processes_in({Path(r.trace).parent for r in result.runs}) == []


@pytest.mark.live
@pytest.mark.parametrize(
    ("fixture", "signal", "callback"),
    [("crash", "SIGSEGV", "GarbageCollectionStarted"), ("abort", "SIGABRT", "GarbageCollectionFinished"),
     ("terminate", "SIGABRT", "GarbageCollectionFinished"),
     ("pure_virtual", "SIGABRT", "GarbageCollectionFinished"), ("ctor_race", "SIGSEGV", None)],
)  # fmt: skip
def test_VAL_CRASH_names_the_callback_and_the_faulting_stack(
    fixture: str, signal: str, callback: str | None, runtimes: list[Runtime]
) -> None:
    result = api.validate(build_fixture(fixture), FIXTURE_CLSID, runtime=runtimes[-1].version)
    (group,) = result.findings
    finding = group.first
    assert group.count == 1 and finding.callback == callback and finding.thread is not None
    # the profiler's frame by function (file:line) of its own source, however deep under the abort machinery
    # (raise, abort, the C++ runtime's terminate handler above it); a frame named by the call its return
    # address follows (__cxa_pure_virtual's last call, to std::terminate, does not return: the address after
    # it is past the function's end)
    assert signal in finding.message and f"profilers/{fixture}.cpp:" in finding.message, finding.message
    assert ("__cxa_throw < " in finding.message) == (fixture == "terminate"), finding.message
    assert ("__cxa_pure_virtual < " in finding.message) == (fixture == "pure_virtual"), finding.message
    assert ("outside any callback" in finding.message) == (callback is None)
    assert ("before Initialize" in finding.message) == (fixture == "ctor_race")


@pytest.mark.live
def test_the_projects_own_probe_validates_clean(runtimes: list[Runtime]) -> None:
    """The probe behind the proxy: its own trace goes to the path the proxy hands it (never the proxy's),
    the scenario's marks reach it through the proxy (its walk at validate.gc runs), and nothing is found."""
    result = api.validate(probe.build_probe(), probe.CLSID, hang_s=10.0)
    assert result.findings == [] and result.notes == [], api.table(result)
    assert {r.runtime for r in result.runs} == {rt.version for rt in runtimes}
    for run in result.runs:
        (target_trace,) = Path(run.trace).parent.glob(TARGET_TRACE_FILE.replace(".jsonl", ".*"))
        theirs = read_trace(target_trace, strict=True)
        assert theirs.header is not None and theirs.header.probe != "profharness-proxy 1"
        assert theirs.calls("DoStackSnapshot", experiment="walk-at-gc"), run.trace
        mine = read_trace(Path(run.trace), strict=True)
        assert mine.header is not None and mine.header.probe == "profharness-proxy 1"
        assert mine.calls("DoStackSnapshot")  # the probe's walk went through the proxy's wrapper


@pytest.mark.live
def test_reports_junit_json_html(
    tmp_path: Path, runtimes: list[Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    so = build_fixture("null_buffer")
    argv = [
        "validate",
        str(so),
        "--clsid",
        FIXTURE_CLSID,
        "--runtime",
        runtimes[0].version,
        "--workload",
        "basic",
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        "--html",
        str(tmp_path / "r.html"),
    ]
    assert cli_main(argv) == 1
    assert "BUF-04" in capsys.readouterr().out
    # the JSON of a real validation holds to the schema `profharness schema validate` prints
    assert cli_main(["schema", "validate"]) == 0
    schema = json.loads(capsys.readouterr().out)
    document = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    assert [g["clause"] for g in document["groups"]] == ["BUF-04"]
    xmlschema.XMLSchema(JUNIT_XSD).validate(tmp_path / "r.xml")
    (suite,) = ET.parse(tmp_path / "r.xml").getroot().findall("testsuite")
    failed = [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert suite.get("failures") == "1" and failed == [f"BUF-04[{runtimes[0].version}]"]
    assert "BUF-04" in (tmp_path / "r.html").read_text()


@pytest.mark.live
def test_BUF_04_thirty_thousand_occurrences_are_one_group_at_their_source_line() -> None:
    """repeated_fault asks for a module's name 30,000 times with a NULL buffer and a non-zero size, from one
    line: one BUF-04 group per runtime set, count 30,000 per runtime, at that line; the terminal shows it
    once (its occurrences only with --verbose, and those capped)."""
    source = PROFILERS / "repeated_fault.cpp"
    (line,) = [n for n, t in enumerate(source.read_text().splitlines(), 1) if "REPEATED-FAULT-LINE" in t]
    result = api.validate(build_fixture("repeated_fault"), FIXTURE_CLSID, runtime="8.0")
    (group,) = result.findings
    assert (group.clause, group.count, group.runtimes) == ("BUF-04", 30_000, ["8.0.4"]), api.table(result)
    assert group.site is not None and group.site.line == line, group.site
    assert same_source(group.site.file, source), group.site
    text = api.table(result)
    assert len(text.splitlines()) < 40 and text.count(f"repeated_fault.cpp:{line}") == 1, text
    assert "30000" in text or "30,000" in text, text
