"""The runs folder (:func:`conformance.core.paths.runs_dir`): one folder per run, and its cap.

Every run (a scenario under the probe, a validate run) gets a folder of its own, named
``YYYYMMDD-HHMMSS-<what>-<runtime>-<hex>`` (:func:`new_run_dir`), holding the app and probe copies, the plan,
the trace and the process's output; reports name the traces in it. The folder holds an owner file
(:data:`OWNER_FILE`: the pid and start time of the process that made it): a run whose owner still lives is
*in progress* (the process may still be writing or reading it) and is never removed.

The cap: when a run folder is made, the runs folder is cut to the newest :func:`keep_limit` runs
(``$PROFHARNESS_RUNS_KEEP``, default :data:`DEFAULT_KEEP`; ``all`` keeps every run), at most
:data:`CAP_BATCH` removals per new run so that a large folder never stalls a run (``profharness runs prune``
removes them all at once), and none written in the last :data:`CAP_MIN_AGE_S` seconds. Only folders named
like runs and holding what the harness writes into one (:func:`made_by_the_harness`) are touched, never
anything else in the folder, nor anything outside it; a removal renames the
folder aside first (:data:`PRUNING_PREFIX`), so a reader never sees a half-removed run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from conformance.core.errors import InputError
from conformance.core.paths import LOCK_NAME, glob_escape, runs_dir

#: how many runs the folder keeps by default: a suite run writes 16 run folders (8 experiments x 2
#: runtimes), ``validate --repeat N --compare`` 2N per runtime; 100 keeps the last six suite runs' traces
#: (the reports name them) at about 66 MB (0.66 MB a run, most of it the probe's copy)
DEFAULT_KEEP = 100
#: the variable that sets the cap: a whole number of runs (0 keeps none but those in progress) or ``all``
KEEP_ENV = "PROFHARNESS_RUNS_KEEP"
#: at most this many runs are removed when one run folder is made
CAP_BATCH = 64
#: the cap never removes a run last written less than this many seconds ago: a command that ran the run
#: in a child process (the suite run by a test, say) reads its trace after the child ended
CAP_MIN_AGE_S = 600.0
#: inside a run folder: ``<pid> <start time>`` of the process that made it
OWNER_FILE = ".owner"
#: a run folder without an owner file (made by an older harness, or an instant ago, before its owner file
#: was written) counts as in progress while it is younger than this (seconds)
UNOWNED_GRACE_S = 3600.0
#: a run being removed is first renamed to this prefix + its name (left over when a removal is killed: the
#: next prune removes it)
PRUNING_PREFIX = ".pruning-"
#: the name of a run folder
RUN_NAME = re.compile(r"^\d{8}-\d{6}-.+$")

_AGE = re.compile(r"^(\d+)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_keep(text: str, where: str) -> int | None:
    """A cap from ``text``: a whole number of runs >= 0, or None for ``all`` (no cap). ``where`` names the
    option or variable in the one-line error."""
    value = text.strip()
    if value.lower() == "all":
        return None
    if not re.fullmatch(r"[0-9]+", value):  # str.isdigit also takes superscripts, which int() refuses
        raise InputError(f"{where} {text!r}: not a number of runs to keep (a whole number >= 0, or 'all')")
    return int(value)


def parse_age(text: str, where: str) -> float:
    """Seconds from an age such as ``7d``, ``12h``, ``30m``, ``90s`` or ``2w``."""
    match = _AGE.match(text.strip())
    if match is None:
        raise InputError(
            f"{where} {text!r}: not an age (a whole number and a unit s, m, h, d or w, such as 7d or 12h)"
        )
    return float(int(match.group(1)) * _UNIT_S[match.group(2)])


def keep_limit() -> int | None:
    """The cap of the runs folder: ``$PROFHARNESS_RUNS_KEEP`` (None: ``all``, no cap), else
    :data:`DEFAULT_KEEP`."""
    text = os.environ.get(KEEP_ENV)
    if text is None or not text.strip():
        return DEFAULT_KEEP
    return parse_keep(text, KEEP_ENV)


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, field 22 of /proc/PID/stat): with the pid
    it names one process, never a later one that reuses the pid. None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def _owner_line() -> str:
    pid = os.getpid()
    return f"{pid} {_start_time(pid) or '?'}\n"


def new_run_dir(name: str) -> Path:
    """A fresh run folder ``<stamp>-<name>-<hex>`` in the runs folder, owned by this process; the folder is
    then cut to its cap (:func:`keep_limit`; a bad ``$PROFHARNESS_RUNS_KEEP`` is refused before anything is
    made). A failure to cut it never fails the run."""
    keep = keep_limit()
    folder = runs_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())  # UTC: names sort by time across zones and DST
    path = folder / f"{stamp}-{name}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    (path / OWNER_FILE).write_text(_owner_line())
    if keep is not None:
        with contextlib.suppress(OSError):
            prune(folder, keep=keep, limit=CAP_BATCH, wait=False, min_age_s=CAP_MIN_AGE_S)
    return path


def in_progress(run: Path, *, now: float | None = None) -> bool:
    """Whether the process that made ``run`` still lives (a folder without a readable owner file: whether
    it is younger than :data:`UNOWNED_GRACE_S`)."""
    try:
        pid_text, start = (run / OWNER_FILE).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return run.exists() and _age(run, time.time() if now is None else now) < UNOWNED_GRACE_S
    alive = _start_time(pid)
    if alive is None:
        return False
    return start == "?" or alive == start


@dataclass
class PruneResult:
    """What :func:`prune` did (or, ``dry_run``, would do)."""

    folder: Path
    #: the runs it removed, oldest first
    removed: list[Path] = field(default_factory=list)
    #: their size in bytes (measured before removal)
    removed_bytes: int = 0
    #: runs left in the folder
    kept: int = 0
    #: the cap was skipped because another process was cutting the folder
    busy: bool = False


def runs_in(folder: Path) -> list[Path]:
    """The runs in ``folder``, newest first (by the time their name starts with, the time the run folder was
    made): each folder named like a run (symbolic links and anything else are never runs). Nothing but the
    folder's listing is read: the cap reads it whenever a run folder is made."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not RUN_NAME.match(entry.name):
            continue
        with contextlib.suppress(OSError):  # removed meanwhile
            if entry.is_dir(follow_symlinks=False):
                found.append(Path(entry.path))
    found.sort(key=lambda path: (path.name[:15], path.name), reverse=True)
    return found


