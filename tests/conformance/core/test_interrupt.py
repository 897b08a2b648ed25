"""SIGINT/SIGTERM to the harness (issue 19, item 8): the whole process tree ends, the command learns of it
once (:class:`Interrupted`, exit status 128 + the signal), and nothing is left running."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from conformance.core import interrupt


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(path: Path, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written in {timeout_s}s")


def test_a_signal_kills_the_registered_groups_and_every_descendant_then_raises_once(tmp_path: Path) -> None:
    mark = tmp_path / "grandchild"
    with pytest.raises(interrupt.Interrupted) as caught, interrupt.handling():
        group = subprocess.Popen(["sleep", "60"], start_new_session=True)
        interrupt.register(group)
        # a child in this process group (a compiler run by subprocess.run) and the process it started
        shell = subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {mark}; wait"])
        grandchild = int(_wait_for(mark))
        assert set(interrupt.descendants()) >= {group.pid, shell.pid, grandchild}
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        pytest.fail("no Interrupted")
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
    assert caught.value.name == "SIGTERM"
    assert not any(_alive(p) for p in (group.pid, shell.pid, grandchild))
    assert shell.wait(timeout=10) == -signal.SIGKILL  # its owner reaps it
    assert group.returncode == -signal.SIGKILL  # reaped by handling()'s end (its owner never waited)
    assert interrupt.requested() is None  # the next command starts afresh
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) is not interrupt._handler



def test_reap_waits_for_a_killed_grandchild_after_init_adopted_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A grandchild killed with its parent leaves the tree as soon as the parent is gone (init adopts it),
    while it may still be running (a loaded machine schedules its exit later). Seen in CI: the command had
    returned with the grandchild still alive. reap waits for every process kill_tree killed, by pid and start
    time."""
    mark = tmp_path / "grandchild"
    real_running = interrupt._running
    looked: list[int] = []

    def still_dying(pid: int, started: int) -> bool:  # the grandchild looks alive for its first 3 looks
        if pid == grandchild and len(looked) < 3:
            looked.append(pid)
            return True
        return real_running(pid, started)

    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        shell = subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {mark}; wait"])
        grandchild = int(_wait_for(mark))
        monkeypatch.setattr(interrupt, "_running", still_dying)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        pytest.fail("no Interrupted")
    assert looked == [grandchild] * 3  # reap asked about the adopted grandchild until it was gone
    assert not _alive(grandchild)
    assert shell.wait(timeout=10) == -signal.SIGKILL

def test_the_previous_handlers_are_back_after_the_block() -> None:
    before = {sig: signal.getsignal(sig) for sig in interrupt.SIGNALS}
    with interrupt.handling():
        assert all(signal.getsignal(sig) is interrupt._handler for sig in interrupt.SIGNALS)
    assert {sig: signal.getsignal(sig) for sig in interrupt.SIGNALS} == before


def test_a_deferred_block_is_not_cut_and_raises_at_its_end() -> None:
    done = []
    with pytest.raises(interrupt.Interrupted) as caught, interrupt.handling():
        with interrupt.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("the block ran to its end")
        pytest.fail("no Interrupted after the deferred block")
    assert done and caught.value.exit_code == 130


def test_a_block_left_by_an_exception_after_the_signal_raises_it_once_not_again_later() -> None:
    """The signal came inside a deferred block that then ends by an exception (``register`` raising
    Interrupted, or any error): the signal is raised there, once; the command's next deferred block (where
    it writes its reports) runs to its end without a second Interrupted."""
    for inside in (interrupt.Interrupted(signal.SIGINT), RuntimeError("a failure in the block")):
        later = []
        with pytest.raises(interrupt.Interrupted), interrupt.handling():
            try:
                with interrupt.deferred():
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.05)
                    raise inside
            finally:
                with interrupt.deferred():
                    later.append("the reports")
                later.append("after the reports")
        assert later == ["the reports", "after the reports"], inside


def test_after_the_signal_no_new_child_starts_and_later_signals_only_kill() -> None:
    with interrupt.handling():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except interrupt.Interrupted:
            pass
        # what the command does after catching it (writing its report) is not cut by a second signal
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert interrupt.requested() == signal.SIGINT
        with pytest.raises(interrupt.Interrupted):
            interrupt.check()
        late = subprocess.Popen(["sleep", "60"], start_new_session=True)  # started by a racing thread
        with pytest.raises(interrupt.Interrupted):
            interrupt.register(late)
        assert late.wait(timeout=10) == -signal.SIGKILL
        interrupt.unregister(late)


