// See seed_recovery.h. The DWARF CFI interpreter follows the DWARF 4 "Call Frame Information" section and the
// LSB's .eh_frame / .eh_frame_hdr description (pointer encodings, the 'z', 'R', 'P', 'L', 'S' augmentations);
// x64 only.
#include "seed_recovery.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace profharness {

const char* step_rule_name(StepRule r) {
    switch (r) {
        case StepRule::kContext: return "context";
        case StepRule::kCfi: return "cfi";
        case StepRule::kLeaf: return "leaf";
        case StepRule::kScan: return "scan";
        case StepRule::kFramePointer: return "frame_pointer";
        case StepRule::kEpilogue: return "epilogue";
    }
    return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------------
// Reading .eh_frame (module memory: mapped read-only for the module's lifetime, read directly)

struct Cursor {
    const unsigned char* p;
    const unsigned char* end;
    bool ok = true;

    std::uint8_t u8() {
        if (p >= end) return fail();
        return *p++;
    }
    template <typename T>
    T fixed() {
        if (end - p < static_cast<std::ptrdiff_t>(sizeof(T))) return static_cast<T>(fail());
        T v;
        std::memcpy(&v, p, sizeof v);
        p += sizeof v;
        return v;
    }
    std::uint64_t uleb() {
        std::uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (p >= end || shift > 63) return fail();
            const std::uint8_t b = *p++;
            v |= std::uint64_t{b & 0x7fu} << shift;
            shift += 7;
            if (!(b & 0x80)) return v;
        }
    }
    std::int64_t sleb() {
        std::int64_t v = 0;
        int shift = 0;
        std::uint8_t b = 0;
        do {
            if (p >= end || shift > 63) return static_cast<std::int64_t>(fail());
            b = *p++;
            v |= static_cast<std::int64_t>(std::uint64_t{b & 0x7fu} << shift);
            shift += 7;
        } while (b & 0x80);
        if (shift < 64 && (b & 0x40)) v |= -(std::int64_t{1} << shift);
        return v;
    }
    std::uint8_t fail() {
        ok = false;
        p = end;
        return 0;
    }
    // A pointer in DW_EH_PE encoding `enc`; `datarel`: the base of datarel (.eh_frame_hdr).
    std::uint64_t pointer(std::uint8_t enc, std::uint64_t datarel = 0) {
        if (enc == 0xff) return 0;  // DW_EH_PE_omit
        const std::uint64_t here = reinterpret_cast<std::uintptr_t>(p);
        std::uint64_t v = 0;
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
            default: fail(); return 0;
        }
        switch (enc & 0x70) {
            case 0x00: break;
            case 0x10: v += here; break;     // pcrel
            case 0x30: v += datarel; break;  // datarel
            default: fail(); return 0;       // textrel, funcrel, aligned: not used by x64 toolchains here
        }
        if (enc & 0x80) fail();  // indirect: never for the FDE addresses we read
        return v;
    }
};

struct Cie {
    std::uint64_t codeAlign = 1;
    std::int64_t dataAlign = -8;
    std::uint64_t raReg = kDwarfRip;
    std::uint8_t fdeEnc = 0;
    bool augZ = false;
    const unsigned char* insns = nullptr;
    const unsigned char* end = nullptr;
};

// The length field of a CIE/FDE at p: the record's end, and the start of its body (after the length).
bool record_bounds(const unsigned char* p, const unsigned char*& body, const unsigned char*& end) {
    std::uint32_t len32;
    std::memcpy(&len32, p, 4);
    if (len32 == 0) return false;
    if (len32 == 0xffffffffu) {
        std::uint64_t len64;
        std::memcpy(&len64, p + 4, 8);
        body = p + 12;
        end = body + len64;
    } else {
        body = p + 4;
        end = body + len32;
    }
    return true;
}

