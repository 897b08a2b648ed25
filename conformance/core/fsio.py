"""Files the harness writes for users: output paths checked before any work, reports written atomically.

:func:`check_output_path` answers, before a long run starts, whether a report could be written to a path
(its folder exists and is writable, the path is not a folder); :func:`atomic_write_text` writes a file to a
temporary name in the same folder, fsyncs it and renames it over the target, so a failed write leaves the
old file as it was and a reader never sees half a report.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from conformance.core.errors import InputError


def check_output_path(path: Path, option: str) -> None:
    """Raise a one-line :class:`HarnessError` naming ``option`` when ``path`` cannot be written."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InputError(f"{option} {target}: is a folder, not a file")
    if not parent.exists():
        raise InputError(f"{option} {target}: the folder {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{option} {target}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {target}: the folder {parent} is not writable")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option} {target}: the file is not writable")


def check_output_paths(outputs: Mapping[str, Path]) -> None:
    """Every report path (option -> path) writable, and no two naming one file: checked before any run
    starts, each failure one :class:`InputError` line naming the option."""
    for option, path in outputs.items():
        check_output_path(path, option)
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        resolved = Path(path).resolve()
        if resolved in seen:
            raise InputError(f"{seen[resolved]} and {option} name the same file {path}")
        seen[resolved] = option


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file in the same folder, fsync, rename)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            # keep the old file's permission bits (mkstemp creates 0600)
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the platform allows it
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_text_file(path: Path, what: str = "file") -> str:
    """The UTF-8 text of an input file; a file that cannot be read, or is not UTF-8, is one
    :class:`HarnessError` line naming the file and the line of the first bad byte."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: the {what} is not UTF-8 text (byte {exc.start})") from None
