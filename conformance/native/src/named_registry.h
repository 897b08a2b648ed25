// A fixed-capacity registry of entries looked up by name (threads a scenario registers for the
// asynchronous-walk and capture experiments). Entry needs a std::string `name` member and to be copyable.
// Thread-safe; not for signal handlers (it takes a mutex): look entries up before signalling.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

namespace profharness {

template <typename Entry, std::size_t Capacity>
class NamedRegistry {
public:
    // Replaces the entry with the same name, else appends; false when the registry is full.
    bool put(const Entry& entry) {
        std::lock_guard<std::mutex> lock(mu_);
        for (std::size_t i = 0; i < count_; ++i)
            if (entries_[i].name == entry.name) {
                entries_[i] = entry;
                return true;
            }
        if (count_ == Capacity) return false;
        entries_[count_++] = entry;
        return true;
    }

    // Copies the entry called `name` into `out`; false when there is none.
    bool find(const std::string& name, Entry& out) const {
        std::lock_guard<std::mutex> lock(mu_);
        for (std::size_t i = 0; i < count_; ++i)
            if (entries_[i].name == name) {
                out = entries_[i];
                return true;
            }
        return false;
    }

private:
    mutable std::mutex mu_;
    Entry entries_[Capacity];
    std::size_t count_ = 0;
};

}  // namespace profharness
