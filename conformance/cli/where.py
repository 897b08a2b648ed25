"""Where a clause lives: every hop from the catalog to the expectation files, derived from the code.

``profharness clauses --where ID`` prints it. Nothing here is kept by hand: the catalog entry and the model
functions are found with :mod:`ast`, the rules, the judges and their plan entries come from the one registry
(:mod:`conformance.core.registry`), the native experiment rows are found by their name in the probe's
experiment tables, the tests by their ``pytest.mark.clause`` marker or their name, the expectation entries
by the loader.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conformance.core.paths import EXPECTATIONS_DIR, NATIVE_DIR, PACKAGE_DIR, SCENARIOS_DIR

ROOT = PACKAGE_DIR.parent
MODEL_DIR = ROOT / "clr_model"
TESTS_DIR = ROOT / "tests"

#: the hop kinds, in the order a clause travels through them: a "rule" is a rule of the validator, the fuzzer
#: or the hook checker, a "judge" a judge of one of the suite's experiments (live, emu or hook)
HOPS: tuple[str, ...] = ("catalog", "model", "rule", "judge", "plan", "native", "test", "expectation")


@dataclass(frozen=True)
class Hop:
    kind: str
    path: str  # relative to the repository root where possible
    line: int
    what: str

    def render(self) -> str:
        return f"  {self.kind:<12}{self.path}:{self.line}  {self.what}"


def _rel(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def _cites(clause: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(clause)}(?!\d)")


@functools.lru_cache(maxsize=1024)
def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


@functools.lru_cache(maxsize=1024)
def _parse(path: Path) -> ast.Module | None:
    """A file's syntax tree (cached: ``--where`` for every clause reads each file once)."""
    try:
        return ast.parse(_read(path), filename=str(path))
    except SyntaxError:
        return None


# --- catalog and model ---------------------------------------------------------------------------------


def catalog_hops(clause: str) -> list[Hop]:
    """The ``id = "ID"`` line of the ``[[clause]]`` table in ``clr_model/catalog/*.toml`` that defines it."""
    from clr_model.clauses import CATALOG

    line = re.compile(rf'^id\s*=\s*"{re.escape(clause)}"\s*$', re.M)
    hops = []
    for path in sorted((MODEL_DIR / "catalog").glob("*.toml")):
        at = _line_of(path, line)
        if at:
            item = CATALOG.get(clause)
            hops.append(Hop("catalog", _rel(path), at, item.title if item else ""))
    return hops


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _defs(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _DEFS):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _defs(node, f"{name}.")
        else:
            yield from _defs(node, prefix)


def _own_text(lines: list[str], node: ast.AST) -> str:
    """The source of a def without the defs nested in it (so a citation is credited to the innermost)."""
    start, end = node.lineno - 1, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    keep = [True] * (end - start)
    for child in ast.walk(node):
        if child is not node and isinstance(child, _DEFS):
            for i in range(child.lineno - 1, child.end_lineno or child.lineno):
                if start <= i < end:
                    keep[i - start] = False
    decorators = getattr(node, "decorator_list", [])
    first = min([d.lineno - 1 for d in decorators] + [start])
    return "\n".join(lines[first:start] + [line for line, k in zip(lines[start:end], keep, strict=True) if k])


@functools.lru_cache(maxsize=1)
def _model_index() -> tuple[tuple[str, int, str, str], ...]:
    """(path, line, "def name", own text) of every function and class of ``clr_model`` (not the catalog)."""
    found = []
    for path in sorted(MODEL_DIR.rglob("*.py")):
        if "catalog" in path.relative_to(MODEL_DIR).parts:
            continue
        tree = _parse(path)
        if tree is None:
            continue
        lines = _read(path).splitlines()
        for name, node in _defs(tree):
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            found.append((_rel(path), node.lineno, f"{kind} {name}", _own_text(lines, node)))
    return tuple(found)


def model_hops(clause: str) -> list[Hop]:
    """Functions and classes of ``clr_model`` (not the catalog) whose body or docstring cites the id."""
    pattern = _cites(clause)
    return [
        Hop("model", path, line, what) for path, line, what, text in _model_index() if pattern.search(text)
    ]


# --- judges, plan entries, native rows -----------------------------------------------------------------


def _line_of(path: Path, pattern: re.Pattern[str], after: int = 0) -> int:
    """The line (1-based) where ``pattern`` first matches after line ``after``; 0 when it does not."""
    text = _read(path)
    offset = sum(len(line) for line in text.splitlines(keepends=True)[:after])
    match = pattern.search(text, offset)
    return text.count("\n", 0, match.start()) + 1 if match else 0


def _plan_entry_line(plan_path: Path, name: str) -> int:
    """The line of a plan entry id, or of the last key of a dotted plan path, in a plan.json."""
    if "." not in name:
        found = _line_of(plan_path, re.compile(rf'"id"\s*:\s*"{re.escape(name)}"'))
        return found or _line_of(plan_path, re.compile(rf'"{re.escape(name)}"\s*:'))
    line = 0
    for part in name.split("."):
        line = _line_of(plan_path, re.compile(rf'"{re.escape(part)}"\s*:'), after=line)
        if not line:
            return 0
    return line


