"""The one registry of rules: every rule of every layer registers here once, with its clause and layer.

A rule is what turns an observation into a verdict or a finding for one clause of the catalog
(:mod:`clr_model.clauses`): a live judge of the conformance suite, a judge of the emulator's replays, a rule
of the hook checker, a rule the validator holds a recording to, the fuzzer's own heap rule. Each layer's
runner asks this registry for its rules (:func:`rules`); ``profharness clauses --where ID`` reads it to show
where a clause is judged; a test holds the catalog's layer map equal to it (:func:`layer_map`).

Registering is done where the rule is written, with the decorator of its layer:

* ``live`` and ``emu``: :func:`conformance.suite.registry.judge` (a judge of an experiment's run);
* ``hook``: the hook checker's rules (:mod:`emu.hookcheck.rules`) and the suite's judges of the hook
  experiments (:mod:`conformance.checks.hook_abi`);
* ``validator``: :func:`rule` with ``layer=Layer.VALIDATOR`` (:mod:`conformance.validator.rules`);
* ``fuzz``: :func:`rule` with ``layer=Layer.FUZZ`` (:mod:`conformance.fuzz.judge`).

The registry only holds what was registered: importing the module that defines a rule registers it. The
modules of every layer are listed once, in :data:`RULE_MODULES`, for the readers that need all of them
(``clauses --where``, the catalog test); each runner imports its own layer's modules itself.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import linecache
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from clr_model.clauses import CATALOG, Layer

__all__ = [
    "RULE_LAYERS",
    "RULE_MODULES",
    "Layer",
    "Rule",
    "layer_map",
    "load_all",
    "register",
    "rule",
    "rules",
]

#: The layers whose rules register here (the model's own functions are found by ``--where`` in its code).
RULE_LAYERS: tuple[Layer, ...] = (Layer.LIVE, Layer.EMU, Layer.HOOK, Layer.VALIDATOR, Layer.FUZZ)

#: Every module that registers rules, by layer (what :func:`load_all` imports).
RULE_MODULES: dict[Layer, tuple[str, ...]] = {
    Layer.LIVE: (
        "conformance.checks.stack",
        "conformance.checks.async_walks",
        "conformance.checks.buffers",
        "conformance.checks.gc",
        "conformance.checks.hooks",
        "conformance.checks.rejit",
    ),
    Layer.EMU: ("conformance.checks.emu_walks",),
    Layer.HOOK: ("emu.hookcheck.rules", "conformance.checks.hook_abi"),
    Layer.VALIDATOR: ("conformance.validator.rules", "conformance.validator.il_rules"),
    Layer.FUZZ: ("conformance.fuzz.judge",),
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Rule:
    """One rule: the clause it judges, its layer, what it checks and where it is written."""

    clause: str
    layer: Layer
    #: a name unique within its layer and experiment (the function's qualified name, or the checker's rule)
    name: str
    what: str
    #: the callable the layer's runner calls (its signature is the layer's; None: the rule is applied by
    #: code the layer's runner owns, e.g. the hook checker's rules inside its emulation hooks)
    fn: Callable[..., Any] | None
    #: the file and line the rule is written at (what ``--where`` prints)
    path: Path
    line: int
    #: the experiment whose run the rule judges (live, emu and the suite's hook judges)
    experiment: str | None = None
    #: plan entries the rule reads (live and emu judges: entry ids or dotted plan keys)
    uses: tuple[str, ...] = ()


_RULES: list[Rule] = []


def source_of(fn: Callable[..., Any]) -> tuple[Path, int]:
    """The file and first line of a function or class (through decorators): the line
    ``inspect.getsourcelines`` gives. A class's is read from its file parsed once (inspect parses the whole
    file again for every class it is asked about: ~70 ms each for rules.py, 2.6 s of every import of the
    validator's rules)."""
    target = inspect.unwrap(fn)
    path = inspect.getsourcefile(target)
    if path is not None and inspect.isclass(target):
        try:
            stat = os.stat(path)
        except OSError:
            stat = None
        if stat is not None:
            line = _class_lines(path, stat.st_mtime_ns, stat.st_size).get(target.__qualname__)
            if line is not None:
                return Path(path), line
    return Path(path or "?"), inspect.getsourcelines(target)[1]


