// common.h -- tiny COM boilerplate shared by the docfixtures profilers.
//
// What is here, and nothing else:
//   * CallbackBase: an ICorProfilerCallback11 implementation whose every method is a no-op that
//     returns S_OK, plus IUnknown (QueryInterface for IUnknown and ICorProfilerCallback..11,
//     atomic AddRef/Release).  Profilers derive from it and override what they need.  It declares
//     NO virtual destructor and no virtual functions of its own, so the vtable is exactly the
//     interface's (corprof.idl order, as declared in profharness/interfaces.h).
//   * A class factory and the DllGetClassObject export (DOCFIX_DEFINE_PROFILER(Class)).
//   * Small helpers: WCHAR (UTF-16) -> UTF-8, GUID formatting.
//
// Documentation followed: "ICorProfilerCallback Interface" / "ICorProfilerCallback2..11
// Interface" (the runtime creates the object through the class factory and QueryInterfaces it for
// the newest callback interface it knows; 3.1 asks up to Callback9, 8.0 up to Callback11), and the
// COM rules for IUnknown/IClassFactory.  ICorProfilerCallback11::LoadAsNotificationOnly answers
// FALSE: these are ordinary (main) profilers.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "profharness/flags.h"
#include "profharness/hresults.h"
#include "profharness/interfaces.h"
#include "profharness/types.h"

