"""Every command's exit status (issue 19, item 8): 0 clean, 1 findings, 2 usage or bad input, 3 the harness
failed; each failure is one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli
from conformance.core.errors import HarnessError, InputError
from conformance.validator import api


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance", *argv], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def _one_line(err: str, needle: str) -> None:
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "argv",
    [[], ["no-such-command"], ["validate"], ["validate", "x.so"], ["conformance", "--no-such-flag"],
     ["fuzz", "--max-examples", "many"], ["fuzz-runtime", "--time", "soon"]],
    ids=["no-command", "unknown-command", "validate-no-profiler", "validate-no-clsid", "conformance-flag",
         "fuzz-not-a-number", "fuzz-runtime-not-a-duration"],
)  # fmt: skip
def test_usage_errors_exit_2(argv: list[str]) -> None:
    done = _run(*argv)
    assert done.returncode == 2, done.stderr
    assert "usage: profharness" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["validate", "/no/such/lib.so", "--clsid", "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}"],
         "/no/such/lib.so: no such profiler file"),
        (["validate", __file__, "--clsid", "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}"], "not an ELF file"),
        (["conformance", "--runtime", "1.0"], "no runtime matches '1.0'"),
        (["conformance", "--clause", "NOPE-1"], "--clause NOPE-1: no experiment of the suite checks it"),
        (["fuzz", "--replay", "/no/such/reproducer.json"], "/no/such/reproducer.json: cannot read"),
        (["fuzz", "/no/such/lib.so"], "fuzz needs PROFILER.so and --clsid"),
        (["fuzz-runtime", "--known-only", "--no-known"], "--known-only and --no-known exclude each other"),
        (["fuzz-runtime", "--out", __file__], "exists and is not a folder"),
        (["run", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
    ],
    ids=["validate-missing-profiler", "validate-not-elf", "conformance-runtime", "conformance-clause",
         "fuzz-missing-reproducer", "fuzz-no-clsid", "fuzz-runtime-flags", "fuzz-runtime-out",
         "run-scenario"],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    _one_line(capsys.readouterr().err, needle)


def test_a_harness_failure_exits_3_with_one_line(tmp_path: Path) -> None:
    """A failure of the harness's own (the C# compiler it needs is missing) is not the user's input."""
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "stack-basic", "--runtime", "8.0"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PATH": str(tmp_path)})  # fmt: skip
    assert done.returncode == 3, done.stderr
    _one_line(done.stderr, "profharness: error: the C# compiler mcs is not installed")


def test_a_harness_error_from_a_command_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise HarnessError("the proxy build failed: no cmake (log: /x)\nmore detail")

    monkeypatch.setattr(api, "validate", fails)
    assert cli.main(["validate", "lib.so", "--clsid", "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}"]) == 3
    _one_line(capsys.readouterr().err, "profharness: error: the proxy build failed: no cmake (log: /x)")


def test_an_unexpected_exception_exits_3_with_one_line_and_keeps_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)

    def boom(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("division by zero\nsecond line")

    from conformance.cli import schema

    monkeypatch.setattr(schema, "main", boom)
    assert cli.main(["schema", "trace"]) == 3
    err = capsys.readouterr().err
    _one_line(err, "profharness: internal error: ZeroDivisionError: division by zero (traceback: ")
    kept = Path(err.split("(traceback: ")[1].rstrip(")\n"))
    assert kept.parent == tmp_path and "ZeroDivisionError" in kept.read_text() and "boom" in kept.read_text()


def test_input_errors_are_harness_errors_with_exit_code_2() -> None:
    assert InputError("x").exit_code == 2 and HarnessError("x").exit_code == 3
    assert issubclass(InputError, HarnessError)