@functools.lru_cache(maxsize=64)
def _class_lines(path: str, _mtime_ns: int, _size: int) -> dict[str, int]:
    """Each class of the file at ``path`` (as it is now: the key holds its mtime and size) by qualified name:
    its first decorator's line, else its own, for the first class of that name in the file's order (what
    inspect's class finder gives)."""
    lines: dict[str, int] = {}

    def visit(node: ast.AST, stack: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, [*stack, child.name, "<locals>"])
            elif isinstance(child, ast.ClassDef):
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                lines.setdefault(".".join([*stack, child.name]), first)
                visit(child, [*stack, child.name])
            else:
                visit(child, stack)

    visit(ast.parse("".join(linecache.getlines(path))), [])
    return lines


def register(item: Rule) -> Rule:
    """Add ``item``; its clause must be in the catalog and (clause, layer, experiment, name) unique. The same
    rule from the same file and line again (its module imported a second time: pytester drops the modules an
    inner run imported, importlib.reload) takes the earlier one's place."""
    if item.clause not in CATALOG:
        raise ValueError(f"{item.name}: {item.clause} is not a clause of the catalog")
    if item.layer not in RULE_LAYERS:
        raise ValueError(f"{item.name}: rules register on the layers {[str(x) for x in RULE_LAYERS]}")
    key = (item.clause, item.layer, item.experiment, item.name)
    for i, other in enumerate(_RULES):
        if (other.clause, other.layer, other.experiment, other.name) != key:
            continue
        if (other.path, other.line) != (item.path, item.line):
            raise ValueError(f"{item.name}: {item.clause} is registered twice on the {item.layer} layer")
        _RULES[i] = item
        return item
    _RULES.append(item)
    return item


def rule(*clauses: str, layer: Layer, what: str) -> Callable[[F], F]:
    """Register the decorated function as the ``layer`` rule of each of ``clauses`` (a rule that judges
    related clauses with shared state names them all; a finding it makes names one of them)."""
    if not clauses:
        raise ValueError("a rule names at least one clause")

    def add(fn: F) -> F:
        path, line = source_of(fn)
        for clause in clauses:
            register(Rule(clause=clause, layer=layer, name=fn.__qualname__, what=what, fn=fn, path=path,
                          line=line))  # fmt: skip
        return fn

    return add


def load_all(layers: Iterable[Layer] = RULE_LAYERS) -> None:
    """Import every module that registers rules of ``layers``."""
    for layer in layers:
        for module in RULE_MODULES[layer]:
            importlib.import_module(module)


def rules(layer: Layer | None = None, clause: str | None = None) -> list[Rule]:
    """The registered rules (of one layer, of one clause), in registration order. Only what was imported is
    registered: a runner imports its layer's modules first (or calls :func:`load_all`)."""
    return [r for r in _RULES if (layer is None or r.layer is layer) and clause in (None, r.clause)]


def functions(layer: Layer) -> list[Callable[..., Any]]:
    """The distinct callables of one layer's rules, in registration order (a rule of several clauses once)."""
    seen: dict[int, Callable[..., Any]] = {}
    for r in rules(layer):
        if r.fn is not None:
            seen.setdefault(id(r.fn), r.fn)
    return list(seen.values())


def clauses_of(fn: Callable[..., Any]) -> frozenset[str]:
    """The clauses a rule function registered for."""
    return frozenset(r.clause for r in _RULES if r.fn is fn)


def layer_map() -> dict[str, frozenset[Layer]]:
    """clause -> the layers that registered a rule for it, after :func:`load_all`."""
    load_all()
    found: dict[str, set[Layer]] = {}
    for r in _RULES:
        found.setdefault(r.clause, set()).add(r.layer)
    return {c: frozenset(layers) for c, layers in sorted(found.items())}


@contextmanager
def isolated() -> Iterator[None]:
    """Rules registered inside the block are gone after it (tests that register throw-away rules)."""
    kept = list(_RULES)
    try:
        yield
    finally:
        _RULES[:] = kept
