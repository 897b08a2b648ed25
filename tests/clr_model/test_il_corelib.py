"""The IL checker (clr_model/il.py) accepts every method body of the bundled runtimes'
System.Private.CoreLib, read from the assembly (clr_model/il_metadata.py), and says how many it checked;
broken copies of real bodies are caught, so the acceptance is not vacuous."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from clr_model.il import check_body, decode, parse_body
from clr_model.il_metadata import Assembly, MetadataError
from clr_model.il_opcodes import Operand
from conformance.core.runtimes import BUNDLED, Runtime

pytestmark = pytest.mark.live

#: methods with an IL body in each bundled runtime's System.Private.CoreLib (MethodDef rows with an RVA
#: and code type IL; the long test counts them again with dnfile).
BODIES = {"3.1.23": 19586, "8.0.4": 31877}
SAMPLE = 25  # every SAMPLE-th body also gets broken copies


def corelib(runtimes: list[Runtime], version: str) -> Path:
    runtime = next((r for r in runtimes if r.version == version), None)
    if runtime is None:
        pytest.skip(f"runtime {version} is not installed")
    path = runtime.framework_dir / "System.Private.CoreLib.dll"
    if not path.is_file():
        pytest.skip(f"runtime {version} has no {path.name} at {path}")
    return path


@pytest.mark.parametrize("version", [b.version for b in BUNDLED])
def test_il_checker_accepts_every_corelib_body(version: str, runtimes: list[Runtime]) -> None:
    assembly = Assembly(corelib(runtimes, version).read_bytes())
    checked, rejected, broken, caught = 0, [], 0, 0
    for token, image in assembly.method_bodies():
        findings = check_body(image, assembly, token)
        if findings:
            rejected.append(f"0x{token:08X}: {'; '.join(map(str, findings))}")
        checked += 1
        if checked % SAMPLE == 0:
            copies = broken_copies(image)
            broken += len(copies)
            caught += sum(rule in {f.rule for f in check_body(data, assembly, token)}
                          for data, rule in copies)
    print(f"System.Private.CoreLib {version}: {checked} method bodies checked, {len(rejected)} rejected; "
          f"{caught} of {broken} broken copies caught")
    assert not rejected, rejected[:20]
    assert checked == BODIES[version]
    assert broken > 100 and caught == broken


def broken_copies(image: memoryview) -> list[tuple[bytes, str]]:
    """Copies of a real body each broken in one way, with the rule that must catch it: a branch retargeted
    into the middle of a nearby multi-byte instruction; a fat header's max stack set to 0 when the
    first instruction pushes."""
    body, _ = parse_body(image)
    assert body is not None
    start, data = 1 if body.tiny else 12, bytes(image[:body.size])
    instructions, _ = decode(body.code)
    copies: list[tuple[bytes, str]] = []
    for branch in (i for i in instructions if i.opcode.operand in (Operand.BRANCH8, Operand.BRANCH32)):
        inside = next((i.offset + 1 for i in instructions if i.size > 1 and i is not branch
                       and -128 <= i.offset + 1 - branch.end < 128), None)
        if inside is not None:
            at, fmt = start + branch.offset + branch.opcode.size, "<b" if branch.size == 2 else "<i"
            width = struct.calcsize(fmt)
            copies.append((data[:at] + struct.pack(fmt, inside - branch.end) + data[at + width:],
                           "IL-BRANCH-MID-INSTRUCTION"))
            break
    first = instructions[0].opcode if instructions else None
    if not body.tiny and first is not None and first.pops == 0 and first.pushes > 0:
        copies.append((data[:2] + b"\0\0" + data[4:], "IL-MAXSTACK"))
    return copies


@pytest.mark.long
@pytest.mark.parametrize("version", [b.version for b in BUNDLED])
def test_assembly_reader_agrees_with_dnfile(version: str, runtimes: list[Runtime]) -> None:
    """The reader's MethodDef RVAs, flags and signatures equal dnfile's (an independent ECMA-335 reader;
    nightly: dnfile takes many seconds to load CoreLib)."""
    import dnfile

    path = corelib(runtimes, version)
    ours = Assembly(path.read_bytes())
    pe = dnfile.dnPE(str(path))  # type: ignore[no-untyped-call]
    try:
        rows = pe.net.mdtables.MethodDef.rows
        assert len(rows) == ours.rows(0x06)
        for n, row in enumerate(rows, start=1):
            assert (row.struct.Rva, row.struct.ImplFlags) == (ours.cell(0x06, n, 0), ours.cell(0x06, n, 1))
            assert bytes(row.Signature.value) == ours.blob(ours.cell(0x06, n, 4))
        with_body = sum(1 for r in rows if r.struct.Rva and r.struct.ImplFlags & 3 == 0)
        assert with_body == BODIES[version]
    finally:
        pe.close()


SMALL = "System.Runtime.Serialization.Primitives.dll"  # a small real assembly with IL bodies


def test_mutated_assembly_is_read_or_refused_with_one_metadata_error(runtimes: list[Runtime],
                                                                     long_profile: bool) -> None:
    """The reader and the checker are total on a real assembly with one byte changed: the assembly is
    refused with MetadataError, or read, and then every body gets findings (a list), never an exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    runtime = next((r for r in runtimes if r.version == BUNDLED[-1].version), None)
    if runtime is None:
        pytest.skip(f"runtime {BUNDLED[-1].version} is not installed")
    original = (runtime.framework_dir / SMALL).read_bytes()
    assert sum(1 for _ in Assembly(original).method_bodies()) > 10

    root = original.index(b"BSJB")  # the metadata root: most mutations go to the metadata
    last = len(original) - 1
    where = st.one_of(st.integers(0, last), st.integers(root, min(root + 6000, last)))

    @settings(max_examples=3000 if long_profile else 100, derandomize=not long_profile, database=None,
              deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(where, st.integers(0, 255))
    def prop(at: int, value: int) -> None:
        data = bytearray(original)
        data[at] = value
        try:
            assembly = Assembly(bytes(data))
            bodies = list(assembly.method_bodies())
        except MetadataError:
            return
        for token, image in bodies:
            assert isinstance(check_body(image, assembly, token), list)

    prop()


@pytest.mark.long
@pytest.mark.parametrize("version", [b.version for b in BUNDLED])
def test_il_checker_accepts_every_body_of_the_shared_framework(version: str, runtimes: list[Runtime]) -> None:
    """Nightly: every method body of every assembly of the runtime's shared framework (about a minute per
    runtime); the count is printed."""
    framework = corelib(runtimes, version).parent
    checked, rejected = 0, []
    for path in sorted(framework.glob("*.dll")):
        assembly = Assembly(path.read_bytes())
        for token, image in assembly.method_bodies():
            checked += 1
            findings = check_body(image, assembly, token)
            if findings:
                rejected.append(f"{path.name} 0x{token:08X}: {'; '.join(map(str, findings))}")
    print(f"shared framework {version}: {checked} method bodies checked, {len(rejected)} rejected")
    assert not rejected, rejected[:20]
    assert checked > BODIES[version]