bool parse_cie(const unsigned char* at, Cie& cie) {
    const unsigned char *body, *end;
    if (!record_bounds(at, body, end)) return false;
    Cursor c{body, end};
    if (c.fixed<std::uint32_t>() != 0) return false;  // CIE id 0 in .eh_frame
    const std::uint8_t version = c.u8();
    const char* aug = reinterpret_cast<const char*>(c.p);
    const std::size_t aug_len = strnlen(aug, static_cast<std::size_t>(end - c.p));
    c.p += aug_len + 1;
    if (aug_len >= 2 && aug[0] == 'e' && aug[1] == 'h') return false;  // GCC 2 "eh": not produced
    cie.codeAlign = c.uleb();
    cie.dataAlign = c.sleb();
    cie.raReg = version == 1 ? c.u8() : c.uleb();
    cie.augZ = aug_len && aug[0] == 'z';
    if (cie.augZ) {
        const std::uint64_t n = c.uleb();
        const unsigned char* aug_end = c.p + n;
        for (std::size_t i = 1; i < aug_len && c.ok; ++i) {
            switch (aug[i]) {
                case 'R': cie.fdeEnc = c.u8(); break;
                case 'P': {
                    const std::uint8_t enc = c.u8();
                    c.pointer(static_cast<std::uint8_t>(enc & 0x7f));  // the personality: skipped
                    break;
                }
                case 'L': c.u8(); break;
                case 'S': case 'B': break;
                default: c.p = aug_end; i = aug_len; break;  // unknown: the length lets us skip the rest
            }
        }
        c.p = aug_end;
    }
    cie.insns = c.p;
    cie.end = end;
    return c.ok && c.p <= end;
}

// ---------------------------------------------------------------------------------------------------
// The CFI interpreter

enum class RuleKind : std::uint8_t { kSame, kUndefined, kOffset, kValOffset, kRegister, kUnsupported };
struct Rule {
    RuleKind kind = RuleKind::kSame;
    std::int64_t value = 0;
};
struct Row {
    int cfaReg = kDwarfRsp;
    std::int64_t cfaOffset = 8;
    bool cfaUnsupported = false;
    Rule regs[kDwarfRegs];
};

// Runs CFA instructions [p, end) from `row` until the location passes `pc` (loc starts at `loc`);
// `initial` is the CIE's row (DW_CFA_restore). false on an instruction we cannot interpret.
bool run_cfa(const unsigned char* p, const unsigned char* end, const Cie& cie, std::uint64_t loc, std::uint64_t pc,
             const Row& initial, Row& row) {
    constexpr int kStack = 16;
    Row remembered[kStack];
    int depth = 0;
    Cursor c{p, end};
    auto reg_ok = [](std::uint64_t r) { return r < static_cast<std::uint64_t>(kDwarfRegs); };
    auto set = [&](std::uint64_t r, RuleKind k, std::int64_t v) {
        if (reg_ok(r)) row.regs[r] = Rule{k, v};
    };
    while (c.p < c.end && c.ok) {
        const std::uint8_t op = c.u8();
        const std::uint8_t hi = op & 0xc0, low = op & 0x3f;
        if (hi == 0x40) {  // DW_CFA_advance_loc
            loc += low * cie.codeAlign;
            if (loc > pc) return true;
            continue;
        }
        if (hi == 0x80) {  // DW_CFA_offset
            set(low, RuleKind::kOffset, static_cast<std::int64_t>(c.uleb()) * cie.dataAlign);
            continue;
        }
        if (hi == 0xc0) {  // DW_CFA_restore
            if (reg_ok(low)) row.regs[low] = initial.regs[low];
            continue;
        }
        switch (op) {
            case 0x00: break;  // nop
            case 0x01: loc = c.pointer(cie.fdeEnc); if (loc > pc) return true; break;  // set_loc
            case 0x02: loc += c.u8() * cie.codeAlign; if (loc > pc) return true; break;
            case 0x03: loc += c.fixed<std::uint16_t>() * cie.codeAlign; if (loc > pc) return true; break;
            case 0x04: loc += c.fixed<std::uint32_t>() * cie.codeAlign; if (loc > pc) return true; break;
            case 0x05: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kOffset, static_cast<std::int64_t>(c.uleb()) * cie.dataAlign); break; }
            case 0x06: { const std::uint64_t r = c.uleb(); if (reg_ok(r)) row.regs[r] = initial.regs[r]; break; }
            case 0x07: set(c.uleb(), RuleKind::kUndefined, 0); break;
            case 0x08: set(c.uleb(), RuleKind::kSame, 0); break;
            case 0x09: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kRegister, static_cast<std::int64_t>(c.uleb())); break; }
            case 0x0a: if (depth == kStack) return false; remembered[depth++] = row; break;
            case 0x0b: {
                if (depth == 0) return false;
                // DW_CFA_restore_state restores the register rules; the CFA rule too (as every unwinder does)
                row = remembered[--depth];
                break;
            }
            case 0x0c: row.cfaReg = static_cast<int>(c.uleb()); row.cfaOffset = static_cast<std::int64_t>(c.uleb()); row.cfaUnsupported = false; break;
            case 0x0d: row.cfaReg = static_cast<int>(c.uleb()); break;
            case 0x0e: row.cfaOffset = static_cast<std::int64_t>(c.uleb()); break;
            case 0x0f: { const std::uint64_t n = c.uleb(); c.p += std::min<std::uint64_t>(n, static_cast<std::uint64_t>(c.end - c.p)); row.cfaUnsupported = true; break; }
            case 0x10: { const std::uint64_t r = c.uleb(); const std::uint64_t n = c.uleb(); c.p += std::min<std::uint64_t>(n, static_cast<std::uint64_t>(c.end - c.p)); set(r, RuleKind::kUnsupported, 0); break; }
            case 0x11: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kOffset, c.sleb() * cie.dataAlign); break; }
            case 0x12: row.cfaReg = static_cast<int>(c.uleb()); row.cfaOffset = c.sleb() * cie.dataAlign; row.cfaUnsupported = false; break;
            case 0x13: row.cfaOffset = c.sleb() * cie.dataAlign; break;
            case 0x14: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kValOffset, static_cast<std::int64_t>(c.uleb()) * cie.dataAlign); break; }
            case 0x15: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kValOffset, c.sleb() * cie.dataAlign); break; }
            case 0x16: { const std::uint64_t r = c.uleb(); const std::uint64_t n = c.uleb(); c.p += std::min<std::uint64_t>(n, static_cast<std::uint64_t>(c.end - c.p)); set(r, RuleKind::kUnsupported, 0); break; }
            case 0x2e: c.uleb(); break;  // DW_CFA_GNU_args_size
            case 0x2f: { const std::uint64_t r = c.uleb(); set(r, RuleKind::kOffset, -static_cast<std::int64_t>(c.uleb()) * cie.dataAlign); break; }
            default: return false;
        }
    }
    return c.ok;
}

