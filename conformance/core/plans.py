"""Probe plans as the harness writes them (format: docs/design.md, "The plan").

A plan may name flags and HRESULTs instead of spelling their numbers; :func:`resolve_plan` turns the names
into the numbers the probe reads (the probe itself reads only numbers). Each name comes from one table:

- ``event_mask``: an int, a COR_PRF_MONITOR name or a list of them, OR-ed (``clr_model.flags.CorPrfMonitor``);
- ``event_mask_hi``: the same with COR_PRF_HIGH_MONITOR names (``clr_model.flags.CorPrfHighMonitor``);
- ``replies.<callback>``: an int or an HRESULT name (``clr_model.hresults.HResult``);
- ``experiments[i].args.<arg>`` for the arguments in :data:`SYMBOLIC_ARGS`: ``infoFlags`` takes
  COR_PRF_SNAPSHOT_INFO names like ``event_mask`` (``clr_model.flags.CorPrfSnapshotInfo``), ``abortReply``
  an HRESULT name.

Integers pass unchanged (a plan may still ask for bits no name covers, e.g. an undefined infoFlags bit), so
resolving is idempotent. An unknown name, or a value of the wrong type, is a :class:`HarnessError` naming the
plan, the key path, the name and the table the names come from.

Containment (issue 13): a plan holds no paths. The probe writes only the trace the harness names in
``PROFHARNESS_TRACE`` (inside the run's folder), and no plan value is a file the probe or the harness opens,
so a string that spells a path out of the run's folder (absolute, ``~``, or with a ``..`` part) is refused
wherever it is, with its key path: it can only be a mistake or a plan meant for another harness.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any

from clr_model.flags import CorPrfHighMonitor, CorPrfMonitor, CorPrfSnapshotInfo
from clr_model.hresults import HResult
from conformance.core.errors import HarnessError, InputError


@dataclass(frozen=True)
class Vocabulary:
    """Where a plan value's names come from."""

    #: what a name stands for, as the API calls it (``COR_PRF_MONITOR flag``)
    what: str
    table: type[IntEnum] | type[IntFlag]
    #: the table's module and class, for error messages
    source: str
    #: flags: a list of names OR-ed together; an HRESULT: one name
    flags: bool

    @property
    def a_name(self) -> str:
        """``a COR_PRF_MONITOR flag name``, ``an HRESULT name``."""
        return f"{'an' if self.what.startswith('HRESULT') else 'a'} {self.what} name"

    def value_of(self, name: str) -> int | None:
        member = self.table.__members__.get(name)
        return None if member is None else int(member)


MONITOR = Vocabulary("COR_PRF_MONITOR flag", CorPrfMonitor, "clr_model/flags.py CorPrfMonitor", flags=True)
HIGH_MONITOR = Vocabulary(
    "COR_PRF_HIGH_MONITOR flag", CorPrfHighMonitor, "clr_model/flags.py CorPrfHighMonitor", flags=True
)
SNAPSHOT_INFO = Vocabulary(
    "COR_PRF_SNAPSHOT_INFO flag", CorPrfSnapshotInfo, "clr_model/flags.py CorPrfSnapshotInfo", flags=True
)
HRESULT = Vocabulary("HRESULT", HResult, "clr_model/hresults.py HResult", flags=False)

#: Top-level plan keys that take names.
SYMBOLIC_KEYS: Mapping[str, Vocabulary] = {"event_mask": MONITOR, "event_mask_hi": HIGH_MONITOR}
#: Experiment ``args`` that take names, by argument name (the probe's experiments read these with
#: ``int_arg``): ``infoFlags`` is DoStackSnapshot's COR_PRF_SNAPSHOT_INFO argument (stack_snapshot,
#: stack_walk, stack_seeded, async_cross_walk, async_signal_walk); ``abortReply`` is the HRESULT the
#: StackSnapshotCallback returns at ``abortAt`` (stack_walk).
SYMBOLIC_ARGS: Mapping[str, Vocabulary] = {"infoFlags": SNAPSHOT_INFO, "abortReply": HRESULT}


def _fail(where: str, path: str, message: str) -> HarnessError:
    return InputError(f"{where}: {path}: {message}")


