"""The bench scripts (bench/*.py: scripts, not a package) loaded as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as the module ``bench_<name>``, registered in sys.modules first (dataclasses look
    their module up while the class is built)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