int phdr_callback(struct dl_phdr_info* info, size_t, void* data) {
    auto* out = static_cast<std::vector<UnwindTables::Module>*>(data);
    UnwindTables::Module m;
    m.base = info->dlpi_addr;
    m.exec_lo = ~std::uint64_t{0};
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
            m.exec_lo = std::min<std::uint64_t>(m.exec_lo, m.base + ph.p_vaddr);
            m.exec_hi = std::max<std::uint64_t>(m.exec_hi, m.base + ph.p_vaddr + ph.p_memsz);
        } else if (ph.p_type == PT_GNU_EH_FRAME) {
            m.hdr = m.base + ph.p_vaddr;
        }
    }
    if (m.hdr && m.exec_lo < m.exec_hi) out->push_back(std::move(m));
    return 0;
}

int adds_callback(struct dl_phdr_info* info, size_t size, void* data) {
    auto* counts = static_cast<std::uint64_t*>(data);
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        counts[0] = info->dlpi_adds;
        counts[1] = info->dlpi_subs;
    }
    return 1;  // the first object is enough: the counters are global
}

// The search table of an .eh_frame_hdr (version 1); empty when its encoding is not one we read.
void read_hdr(UnwindTables::Module& m) {
    const auto* h = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(m.hdr));
    if (h[0] != 1) return;
    const std::uint8_t ptr_enc = h[1], count_enc = h[2], table_enc = h[3];
    Cursor c{h + 4, h + 4 + 32};
    c.pointer(ptr_enc, m.hdr);
    const std::uint64_t count = c.pointer(count_enc, m.hdr);
    if (!c.ok || table_enc != 0x3b || count > (1u << 24)) return;  // datarel | sdata4, as ld writes it
    const unsigned char* t = c.p;
    m.table.resize(count);
    for (std::uint64_t i = 0; i < count; ++i) {
        std::int32_t pc, fde;
        std::memcpy(&pc, t + 8 * i, 4);
        std::memcpy(&fde, t + 8 * i + 4, 4);
        m.table[i] = {m.hdr + static_cast<std::uint64_t>(static_cast<std::int64_t>(pc)),
                      m.hdr + static_cast<std::uint64_t>(static_cast<std::int64_t>(fde))};
    }
    std::sort(m.table.begin(), m.table.end());
}

