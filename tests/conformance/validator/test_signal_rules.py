"""The ASYNC rules on synthetic proxy recordings (no runtime): which clause each function called inside the
profiler's signal handler breaks, the DoStackSnapshot page's asynchronous-walk methods allowed, a site judged
once from its last record (its total), and the injected deadlock's report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.validator.rules import async_clause, check_recording
from tests.conformance.validator.test_rules import _recording

WATCHDOG = 300


def _site(function: str, caller: int, count: int, *, info: bool = False) -> dict[str, Any]:
    return {"kind": "mark", "name": "proxy.async", "payload": None, "os_tid": WATCHDOG,
            "function": function, "info": info, "caller": caller, "via": caller, "thread": 100, "signo": 27,
            "count": count}  # fmt: skip


@pytest.mark.parametrize(
    ("function", "info", "clause"),
    [
        ("malloc", False, "ASYNC-01"), ("free", False, "ASYNC-01"), ("operator new", False, "ASYNC-01"),
        ("operator delete(sized)", False, "ASYNC-01"), ("posix_memalign", False, "ASYNC-01"),
        ("fprintf", False, "ASYNC-02"), ("__snprintf_chk", False, "ASYNC-02"), ("fwrite", False, "ASYNC-02"),
        ("pthread_mutex_lock", False, "ASYNC-03"), ("pthread_cond_wait", False, "ASYNC-03"),
        ("dladdr", False, "ASYNC-04"), ("dlsym", False, "ASYNC-04"),
        ("GetCurrentThreadID", True, "ASYNC-05"), ("GetFunctionInfo", True, "ASYNC-05"),
        ("DoStackSnapshot", True, None), ("GetFunctionFromIP", True, None),
        ("errno", False, "ASYNC-06"),
    ],
)  # fmt: skip
def test_ASYNC_01_to_06_each_function_names_its_clause(function: str, info: bool, clause: str | None) -> None:
    assert async_clause(function, info) == clause


def test_ASYNC_01_a_site_is_judged_once_from_its_last_record(tmp_path: Path) -> None:
    """Written when first seen (count 3) and again at the end with its total (40): one finding, the total."""
    rec, run = _recording(tmp_path, [_site("malloc", 0x1234, 3), _site("malloc", 0x1234, 40),
                                     _site("GetFunctionFromIP", 0x1300, 5, info=True)])  # fmt: skip
    (finding,) = check_recording(rec, run)
    assert finding.clause == "ASYNC-01" and finding.records == [2] and finding.thread == 100
    assert "malloc() called inside the profiler's SIGPROF handler (40 time(s)" in finding.message


def test_ASYNC_07_the_injected_deadlock_is_a_finding_and_no_crash(tmp_path: Path) -> None:
    frame = {"ip": 0x5000, "module": "libcoreclr.so", "offset": 0x5000}
    deadlock = {"kind": "mark", "name": "proxy.async_deadlock", "payload": None, "os_tid": WATCHDOG,
                "signo": 27, "function": "operator new", "caller": 0x1234, "holderOsTid": 100,
                "waiterOsTid": 100, "waitedMs": 1004, "holderStack": [frame],
                "waiterStack": [frame]}  # fmt: skip
    rec, run = _recording(tmp_path, [deadlock])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "ASYNC-07" and "waited 1004 ms" in finding.message
    assert "the lock was taken (inside malloc) at: libcoreclr.so+0x5000" in finding.message
    assert "on the same thread" in finding.message


def test_ASYNC_08_a_handler_waiting_for_a_lock_its_thread_holds_is_a_deadlock_finding(tmp_path: Path) -> None:
    """The watchdog's report of a lock call (``lock``: true) is ASYNC-08, not the allocator's ASYNC-07."""
    frame = {"ip": 0x5000, "module": "libcoreclr.so", "offset": 0x5000}
    deadlock = {"kind": "mark", "name": "proxy.async_deadlock", "payload": None, "os_tid": WATCHDOG,
                "signo": 27, "function": "pthread_mutex_lock", "caller": 0x1234, "holderOsTid": 100,
                "waiterOsTid": 100, "waitedMs": 1002, "injected": False, "lock": True,
                "holderStack": [frame], "waiterStack": [frame]}  # fmt: skip
    rec, run = _recording(tmp_path, [deadlock])
    (finding,) = check_recording(rec, run)
    assert finding.clause == "ASYNC-08" and finding.thread == 100, finding
    assert "called pthread_mutex_lock() on thread 100 for a lock that thread already holds" in finding.message
    assert "waited 1002 ms" in finding.message and "interrupted at: libcoreclr.so+0x5000" in finding.message


def _libc_and_malloc() -> tuple[str, int]:
    """This process's libc (from its maps, as the proxy's report names it) and malloc's offset in it."""
    from elftools.elf.elffile import ELFFile

    path = next(line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                if "/libc.so" in line)  # fmt: skip
    with open(path, "rb") as fh:
        dynsym = ELFFile(fh).get_section_by_name(".dynsym")
        (malloc,) = dynsym.get_symbol_by_name("malloc")  # type: ignore[union-attr]
        return path, int(malloc["st_value"])


def test_ASYNC_07_frames_named_from_the_maps_get_their_files_symbols(tmp_path: Path) -> None:
    """A deadlock report names frames from /proc/self/maps (module, offset, path; no dladdr, whose lock a
    stopped thread may hold): the finding names them from the file's own symbols, a frame whose offset no
    symbol covers stays lib.so+0xOFF."""
    libc, malloc = _libc_and_malloc()
    inside = {"ip": 0x7F0000000000 + malloc + 0x10, "module": Path(libc).name, "offset": malloc + 0x10,
              "path": libc}  # fmt: skip
    unnamed = {"ip": 0x5000, "module": "libcoreclr.so", "offset": 0x5000, "path": str(tmp_path / "gone.so")}
    deadlock = {"kind": "mark", "name": "proxy.async_deadlock", "payload": None, "os_tid": WATCHDOG,
                "signo": 27, "function": "operator new", "caller": 0x1234, "holderOsTid": 100,
                "waiterOsTid": 100, "waitedMs": 1004, "holderStack": [inside, unnamed],
                "waiterStack": [unnamed]}  # fmt: skip
    rec, run = _recording(tmp_path, [deadlock])
    (finding,) = check_recording(rec, run)
    name = Path(libc).name
    assert f"at: malloc ({name}+{malloc + 0x10:#x}) < libcoreclr.so+0x5000" in finding.message


def _shutdown(dropped: int) -> dict[str, Any]:
    return {"kind": "mark", "name": "proxy.shutdown", "payload": None, "os_tid": WATCHDOG,
            "signals": {"handlers": [], "dropped": dropped, "injection": 0}}  # fmt: skip


def test_ASYNC_01_sites_the_preload_dropped_are_a_note(tmp_path: Path) -> None:
    """The preload keeps 1024 distinct sites and evicts none: calls at sites past that are counted as
    dropped, and the shutdown summary's count becomes a note (not a failure), never silence."""
    rec, run = _recording(tmp_path, [_site("malloc", 0x1234, 3), _shutdown(7)])
    found = check_recording(rec, run)
    (note,) = [f for f in found if f.note]
    assert note.clause == "ASYNC-01" and note.message.startswith("7 call(s) inside the profiler's signal")
    assert [f.clause for f in found if not f.note] == ["ASYNC-01"]
    (tmp_path / "none").mkdir()
    rec, run = _recording(tmp_path / "none", [_site("malloc", 0x1234, 3), _shutdown(0)])
    assert not [f for f in check_recording(rec, run) if f.note]
