// The recovered seed (issue 24, docs/seeding.md): from the registers of an interrupted thread, walk down to
// the first managed frame and give its registers as the DoStackSnapshot seed.
//
// Native frames are unwound with the loaded modules' .eh_frame CFI through tables prepared beforehand
// (UnwindTables::refresh, on a normal thread: dl_iterate_phdr, then each module's .eh_frame_hdr search
// table copied into a sorted vector); a DWARF CFI interpreter of our own (x64) runs one FDE per step. Code
// without unwind information (runtime stubs in anonymous memory: dispatch stubs, precodes, the write
// barrier's copy) is stepped by the rules the emulator's unwinder learned: the return address on top of the
// stack (a leaf or a tail-calling stub), else a bounded scan of the stack for a return address, else the
// frame-pointer chain. Managed frames are recognised by a predicate the caller gives (the probe passes
// GetFunctionFromIP, which is why recovery runs on the profiler thread while the sampled thread is parked
// in its handler, never in the handler itself).
//
// Nothing here allocates during recover_seed(); refresh() allocates and takes the loader's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace profharness {

// x64 DWARF register numbers (System V psABI): rax rdx rcx rbx rsi rdi rbp rsp r8..r15, 16 = return address.
inline constexpr int kDwarfRegs = 17;
inline constexpr int kDwarfRbp = 6;
inline constexpr int kDwarfRsp = 7;
inline constexpr int kDwarfRip = 16;

struct UnwindRegs {
    std::uint64_t r[kDwarfRegs] = {};
};

// How one step found its caller (breakpad's trust levels plus the stub rules; kEpilogue: the interrupted
// instruction is in an epilogue, its pops and ret run forward).
enum class StepRule : std::uint8_t { kContext = 0, kCfi, kLeaf, kScan, kFramePointer, kEpilogue };
const char* step_rule_name(StepRule r);

// Reads a word of the interrupted thread's stack (or any readable memory); false when unreadable.
struct WordReader {
    virtual bool read(std::uint64_t addr, std::uint64_t& out) const = 0;
    // Up to n bytes at addr without faulting; the count read.
    virtual std::size_t read_bytes(std::uint64_t addr, unsigned char* out, std::size_t n) const = 0;

protected:
    ~WordReader() = default;
};

// Whether an IP is managed code (non-zero FunctionID); the probe's is GetFunctionFromIP on the profiler
// thread, or a CodeMap in the handler.
struct ManagedOracle {
    virtual std::uint64_t function_at(std::uint64_t ip) const = 0;
    // Whether the oracle cannot tell if `ip` is managed code: the recovery then stops with needsRuntime.
    virtual bool unknown(std::uint64_t) const { return false; }
    // The same for a return address's call site (ret - 1): a caller frame, or a candidate word of the stub
    // rules. A map may doubt more there than at an interrupted IP (CodeMap: a stub page).
    virtual bool unknown_return(std::uint64_t ip) const { return unknown(ip); }

protected:
    ~ManagedOracle() = default;
};

class UnwindTables {
public:
    // Adds every loaded object not seen yet (dl_iterate_phdr): its executable segments and its FDE search
    // table. Not async-signal-safe: call it outside any handler (at sampler start, between samples).
    void refresh();
    // Whether a module with CFI covers `pc` (its executable segments).
    bool covers(std::uint64_t pc) const;
    // One CFI step from `regs` (in place). `exact`: the registers are the interrupted instant's (look up the
    // IP itself, not IP - 1). false when no FDE covers the IP or its rules cannot be evaluated; `end` is set
    // when the return address is undefined (the outermost frame).
    bool step(UnwindRegs& regs, bool exact, const WordReader& mem, bool& end) const;
    std::size_t modules() const { return modules_.size(); }
    std::size_t fdes() const { return fde_count_; }
    std::uint64_t adds() const { return adds_; }

    struct Module {
        std::uint64_t base = 0;                 // load bias
        std::uint64_t exec_lo = 0, exec_hi = 0;  // lowest and highest executable address
        std::uint64_t hdr = 0;                   // .eh_frame_hdr in memory
        std::vector<std::pair<std::uint64_t, std::uint64_t>> table;  // (initial location, FDE address)
    };

private:
    std::vector<Module> modules_;  // sorted by exec_lo
    std::size_t fde_count_ = 0;
    std::uint64_t adds_ = ~std::uint64_t{0};
    std::uint64_t subs_ = 0;
};

