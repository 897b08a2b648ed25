"""Build hook sources (``.S``, C or C++) into shared objects with ``gcc``, cached by the hash of the sources.

``gcc -m32`` for x86 needs Debian's gcc-multilib (``./dev setup`` installs it). A build lives in
``<cache>/hooks/<key>/<name>.so``, ``key`` = sha256 of the architecture, the flags, the first line of
``gcc --version``, every source's bytes and every header of the ``includes`` folders (``-I``); it is built
in a temporary folder and renamed into place. C++ sources (``.cpp``) are compiled without exceptions or
RTTI (``gcc`` links no libstdc++: a hook calls interfaces through their vtables, nothing of the library).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from conformance.core.paths import cache_dir, staged
from emu.errors import EmuError
from emu.hookcheck.loader import Arch

__all__ = ["REFERENCE_X86", "REFERENCE_X86_SYMBOL", "HookBuildError", "build_hook_library",
           "reference_x86_library"]

#: the x86 reference hook (naked, __stdcall, keeps every FE2 rule): symbol ``reference_enter2``
REFERENCE_X86 = Path(__file__).resolve().parent / "reference_x86.S"
REFERENCE_X86_SYMBOL = "reference_enter2"

_FLAGS: dict[Arch, tuple[str, ...]] = {"x86": ("-m32", "-shared", "-fPIC", "-O1"),
                                       "x64": ("-shared", "-fPIC", "-O1")}
#: added for C++ sources
_CXX_FLAGS = ("-std=c++17", "-fno-exceptions", "-fno-rtti")


class HookBuildError(EmuError):
    """A hook source that does not build (no compiler, no multilib, a compile error): one line."""


def _gcc() -> tuple[str, str]:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise HookBuildError("gcc not found on PATH: it is needed to build hook fixtures")
    out = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=False, timeout=60)
    return gcc, (out.stdout.splitlines() or [""])[0]


def build_hook_library(sources: Sequence[Path], arch: Arch, name: str = "hooks",
                       cache_root: Path | None = None, includes: Sequence[Path] = ()) -> Path:
    """The shared object built from ``sources`` for ``arch`` (reused when the sources and the headers of
    ``includes`` are unchanged)."""
    gcc, version = _gcc()
    flags = [*_FLAGS[arch], *(_CXX_FLAGS if any(s.suffix == ".cpp" for s in sources) else ())]
    digest = hashlib.sha256(f"{arch}\0{' '.join(flags)}\0{version}\0".encode())
    headers = [h for d in includes for h in sorted(d.rglob("*.h"))]
    for src in [*sources, *headers]:
        try:
            digest.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
        except OSError as exc:
            raise HookBuildError(f"{src}: cannot read the hook source: {exc.strerror or exc}") from None
    root = (cache_root or cache_dir()) / "hooks"
    final = root / digest.hexdigest()[:32]
    built = final / f"{name}.so"
    if built.is_file():
        return built
    with staged(final, prefix="hooks-") as work:
        cmd = [gcc, *flags, *(f"-I{d}" for d in includes), "-o", str(work / built.name),
               *(str(s) for s in sources)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if out.returncode != 0:
            first = next((ln for ln in out.stderr.splitlines() if "error" in ln), out.stderr.strip()[:200])
            hint = " (gcc -m32 needs gcc-multilib: ./dev setup)" if arch == "x86" else ""
            raise HookBuildError(f"building {', '.join(s.name for s in sources)} for {arch} failed{hint}: "
                                 f"{first}")
    if not built.is_file():
        raise HookBuildError(f"the hook build produced no {built}")
    return built


def reference_x86_library(cache_root: Path | None = None) -> Path:
    """The x86 reference hook, built with ``gcc -m32`` into the harness cache."""
    return build_hook_library([REFERENCE_X86], "x86", name="reference_x86", cache_root=cache_root)
