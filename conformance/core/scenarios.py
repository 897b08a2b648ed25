"""C# scenario apps: load them, compile them with mcs (cached by content), lay out a run folder.

A scenario is a folder ``conformance/scenarios/NAME/`` with one or more ``.cs`` files (``app.cs`` holds
``Main`` and starts with a ``//`` comment describing the scenario) and ``plan.json``, the default probe
plan (format in docs/design.md). The helpers in ``scenarios/_common/*.cs`` are compiled into every scenario.

Apps are compiled once, against the **3.1** reference assemblies (mcs cannot read 8.0's CoreLib), and the
same ``app.dll`` runs on every runtime; ``app.runtimeconfig.json`` picks the runtime.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from conformance.core.errors import HarnessError, InputError
from conformance.core.fsio import read_text_file
from conformance.core.paths import SCENARIOS_DIR, cache_dir, sealed_build
from conformance.core.plans import resolve_plan
from conformance.core.runtimes import Runtime

COMMON_DIR_NAME = "_common"
PLAN_FILE = "plan.json"
APP_FILE = "app.cs"
APP_DLL = "app.dll"

#: Reference assemblies passed to mcs (those missing from a framework folder are skipped).
REFERENCE_ASSEMBLIES: tuple[str, ...] = (
    "System.Private.CoreLib.dll",
    "System.Runtime.dll",
    "System.Console.dll",
    "System.Runtime.Extensions.dll",
    "System.Runtime.InteropServices.dll",
    "System.Threading.dll",
    "System.Threading.Thread.dll",
    "System.Collections.dll",
)

MCS_FLAGS: tuple[str, ...] = (
    "-nostdlib",
    "-noconfig",
    "-target:exe",
    "-optimize-",
    "-debug-",
    "-nologo",
    "-unsafe",
)


class Scenario(BaseModel):
    """One scenario app: its sources (own files first, then the shared helpers) and its default plan."""

    model_config = ConfigDict(frozen=True)

    name: str
    folder: Path
    sources: list[Path]
    plan: dict[str, Any]
    description: str


def _description(app: Path) -> str:
    """The leading ``//`` comment of ``app.cs`` (first paragraph), or "" without one."""
    lines: list[str] = []
    for raw in app.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line.startswith("//"):
            break
        text = line[2:].strip()
        if not text and lines:
            break
        if text:
            lines.append(text)
    return " ".join(lines)


def _read_plan(path: Path) -> dict[str, Any]:
    text = read_text_file(path, "plan")
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from exc
    if not isinstance(plan, dict):
        raise InputError(f"{path}:1: the plan must be a JSON object, not {type(plan).__name__}")
    if plan.get("version") != 1:
        raise InputError(f"{path}: unsupported plan version {plan.get('version')!r} (expected 1)")
    return resolve_plan(plan, where=str(path))


def common_sources(root: Path = SCENARIOS_DIR) -> list[Path]:
    """The shared helper sources compiled into every scenario."""
    return sorted((root / COMMON_DIR_NAME).glob("*.cs"))


def load_scenario_dir(folder: Path, common_root: Path = SCENARIOS_DIR) -> Scenario:
    """Load the scenario in ``folder`` (its ``.cs`` files, ``plan.json``) plus the shared helpers."""
    app = folder / APP_FILE
    if not app.is_file():
        raise InputError(f"{folder}: not a scenario: no {APP_FILE}")
    own = sorted(folder.glob("*.cs"))
    return Scenario(
        name=folder.name,
        folder=folder,
        sources=own + common_sources(common_root),
        plan=_read_plan(folder / PLAN_FILE),
        description=_description(app),
    )


def scenario_names(root: Path = SCENARIOS_DIR) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(
        child.name
        for child in root.iterdir()
        if child.is_dir() and not child.name.startswith(("_", ".")) and (child / APP_FILE).is_file()
    )


def list_scenarios(root: Path = SCENARIOS_DIR) -> list[Scenario]:
    return [load_scenario_dir(root / name, root) for name in scenario_names(root)]


