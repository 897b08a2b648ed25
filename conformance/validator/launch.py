"""What ``profharness validate`` is given, checked; and one run of an app with a profiler behind the proxy.

The run goes through :func:`conformance.core.runner.execute` (the watchdog, the process group killed and
reaped, the trace read back): the proxy takes the probe's seat (copied next to the app under the probe's
file name, loaded under the probe's CLSID, so a scenario's marks reach it), and the environment that names
the profiler behind it comes from :class:`ProxiedRuntime`, a runtime whose environment carries it.
PROFHARNESS_TRACE names the proxy's trace; a profiler behind the proxy that reads that variable too (the
project's own probe does) sees :data:`TARGET_TRACE_FILE` in the run folder instead (the proxy swaps the
variable before loading it), so the two never write one file.
The harness never loads the profiler: it reads its first bytes to check it is an x86-64 ELF shared object.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.core import diagnostics_ipc, probe, runner, runs, scenarios
from conformance.core.errors import InputError
from conformance.core.runner import RunResult
from conformance.core.runtimes import Runtime
from conformance.validator import perturb
from conformance.validator.build import build_preload, build_proxy

#: Seconds a callback, or an ICorProfilerInfo call made outside any callback, may stay open before the proxy
#: reports a hang (and ends the process): the hang limit (PROFHARNESS_PROXY_HANG_MS).
DEFAULT_HANG_S = 10.0
#: Seconds the whole run may take before the harness's own watchdog ends it (``--timeout``): the run limit,
#: separate from the hang limit (an app that runs long with nothing open is no hang).
DEFAULT_TIMEOUT_S = 600.0
_CLSID = re.compile(
    r"^\{?([0-9A-Fa-f]{8})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{12})\}?$"
)
#: The proxy's trace format (issue 23): the binary trace (docs/design.md "The binary trace"), a fifth of
#: the JSON's bytes, judged as columns; ``--env PROFHARNESS_TRACE_FORMAT=jsonl`` asks for JSON Lines.
TRACE_FORMAT_ENV, TRACE_FORMAT = "PROFHARNESS_TRACE_FORMAT", "binary"

#: The variable naming the trace path the profiler behind the proxy sees as PROFHARNESS_TRACE.
TARGET_TRACE_ENV = "PROFHARNESS_PROXY_TARGET_TRACE"
TARGET_TRACE_FILE = "target-trace.jsonl"  # (target-trace.phtrace when binary: target_trace_file)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_EM_X86_64 = 62


class ValidatorInputError(InputError):
    """What the user gave ``validate`` cannot be used (one line naming it)."""


def check_profiler(path: Path) -> Path:
    """``path`` resolved, after checking it is an x86-64 ELF shared object (read, never loaded)."""
    if not path.exists():
        raise ValidatorInputError(f"{path}: no such profiler file")
    if not path.is_file():
        raise ValidatorInputError(f"{path}: not a file")
    try:
        with path.open("rb") as fh:
            head = fh.read(20)
    except OSError as exc:
        raise ValidatorInputError(f"{path}: cannot read the profiler: {exc.strerror}") from exc
    if len(head) < 20 or head[:4] != _ELF_MAGIC:
        raise ValidatorInputError(f"{path}: not an ELF file (a profiler must be a shared object, .so)")
    if head[4] != 2 or head[5] != 1:
        raise ValidatorInputError(f"{path}: not a 64-bit little-endian ELF file")
    e_type = int.from_bytes(head[16:18], "little")
    e_machine = int.from_bytes(head[18:20], "little")
    if e_type != _ET_DYN:
        raise ValidatorInputError(f"{path}: an ELF file of type {e_type}, not a shared object (ET_DYN)")
    if e_machine != _EM_X86_64:
        raise ValidatorInputError(f"{path}: built for ELF machine {e_machine}, not x86-64")
    return path.resolve()


def parse_clsid(text: str) -> str:
    """``{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}`` (upper case) from a CLSID with or without braces."""
    m = _CLSID.match(text.strip())
    if m is None:
        raise ValidatorInputError(
            f"--clsid {text!r}: not a CLSID (expected {{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}})"
        )
    return "{" + "-".join(g.upper() for g in m.groups()) + "}"


def parse_env(items: Sequence[str]) -> dict[str, str]:
    """``K=V`` strings as a mapping."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ValidatorInputError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    return env


def check_preloads(paths: Sequence[Path]) -> list[Path]:
    """Libraries to LD_PRELOAD into the app's process: each must exist (read, never loaded here)."""
    return [check_profiler(p) for p in paths]