std::uint64_t reg_value(const UnwindRegs& regs, int r) { return regs.r[r]; }

}  // namespace

namespace {

// Maps the pages of a module's FDEs (and the CIEs just before them) into this process's page tables now, on
// the calling thread (MADV_POPULATE_READ, Linux 5.14; where it fails nothing changes): the handler's CFI
// steps read .eh_frame directly, and each first read of one of its pages was a page fault inside the handler
// (measured on 8.0: a GC sample's 10-30 CFI steps took 50-110 us of the recovered handler's tail).
void populate_fdes(const UnwindTables::Module& m) {
    if (m.table.empty()) return;
    std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
    for (const auto& e : m.table) {
        lo = std::min(lo, e.second);
        hi = std::max(hi, e.second);
    }
    constexpr int kPopulateRead = 22;  // MADV_POPULATE_READ
    lo &= ~std::uint64_t{4095};
    hi = (hi | 4095) + 1 + 4096;  // the last FDE's body
    ::madvise(reinterpret_cast<void*>(static_cast<std::uintptr_t>(lo)), hi - lo, kPopulateRead);
    if (lo >= 4096)  // the CIEs usually sit just before the first FDE (a page that may not be mapped: tried apart)
        ::madvise(reinterpret_cast<void*>(static_cast<std::uintptr_t>(lo - 4096)), 4096, kPopulateRead);
}

}  // namespace

void UnwindTables::refresh() {
    std::uint64_t counts[2] = {0, 0};
    dl_iterate_phdr(&adds_callback, counts);
    const std::uint64_t adds = counts[0];
    if (adds == adds_ && counts[1] == subs_) return;
    if (counts[1] != subs_) {  // an object was unloaded: its tables point into memory that is gone
        modules_.clear();
        fde_count_ = 0;
        subs_ = counts[1];
    }
    std::vector<Module> found;
    dl_iterate_phdr(&phdr_callback, &found);
    for (Module& m : found) {
        const bool known = std::any_of(modules_.begin(), modules_.end(),
                                       [&](const Module& k) { return k.hdr == m.hdr; });
        if (known) continue;
        read_hdr(m);
        fde_count_ += m.table.size();
        populate_fdes(m);
        modules_.push_back(std::move(m));
    }
    std::sort(modules_.begin(), modules_.end(), [](const Module& a, const Module& b) { return a.exec_lo < b.exec_lo; });
    adds_ = adds;
}

bool UnwindTables::covers(std::uint64_t pc) const {
    for (const Module& m : modules_)
        if (pc >= m.exec_lo && pc < m.exec_hi) return !m.table.empty();
    return false;
}

bool UnwindTables::step(UnwindRegs& regs, bool exact, const WordReader& mem, bool& end) const {
    end = false;
    const std::uint64_t ip = regs.r[kDwarfRip];
    const std::uint64_t pc = exact ? ip : ip - 1;
    const Module* mod = nullptr;
    for (const Module& m : modules_)
        if (pc >= m.exec_lo && pc < m.exec_hi) mod = &m;
    if (!mod || mod->table.empty()) return false;
    auto it = std::upper_bound(mod->table.begin(), mod->table.end(), pc,
                               [](std::uint64_t x, const std::pair<std::uint64_t, std::uint64_t>& e) { return x < e.first; });
    if (it == mod->table.begin()) return false;
    --it;
    const auto* fde = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(it->second));
    const unsigned char *body, *fde_end;
    if (!record_bounds(fde, body, fde_end)) return false;
    std::uint32_t cie_delta;
    std::memcpy(&cie_delta, body, 4);
    Cie cie;
    if (!parse_cie(body - cie_delta, cie)) return false;
    Cursor c{body + 4, fde_end};
    const std::uint64_t begin = c.pointer(cie.fdeEnc);
    const std::uint64_t range = c.pointer(static_cast<std::uint8_t>(cie.fdeEnc & 0x0f));
    if (!c.ok || pc < begin || pc >= begin + range) return false;
    if (cie.augZ) {
        const std::uint64_t n = c.uleb();
        c.p += std::min<std::uint64_t>(n, static_cast<std::uint64_t>(c.end - c.p));
    }
    Row initial;
    if (!run_cfa(cie.insns, cie.end, cie, 0, ~std::uint64_t{0}, initial, initial)) return false;
    Row row = initial;
    if (!run_cfa(c.p, fde_end, cie, begin, pc, initial, row)) return false;
    if (row.cfaUnsupported || row.cfaReg < 0 || row.cfaReg >= kDwarfRegs) return false;
    const std::uint64_t cfa = reg_value(regs, row.cfaReg) + static_cast<std::uint64_t>(row.cfaOffset);
    UnwindRegs next = regs;
    const int ra = static_cast<int>(cie.raReg < kDwarfRegs ? cie.raReg : kDwarfRip);
    for (int r = 0; r < kDwarfRegs; ++r) {
        const Rule& rule = row.regs[r];
        switch (rule.kind) {
            case RuleKind::kSame: break;
            case RuleKind::kUndefined:
                if (r == ra) end = true;
                break;
            case RuleKind::kOffset:
                if (!mem.read(cfa + static_cast<std::uint64_t>(rule.value), next.r[r])) return false;
                break;
            case RuleKind::kValOffset: next.r[r] = cfa + static_cast<std::uint64_t>(rule.value); break;
            case RuleKind::kRegister:
                if (rule.value < 0 || rule.value >= kDwarfRegs) return false;
                next.r[r] = regs.r[rule.value];
                break;
            case RuleKind::kUnsupported: if (r == ra || r == kDwarfRbp) return false; break;
        }
    }
    if (end) return true;
    if (row.regs[ra].kind == RuleKind::kSame) return false;  // no return address rule
    next.r[kDwarfRip] = next.r[ra];
    next.r[kDwarfRsp] = cfa;
    regs = next;
    return true;
}