def _name(vocab: Vocabulary, name: str, where: str, path: str) -> int:
    value = vocab.value_of(name)
    if value is None:
        close = difflib.get_close_matches(name, list(vocab.table.__members__), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise _fail(where, path, f"unknown {vocab.what} name {name!r} (names: {vocab.source}{hint})")
    return value


def resolve_value(vocab: Vocabulary, value: Any, where: str = "plan", path: str = "value") -> int:
    """One plan value as a number: an int unchanged, a name (or, for flags, a list of names OR-ed)."""
    if isinstance(value, bool):
        raise _fail(where, path, f"{value!r} is not a number or {vocab.a_name}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return _name(vocab, value, where, path)
    if vocab.flags and isinstance(value, list):
        total = 0
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _fail(where, f"{path}[{i}]", f"{item!r} is not {vocab.a_name}")
            total |= _name(vocab, item, where, f"{path}[{i}]")
        return total
    shape = f"an integer or {vocab.a_name}" + (", or a list of them" if vocab.flags else "")
    raise _fail(where, path, f"{value!r} must be {shape} ({vocab.source})")


def _looks_like_a_path_out(text: str) -> bool:
    """An absolute path, a home-relative one, or one with a ``..`` part (``a/../b``, ``..``)."""
    return text.startswith(("/", "~")) or ".." in text.replace("\\", "/").split("/")


def refuse_paths(node: Any, where: str, path: str = "") -> None:
    """Raise a one-line :class:`HarnessError` at the first string (key or value) of ``node`` that spells a
    path out of the run's folder (see the module docstring)."""
    if isinstance(node, str):
        if _looks_like_a_path_out(node):
            raise _fail(
                where,
                path or "plan",
                f"{node[:80]!r} is a path out of the run's folder; a plan holds no paths "
                "(the probe writes only the trace the harness names)",
            )
    elif isinstance(node, Mapping):
        for key, value in node.items():
            label = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _looks_like_a_path_out(key):
                raise _fail(where, label, "the key is a path out of the run's folder; a plan holds no paths")
            refuse_paths(value, where, label)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            refuse_paths(item, where, f"{path}[{i}]")


def resolve_plan(plan: Mapping[str, Any], where: str = "plan") -> dict[str, Any]:
    """The plan with every symbolic name replaced by its value (a copy; the input is not changed).

    ``where`` names the plan in error messages (its file, or the experiment it belongs to). Only the places
    listed in the module docstring are resolved; everything else (including a shape the probe will reject
    and report as a ``probe_error``) is copied unchanged.
    """
    if not isinstance(plan, Mapping):
        raise InputError(f"{where}: a plan must be a JSON object, not {type(plan).__name__}")
    refuse_paths(plan, where)
    out: dict[str, Any] = copy.deepcopy(dict(plan))
    for key, vocab in SYMBOLIC_KEYS.items():
        if key in out:
            out[key] = resolve_value(vocab, out[key], where, key)
    replies = out.get("replies")
    if isinstance(replies, dict):
        for callback, reply in replies.items():
            replies[callback] = resolve_value(HRESULT, reply, where, f"replies.{callback}")
    experiments = out.get("experiments")
    if isinstance(experiments, list):
        for i, entry in enumerate(experiments):
            args = entry.get("args") if isinstance(entry, dict) else None
            if not isinstance(args, dict):
                continue
            label = f"experiments[{i}]" + (f" ({entry['id']})" if isinstance(entry.get("id"), str) else "")
            for arg, vocab in SYMBOLIC_ARGS.items():
                if arg in args:
                    args[arg] = resolve_value(vocab, args[arg], where, f"{label}.args.{arg}")
    return out


def flag_names(vocab: Vocabulary, value: int) -> list[str] | None:
    """The names whose OR is ``value`` (the zero-valued name for 0), or None when some bit has no name."""
    if not vocab.flags:
        raise ValueError(f"{vocab.what} values are not flags")
    members = [(n, int(m)) for n, m in vocab.table.__members__.items()]
    if value == 0:
        return [n for n, v in members if v == 0][:1] or None
    names = [n for n, v in members if v and value & v == v]
    covered = 0
    for n in names:
        covered |= int(vocab.table.__members__[n])
    return names if covered == value else None
