"""The runtime a slow-path hook calls back: a stand-in ICorProfilerInfo whose methods the checker answers.

A FunctionEnter3WithInfo hook (kind ``slow``, :mod:`emu.hookcheck.check`) is an ordinary C function that
calls ``GetFunctionEnter3Info`` and other ICorProfilerInfo methods through the ICorProfilerInfo pointer its
profiler keeps. The checker gives it a stand-in object whose vtable is :func:`info_vtable` (IUnknown's
three methods, then every ICorProfilerInfo..ICorProfilerInfo14 method in the API table's order, which is
interfaces.txt's and the vtable's); each vtable slot is a trap address, and a call to one is answered here
by :func:`answer` from the method's signature in the API table:

* every method answers S_OK (AddRef and Release: 1); QueryInterface hands out the same object (it answers
  every ICorProfilerInfo version);
* out-parameters (:func:`out_parameters`): a non-``const`` pointer named ``p...`` is written with zeros
  of its pointee's size (:func:`type_size`), a caller-allocated buffer (:func:`clr_model.api.buffer_methods`)
  gets its count zeroed (``*pcX = 0``) and its first element zeroed when it has room; the other pointers
  (inputs, callbacks, arrays the caller fills) are left alone;
* the methods that take a COR_PRF_ELT_INFO (GetFunctionEnter3Info / GetFunctionLeave3Info /
  GetFunctionTailcall3Info: read from their signatures, :func:`takes_elt_info`) answer from the hook's own
  (:class:`EltFrame`): the frame handle (``pFrameInfo``), the COR_PRF_FUNCTION_ARGUMENT_INFO the runtime
  would copy (``pcbArgumentInfo``/``pArgumentInfo``, the documented size protocol: too small a
  ``*pcbArgumentInfo`` gets the size needed and HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER)), the return
  value's range (``pRetvalRange``); another handle than the one the hook was given is E_INVALIDARG;
* a method whose parameters the emulator cannot lay out (a struct passed by value) or whose out-parameter
  it cannot size is *not emulated* (:func:`unanswerable`), never guessed.

Every read and write of the hook's memory goes through the checker's :class:`Memory`, which judges it as
it judges the hook's own accesses (a write into the caller's frame is a finding; a pointer the emulator
never provided ends the run as not emulated).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal, Protocol

from clr_model import api
from clr_model.abi import ISA, Arch
from clr_model.hresults import HResult

__all__ = ["EltFrame", "Memory", "Out", "answer", "argument_words", "info_vtable", "out_parameters",
           "takes_elt_info", "type_size", "unanswerable"]

#: bytes of the scalar types the table's signatures name (the word-sized ones: :data:`_WORD_TYPES`)
_FIXED: dict[str, int] = {
    "BYTE": 1, "USHORT": 2, "WCHAR": 2, "ULONG": 4, "ULONG32": 4, "DWORD": 4, "UINT": 4, "BOOL": 4,
    "HRESULT": 4, "int": 4, "mdToken": 4, "mdTypeDef": 4, "mdMethodDef": 4, "mdFieldDef": 4, "mdModule": 4,
    "CorElementType": 4, "COR_PRF_RUNTIME_TYPE": 4, "COR_PRF_STATIC_TYPE": 4, "std::int32_t": 4,
    "std::uint64_t": 8, "GUID": 16, "COR_IL_MAP": 12, "COR_DEBUG_IL_TO_NATIVE_MAP": 12, "COR_FIELD_OFFSET": 8,
}  # fmt: skip
#: the types one pointer-sized word wide (corprof.idl: typedef UINT_PTR ...; pointers)
_WORD_TYPES = frozenset({
    "UINT_PTR", "SIZE_T", "HANDLE", "LPCBYTE", "PCCOR_SIGNATURE", "LPCGUID", "REFIID", "ProcessID",
    "AssemblyID", "AppDomainID", "ModuleID", "ClassID", "ThreadID", "ContextID", "FunctionID", "ObjectID",
    "GCHandleID", "COR_PRF_ELT_INFO", "ReJITID", "COR_PRF_FRAME_INFO", "EVENTPIPE_PROVIDER",
})  # fmt: skip
#: structs of pointer-sized words (each int32 member padded to a word): how many words
_WORD_STRUCTS: dict[str, int] = {
    "COR_PRF_FUNCTION_ARGUMENT_RANGE": 2, "COR_PRF_CODE_INFO": 2, "COR_PRF_EX_CLAUSE_INFO": 4,
    "COR_PRF_GC_GENERATION_RANGE": 4,
}
#: pointers to functions the profiler hands the runtime: inputs, never written
_CALLBACK_TYPE = re.compile(r"(Function\w*|StackSnapshotCallback|ObjectReferenceCallback)\*")
#: an out-value's name (pClassId, pcbArgumentInfo, ppEnum): what the runtime writes
_OUT_NAME = re.compile(r"p[a-zA-Z]")
#: the type of the ELT info handle a slow-path hook gets and hands back
_ELT_INFO = "COR_PRF_ELT_INFO"
S_OK = int(HResult.S_OK)
E_INVALIDARG = int(HResult.E_INVALIDARG)
INSUFFICIENT = int(HResult.HRESULT_ERROR_INSUFFICIENT_BUFFER)


def takes_elt_info(method: api.Method) -> bool:
    """Whether ``method`` takes a COR_PRF_ELT_INFO (the Get*3Info methods a slow-path hook calls)."""
    return any(p.type == _ELT_INFO for p in method.params)


@cache
def info_vtable() -> tuple[api.Method, ...]:
    """The stand-in object's vtable: IUnknown's methods, then every ICorProfilerInfo* method in order."""
    return (*api.interface("IUnknown").methods, *api.info_methods())


def type_size(ctype: str, arch: Arch) -> int | None:
    """Bytes of a value of ``ctype`` on ``arch`` (None: the emulator does not know the type)."""
    word = ISA[arch].word
    t = ctype.strip().removeprefix("const ").removeprefix("struct ").strip()
    if t.endswith("*") or t in _WORD_TYPES:
        return word
    if t in _WORD_STRUCTS:
        return word * _WORD_STRUCTS[t]
    return _FIXED.get(t)


def argument_words(method: api.Method, arch: Arch) -> tuple[int, ...] | None:
    """The argument slot (0 = the first after ``this``) where each parameter of ``method`` starts, as an
    ordinary call passes them (System V AMD64: one slot each, registers then stack; i386 cdecl: 4-byte
    stack words, 8-byte values in two). None when a parameter is a struct passed by value (not laid out
    here)."""
    out: list[int] = []
    at = 0
    for p in method.params:
        t = p.type.strip()
        if t.startswith("struct ") and not t.endswith("*"):
            return None
        size = type_size(t, arch) or ISA[arch].word
        out.append(at)
        at += 1 if arch == "x64" else max(1, size // 4)
    return tuple(out)


@dataclass(frozen=True)
class Out:
    """An out-parameter the runtime writes: ``size`` zero bytes at the pointer (``value``), the count of a
    caller-allocated buffer (``count``: zeroed) or the buffer (``buffer``: its first element, ``size``
    bytes, zeroed when the capacity parameter ``capacity`` is not 0)."""

    index: int
    name: str
    role: Literal["value", "count", "buffer"]
    size: int
    capacity: int | None = None


def out_parameters(method: api.Method, arch: Arch) -> tuple[Out, ...] | str:
    """What the runtime writes through ``method``'s parameters, or why the emulator cannot say (an
    out-parameter of a type it cannot size)."""
    shape = method.buffer
    names = [p.name for p in method.params]
    out: list[Out] = []
    for i, p in enumerate(method.params):
        t = p.type.strip()
        if not t.endswith("*") or t.startswith("const ") or _CALLBACK_TYPE.fullmatch(t) or t == "void*":
            continue
        pointee = t[:-1].strip()
        size = type_size(pointee, arch)
        if shape is not None and p.name == shape.buffer:
            if size is not None:
                out.append(Out(i, p.name, "buffer", size, capacity=names.index(shape.size)))
        elif shape is not None and p.name == shape.count:
            out.append(Out(i, p.name, "count", size or 4))
        elif _OUT_NAME.match(p.name):
            if size is None:
                return f"{method.name}'s out-parameter {p.name} is a {pointee} the emulator cannot size"
            out.append(Out(i, p.name, "value", size))
    return tuple(out)


def unanswerable(method: api.Method, arch: Arch) -> str | None:
    """Why a call of ``method`` is not emulated, or None when :func:`answer` answers it."""
    if argument_words(method, arch) is None:
        return f"{method.name} takes a struct by value, which the emulator does not lay out"
    if method.interface == "IUnknown" or takes_elt_info(method):
        return None
    outs = out_parameters(method, arch)
    return outs if isinstance(outs, str) else None


@dataclass(frozen=True)
class EltFrame:
    """What the runtime knows of the hook's frame: the COR_PRF_ELT_INFO handle the hook was given, the
    COR_PRF_FRAME_INFO it answers for it, the COR_PRF_FUNCTION_ARGUMENT_INFO it copies out and the return
    value's range (start, length)."""

    handle: int
    frame: int
    argument_info: bytes
    retval: tuple[int, int]