class ProxiedRuntime(Runtime):
    """A runtime whose environment also names the profiler behind the proxy (and the user's extras)."""

    proxy_env: dict[str, str]

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.proxy_env}


def proxy_environment(
    profiler: Path,
    clsid: str,
    *,
    extra_env: Mapping[str, str] | None = None,
    preload: Sequence[Path] = (),
    hang_s: float = DEFAULT_HANG_S,
    inject_deadlock: bool = False,
) -> dict[str, str]:
    """The variables the proxy reads, the user's own, and LD_PRELOAD: the signal-safety preload first (its
    interposed functions must come before every other definition), then the user's companions, which the
    preload also counts as the profiler's modules (a handler one of them installs is wrapped too).
    ``inject_deadlock``: the preload raises the profiler's signal once while the thread holds its allocator
    lock (:func:`signal_safety_environment`)."""
    env = {TRACE_FORMAT_ENV: TRACE_FORMAT, **(extra_env or {})}  # the user's own format wins
    env.update(
        {
            "PROFHARNESS_PROXY_TARGET": str(profiler),
            "PROFHARNESS_PROXY_CLSID": clsid,
            "PROFHARNESS_PROXY_HANG_MS": str(max(0, int(hang_s * 1000))),
        }
    )
    env.update(signal_safety_environment(preload, inject_deadlock=inject_deadlock and hang_s > 0))
    return env


def signal_safety_environment(companions: Sequence[Path], *, inject_deadlock: bool) -> dict[str, str]:
    """LD_PRELOAD (the signal-safety preload, built when needed, then ``companions``), the companions the
    preload counts as the profiler's (PROFHARNESS_PRELOAD_PROFILER) and, with ``inject_deadlock``,
    PROFHARNESS_PRELOAD_INJECT=1 (the proxy's watchdog reports the deadlock: it needs a hang limit)."""
    env = {"LD_PRELOAD": " ".join(str(p) for p in (build_preload(), *companions))}
    if companions:
        env["PROFHARNESS_PRELOAD_PROFILER"] = ":".join(str(p) for p in companions)
    if inject_deadlock:
        env["PROFHARNESS_PRELOAD_INJECT"] = "1"
    return env


def with_perturbation(environment: Mapping[str, str], seed: int | None) -> dict[str, str]:
    """``environment`` with the variable that asks the proxy to delay points by the schedule of ``seed``
    (:mod:`conformance.validator.perturb`); None: no perturbation (the variable removed)."""
    env = {k: v for k, v in environment.items() if k != perturb.SEED_ENV}
    if seed is not None:
        env.update(perturb.environment(seed))
    return env


def user_app_scenario(app: Path) -> scenarios.Scenario:
    """The user's own app as a scenario (no plan: the proxy ignores the probe's)."""
    if not app.is_file():
        raise ValidatorInputError(f"{app}: no such app")
    if app.suffix.lower() != ".dll":
        raise ValidatorInputError(f"{app}: an app must be a managed .dll")
    return scenarios.Scenario(
        name=app.stem, folder=app.parent, sources=[], plan={"version": 1}, description=f"the user's app {app}"
    )


def new_run_dir(label: str, runtime: Runtime) -> Path:
    return runs.new_run_dir(f"validate-{label}-{runtime.version}")


#: Seconds after the app started when ``--attach`` attaches the proxy (``--attach-after``)
DEFAULT_ATTACH_AFTER_S = 1.0
#: What the attach did, written into the run folder by the thread that attached (read by :func:`read_attach`)
ATTACH_FILE = "attach.json"


@dataclass(frozen=True)
class AttachPlan:
    """Attach instead of loading at startup: the app starts without a profiler (CORECLR_ENABLE_PROFILING=0;
    the variables naming the profiler behind the proxy are still in its environment); ``after_s`` seconds
    later the harness sends AttachProfiler on the app's diagnostic port naming the proxy (in the probe's
    seat), which loads the profiler behind it and hands it ``client_data`` in InitializeForAttach."""

    after_s: float = DEFAULT_ATTACH_AFTER_S
    client_data: bytes = b""
    timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        if not 0 <= self.after_s <= 3600:
            raise ValidatorInputError(f"--attach-after {self.after_s:g}: expected 0 to 3600 seconds")
        if len(self.client_data) > 32_000:
            raise ValidatorInputError(f"--attach-data: {len(self.client_data)} bytes, more than the 32,000 "
                                      "a diagnostics IPC message can carry")  # fmt: skip


