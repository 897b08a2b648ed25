// walkq_cfi.h: one native frame unwound by the loaded objects' .eh_frame call-frame information (x86-64), for
// walkq_recovered.cpp, as docs/seeding.md's method says: "One FDE per step, found by binary search in the
// module's .eh_frame_hdr table; run the CIE's and the FDE's CFA instructions up to the IP". Written from the
// documents a profiler author has: the System V x86-64 psABI (DWARF register numbers 0-16: rax rdx rcx rbx
// rsi rdi rbp rsp r8..r15, 16 = the return address), the LSB's .eh_frame / .eh_frame_hdr layout (CIE and FDE
// records, augmentation "zR"/"zPLR", DW_EH_PE_* pointer encodings; the header's sorted table of
// (initial location, FDE address) pairs, datarel sdata4) and DWARF 4 section 6.4 (the CFA instructions).
//
// Split as the method says:
//   * outside the handler (Cfi::refresh, on the fixture's own thread): dl_iterate_phdr -> each loaded object's
//     executable PT_LOAD ranges and its PT_GNU_EH_FRAME (the .eh_frame_hdr, in the object's own mapped
//     memory); a new table is published with one atomic store, only when the loader's dlpi_adds/dlpi_subs
//     moved (tables are never freed: a handler may still read one);
//   * in the handler (Cfi::step): a binary search of the published table, the header's table read in place,
//     the CIE/FDE decoded and their instructions run up to the IP, the saved registers read from the stack
//     through a fault-free reader. No allocation, no lock, no call into the loader or the runtime.
// Rules given by DWARF expressions (DW_CFA_def_cfa_expression, DW_CFA_expression, DW_CFA_val_expression: PLT
// entries, signal trampolines) are not evaluated: the step fails and the caller falls back to the stub rules.
#pragma once

#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace walkq_cfi {

// x86-64 DWARF register numbers
enum : int { kRax = 0, kRdx, kRcx, kRbx, kRsi, kRdi, kRbp, kRsp, kR8, kR9, kR10, kR11, kR12, kR13, kR14, kR15,
             kRa = 16, kRegs = 17 };  // fmt: skip

struct Regs {
    std::uint64_t r[kRegs] = {};  // r[kRa] is the IP
};

using ReadWord = bool (*)(std::uint64_t addr, std::uint64_t& out);

struct Module {
    std::uint64_t lo = 0, hi = 0;  // an executable PT_LOAD range
    const unsigned char* hdr = nullptr;  // its object's .eh_frame_hdr (nullptr: no unwind table)
};

struct Table {
    int n = 0;
    Module m[256];
};

inline std::atomic<const Table*> g_table{nullptr};
inline unsigned long long g_adds = ~0ULL, g_subs = ~0ULL;

// --- outside the handler ------------------------------------------------------------------------------------

inline int note_object(struct dl_phdr_info* info, size_t size, void* data) {
    auto* t = static_cast<Table*>(data);
    if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        g_adds = info->dlpi_adds;
        g_subs = info->dlpi_subs;
    }
    const unsigned char* hdr = nullptr;
    for (int k = 0; k < info->dlpi_phnum; ++k)
        if (info->dlpi_phdr[k].p_type == PT_GNU_EH_FRAME)
            hdr = reinterpret_cast<const unsigned char*>(info->dlpi_addr + info->dlpi_phdr[k].p_vaddr);
    for (int k = 0; k < info->dlpi_phnum && t->n < 256; ++k) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[k];
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
        t->m[t->n++] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, hdr};
    }
    return 0;
}

inline int count_changes(struct dl_phdr_info* info, size_t size, void* data) {
    if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        auto* moved = static_cast<bool*>(data);
        *moved = info->dlpi_adds != g_adds || info->dlpi_subs != g_subs;
    }
    return 1;  // the counters are the same in every entry: the first is enough
}

