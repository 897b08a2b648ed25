"""The probe's own headers: interface vtable slots computed by the compiler, anchored by published facts
(the headers are generated from clr_model/api/interfaces.txt: tests/conformance/codegen); the HRESULT and
flag headers generated from clr_model.hresults / clr_model.flags (one table per fact: never committed,
never redefined by hand)."""

from __future__ import annotations

import csv
import itertools
import re
import shutil
import subprocess
from enum import IntEnum
from pathlib import Path

import pytest

from clr_model import api
from clr_model.flags import CorPrfHighMonitor, CorPrfMonitor, CorPrfSnapshotInfo
from clr_model.hresults import HResult
from conformance.codegen import interfaces
from conformance.core import probe
from conformance.core.paths import NATIVE_DIR

TOOLS = NATIVE_DIR / "tools"
INCLUDE = NATIVE_DIR / "include"
SLOTS_TSV = NATIVE_DIR / "slots.tsv"

#: Published or idl-verified slot facts (counting IUnknown's 3). DoStackSnapshot, SuspendRuntime and
#: ResumeRuntime are the published anchors; the callback facts were counted in corprof.idl.
ANCHORS: list[tuple[str, str, int]] = [
    ("IUnknown", "QueryInterface", 0),
    ("IUnknown", "Release", 2),
    ("ICorProfilerInfo2", "DoStackSnapshot", 36),
    ("ICorProfilerInfo10", "SuspendRuntime", 97),
    ("ICorProfilerInfo10", "ResumeRuntime", 98),
    ("ICorProfilerCallback", "Initialize", 3),
    ("ICorProfilerCallback", "Shutdown", 4),
    ("ICorProfilerCallback2", "GarbageCollectionStarted", 73),
    ("ICorProfilerCallback4", "MovedReferences2", 87),
]


