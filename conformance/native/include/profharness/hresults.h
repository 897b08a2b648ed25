// Every HRESULT the probe uses. Values equal clr_model/hresults.py (checked by
// tests/conformance/test_probe_header.py): winerror.h for COM/Win32 codes, corerror.xml for CORPROF_E_*.
#pragma once

#include "profharness/types.h"

namespace profharness {

inline constexpr HRESULT hr_of(std::uint32_t v) { return static_cast<HRESULT>(v); }

inline constexpr HRESULT S_OK = hr_of(0x00000000u);
inline constexpr HRESULT S_FALSE = hr_of(0x00000001u);
inline constexpr HRESULT E_NOTIMPL = hr_of(0x80004001u);
inline constexpr HRESULT E_NOINTERFACE = hr_of(0x80004002u);
inline constexpr HRESULT E_POINTER = hr_of(0x80004003u);
inline constexpr HRESULT E_FAIL = hr_of(0x80004005u);
inline constexpr HRESULT E_OUTOFMEMORY = hr_of(0x8007000Eu);
inline constexpr HRESULT E_INVALIDARG = hr_of(0x80070057u);
inline constexpr HRESULT HRESULT_ERROR_INSUFFICIENT_BUFFER = hr_of(0x8007007Au);
inline constexpr HRESULT CLASS_E_NOAGGREGATION = hr_of(0x80040110u);
inline constexpr HRESULT CLASS_E_CLASSNOTAVAILABLE = hr_of(0x80040111u);
inline constexpr HRESULT CORPROF_E_NOT_MANAGED_THREAD = hr_of(0x80131355u);
inline constexpr HRESULT CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD = hr_of(0x8013135Eu);
inline constexpr HRESULT CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX = hr_of(0x8013135Fu);
inline constexpr HRESULT CORPROF_E_STACKSNAPSHOT_UNSAFE = hr_of(0x80131360u);
inline constexpr HRESULT CORPROF_E_UNSUPPORTED_CALL_SEQUENCE = hr_of(0x80131363u);

inline constexpr bool failed(HRESULT hr) { return hr < 0; }

}  // namespace profharness
