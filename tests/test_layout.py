"""The layout rules of issue 7, read from the sources with ``ast`` so that they cannot drift:

- a file's layer is its folder: argparse only in ``conformance/cli``; judges only in ``conformance/checks``
  (the registry's ``judge`` decorator is applied nowhere else);
- the harness core and the adapters import neither the suite nor the CLI, so the emulator and the
  validator can use them alone; the model imports nothing of the harness;
- no class name stands for two different things across the packages.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("clr_model", "conformance", "emu")


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py") if "native" not in p.parts)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_argparse_only_in_the_cli_package() -> None:
    offenders = [
        rel(p)
        for p in sources(*PACKAGES)
        if "argparse" in imported_modules(p) and not rel(p).startswith("conformance/cli/")
    ]
    assert not offenders, f"argparse outside conformance/cli: {offenders}"


def test_core_and_adapters_import_neither_the_suite_nor_the_cli() -> None:
    offenders = []
    for path in sources("conformance/core", "conformance/adapters"):
        bad = sorted(
            m
            for m in imported_modules(path)
            if m.startswith(("conformance.suite", "conformance.cli", "conformance.checks"))
        )
        if bad:
            offenders.append(f"{rel(path)}: {bad}")
    assert not offenders, offenders


def test_the_model_imports_nothing_of_the_harness() -> None:
    offenders = [
        f"{rel(p)}: {sorted(m for m in imported_modules(p) if m.startswith(('conformance', 'emu')))}"
        for p in sources("clr_model")
        if any(m.startswith(("conformance", "emu")) for m in imported_modules(p))
    ]
    assert not offenders, offenders


def test_judges_are_registered_only_in_the_checks_package() -> None:
    offenders = []
    for path in sources("conformance"):
        if rel(path).startswith(("conformance/checks/", "conformance/suite/registry.py")):
            continue
        if "conformance.suite.registry.judge" in imported_modules(path):
            offenders.append(rel(path))
    assert not offenders, f"judges registered outside conformance/checks: {offenders}"


def test_no_class_name_names_two_different_things() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sources(*PACKAGES):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{rel(path)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice


def test_the_validator_builds_on_core_adapters_the_emulator_and_the_model_alone() -> None:
    """Issue 10/20: conformance/validator may import the core, the adapters, the emulator (the hook checker,
    in-process) and clr_model, not the suite, the checks or the CLI (so it runs in users' CI without the
    conformance suite)."""
    offenders = []
    for path in sources("conformance/validator"):
        bad = sorted(
            m
            for m in imported_modules(path)
            if m.startswith(("conformance.suite", "conformance.cli", "conformance.checks"))
        )
        if bad:
            offenders.append(f"{rel(path)}: {bad}")
    assert not offenders, offenders


#: the layers, lowest first: a module may import its own layer and those below it, never one above
LAYERS: tuple[tuple[str, ...], ...] = (
    ("clr_model",),
    ("conformance/core", "conformance/codegen"),
    ("emu",),
    ("conformance/adapters",),
    ("conformance/validator", "conformance/fuzz", "conformance/checks", "conformance/suite"),
    ("conformance/fuzz_runtime",),
    ("conformance/cli",),
)
#: within a layer: the suite's registry and verdicts are what the checks register with; the
#: validator and the fuzzer share the validator's rules; nothing else crosses between these folders
SIDEWAYS: dict[str, tuple[str, ...]] = {
    "conformance/core": ("conformance.codegen",),  # the probe build writes the generated constants
    "conformance/codegen": ("conformance.core.paths",),
    "conformance/validator": (),
    "conformance/fuzz": ("conformance.validator",),
    "conformance/checks": ("conformance.suite.registry", "conformance.suite.verdicts"),
    "conformance/suite": ("conformance.suite",),
}


def _layer_of(module: str) -> int | None:
    path = module.replace(".", "/")
    for i, folders in enumerate(LAYERS):
        if any(path == f or path.startswith(f + "/") for f in folders):
            return i
    return None


def test_no_module_imports_a_layer_above_its_own() -> None:
    """Issue 20: no lower layer imports a higher one (static imports), and the checks, the suite, the
    validator and the fuzzer only reach sideways where :data:`SIDEWAYS` says."""
    offenders = []
    for path in sources(*PACKAGES):
        mine = _layer_of(rel(path).removesuffix(".py"))
        if mine is None:
            continue
        folder = next(f for f in LAYERS[mine] if rel(path).startswith(f + "/") or rel(path) == f + ".py"
                      or rel(path).startswith(f))  # fmt: skip
        for module in imported_modules(path):
            theirs = _layer_of(module)
            if theirs is None or theirs < mine:
                continue
            if theirs > mine:
                offenders.append(f"{rel(path)} imports {module} (a higher layer)")
            elif not module.replace(".", "/").startswith(folder) and not module.startswith(
                SIDEWAYS.get(folder, ())
            ):
                offenders.append(f"{rel(path)} imports {module} (sideways)")
    assert not offenders, "\n".join(offenders)


def test_no_layer_calls_the_cli() -> None:
    """Issue 20: nothing outside conformance/cli (and the package's ``__main__``, the CLI's door) runs the CLI
    (``conformance.cli`` named in an import or in a string for a child process): a layer that needs
    another's work imports it."""
    offenders = [
        rel(p)
        for p in sources("clr_model", "emu", "conformance")
        if not rel(p).startswith("conformance/cli/")
        and rel(p) != "conformance/__main__.py"
        and "conformance.cli" in p.read_text()
    ]
    assert not offenders, offenders


