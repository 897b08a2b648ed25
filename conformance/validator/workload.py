"""The validator's workloads (issue 21): the apps ``profharness validate`` runs a profiler on, each a folder
``conformance/validator/workloads/NAME/`` holding a scenario (``app.cs``, ``plan.json``: see
:mod:`conformance.core.scenarios`) and ``workload.toml``, its manifest:

- ``summary``: one line for ``profharness workloads``;
- ``seconds``: the default duration, when the app runs for a while (it reads ``PROFHARNESS_APP_SECONDS``;
  ``--duration`` overrides it); absent: the app runs a fixed course;
- ``exercises``: what it exercises, one line each;
- ``late``: sources compiled into ``late.dll`` beside the app (an assembly the app loads late), not into it;
- ``ground_truth``: marked points, each a mark (``mark``) the thread it describes (``thread``) writes itself
  before it waits inside ``frames`` (innermost first, ``Namespace.Class.Method``) until the mark ``until``,
  and ``judges``: what a rule judges there (the proxy records the FunctionIDs the runtime delivers to the
  profiler's StackSnapshotCallback in walks of that thread, and names them: docs/design.md);
- ``not_applicable``: runtime version prefix -> {count: why that runtime cannot show it}.

:data:`API_DEFAULT` (``basic``, about 0.2 s) is :func:`conformance.validator.api.validate`'s default, so that
callers that name no workload keep their short runs; the command's default is :data:`CLI_DEFAULT`.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conformance.core import scenarios
from conformance.core.errors import HarnessError
from conformance.core.paths import cache_dir, sealed_build
from conformance.core.runtimes import Runtime
from conformance.validator.launch import ValidatorInputError

__all__ = [
    "API_DEFAULT",
    "CLI_DEFAULT",
    "DURATION_ENV",
    "MarkedPoint",
    "Workload",
    "check_duration",
    "compile_workload",
    "load_workload",
    "workload_names",
    "workloads",
]

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
MANIFEST = "workload.toml"
LATE_DLL = "late.dll"
#: the variable a workload app reads its duration from (seconds, a decimal number)
DURATION_ENV = "PROFHARNESS_APP_SECONDS"
#: the variable naming the ground truth's marks to the proxy (comma-separated; proxy/truth.cpp)
GROUND_TRUTH_ENV = "PROFHARNESS_PROXY_GROUND_TRUTH"
API_DEFAULT = "basic"
CLI_DEFAULT = "standard"
#: the longest --duration accepted (a validation's run limit is --timeout; this only catches typos)
MAX_SECONDS = 3600.0


class MarkedPoint(BaseModel):
    """A marked point: after ``mark``, the thread ``thread`` waits inside ``frames`` (innermost first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mark: str
    #: the mark after which the thread has left the frames ("": the end of the run)
    until: str = ""
    thread: str
    frames: list[str]
    judges: str = ""


class Workload(BaseModel):
    """One workload: its scenario and its manifest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    folder: Path
    summary: str
    seconds: float | None = None
    exercises: list[str] = Field(default_factory=list)
    late: list[str] = Field(default_factory=list)
    ground_truth: list[MarkedPoint] = Field(default_factory=list)
    not_applicable: dict[str, dict[str, str]] = Field(default_factory=dict)

    def scenario(self) -> scenarios.Scenario:
        return scenarios.load_scenario_dir(self.folder)

    def not_applicable_on(self, runtime: str) -> dict[str, str]:
        """count -> why ``runtime`` (a version) cannot show it."""
        out: dict[str, str] = {}
        for prefix, reasons in self.not_applicable.items():
            if runtime == prefix or runtime.startswith(prefix + "."):
                out.update(reasons)
        return out

    def environment(self, seconds: float | None) -> dict[str, str]:
        """The variables the app reads (its duration: ``seconds``, else its default, when it has one) and the
        proxy reads (the marks of its ground truth: :data:`GROUND_TRUTH_ENV`)."""
        env: dict[str, str] = {}
        chosen = seconds if seconds is not None else self.seconds
        if chosen is not None and self.seconds is not None:
            env[DURATION_ENV] = f"{chosen:g}"
        points = [name for g in self.ground_truth for name in (g.mark, g.until) if name]
        if points:
            env[GROUND_TRUTH_ENV] = ",".join(dict.fromkeys(points))
        return env

    def points(self) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        """The marked points as the judges take them: (mark, frames innermost first, the mark ending it)."""
        return tuple((g.mark, tuple(g.frames), g.until) for g in self.ground_truth)


def workload_names(root: Path = WORKLOADS_DIR) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir()
                  if (d / MANIFEST).is_file() and (d / scenarios.APP_FILE).is_file())  # fmt: skip


def load_workload(name: str, root: Path = WORKLOADS_DIR) -> Workload:
    """The workload called ``name``; an unknown name (or a broken manifest) is one line."""
    known = workload_names(root)
    if name not in known:
        listed = ", ".join(known) or "none"
        raise ValidatorInputError(f"--workload {name!r}: no such workload (known: {listed})")
    path = root / name / MANIFEST
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Workload(name=name, folder=root / name, **data)
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path}: not TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise HarnessError(f"{path}: {where}: {first['msg']}") from None


def workloads(root: Path = WORKLOADS_DIR) -> list[Workload]:
    return [load_workload(n, root) for n in workload_names(root)]


def check_duration(seconds: float) -> float:
    """``--duration``: a positive, finite number of seconds, at most :data:`MAX_SECONDS`."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise ValidatorInputError(f"--duration {seconds:g}: must be a number of seconds above 0 and at most "
                                  f"{MAX_SECONDS:g}")  # fmt: skip
    return seconds


def compile_workload(workload: Workload, reference: Runtime) -> tuple[Path, list[Path]]:
    """The workload's ``app.dll`` and the files that go beside it in the run folder (``late.dll``), compiled
    with mcs as scenarios are (against ``reference``'s assemblies), each cached by its content."""
    app = scenarios.compile_scenario(workload.scenario(), reference)
    if not workload.late:
        return app, []
    sources = [workload.folder / s for s in workload.late]
    for source in sources:
        if not source.is_file():
            raise HarnessError(f"{workload.folder / MANIFEST}: late source {source.name} is missing")
    mcs = scenarios.mcs()
    refs = scenarios.reference_paths(reference)
    digest = hashlib.sha256(scenarios.mcs_version(mcs).encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    for ref in refs:
        digest.update(f"{ref.name}:{ref.stat().st_size}\0".encode())
    final = cache_dir() / "workloads" / digest.hexdigest()

    def build(work: Path) -> None:
        flags = [f for f in scenarios.MCS_FLAGS if not f.startswith("-target:")]
        command = [mcs, *flags, "-target:library", f"-out:{work / LATE_DLL}", *(f"-r:{r}" for r in refs),
                   *(str(s) for s in sources)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=work)
        if done.returncode != 0 or not (work / LATE_DLL).is_file():
            output = (done.stdout + done.stderr).strip().splitlines()
            first = next((ln for ln in output if ": error " in ln), output[0] if output else "no output")
            raise HarnessError(f"{workload.name}: {LATE_DLL} does not compile: {first}")
        work.chmod(0o755)

    return app, [sealed_build(final, LATE_DLL, build)]