// Rebuilds the table when an object was loaded or unloaded since the last build (or never built). Never in a
// signal handler (dl_iterate_phdr takes the loader's lock; the table is allocated).
inline void refresh() {
    bool moved = true;
    dl_iterate_phdr(&count_changes, &moved);
    if (!moved && g_table.load(std::memory_order_acquire)) return;
    auto* t = new Table();
    dl_iterate_phdr(&note_object, t);
    // sorted by start address (insertion: a few dozen ranges)
    for (int i = 1; i < t->n; ++i)
        for (int j = i; j > 0 && t->m[j - 1].lo > t->m[j].lo; --j) std::swap(t->m[j - 1], t->m[j]);
    g_table.store(t, std::memory_order_release);  // the old table stays: a handler may be reading it
}

// --- in the handler -----------------------------------------------------------------------------------------

// The loaded object's executable range holding `ip`; nullptr when none does (anonymous memory: JIT code, stubs).
inline const Module* module_of(std::uint64_t ip) {
    const Table* t = g_table.load(std::memory_order_acquire);
    if (!t) return nullptr;
    int lo = 0, hi = t->n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (t->m[mid].lo <= ip) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return nullptr;
    const Module* m = &t->m[lo - 1];
    return ip < m->hi ? m : nullptr;
}

struct Reader {
    const unsigned char* p;
    std::uint8_t u8() { return *p++; }
    std::uint64_t uleb() {
        std::uint64_t v = 0;
        int shift = 0;
        for (;;) {
            const unsigned char b = *p++;
            if (shift < 64) v |= std::uint64_t(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80)) return v;
        }
    }
    std::int64_t sleb() {
        std::int64_t v = 0;
        int shift = 0;
        unsigned char b;
        do {
            b = *p++;
            if (shift < 64) v |= std::int64_t(b & 0x7f) << shift;
            shift += 7;
        } while (b & 0x80);
        if (shift < 64 && (b & 0x40)) v |= -(std::int64_t{1} << shift);
        return v;
    }
    template <typename T>
    T fixed() {
        T v;
        std::memcpy(&v, p, sizeof v);
        p += sizeof v;
        return v;
    }
    // A DW_EH_PE-encoded pointer; `data_base` for datarel. False for an encoding not handled.
    bool pointer(std::uint8_t enc, std::uint64_t data_base, std::uint64_t& out) {
        if (enc == 0xff) return false;  // DW_EH_PE_omit
        const std::uint64_t at = reinterpret_cast<std::uintptr_t>(p);
        std::uint64_t v;
        switch (enc & 0x0f) {
            case 0x00: v = fixed<std::uint64_t>(); break;
            case 0x01: v = uleb(); break;
            case 0x02: v = fixed<std::uint16_t>(); break;
            case 0x03: v = fixed<std::uint32_t>(); break;
            case 0x04: v = fixed<std::uint64_t>(); break;
            case 0x09: v = static_cast<std::uint64_t>(sleb()); break;
            case 0x0a: v = static_cast<std::uint64_t>(static_cast<std::int64_t>(fixed<std::int16_t>())); break;
            case 0x0b: v = static_cast<std::uint64_t>(static_cast<std::int64_t>(fixed<std::int32_t>())); break;
            case 0x0c: v = fixed<std::uint64_t>(); break;
            default: return false;
        }
        switch (enc & 0x70) {
            case 0x00: break;
            case 0x10: v += at; break;         // pcrel
            case 0x30: v += data_base; break;  // datarel
            default: return false;
        }
        out = v;  // DW_EH_PE_indirect (0x80) only in personality pointers, which are skipped, not followed
        return true;
    }
};

