"""Capturing a stopped process through /proc: the module map as the capture keeps it."""

from __future__ import annotations

from emu.procfs import parse_maps

MAPS = """\
555555554000-555555555000 r--p 00000000 08:01 123 /usr/bin/prog with space
555555555000-555555556000 r-xp 00001000 08:01 123 /usr/bin/prog with space
7ffff7fc1000-7ffff7fc2000 r-xp 00000000 00:00 0
7ffff7fc2000-7ffff7fc3000 rw-p 00000000 00:00 0 [heap]
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
"""


def test_maps_lines_become_module_entries() -> None:
    mods = parse_maps(MAPS)
    assert [m.path for m in mods] == [
        "/usr/bin/prog with space", "/usr/bin/prog with space", None, "[heap]", "[stack]",
    ]  # fmt: skip
    anon = mods[2]
    assert anon.anonymous_executable and anon.perms == "r-xp" and anon.build_id is None
    assert not any(m.anonymous_executable for m in mods if m is not anon)
    assert mods[1].offset == 0x1000 and mods[1].start == 0x555555555000
    # the kernel's [vsyscall] page is not process memory a capture could hold
    assert all(m.end < 2**63 for m in mods)