def test_the_generator_builds_on_the_model_alone() -> None:
    """conformance/codegen renders the model's tables (the core's probe build imports it): it imports
    clr_model and its own modules, and conformance.core.paths for where the native sources are."""
    offenders = []
    for path in sources("conformance/codegen"):
        bad = sorted(
            m
            for m in imported_modules(path)
            if m.startswith(("conformance", "emu"))
            and not m.startswith(("conformance.codegen", "conformance.core.paths"))
        )
        if bad:
            offenders.append(f"{rel(path)}: {bad}")
    assert not offenders, offenders


#: modules that may list API method names, and why they are not facts of the API
NAME_LISTS_ALLOWED = {
    # the buffers-basic scenario's own plan: which methods it probes, how the scenario knows each answer
    "conformance/checks/buffers.py",
}


def api_name_lists(text: str, where: str, names: frozenset[str]) -> list[str]:
    """The literals of a module's ``text`` (sets, tuples, lists, dict keys) made of two or more API method
    names and nothing else, as ``where:line: names``."""
    found = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        strings = [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        hits = [s for s in strings if s in names]
        if len(hits) >= 2 and len(hits) == len(strings):
            found.append(f"{where}:{node.lineno}: {hits}")
    return sorted(found)


def api_method_names() -> frozenset[str]:
    from clr_model import api

    return frozenset(m.name for m in (*api.callbacks(), *api.info_methods()))


def test_api_facts_live_in_the_api_table_alone() -> None:
    """One table of API facts (clr_model/api/interfaces.txt): no other module lists ICorProfilerCallback* or
    ICorProfilerInfo* method names as a set, tuple, list or dict (ask clr_model.api for them instead)."""
    names = api_method_names()
    offenders = [
        hit
        for path in sources(*PACKAGES)
        if not rel(path).startswith("clr_model/api/") and rel(path) not in NAME_LISTS_ALLOWED
        for hit in api_name_lists(path.read_text(encoding="utf-8"), rel(path), names)
    ]
    assert not offenders, offenders


def test_the_runtime_modules_are_named_in_one_table() -> None:
    """Issue 20: the runtime's native modules (libcoreclr, libclrjit...) were listed twice, differently
    (the capture writer's places and the replay's model): emu.capture.RUNTIME_MODULES is the one table."""
    import re

    name = re.compile(r"^lib(coreclr|clrjit|clrgc|mscordaccore)(\.so)?$")
    found = []
    for path in sources(*PACKAGES):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and name.match(node.value):
                found.append(f"{rel(path)}:{node.lineno}")
    assert found and all(f.startswith("emu/capture.py:") for f in found), found


def test_the_name_list_scan_finds_planted_lists() -> None:
    planted = (
        'GC = frozenset({"GarbageCollectionStarted", "MovedReferences2"})\n'
        'MIXED = ("ForceGC", "x")\n'
        'D = {"ThreadCreated": "threadId", "ThreadDestroyed": "threadId"}\n'
        'ONE = ["ForceGC"]\n'
    )
    hits = api_name_lists(planted, "planted.py", api_method_names())
    assert [h.split(":")[1] for h in hits] == ["1", "3"]
