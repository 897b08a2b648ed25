"""``profharness replay`` and ``profharness schema capture`` over the committed captures (no runtime)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main

CAPTURES = Path(__file__).resolve().parents[2] / "data" / "captures"


def test_replay_one_capture_prints_its_frames_with_how_each_was_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = json.loads((CAPTURES / "fixture-native.expected.json").read_text())
    assert main(["replay", str(CAPTURES / "fixture-native.phcap")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fixture-native.phcap:")
    for trust in ("context", "cfi"):
        assert f" {trust} " in out
    assert main(["replay", "--json", str(CAPTURES / "fixture-native.phcap")]) == 0
    frames = json.loads(capsys.readouterr().out)["frames"]
    assert len(frames) >= len(expected["frames"])


def test_replay_of_a_folder_prints_the_recovery_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(CAPTURES)]) == 0
    out = capsys.readouterr().out
    assert "recovered" in out and "managed" in out and "helper:stub" in out


def test_replay_of_a_missing_or_corrupt_capture_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path / "nope.phcap")]) == 2
    assert capsys.readouterr().err.strip().endswith("no such capture file or folder")
    bad = tmp_path / "bad.phcap"
    bad.write_bytes((CAPTURES / "fixture-native.phcap").read_bytes()[:100])
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0], err


def test_schema_capture_is_the_manifests_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "capture"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "registers" in json.dumps(schema)


def test_replay_embed_cfi_writes_self_contained_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = CAPTURES / "live" / "8.0.4" / "managed.phcap"
    assert main(["replay", "--embed-cfi", str(tmp_path / "out"), str(live)]) == 0
    out = capsys.readouterr().out
    # its CFI is embedded already: nothing more to embed, and the copy replays the same
    assert "nothing to embed" in out and "replays the same" in out
    assert main(["replay", "--json", str(tmp_path / "out" / "managed.phcap")]) == 0
    copy = json.loads(capsys.readouterr().out)
    assert copy == json.loads(live.with_suffix(".expected.json").read_text())
    assert main(["replay", "--embed-cfi", str(live), str(live)]) == 2
    assert capsys.readouterr().err.strip().endswith("--embed-cfi needs a folder")