// The length of an FF /r instruction from its ModRM byte and the byte after it (the SIB, if any).
static int ff_length(unsigned char modrm, unsigned char sib) {
    const int mod = modrm >> 6, rm = modrm & 7;
    if (mod == 3) return 2;
    const int sib_len = rm == 4 ? 1 : 0;
    if (mod == 0) {
        if (rm == 5) return 6;                                  // [rip + disp32]
        if (rm == 4 && (sib & 7) == 5) return 2 + 1 + 4;        // SIB with no base: disp32
        return 2 + sib_len;
    }
    return 2 + sib_len + (mod == 1 ? 1 : 4);
}

bool preceded_by_call(const WordReader& mem, std::uint64_t ret) {
    if (ret < 8) return false;
    unsigned char b[8];
    if (mem.read_bytes(ret - 8, b, 8) != 8) return false;
    // b[8 - k] is the byte k before the return address
    if (b[3] == 0xE8) return true;  // call rel32
    for (int k = 2; k <= 7; ++k) {  // call r/m64: FF /2 (a REX prefix before it is not part of the count)
        if (b[8 - k] != 0xFF) continue;
        const unsigned char modrm = b[9 - k];
        if (((modrm >> 3) & 7) != 2) continue;
        if (ff_length(modrm, k >= 3 ? b[10 - k] : 0) == k) return true;
    }
    return false;
}

namespace {

constexpr std::size_t kScanBytes = 1024;

enum class Target { kNo, kYes, kUnknown };

// Whether `w` is a return address into code the walk can go on from (managed code, or a module with CFI,
// after a call); kUnknown for a return address into code the oracle cannot tell.
Target return_target(const UnwindTables& tables, const ManagedOracle& managed, const WordReader& mem,
                     std::uint64_t w) {
    if (w < 4096 || w >= (std::uint64_t{1} << 47)) return Target::kNo;
    if (managed.function_at(w - 1) != 0 || tables.covers(w - 1))
        return preceded_by_call(mem, w) ? Target::kYes : Target::kNo;
    if (managed.unknown_return(w - 1) && preceded_by_call(mem, w)) return Target::kUnknown;
    return Target::kNo;
}

}  // namespace

