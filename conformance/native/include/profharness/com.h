// ComHolder<T>: owns one reference to a COM interface (any IUnknown-derived T) and releases it when it
// goes out of scope. Move-only. An interface obtained through an IUnknown** out-parameter
// (GetModuleMetaData, GetTokenAndMetaDataFromFunction) is adopted with adopt(static_cast<T*>(unk)).
#pragma once

#include <utility>

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

}  // namespace profharness
