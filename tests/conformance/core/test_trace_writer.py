"""The common trace writer's buffered mode (issue 23, include/profharness/trace.h): per-thread buffers drained
by a writer thread. Driven through a small program compiled against common/trace.cpp and common/json.cpp:
many threads write at once, and the file must hold every record once, in seq order, each thread's records in
the order it wrote them; the size cap and PROFHARNESS_FAULT behave as in the synchronous mode; a record
taken before a SIGKILL that the owner flushed is in the file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.core.binary_trace import read_binary
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR
from conformance.core.trace import read_trace

FORMATS = ("jsonl", "binary")

DRIVER = r"""
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <unistd.h>
#include "profharness/trace.h"
using namespace profharness;
// usage: driver PATH MODE THREADS RECORDS [flush-then-kill]
int main(int argc, char** argv) {
    TraceWriter* w = new TraceWriter();
    std::string err;
    if (!w->open(argv[1], err)) { std::fprintf(stderr, "%s\n", err.c_str()); return 2; }
    if (std::strcmp(argv[2], "buffered") == 0) w->start_writer();
    const int threads = std::atoi(argv[3]), records = std::atoi(argv[4]);
    if (threads == 0) {  // every kind of value, once each
        Json odd = Json::object();
        odd.set("name", "values").set("neg", Json(-5))
            .set("big", Json(std::uint64_t{18446744073709551615ull}))
            .set("min", Json(std::int64_t{-9223372036854775807ll - 1}))
            .set("half", Json(0.5)).set("two", Json(2.0)).set("huge", Json(1e300))
            .set("tiny", Json(-3.25e-7)).set("nan", Json(0.0 / 0.0)).set("t", true)
            .set("f", false).set("nil", Json()).set("text", "caf\xc3\xa9 \"q\" \\ \n\t\x01 \xe2\x82\xac")
            .set("empty", "").set("eo", Json::object()).set("ea", Json::array())
            .set("mixed", Json::array().push(Json(1)).push("s")
                              .push(Json::object().set("k", Json::array().push(Json())))
                              .push(Json(-1.5)).push(Json(false)))
            .set("name2", "values");
        w->write("mark", odd);
        w->write("mark", odd);  // the second time: every string and the shape interned
        Json other = Json::object();
        other.set("name", "values").set("neg", "now a string");
        w->write("mark", other);
        w->write("end", Json::object());
    }
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([w, t, records] {
            for (int k = 0; k < records; ++k) {
                if (k % 3 == 2) {
                    w->write_deferred("mark", [t, k] {
                        return Json::object().set("name", "rec").set("t", t).set("k", k)
                            .set("deferred", true);
                    });
                } else {
                    Json f = Json::object();
                    f.set("name", "rec").set("t", t).set("k", k)
                        .set("pad", std::string(static_cast<std::size_t>(k % 7) * 5, 'x'));
                    if (k % 2) w->write("mark", std::move(f)); else w->write("mark", f);
                }
            }
        });
    for (auto& t : ts) t.join();
    w->flush();
    if (argc > 5) ::kill(getpid(), SIGKILL);
    std::printf("%lld\n", static_cast<long long>(w->count()));
    return 0;  // the atexit handler flushes
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++")
    folder = tmp_path_factory.mktemp("trace-writer")
    source = folder / "driver.cpp"
    source.write_text(DRIVER)
    exe = folder / "driver"
    common = NATIVE_DIR / "common"
    subprocess.run(
        [gxx, "-std=c++17", "-O1", "-pthread", f"-I{NATIVE_DIR / 'include'}", str(source),
         str(common / "trace.cpp"), str(common / "json.cpp"), str(common / "frames.cpp"), "-o", str(exe)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return exe


def _run(
    driver: Path, path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PROFHARNESS_")}
    full.update(env or {})
    command = [str(driver), str(path), *args]
    return subprocess.run(command, env=full, capture_output=True, text=True, timeout=120)


def _records(path: Path) -> list[dict[str, object]]:
    if path.read_bytes()[:8] == b"PHFRAMES":
        trace = read_binary(path)
        assert trace.problem is None
        return trace.records
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["sync", "buffered"])
def test_every_record_once_in_seq_order_each_thread_in_its_order(
    driver: Path, tmp_path: Path, mode: str, fmt: str
) -> None:
    path = tmp_path / "t.jsonl"
    done = _run(driver, path, mode, "6", "3000", env={"PROFHARNESS_TRACE_FORMAT": fmt})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "18000"
    records = _records(path)
    assert [r["seq"] for r in records] == list(range(18000))
    by_thread: dict[object, list[object]] = {}
    os_tids: dict[object, set[object]] = {}
    for r in records:
        by_thread.setdefault(r["t"], []).append(r["k"])
        os_tids.setdefault(r["t"], set()).add(r["os_tid"])
        assert r["kind"] == "mark" and r["deferred"] is True if r["k"] % 3 == 2 else "pad" in r  # type: ignore[operator]
    assert by_thread == {t: list(range(3000)) for t in range(6)}
    # each thread's records carry its own OS thread id (asked of the kernel once per thread, then cached)
    assert all(len(tids) == 1 for tids in os_tids.values()), os_tids
    assert len(set().union(*os_tids.values())) == 6


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["sync", "buffered"])
def test_size_cap_one_notice_then_nothing(driver: Path, tmp_path: Path, mode: str, fmt: str) -> None:
    path = tmp_path / "t.jsonl"
    env = {"PROFHARNESS_TRACE_MAX_BYTES": "50000", "PROFHARNESS_TRACE_FORMAT": fmt}
    done = _run(driver, path, mode, "3", "2000", env=env)
    assert done.returncode == 0, done.stderr
    records = _records(path)
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert records[-1]["kind"] == "probe_error" and records[-1]["where"] == "trace"
    assert all(r["kind"] == "mark" for r in records[:-1])
    notice = records[-1]
    assert notice["cap"] == 50000 and notice["bytes"] <= 50000  # type: ignore[operator]
    # the records before the notice fit under the cap, and one more would not have (cap - bytes < a record)
    assert 50000 - notice["bytes"] < 200, notice  # type: ignore[operator]
    assert path.stat().st_size <= 50000 + 400
    assert int(done.stdout) == len(records)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("signame", ["KILL", "SEGV", "ABRT"])
def test_buffered_fault_mid_record_keeps_every_earlier_record(
    driver: Path, tmp_path: Path, signame: str, fmt: str
) -> None:
    path = tmp_path / "t.jsonl"
    env = {"PROFHARNESS_FAULT": f"record:1234:{signame}", "PROFHARNESS_TRACE_FORMAT": fmt}
    done = _run(driver, path, "buffered", "4", "1000", env=env)
    assert done.returncode == -getattr(signal, f"SIG{signame}")
    trace = read_trace(path)
    assert trace.problem is None
    assert [r.seq for r in trace.records] == list(range(1234)) and trace.torn_tail


@pytest.mark.parametrize("fmt", FORMATS)
def test_buffered_flush_before_sigkill_loses_nothing(driver: Path, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "t.jsonl"
    done = _run(driver, path, "buffered", "4", "2500", "kill", env={"PROFHARNESS_TRACE_FORMAT": fmt})
    assert done.returncode == -signal.SIGKILL
    assert [r["seq"] for r in _records(path)] == list(range(10000))


@pytest.mark.parametrize("mode", ["sync", "buffered"])
def test_binary_reads_back_as_the_json_lines(driver: Path, tmp_path: Path, mode: str) -> None:
    """Every kind of value (negative, u64 max, i64 min, doubles JSON prints as integers or not, NaN, escapes,
    UTF-8, empty and nested containers, a key whose type changes between records) and a single-thread
    run of many records: the binary trace decodes to the records json.loads makes of the JSON trace."""
    got = {}
    for fmt in FORMATS:
        path = tmp_path / f"{fmt}.trace"
        for args in (("0", "0"), ("1", "500")):
            done = _run(driver, path, mode, *args, env={"PROFHARNESS_TRACE_FORMAT": fmt})
            assert done.returncode == 0, done.stderr
            got[fmt, args] = [{k: v for k, v in r.items() if k != "os_tid"} for r in _records(path)]
    for args in (("0", "0"), ("1", "500")):
        assert got["binary", args] == got["jsonl", args]
        assert got["binary", args]
    values = got["binary", ("0", "0")][0]
    assert values["big"] == 2**64 - 1 and values["min"] == -(2**63) and values["two"] == 2
    assert isinstance(values["two"], int) and values["nan"] is None and values["text"].startswith("café")


def test_binary_bad_format_name_fails_open(driver: Path, tmp_path: Path) -> None:
    done = _run(driver, tmp_path / "t", "sync", "1", "1", env={"PROFHARNESS_TRACE_FORMAT": "xml"})
    assert done.returncode == 2 and "PROFHARNESS_TRACE_FORMAT=xml is not jsonl or binary" in done.stderr


def test_binary_torn_and_corrupt_through_every_reader(driver: Path, tmp_path: Path) -> None:
    """One reader for both formats: read_trace, the validator's stream and `profharness trace dump` keep every
    complete record of a binary trace cut in its last frame (torn, not a problem) and stop with file:number
    at a flipped byte."""
    from conformance.validator.stream import read_records

    path = tmp_path / "t.bin"
    done = _run(driver, path, "sync", "1", "300", env={"PROFHARNESS_TRACE_FORMAT": "binary"})
    assert done.returncode == 0, done.stderr
    data = path.read_bytes()
    whole = read_trace(path)
    assert whole.problem is None and not whole.torn_tail and len(whole.records) == 300
    assert [n for n, _ in read_records(path)] == list(range(1, 301))
    dumped = subprocess.run([sys.executable, "-m", "conformance", "trace", "dump", "--jsonl", str(path)],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert [json.loads(line) for line in dumped.stdout.splitlines()] == _records(path)
    people = subprocess.run([sys.executable, "-m", "conformance", "trace", "dump", str(path)],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert len(people.stdout.splitlines()) == 300 and " mark " in people.stdout

    torn = tmp_path / "torn.bin"
    torn.write_bytes(data[:-3])
    cut = read_trace(torn)
    assert cut.problem is None and cut.torn_tail and [r.seq for r in cut.records] == list(range(299))
    assert len(list(read_records(torn))) == 299

    bad = tmp_path / "bad.bin"
    middle = len(data) // 2
    bad.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    broken = read_trace(bad)
    # the CRC covers a frame's payload; a flipped header byte is a wrong length, type or reserved field
    assert broken.problem is not None and re.search("corrupt|does not decode|torn", broken.problem.what)
    assert 0 < len(broken.records) < 300 and broken.problem.line == len(broken.records) + 1
    with pytest.raises(HarnessError, match=rf"{bad}:{len(broken.records) + 1}: "):
        list(read_records(bad))
    failed = subprocess.run([sys.executable, "-m", "conformance", "trace", "dump", str(bad)],
                            capture_output=True, text=True)  # fmt: skip
    assert failed.returncode == 3 and broken.problem.what in failed.stderr
    assert "Traceback" not in failed.stderr
    for at in range(16, len(data), 97):  # a flipped byte anywhere: a problem or a torn tail, never a crash
        flipped = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :]
        bad.write_bytes(flipped)
        got = read_trace(bad)
        assert got.problem is not None or got.torn_tail or len(got.records) == 300, at