bool epilogue_step(UnwindRegs& regs, const WordReader& mem) {
    // x64 register numbers (ModRM order: rax rcx rdx rbx rsp rbp rsi rdi) as DWARF numbers; pop rsp is refused
    static constexpr int kDwarfOf[8] = {0, 2, 1, 3, -1, 6, 4, 5};
    unsigned char code[16];
    const std::size_t n = mem.read_bytes(regs.r[kDwarfRip], code, sizeof code);
    UnwindRegs out = regs;
    std::uint64_t sp = regs.r[kDwarfRsp];
    for (std::size_t i = 0; i < n; ++i) {
        const bool rex_b = code[i] == 0x41;
        if (rex_b && ++i >= n) return false;
        const unsigned char op = code[i];
        if (!rex_b && op == 0xC3) {  // ret
            std::uint64_t ret = 0;
            if (!mem.read(sp, ret)) return false;
            out.r[kDwarfRip] = ret;
            out.r[kDwarfRsp] = sp + 8;
            regs = out;
            return true;
        }
        if (op < 0x58 || op > 0x5F) return false;  // not pop r64: not an epilogue's tail
        const int reg = rex_b ? 8 + (op - 0x58) : kDwarfOf[op - 0x58];
        if (reg < 0 || !mem.read(sp, out.r[reg])) return false;
        sp += 8;
    }
    return false;
}

void recover_seed(const UnwindTables& tables, const ManagedOracle& managed, const WordReader& mem,
                  const UnwindRegs& start, std::uint64_t stack_lo, std::uint64_t stack_hi, RecoveryResult& out) {
    out.ok = false;
    out.stepCount = 0;
    out.functionId = 0;
    out.reason = "";
    out.needsRuntime = false;
    out.unknownIp = 0;
    auto need_runtime = [&](std::uint64_t ip) {
        out.needsRuntime = true;
        out.unknownIp = ip;
        out.reason = "code the oracle cannot tell";
    };
    UnwindRegs regs = start;
    StepRule how = StepRule::kContext;
    for (std::size_t n = 0; n < kMaxRecoverySteps; ++n) {
        const std::uint64_t ip = regs.r[kDwarfRip], sp = regs.r[kDwarfRsp];
        out.steps[out.stepCount++] = RecoveryStep{ip, sp, how};
        if (ip == 0) {
            out.reason = "IP 0";
            return;
        }
        // A caller frame's IP is a return address: the call is at IP - 1 (the oracle is asked for IP - 1 too,
        // since a call may be a method's last instruction).
        const std::uint64_t q = n == 0 ? ip : ip - 1;
        if (n == 0 ? managed.unknown(q) : managed.unknown_return(q)) {
            need_runtime(q);
            return;
        }
        const std::uint64_t fid = managed.function_at(q);
        if (fid) {
            out.ok = true;
            out.seed = regs;
            out.functionId = fid;
            return;
        }
        bool end = false;
        UnwindRegs next = regs;
        if (n == 0 && epilogue_step(next, mem)) {
            how = StepRule::kEpilogue;
        } else if (tables.step(next, n == 0, mem, end)) {
            if (end) {
                out.reason = "end of stack (CFI: return address undefined)";
                return;
            }
            how = StepRule::kCfi;
        } else {
            // No unwind information: a stub. The return address on top of the stack (a leaf or a tail-calling
            // stub), else the first return address above it (a stub that pushed), else the frame pointer.
            std::uint64_t w = 0;
            bool found = false;
            for (std::uint64_t slot = sp; slot < sp + kScanBytes && slot + 8 <= stack_hi; slot += 8) {
                if (!mem.read(slot, w)) break;
                const Target t = return_target(tables, managed, mem, w);
                if (t == Target::kUnknown) {
                    need_runtime(w - 1);
                    return;
                }
                if (t == Target::kYes) {
                    next.r[kDwarfRip] = w;
                    next.r[kDwarfRsp] = slot + 8;
                    how = slot == sp ? StepRule::kLeaf : StepRule::kScan;
                    found = true;
                    break;
                }
            }
            const std::uint64_t fp = regs.r[kDwarfRbp];
            std::uint64_t ret = 0, saved = 0;
            if (!found && fp >= sp && fp + 16 <= stack_hi && mem.read(fp + 8, ret) && mem.read(fp, saved) &&
                return_target(tables, managed, mem, ret) == Target::kYes) {
                next.r[kDwarfRip] = ret;
                next.r[kDwarfRsp] = fp + 16;
                next.r[kDwarfRbp] = saved;
                how = StepRule::kFramePointer;
                found = true;
            }
            if (!found) {
                out.reason = "no unwind information and no return address within 1 KiB of SP or at the frame pointer";
                return;
            }
        }
        const std::uint64_t nsp = next.r[kDwarfRsp];
        if (nsp <= sp || nsp < stack_lo || nsp >= stack_hi) {
            out.reason = "SP did not increase or left the stack";
            return;
        }
        regs = next;
    }
    out.reason = "no managed frame within the step limit";
}

}  // namespace profharness

