// ComHolder<T>: owns one reference to a COM interface (any IUnknown-derived T) and releases it when it
// goes out of scope. Move-only. An interface obtained through an IUnknown** out-parameter
// (GetModuleMetaData, GetTokenAndMetaDataFromFunction) is adopted with adopt(static_cast<T*>(unk)).
#pragma once

#include <utility>

#include "profharness/hresults.h"
#include "profharness/interfaces.h"

namespace profharness {

template <typename T>
class ComHolder {
 public:
    ComHolder() = default;
    explicit ComHolder(T* p) : p_(p) {}  // adopts the reference (no AddRef)
    ~ComHolder() { reset(); }
    ComHolder(const ComHolder&) = delete;
    ComHolder& operator=(const ComHolder&) = delete;
    ComHolder(ComHolder&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
    ComHolder& operator=(ComHolder&& other) noexcept {
        if (this != &other) {
            reset();
            p_ = std::exchange(other.p_, nullptr);
        }
        return *this;
    }

    T* get() const { return p_; }
    T* operator->() const { return p_; }
    explicit operator bool() const { return p_ != nullptr; }

    void reset() {
        if (p_) std::exchange(p_, nullptr)->Release();
    }
    // Releases what is held and takes over p's reference (no AddRef).
    void adopt(T* p) {
        reset();
        p_ = p;
    }

 private:
    T* p_ = nullptr;
};

// QueryInterface of an object with one interface besides IUnknown: `self` (AddRef'd) for IID_IUnknown and
// `iid`, E_NOINTERFACE with *ppv null for any other, E_POINTER for a null ppv.
template <typename I>
HRESULT query_one(I* self, const GUID& iid, REFIID riid, void** ppv) {
    if (!ppv) return E_POINTER;
    if (riid == IID_IUnknown || riid == iid) {
        *ppv = self;
        self->AddRef();
        return S_OK;
    }
    *ppv = nullptr;
    return E_NOINTERFACE;
}

// Asks `unk` for each level's interface, *iid_of(1) to *iid_of(max_level): what it gives goes in levels[k]
// (a reference of its own), a refused level's entry is left as it was. Returns the highest level given (0: none).
template <typename IidOf>
int query_levels(IUnknown* unk, int max_level, IidOf iid_of, void** levels) {
    int level = 0;
    for (int k = 1; k <= max_level; ++k) {
        void* p = nullptr;
        if (unk->QueryInterface(*iid_of(k), &p) == S_OK && p) {
            levels[k] = p;
            level = k;
        }
    }
    return level;
}

}  // namespace profharness