def read_slot_table() -> list[tuple[str, str, int]]:
    with SLOTS_TSV.open(newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        return [(row["interface"], row["method"], int(row["slot"])) for row in reader]


@pytest.fixture(scope="module")
def compiler_slots(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, int]]:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path_factory.mktemp("slots") / "slot_dump"
    subprocess.run(
        [gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", f"-I{TOOLS}",
         str(TOOLS / "slot_dump.cpp"), "-o", str(exe)],
        check=True, capture_output=True, text=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        iface, method, slot = line.split("\t")
        rows.append((iface, method, int(slot)))
    return rows


def test_compiler_slots_equal_slot_table(compiler_slots: list[tuple[str, str, int]]) -> None:
    assert compiler_slots == read_slot_table()


def test_slot_dump_covers_every_declared_method(compiler_slots: list[tuple[str, str, int]]) -> None:
    header = (INCLUDE / "profharness" / "interfaces.h").read_text()
    declared: list[tuple[str, str]] = []
    current = ""
    for line in header.splitlines():
        struct = re.match(r"^struct (\w+)( : public \w+)? \{$", line)
        if struct:
            current = struct.group(1)
        method = re.match(r"^\s+virtual .* STDMETHODCALLTYPE (\w+)\(", line)
        if method:
            declared.append((current, method.group(1)))
    assert declared == [(i, m) for i, m, _ in compiler_slots]
    assert len(declared) > 200


def test_slot_table_anchored_by_published_facts() -> None:
    table = {(i, m): s for i, m, s in read_slot_table()}
    for iface, method, slot in ANCHORS:
        assert table[(iface, method)] == slot, f"{iface}::{method}"


def test_slot_table_is_contiguous_per_interface_chain() -> None:
    rows = read_slot_table()
    by_iface: dict[str, list[int]] = {}
    for iface, _, slot in rows:
        by_iface.setdefault(iface, []).append(slot)
    for iface, slots in by_iface.items():
        assert slots == list(range(slots[0], slots[0] + len(slots))), iface
    # each versioned interface starts right after its predecessor ends
    for family in ("ICorProfilerCallback", "ICorProfilerInfo"):
        chain = [family] + [f"{family}{n}" for n in range(2, 12) if f"{family}{n}" in by_iface]
        for prev, nxt in itertools.pairwise(chain):
            assert by_iface[nxt][0] == by_iface[prev][-1] + 1, (prev, nxt)
        assert by_iface[family][0] == 3


def test_slot_table_rejects_a_missing_method() -> None:
    """The anchors catch a dropped method: removing one Info method shifts DoStackSnapshot."""
    text, n = re.subn(r"(?m)^HRESULT GetObjectSize\(.*\n", "", api.table_text())
    assert n == 1
    rows = [r.split("\t") for r in interfaces.render_slots_tsv(api.parse(text, "mutated")).splitlines()[1:]]
    table = {(i, m): int(s) for i, m, s in rows}
    assert table[("ICorProfilerInfo2", "DoStackSnapshot")] == 35


#: every native source folder: the probe (src), the common library (common) and its headers (include)
NATIVE_SOURCES = ("src", "common", "include")
HRESULT_NAME = r"\b((?:S|E|CLASS_E|CORPROF_E|HRESULT_ERROR)_[A-Z0-9_]+)\b"


def native_sources() -> list[Path]:
    return sorted(p for folder in NATIVE_SOURCES for p in (NATIVE_DIR / folder).rglob("*.*") if p.is_file())


def generated(rel: str) -> str:
    return probe.generated_headers()[rel]


def header_hresults() -> dict[str, int]:
    pattern = r"inline constexpr HRESULT (\w+) = hr_of\(0x([0-9A-F]{8})u\);"
    found = re.findall(pattern, generated("profharness/hresults.h"))
    return {name: int(value, 16) for name, value in found}


def test_generated_hresults_header_equals_model_table() -> None:
    """Every HResult name, in table order, with its value: nothing added, nothing left out."""
    assert list(header_hresults().items()) == [(n, int(m)) for n, m in HResult.__members__.items()]


def test_generated_flags_header_equals_model_tables() -> None:
    pattern = r"inline constexpr (?:DWORD|ULONG32) (\w+) = 0x([0-9A-F]{8})u;"
    found = re.findall(pattern, generated("profharness/flags.h"))
    expected = [
        (name, int(member))
        for table in (CorPrfMonitor, CorPrfHighMonitor, CorPrfSnapshotInfo)
        for name, member in table.__members__.items()
    ]
    assert [(name, int(value, 16)) for name, value in found] == expected


def test_generated_headers_follow_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The header is rendered from the table at build time: a new table entry appears in it."""
    import clr_model.hresults as hresults

    members = {n: int(m) for n, m in HResult.__members__.items()}
    grown = IntEnum("HResult", {**members, "E_NEW_ONE": 0x80001234})
    monkeypatch.setattr(hresults, "HResult", grown)
    assert "inline constexpr HRESULT E_NEW_ONE = hr_of(0x80001234u);" in generated("profharness/hresults.h")


def test_generated_headers_are_not_committed() -> None:
    """They live only in the build folder, so a committed copy can never go stale."""
    for rel in probe.generated_headers():
        assert not (INCLUDE / rel).exists(), f"{INCLUDE / rel} must not be committed (built from the table)"
        assert not (NATIVE_DIR / "src" / Path(rel).name).exists()


def test_probe_sources_use_only_declared_hresults() -> None:
    declared = set(header_hresults())
    used: set[str] = set()
    for path in native_sources():
        used |= set(re.findall(HRESULT_NAME, path.read_text()))
    assert used <= declared, used - declared
    assert {"S_OK", "E_FAIL", "CORPROF_E_UNSUPPORTED_CALL_SEQUENCE"} <= used  # the scan sees the sources


def hand_defined(text: str) -> set[str]:
    """Names a C++ text defines as a constant or macro."""
    constants = re.findall(r"\bconstexpr\s+[\w:<>]+\s+(\w+)\s*[={]", text)
    macros = re.findall(r"^\s*#\s*define\s+(\w+)", text, flags=re.MULTILINE)
    return set(constants) | set(macros)


def test_no_source_defines_an_hresult_or_flag_by_hand() -> None:
    """One table per fact: constants of the Python tables are only defined by the generated headers."""
    sample = "inline constexpr HRESULT S_OK = hr_of(0u);\n#define E_FAIL 1\nconstexpr ULONG32 COR_X{2};\n"
    assert hand_defined(sample) == {"S_OK", "E_FAIL", "COR_X"}
    assert hand_defined(generated("profharness/flags.h")) >= set(CorPrfSnapshotInfo.__members__)
    names = set(HResult.__members__)
    for table in (CorPrfMonitor, CorPrfHighMonitor, CorPrfSnapshotInfo):
        names |= set(table.__members__)
    for path in native_sources():
        clash = hand_defined(path.read_text()) & names
        assert not clash, f"{path.relative_to(NATIVE_DIR)} defines {sorted(clash)}: use the generated header"