namespace profharness {

std::uint64_t CodeMap::function_at(std::uint64_t ip) const {
    auto it = std::upper_bound(methods_.begin(), methods_.end(), ip,
                               [](std::uint64_t x, const Range& r) { return x < r.start; });
    if (it == methods_.begin()) return 0;
    --it;
    return ip < it->end ? it->fid : 0;
}

bool CodeMap::unknown(std::uint64_t ip) const {
    if (function_at(ip) || tables_.covers(ip)) return false;
    if (std::binary_search(negatives_.begin(), negatives_.end(), ip)) return false;
    auto in_ranges = [ip](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
        auto it = std::upper_bound(ranges.begin(), ranges.end(), ip,
                                   [](std::uint64_t x, const std::pair<std::uint64_t, std::uint64_t>& r) { return x < r.first; });
        return it != ranges.begin() && ip < std::prev(it)->second;
    };
    return !in_ranges(stub_ranges_) && !in_ranges(data_);
}

bool CodeMap::unknown_return(std::uint64_t ip) const {
    if (unknown(ip)) return true;
    if (function_at(ip) || tables_.covers(ip)) return false;
    if (std::binary_search(negatives_.begin(), negatives_.end(), ip)) return false;  // the runtime said so
    auto it = std::upper_bound(stub_ranges_.begin(), stub_ranges_.end(), ip,
                               [](std::uint64_t x, const std::pair<std::uint64_t, std::uint64_t>& r) { return x < r.first; });
    return it != stub_ranges_.begin() && ip < std::prev(it)->second;
}

bool CodeMap::has_function(std::uint64_t fid) const { return std::binary_search(fids_.begin(), fids_.end(), fid); }

void CodeMap::add_method(std::uint64_t start, std::uint64_t end, std::uint64_t fid) {
    if (end <= start) return;
    methods_.push_back(Range{start, end, fid});
    fids_.push_back(fid);
    dirty_ = true;
}

void CodeMap::add_not_managed(std::uint64_t ip) {
    if (negatives_.size() >= (1u << 16)) return;
    negatives_.push_back(ip);
    dirty_ = true;
}

void CodeMap::add_stub_page(std::uint64_t ip) {
    // Only a page no known method overlaps: in a page shared with methods, the gap between the known ones may
    // hold a method the map has not learned (a dynamic method: no JITCompilationFinished), and a return
    // address there taken for a stub made the stub rules skip the real caller (measured on 8.0: 57 of 600
    // samples one frame too deep, DSS-19). Such a page's stubs are told by the runtime's walk instead.
    const std::uint64_t lo = ip & ~std::uint64_t{4095}, hi = lo + 4096;
    for (const Range& r : methods_)
        if (r.start < hi && lo < r.end) return;
    if (stub_ranges_.size() >= (1u << 14)) return;
    stub_ranges_.emplace_back(lo, hi);
    dirty_ = true;
}

void CodeMap::set_data_regions(std::vector<std::pair<std::uint64_t, std::uint64_t>> regions) {
    data_ = std::move(regions);
    std::sort(data_.begin(), data_.end());
}

void CodeMap::commit() {
    if (!dirty_) return;
    std::sort(methods_.begin(), methods_.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
    methods_.erase(std::unique(methods_.begin(), methods_.end(),
                               [](const Range& a, const Range& b) { return a.start == b.start; }),
                   methods_.end());
    std::sort(negatives_.begin(), negatives_.end());
    // stub ranges merged where they overlap (a gap learned before a method of its page was, and one after),
    // so that the binary search of unknown() finds the one holding an IP
    std::sort(stub_ranges_.begin(), stub_ranges_.end());
    std::size_t kept = 0;
    for (const auto& r : stub_ranges_) {
        if (kept && r.first < stub_ranges_[kept - 1].second)
            stub_ranges_[kept - 1].second = std::max(stub_ranges_[kept - 1].second, r.second);
        else
            stub_ranges_[kept++] = r;
    }
    stub_ranges_.resize(kept);
    negatives_.erase(std::unique(negatives_.begin(), negatives_.end()), negatives_.end());
    std::sort(fids_.begin(), fids_.end());
    fids_.erase(std::unique(fids_.begin(), fids_.end()), fids_.end());
    dirty_ = false;
}

}  // namespace profharness
