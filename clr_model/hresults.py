"""Every HRESULT the contract documents and the runtimes use: one table.

Values are unsigned 32-bit, as the runtime's headers spell them. Format with :func:`format_hresult`,
e.g. ``0x8013135F CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX``.

Sources: winerror.h (COM and Win32 codes) and the runtime's corerror.xml (CORPROF_E_* codes,
dotnet/runtime src/coreclr/inc/corerror.xml; every CORPROF value below was checked against it). The native
probe's header ``profharness/hresults.h`` is generated from this table at build time
(conformance/codegen/constants.py; tests/conformance/core/test_probe_header.py).

DoStackSnapshot returns (dotnet/runtime src/coreclr/vm/proftoeeinterfaceimpl.cpp): S_OK,
E_INVALIDARG (infoFlags bits other than REGISTER_CONTEXT, or X86_OPTIMIZED on x86),
E_NOTIMPL (a cross-thread walk on a platform without safe thread suspension, unless the runtime is
suspended), CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX, CORPROF_E_STACKSNAPSHOT_UNSAFE,
CORPROF_E_STACKSNAPSHOT_ABORTED (the callback returned something other than S_OK),
CORPROF_E_ASYNCHRONOUS_UNSAFE, CORPROF_E_INCONSISTENT_WITH_FLAGS, E_FAIL, E_UNEXPECTED.
"""

from __future__ import annotations

from enum import IntEnum


class HResult(IntEnum):
    S_OK = 0x00000000
    S_FALSE = 0x00000001
    E_NOTIMPL = 0x80004001
    E_NOINTERFACE = 0x80004002
    E_POINTER = 0x80004003
    E_ABORT = 0x80004004
    E_FAIL = 0x80004005
    E_UNEXPECTED = 0x8000FFFF
    E_OUTOFMEMORY = 0x8007000E
    E_INVALIDARG = 0x80070057
    #: HRESULT_FROM_WIN32(ERROR_INSUFFICIENT_BUFFER)
    HRESULT_ERROR_INSUFFICIENT_BUFFER = 0x8007007A
    CLASS_E_NOAGGREGATION = 0x80040110
    CLASS_E_CLASSNOTAVAILABLE = 0x80040111
    CORPROF_E_FUNCTION_NOT_COMPILED = 0x80131350
    CORPROF_E_DATAINCOMPLETE = 0x80131351
    CORPROF_E_FUNCTION_NOT_IL = 0x80131354
    CORPROF_E_NOT_MANAGED_THREAD = 0x80131355
    CORPROF_E_CALL_ONLY_FROM_INIT = 0x80131356
    CORPROF_E_NOT_YET_AVAILABLE = 0x8013135B
    CORPROF_E_TYPE_IS_PARAMETERIZED = 0x8013135C
    CORPROF_E_FUNCTION_IS_PARAMETERIZED = 0x8013135D
    CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD = 0x8013135E
    CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX = 0x8013135F
    CORPROF_E_STACKSNAPSHOT_UNSAFE = 0x80131360
    CORPROF_E_STACKSNAPSHOT_ABORTED = 0x80131361
    CORPROF_E_LITERALS_HAVE_NO_ADDRESS = 0x80131362
    CORPROF_E_UNSUPPORTED_CALL_SEQUENCE = 0x80131363
    CORPROF_E_ASYNCHRONOUS_UNSAFE = 0x80131364
    CORPROF_E_CLASSID_IS_ARRAY = 0x80131365
    CORPROF_E_CLASSID_IS_COMPOSITE = 0x80131366
    CORPROF_E_PROFILER_DETACHING = 0x80131367
    CORPROF_E_PROFILER_ALREADY_ACTIVE = 0x8013136A
    CORPROF_E_CALLBACK3_REQUIRED = 0x8013136E
    CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER = 0x8013136F
    CORPROF_E_IRREVERSIBLE_INSTRUMENTATION_PRESENT = 0x80131370
    CORPROF_E_RUNTIME_UNINITIALIZED = 0x80131371
    CORPROF_E_IMMUTABLE_FLAGS_SET = 0x80131372
    CORPROF_E_PROFILER_NOT_YET_INITIALIZED = 0x80131373
    CORPROF_E_INCONSISTENT_WITH_FLAGS = 0x80131374
    CORPROF_E_CALLBACK4_REQUIRED = 0x8013137B
    CORPROF_E_REJIT_NOT_ENABLED = 0x8013137C
    CORPROF_E_SUSPENSION_IN_PROGRESS = 0x80131388

    @property
    def failed(self) -> bool:
        return hresult_failed(self.value)


def hresult_failed(value: int) -> bool:
    """FAILED(hr): the severity bit is set."""
    return bool(value & 0x80000000)


def to_unsigned(value: int) -> int:
    """Normalise a signed 32-bit HRESULT (as C# or a signed int prints it) to the unsigned form."""
    if not -(2**31) <= value < 2**32:
        raise ValueError(f"{value} is not a 32-bit HRESULT")
    return value & 0xFFFFFFFF


def name_of(value: int) -> str | None:
    """The symbolic name of an HRESULT, or None when the table does not know it."""
    try:
        return HResult(to_unsigned(value)).name
    except ValueError:
        return None


def format_hresult(value: int) -> str:
    """``0x8013135F CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX``; unknown codes as the bare hex."""
    unsigned = to_unsigned(value)
    name = name_of(unsigned)
    return f"0x{unsigned:08X} {name}" if name else f"0x{unsigned:08X}"
