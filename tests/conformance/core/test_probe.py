"""conformance.core.probe: build + cache the probe (key over the sources and the generated headers; the
cache's sealing, locking and repair shown on the smallest target, the preload); the built .so's exports, class
factory, QueryInterface, Initialize without a trace, and its trace writer (driven through the COM vtable from
a subprocess); the static common library linked into another shared library."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from enum import IntEnum
from pathlib import Path

import pytest

from clr_model.hresults import HResult
from conformance.codegen import constants
from conformance.core import probe
from conformance.core.errors import HarnessError
from conformance.core.paths import NATIVE_DIR
from conformance.validator import build

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("cmake") is None, reason="needs g++ and cmake"
)


@pytest.fixture(scope="module")
def probe_so() -> Path:
    """The probe in the harness's cache: built there once for every test that loads it."""
    return probe.build_probe()


def build_small(what: str = "preload") -> Path:
    """A cache entry built by the same code as the probe's (:func:`probe.build_target`) for the smallest
    target, the signal-safety preload (one source file): the cache's own behaviour, without a probe build."""
    return probe.build_target(build.PRELOAD_TARGET, build.PRELOAD_FILE_NAME, what)


def test_build_lands_in_cache_under_key(probe_so: Path) -> None:
    assert probe_so.name == probe.PROBE_FILE_NAME
    assert probe_so.parent.name == probe.build_key()
    assert probe_so.parent.parent.name == "probe"


