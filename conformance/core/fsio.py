"""Files the harness writes for users: output paths checked before any work, reports written atomically.

:func:`check_output_path` answers, before a long run starts, whether a report could be written to a path
(its folder exists and is writable, the path is not a folder); :func:`atomic_write_text` writes a file to a
temporary name in the same folder, fsyncs it and renames it over the target, so a failed write leaves the
old file as it was and a reader never sees half a report. :func:`file_header` reads the fixed header a
binary file of the harness starts with (magic, then version), or says in one line why the file is not one.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def file_header(
    data: bytes,
    header: struct.Struct,
    *,
    kind: str,
    magic: bytes,
    version: int,
    name: str,
    error: type[Exception],
) -> tuple[Any, ...]:
    """The fields of ``header`` at the start of ``data``, whose first two are the magic (``len(magic)`` bytes)
    and the version. Raises ``error`` with one line (``name``, the offset, what is wrong) for a file that is
    shorter than the header, has another magic (not a ``kind`` file) or another version."""
    not_one = f"{name}: offset 0: not a {kind} file"
    if len(data) < header.size:
        raise error(f"{not_one}: {len(data)} bytes, shorter than the {header.size}-byte file header")
    fields = header.unpack_from(data, 0)
    if fields[0] != magic:
        raise error(f"{not_one}: magic {fields[0]!r}, expected {magic!r}")
    if fields[1] != version:
        where = f"{name}: offset {len(magic)}"
        raise error(f"{where}: {kind} version {fields[1]}, this reader reads version {version}")
    return tuple(fields)
