"""One identity scheme for managed functions: (module file name, metadata token).

A FunctionID is a per-process pointer: it can be neither predicted nor compared across runs. What the
scenario's ground truth (reflection: ``MethodBase.MetadataToken``, ``Module.Name``), the probe
(GetFunctionInfo + GetModuleInfo) and any other layer (the emulator's fake runtime, the validator's
recording proxy) can all name is the method's metadata token in its module, so a function *is* its
:class:`FunctionKey`. :class:`FunctionIdentities` gives each key a model FunctionID (1, 2, ... in the order
the ground truth introduces them) and translates observed FunctionIDs through :class:`ObservedNames` (what
the probe resolved during the run); an observed function the ground truth does not know gets its own model
id, never one of a known function.

This module imports only the trace model: the emulator and the validator use it without the suite or
the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from conformance.core.trace import Trace

__all__ = ["FOREIGN_BASE", "FunctionIdentities", "FunctionKey", "ObservedNames", "short_label"]

#: model FunctionIDs of observed functions the ground truth does not know start here
FOREIGN_BASE = 1 << 62


def _file_name(module: str) -> str:
    """The file name of a module path (either separator): ``/run/x/app.dll`` -> ``app.dll``."""
    return module.replace("\\", "/").rsplit("/", 1)[-1]


class FunctionKey(NamedTuple):
    """A managed function as every layer can name it."""

    module: str  # the module's file name, no directory ("app.dll")
    token: int  # the method's metadata token (0x06xxxxxx)

    @classmethod
    def of(cls, module: str, token: int) -> FunctionKey:
        return cls(_file_name(module), token)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> FunctionKey | None:
        """From a record with ``module`` and ``token`` (a reflection frame, a resolved frame); None when
        either is missing."""
        module, token = entry.get("module"), entry.get("token")
        if not module or token is None:
            return None
        return cls.of(str(module), int(token))

    def __str__(self) -> str:
        return f"{self.module} token {self.token:#010x}"


def short_label(label: str) -> str:
    """``ProfHarness.Scenarios.StackWalks::Leaf`` -> ``StackWalks::Leaf`` (the last namespace part)."""
    type_name, sep, method = label.rpartition("::")
    return f"{type_name.rsplit('.', 1)[-1]}{sep}{method}" if sep else label


def _label_of(entry: Mapping[str, Any]) -> str | None:
    if entry.get("type") or entry.get("method"):
        return f"{entry.get('type') or '?'}::{entry.get('method') or '?'}"
    return None


@dataclass
class ObservedNames:
    """Observed FunctionID -> :class:`FunctionKey` (and a label when the probe resolved one)."""

    keys: dict[int, FunctionKey] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Learn from one resolved frame: ``{"funcId", "module", "token", "type", "method"}``."""
        func_id = int(entry.get("funcId") or 0)
        if func_id == 0:
            return
        key = FunctionKey.from_entry(entry)
        if key is not None:
            self.keys.setdefault(func_id, key)
        label = _label_of(entry)
        if label is not None:
            self.labels.setdefault(func_id, label)

    @classmethod
    def from_entries(cls, entries: Iterable[Mapping[str, Any]]) -> ObservedNames:
        names = cls()
        for entry in entries:
            names.add(entry)
        return names

    @classmethod
    def from_trace(cls, trace: Trace) -> ObservedNames:
        """Every FunctionID the probe resolved in the run (the ``out.frames`` of its DoStackSnapshot calls:
        FunctionIDs are stable within a process, so a walk recorded without resolution uses these)."""
        return cls.from_entries(
            frame
            for call in trace.calls("DoStackSnapshot")
            for frame in call.out.get("frames") or []
            if isinstance(frame, dict)
        )


@dataclass
class FunctionIdentities:
    """Model FunctionIDs of the functions of one comparison, keyed by :class:`FunctionKey`."""

    ids: dict[FunctionKey, int] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)
    _foreign: dict[int, int] = field(default_factory=dict)

    def model_id(self, key: FunctionKey, label: str) -> int:
        """The model FunctionID of a ground-truth function (the same key gets the same id)."""
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
            self.labels[self.ids[key]] = label
        return self.ids[key]

    def observed(self, func_id: int, names: ObservedNames) -> int:
        """The model FunctionID of an observed one: 0 stays 0 (unmanaged code); a function the ground truth
        knows gets its id; any other gets a foreign id of its own (the same FunctionID, the same id)."""
        if func_id == 0:
            return 0
        key = names.keys.get(func_id)
        if key is not None and key in self.ids:
            return self.ids[key]
        if func_id not in self._foreign:
            foreign = FOREIGN_BASE + len(self._foreign)
            self._foreign[func_id] = foreign
            label = names.labels.get(func_id)
            self.labels[foreign] = label or (str(key) if key is not None else "[unknown function]")
        return self._foreign[func_id]

    def label(self, model_id: int) -> str:
        if model_id == 0:
            return "[unmanaged]"
        return self.labels.get(model_id, "[unknown function]")

    def short_labels(self) -> dict[int, str]:
        """Model FunctionID -> short label, for the model's messages (stable across runs)."""
        return {fid: short_label(label) for fid, label in self.labels.items()}
