"""conformance.core.symbols: a profiler's code named by function and file:line (issue 19, attribution)."""

from __future__ import annotations

from pathlib import Path

from conformance.core.symbols import Site, Symbolizer, demangle
from tests.conformance.validator.fixtures import PROFILERS, build_fixture, build_profiler


def test_demangle_names_cxx_symbols_and_leaves_others() -> None:
    assert demangle("_ZN3foo3barEv") == "foo::bar()"
    assert demangle("DllGetClassObject") == "DllGetClassObject"
    assert demangle("_Znot-a-name") == "_Znot-a-name"


def test_an_offset_in_a_fixture_resolves_to_its_function_and_source_line() -> None:
    from elftools.elf.elffile import ELFFile

    so = build_fixture("null_buffer")
    with so.open("rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        init = next(s for s in symtab.iter_symbols()  # type: ignore[union-attr]
                    if "Initialize" in s.name and s["st_info"]["type"] == "STT_FUNC")  # fmt: skip
    start = int(init["st_value"])
    site = Symbolizer().site(str(so), start + 4)
    assert site.function is not None and "Initialize" in site.function and "(" in site.function
    assert site.file is not None and Path(site.file).name == "null_buffer.cpp" and site.line
    source = (PROFILERS / "null_buffer.cpp").read_text().splitlines()
    assert 1 <= site.line <= len(source)
    assert site.text() == f"{site.function} ({site.file}:{site.line})"


def test_without_symbols_or_lines_a_site_is_module_plus_offset(tmp_path: Path) -> None:
    blob = tmp_path / "libstripped.so"
    blob.write_bytes(b"\x7fELF not really")
    site = Symbolizer().site(str(blob), 0x1234, return_address=True)
    assert site == Site(module=str(blob), offset=0x1234)
    assert site.text() == "libstripped.so+0x1234"


def test_a_std_thread_body_is_named_by_its_lambda_and_library_lines_are_below_usr() -> None:
    from conformance.core.symbols import _library, _thread_body

    run = "std::thread::_State_impl<std::thread::_Invoker<std::tuple<{}> > >::_M_run()"
    lam = "logflush::BufferedLog::Start()::{lambda()#1}"
    assert _thread_body(run.format(lam)) == f"{lam} (std::thread body)"
    assert _thread_body(run.format(lam + " ")) == f"{lam} (std::thread body)"  # no stray space
    pointer = run.format("void (*)(int), int")  # only types: libstdc++'s name stays
    assert _thread_body(pointer) == pointer
    assert _library("/usr/include/c++/12/thread") and not _library("/work/p/profiler.cpp")
    assert not _library("/usr/src/app/profiler.cpp") and not _library(None)


def test_of_several_line_rows_at_one_address_the_line_programs_last_holds() -> None:
    """A line program often gives one address several rows (an inlined library call's lines, then the
    profiler's own line that made the call); the last one holds, as for addr2line. Found when a CI checkout
    below /check named the std::thread lambda's line (51) instead of rewrite_every_jit.cpp's RequestReJIT
    (123): sorted by file name, a row from /usr came after the checkout's own."""
    from elftools.elf.elffile import ELFFile

    from conformance.core.symbols import _file_names, _read_module
    from tests.conformance.validator.test_docs_fixtures import DOCS

    so = build_profiler(DOCS / "rewrite_every_jit.cpp", "validator-docs", [DOCS])
    last: dict[int, tuple[str, int]] = {}
    several: set[int] = set()
    with so.open("rb") as fh:
        dwarf = ELFFile(fh).get_dwarf_info()
        for cu in dwarf.iter_CUs():
            program = dwarf.line_program_for_CU(cu)
            files = _file_names(program.header)
            for entry in program.get_entries():
                state = entry.state
                if state is None or state.end_sequence or files[state.file] is None:
                    continue
                row = (str(files[state.file]), int(state.line))
                if int(state.address) in last and last[int(state.address)][0] != row[0]:
                    several.add(int(state.address))
                last[int(state.address)] = row
    module = _read_module(so)
    held = {address: (file, line) for address, file, line in module.lines}  # the last row at each address
    assert several, "no address with rows of two files: the fixture no longer tests this"
    assert {a: held[a] for a in several} == {a: last[a] for a in several}