def test_a_file_opened_as_the_signal_comes_is_closed_not_left_to_the_collector(tmp_path: Path) -> None:
    """The signal lands right after the file is opened, before the ``with`` takes it: plain, the file is left
    open (its finalizer would close it with a ResourceWarning, an error here); with ``opening`` it is closed
    before Interrupted goes on."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"{}\n")
    opened: list[BinaryIO] = []

    def open_then_signal() -> BinaryIO:
        opened.append(path.open("rb"))
        os.kill(os.getpid(), signal.SIGINT)  # its handler runs at the next bytecode boundary
        time.sleep(0.05)
        return opened[-1]

    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        with open_then_signal():
            pytest.fail("the block ran")
    assert not opened[-1].closed  # the gap: nobody owns the file
    opened[-1].close()
    with pytest.raises(interrupt.Interrupted), interrupt.handling():
        with interrupt.opening(open_then_signal):
            pytest.fail("the block ran")
    assert opened[-1].closed


def test_an_interrupted_python_drops_is_not_shown_and_raised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler runs in a garbage collector callback, where Python cannot raise: it reports the exception
    as unraisable and drops it. The report is not printed (the command says it was interrupted, in one line),
    and ``check`` raises it; so does the next signal."""
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    sent: list[int] = []

    def during_collection(phase: str, info: dict[str, int]) -> None:
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)

    gc.callbacks.append(during_collection)
    try:
        with interrupt.handling():
            gc.collect()  # the Interrupted raised in during_collection is dropped
            gc.callbacks.remove(during_collection)
            assert sent and interrupt.requested() == signal.SIGTERM
            with pytest.raises(interrupt.Interrupted) as caught:
                interrupt.check()
            assert caught.value.signum == signal.SIGTERM
            with pytest.raises(interrupt.Interrupted) as again:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            assert again.value.signum == signal.SIGTERM  # the first signal's
    finally:
        if during_collection in gc.callbacks:
            gc.callbacks.remove(during_collection)
    assert reported == []


def test_outside_handling_nothing_is_installed_and_registering_is_bookkeeping() -> None:
    assert signal.getsignal(signal.SIGTERM) is not interrupt._handler
    child = subprocess.Popen(["true"], start_new_session=True)
    interrupt.register(child)
    interrupt.check()
    child.wait()
    interrupt.unregister(child)


FAKE_MCS = """\
#!/bin/sh
# a C# compiler that answers --version and then never ends a compilation (and starts a process of its own)
if [ "$1" = "--version" ]; then echo "Mono C# compiler version 0.0-interrupt-test-$$"; exit 0; fi
sleep 120 &
echo "$$ $!" > {mark}
wait
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_profharness_process_alone_ends_its_tree(tmp_path: Path, sig: signal.Signals) -> None:
    """``profharness run`` stuck in a compiler (in the harness's own process group, with a child of its
    own): the signal is sent to the profharness process only; it exits 128 + the signal with one line, and
    neither the compiler nor its child is left."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "mcs.pids"
    (bin_dir / "mcs").write_text(FAKE_MCS.format(mark=mark))
    (bin_dir / "mcs").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    harness = subprocess.Popen(
        [sys.executable, "-m", "conformance", "run", "stack-basic", "--runtime", "8.0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        compiler, its_child = (int(x) for x in _wait_for(mark, 120).split())
        harness.send_signal(sig)
        _, err = harness.communicate(timeout=30)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
    assert harness.returncode == 128 + sig, err
    assert err == f"profharness: interrupted by {sig.name}; its processes were ended\n"
    assert not _alive(compiler) and not _alive(its_child)


def test_descendants_lists_the_tree_parents_first(tmp_path: Path) -> None:
    mark = tmp_path / "pids"
    script = textwrap.dedent(f"""\
        sleep 30 &
        echo "$$ $!" > {mark}
        wait
    """)
    shell = subprocess.Popen(["sh", "-c", script])
    try:
        me, child = (int(x) for x in _wait_for(mark).split())
        tree = interrupt.descendants()
        assert me == shell.pid and tree.index(shell.pid) < tree.index(child)
        assert interrupt.descendants(shell.pid) == [child]
    finally:
        shell.kill()
        os.kill(child, signal.SIGKILL)
        shell.wait()
