"""A client of the .NET runtime's diagnostics IPC (the diagnostic port), for one command: AttachProfiler.

Written from the published protocol: dotnet/diagnostics ``documentation/design-docs/ipc-protocol.md`` and
dotnet/runtime ``docs/design/coreclr/profiling/Profiler Attach on CoreCLR.md``.

- Transport: a Unix domain socket ``dotnet-diagnostic-{pid}-{disambiguation key}-socket`` in ``$TMPDIR``
  (``/tmp`` when it is unset or empty); the key is the process start time in jiffies since boot
  (``/proc/{pid}/stat``, field 22).
- A message is a 20-byte header, then the payload: ``magic`` (14 bytes, ``"DOTNET_IPC_V1"`` and its NUL),
  ``size`` (uint16, header and payload), ``command_set`` (uint8), ``command_id`` (uint8), ``reserved``
  (uint16, 0); numbers little-endian.
- AttachProfiler is command set 0x03 (Profiler), id 0x01. Its payload: ``uint32 attachTimeout`` (ms), the
  profiler's CLSID (16 bytes: uint32, uint16, uint16, 8 bytes), ``string profilerPath`` (uint32 count of
  UTF-16 code units including the terminating NUL, then the units; an empty string is the count 0) and
  ``array<byte> clientData`` (uint32 length, then the bytes).
- The answer: command set 0xFF (Server) with id 0x00 (OK) and an ``int32`` HRESULT payload, or id 0xFF
  (Error) with the error HRESULT; the server closes the connection after an error.

Two places the protocol document is loose, decided here: its AttachProfiler section draws the answer's
header as ``{ Magic; 28; 0xFF00; 0x0000 }`` though an int32 payload makes 24 bytes (and its error example
likewise shows 28): the decoder reads the payload the header's own size announces and takes its first four
bytes; its "Details" block lists ``uint32 clientDataSize`` before ``array<byte> pClientData``, which reads
as two lengths; the runtime's parser reads one (``array<byte>`` is the length and the bytes), as encoded here.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from clr_model.hresults import format_hresult, hresult_failed
from conformance.core.errors import HarnessError

MAGIC = b"DOTNET_IPC_V1\0"
HEADER = struct.Struct("<14sHBBH")
HEADER_SIZE = HEADER.size  # 20
#: the largest message: ``size`` is a uint16
MAX_MESSAGE = 0xFFFF


class CommandSet(IntEnum):
    DUMP = 0x01
    EVENT_PIPE = 0x02
    PROFILER = 0x03
    PROCESS = 0x04
    SERVER = 0xFF


class ServerCommand(IntEnum):
    OK = 0x00
    ERROR = 0xFF


class ProfilerCommand(IntEnum):
    ATTACH_PROFILER = 0x01
    STARTUP_PROFILER = 0x02


#: DS_IPC_E_NOT_YET_AVAILABLE: the runtime's diagnostic server is up but the runtime is not running yet
NOT_YET_AVAILABLE = 0x8013135B


class IpcError(HarnessError):
    """The diagnostic port could not be reached, or answered something that is not the protocol (one line)."""


@dataclass(frozen=True)
class Response:
    """A decoded answer: the header's command and the HRESULT of its payload."""

    command_set: int
    command_id: int
    hresult: int  # unsigned 32-bit

    @property
    def is_error(self) -> bool:
        return self.command_set == CommandSet.SERVER and self.command_id == ServerCommand.ERROR

    @property
    def succeeded(self) -> bool:
        return not self.is_error and not hresult_failed(self.hresult)

    def describe(self) -> str:
        kind = "an error message" if self.is_error else "OK"
        return f"{kind} with {format_hresult(self.hresult)}"


# --- encoding -------------------------------------------------------------------------------------------


def encode_header(size: int, command_set: int, command_id: int) -> bytes:
    if not HEADER_SIZE <= size <= MAX_MESSAGE:
        raise IpcError(f"a diagnostics IPC message of {size} bytes does not fit its uint16 size field")
    return HEADER.pack(MAGIC, size, command_set, command_id, 0)


