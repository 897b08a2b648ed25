"""The IL bodies a profiler hands over, checked (issue 25 part 5): every body the recording proxy recorded
(``SetILFunctionBody`` on ICorProfilerInfo and ``ICorProfilerFunctionControl::SetILFunctionBody``, each with
the bytes handed over: proxy/il_bodies.h) goes through the IL checker (:func:`clr_model.il.check_body`)
against the metadata of its module, read from the file the proxy named (a ``proxy.il.module`` mark). Each
:class:`~clr_model.il.ILFinding` is a finding of its own clause (the checker's rule ids are the catalog's
``IL-*`` clauses) at the profiler's call.

Tokens the module file does not hold (a row beyond its table: the profiler may have defined it at run time
through IMetaDataEmit, which the proxy does not record) are taken as existing and unresolved: no IL-TOKEN
for them. Without a readable module file the checks that need metadata (tokens, locals, argument numbers)
are left out.

An app that ends with an unhandled InvalidProgramException, or with a fatal signal on a thread that handed
over a body, is tied to the body that caused it (VAL-IL-INVALID-PROGRAM, a note): the method the exception
names, else the body last handed over on the crashing thread (for an exception naming no method: the last
body handed over).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clr_model import il
from clr_model.il_metadata import Assembly, CallSignature, MetadataError
from conformance.core.registry import Layer
from conformance.core.registry import rule as register
from conformance.validator.stream import Judging, Record, StreamRule

__all__ = ["ILBodies"]

SET_IL = "SetILFunctionBody"
CONTROL_SET_IL = "ICorProfilerFunctionControl::SetILFunctionBody"
MODULE_MARK = "proxy.il.module"
#: the fake runtime's mark naming the assembly a module's IL bodies come from (fakeruntime.cpp), the same
#: shape: fuzz traces are judged by this rule too, tokens and locals against that assembly
FUZZ_MODULE_MARK = "fuzz.il.module"
TIE = "VAL-IL-INVALID-PROGRAM"
#: the checks that need the module's metadata (left out without it)
_METADATA_RULES = frozenset({"IL-TOKEN", "IL-HEADER-LOCALS", "IL-ARG-INDEX", "IL-LOCAL-INDEX"})
#: the innermost managed frame of an unhandled exception's report: "at Namespace.Type.Method("
_FRAME = re.compile(r"\bat ([\w.`+<>|\[\],]+)\(")


class _OnDisk:
    """The module file's metadata as the checker asks it; a token beyond its table's rows (defined at run
    time) exists, unresolved."""

    def __init__(self, assembly: Assembly) -> None:
        self.assembly = assembly
        self.emitted: set[int] = set()

    def _beyond(self, token: int) -> bool:
        table, row = token >> 24, token & 0xFFFFFF
        if table == 0x70:  # a user string at or past the file's #US heap: IMetaDataEmit::DefineUserString
            beyond = row >= self.assembly.user_strings_size
        else:
            beyond = row > self.assembly.rows(table) and row > 0
        if beyond:
            self.emitted.add(token)
        return beyond

    def token_exists(self, token: int) -> bool:
        return self._beyond(token) or self.assembly.token_exists(token)

    def method_signature(self, token: int) -> CallSignature | None:
        return None if self._beyond(token) else self.assembly.method_signature(token)

    def local_count(self, token: int) -> int | None:
        return None if self._beyond(token) else self.assembly.local_count(token)


class _NoMetadata:
    """No module file: every token exists, none resolves (the findings that need metadata are dropped)."""

    def token_exists(self, token: int) -> bool:
        return True

    def method_signature(self, token: int) -> CallSignature | None:
        return None

    def local_count(self, token: int) -> int | None:
        return None


@dataclass
class _Body:
    """A body handed over: where (the kept record), for which method, what the checker found."""

    kept: Record
    method: str
    clauses: list[str]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _part(r: Record, part: str) -> dict[str, object]:
    value = r.get(part)
    return value if isinstance(value, dict) else {}


@register(*sorted(il.RULES), *sorted(il.NOTES), TIE, layer=Layer.VALIDATOR,
          what="every IL body a profiler hands over (SetILFunctionBody, ICorProfilerFunctionControl::"
          "SetILFunctionBody) is a valid ECMA-335 method body against its module's metadata; an "
          "InvalidProgramException or crash tied to the body that caused it")  # fmt: skip
class ILBodies(StreamRule):
    reads = (("mark", MODULE_MARK), ("mark", FUZZ_MODULE_MARK), ("mark", "proxy.crash"), ("call", SET_IL),
             ("call", CONTROL_SET_IL))  # fmt: skip

    def __init__(self, judging: Judging) -> None:
        super().__init__(judging)
        self.paths: dict[int, str] = {}
        self.assemblies: dict[str, Assembly | None] = {}
        self.last: _Body | None = None
        self.last_on: dict[int, _Body] = {}  # OS thread -> the last body handed over on it
        self.named: dict[str, _Body] = {}  # method name -> its last body
        self.crash: Record | None = None

    def on(self, r: Record) -> None:
        if r["kind"] == "mark":
            if r["name"] in (MODULE_MARK, FUZZ_MODULE_MARK):
                module, path = _int(r.get("moduleId")), r.get("path")
                if module is not None and isinstance(path, str):
                    self.paths[module] = path
            else:
                self.crash = r
            return
        if r.get("phase") == "return":
            return
        out, args = _part(r, "out"), _part(r, "args")
        text = out.get("body")
        if not isinstance(text, str):
            return
        try:
            data = bytes.fromhex(text)
        except ValueError:
            return
        token = _int(args.get("methodid" if r["name"] == SET_IL else "methodId")) or 0
        module = _int(args.get("moduleId"))
        assembly = self._assembly(module)
        method = (assembly.method_name(token) if assembly is not None else None) or "a method"
        where = f"{method} (0x{token:08X})"
        resolver: _OnDisk | _NoMetadata = _OnDisk(assembly) if assembly is not None else _NoMetadata()
        length = len(data) if out.get("allocated") is True else None
        found = il.check_body(data, resolver, token if token >> 24 == 0x06 else None, length=length)
        if isinstance(resolver, _NoMetadata):
            found = [f for f in found if f.rule not in _METADATA_RULES]
        else:
            emitted = {f"0x{t:08X}" for t in resolver.emitted}
            found = [f for f in found if not (f.rule == "IL-TOKEN" and any(t in f.message for t in emitted))]
        self.j.exercised.update(il.RULES)
        self.j.exercised.update(il.NOTES)  # the checker's notes (observations: shown, never failures)
        self.j.exercised.add(TIE)
        hr = _int(r.get("hr"))
        refused = f" (the runtime refused it: 0x{hr & 0xFFFFFFFF:08X})" if hr else ""
        for f in found:
            self.j.at(f.rule, r, f"the body {r['name']} was given for {where}{refused}: {f}")
        body = _Body(self.j.keep(r), method, [f.rule for f in found])
        self.last = body
        thread = _int(r.get("os_tid"))
        if thread is not None:
            self.last_on[thread] = body
        if method != "a method":
            self.named[method] = body

    def _assembly(self, module: int | None) -> Assembly | None:
        path = self.paths.get(module) if module is not None else None
        if path is None:
            return None
        if path not in self.assemblies:
            try:
                self.assemblies[path] = Assembly(Path(path).read_bytes())
            except (OSError, MetadataError):
                self.assemblies[path] = None
        return self.assemblies[path]

    def end(self) -> None:
        told = self.j.run.unhandled_exception
        if told and "InvalidProgramException" in told:
            frame = _FRAME.search(told)
            named = frame.group(1) if frame else None
            body = self.named.get(named) if named else self.last
            why = (f"the method the exception names ({named})" if named
                   else "the last body handed over (the exception names no method)")  # fmt: skip
            if body is not None:
                self._tie(body, f"the app ended with unhandled {told}; {why} got its body here")
            return
        crash = self.crash
        thread = _int(crash.get("os_tid")) if crash is not None else None
        if crash is not None and thread is not None and thread in self.last_on:
            body = self.last_on[thread]
            self._tie(body, f"the app died of {crash.get('signal')} on thread {thread}, where the last body "
                      f"handed over was {body.method}'s")  # fmt: skip

    def _tie(self, body: _Body, message: str) -> None:
        checked = (f"the IL checker found {', '.join(sorted(set(body.clauses)))} in it" if body.clauses
                   else "the IL checker found nothing in it")  # fmt: skip
        self.j.at(TIE, body.kept, f"{message} ({checked})", note=True)