def _attacher(plan: AttachPlan, run_dir: Path) -> Callable[[int, Path], None]:
    """The thread body that attaches the proxy to process ``pid`` and writes :data:`ATTACH_FILE`."""

    def attach(pid: int, app: Path) -> None:
        record: dict[str, Any] = {"afterS": plan.after_s, "clientDataBytes": len(plan.client_data)}
        due = time.monotonic() + plan.after_s
        while time.monotonic() < due and Path(f"/proc/{pid}").exists():
            time.sleep(min(0.02, max(0.0, due - time.monotonic())))
        if not Path(f"/proc/{pid}").exists():
            record["problem"] = (f"the app ended before the attach ({plan.after_s:g} s after its start): "
                                 "attach needs an app that runs longer (--app)")  # fmt: skip
            (run_dir / ATTACH_FILE).write_text(json.dumps(record, indent=2) + "\n")
            return
        try:
            answer = diagnostics_ipc.attach_profiler(
                pid, probe.CLSID, str(app.parent / probe.PROBE_FILE_NAME), plan.client_data,
                attach_timeout_ms=plan.timeout_ms,
            )  # fmt: skip
        except diagnostics_ipc.IpcError as exc:
            record["problem"] = str(exc)
        else:
            record.update(socket=str(answer.socket), hresult=answer.response.hresult,
                          errorMessage=answer.response.is_error, answer=answer.response.describe(),
                          sentNs=answer.sent_ns, answeredNs=answer.answered_ns,
                          tries=answer.tries)  # fmt: skip
        (run_dir / ATTACH_FILE).write_text(json.dumps(record, indent=2) + "\n")

    return attach


def read_attach(run_dir: Path) -> dict[str, Any] | None:
    """What the attach of a run did (:data:`ATTACH_FILE`), None when the run was no attach or the thread
    never wrote it."""
    try:
        data = json.loads((run_dir / ATTACH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _binary(environment: Mapping[str, str]) -> bool:
    """Whether the proxy writes the binary trace in ``environment``."""
    return environment.get(TRACE_FORMAT_ENV) == "binary"


def target_trace_file(environment: Mapping[str, str]) -> str:
    """The file name of the trace the profiler behind the proxy is given (in the run folder)."""
    return "target-trace.phtrace" if _binary(environment) else TARGET_TRACE_FILE


def run_under_proxy(
    scenario: scenarios.Scenario,
    app_dll: Path,
    runtime: Runtime,
    environment: Mapping[str, str],
    *,
    hang_s: float = DEFAULT_HANG_S,
    timeout_s: float | None = None,
    user_app: bool = False,
    companions: Sequence[Path] = (),
    attach: AttachPlan | None = None,
) -> RunResult:
    """Run ``app_dll`` on ``runtime`` with the proxy as profiler (behind it: per ``environment``). The
    harness's watchdog ends the run after ``timeout_s`` (the run limit, :data:`DEFAULT_TIMEOUT_S` when None);
    ``hang_s`` is the proxy's own limit, given to it through ``environment`` (:func:`proxy_environment`).
    ``companions``: files copied beside the app (a workload's late-loaded assembly).
    ``attach``: start the app without a profiler and attach the proxy while it runs (:class:`AttachPlan`)."""
    proxy_so = build_proxy()
    run_dir = new_run_dir(scenario.name, runtime)
    proxied = ProxiedRuntime(
        version=runtime.version,
        host=runtime.host,
        framework_dir=runtime.framework_dir,
        source=runtime.source,
        # PROFHARNESS_TRACE is the proxy's: a profiler behind it that reads it too (the project's own
        # probe) is given a trace of its own (the proxy swaps the variable before loading it)
        proxy_env={**environment, TARGET_TRACE_ENV: str(run_dir / target_trace_file(environment))},
    )
    trace_name = runner.BINARY_TRACE_FILE if _binary(environment) else runner.TRACE_FILE
    if user_app:  # the app's own assemblies go beside it (its main assembly becomes app.dll)
        for sibling in app_dll.parent.iterdir():
            if sibling.is_file() and sibling != app_dll and sibling.suffix.lower() in (".dll", ".so", ".pdb"):
                shutil.copyfile(sibling, run_dir / sibling.name)
    for companion in companions:
        shutil.copyfile(companion, run_dir / companion.name)
    del hang_s  # the proxy reads its hang limit from the environment
    limit = timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S
    if attach is None:
        return runner.execute(scenario, app_dll, proxied, proxy_so, timeout_s=limit, run_dir=run_dir,
                              read=False, trace_name=trace_name)  # fmt: skip
    return runner.execute(scenario, app_dll, proxied, proxy_so, timeout_s=limit, run_dir=run_dir, read=False,
                          env={"CORECLR_ENABLE_PROFILING": "0"}, trace_name=trace_name,
                          on_start=_attacher(attach, run_dir))  # fmt: skip
