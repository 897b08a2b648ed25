"""The diagnostics IPC client (conformance/core/diagnostics_ipc.py) against byte strings written by hand from
dotnet/diagnostics ``documentation/design-docs/ipc-protocol.md`` (its header table, its AttachProfiler
section, its error example), and against a fake diagnostic server on a Unix socket. No runtime: the live
attach is in tests/conformance/validator/test_attach.py."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.core import diagnostics_ipc as ipc

MAGIC = b"DOTNET_IPC_V1\x00"  # "DOTNET_IPC_V1" and its NUL: 14 bytes
CLSID = "{6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}"


def test_attach_profiler_message_byte_for_byte() -> None:
    """Header { magic; size; 0x03 Profiler; 0x01 AttachProfiler; reserved 0 }, then uint32 attachTimeout,
    the CLSID (uint32, uint16, uint16, 8 bytes: little-endian fields), the path as a string (its UTF-16 units
    counted with the NUL) and the client data as array<byte> (one length)."""
    payload = (
        b"\x88\x13\x00\x00"  # 5000 ms
        + b"\x3a\x2c\x1b\x6d" + b"\x5f\x4e" + b"\x6b\x4a" + b"\x8c\x7d\x9e\x0f\x1a\x2b\x3c\x4d"
        + b"\x06\x00\x00\x00" + b"/\x00p\x00.\x00s\x00o\x00\x00\x00"  # "/p.so" + NUL: 6 units
        + b"\x02\x00\x00\x00" + b"ab"
    )  # fmt: skip
    header = MAGIC + bytes([20 + len(payload), 0]) + b"\x03\x01" + b"\x00\x00"
    assert ipc.encode_attach_profiler(5000, CLSID, "/p.so", b"ab") == header + payload
    assert len(header) == 20 and 20 + len(payload) == 62


def test_empty_string_and_empty_client_data_are_a_zero_length() -> None:
    assert ipc.encode_string("") == b"\x00\x00\x00\x00"
    assert ipc.encode_bytes(b"") == b"\x00\x00\x00\x00"
    # a character outside the BMP is two UTF-16 units
    assert ipc.encode_string("\U0001f600") == b"\x03\x00\x00\x00" + "\U0001f600\0".encode("utf-16-le")


def test_ok_with_an_hresult_and_the_error_example_decode() -> None:
    """AttachProfiler's answer: { Magic; size; 0xFF00 } with an int32 HRESULT. The document's error example:
    size 28, 0xFF/0xFF, error code 0x80131384 (DS_IPC_E_BAD_ENCODING) in an 8-byte field; the decoder reads
    the payload the header announces and takes the HRESULT from its first four bytes."""
    ok = ipc.decode_response(MAGIC + b"\x18\x00" + b"\xff\x00" + b"\x00\x00" + b"\x00\x00\x00\x00")
    assert (ok.command_set, ok.command_id, ok.hresult, ok.succeeded) == (0xFF, 0x00, 0, True)
    refused = ipc.decode_response(MAGIC + b"\x18\x00\xff\x00\x00\x00" + b"\x05\x40\x00\x80")
    assert refused.hresult == 0x80004005 and not refused.succeeded and not refused.is_error
    error = ipc.decode_response(
        MAGIC + b"\x1c\x00" + b"\xff\xff" + b"\x00\x00" + b"\x84\x13\x13\x80" + bytes(4)
    )
    assert error.is_error and error.hresult == 0x80131384 and not error.succeeded
    assert error.describe() == "an error message with 0x80131384"  # an IPC code: no name in the table


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"", "0 byte(s), less than a 20-byte header"),
        (b"DOTNET_IPC_V2\x00\x18\x00\xff\x00\x00\x00\x00\x00\x00\x00", "magic"),
        (MAGIC + b"\x10\x00\xff\x00\x00\x00", "announces 16 bytes, less than its own header"),
        (MAGIC + b"\x18\x00\xff\x00\x00\x00\x00\x00", "announces 24 bytes but 22 came"),
        (MAGIC + b"\x18\x00\x03\x01\x00\x00\x00\x00\x00\x00", "command 0x03/0x01"),
        (MAGIC + b"\x14\x00\xff\x00\x00\x00", "0 payload byte(s), not an HRESULT"),  # the generic 20-byte OK
    ],
)
def test_a_bad_answer_is_one_line(answer: bytes, says: str) -> None:
    with pytest.raises(ipc.IpcError) as caught:
        ipc.decode_response(answer)
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: ipc.encode_attach_profiler(-1, CLSID, "/p.so"), "not a uint32"),
        (lambda: ipc.encode_attach_profiler(1, "nope", "/p.so"), "not a CLSID"),
        (lambda: ipc.encode_attach_profiler(1, CLSID, "/p\0.so"), "NUL"),
        (lambda: ipc.encode_attach_profiler(1, CLSID, "/p.so", bytes(70_000)), "uint16 size"),
    ],
)
def test_what_cannot_be_encoded_is_one_line(call: object, says: str) -> None:
    with pytest.raises(ipc.IpcError) as caught:
        call()  # type: ignore[operator]
    assert says in str(caught.value)


def test_the_socket_of_a_pid_is_the_one_keyed_by_its_start_time(tmp_path: Path) -> None:
    """dotnet-diagnostic-{pid}-{start time in jiffies, /proc/pid/stat field 22}-socket in $TMPDIR: a stale
    socket of an earlier process with the same pid (another key) is never taken (seen live: a 3.1 app's
    attach found a left-over socket of its pid before its own existed, and was refused the connection)."""
    pid = os.getpid()
    key = ipc.start_time_key(pid)
    assert key is not None and key > 0
    assert ipc.find_socket(pid, tmp_path) is None
    stale = tmp_path / f"dotnet-diagnostic-{pid}-{key - 1}-socket"
    stale.touch()
    assert ipc.find_socket(pid, tmp_path) is None
    mine = tmp_path / f"dotnet-diagnostic-{pid}-{key}-socket"
    mine.touch()
    assert ipc.find_socket(pid, tmp_path) == mine
    assert ipc.socket_dir({"TMPDIR": str(tmp_path)}) == tmp_path
    assert ipc.socket_dir({"TMPDIR": ""}) == Path("/tmp") == ipc.socket_dir({})


def test_no_socket_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        ipc.IpcError, match=r"no diagnostic socket dotnet-diagnostic-\d+-\*-socket in .* after"
    ):
        ipc.wait_for_socket(os.getpid(), tmp_path, 0.05)
    with pytest.raises(ipc.IpcError, match="ended before its diagnostic socket appeared"):
        ipc.wait_for_socket(2**22 + 12345, tmp_path, 5.0)  # above pid_max's default: no such process


def _serve_once(path: Path, answer: bytes, got: list[bytes]) -> threading.Thread:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        with conn, server:
            got.append(conn.recv(65536))
            conn.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short folder for sockets: pytest's tmp_path under xdist can pass the 107 bytes an AF_UNIX path may
    have (the runtime's own sockets are in $TMPDIR or /tmp)."""
    with tempfile.TemporaryDirectory(prefix="ph-ipc-", dir="/tmp") as folder:
        yield Path(folder)


