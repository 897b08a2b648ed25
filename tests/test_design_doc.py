"""docs/design.md names every folder of the packages: each Python package folder (one with ``__init__.py``),
each folder of the native parts and each data folder under ``clr_model/``, ``conformance/`` and ``emu/`` is
mentioned by its path (``conformance/validator/``), so a new folder cannot land without its paragraph.

A folder counts when it holds a file (at any depth, caches aside): a folder left holding only
``__pycache__`` after a branch switch is no folder of the project. The scenario folders
(``conformance/scenarios/NAME/``, ``conformance/validator/scenarios/NAME/``) are described once, by their
parent.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
PACKAGES = ("clr_model", "conformance", "emu")
#: folder names that are never the project's own (caches, build metadata)
SKIPPED = ("__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis")


def _skipped(path: Path) -> bool:
    return path.name in SKIPPED or path.name.endswith(".egg-info")


def _holds_a_file(folder: Path) -> bool:
    for entry in folder.iterdir():
        if _skipped(entry):
            continue
        if entry.is_file() or (entry.is_dir() and _holds_a_file(entry)):
            return True
    return False


def package_folders(root: Path = ROOT) -> list[str]:
    """Every folder of the packages, as ``path/`` relative to ``root``, in walking order."""
    found: list[str] = []

    def walk(folder: Path) -> None:
        found.append(folder.relative_to(root).as_posix() + "/")
        if folder.name == "scenarios":  # one folder per scenario: described by their parent
            return
        for entry in sorted(folder.iterdir()):
            if entry.is_dir() and not _skipped(entry) and _holds_a_file(entry):
                walk(entry)

    for name in PACKAGES:
        walk(root / name)
    return found


def mentioned(path: str, text: str) -> bool:
    """``path`` (``conformance/validator/``) appears in ``text`` as itself: not as the start of a longer path
    (``conformance/validator/rules.py`` or ``conformance/validator/scenarios/`` do not name the folder)."""
    return re.search(rf"(?<![\w/.-]){re.escape(path)}(?![\w-]|\.\w)", text) is not None


def test_design_doc_mentions_every_package_folder() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    missing = [path for path in package_folders() if not mentioned(path, text)]
    assert not missing, f"docs/design.md does not mention these package folders: {', '.join(missing)}"


def test_every_python_package_is_walked() -> None:
    """The walk reaches every folder with ``__init__.py`` (and the native folders): none is skipped."""
    walked = set(package_folders())
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for name in PACKAGES
                for p in (ROOT / name).rglob("__init__.py")}  # fmt: skip
    assert packages <= walked, sorted(packages - walked)
    native = {f"conformance/native/{n}/" for n in ("common", "src", "include", "proxy", "fakeruntime",
                                                  "tools")}  # fmt: skip
    assert native <= walked, sorted(native - walked)


def test_a_new_folder_is_named_and_a_longer_path_does_not_count(tmp_path: Path) -> None:
    """A planted package folder is found; a mention of a file in it, or of a subfolder, does not count."""
    for name in PACKAGES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "conformance" / "newpart" / "deep").mkdir(parents=True)
    (tmp_path / "conformance" / "newpart" / "__init__.py").write_text("")
    (tmp_path / "conformance" / "newpart" / "deep" / "x.cpp").write_text("")
    (tmp_path / "emu" / "stale" / "__pycache__").mkdir(parents=True)
    (tmp_path / "emu" / "stale" / "__pycache__" / "old.pyc").write_bytes(b"")
    folders = package_folders(tmp_path)
    new = ["conformance/newpart/", "conformance/newpart/deep/"]
    assert folders == ["clr_model/", "conformance/", *new, "emu/"]
    text = "See `conformance/newpart/deep/x.cpp` and conformance/newpart/deep/, and emu/."
    assert [f for f in folders if not mentioned(f, text)] == ["clr_model/", "conformance/", new[0]]


def test_every_clause_id_prefix_is_named_in_the_clause_ids_section() -> None:
    """The "Clause ids" section names every id prefix of the catalog's vocabulary (``base.PREFIXES``), as
    `PREFIX`: a new document's family cannot land unexplained."""
    from clr_model.catalog.base import PREFIXES

    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## Clause ids"):]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    named = set(re.findall(r"`([A-Z][A-Z0-9]{1,5})(?:-NAME)?`", section))
    assert set(PREFIXES.values()) <= named, sorted(set(PREFIXES.values()) - named)
