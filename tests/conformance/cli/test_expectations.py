"""`profharness expectations update --from RUN.json`: the edit that makes the files describe a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.core.errors import HarnessError
from conformance.suite.expectations import WHY_PLACEHOLDER, load_expectations

WHY = "Linux cannot suspend another thread for a walk, so the runtime answers E_NOTIMPL."
E_NOTIMPL = "cross-thread walk: DoStackSnapshot returned E_NOTIMPL, expected S_OK"
COMMON = f"""# shared entries
[DSS-02]
runtimes = ["3.1.23", "8.0.4"]
status = "diverges"
disagreements = [
    "{E_NOTIMPL}",
]
why = "{WHY}"

[DSS-17]
runtimes = ["8.0.4"]
status = "diverges"
disagreements = ["init-walk: CORPROF_E_STACKSNAPSHOT_UNSAFE, expected S_OK"]
why = "Initialize runs before the runtime allows stack walks at all."
"""


def verdict(clause: str, runtime: str, status: str, *lines: str) -> dict[str, Any]:
    return {
        "clause": clause,
        "runtime": runtime,
        "experiment": "x",
        "status": status,
        "observed": lines[0] if lines else "as modelled",
        "expected": "-",
        "disagreements": list(lines),
    }


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "expectations"
    target.mkdir()
    (target / "common.toml").write_text(COMMON)
    return target


def _update(
    folder: Path, verdicts: list[dict[str, Any]], capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    run = folder.parent / "run.json"
    run.write_text(json.dumps({"runtimes": sorted({v["runtime"] for v in verdicts}), "verdicts": verdicts}))
    rc = main(["expectations", "update", "--from", str(run), "--expectations", str(folder), *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_a_new_runtime_joins_matching_entries_and_gets_new_ones_with_a_placeholder(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (folder / "common.toml").read_text()
    verdicts = [
        verdict("DSS-02", "9.0.1", "diverges", E_NOTIMPL),
        verdict("DSS-16", "9.0.1", "diverges", "walk-now: frame 2 is Main, expected Throwing"),
        verdict("DSS-05", "9.0.1", "conforms"),
    ]
    rc, out, err = _update(folder, verdicts, capsys)
    assert rc == 0
    assert '-runtimes = ["3.1.23", "8.0.4"]' in out and '+runtimes = ["3.1.23", "8.0.4", "9.0.1"]' in out
    assert "+++ b/expectations/9.0.1.toml" in out and "+[DSS-16]" in out
    assert '+    "walk-now: frame 2 is Main, expected Throwing",' in out
    assert f'+why = "{WHY_PLACEHOLDER}' in out and "not written" in err
    assert "DSS-05" not in out
    assert (folder / "common.toml").read_text() == before and not (folder / "9.0.1.toml").exists()

    rc, _, err = _update(folder, verdicts, capsys, "--write")
    assert rc == 0 and "wrote 2 file(s)" in err
    # the new entry's reason is still to be written: the loader refuses it, naming file and clause
    with pytest.raises(HarnessError, match=r"9\.0\.1\.toml:\d+: \[DSS-16\] why: .*placeholder"):
        load_expectations(folder)
    text = (
        (folder / "9.0.1.toml")
        .read_text()
        .replace(f"{WHY_PLACEHOLDER}: why does 9.0.1 differ?", "9.0 reorders the walk on purpose.")
    )
    (folder / "9.0.1.toml").write_text(text)
    found = load_expectations(folder)
    assert found.for_runtime("9.0.1")["DSS-02"].source == "common.toml:2"
    assert found.for_runtime("9.0.1")["DSS-16"].disagreements == (
        "walk-now: frame 2 is Main, expected Throwing",
    )
    assert _update(folder, verdicts, capsys)[1] == "the expectation files already describe this run\n"


def test_changed_lines_rewrite_the_entry_and_keep_its_reason(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = [
        verdict("DSS-02", "3.1.23", "diverges", E_NOTIMPL),
        verdict("DSS-02", "8.0.4", "diverges", E_NOTIMPL),
        verdict(
            "DSS-17", "8.0.4", "diverges", "init-walk: CORPROF_E_STACKSNAPSHOT_UNSAFE, expected S_OK", "two"
        ),
    ]
    rc, out, _ = _update(folder, verdicts, capsys, "--write")
    assert rc == 0 and "+disagreements = [" in out
    entry = load_expectations(folder).for_runtime("8.0.4")["DSS-17"]
    assert entry.disagreements == ("init-walk: CORPROF_E_STACKSNAPSHOT_UNSAFE, expected S_OK", "two")
    assert entry.why.startswith("Initialize runs")
    assert (folder / "common.toml").read_text().startswith("# shared entries\n")  # comments survive


def test_a_runtime_that_now_conforms_leaves_the_entry_and_one_that_differs_splits_off(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = [
        verdict("DSS-02", "3.1.23", "conforms"),
        verdict("DSS-02", "8.0.4", "diverges", E_NOTIMPL),
        verdict("DSS-17", "8.0.4", "conforms"),
    ]
    rc, _, _ = _update(folder, verdicts, capsys, "--write")
    assert rc == 0
    found = load_expectations(folder)
    assert found.for_runtime("3.1.23") == {}
    assert set(found.for_runtime("8.0.4")) == {"DSS-02"}
    assert found.for_runtime("8.0.4")["DSS-02"].runtimes == ("8.0.4",)

    # 3.1 now diverges differently from 8.0: it gets its own entry (placeholder reason), 8.0's stays
    differs = [verdict("DSS-02", "3.1.23", "diverges", "cross-thread walk: E_FAIL, expected S_OK")]
    _, out, _ = _update(folder, differs, capsys)
    assert "+++ b/expectations/3.1.23.toml" in out and WHY_PLACEHOLDER in out


def test_not_applicable_and_errors(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = [verdict("FE2-01", "8.0.4", "not-applicable"), verdict("MR2-12", "8.0.4", "error")]
    rc, out, err = _update(folder, verdicts, capsys)
    assert rc == 0 and '+status = "not-applicable"' in out and "+disagreements" not in out
    assert "MR2-12[8.0.4]: error in the run; nothing proposed" in err


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "cannot read it"), ("{", "not JSON"), ("[]", "not a suite result"), ("{}", "no 'verdicts' list")],
)
def test_a_bad_run_file_is_one_line(
    folder: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    run = folder.parent / "run.json"
    if content is not None:
        run.write_text(content)
    rc = main(["expectations", "update", "--from", str(run), "--expectations", str(folder)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_check_lists_every_entry(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["expectations", "check", "--expectations", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "DSS-02" in out and "common.toml:2" in out and out.splitlines()[-1].startswith("2 entries")


def test_identical_changes_on_every_runtime_of_a_shared_entry_keep_one_entry(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = "cross-running: DoStackSnapshot returned E_NOTIMPL, expected S_OK"
    verdicts = [verdict("DSS-02", rt, "diverges", line) for rt in ("3.1.23", "8.0.4")]
    rc, _, _ = _update(folder, verdicts, capsys, "--write")
    assert rc == 0
    (entry,) = load_expectations(folder).of_clause("DSS-02")
    assert entry.runtimes == ("3.1.23", "8.0.4") and entry.disagreements == (line,)
    assert entry.file.name == "common.toml" and entry.why == WHY


def test_entries_of_runtime_files_that_become_identical_move_to_common(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rt in ("3.1.23", "9.0.1"):
        (folder / f"{rt}.toml").write_text(
            f'# {rt} only\n\n[DSS-25]\nruntimes = ["{rt}"]\nstatus = "diverges"\n'
            f'disagreements = ["old line of {rt}"]\nwhy = "{WHY}"\n'
        )
    verdicts = [verdict("DSS-25", rt, "diverges", "warm-up: E_NOTIMPL") for rt in ("3.1.23", "9.0.1")]
    rc, _, _ = _update(folder, verdicts, capsys, "--write")
    assert rc == 0
    (entry,) = load_expectations(folder).of_clause("DSS-25")
    assert entry.file.name == "common.toml" and entry.runtimes == ("3.1.23", "9.0.1")
    assert (folder / "9.0.1.toml").read_text() == "# 9.0.1 only\n"


def test_an_emu_columns_divergence_gets_an_entry_of_its_own_column(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A divergence in the column "emu 8.0.4" is proposed for that column (in emu-8.0.4.toml), beside the
    live column's entry of the same clause; both emu columns diverging alike share one entry."""
    line = "managed: the live walk's managed frames are not the replay's, leaf first and main last"
    verdicts = [verdict("DSS-02", rt, "diverges", E_NOTIMPL) for rt in ("3.1.23", "8.0.4")]
    verdicts.append(verdict("DSS-02", "emu 8.0.4", "diverges", line))
    rc, out, _ = _update(folder, verdicts, capsys, "--write")
    assert rc == 0 and "+++ b/expectations/emu-8.0.4.toml" in out and '+runtimes = ["emu 8.0.4"]' in out
    text = (folder / "emu-8.0.4.toml").read_text()
    assert text.startswith("# Expectations of the column 'emu 8.0.4' that no other column shares")
    placeholder = f"{WHY_PLACEHOLDER}: why does emu 8.0.4 differ?"
    (folder / "emu-8.0.4.toml").write_text(text.replace(placeholder, WHY))
    found = load_expectations(folder)
    assert found.for_runtime("emu 8.0.4")["DSS-02"].disagreements == (line,)
    assert found.for_runtime("8.0.4")["DSS-02"].source == "common.toml:2"
    assert _update(folder, verdicts, capsys)[1] == "the expectation files already describe this run\n"
    both = [*verdicts, verdict("DSS-02", "emu 3.1.23", "diverges", line)]
    rc, out, _ = _update(folder, both, capsys, "--write")
    assert rc == 0 and '+runtimes = ["emu 8.0.4", "emu 3.1.23"]' in out
    assert set(load_expectations(folder).for_runtime("emu 3.1.23")) == {"DSS-02"}


def test_identical_entries_of_both_emu_columns_merge_into_the_common_file(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = "helper:gc: the live walk does not give the scenario's frames leaf first"
    for rt in ("3.1.23", "8.0.4"):
        (folder / f"emu-{rt}.toml").write_text(
            f'# emu {rt}\n[DSS-16]\nruntimes = ["emu {rt}"]\nstatus = "diverges"\n'
            f'disagreements = ["{line}"]\nwhy = "{WHY}"\n'
        )
    both = [verdict("DSS-16", f"emu {rt}", "diverges", line) for rt in ("8.0.4", "3.1.23")]
    rc, _, _ = _update(folder, both, capsys, "--write")
    assert rc == 0
    entry = load_expectations(folder).for_runtime("emu 8.0.4")["DSS-16"]
    assert entry.file.name == "common.toml" and entry.runtimes == ("emu 3.1.23", "emu 8.0.4")
    assert (folder / "emu-8.0.4.toml").read_text() == "# emu 8.0.4\n"