namespace docfix {

using namespace profharness;

// {6D1B2C3A-4E5F-4A6B-8C7D-9E0F1A2B3C4D}
inline constexpr GUID CLSID_DocFixProfiler = {
    0x6D1B2C3A, 0x4E5F, 0x4A6B, {0x8C, 0x7D, 0x9E, 0x0F, 0x1A, 0x2B, 0x3C, 0x4D}};

inline bool succeeded(HRESULT hr) { return hr >= 0; }

inline std::string to_utf8(const WCHAR* s, size_t n = static_cast<size_t>(-1)) {
    std::string out;
    if (s == nullptr) return out;
    for (size_t i = 0; i < n && s[i] != 0; ++i) {
        std::uint32_t c = s[i];
        if (c >= 0xD800 && c <= 0xDBFF && i + 1 < n && s[i + 1] >= 0xDC00 && s[i + 1] <= 0xDFFF) {
            c = 0x10000 + ((c - 0xD800) << 10) + (s[i + 1] - 0xDC00);
            ++i;
        }
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x800) {
            out += static_cast<char>(0xC0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += static_cast<char>(0xE0 | (c >> 12));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (c >> 18));
            out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Callback base: every notification is a no-op.
// ---------------------------------------------------------------------------------------------
class CallbackBase : public ICorProfilerCallback11 {
public:
    // IUnknown
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (ppv == nullptr) return E_POINTER;
        if (riid == IID_IUnknown || riid == IID_ICorProfilerCallback || riid == IID_ICorProfilerCallback2 ||
            riid == IID_ICorProfilerCallback3 || riid == IID_ICorProfilerCallback4 ||
            riid == IID_ICorProfilerCallback5 || riid == IID_ICorProfilerCallback6 ||
            riid == IID_ICorProfilerCallback7 || riid == IID_ICorProfilerCallback8 ||
            riid == IID_ICorProfilerCallback9 || riid == IID_ICorProfilerCallback10 ||
            riid == IID_ICorProfilerCallback11) {
            *ppv = static_cast<ICorProfilerCallback11*>(this);
            AddRef();
            return S_OK;
        }
        *ppv = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        // The runtime holds the profiler for the life of the process; when the count reaches zero
        // the object is intentionally leaked (no virtual destructor may exist -- see header).
        return --refs_;
    }

    // ICorProfilerCallback
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE Shutdown() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AppDomainCreationStarted(AppDomainID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AppDomainCreationFinished(AppDomainID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AppDomainShutdownStarted(AppDomainID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AppDomainShutdownFinished(AppDomainID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AssemblyLoadStarted(AssemblyID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AssemblyLoadFinished(AssemblyID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AssemblyUnloadStarted(AssemblyID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE AssemblyUnloadFinished(AssemblyID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ModuleLoadStarted(ModuleID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ModuleLoadFinished(ModuleID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ModuleUnloadStarted(ModuleID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ModuleUnloadFinished(ModuleID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ModuleAttachedToAssembly(ModuleID, AssemblyID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ClassLoadStarted(ClassID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ClassLoadFinished(ClassID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ClassUnloadStarted(ClassID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ClassUnloadFinished(ClassID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE FunctionUnloadStarted(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE JITCompilationStarted(FunctionID, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE JITCompilationFinished(FunctionID, HRESULT, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchStarted(FunctionID, BOOL* pbUseCachedFunction) override {
        if (pbUseCachedFunction) *pbUseCachedFunction = 1;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE JITCachedFunctionSearchFinished(FunctionID, COR_PRF_JIT_CACHE) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE JITFunctionPitched(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE JITInlining(FunctionID, FunctionID, BOOL* pfShouldInline) override {
        if (pfShouldInline) *pfShouldInline = 1;
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ThreadCreated(ThreadID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ThreadDestroyed(ThreadID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ThreadAssignedToOSThread(ThreadID, DWORD) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingClientInvocationStarted() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingClientSendingMessage(GUID*, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingClientReceivingReply(GUID*, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingClientInvocationFinished() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingServerReceivingMessage(GUID*, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingServerInvocationStarted() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingServerInvocationReturned() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RemotingServerSendingReply(GUID*, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE UnmanagedToManagedTransition(FunctionID, COR_PRF_TRANSITION_REASON) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ManagedToUnmanagedTransition(FunctionID, COR_PRF_TRANSITION_REASON) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendStarted(COR_PRF_SUSPEND_REASON) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendFinished() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeSuspendAborted() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeResumeStarted() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeResumeFinished() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeThreadSuspended(ThreadID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RuntimeThreadResumed(ThreadID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE MovedReferences(ULONG, ObjectID*, ObjectID*, ULONG*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID, ClassID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ObjectsAllocatedByClass(ULONG, ClassID*, ULONG*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID, ClassID, ULONG, ObjectID*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RootReferences(ULONG, ObjectID*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionThrown(ObjectID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFunctionEnter(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFunctionLeave() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFilterEnter(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionSearchFilterLeave() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionSearchCatcherFound(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionOSHandlerEnter(UINT_PTR) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionOSHandlerLeave(UINT_PTR) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionEnter(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFunctionLeave() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyEnter(FunctionID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionUnwindFinallyLeave() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherEnter(FunctionID, ObjectID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionCatcherLeave() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE COMClassicVTableCreated(ClassID, REFGUID, void*, ULONG) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE COMClassicVTableDestroyed(ClassID, REFGUID, void*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionCLRCatcherFound() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ExceptionCLRCatcherExecute() override { return S_OK; }

    // ICorProfilerCallback2
    HRESULT STDMETHODCALLTYPE ThreadNameChanged(ThreadID, ULONG, WCHAR*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE SurvivingReferences(ULONG, ObjectID*, ULONG*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD, ObjectID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG, ObjectID*, COR_PRF_GC_ROOT_KIND*, COR_PRF_GC_ROOT_FLAGS*, UINT_PTR*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID, ObjectID) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID) override { return S_OK; }

    // ICorProfilerCallback3
    HRESULT STDMETHODCALLTYPE InitializeForAttach(IUnknown*, void*, UINT) override { return E_NOTIMPL; }
    HRESULT STDMETHODCALLTYPE ProfilerAttachComplete() override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ProfilerDetachSucceeded() override { return S_OK; }

    // ICorProfilerCallback4
    HRESULT STDMETHODCALLTYPE ReJITCompilationStarted(FunctionID, ReJITID, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE GetReJITParameters(ModuleID, mdMethodDef, ICorProfilerFunctionControl*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ReJITCompilationFinished(FunctionID, ReJITID, HRESULT, BOOL) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE ReJITError(ModuleID, mdMethodDef, FunctionID, HRESULT) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG, ObjectID*, ObjectID*, SIZE_T*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG, ObjectID*, SIZE_T*) override { return S_OK; }

    // ICorProfilerCallback5
    HRESULT STDMETHODCALLTYPE ConditionalWeakTableElementReferences(ULONG, ObjectID*, ObjectID*, GCHandleID*) override { return S_OK; }
    // ICorProfilerCallback6
    HRESULT STDMETHODCALLTYPE GetAssemblyReferences(const WCHAR*, ICorProfilerAssemblyReferenceProvider*) override { return S_OK; }
    // ICorProfilerCallback7
    HRESULT STDMETHODCALLTYPE ModuleInMemorySymbolsUpdated(ModuleID) override { return S_OK; }
    // ICorProfilerCallback8
    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationStarted(FunctionID, BOOL, LPCBYTE, ULONG) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE DynamicMethodJITCompilationFinished(FunctionID, HRESULT, BOOL) override { return S_OK; }
    // ICorProfilerCallback9
    HRESULT STDMETHODCALLTYPE DynamicMethodUnloaded(FunctionID) override { return S_OK; }
    // ICorProfilerCallback10
    HRESULT STDMETHODCALLTYPE EventPipeEventDelivered(EVENTPIPE_PROVIDER, DWORD, DWORD, ULONG, LPCBYTE, ULONG, LPCBYTE,
                                                      LPCGUID, LPCGUID, ThreadID, ULONG, UINT_PTR*) override { return S_OK; }
    HRESULT STDMETHODCALLTYPE EventPipeProviderCreated(EVENTPIPE_PROVIDER) override { return S_OK; }
    // ICorProfilerCallback11
    HRESULT STDMETHODCALLTYPE LoadAsNotificationOnly(BOOL* pbNotificationOnly) override {
        if (pbNotificationOnly) *pbNotificationOnly = 0;
        return S_OK;
    }

protected:
    std::atomic<ULONG> refs_{0};
};

// ---------------------------------------------------------------------------------------------
// Class factory
// ---------------------------------------------------------------------------------------------
template <class Profiler>
class ClassFactory : public IClassFactory {
public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (ppv == nullptr) return E_POINTER;
        if (riid == IID_IUnknown || riid == IID_IClassFactory) {
            *ppv = static_cast<IClassFactory*>(this);
            AddRef();
            return S_OK;
        }
        *ppv = nullptr;
        return E_NOINTERFACE;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override { return --refs_; }  // static instance, never freed
    HRESULT STDMETHODCALLTYPE CreateInstance(IUnknown* outer, REFIID riid, void** ppv) override {
        if (ppv == nullptr) return E_POINTER;
        *ppv = nullptr;
        if (outer != nullptr) return CLASS_E_NOAGGREGATION;
        auto* p = new (std::nothrow) Profiler();
        if (p == nullptr) return E_OUTOFMEMORY;
        HRESULT hr = p->QueryInterface(riid, ppv);
        // On failure the object was never handed out; it is leaked rather than deleted because the
        // callback classes deliberately have no virtual destructor.
        return hr;
    }
    HRESULT STDMETHODCALLTYPE LockServer(BOOL) override { return S_OK; }

private:
    std::atomic<ULONG> refs_{1};
};

}  // namespace docfix

// Defines DllGetClassObject for one profiler class.  Must be used exactly once per .so.
#define DOCFIX_DEFINE_PROFILER(ProfilerClass)                                                       \
    extern "C" __attribute__((visibility("default"))) profharness::HRESULT DllGetClassObject(       \
        profharness::REFCLSID rclsid, profharness::REFIID riid, void** ppv) {                       \
        using namespace profharness;                                                                \
        if (ppv == nullptr) return E_POINTER;                                                       \
        *ppv = nullptr;                                                                             \
        if (!(rclsid == docfix::CLSID_DocFixProfiler)) return CLASS_E_CLASSNOTAVAILABLE;            \
        static docfix::ClassFactory<ProfilerClass> factory;                                         \
        return factory.QueryInterface(riid, ppv);                                                   \
    }
