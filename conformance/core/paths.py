"""Where the harness keeps what it downloads, builds and records."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = PACKAGE_DIR / "scenarios"
NATIVE_DIR = PACKAGE_DIR / "native"
EXPECTATIONS_DIR = PACKAGE_DIR / "expectations"


def cache_dir() -> Path:
    """The harness cache: ``$PROFHARNESS_CACHE``, else ``$XDG_CACHE_HOME/profharness``, else ~/.cache."""
    explicit = os.environ.get("PROFHARNESS_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "profharness"


def runs_dir() -> Path:
    """Where run folders (app copy, probe copy, trace, stdout/stderr) are kept: ``$PROFHARNESS_RUNS``."""
    explicit = os.environ.get("PROFHARNESS_RUNS")
    return Path(explicit) if explicit else cache_dir() / "runs"


#: the lock file of one cache area (``cache_dir()/probe``, ``.../scenarios``, ``.../runtimes``)
LOCK_NAME = ".lock"


@contextmanager
def area_lock(area: Path) -> Iterator[None]:
    """Hold the exclusive lock of one cache area (``fcntl.flock`` on ``area/.lock``) for the block: the
    processes and threads that build into the area take turns, so that one entry is built once, however
    many pytest workers or ``profharness`` commands ask for it at the same time. The lock goes with its
    holder when that dies, so a killed build never blocks the next."""
    area.mkdir(parents=True, exist_ok=True)
    fd = os.open(area / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def clear_staging(area: Path, prefix: str) -> int:
    """Remove the staging folders ``prefix*`` that builds killed before their end left in ``area`` (call it
    holding :func:`area_lock`: then no live build owns one). Returns how many were removed."""
    removed = 0
    for leftover in area.glob(f"{glob_escape(prefix)}*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
            removed += 1
    return removed


def glob_escape(text: str) -> str:
    """``text`` with the glob metacharacters quoted."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@contextmanager
def staged(final: Path, prefix: str, *, in_place: Callable[[], bool] | None = None) -> Iterator[Path]:
    """A fresh folder beside ``final`` to build into; when the block ends normally it becomes ``final`` with
    one rename, so readers never see a half-built cache entry. If another process renamed its own build into
    place first (``in_place()``; by default: ``final`` exists), that one is kept. The folder is removed
    whatever happens."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    try:
        yield work
        try:
            os.rename(work, final)
        except OSError:
            if not (in_place() if in_place is not None else final.exists()):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: beside a sealed cache file: the sha256 of its content when it was published
SEAL_SUFFIX = ".sha256"


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seal(path: Path) -> None:
    """Record ``path``'s sha256 beside it (before the entry it belongs to is published)."""
    path.with_name(path.name + SEAL_SUFFIX).write_text(file_sha256(path) + "\n")


def sealed_entry(final: Path, file_name: str, *, repair: bool = True) -> Path | None:
    """``final/file_name`` when the cache entry holds it with the content it was sealed with; None when the
    entry is absent. An entry whose file is missing, unsealed or changed on disk (a bad disk, a killed copy,
    a hand edit) is moved aside (``.<key>.corrupt-*``, left for inspection) so that it is built again;
    with ``repair=False`` it is only not returned (a check made without the area's lock, which must not
    move an entry another process may be replacing)."""
    path = final / file_name
    if not final.exists():
        return None
    seal_file = path.with_name(path.name + SEAL_SUFFIX)
    try:
        ok = path.is_file() and seal_file.read_text().strip() == file_sha256(path)
    except OSError:
        ok = False
    if ok:
        return path
    if not repair:
        return None
    aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.corrupt-", dir=final.parent))
    try:
        os.rename(final, aside / final.name)
    except OSError:  # another process moved or rebuilt it first: leave no empty folder behind
        with contextlib.suppress(OSError):
            aside.rmdir()
    return None


def sealed_build(final: Path, file_name: str, build: Callable[[Path], None]) -> Path:
    """``final/file_name`` of a sealed cache entry (:func:`sealed_entry`), built when needed: once per entry,
    however many processes ask at once (under the area's lock, rechecked there; the staging folders of killed
    builds of this key are cleared first). ``build(work)`` writes ``file_name`` and whatever goes with it
    into a fresh folder (:func:`staged`); the file is sealed and the folder renamed into place."""
    built = final / file_name
    if sealed_entry(final, file_name, repair=False) is not None:
        return built
    with area_lock(final.parent):
        if sealed_entry(final, file_name) is not None:
            return built
        prefix = f".{final.name[:12]}-"
        clear_staging(final.parent, prefix)
        with staged(final, prefix=prefix) as work:
            build(work)
            seal(work / file_name)
    return built
