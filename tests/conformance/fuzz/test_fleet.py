"""Issue 22, item 4: fleets. ``fuzz --database redis://HOST:PORT/N`` keeps the examples in hypothesis'
Redis example database, so a failure one machine finds is replayed first by every other.

The two-process test runs Debian's ``redis-server`` on loopback (``./dev setup`` installs it); it is marked
``live`` so that in CI (``PROFHARNESS_REQUIRE_LIVE=1``) a missing server fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.core.errors import InputError
from conformance.fuzz.database import redis_address
from conformance.fuzz.machine import fuzz
from tests.conformance.fuzz.fixtures import CLSID, build

ROOT = Path(__file__).resolve().parents[3]
#: the first process's seed: mr2_off_by_one fails at its 3rd example (in the observed world)
FINDER_SEED = 2
#: the second process's seed: alone, mr2_off_by_one fails at its 44th example (checked below)
REPLAYER_SEED = 3


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://localhost:notaport/0", "the port is not a number from 0 to 65535"),
        ("redis://:6379/0", "names no host"),
        ("redis://localhost:6379/zero", "the database 'zero' is not a number"),
        ("redis://localhost:6379/0?db=1", "with no '?' or '#' part"),
        ("http://localhost:6379/0", "not a folder nor a redis://HOST:PORT/N URL"),
        ("", "names no folder nor redis://HOST:PORT/N URL"),
    ],
)
def test_a_bad_redis_url_is_one_line(url: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["fuzz", str(build("noop")), "--clsid", CLSID, "--database", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--database {url!r}: " in err and says in err


def test_without_the_redis_package_a_redis_url_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    url = "redis://127.0.0.1:6379/0"
    assert cli_main(["fuzz", str(build("noop")), "--clsid", CLSID, "--database", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the 'redis' Python package is not installed (pip install redis)" in err


def test_a_redis_url_names_host_port_and_database() -> None:
    assert redis_address("redis://10.0.0.7:7000/3") == ("10.0.0.7", 7000, 3)
    assert redis_address("redis://cache.example") == ("cache.example", 6379, 0)
    with pytest.raises(InputError):
        redis_address("redis://h:70000/0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_redis_server_that_does_not_answer_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    assert cli_main(["fuzz", str(build("noop")), "--clsid", CLSID, "--database", url]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Redis server answers at 127.0.0.1:" in err


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A fresh redis-server on a free loopback port (no persistence), its URL; stopped after."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (./dev setup installs Debian's redis-server)")
    pytest.importorskip("redis", reason="the redis Python package is not installed (pip install redis)")
    import redis

    port = _free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None:
                    pytest.fail(f"redis-server exited with {proc.returncode} on port {port}")
                time.sleep(0.05)
        else:
            pytest.fail(f"redis-server did not answer on port {port}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


def _fuzz_process(lib: Path, url: str, seed: int, reproducer: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "conformance", "fuzz", str(lib), "--clsid", CLSID, "--seed", str(seed),
         "--max-examples", "500", "--no-shrink", "--database", url, "--reproducer", str(reproducer)],
        cwd=reproducer.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.live
def test_two_fuzz_processes_on_one_redis_database_replay_each_others_failures(
    tmp_path: Path, redis_url: str
) -> None:
    """The first process finds MR2-17 in mr2_off_by_one and saves the example in Redis; the second, started
    after with another seed (alone it fails late: its 44th example), fails at its first: the very example the
    first found (the same bytes), read from the shared database before it generates any."""
    lib = build("mr2_off_by_one")
    alone = fuzz(lib, CLSID, max_examples=500, seed=REPLAYER_SEED, shrink=False)
    assert alone.first_failure is not None and alone.first_failure > 5, "a seed that finds it late by itself"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    found = _fuzz_process(lib, redis_url, FINDER_SEED, first)
    assert found.returncode == 1 and "MR2-17" in found.stdout, found.stdout + found.stderr
    replayed = _fuzz_process(lib, redis_url, REPLAYER_SEED, second)
    assert replayed.returncode == 1 and "MR2-17" in replayed.stdout, replayed.stdout + replayed.stderr
    assert "first failing example: #1;" in replayed.stdout
    program = json.loads(first.read_text())["program"]
    assert program is not None and json.loads(second.read_text())["program"] == program
