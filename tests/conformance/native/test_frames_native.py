"""The native frames v1 writer (``conformance/native/common/frames.cpp``) read back by the Python reader
(:mod:`conformance.core.frames`): a small driver (``tools/frames_driver.cpp``, built here with g++) writes
what hypothesis draws; its CRC-32 equals zlib's; a payload over the cap is refused without a torn frame; a
writer SIGKILLed while appending leaves every frame before the last whole."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.core.frames import read_frames
from conformance.core.paths import NATIVE_DIR


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path_factory.mktemp("frames") / "frames_driver"
    subprocess.run(
        [gxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE_DIR / 'include'}",
         str(NATIVE_DIR / "tools" / "frames_driver.cpp"), str(NATIVE_DIR / "common" / "frames.cpp"),
         "-o", str(exe)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return exe


@settings(max_examples=25, deadline=None)
@given(st.binary(max_size=5000))
def test_native_crc_is_zlibs(driver: Path, data: bytes) -> None:
    out = subprocess.run([str(driver), "crc"], input=data, capture_output=True, check=True).stdout
    assert int(out) == zlib.crc32(data)


parts = st.lists(st.binary(max_size=80), min_size=1, max_size=3)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 0xFFFF), parts), max_size=10),
    st.integers(0, 0xFFFF),
)
def test_native_round_trip(driver: Path, frames: list[tuple[int, list[bytes]]], flags: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.frames"
        lines = "".join(f"{t} {' '.join(p.hex() or '-' for p in parts)}\n" for t, parts in frames)
        out = subprocess.run([str(driver), "write", str(path), str(flags), "200"], input=lines, text=True,
                             capture_output=True, check=True).stdout.splitlines()  # fmt: skip
        got = read_frames(path)
        expected = [(t, b"".join(parts)) for t, parts in frames]
        kept = [(t, p) for t, p in expected if len(p) <= 200]
        assert got.stopped is None and got.flags == flags
        assert [(f.type, f.payload) for f in got.frames] == kept
        answers = [tuple(map(int, line.split())) for line in out[: len(frames)]]
        placed = iter(got.frames)
        for (_, payload), (offset, index) in zip(expected, answers, strict=True):
            if len(payload) > 200:
                assert (offset, index) == (-1, -1)  # refused whole: no torn frame, later frames still go out
            else:
                f = next(placed)
                assert (offset, index) == (f.offset, f.index)
        refused = sum(len(p) > 200 for _, p in expected)
        assert out[-1] == f"frames {len(kept)} bytes {got.size} refused {refused}"


def test_killed_writer_leaves_every_earlier_frame_whole(driver: Path, tmp_path: Path) -> None:
    path = tmp_path / "spam.frames"
    proc = subprocess.Popen([str(driver), "spam", str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    got = read_frames(path)
    assert got.flags == 7 and len(got.frames) > 10
    ramp = bytes(range(256)) * 18  # frame i holds (i + k) & 0xFF for k < i % 4096: a slice of the ramp
    for f in got.frames:
        n, first = f.index % 4096, f.index & 0xFF
        assert f.type == f.index & 0xFFFF and f.payload == ramp[first : first + n]
    assert got.stopped is None or ": torn: " in got.stopped