def test_attach_profiler_over_a_fake_diagnostic_port(sock_dir: Path) -> None:
    """The whole exchange: the client finds the socket, sends the message, reads the runtime's error answer
    (CORPROF_E_PROFILER_ALREADY_ACTIVE here) and times it."""
    pid = os.getpid()
    path = sock_dir / f"dotnet-diagnostic-{pid}-{ipc.start_time_key(pid)}-socket"
    got: list[bytes] = []
    thread = _serve_once(path, MAGIC + b"\x18\x00\xff\xff\x00\x00" + b"\x6a\x13\x13\x80", got)
    answer = ipc.attach_profiler(pid, CLSID, "/x/libp.so", b"cfg", attach_timeout_ms=100, directory=sock_dir)
    thread.join(5)
    assert got == [ipc.encode_attach_profiler(100, CLSID, "/x/libp.so", b"cfg")]
    assert answer.socket == path and answer.response.is_error
    assert answer.response.describe() == "an error message with 0x8013136A CORPROF_E_PROFILER_ALREADY_ACTIVE"
    assert answer.answered_ns >= answer.sent_ns


def test_a_port_that_closes_without_answering_is_one_line(sock_dir: Path) -> None:
    path = sock_dir / "dotnet-diagnostic-1-1-socket"
    thread = _serve_once(path, b"", [])
    with pytest.raises(ipc.IpcError, match="0 byte"):
        ipc.exchange(path, ipc.encode_attach_profiler(1, CLSID, "/p.so"), 5.0)
    thread.join(5)
    with pytest.raises(ipc.IpcError, match=str(sock_dir / "nothing")):
        ipc.exchange(sock_dir / "nothing", b"x", 1.0)


def test_not_yet_available_is_asked_again(sock_dir: Path) -> None:
    """The runtime's server answers DS_IPC_E_NOT_YET_AVAILABLE before the runtime runs: the client sends the
    command again (a new connection each time, as the protocol has it) until it gets another answer."""
    pid = os.getpid()
    path = sock_dir / f"dotnet-diagnostic-{pid}-{ipc.start_time_key(pid)}-socket"
    answers = [MAGIC + b"\x18\x00\xff\xff\x00\x00" + b"\x5b\x13\x13\x80"] * 2 + [
        MAGIC + b"\x18\x00\xff\x00\x00\x00" + b"\x00\x00\x00\x00"
    ]
    got: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(3)

    def run() -> None:
        with server:
            for answer in answers:
                conn, _ = server.accept()
                with conn:
                    got.append(conn.recv(65536))
                    conn.sendall(answer)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    done = ipc.attach_profiler(pid, CLSID, "/p.so", attach_timeout_ms=100, directory=sock_dir)
    thread.join(5)
    assert done.tries == 3 and done.response.succeeded and len(got) == 3


def test_the_socket_folder_is_the_TMPDIR_of_the_app_not_the_harness(tmp_path: Path) -> None:
    """validate --attach --env TMPDIR=/x: the runtime puts its socket in the app's TMPDIR (read from the
    app's own environment), whatever the harness's is."""
    child = subprocess.Popen(["sleep", "5"], env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        _exec_done(child.pid)
        assert ipc.process_socket_dir(child.pid) == tmp_path
        bare = subprocess.Popen(["sleep", "5"], env={k: v for k, v in os.environ.items() if k != "TMPDIR"})
        try:
            _exec_done(bare.pid)
            assert ipc.process_socket_dir(bare.pid) == Path("/tmp")
        finally:
            bare.kill()
            bare.wait()
    finally:
        child.kill()
        child.wait()
    assert ipc.process_socket_dir(2**22 + 12345) == ipc.socket_dir()  # no such process: this one's own


def _exec_done(pid: int) -> None:
    """Until ``pid`` runs its own program (before its exec, /proc shows the parent's environment)."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
        assert time.monotonic() < deadline, "the child did not exec"
        time.sleep(0.005)