// The FDE covering `ip` in the object whose .eh_frame_hdr is `hdr` (binary search of its sorted table, which
// must be datarel sdata4 pairs, the encoding linkers write); nullptr when none.
inline const unsigned char* find_fde(const unsigned char* hdr, std::uint64_t ip) {
    if (!hdr || hdr[0] != 1 || hdr[3] != 0x3b) return nullptr;
    Reader r{hdr + 4};
    const std::uint64_t base = reinterpret_cast<std::uintptr_t>(hdr);
    std::uint64_t eh_frame = 0, count = 0;
    if (!r.pointer(hdr[1], base, eh_frame) || !r.pointer(hdr[2], base, count)) return nullptr;
    const auto* table = reinterpret_cast<const std::int32_t*>(r.p);
    std::uint64_t lo = 0, hi = count;
    while (lo < hi) {
        const std::uint64_t mid = (lo + hi) / 2;
        std::int32_t start;
        std::memcpy(&start, &table[2 * mid], 4);
        if (base + static_cast<std::uint64_t>(static_cast<std::int64_t>(start)) <= ip) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return nullptr;
    std::int32_t fde;
    std::memcpy(&fde, &table[2 * (lo - 1) + 1], 4);
    return reinterpret_cast<const unsigned char*>(base + static_cast<std::uint64_t>(static_cast<std::int64_t>(fde)));
}

enum class Rule : std::uint8_t { kSame, kUndefined, kOffset, kValOffset, kRegister, kUnsupported };

struct Row {
    int cfa_reg = kRsp;
    std::int64_t cfa_off = 8;
    bool cfa_ok = true;
    Rule rule[kRegs] = {};
    std::int64_t arg[kRegs] = {};
};

struct Cie {
    std::uint64_t code_align = 1;
    std::int64_t data_align = -8;
    int ra = kRa;
    std::uint8_t fde_enc = 0;
    bool has_aug = false;
    const unsigned char* insns = nullptr;
    const unsigned char* end = nullptr;
};

inline bool parse_cie(const unsigned char* at, Cie& cie) {
    Reader r{at};
    const std::uint32_t len = r.fixed<std::uint32_t>();
    if (len == 0 || len == 0xffffffffu) return false;
    cie.end = at + 4 + len;
    if (r.fixed<std::uint32_t>() != 0) return false;  // the CIE id of .eh_frame
    const std::uint8_t version = r.u8();
    const char* aug = reinterpret_cast<const char*>(r.p);
    r.p += std::strlen(aug) + 1;
    cie.code_align = r.uleb();
    cie.data_align = r.sleb();
    cie.ra = version == 1 ? r.u8() : static_cast<int>(r.uleb());
    if (cie.ra != kRa) return false;
    cie.has_aug = aug[0] == 'z';
    if (cie.has_aug) {
        const std::uint64_t n = r.uleb();
        const unsigned char* after = r.p + n;
        for (const char* c = aug + 1; *c; ++c) {
            if (*c == 'R') cie.fde_enc = r.u8();
            else if (*c == 'L') r.u8();
            else if (*c == 'P') {
                const std::uint8_t enc = r.u8();
                std::uint64_t ignored;
                if (!r.pointer(enc & 0x7f, 0, ignored)) return false;
            } else if (*c != 'S') return false;
        }
        r.p = after;
    } else if (aug[0]) {
        return false;  // an augmentation this reader does not know how to skip
    }
    cie.insns = r.p;
    return true;
}

// Runs the CFA instructions [p, end) up to `target` (`loc`: the location they start at). `initial`: the row
// the CIE's instructions gave (DW_CFA_restore's rules), nullptr while running the CIE's own.
inline bool run(const unsigned char* p, const unsigned char* end, const Cie& cie, std::uint64_t loc,
                std::uint64_t target, Row& row, const Row* initial) {
    Row saved[8];
    int depth = 0;
    Reader r{p};
    auto reg_ok = [](std::uint64_t reg) { return reg < static_cast<std::uint64_t>(kRegs); };
    while (r.p < end) {
        const std::uint8_t op = r.u8();
        const std::uint8_t low = op & 0x3f;
        std::uint64_t delta = 0;
        switch (op >> 6) {
            case 1: delta = low; break;  // DW_CFA_advance_loc
            case 2: {                    // DW_CFA_offset
                const std::uint64_t off = r.uleb();
                if (low < kRegs) row.rule[low] = Rule::kOffset, row.arg[low] = static_cast<std::int64_t>(off) * cie.data_align;
                continue;
            }
            case 3:  // DW_CFA_restore
                if (low < kRegs) {
                    row.rule[low] = initial ? initial->rule[low] : Rule::kSame;
                    row.arg[low] = initial ? initial->arg[low] : 0;
                }
                continue;
            default: break;
        }
        if (op >> 6 == 0) {
            switch (op) {
                case 0x00: continue;  // nop
                case 0x01: {          // set_loc
                    std::uint64_t to = 0;
                    if (!r.pointer(cie.fde_enc, 0, to)) return false;
                    if (to > target) return true;
                    loc = to;
                    continue;
                }
                case 0x02: delta = r.u8(); break;
                case 0x03: delta = r.fixed<std::uint16_t>(); break;
                case 0x04: delta = r.fixed<std::uint32_t>(); break;
                case 0x05: case 0x11: {  // offset_extended(_sf)
                    const std::uint64_t reg = r.uleb();
                    const std::int64_t off = op == 0x05 ? static_cast<std::int64_t>(r.uleb()) : r.sleb();
                    if (reg_ok(reg)) row.rule[reg] = Rule::kOffset, row.arg[reg] = off * cie.data_align;
                    continue;
                }
                case 0x2f: {  // GNU_negative_offset_extended
                    const std::uint64_t reg = r.uleb();
                    const std::int64_t off = static_cast<std::int64_t>(r.uleb());
                    if (reg_ok(reg)) row.rule[reg] = Rule::kOffset, row.arg[reg] = -off * cie.data_align;
                    continue;
                }
                case 0x06: {  // restore_extended
                    const std::uint64_t reg = r.uleb();
                    if (reg_ok(reg)) {
                        row.rule[reg] = initial ? initial->rule[reg] : Rule::kSame;
                        row.arg[reg] = initial ? initial->arg[reg] : 0;
                    }
                    continue;
                }
                case 0x07: case 0x08: {  // undefined, same_value
                    const std::uint64_t reg = r.uleb();
                    if (reg_ok(reg)) row.rule[reg] = op == 0x07 ? Rule::kUndefined : Rule::kSame;
                    continue;
                }
                case 0x09: {  // register
                    const std::uint64_t reg = r.uleb(), from = r.uleb();
                    if (reg_ok(reg)) row.rule[reg] = Rule::kRegister, row.arg[reg] = static_cast<std::int64_t>(from);
                    continue;
                }
                case 0x0a:  // remember_state
                    if (depth == 8) return false;
                    saved[depth++] = row;
                    continue;
                case 0x0b:  // restore_state
                    if (depth == 0) return false;
                    {
                        // the CFA is part of the state too (DWARF 4: "the rules for all registers")
                        row = saved[--depth];
                    }
                    continue;
                case 0x0c:  // def_cfa
                    row.cfa_reg = static_cast<int>(r.uleb());
                    row.cfa_off = static_cast<std::int64_t>(r.uleb());
                    row.cfa_ok = true;
                    continue;
                case 0x12:  // def_cfa_sf
                    row.cfa_reg = static_cast<int>(r.uleb());
                    row.cfa_off = r.sleb() * cie.data_align;
                    row.cfa_ok = true;
                    continue;
                case 0x0d: row.cfa_reg = static_cast<int>(r.uleb()); continue;  // def_cfa_register
                case 0x0e: row.cfa_off = static_cast<std::int64_t>(r.uleb()); continue;  // def_cfa_offset
                case 0x13: row.cfa_off = r.sleb() * cie.data_align; continue;  // def_cfa_offset_sf
                case 0x0f:  // def_cfa_expression
                    r.p += r.uleb();
                    row.cfa_ok = false;
                    continue;
                case 0x10: case 0x16: {  // expression, val_expression
                    const std::uint64_t reg = r.uleb();
                    r.p += r.uleb();
                    if (reg_ok(reg)) row.rule[reg] = Rule::kUnsupported;
                    continue;
                }
                case 0x14: case 0x15: {  // val_offset(_sf)
                    const std::uint64_t reg = r.uleb();
                    const std::int64_t off = op == 0x14 ? static_cast<std::int64_t>(r.uleb()) : r.sleb();
                    if (reg_ok(reg)) row.rule[reg] = Rule::kValOffset, row.arg[reg] = off * cie.data_align;
                    continue;
                }
                case 0x2e: r.uleb(); continue;  // GNU_args_size
                default: return false;          // an instruction this reader does not know: give up
            }
        }
        // an advance: the row so far is the one for [loc, loc + delta * code_align)
        loc += delta * cie.code_align;
        if (loc > target) return true;
    }
    return true;
}

enum class Step { kOk, kEnd, kFailed };

// One frame: from `regs` (IP in r[kRa]) in an object with an unwind table, the caller's registers. kEnd: the
// CFI says the return address is undefined (the stack's outermost frame). `caller_frame`: the IP is a return
// address (look the FDE up with IP - 1).
inline Step step(Regs& regs, bool caller_frame, ReadWord read) {
    const std::uint64_t ip = regs.r[kRa];
    const std::uint64_t look = caller_frame ? ip - 1 : ip;
    const Module* m = module_of(look);
    if (!m || !m->hdr) return Step::kFailed;
    const unsigned char* fde = find_fde(m->hdr, look);
    if (!fde) return Step::kFailed;
    Reader r{fde};
    const std::uint32_t len = r.fixed<std::uint32_t>();
    if (len == 0 || len == 0xffffffffu) return Step::kFailed;
    const unsigned char* fde_end = fde + 4 + len;
    const unsigned char* id_at = r.p;
    const std::uint32_t cie_off = r.fixed<std::uint32_t>();
    if (cie_off == 0) return Step::kFailed;  // a CIE, not an FDE
    Cie cie;
    if (!parse_cie(id_at - cie_off, cie)) return Step::kFailed;
    std::uint64_t start = 0, range = 0;
    if (!r.pointer(cie.fde_enc, 0, start) || !r.pointer(cie.fde_enc & 0x0f, 0, range)) return Step::kFailed;
    if (look < start || look >= start + range) return Step::kFailed;
    if (cie.has_aug) {
        const std::uint64_t n = r.uleb();
        r.p += n;
    }
    Row initial;
    for (int k = 0; k < kRegs; ++k) initial.rule[k] = Rule::kSame;
    if (!run(cie.insns, cie.end, cie, start, look, initial, nullptr)) return Step::kFailed;
    Row row = initial;
    if (!run(r.p, fde_end, cie, start, look, row, &initial)) return Step::kFailed;
    if (!row.cfa_ok || row.cfa_reg < 0 || row.cfa_reg >= kRa) return Step::kFailed;
    const std::uint64_t cfa = regs.r[row.cfa_reg] + static_cast<std::uint64_t>(row.cfa_off);
    if (row.rule[kRa] == Rule::kUndefined) return Step::kEnd;
    Regs next = regs;
    for (int k = 0; k < kRegs; ++k) {
        switch (row.rule[k]) {
            case Rule::kSame: break;
            case Rule::kUndefined: next.r[k] = 0; break;
            case Rule::kOffset:
                if (!read(cfa + static_cast<std::uint64_t>(row.arg[k]), next.r[k])) return Step::kFailed;
                break;
            case Rule::kValOffset: next.r[k] = cfa + static_cast<std::uint64_t>(row.arg[k]); break;
            case Rule::kRegister:
                if (row.arg[k] < 0 || row.arg[k] >= kRegs) return Step::kFailed;
                next.r[k] = regs.r[row.arg[k]];
                break;
            case Rule::kUnsupported: return Step::kFailed;
        }
    }
    next.r[kRsp] = cfa;  // the caller's stack pointer is the CFA
    if (next.r[kRa] == 0) return Step::kEnd;
    regs = next;
    return Step::kOk;
}

}  // namespace walkq_cfi
