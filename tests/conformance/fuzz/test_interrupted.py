"""The fuzzer under SIGINT/SIGTERM (issue 19, item 8): the fake runtime child is ended, and what was found
before the signal is reported, its reproducer saved as far as it was shrunk (it replays)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conformance.core import interrupt
from conformance.fuzz.machine import fuzz, load_reproducer
from tests.conformance.fuzz.fixtures import CLSID, build


def _signal_me_in(seconds: float, sig: signal.Signals) -> threading.Timer:
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), sig))
    timer.start()
    return timer


def test_an_interrupted_clean_fuzz_reports_its_examples_and_no_finding() -> None:
    before = set(interrupt.descendants())
    timer = _signal_me_in(1.0, signal.SIGINT)
    try:
        with interrupt.handling():
            report = fuzz(build("noop"), CLSID, max_examples=1_000_000, seed=3, time_limit=60)
    finally:
        timer.cancel()
    assert report.interrupted and report.examples > 0 and report.findings == [] and report.seconds < 30
    assert set(interrupt.descendants()) <= before, "the fake runtime outlived the signal"


def test_a_failure_being_shrunk_when_the_signal_comes_is_kept_as_found(tmp_path: Path) -> None:
    """mr2_off_by_one fails within a few examples; the signal lands while hypothesis shrinks it: the
    failure is reported unshrunk and its reproducer is a valid one."""
    reproducer = tmp_path / "r.json"
    timer = _signal_me_in(1.5, signal.SIGTERM)
    try:
        with interrupt.handling():
            report = fuzz(build("mr2_off_by_one"), CLSID, max_examples=1_000_000, seed=1, time_limit=60,
                          reproducer=reproducer)  # fmt: skip
    finally:
        timer.cancel()
    assert report.interrupted and report.findings and not report.shrunk
    assert {f.clause for f in report.findings} == {"MR2-17"}
    assert report.reproducer == reproducer and load_reproducer(reproducer)["findings"]


@pytest.mark.parametrize(("fixture", "found"), [("noop", False), ("mr2_off_by_one", True)])
def test_sigterm_to_profharness_fuzz_ends_its_child_and_says_what_it_found(
    tmp_path: Path, fixture: str, found: bool
) -> None:
    so = build(fixture)
    reproducer = tmp_path / "r.json"
    harness = subprocess.Popen(
        [sys.executable, "-m", "conformance", "fuzz", str(so), "--clsid", CLSID, "--max-examples", "1000000",
         "--seed", "1", "--reproducer", str(reproducer)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not interrupt.descendants(harness.pid):  # the fake runtime child
            assert harness.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(1.0)
        tree = interrupt.descendants(harness.pid)
        harness.send_signal(signal.SIGTERM)
        out, err = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
    assert harness.returncode == 143, err
    assert err.startswith("profharness: interrupted by SIGTERM after ") and err.count("\n") == 1
    # the findings of the failure as far as it was shrunk when the signal came (none: none)
    assert re.search(r": [1-9]\d* finding\(s\) found before it" if found else r": 0 finding\(s\)", err), err
    assert not [p for p in tree if Path(f"/proc/{p}").exists()], "the fake runtime outlived the harness"
    if found:
        assert f"reproducer: {reproducer}" in err and "not shrunk (interrupted) reproducer" in out
        replayed = subprocess.run([sys.executable, "-m", "conformance", "fuzz", "--replay", str(reproducer)],
                                  capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert replayed.returncode == 1 and "MR2-17" in replayed.stdout
    else:
        assert "no findings" in out and not reproducer.exists()