class Memory(Protocol):
    """The hook's memory as the checker judges it; a False or None answer means the run ended there (a
    finding or not emulated), and the call must not go on."""

    def read(self, address: int, size: int, what: str) -> bytes | None: ...

    def write(self, address: int, data: bytes, what: str) -> bool: ...


def _word(value: int, arch: Arch) -> bytes:
    isa = ISA[arch]
    return (value & isa.mask).to_bytes(isa.word, "little")


def answer(method: api.Method, this: int, args: Sequence[int], arch: Arch, frame: EltFrame | None,
           mem: Memory) -> int | None:
    """Answer a call of ``method`` on the stand-in object ``this`` with the parameter values ``args``:
    the value it returns (an HRESULT; AddRef/Release: a count), None when the run ended on a memory access
    (``mem`` said so). :func:`unanswerable` must be None for ``method``."""
    a = dict(zip((p.name for p in method.params), args, strict=True))
    what = f"{method.name}'s"
    name = method.name
    if name in ("AddRef", "Release"):
        return 1
    if name == "QueryInterface":
        out = a["ppvObject"]
        if out and not mem.write(out, _word(this, arch), f"{what} ppvObject"):
            return None
        return S_OK
    if takes_elt_info(method):
        return _elt_info(method, a, arch, frame, mem)
    outs = out_parameters(method, arch)
    assert not isinstance(outs, str)
    for o in outs:
        pointer = args[o.index]
        if not pointer:
            continue
        if o.role == "buffer" and (o.capacity is None or not args[o.capacity]):
            continue
        if not mem.write(pointer, bytes(o.size), f"{what} {o.name}"):
            return None
    return S_OK


