// Prints "interface<TAB>method<TAB>slot" for every method declared in profharness/interfaces.h, with
// the slot computed by the compiler. Itanium C++ ABI: a pointer to a virtual member function holds
// 1 + the slot's byte offset in the vtable. Built and run by tests/conformance/core/test_probe_header.py.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "profharness/interfaces.h"

using namespace profharness;

namespace {

struct PmfRep {
    std::uintptr_t ptr;
    std::ptrdiff_t adj;
};

template <typename Pmf>
long slot_of(Pmf pmf) {
    static_assert(sizeof(Pmf) == sizeof(PmfRep), "Itanium pointer-to-member layout");
    PmfRep rep;
    std::memcpy(&rep, &pmf, sizeof rep);
    if ((rep.ptr & 1u) == 0 || rep.adj != 0) return -1;  // not virtual, or not in the primary vtable
    return static_cast<long>((rep.ptr - 1) / sizeof(void*));
}

}  // namespace

int main() {
#define SLOT(Iface, Method) std::printf("%s\t%s\t%ld\n", #Iface, #Method, slot_of(&Iface::Method));
#include "slot_list.inc"
#undef SLOT
    return 0;
}
