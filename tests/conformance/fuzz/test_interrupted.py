"""The fuzzer under SIGINT/SIGTERM (issue 19, item 8): the fake runtime child is ended, and what was found
before the signal is reported, its reproducer saved as far as it was shrunk (it replays)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.core import interrupt
from conformance.fuzz.machine import Session, fuzz, load_reproducer
from tests.conformance.fuzz.fixtures import CLSID, build

#: How long a test waits at most for what it waits for (an example judged, a failure found, a progress
#: line): a bound for a stuck run, not a timing the test depends on.
WAIT_S = 120.0


def _signal_me_once(sig: signal.Signals, when: Callable[[Session], bool]) -> Callable[[Session], None]:
    """An ``on_example`` hook: the first time ``when(session)`` holds, another thread sends ``sig`` to this
    process, as a Ctrl-C or a CI cancel would (it lands wherever the fuzzer is by then). Not at a fixed
    time: on a loaded machine that can come before the first example is judged."""
    sent: list[threading.Thread] = []

    def hook(session: Session) -> None:
        if not sent and when(session):
            sent.append(threading.Thread(target=os.kill, args=(os.getpid(), sig)))
            sent[0].start()

    return hook


def test_an_interrupted_clean_fuzz_reports_its_examples_and_no_finding() -> None:
    before = set(interrupt.descendants())
    with interrupt.handling():
        report = fuzz(build("noop"), CLSID, max_examples=1_000_000, seed=3, time_limit=WAIT_S,
                      on_example=_signal_me_once(signal.SIGINT, lambda s: s.examples >= 1))  # fmt: skip
    assert report.interrupted and report.examples > 0 and report.findings == []
    assert set(interrupt.descendants()) <= before, "the fake runtime outlived the signal"


def test_a_failure_being_shrunk_when_the_signal_comes_is_kept_as_found(tmp_path: Path) -> None:
    """mr2_off_by_one fails within a few examples and its shrinking takes over a thousand more; the signal
    is sent once the failure is found, so it lands while hypothesis shrinks it: the failure is reported
    unshrunk and its reproducer is a valid one."""
    reproducer = tmp_path / "r.json"
    found = _signal_me_once(signal.SIGTERM, lambda s: s.first_failure is not None)
    with interrupt.handling():
        report = fuzz(build("mr2_off_by_one"), CLSID, max_examples=1_000_000, seed=1, time_limit=WAIT_S,
                      reproducer=reproducer, on_example=found)  # fmt: skip
    assert report.interrupted and report.findings and not report.shrunk
    assert {f.clause for f in report.findings} == {"MR2-17"}
    assert report.reproducer == reproducer and load_reproducer(reproducer)["findings"]


def _read_until(process: subprocess.Popen[str], wanted: bytes, deadline: float) -> bytes:
    """What ``process`` wrote to stdout until (and with) ``wanted``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = b""
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and process.poll() is None, f"no {wanted!r} on stdout: {seen!r}"
        if select.select([fd], [], [], min(left, 1.0))[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed before {wanted!r}: {seen!r}"
            seen += chunk
    return seen


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
        deadline = time.monotonic() + WAIT_S
        # its first progress line: 99 examples judged (mr2_off_by_one's first failure, #2 with seed 1, among
        # them), its shrinking far from done
        seen = _read_until(harness, b"  100 examples", deadline)
        while not interrupt.descendants(harness.pid):  # the fake runtime child
            assert harness.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        tree = interrupt.descendants(harness.pid)
        harness.send_signal(signal.SIGTERM)
        out, err = harness.communicate(timeout=WAIT_S)
        out = seen.decode() + out
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