def _elt_info(
    method: api.Method, a: dict[str, int], arch: Arch, frame: EltFrame | None, mem: Memory
) -> int | None:
    """A Get*3Info method, answered from its parameters: the handle, pFrameInfo, pRetvalRange,
    pcbArgumentInfo with pArgumentInfo."""
    name = method.name
    handle = next(a[p.name] for p in method.params if p.type == _ELT_INFO)
    if frame is None or handle != frame.handle:
        return E_INVALIDARG  # not the handle of the hook being run
    out = a.get("pFrameInfo")
    if out and not mem.write(out, _word(frame.frame, arch), f"{name}'s pFrameInfo"):
        return None
    if a.get("pRetvalRange"):
        start, length = frame.retval
        word = ISA[arch].word
        data = _word(start, arch) + length.to_bytes(4, "little") + bytes(word - 4)
        if not mem.write(a["pRetvalRange"], data, f"{name}'s pRetvalRange"):
            return None
    if "pcbArgumentInfo" not in a:
        return S_OK
    pcb, buffer = a["pcbArgumentInfo"], a.get("pArgumentInfo", 0)
    if not pcb:
        return E_INVALIDARG
    have = mem.read(pcb, 4, f"{name}'s pcbArgumentInfo")
    if have is None:
        return None
    need = len(frame.argument_info)
    if int.from_bytes(have, "little") < need or not buffer:
        if not mem.write(pcb, need.to_bytes(4, "little"), f"{name}'s pcbArgumentInfo"):
            return None
        return INSUFFICIENT if int.from_bytes(have, "little") < need else E_INVALIDARG
    if not mem.write(buffer, frame.argument_info, f"{name}'s pArgumentInfo"):
        return None
    if not mem.write(pcb, need.to_bytes(4, "little"), f"{name}'s pcbArgumentInfo"):
        return None
    return S_OK
