"""Where the harness keeps what it downloads, builds and records."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
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


@contextmanager
def staged(final: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder beside ``final`` to build into; when the block ends normally it becomes ``final`` with
    one rename, so readers never see a half-built cache entry. If another process renamed its own build into
    place first, that one is kept. The folder is removed whatever happens."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    try:
        yield work
        try:
            os.rename(work, final)
        except OSError:
            if not final.exists():
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


def sealed_entry(final: Path, file_name: str) -> Path | None:
    """``final/file_name`` when the cache entry holds it with the content it was sealed with; None when the
    entry is absent. An entry whose file is missing, unsealed or changed on disk (a bad disk, a killed copy,
    a hand edit) is moved aside (``.<key>.corrupt-*``, left for inspection) so that it is built again."""
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
    aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.corrupt-", dir=final.parent))
    try:
        os.rename(final, aside / final.name)
    except OSError:
        pass  # another process moved or rebuilt it first
    return None