def load_scenario(name: str, root: Path = SCENARIOS_DIR) -> Scenario:
    """The scenario called ``name``; an unknown name lists the known ones."""
    if name not in scenario_names(root):
        known = ", ".join(scenario_names(root)) or "none"
        raise InputError(f"unknown scenario {name!r}; known scenarios: {known}")
    return load_scenario_dir(root / name, root)


# --------------------------------------------------------------------------------------------------------
# Compilation


def _mcs() -> str:
    mcs = shutil.which("mcs")
    if mcs is None:
        raise HarnessError("the C# compiler mcs is not installed: apt-get install mono-mcs")
    return mcs


@functools.cache
def _mcs_version(mcs: str) -> str:
    """``mcs --version`` (asked once per process; part of every cache key)."""
    proc = subprocess.run([mcs, "--version"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HarnessError(f"{mcs} --version failed with exit code {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def mcs() -> str:
    """The C# compiler's path (a one-line HarnessError when it is not installed)."""
    return _mcs()


def mcs_version(compiler: str) -> str:
    """``compiler --version`` (asked once per process)."""
    return _mcs_version(compiler)


def reference_paths(reference: Runtime) -> list[Path]:
    """The reference assemblies of ``reference`` that mcs gets (CoreLib is required)."""
    corelib = reference.framework_dir / REFERENCE_ASSEMBLIES[0]
    if not corelib.is_file():
        raise HarnessError(f"{reference.framework_dir}: no {REFERENCE_ASSEMBLIES[0]} to compile against")
    return [p for p in (reference.framework_dir / n for n in REFERENCE_ASSEMBLIES) if p.is_file()]


def compile_key(scenario: Scenario, reference: Runtime, compiler_version: str) -> str:
    """Content hash: sources (name + bytes), compiler version, flags, reference assembly names and sizes."""
    digest = hashlib.sha256()

    def feed(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    feed("compiler", compiler_version.encode())
    feed("flags", " ".join(MCS_FLAGS).encode())
    for source in scenario.sources:
        feed(f"source:{source.name}", source.read_bytes())
    for ref in reference_paths(reference):
        feed(f"ref:{ref.name}", str(ref.stat().st_size).encode())
    return digest.hexdigest()


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if ": error " in line:
            return line
    return lines[0] if lines else "mcs failed without output"


def compile_scenario(scenario: Scenario, reference: Runtime) -> Path:
    """Compile the scenario into ``cache_dir()/scenarios/<key>/app.dll`` (or reuse it) and return its path;
    one compile per entry, however many processes ask at once (issue 13)."""
    mcs = _mcs()
    final = cache_dir() / "scenarios" / compile_key(scenario, reference, _mcs_version(mcs))

    def compile_into(tmp: Path) -> None:
        command = [
            mcs,
            *MCS_FLAGS,
            f"-out:{tmp / APP_DLL}",
            *(f"-r:{ref}" for ref in reference_paths(reference)),
            *(str(source) for source in scenario.sources),
        ]
        proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp)
        output = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not (tmp / APP_DLL).is_file():
            raise HarnessError(f"{_first_error(output)}\n{output}")
        (tmp / "mcs.log").write_text(" ".join(command) + "\n" + output + "\n")
        (tmp / "scenario.txt").write_text(scenario.name + "\n")
        tmp.chmod(0o755)

    return sealed_build(final, APP_DLL, compile_into)


def prepare_run_dir(app_dll: Path, runtime: Runtime, run_dir: Path) -> Path:
    """Copy ``app_dll`` into ``run_dir`` next to an ``app.runtimeconfig.json`` for ``runtime``; return it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    app = run_dir / APP_DLL
    shutil.copyfile(app_dll, app)
    config = run_dir / "app.runtimeconfig.json"
    config.write_text(json.dumps(runtime.runtimeconfig(), indent=2) + "\n")
    return app