def made_by_the_harness(run: Path) -> bool:
    """Whether ``run`` holds what only the harness writes into a run folder: its owner file, or (a run of an
    older harness) the plan and the process's output. A folder merely named like a run (the runs folder may
    be shared, ``$PROFHARNESS_RUNS``) is never removed."""
    return (run / OWNER_FILE).is_file() or ((run / "plan.json").is_file() and (run / "stdout.txt").is_file())


def _age(run: Path, now: float) -> float:
    """Seconds since ``run`` was last written (0 when it is gone)."""
    try:
        return now - run.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextmanager
def _pruning(folder: Path, wait: bool) -> Iterator[bool]:
    """Hold the runs folder's lock for the block (yields False, lock not taken, when ``wait`` is False and
    another process holds it): one process cuts the folder at a time."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def prune(
    folder: Path | None = None,
    *,
    keep: int | None = None,
    older_than_s: float | None = None,
    limit: int | None = None,
    dry_run: bool = False,
    wait: bool = True,
    now: float | None = None,
    min_age_s: float = 0.0,
) -> PruneResult:
    """Remove the finished runs of ``folder`` (default: the runs folder) that are not among the newest
    ``keep`` runs (:func:`runs_in`), or were last written more than ``older_than_s`` seconds ago; either
    criterion removes a run, and with neither nothing is removed; none last written less than ``min_age_s``
    seconds ago. Runs in progress (:func:`in_progress`) are never removed, but they
    count among the newest ``keep``. At most ``limit`` runs go, the oldest first. ``dry_run``: only say
    which. ``wait=False``: when another process is pruning the folder, do nothing (``busy``)."""
    folder = runs_dir() if folder is None else folder
    now = time.time() if now is None else now
    result = PruneResult(folder=folder)
    if not folder.is_dir():
        return result
    with _pruning(folder, wait) as held:
        if not held:
            result.busy = True
            return result
        if not dry_run:
            for leftover in folder.glob(f"{glob_escape(PRUNING_PREFIX)}*"):
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover, ignore_errors=True)
        runs = runs_in(folder)
        for index in range(len(runs) - 1, -1, -1):  # oldest first
            if limit is not None and len(result.removed) >= limit:
                break
            path = runs[index]
            beyond = keep is not None and index >= keep
            old = older_than_s is not None and _age(path, now) > older_than_s
            if not (beyond or old) or in_progress(path, now=now):
                continue
            if min_age_s and _age(path, now) < min_age_s:
                continue
            if not made_by_the_harness(path):
                continue
            size = _size(path)
            if not dry_run and not _remove(folder, path):
                continue
            result.removed.append(path)
            result.removed_bytes += size
        result.kept = len(runs) - len(result.removed)
    return result


def _remove(folder: Path, run: Path) -> bool:
    """Rename ``run`` aside (one step: no reader sees half a run), then remove it. False when it is gone or
    cannot be moved."""
    aside = folder / f"{PRUNING_PREFIX}{run.name}"
    try:
        os.rename(run, aside)
    except OSError:
        return False
    shutil.rmtree(aside, ignore_errors=True)
    return True