// A map of managed code an async-signal-safe reader can use (sorted vectors, changed only between samples,
// never while a handler reads it): method code ranges with their FunctionIDs, IPs known not to be managed
// (GetFunctionFromIP said 0 for them), and the mappings known to hold no code. unknown(ip) is true for an
// IP in none of them and in no module with CFI: code the runtime may have generated since the map learned.
class CodeMap final : public ManagedOracle {
public:
    explicit CodeMap(const UnwindTables& tables) : tables_(tables) {}
    std::uint64_t function_at(std::uint64_t ip) const override;
    bool unknown(std::uint64_t ip) const override;
    // unknown(), and a call site in a stub page too: a stub page is learned from one stub's IP while no known
    // method shared the page, and a method the map never heard of (a dynamic method) may share it; stubs
    // seldom call, so a return address there is asked of the runtime (measured on 8.0: dispatch samples
    // whose stub rules skipped such a caller, one frame too deep, DSS-19), and the answer teaches the map.
    bool unknown_return(std::uint64_t ip) const override;
    // Between samples only.
    void add_method(std::uint64_t start, std::uint64_t end, std::uint64_t fid);
    void add_not_managed(std::uint64_t ip);
    // A 4 KiB page of runtime stubs: an interrupted IP there was not managed code and no method known
    // overlaps it (the runtime's stub heaps and code heaps commit pages of their own).
    void add_stub_page(std::uint64_t ip);
    void set_data_regions(std::vector<std::pair<std::uint64_t, std::uint64_t>> regions);
    void commit();  // sorts what was added
    std::size_t methods() const { return methods_.size(); }
    std::size_t not_managed() const { return negatives_.size(); }
    bool has_function(std::uint64_t fid) const;

private:
    struct Range {
        std::uint64_t start, end, fid;
    };
    const UnwindTables& tables_;
    std::vector<Range> methods_;
    std::vector<std::uint64_t> negatives_;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> stub_ranges_;  // stub pages as [start, end)
    std::vector<std::pair<std::uint64_t, std::uint64_t>> data_;
    std::vector<std::uint64_t> fids_;
    bool dirty_ = false;
};

struct RecoveryStep {
    std::uint64_t ip, sp;
    StepRule rule;  // how this frame was found
};

inline constexpr std::size_t kMaxRecoverySteps = 64;

struct RecoveryResult {
    bool ok = false;                 // a managed frame was found
    UnwindRegs seed;                 // its registers (valid when ok)
    std::uint64_t functionId = 0;    // the oracle's answer for seed.r[kDwarfRip]
    RecoveryStep steps[kMaxRecoverySteps];
    std::size_t stepCount = 0;       // frames visited, the managed one included
    const char* reason = "";         // why no managed frame was found
    bool needsRuntime = false;       // stopped at code the oracle could not tell (unknownIp)
    std::uint64_t unknownIp = 0;
};

// One step from the interrupted instant when its instruction is in an epilogue's tail: pops (pop r64) then
// ret, run forward on `regs` (in place). A module's FDE may leave epilogues out (libcoreclr 3.1's do: after
// the first pop its CFA is 8 bytes off); the instructions say exactly what the thread does next. false (regs
// untouched) when the bytes at the IP are not such a tail or a word cannot be read.
bool epilogue_step(UnwindRegs& regs, const WordReader& mem);

// Walks from `regs` (the interrupted instant's) down to the first managed frame. `stack_lo`/`stack_hi`:
// the thread's stack bounds (no SP may leave them).
void recover_seed(const UnwindTables& tables, const ManagedOracle& managed, const WordReader& mem,
                  const UnwindRegs& regs, std::uint64_t stack_lo, std::uint64_t stack_hi, RecoveryResult& out);

// Whether the bytes before `ret` end in a call instruction (E8 rel32, or FF /2 in its usual encodings).
bool preceded_by_call(const WordReader& mem, std::uint64_t ret);

}  // namespace profharness