def test_cached_build_is_reused(probe_so: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFHARNESS_CACHE", str(probe_so.parent.parent.parent))
    before = probe_so.stat().st_mtime_ns
    assert probe.build_probe() == probe_so
    assert probe_so.stat().st_mtime_ns == before


def test_key_changes_with_sources(tmp_path: Path) -> None:
    copy = tmp_path / "native"
    shutil.copytree(NATIVE_DIR, copy)
    key = probe.build_key(copy)
    assert key == probe.build_key(NATIVE_DIR)
    (copy / "common" / "json.cpp").write_text((copy / "common" / "json.cpp").read_text() + "\n// changed\n")
    assert probe.build_key(copy) != key


def test_key_changes_with_the_hresult_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated header is part of the key: a change to clr_model/hresults.py rebuilds the probe."""
    import clr_model.hresults as hresults

    key = probe.build_key()
    members = {n: int(m) for n, m in HResult.__members__.items()}
    monkeypatch.setattr(hresults, "HResult", IntEnum("HResult", {**members, "E_FAIL": 0x80004006}))
    assert probe.build_key() != key
    monkeypatch.setattr(hresults, "HResult", IntEnum("HResult", members))
    assert probe.build_key() == key


def test_a_broken_generator_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> dict[str, str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(constants, "outputs", boom)
    expected = r"^conformance\.codegen\.constants: cannot generate the constant headers: RuntimeError: boom$"
    with pytest.raises(HarnessError, match=expected):
        probe.build_key()


def test_build_failure_names_first_error_and_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFHARNESS_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "native"
    shutil.copytree(NATIVE_DIR, copy)
    (copy / "common" / "json.cpp").write_text("this is not C++;\n")
    with pytest.raises(HarnessError) as info:
        probe.build_probe(copy)
    message = info.value.message
    assert "json.cpp" in message and "error" in message
    log = Path(message.rsplit("full log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "this is not C++" in log.read_text()
    # nothing half-built is left in the cache
    assert not list((tmp_path / "cache" / "probe").glob("*/" + probe.PROBE_FILE_NAME))


def test_first_error_line_falls_back_to_last_line() -> None:
    log = "a\nfoo.cpp:3:1: error: bad\nb: error: later\n"
    assert probe.first_error_line(log) == "foo.cpp:3:1: error: bad"
    assert probe.first_error_line("one\ntwo\n\n") == "two"
    assert probe.first_error_line("") == "no output"


def test_concurrent_builds_share_one_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFHARNESS_CACHE", str(tmp_path / "cache"))
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(build_small())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results)) == 1 and results[0].is_file()
    entries = [p for p in (tmp_path / "cache" / "preload").iterdir() if p.is_dir()]
    assert [p.name for p in entries] == [probe.build_key()]


def test_only_the_documented_symbols_are_exported(probe_so: Path) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed")
    cmd = [nm, "-D", "--defined-only", str(probe_so)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    functions = {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}
    # the seam documents every export (docs/design.md, "Exports of the probe .so")
    design = (Path(__file__).parents[3] / "docs" / "design.md").read_text()
    documented = set(re.findall(r'extern "C" \S+ (profharness_\w+)\(', design))
    assert {"profharness_mark", "profharness_record_count"} <= documented
    assert functions == {"DllGetClassObject"} | documented


# The driver runs in a subprocess (the probe keeps process-wide state): it calls the probe through its
# exports and the COM vtables with ctypes, as the runtime would, and prints JSON results.
DRIVER = r'''
import ctypes, json, sys, uuid
lib = ctypes.CDLL(sys.argv[1])
out = {}
def guid(s):
    return (ctypes.c_ubyte * 16).from_buffer_copy(uuid.UUID(s).bytes_le)
def call(obj, slot, restype, *args):
    vtbl = ctypes.cast(obj, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p))).contents
    fn = ctypes.CFUNCTYPE(restype, ctypes.c_void_p, *[type(a) for a in args])(vtbl[slot])
    return fn(obj, *args)
def u32(v): return v & 0xFFFFFFFF
def ref(x): return ctypes.c_void_p(ctypes.addressof(x))
lib.profharness_mark.restype = ctypes.c_int32
lib.profharness_mark.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
def u16(t): return None if t is None else (t.encode('utf-16-le') + b'\0\0')  # char16_t, not wchar_t
lib.profharness_record_count.restype = ctypes.c_int64
lib.DllGetClassObject.restype = ctypes.c_int32
out["mark_before_init"] = lib.profharness_mark(u16("x"), None)
IID_IClassFactory = guid("00000001-0000-0000-C000-000000000046")
CLSID = guid(sys.argv[2])
factory = ctypes.c_void_p()
NO_CLSID = guid("00000000-0000-0000-0000-000000000001")
out["wrong_clsid"] = u32(lib.DllGetClassObject(NO_CLSID, IID_IClassFactory, ref(factory)))
out["get_factory"] = u32(lib.DllGetClassObject(CLSID, IID_IClassFactory, ref(factory)))
cb = ctypes.c_void_p()
IID_CB2 = guid("8A8CC829-CCF2-49FE-BBAE-0F022228071A")
out["create_cb2"] = u32(call(factory, 3, ctypes.c_int32, ctypes.c_void_p(), IID_CB2, ref(cb)))
qi = {}
for name, iid in [("cb4", "7B63B2E3-107D-4D48-B2F6-F61E229470D2"),
                  ("cb11", "42350846-AAED-47F7-B128-FD0C98881CDE"),
                  ("info2", "CC0935CD-A518-487D-B0BB-A93214E65478")]:
    p = ctypes.c_void_p()
    qi[name] = u32(call(cb, 0, ctypes.c_int32, guid(iid), ref(p)))
out["qi"] = qi
mode = sys.argv[3]
out["initialize"] = u32(call(cb, 3, ctypes.c_int32, ctypes.c_void_p()))  # Initialize(NULL): no runtime
if mode == "trace":
    out["mark"] = lib.profharness_mark(u16("walk-now"), u16("payload \u00e9"))
    gens = (ctypes.c_int32 * 3)(1, 0, 1)
    call(cb, 73, ctypes.c_int32, ctypes.c_int(3), gens, ctypes.c_int32(1))  # GarbageCollectionStarted
    olds = (ctypes.c_size_t * 300)(*range(1000, 1300)); news = (ctypes.c_size_t * 300)(*range(2000, 2300))
    lens = (ctypes.c_size_t * 300)(*([16] * 300))
    n = ctypes.c_uint32(300)
    out["moved2"] = u32(call(cb, 87, ctypes.c_int32, n, olds, news, lens))  # MovedReferences2
    call(cb, 75, ctypes.c_int32)  # GarbageCollectionFinished
    call(cb, 4, ctypes.c_int32)   # Shutdown
    out["records"] = lib.profharness_record_count()
print(json.dumps(out))
'''


def drive(probe_so: Path, mode: str, env: dict[str, str]) -> dict[str, object]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROFHARNESS_")}
    full_env.update(env)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(probe_so), probe.CLSID.strip("{}"), mode],
        capture_output=True, text=True, env=full_env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_class_factory_and_query_interface(probe_so: Path) -> None:
    out = drive(probe_so, "no-trace", {})
    assert out["mark_before_init"] == -1
    assert out["wrong_clsid"] == HResult.CLASS_E_CLASSNOTAVAILABLE
    assert out["get_factory"] == HResult.S_OK
    assert out["create_cb2"] == HResult.S_OK
    assert out["qi"] == {"cb4": HResult.S_OK, "cb11": HResult.S_OK, "info2": HResult.E_NOINTERFACE}
    # without PROFHARNESS_TRACE the probe declines (the runtime then runs unprofiled)
    assert out["initialize"] == HResult.E_FAIL


def test_trace_records_from_vtable_calls(probe_so: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    plan = {
        "version": 1, "event_mask": 0x100000C0,
        "record": ["GarbageCollectionStarted", "MovedReferences2"], "count": ["ObjectReferences"],
        "experiments": [
            {"id": "bad", "at": "mark:walk-now", "run": "no_such_experiment"},
            {"id": "walk", "at": "mark:walk-now", "run": "stack_snapshot"},
        ],
    }
    out = drive(probe_so, "trace", {"PROFHARNESS_TRACE": str(trace), "PROFHARNESS_PLAN": json.dumps(plan)})
    assert out["initialize"] == HResult.S_OK
    assert out["mark"] == 0
    lines = trace.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert out["records"] == len(records)
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert all({"seq", "kind", "os_tid", "tid"} <= r.keys() for r in records)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "header" and kinds[-1] == "end"
    header = records[0]
    assert header["plan"] == plan and header["context_size"] == 1232 and header["runtime"] is None
    errors = [r["what"] for r in records if r["kind"] == "probe_error"]
    assert "unknown experiment no_such_experiment" in errors
    assert any("ICorProfilerInfo" in e for e in errors)  # no runtime behind Initialize(NULL)
    mark = next(r for r in records if r["kind"] == "mark")
    assert mark["name"] == "walk-now" and mark["payload"] == "payload \u00e9"
    gc = next(r for r in records if r["kind"] == "callback" and r["name"] == "GarbageCollectionStarted")
    assert gc["args"] == {"cGenerations": 3, "generationCollected": [True, False, True], "reason": 1}
    moved = next(r for r in records if r["kind"] == "callback" and r["name"] == "MovedReferences2")
    args = moved["args"]
    assert args["cMovedObjectIDRanges"] == 300 and args["truncated"] is True
    assert args["old"] == list(range(1000, 1256)) and args["new"] == list(range(2000, 2256))
    assert args["len"] == [16] * 256
    counts = [r for r in records if r["kind"] == "counts"]
    assert len(counts) == 2  # at GarbageCollectionFinished and at Shutdown
    assert counts[-1]["counts"]["MovedReferences2"] == 1 and counts[-1]["counts"]["ObjectReferences"] == 0


def test_bad_plan_is_reported_not_fatal(probe_so: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    out = drive(probe_so, "trace", {"PROFHARNESS_TRACE": str(trace), "PROFHARNESS_PLAN": "{not json"})
    assert out["initialize"] == HResult.S_OK
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert any(r["kind"] == "probe_error" and "not JSON" in r["what"] for r in records)
    assert records[-1]["kind"] == "end"


# A stand-in for a recording proxy: a shared library of its own, linking only profharness_common. It writes
# a trace through the common TraceWriter (with its own managed-thread source) and holds a fake COM object in
# a ComHolder, whose Release must run exactly once when the holder goes out of scope.
PROXY_SOURCE = r"""
#include <cstdint>
#include "profharness/com.h"
#include "profharness/hresults.h"
#include "profharness/trace.h"
using namespace profharness;
namespace {
struct Counted : IUnknown {
    int refs = 1, releases = 0;
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID, void**) override { return E_NOINTERFACE; }
    ULONG STDMETHODCALLTYPE AddRef() override { return static_cast<ULONG>(++refs); }
    ULONG STDMETHODCALLTYPE Release() override { ++releases; return static_cast<ULONG>(--refs); }
};
Json seven() { return Json(7); }
}
extern "C" __attribute__((visibility("default"))) std::int64_t proxy_run(const char* path) {
    TraceWriter trace(&seven);
    std::string err;
    if (!trace.open(path, err)) return -1;
    Counted obj;
    {
        ComHolder<IUnknown> held(&obj);
        ComHolder<IUnknown> moved(std::move(held));
        Json f = Json::object();
        f.set("held", Json(static_cast<bool>(moved))).set("released_inside", Json(obj.releases));
        trace.write("proxy", f);
    }
    Json f = Json::object();
    f.set("releases", Json(obj.releases)).set("e_fail", Json(static_cast<std::uint32_t>(E_FAIL)));
    trace.write("proxy", f);
    return trace.count();
}
"""


def test_common_library_links_into_another_shared_library(tmp_path: Path) -> None:
    build = tmp_path / "build"
    generated = tmp_path / "generated"
    probe.write_generated_headers(generated)
    cmake = shutil.which("cmake") or "cmake"
    subprocess.run(
        [cmake, "-S", str(NATIVE_DIR), "-B", str(build), f"-DPROFHARNESS_GENERATED_DIR={generated}"],
        check=True, capture_output=True, text=True, timeout=600,
    )
    subprocess.run(
        [cmake, "--build", str(build), "--target", "profharness_common"],
        check=True, capture_output=True, text=True, timeout=600,
    )
    archive = build / "libprofharness_common.a"
    assert archive.is_file()
    source = tmp_path / "proxy.cpp"
    source.write_text(PROXY_SOURCE)
    proxy = tmp_path / "libproxy.so"
    done = subprocess.run(
        ["g++", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
         f"-I{NATIVE_DIR / 'include'}", f"-I{generated}", str(source), str(archive), "-o", str(proxy)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr  # a non-PIC archive fails to link here
    trace = tmp_path / "proxy.jsonl"
    script = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.proxy_run.restype = ctypes.c_int64;"
        "print(lib.proxy_run(sys.argv[2].encode()))"
    )
    out = subprocess.run([sys.executable, "-c", script, str(proxy), str(trace)],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "2"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["seq"], r["kind"], r["tid"]) for r in records] == [(0, "proxy", 7), (1, "proxy", 7)]
    assert (records[0]["held"], records[0]["released_inside"]) == (True, 0)
    assert records[1]["releases"] == 1 and records[1]["e_fail"] == HResult.E_FAIL


def test_a_corrupted_cache_entry_is_detected_by_its_hash_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROFHARNESS_CACHE", str(tmp_path / "cache"))
    built = build_small()
    good = built.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0xFF
    built.write_bytes(bytes(damaged))  # a bad disk, a killed copy, a hand edit
    again = build_small()
    assert again == built and again.read_bytes() != bytes(damaged)
    aside = [p.name for p in (tmp_path / "cache" / "preload").iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1  # the damaged entry is kept aside for inspection, not reused