def encode_message(command_set: int, command_id: int, payload: bytes = b"") -> bytes:
    return encode_header(HEADER_SIZE + len(payload), command_set, command_id) + payload


def encode_string(text: str) -> bytes:
    """``string``: the UTF-16 code units and a terminating NUL, after their count; "" is the count 0."""
    if not text:
        return struct.pack("<I", 0)
    if "\0" in text:
        raise IpcError(f"{text!r}: a diagnostics IPC string cannot hold a NUL character")
    units = (text + "\0").encode("utf-16-le")
    return struct.pack("<I", len(units) // 2) + units


def encode_bytes(data: bytes) -> bytes:
    """``array<byte>``: the length, then the bytes."""
    return struct.pack("<I", len(data)) + data


def encode_guid(clsid: str) -> bytes:
    """A CLSID as the runtime lays it out: uint32, uint16, uint16 little-endian, then 8 bytes."""
    try:
        return uuid.UUID(clsid.strip().strip("{}")).bytes_le
    except ValueError:
        raise IpcError(f"{clsid!r}: not a CLSID") from None


def encode_attach_profiler(
    timeout_ms: int, clsid: str, profiler_path: str, client_data: bytes = b""
) -> bytes:
    """The whole AttachProfiler message (header and payload)."""
    if not 0 <= timeout_ms < 1 << 32:
        raise IpcError(f"attach timeout {timeout_ms} ms is not a uint32")
    payload = (
        struct.pack("<I", timeout_ms)
        + encode_guid(clsid)
        + encode_string(profiler_path)
        + encode_bytes(client_data)
    )
    return encode_message(CommandSet.PROFILER, ProfilerCommand.ATTACH_PROFILER, payload)


# --- decoding -------------------------------------------------------------------------------------------


def decode_header(data: bytes) -> tuple[int, int, int]:
    """``(size, command_set, command_id)`` of a header; anything else is one :class:`IpcError` line."""
    if len(data) < HEADER_SIZE:
        raise IpcError(
            f"the diagnostic port answered {len(data)} byte(s), less than a {HEADER_SIZE}-byte header"
        )
    magic, size, command_set, command_id, _reserved = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise IpcError(f"the diagnostic port answered the magic {magic!r}, not {MAGIC!r}")
    if size < HEADER_SIZE:
        raise IpcError(f"the diagnostic port's answer announces {size} bytes, less than its own header")
    return size, command_set, command_id


def decode_response(data: bytes) -> Response:
    """An answer to a command: OK with its HRESULT, or an error header with the error's HRESULT."""
    size, command_set, command_id = decode_header(data)
    if len(data) < size:
        raise IpcError(f"the diagnostic port's answer announces {size} bytes but {len(data)} came")
    payload = data[HEADER_SIZE:size]
    if command_set != CommandSet.SERVER or command_id not in (ServerCommand.OK, ServerCommand.ERROR):
        raise IpcError(
            f"the diagnostic port answered command {command_set:#04x}/{command_id:#04x}, "
            "neither the server's OK (0xFF/0x00) nor its error (0xFF/0xFF)"
        )
    if len(payload) < 4:
        raise IpcError(f"the diagnostic port's answer carries {len(payload)} payload byte(s), not an HRESULT")
    (hresult,) = struct.unpack_from("<I", payload)
    return Response(command_set=command_set, command_id=command_id, hresult=hresult)


# --- transport ------------------------------------------------------------------------------------------


def socket_dir(environ: dict[str, str] | None = None) -> Path:
    """Where the runtime puts its socket: ``$TMPDIR`` of the process, ``/tmp`` when unset or empty."""
    tmp = (environ if environ is not None else os.environ).get("TMPDIR", "")
    return Path(tmp) if tmp else Path("/tmp")


def process_socket_dir(pid: int) -> Path:
    """Where process ``pid``'s runtime puts its socket: ``$TMPDIR`` of *its* environment
    (``/proc/{pid}/environ``), ``/tmp`` when unset or empty; this process's own when that cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return socket_dir()
    environ = dict(item.decode("utf-8", "replace").partition("=")[::2] for item in raw.split(b"\0") if item)
    return socket_dir(environ)


def start_time_key(pid: int) -> int | None:
    """The disambiguation key: the process start time in jiffies since boot (``/proc/{pid}/stat``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": field 3 onwards
    try:
        return int(fields[19])  # field 22, starttime
    except (IndexError, ValueError):
        return None


def find_socket(pid: int, directory: Path) -> Path | None:
    """The socket of process ``pid`` in ``directory``: the one whose key is its start time (a socket of an
    earlier process with the same pid, left behind, has another key and is never taken); when the start time
    cannot be read, the only one for that pid. None when there is none yet."""
    key = start_time_key(pid)
    if key is not None:
        exact = directory / f"dotnet-diagnostic-{pid}-{key}-socket"
        return exact if exact.exists() else None
    found = sorted(directory.glob(f"dotnet-diagnostic-{pid}-*-socket"))
    return found[0] if len(found) == 1 else None


def wait_for_socket(pid: int, directory: Path, timeout_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while True:
        path = find_socket(pid, directory)
        if path is not None:
            return path
        if not Path(f"/proc/{pid}").exists():
            raise IpcError(f"process {pid} ended before its diagnostic socket appeared in {directory}")
        if time.monotonic() >= deadline:
            raise IpcError(f"no diagnostic socket dotnet-diagnostic-{pid}-*-socket in {directory} "
                           f"after {timeout_s:g} s")  # fmt: skip
        time.sleep(0.02)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            break
        chunks += chunk
    return bytes(chunks)


def exchange(path: Path, message: bytes, timeout_s: float) -> Response:
    """Send one message on a new connection to ``path`` and decode the answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(message)
            head = _recv_exactly(sock, HEADER_SIZE)
            size, _, _ = decode_header(head)
            rest = _recv_exactly(sock, size - HEADER_SIZE)
    except TimeoutError:
        raise IpcError(f"{path}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise IpcError(f"{path}: {exc.strerror or exc}") from None
    return decode_response(head + rest)


@dataclass(frozen=True)
class AttachAnswer:
    """What AttachProfiler answered, and when (``time.monotonic_ns()``: CLOCK_MONOTONIC, the clock a native
    profiler in the process reads too); ``tries``: how many times it was sent (the runtime answered
    DS_IPC_E_NOT_YET_AVAILABLE to the ones before)."""

    socket: Path
    response: Response
    sent_ns: int
    answered_ns: int
    tries: int = 1


def attach_profiler(
    pid: int,
    clsid: str,
    profiler_path: str,
    client_data: bytes = b"",
    *,
    attach_timeout_ms: int = 10_000,
    directory: Path | None = None,
    socket_wait_s: float = 10.0,
) -> AttachAnswer:
    """Ask the runtime of process ``pid`` to load the profiler at ``profiler_path`` under ``clsid`` with
    ``client_data`` for its InitializeForAttach. Waits up to ``socket_wait_s`` for the diagnostic socket, and
    as long again sends the command anew while the runtime answers DS_IPC_E_NOT_YET_AVAILABLE (its diagnostic
    server listens before the runtime runs: observed on 8.0.4 for an attach right after the start); the
    answer comes after the profiler's InitializeForAttach returned (the runtime keeps the connection open
    until then), bounded by the attach timeout and a margin."""
    message = encode_attach_profiler(attach_timeout_ms, clsid, profiler_path, client_data)
    path = wait_for_socket(pid, directory or process_socket_dir(pid), socket_wait_s)
    deadline = time.monotonic() + socket_wait_s
    tries = 0
    while True:
        tries += 1
        sent = time.monotonic_ns()
        response = exchange(path, message, attach_timeout_ms / 1000 + 10.0)
        answered = time.monotonic_ns()
        if not (response.is_error and response.hresult == NOT_YET_AVAILABLE) or time.monotonic() >= deadline:
            return AttachAnswer(path, response, sent_ns=sent, answered_ns=answered, tries=tries)
        time.sleep(0.05)
