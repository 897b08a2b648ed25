"""Where the harness keeps what it downloads, builds and records."""

from __future__ import annotations

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
