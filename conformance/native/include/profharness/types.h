// Basic types of the profiling API as the runtime's PAL defines them on Linux x86_64 (LP64:
// LONG/ULONG/DWORD/HRESULT are 32-bit, WCHAR is 16-bit, calling convention SysV).
// Declared here from the published facts (corprof.idl, cor.h, pal.h); no SDK or PAL header is used.
#pragma once

#include <cstddef>
#include <cstdint>

#define STDMETHODCALLTYPE

namespace profharness {

using HRESULT = std::int32_t;
using ULONG = std::uint32_t;
using ULONG32 = std::uint32_t;
using DWORD = std::uint32_t;
using UINT = std::uint32_t;
using USHORT = std::uint16_t;
using BOOL = std::int32_t;
using BYTE = std::uint8_t;
using WCHAR = char16_t;
using LPCWSTR = const WCHAR*;
using UINT_PTR = std::uintptr_t;
using SIZE_T = std::size_t;
using HANDLE = void*;
using LPCBYTE = const BYTE*;
using PCCOR_SIGNATURE = const BYTE*;
using HCORENUM = void*;

struct GUID {
    std::uint32_t Data1;
    std::uint16_t Data2;
    std::uint16_t Data3;
    std::uint8_t Data4[8];
};
using REFIID = const GUID&;
using REFGUID = const GUID&;
using REFCLSID = const GUID&;
using LPCGUID = const GUID*;

inline bool operator==(const GUID& a, const GUID& b) {
    if (a.Data1 != b.Data1 || a.Data2 != b.Data2 || a.Data3 != b.Data3) return false;
    for (int i = 0; i < 8; ++i)
        if (a.Data4[i] != b.Data4[i]) return false;
    return true;
}

// Metadata tokens (cor.h: typedef ULONG32 mdToken).
using mdToken = std::uint32_t;
using mdModule = mdToken;
using mdTypeDef = mdToken;
using mdMethodDef = mdToken;
using mdFieldDef = mdToken;

// Opaque ids (corprof.idl: typedef UINT_PTR ...).
using ProcessID = UINT_PTR;
using AssemblyID = UINT_PTR;
using AppDomainID = UINT_PTR;
using ModuleID = UINT_PTR;
using ClassID = UINT_PTR;
using ThreadID = UINT_PTR;
using ContextID = UINT_PTR;
using FunctionID = UINT_PTR;
using ObjectID = UINT_PTR;
using GCHandleID = UINT_PTR;
using COR_PRF_ELT_INFO = UINT_PTR;
using ReJITID = UINT_PTR;
using COR_PRF_FRAME_INFO = UINT_PTR;
using EVENTPIPE_PROVIDER = UINT_PTR;

// Enums passed by value are int-sized.
using CorElementType = std::uint32_t;
using COR_PRF_JIT_CACHE = std::int32_t;
using COR_PRF_TRANSITION_REASON = std::int32_t;
using COR_PRF_SUSPEND_REASON = std::int32_t;
using COR_PRF_GC_REASON = std::int32_t;
using COR_PRF_GC_ROOT_KIND = std::int32_t;
using COR_PRF_GC_ROOT_FLAGS = std::int32_t;
using COR_PRF_STATIC_TYPE = std::int32_t;
using COR_PRF_RUNTIME_TYPE = std::int32_t;
using COR_PRF_GC_GENERATION = std::int32_t;
using COR_PRF_CLAUSE_TYPE = std::int32_t;

// Flag values (COR_PRF_MONITOR, COR_PRF_HIGH_MONITOR, COR_PRF_SNAPSHOT_INFO) are in the generated
// profharness/flags.h, HRESULTs in the generated profharness/hresults.h (conformance/codegen/constants.py).

// COR_PRF_RUNTIME_TYPE
inline constexpr COR_PRF_RUNTIME_TYPE COR_PRF_DESKTOP_CLR = 0x1;
inline constexpr COR_PRF_RUNTIME_TYPE COR_PRF_CORE_CLR = 0x2;

// IMetaDataImport open flags (cor.h CorOpenFlags)
inline constexpr DWORD ofRead = 0x0;

struct COR_IL_MAP {
    ULONG32 oldOffset;
    ULONG32 newOffset;
    BOOL fAccurate;
};
struct COR_DEBUG_IL_TO_NATIVE_MAP {
    ULONG32 ilOffset;
    ULONG32 nativeStartOffset;
    ULONG32 nativeEndOffset;
};
struct COR_FIELD_OFFSET {
    mdFieldDef ridOfField;
    ULONG ulOffset;
};
struct COR_PRF_FUNCTION_ARGUMENT_RANGE {
    UINT_PTR startAddress;
    ULONG length;
};
struct COR_PRF_FUNCTION_ARGUMENT_INFO {
    ULONG numRanges;
    ULONG totalArgumentSize;
    COR_PRF_FUNCTION_ARGUMENT_RANGE ranges[1];
};
struct COR_PRF_CODE_INFO {
    UINT_PTR startAddress;
    SIZE_T size;
};
struct COR_PRF_GC_GENERATION_RANGE {
    COR_PRF_GC_GENERATION generation;
    ObjectID rangeStart;
    UINT_PTR rangeLength;
    UINT_PTR rangeLengthReserved;
};
struct COR_PRF_EX_CLAUSE_INFO {
    COR_PRF_CLAUSE_TYPE clauseType;
    UINT_PTR programCounter;
    UINT_PTR framePointer;
    UINT_PTR shadowStackPointer;
};
union FunctionIDOrClientID {
    FunctionID functionID;
    UINT_PTR clientID;
};

// Function-pointer types (corprof.idl typedefs; STDMETHODCALLTYPE is empty on Unix).
using FunctionEnter = void(FunctionID funcID);
using FunctionLeave = void(FunctionID funcID);
using FunctionTailcall = void(FunctionID funcID);
using FunctionEnter2 = void(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func,
                            COR_PRF_FUNCTION_ARGUMENT_INFO* argumentInfo);
using FunctionLeave2 = void(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func,
                            COR_PRF_FUNCTION_ARGUMENT_RANGE* retvalRange);
using FunctionTailcall2 = void(FunctionID funcId, UINT_PTR clientData, COR_PRF_FRAME_INFO func);
using FunctionEnter3 = void(FunctionIDOrClientID functionIDOrClientID);
using FunctionLeave3 = void(FunctionIDOrClientID functionIDOrClientID);
using FunctionTailcall3 = void(FunctionIDOrClientID functionIDOrClientID);
using FunctionEnter3WithInfo = void(FunctionIDOrClientID functionIDOrClientID, COR_PRF_ELT_INFO eltInfo);
using FunctionLeave3WithInfo = void(FunctionIDOrClientID functionIDOrClientID, COR_PRF_ELT_INFO eltInfo);
using FunctionTailcall3WithInfo = void(FunctionIDOrClientID functionIDOrClientID, COR_PRF_ELT_INFO eltInfo);
using FunctionIDMapper = UINT_PTR(FunctionID funcId, BOOL* pbHookFunction);
using FunctionIDMapper2 = UINT_PTR(FunctionID funcId, void* clientData, BOOL* pbHookFunction);
using StackSnapshotCallback = HRESULT(FunctionID funcId, UINT_PTR ip, COR_PRF_FRAME_INFO frameInfo,
                                      ULONG32 contextSize, BYTE context[], void* clientData);
using ObjectReferenceCallback = BOOL(ObjectID root, ObjectID* reference, void* clientData);

// Interfaces the probe only passes around.
struct ICorProfilerFunctionControl;
struct ICorProfilerAssemblyReferenceProvider;
struct ICorProfilerObjectEnum;
struct ICorProfilerFunctionEnum;
struct ICorProfilerModuleEnum;
struct ICorProfilerThreadEnum;
struct ICorProfilerMethodEnum;
struct IMethodMalloc;

// The PAL's AMD64 CONTEXT (Windows AMD64 layout). Newer runtimes append extended-state fields after
// LastExceptionFromRip, so the runtime's own sizeof(CONTEXT) differs between versions: never use
// sizeof(AMD64Context) to size a buffer handed to the runtime (see kContextBufferSize).
struct alignas(16) M128A {
    std::uint64_t Low;
    std::int64_t High;
};
struct alignas(16) AMD64Context {
    std::uint64_t P1Home, P2Home, P3Home, P4Home, P5Home, P6Home;
    DWORD ContextFlags;
    DWORD MxCsr;
    std::uint16_t SegCs, SegDs, SegEs, SegFs, SegGs, SegSs;
    DWORD EFlags;
    std::uint64_t Dr0, Dr1, Dr2, Dr3, Dr6, Dr7;
    std::uint64_t Rax, Rcx, Rdx, Rbx, Rsp, Rbp, Rsi, Rdi;
    std::uint64_t R8, R9, R10, R11, R12, R13, R14, R15;
    std::uint64_t Rip;
    M128A FltSave[32];  // XMM_SAVE_AREA32, 512 bytes
    M128A VectorRegister[26];
    std::uint64_t VectorControl;
    std::uint64_t DebugControl;
    std::uint64_t LastBranchToRip;
    std::uint64_t LastBranchFromRip;
    std::uint64_t LastExceptionToRip;
    std::uint64_t LastExceptionFromRip;
};
static_assert(offsetof(AMD64Context, ContextFlags) == 0x30, "CONTEXT.ContextFlags");
static_assert(offsetof(AMD64Context, Rax) == 0x78, "CONTEXT.Rax");
static_assert(offsetof(AMD64Context, Rsp) == 0x98, "CONTEXT.Rsp");
static_assert(offsetof(AMD64Context, Rbp) == 0xA0, "CONTEXT.Rbp");
static_assert(offsetof(AMD64Context, Rip) == 0xF8, "CONTEXT.Rip");
static_assert(offsetof(AMD64Context, FltSave) == 0x100, "CONTEXT.FltSave");
static_assert(sizeof(AMD64Context) == 0x4D0, "base AMD64 CONTEXT is 1232 bytes");

inline constexpr std::size_t kContextRspOffset = offsetof(AMD64Context, Rsp);
inline constexpr std::size_t kContextRbpOffset = offsetof(AMD64Context, Rbp);
inline constexpr std::size_t kContextRipOffset = offsetof(AMD64Context, Rip);
// Any CONTEXT buffer the probe hands to the runtime is this large and 64-byte aligned: well above
// every runtime's sizeof(CONTEXT) including AVX-512 extended state.
inline constexpr std::size_t kContextBufferSize = 8192;

}  // namespace profharness
