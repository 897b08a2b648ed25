"""The IL bodies the fake runtime's methods have (issue 25, behaviour ``il.body``): real method bodies read
from a real assembly (:class:`clr_model.il_metadata.Assembly`), so a profiler that rewrites IL in
JITCompilationStarted meets the shapes it meets on a runtime: tiny bodies up to the 63-byte limit, fat ones
with and without locals, small and fat exception-handling sections, small and large max stacks.

The pool is a deterministic choice of an assembly's bodies (in token order, the first of each shape after
the first :data:`SKIP` methods), each with its MethodDef token, so the IL checker in the judge resolves its
tokens against the same assembly. The default assembly is System.Private.CoreLib of an installed bundled
runtime (8.0.4 first); none installed: no pool, and the fake runtime's methods have no IL
(GetILFunctionBody answers E_INVALIDARG, behaviour ``answer.unknown-id``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from clr_model.il import MethodBody, check_body, parse_body
from clr_model.il_metadata import Assembly, MetadataError
from conformance.core import runtimes

__all__ = ["ILPool", "default_pool", "pool_of"]

#: methods skipped at the start (a MethodDef row number at least this: never one of the world's invented
#: tokens, 0x06000000 + a small count)
SKIP = 0x1000
#: how many bodies of each shape
PER_SHAPE = 6

#: the shapes the pool covers: name -> a test on the parsed body
_SHAPES: dict[str, Callable[[MethodBody], bool]] = {
    "tiny-small": lambda b: b.tiny and len(b.code) < 16,
    "tiny-near-63": lambda b: b.tiny and 48 <= len(b.code) <= 63,
    "fat-stack-1": lambda b: not b.tiny and not b.clauses and b.max_stack <= 1,
    "fat-no-eh": lambda b: not b.tiny and not b.clauses and b.max_stack > 2 and b.local_signature != 0,
    "fat-small-eh": lambda b: not b.tiny and 0 < len(b.clauses) and b.size < 256,
    "fat-more-eh": lambda b: not b.tiny and len(b.clauses) >= 2,
}


@dataclass(frozen=True)
class ILPool:
    """Bodies of one assembly: ``path`` (the file the judge reads metadata from) and (token, body bytes)."""

    path: str
    bodies: tuple[tuple[int, bytes], ...]

    def __bool__(self) -> bool:
        return bool(self.bodies)


def _bodies(assembly: Assembly) -> Iterator[tuple[int, bytes, MethodBody]]:
    for token, view in assembly.method_bodies():
        if token & 0xFFFFFF < SKIP:
            continue
        body, found = parse_body(view)
        if body is None or found:
            continue
        yield token, bytes(view[:body.size]), body


def pool_of(path: Path) -> ILPool:
    """The pool of the assembly at ``path`` (empty when it cannot be read): :data:`PER_SHAPE` valid bodies
    of each shape."""
    try:
        assembly = Assembly(path.read_bytes())
    except (OSError, MetadataError):
        return ILPool(str(path), ())
    chosen: dict[str, list[tuple[int, bytes]]] = {name: [] for name in _SHAPES}
    for token, data, body in _bodies(assembly):
        for name, fits in _SHAPES.items():
            if len(chosen[name]) < PER_SHAPE and fits(body) and not check_body(data, assembly, token):
                chosen[name].append((token, data))
                break
        if all(len(v) == PER_SHAPE for v in chosen.values()):
            break
    return ILPool(str(path), tuple(b for name in _SHAPES for b in chosen[name]))


def default_pool() -> ILPool:
    """The pool of an installed bundled runtime's System.Private.CoreLib (8.0.4 first), else an empty one."""
    found = sorted(runtimes.discover(install=False), key=lambda r: runtimes.version_key(r.version),
                   reverse=True)
    for runtime in found:
        path = runtime.framework_dir / "System.Private.CoreLib.dll"
        if path.is_file():
            return pool_of(path)
    return ILPool("", ())