def _module_path(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def _native_rows(run: str) -> list[Hop]:
    pattern = re.compile(rf'\{{\s*"{re.escape(run)}"\s*,')
    hops = []
    for path in sorted((NATIVE_DIR / "src").glob("experiments*.cpp")):
        line = _line_of(path, pattern)
        if line:
            hops.append(Hop("native", _rel(path), line, f"experiment row {run!r}"))
    return hops


def registry_hops(clause: str) -> list[Hop]:
    """Rules and judges (the one registry), the plan entries the judges use (scenario plan.json) and the
    native rows those run."""
    from clr_model.clauses import Layer
    from conformance.core import registry
    from conformance.core.scenarios import load_scenario
    from conformance.suite.orchestrate import effective_plan
    from conformance.suite.registry import specs

    registry.load_all()
    by_id = {spec.id: spec for spec in specs()}
    rules: list[Hop] = []
    judges: list[Hop] = []
    plans: list[Hop] = []
    natives: list[Hop] = []
    for rule in registry.rules(clause=clause):
        path = _rel(rule.path)
        if rule.experiment is None:
            rules.append(Hop("rule", path, rule.line, f"{rule.layer.value} {rule.name}: {rule.what}"))
            continue
        judges.append(Hop("judge", path, rule.line, f"{rule.name} on {rule.experiment}: {rule.what}"))
        spec = by_id.get(rule.experiment)
        if spec is None or rule.layer not in (Layer.LIVE, Layer.EMU):
            continue
        plan_path = SCENARIOS_DIR / spec.scenario / "plan.json"
        plan = effective_plan(spec.build(), load_scenario(spec.scenario))
        entries = {str(e.get("id")): e for e in plan.get("experiments", []) if isinstance(e, dict)}
        for name in rule.uses:
            line = _plan_entry_line(plan_path, name)
            where, at = plan_path, line
            top = name.split(".")[0]
            if not line or (spec.plan_overlay and top in spec.plan_overlay):
                where = _module_path(spec.module)
                at = _line_of(where, re.compile(rf"experiment\(\s*\"{re.escape(spec.id)}\""))
            run = entries.get(name, {}).get("run")
            what = f"{name} ({spec.id})" + (f" runs {run}" if run else "")
            plans.append(Hop("plan", _rel(where), at, what))
            if isinstance(run, str):
                natives.extend(h for h in _native_rows(run) if h not in natives)
    return rules + judges + plans + natives


# --- tests and expectations ----------------------------------------------------------------------------


def _marked_clauses(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    found = set()
    for deco in node.decorator_list:
        if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("mark.clause"):
            found |= {a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


@functools.lru_cache(maxsize=1)
def _test_index() -> tuple[tuple[str, int, str, frozenset[str]], ...]:
    """(path, line, name, clauses of its markers) of every test function under ``tests/``."""
    found = []
    for path in sorted(TESTS_DIR.rglob("test_*.py")) if TESTS_DIR.is_dir() else []:
        tree = _parse(path)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                found.append((_rel(path), node.lineno, node.name, frozenset(_marked_clauses(node))))
    return tuple(found)


def test_hops(clause: str) -> list[Hop]:
    """Tests citing the id: a ``pytest.mark.clause("ID")`` marker, or the id in the test's name
    (``dss05`` or ``DSS_05``, ``VAL_THREAD_AT_SHUTDOWN``, any case)."""
    prefix, _, rest = clause.partition("-")
    rest = re.escape(rest.lower().replace("-", "_"))
    in_name = re.compile(rf"(?<![a-z0-9]){prefix.lower()}_?{rest}(?![\da-z])")
    return [
        Hop("test", path, line, name)
        for path, line, name, marked in _test_index()
        if clause in marked or in_name.search(name.lower())
    ]


def expectation_hops(clause: str, directory: Path | None = None) -> list[Hop]:
    from conformance.suite.expectations import load_expectations

    return [
        Hop(
            "expectation",
            _rel(entry.file),
            entry.line,
            f"{'/'.join(s.value for s in entry.status)} on {', '.join(entry.runtimes)}"
            f" ({len(entry.disagreements)} disagreement line(s))",
        )
        for entry in load_expectations(directory or EXPECTATIONS_DIR).of_clause(clause)
    ]


def where(clause: str) -> list[Hop]:
    """Every hop of a clause, in :data:`HOPS` order."""
    hops = catalog_hops(clause) + model_hops(clause) + registry_hops(clause) + test_hops(clause)
    hops += expectation_hops(clause)
    return sorted(hops, key=lambda h: HOPS.index(h.kind))


def render(clause: str, title: str, hops: list[Hop]) -> str:
    lines = [f"{clause}: {title}"]
    for kind in HOPS:
        mine = [h for h in hops if h.kind == kind]
        if not mine:
            lines.append(f"  {kind:<12}(none)")
        lines.extend(h.render() for h in mine)
    return "\n".join(lines)


def to_json(clause: str, title: str, hops: list[Hop]) -> dict[str, Any]:
    return {"id": clause, "title": title, "hops": {k: [asdict(h) for h in hops if h.kind == k] for k in HOPS}}


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
