"""Every clause with layer "model" is named by at least one example test and one property test.

A test names a clause by carrying its id in its name (``test_MR2_08_…``, ``test_IL_MAXSTACK_…`` for the IL
checker's rules, which are their own clauses) or in a ``@pytest.mark.clause("MR2-08")`` marker; a property
test is one decorated with hypothesis' ``@given``, or one that calls a helper of its module that runs a
``@given`` function it defines (test_il_properties.py's ``run``). The tests are read with ``ast`` from
tests/clr_model, so renaming or deleting a test shows up here.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from clr_model.catalog.base import PREFIXES
from clr_model.clauses import CATALOG, Layer

HERE = Path(__file__).parent
ID_IN_NAME = re.compile(r"(DSS|FE2|MR2|BUF|REJIT)_(\d{2})")
#: an IL checker rule in a test's name (``test_IL_HEADER_FAT_SIZE_and_IL_HEADER_FLAGS``): upper case runs
IL_IN_NAME = re.compile(r"(?<![A-Za-z0-9])IL(?:_[A-Z0-9]+)+")


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _decorator_name(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_decorator_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _clauses_of(func: ast.FunctionDef) -> set[str]:
    ids = {f"{a}-{b}" for a, b in ID_IN_NAME.findall(func.name)}
    ids |= {m.replace("_", "-") for m in IL_IN_NAME.findall(func.name)} & set(CATALOG)
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and _decorator_name(deco).endswith("mark.clause"):
            ids |= {a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return ids


def _is_given(func: ast.FunctionDef) -> bool:
    return any(_decorator_name(d).split(".")[-1] == "given" for d in func.decorator_list)


def _property_runners(tree: ast.Module) -> set[str]:
    """Module-level helpers that define and run a ``@given`` function (a test calling one is a property
    test)."""
    def runs_given(node: ast.FunctionDef) -> bool:
        inner = (sub for sub in ast.walk(node) if sub is not node)
        return any(isinstance(sub, ast.FunctionDef) and _is_given(sub) for sub in inner)

    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and runs_given(node)}


def _calls_any(func: ast.FunctionDef, names: set[str]) -> bool:
    calls = (n for n in ast.walk(func) if isinstance(n, ast.Call))
    return any(isinstance(n.func, ast.Name) and n.func.id in names for n in calls)


def clause_test_index() -> dict[str, dict[str, list[str]]]:
    """clause id -> {"example": [test names], "property": [test names]}"""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"example": [], "property": []})
    for path in sorted(HERE.glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        runners = _property_runners(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
                continue
            is_property = _is_given(node) or _calls_any(node, runners)
            for clause_id in _clauses_of(node):
                found[clause_id]["property" if is_property else "example"].append(f"{path.name}::{node.name}")
    return found


def test_every_model_clause_has_an_example_and_a_property_test() -> None:
    found = clause_test_index()
    missing = []
    for clause in CATALOG.values():
        if Layer.MODEL not in clause.layers:
            continue
        kinds = found.get(clause.id, {"example": [], "property": []})
        for kind in ("example", "property"):
            if not kinds[kind]:
                missing.append(f"{clause.id}: no {kind} test")
    assert not missing, "\n".join(missing)


def test_tests_name_only_clauses_that_exist() -> None:
    unknown = sorted(set(clause_test_index()) - set(CATALOG))
    assert not unknown, f"tests name clauses the catalog does not define: {unknown}"


def test_catalog_covers_all_four_documents_with_at_least_45_clauses() -> None:
    assert len(CATALOG) >= 45
    assert {c.id.split("-")[0] for c in CATALOG.values()} == set(PREFIXES.values())  # each document has some
    assert {"DSS", "FE2", "MR2", "BUF"} <= set(PREFIXES.values())  # the four contract documents


def test_strategies_are_public_as_one_package() -> None:
    import clr_model.strategies as strategies
    from clr_model.strategies import moved_refs, stacks

    assert strategies.valid_tables is moved_refs.valid_tables
    assert strategies.thread_models is stacks.thread_models
    assert all(hasattr(strategies, name) for name in strategies.__all__)
