// The fake runtime (fakeruntime.h): the world state, the ICorProfilerInfo and IMetaDataImport answers,
// the fake threads, the recording, and the command loop.
#include "fakeruntime.h"

#include "profharness/native_stack.h"
#include "profharness/com.h"
#include "profharness/metadata.h"
#include "profharness/trace.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "generated.h"

namespace profharness::fake {

namespace {

// --- the world state the fuzzer sends -------------------------------------------------------------------

// Names are answered in turn: the k-th question about a thing gets names[min(k, n-1)], so a name can grow
// between the size query and the fill of a double-pass client (only the documented world sends two).
// behaviour: names.ascii, names.unicode, names.grow
struct Names {
    std::vector<std::u16string> texts;
    unsigned asked = 0;
    const std::u16string& next() {
        static const std::u16string empty;
        if (texts.empty()) return empty;
        const std::u16string& s = texts[std::min<std::size_t>(asked, texts.size() - 1)];
        ++asked;
        return s;
    }
};

// What the world tells of a module, a class or a function: its id (a ModuleID, ClassID or FunctionID) and
// the names its calls answer, then each kind's own facts.
struct Entry {
    UINT_PTR id = 0;
    Names names;
};
struct Module : Entry {
    UINT_PTR base = 0;
    AssemblyID assembly = 0;
};
struct Class : Entry {
    ModuleID module = 0;
    mdTypeDef token = 0;
    ClassID parent = 0;
};
struct Function : Entry {
    FunctionInfo info;  // what GetFunctionInfo answers
    UINT_PTR start = 0;
    SIZE_T size = 0;
    std::vector<BYTE> il;  // its IL body (header, code, sections), what GetILFunctionBody answers
};
struct Object {
    ClassID cls = 0;
    SIZE_T size = 0;
};

// One OS thread that runs the callbacks of the fake threads assigned to it, one job at a time. A job
// returns true when the command loop takes over after it (relay(): the baton goes back).
using Job = std::function<bool()>;
void baton_back();

class Worker {
 public:
    Worker() : th_([this] { loop(); }) {}
    // Hands job to this worker and returns (the worker may be the calling one: it runs job next).
    void post(const Job* job) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            job_ = job;
        }
        cv_.notify_all();  // outside the lock: the worker does not wake up only to wait for it
    }
    long os_tid() {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return tid_ != 0; });
        return tid_;
    }

 private:
    void loop() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            tid_ = static_cast<long>(::syscall(SYS_gettid));
        }
        cv_.notify_all();
        for (;;) {
            const Job* job;
            {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [this] { return job_ != nullptr; });
                job = job_;
                job_ = nullptr;
            }
            if ((*job)()) baton_back();  // after the job: the command loop may free it from here on
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    const Job* job_ = nullptr;
    long tid_ = 0;
    std::thread th_;
};

struct FakeThread {
    ThreadID id = 0;
    Worker* worker = nullptr;
    std::vector<std::pair<FunctionID, UINT_PTR>> stack;  // leaf first
};

struct World {
    std::unordered_map<ModuleID, Module> modules;
    std::unordered_map<ClassID, Class> classes;
    std::unordered_map<FunctionID, Function> functions;
    std::unordered_map<ObjectID, Object> heap;
    std::map<ThreadID, FakeThread> threads;
    DWORD mask_low = 0;
    DWORD mask_high = 0;
    bool documented = false;  // the "world" command: the documented world's answers (docs/fake-runtime.md)
    std::set<ModuleID> il_told;  // the modules whose IL bodies' assembly a fuzz.il.module mark named
};

World g_world;

// The entry under id in one of g_world's tables, or nullptr.
template <typename Table>
typename Table::mapped_type* entry(Table& table, const typename Table::key_type& id) {
    auto it = table.find(id);
    return it == table.end() ? nullptr : &it->second;
}
std::vector<std::unique_ptr<Worker>> g_workers;  // every worker ever made (reused across examples)
std::vector<Worker*> g_idle;
std::vector<std::string> g_errors;               // harness-side problems of this example

__attribute__((tls_model("initial-exec"))) thread_local ThreadID tl_thread = 0;  // the fake thread running
__attribute__((tls_model("initial-exec"))) thread_local long tl_os_tid = 0;
__attribute__((tls_model("initial-exec"))) thread_local bool tl_moved2_failed = false;

long os_tid() {
    if (!tl_os_tid) tl_os_tid = static_cast<long>(::syscall(SYS_gettid));
    return tl_os_tid;
}

std::u16string utf16(const std::string& s) {
    std::u16string out;
    for (std::size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        char32_t cp;
        int n;
        if (c < 0x80) { cp = c; n = 1; }
        else if ((c >> 5) == 6) { cp = c & 0x1F; n = 2; }
        else if ((c >> 4) == 14) { cp = c & 0x0F; n = 3; }
        else { cp = c & 0x07; n = 4; }
        for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        i += n;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
            out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
        } else {
            out.push_back(static_cast<char16_t>(cp));
        }
    }
    return out;
}

// The bytes of a hex string (two digits a byte; a stray digit ends it).
std::vector<BYTE> bytes_of_hex(const std::string& text) {
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::vector<BYTE> out;
    out.reserve(text.size() / 2);
    for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
        const int hi = digit(text[i]), lo = digit(text[i + 1]);
        if (hi < 0 || lo < 0) break;
        out.push_back(static_cast<BYTE>(hi << 4 | lo));
    }
    return out;
}

Names names_of(const Json& cmd) {
    Names n;
    if (const Json* list = cmd.get("names"))
        for (const Json& s : list->items()) n.texts.push_back(utf16(s.as_string()));
    return n;
}

// The caller-allocated buffer protocol (caller-allocated-buffers.md): *pcch is the whole answer with its
// NUL, as much as fits is copied, S_OK (the page's answer to a short buffer, BUF-09; GetRuntimeInformation's
// on 8.0, the metadata's).
// behaviour: answer.buffer-size, answer.buffer-short-truncate, answer.buffer-short-documented
HRESULT answer_text(const std::u16string& text, ULONG cch, ULONG* pcch, WCHAR* buffer) {
    const ULONG need = static_cast<ULONG>(text.size() + 1);
    if (pcch) *pcch = need;
    if (buffer && cch) {
        const ULONG n = std::min<ULONG>(cch - 1, static_cast<ULONG>(text.size()));
        std::memcpy(buffer, text.data(), n * sizeof(WCHAR));
        buffer[n] = 0;
    }
    return S_OK;
}

// The metadata's names: as answer_text, but a cut name is CLDB_S_TRUNCATION (a success code), as the runtime's
// metadata reader answers.
// behaviour: answer.metadata-short
HRESULT answer_metadata_text(const std::u16string& text, ULONG cch, ULONG* pcch, WCHAR* buffer) {
    const HRESULT hr = answer_text(text, cch, pcch, buffer);
    return buffer && cch && cch < text.size() + 1 ? static_cast<HRESULT>(0x00131106) : hr;
}

// --- the recording --------------------------------------------------------------------------------------

int g_trace_fd = -1;
std::mutex g_trace_mu;
std::int64_t g_seq = 0;
std::atomic<bool> g_shutdown_returned{false};

struct Frame {
    const char* name;
    Json args;
    bool written;
    bool lazy;
};
__attribute__((tls_model("initial-exec"))) thread_local std::vector<Frame>* tl_frames = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local const char* tl_call = nullptr;

std::vector<Frame>& frames() {
    if (!tl_frames) tl_frames = new std::vector<Frame>();
    return *tl_frames;
}

void write_all(int fd, const std::string& s) {
    const char* p = s.data();
    std::size_t left = s.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

// --- crashes: the open callbacks and the native stack of the faulting thread, then the default action ----

void crash_handler(int sig, siginfo_t*, void* uc) {
    static std::atomic<bool> once{false};
    if (!once.exchange(true) && g_trace_fd >= 0) {
        Json cbs = Json::array();
        if (tl_frames)
            for (const Frame& f : *tl_frames) cbs.push(Json(f.name));
        void* ips[32];
        int n = backtrace(ips, 32);
        Json stack = native_stack_json(ips, n, interrupted_pc(uc));
        Json rec = Json::object();
        rec.set("name", "proxy.crash").set("payload", Json()).set("signal", strsignal(sig));
        rec.set("callbacks", cbs).set("call", tl_call ? Json(tl_call) : Json()).set("stack", stack);
        record("mark", rec);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_crash_handlers() {
    void* warm[2];
    backtrace(warm, 2);  // loads libgcc before any crash
    static char alt[1 << 16];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace

void record(const char* kind, const Json& fields) {
    std::string tail;
    fields.dump(tail);
    std::string line;
    line.reserve(tail.size() + 96);
    std::lock_guard<std::mutex> lock(g_trace_mu);
    if (g_trace_fd < 0) return;
    line += "{\"seq\":";
    line += std::to_string(g_seq++);
    line += ",\"kind\":\"";
    line += kind;
    line += "\",\"os_tid\":";
    line += std::to_string(os_tid());
    line += ",\"tid\":";
    line += tl_thread ? std::to_string(static_cast<std::uint64_t>(tl_thread)) : std::string("null");
    finish_record_line(line, tail);
    write_all(g_trace_fd, line);
}

bool recording() { return g_trace_fd >= 0; }
bool shutdown_returned() { return g_shutdown_returned.load(std::memory_order_relaxed); }

void flush_callbacks() {
    std::vector<Frame>& fs = frames();
    for (std::size_t k = 0; k < fs.size(); ++k) {
        Frame& f = fs[k];
        if (f.written) continue;
        Json rec = Json::object();
        rec.set("name", f.name).set("phase", "enter").set("depth", Json(static_cast<std::uint64_t>(k + 1)))
            .set("args", f.args);
        record("callback", rec);
        f.written = true;
    }
}

void push_callback(const char* name, Json args, bool lazy) {
    frames().push_back(Frame{name, std::move(args), false, lazy});
    if (!lazy) flush_callbacks();
}

void pop_callback(HRESULT hr) {
    std::vector<Frame>& fs = frames();
    if (fs.empty()) return;
    if (fs.back().written) {
        Json rec = Json::object();
        rec.set("name", fs.back().name).set("phase", "return").set("depth", Json(static_cast<std::uint64_t>(fs.size())))
            .set("hr", Json(static_cast<std::uint32_t>(hr)));
        record("callback", rec);
    }
    fs.pop_back();
}

void CallScope::begin() {
    tl_call = name_;
    if (!recording()) return;
    flush_callbacks();
    if (two_phase_) record("call", enter_record(name_));
}

HRESULT CallScope::finish(HRESULT hr) {
    tl_call = nullptr;
    if (!recording()) return hr;
    record("call", call_record(name_, two_phase_, hr, shutdown_returned()));
    return hr;
}

// --- IMetaDataImport ------------------------------------------------------------------------------------

namespace {

class MetaData final : public MetaDataBase {
 public:
    explicit MetaData(ModuleID module) : module_(module) {}
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        return query_one<IMetaDataImport>(this, IID_IMetaDataImport, riid, ppv);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return ++refs_; }
    ULONG STDMETHODCALLTYPE Release() override {
        ULONG n = --refs_;
        if (n == 0) delete this;
        return n;
    }
    ModuleID module() const { return module_; }

    // IMetaDataImport has more methods after the ones clr_model/api/interfaces.txt declares: a profiler
    // calling one of them lands in these (the x86-64 caller cleans up its arguments) instead of past the
    // vtable.
    virtual HRESULT STDMETHODCALLTYPE More0() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More1() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More2() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More3() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More4() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More5() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More6() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More7() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More8() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More9() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More10() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More11() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More12() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More13() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More14() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More15() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More16() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More17() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More18() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More19() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More20() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More21() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More22() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More23() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More24() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More25() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More26() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More27() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More28() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More29() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More30() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More31() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More32() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More33() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More34() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More35() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More36() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More37() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More38() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More39() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More40() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More41() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More42() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More43() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More44() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More45() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More46() { return E_NOTIMPL; }
    virtual HRESULT STDMETHODCALLTYPE More47() { return E_NOTIMPL; }

 private:
    ModuleID module_;
    std::atomic<ULONG> refs_{1};
};

Class* class_by_token(ModuleID module, mdTypeDef td) {
    for (auto& [id, c] : g_world.classes)
        if (c.module == module && c.token == td) return &c;
    return nullptr;
}
Function* function_by_token(ModuleID module, mdMethodDef mb) {
    for (auto& [id, f] : g_world.functions)
        if (f.info.moduleId == module && f.info.token == mb) return &f;
    return nullptr;
}

}  // namespace

// behaviour: answer.world, answer.unknown-id, answer.metadata-short
HRESULT MetaDataBase::answer_GetScopeProps(WCHAR* szName, ULONG cchName, ULONG* pchName, GUID* pmvid) {
    Module* m = entry(g_world.modules, static_cast<MetaData*>(this)->module());
    if (!m) return E_FAIL;
    if (pmvid) *pmvid = GUID{};
    return answer_metadata_text(m->names.next(), cchName, pchName, szName);
}

// behaviour: answer.world
HRESULT MetaDataBase::answer_GetModuleFromScope(mdModule* pmd) {
    if (pmd) *pmd = 0x00000001;
    return S_OK;
}

// behaviour: answer.world, answer.unknown-id, answer.metadata-short
HRESULT MetaDataBase::answer_GetTypeDefProps(mdTypeDef td, WCHAR* szTypeDef, ULONG cchTypeDef, ULONG* pchTypeDef,
                                             DWORD* pdwTypeDefFlags, mdToken* ptkExtends) {
    Class* c = class_by_token(static_cast<MetaData*>(this)->module(), td);
    if (!c) return E_INVALIDARG;  // CLDB_E_RECORD_NOTFOUND in the real metadata
    if (pdwTypeDefFlags) *pdwTypeDefFlags = 0x00100001;  // tdPublic | tdBeforeFieldInit
    if (ptkExtends) *ptkExtends = 0x01000001;
    return answer_metadata_text(c->names.next(), cchTypeDef, pchTypeDef, szTypeDef);
}

// behaviour: answer.world, answer.unknown-id, answer.metadata-short
HRESULT MetaDataBase::answer_GetMethodProps(mdMethodDef mb, mdTypeDef* pClass, WCHAR* szMethod, ULONG cchMethod,
                                            ULONG* pchMethod, DWORD* pdwAttr, PCCOR_SIGNATURE* ppvSigBlob,
                                            ULONG* pcbSigBlob, ULONG* pulCodeRVA, DWORD* pdwImplFlags) {
    Function* f = function_by_token(static_cast<MetaData*>(this)->module(), mb);
    if (!f) return E_INVALIDARG;
    static const BYTE kSig[] = {0x00, 0x00, 0x01};  // DEFAULT, 0 parameters, void
    if (pClass) {
        const Class* c = entry(g_world.classes, f->info.classId);
        *pClass = c ? c->token : 0;
    }
    if (pdwAttr) *pdwAttr = 0x0006;  // mdPublic
    if (ppvSigBlob) *ppvSigBlob = kSig;
    if (pcbSigBlob) *pcbSigBlob = sizeof kSig;
    if (pulCodeRVA) *pulCodeRVA = 0x2050;
    if (pdwImplFlags) *pdwImplFlags = 0;
    return answer_metadata_text(f->names.next(), cchMethod, pchMethod, szMethod);
}

// --- ICorProfilerInfo -----------------------------------------------------------------------------------

namespace {

// --- IL bodies (issue 25): GetILFunctionBody, GetILFunctionBodyAllocator, SetILFunctionBody -------------

// corprof.idl's IMethodMalloc: IUnknown, then Alloc (the shared headers only forward-declare it).
struct MethodMalloc : public IUnknown {
    virtual void* STDMETHODCALLTYPE Alloc(ULONG cb) = 0;
};

// Every block a method allocator handed out: [base, base + size). Kept for the process (the allocator's
// page: "It allows you to allocate memory, but not to free it").
std::mutex g_il_mu;
std::vector<std::pair<const BYTE*, std::size_t>> g_il_blocks;

// behaviour: il.allocator
class FakeMethodMalloc final : public MethodMalloc {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        if (!(riid == IID_IUnknown)) return E_NOINTERFACE;
        *ppv = static_cast<IUnknown*>(this);
        return S_OK;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return 2; }  // one static object, never freed
    ULONG STDMETHODCALLTYPE Release() override { return 1; }
    void* STDMETHODCALLTYPE Alloc(ULONG cb) override {
        auto* p = static_cast<BYTE*>(std::calloc(cb ? cb : 1, 1));
        if (p) {
            std::lock_guard<std::mutex> g(g_il_mu);
            g_il_blocks.emplace_back(p, cb);
        }
        return p;
    }
};
FakeMethodMalloc g_method_malloc;

// The bytes of a body handed over: the rest of the allocator block it lies in, else the length its header
// announces (tiny: 1 + code; fat: header, code, and the sections its flags say follow), as the recording
// proxy records them (proxy/il_bodies.h). `allocated`: whether it lies in a block the allocator gave.
std::size_t il_extent(const BYTE* h, bool* allocated) {
    {
        std::lock_guard<std::mutex> g(g_il_mu);
        for (const auto& [base, size] : g_il_blocks) {
            if (h >= base && h < base + size) {
                *allocated = true;
                return static_cast<std::size_t>(base + size - h);
            }
        }
    }
    *allocated = false;
    if ((h[0] & 3) == 2) return 1 + (h[0] >> 2);
    if ((h[0] & 3) != 3) return 1;
    const std::uint16_t word = static_cast<std::uint16_t>(h[0] | (h[1] << 8));
    const std::uint32_t code = static_cast<std::uint32_t>(h[4] | (h[5] << 8) | (h[6] << 16) | (std::uint32_t(h[7]) << 24));
    std::size_t end = 4u * (word >> 12) + code;
    if ((word & 0x8) == 0 || code > (1u << 24)) return end;
    for (int n = 0; n < 64; ++n) {  // the sections, on 4-byte boundaries, each saying whether more follow
        end = (end + 3) & ~std::size_t{3};
        const BYTE kind = h[end];
        const std::size_t len = (kind & 0x40) ? (h[end + 1] | (h[end + 2] << 8) | (std::size_t(h[end + 3]) << 16))
                                              : h[end + 1];
        end += len < 4 ? 4 : len;
        if ((kind & 0x80) == 0) break;
    }
    return end;
}

// --- ReJIT (issue 25): RequestReJIT's requests, played at the next JITCompilationFinished ---------------

// The (module, methodDef) pairs RequestReJIT took and the runtime has not recompiled yet.
std::vector<std::pair<ModuleID, mdMethodDef>> g_rejit_pending;
// The pairs with an active request (taken, not reverted: pending or recompiled), what RequestRevert reverts.
std::set<std::pair<ModuleID, mdMethodDef>> g_rejit_active;
ReJITID g_next_rejit = 0;

// Whether RequestReJIT can mark a methodDef: a per-method failure otherwise (ReJITError's page: the
// functionId "may be NULL if the failure occurred on a per-method basis ... (for example, if the profiler
// specified an invalid metadata token for the method to be recompiled)").
bool rejit_markable(mdMethodDef method) { return method != 0 && (method >> 24) == 0x06; }
// ReJITError(module, method, functionId NULL, E_INVALIDARG) for each pair, on the calling thread (after
// the session, below).
void report_rejit_errors(const std::vector<std::pair<ModuleID, mdMethodDef>>& errors);

std::string hex_of(const BYTE* p, std::size_t n);

// corprof.idl's ICorProfilerFunctionControl: IUnknown, then SetCodegenFlags, SetILFunctionBody,
// SetILInstrumentedCodeMap (the shared headers only forward-declare it).
struct FunctionControlVtbl : public IUnknown {
    virtual HRESULT STDMETHODCALLTYPE SetCodegenFlags(DWORD flags) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILFunctionBody(ULONG cbNewILMethodHeader, LPCBYTE pbNewILMethodHeader) = 0;
    virtual HRESULT STDMETHODCALLTYPE SetILInstrumentedCodeMap(ULONG cILMapEntries, COR_IL_MAP* rgILMapEntries) = 0;
};

// The function control GetReJITParameters hands over, for one (module, methodDef). Its calls are recorded as
// the recording proxy records its wrapper's ("ICorProfilerFunctionControl::<Method>", with the ReJIT's
// moduleId and methodId); SetILFunctionBody's body (its cbNewILMethodHeader bytes) as out "body". Never
// freed: a profiler that keeps it past the callback (REJIT-21: the page does not say it may not) still
// reaches a live object.
// behaviour: rejit.compile
class FakeFunctionControl final : public FunctionControlVtbl {
 public:
    FakeFunctionControl(ModuleID module, mdMethodDef method) : module_(module), method_(method) {}
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        if (!ppv) return E_POINTER;
        *ppv = nullptr;
        if (!(riid == IID_IUnknown)) return E_NOINTERFACE;
        *ppv = static_cast<IUnknown*>(this);
        return S_OK;
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return 2; }
    ULONG STDMETHODCALLTYPE Release() override { return 1; }
    HRESULT STDMETHODCALLTYPE SetCodegenFlags(DWORD flags) override {
        Call s(*this, "ICorProfilerFunctionControl::SetCodegenFlags", __builtin_return_address(0));
        s.arg("flags", flags);
        s.begin();
        return s.finish(S_OK);
    }
    HRESULT STDMETHODCALLTYPE SetILFunctionBody(ULONG cbNewILMethodHeader, LPCBYTE pbNewILMethodHeader) override {
        Call s(*this, "ICorProfilerFunctionControl::SetILFunctionBody", __builtin_return_address(0));
        s.arg("cbNewILMethodHeader", cbNewILMethodHeader);
        s.arg("pbNewILMethodHeader", pbNewILMethodHeader);
        s.begin();
        if (!pbNewILMethodHeader || cbNewILMethodHeader == 0) return s.finish(E_INVALIDARG);
        const std::size_t n = std::min<std::size_t>(cbNewILMethodHeader, std::size_t{1} << 20);
        s.out_value("body", Json(hex_of(pbNewILMethodHeader, n)));
        return s.finish(S_OK);
    }
    HRESULT STDMETHODCALLTYPE SetILInstrumentedCodeMap(ULONG cILMapEntries, COR_IL_MAP* rgILMapEntries) override {
        Call s(*this, "ICorProfilerFunctionControl::SetILInstrumentedCodeMap", __builtin_return_address(0));
        s.arg("cILMapEntries", cILMapEntries);
        s.arg("rgILMapEntries", rgILMapEntries);
        s.begin();
        return s.finish(S_OK);
    }

 private:
    // One call of this function control: its record with the caller's return address and the ReJIT's ids.
    struct Call : CallScope {
        Call(const FakeFunctionControl& control, const char* name, const void* return_address)
            : CallScope(name, false) {
            caller(return_address);
            arg("moduleId", control.module_);
            arg("methodId", control.method_);
        }
    };
    ModuleID module_;
    mdMethodDef method_;
};

std::string hex_of(const BYTE* p, std::size_t n) {
    static const char kDigits[] = "0123456789abcdef";
    std::string out(2 * n, '0');
    for (std::size_t i = 0; i < n; ++i) {
        out[2 * i] = kDigits[p[i] >> 4];
        out[2 * i + 1] = kDigits[p[i] & 15];
    }
    return out;
}

class Info final : public InfoBase {
 public:
    HRESULT STDMETHODCALLTYPE QueryInterface(REFIID riid, void** ppv) override {
        CallScope s("QueryInterface", false);
        s.caller(__builtin_return_address(0));
        s.arg("riid", riid);
        s.begin();
        if (!ppv) return s.finish(E_POINTER);
        *ppv = nullptr;
        bool ok = riid == IID_IUnknown;
        for (int k = 1; k <= kMaxInfoLevel && !ok; ++k) ok = riid == *info_iid(k);
        if (!ok) return s.finish(E_NOINTERFACE);
        *ppv = static_cast<ICorProfilerInfo*>(this);
        ++refs_;
        s.out_value("refs", Json(static_cast<std::int64_t>(refs_.load())));
        return s.finish(S_OK);
    }
    ULONG STDMETHODCALLTYPE AddRef() override { return static_cast<ULONG>(++refs_); }
    ULONG STDMETHODCALLTYPE Release() override {
        long n = --refs_;
        if (n <= 0 && recording()) {
            Json rec = Json::object();
            rec.set("name", "Release").set("args", Json::object())
                .set("out", Json::object().set("refs", Json(static_cast<std::int64_t>(n)))).set("hr", Json(0u));
            flush_callbacks();
            record("call", rec);
        }
        return n < 0 ? 0 : static_cast<ULONG>(n);
    }

    // behaviour: il.set, answer.unknown-id
    // The body is recorded (out "body", hex; "allocated"), as the recording proxy records it, for the IL
    // checker in the judge.
    HRESULT STDMETHODCALLTYPE SetILFunctionBody(ModuleID moduleId, mdMethodDef methodid,
                                                LPCBYTE pbNewILMethodHeader) override {
        CallScope s("SetILFunctionBody", false);
        s.caller(__builtin_return_address(0));
        s.arg("moduleId", moduleId);
        s.arg("methodid", methodid);
        s.arg("pbNewILMethodHeader", pbNewILMethodHeader);
        s.begin();
        if (!pbNewILMethodHeader) return s.finish(E_INVALIDARG);
        bool allocated = false;
        const std::size_t n = il_extent(pbNewILMethodHeader, &allocated);
        s.out_value("body", Json(hex_of(pbNewILMethodHeader, n)));
        s.out_value("allocated", Json(allocated));
        if (!entry(g_world.modules, moduleId) || !function_by_token(moduleId, methodid)) return s.finish(E_INVALIDARG);
        return s.finish(S_OK);
    }

    // behaviour: answer.snapshot, answer.not-managed-thread, stack.native-runs
    HRESULT STDMETHODCALLTYPE DoStackSnapshot(ThreadID thread, StackSnapshotCallback* callback, ULONG32 infoFlags,
                                              void* clientData, BYTE* context, ULONG32 contextSize) override {
        CallScope s("DoStackSnapshot", true);
        s.caller(__builtin_return_address(0));
        s.snapshot_args(thread, callback, infoFlags, clientData, context, contextSize,
                        [](std::uint64_t rip, FunctionID* fn) { return function_from_ip(rip, fn); });
        s.begin();
        if (!callback) return s.finish(E_INVALIDARG);
        if (infoFlags & ~static_cast<ULONG32>(COR_PRF_SNAPSHOT_REGISTER_CONTEXT | COR_PRF_SNAPSHOT_X86_OPTIMIZED))
            return s.finish(E_INVALIDARG);
        const ThreadID target = thread ? thread : tl_thread;
        const FakeThread* t = entry(g_world.threads, target);
        if (target == 0 || !t) return s.finish(thread ? E_INVALIDARG : CORPROF_E_NOT_MANAGED_THREAD);
        // The frames are copied: the profiler may change the world (a callback inside) while walking.
        const std::vector<std::pair<FunctionID, UINT_PTR>> stack = t->stack;
        alignas(64) static thread_local BYTE ctx[kContextBufferSize];
        const bool want_ctx = (infoFlags & COR_PRF_SNAPSHOT_REGISTER_CONTEXT) != 0;
        std::uint32_t n = 0;
        HRESULT hr = S_OK;
        for (const auto& [fid, ip] : stack) {
            ULONG32 size = 0;
            BYTE* pctx = nullptr;
            if (want_ctx && fid) {
                std::memset(ctx, 0, sizeof(AMD64Context));
                auto* c = reinterpret_cast<AMD64Context*>(ctx);
                c->ContextFlags = 0x0010000B;  // CONTEXT_AMD64 | CONTROL | INTEGER | FLOATING_POINT
                c->Rip = ip;
                size = sizeof(AMD64Context);
                pctx = ctx;
            }
            push_callback("StackSnapshotCallback",
                          Json::object().set("funcId", Json(static_cast<std::uint64_t>(fid))).set("ip", Json(ip)),
                          true);
            HRESULT cb = callback(fid, ip, static_cast<COR_PRF_FRAME_INFO>(0x1000 + n), size, pctx, clientData);
            pop_callback(cb);
            ++n;
            if (cb != S_OK) {
                hr = CORPROF_E_STACKSNAPSHOT_ABORTED;
                break;
            }
        }
        s.out_value("frameCount", Json(n));
        return s.finish(hr);
    }

    // behaviour: answer.world
    // One of the SetEnterLeaveFunctionHooks* calls: its three hooks recorded as args pFuncEnter<suffix>,
    // pFuncLeave<suffix>, pFuncTailcall<suffix> (the parameter names of the version `suffix` names).
    template <class Enter, class Leave, class Tailcall>
    HRESULT hooks(const char* name, const std::string& suffix, Enter* e, Leave* l, Tailcall* t, const void* caller) {
        CallScope s(name, false);
        s.caller(caller);
        const std::pair<const char*, const void*> fns[3] = {{"pFuncEnter", reinterpret_cast<const void*>(e)},
                                                            {"pFuncLeave", reinterpret_cast<const void*>(l)},
                                                            {"pFuncTailcall", reinterpret_cast<const void*>(t)}};
        for (const auto& [param, fn] : fns)
            s.args().set(param + suffix, Json::object().set("address", Json::pointer(fn)));
        s.begin();
        return s.finish(S_OK);
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks(FunctionEnter* e, FunctionLeave* l, FunctionTailcall* t) override {
        return hooks("SetEnterLeaveFunctionHooks", "", e, l, t, __builtin_return_address(0));
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks2(FunctionEnter2* e, FunctionLeave2* l,
                                                          FunctionTailcall2* t) override {
        return hooks("SetEnterLeaveFunctionHooks2", "", e, l, t, __builtin_return_address(0));
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks3(FunctionEnter3* e, FunctionLeave3* l,
                                                          FunctionTailcall3* t) override {
        return hooks("SetEnterLeaveFunctionHooks3", "3", e, l, t, __builtin_return_address(0));
    }
    HRESULT STDMETHODCALLTYPE SetEnterLeaveFunctionHooks3WithInfo(FunctionEnter3WithInfo* e, FunctionLeave3WithInfo* l,
                                                                  FunctionTailcall3WithInfo* t) override {
        return hooks("SetEnterLeaveFunctionHooks3WithInfo", "3WithInfo", e, l, t, __builtin_return_address(0));
    }
    // behaviour: answer.world
    HRESULT STDMETHODCALLTYPE SetFunctionIDMapper(FunctionIDMapper* f) override {
        CallScope s("SetFunctionIDMapper", false);
        s.caller(__builtin_return_address(0));
        s.args().set("pFunc", Json::object().set("address", Json::pointer(reinterpret_cast<void*>(f))));
        s.begin();
        return s.finish(S_OK);
    }
    // behaviour: answer.world
    HRESULT STDMETHODCALLTYPE SetFunctionIDMapper2(FunctionIDMapper2* f, void* cd) override {
        CallScope s("SetFunctionIDMapper2", false);
        s.caller(__builtin_return_address(0));
        s.args().set("pFunc", Json::object().set("address", Json::pointer(reinterpret_cast<void*>(f))));
        s.arg("clientData", cd);
        s.begin();
        return s.finish(S_OK);
    }

    static HRESULT function_from_ip(UINT_PTR ip, FunctionID* out) {
        for (const auto& [id, f] : g_world.functions) {
            if (ip >= f.start && ip - f.start < f.size) {
                if (out) *out = id;
                return S_OK;
            }
        }
        if (out) *out = 0;
        return E_FAIL;
    }

    std::atomic<long> refs_{1};
};

template <typename T>
void put(T* p, T v) {
    if (p) *p = v;
}

}  // namespace

// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetClassFromObject(ObjectID objectId, ClassID* pClassId) {
    const Object* o = entry(g_world.heap, objectId);
    put<ClassID>(pClassId, o ? o->cls : 0);
    return o ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetObjectSize(ObjectID objectId, ULONG* pcSize) {
    const Object* o = entry(g_world.heap, objectId);
    put<ULONG>(pcSize, o ? static_cast<ULONG>(o->size) : 0);
    return o ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetObjectSize2(ObjectID objectId, SIZE_T* pcSize) {
    const Object* o = entry(g_world.heap, objectId);
    put<SIZE_T>(pcSize, o ? o->size : 0);
    return o ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetClassFromToken(ModuleID moduleId, mdTypeDef typeDef, ClassID* pClassId) {
    Class* c = class_by_token(moduleId, typeDef);
    put<ClassID>(pClassId, c ? c->id : 0);
    return c ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetFunctionFromToken(ModuleID moduleId, mdToken token, FunctionID* pFunctionId) {
    Function* f = function_by_token(moduleId, token);
    put<FunctionID>(pFunctionId, f ? f->id : 0);
    return f ? S_OK : E_INVALIDARG;
}
// A function told before its JITCompilationStarted (its IL, behaviour il.body) has no code until its
// JITCompilationFinished: its code range is answered as before it was told (answer.unknown-id).
const Function* compiled(FunctionID id) {
    const Function* f = entry(g_world.functions, id);
    return f && f->size ? f : nullptr;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetCodeInfo(FunctionID functionId, LPCBYTE* pStart, ULONG* pcSize) {
    const Function* f = compiled(functionId);
    put<LPCBYTE>(pStart, f ? reinterpret_cast<LPCBYTE>(f->start) : nullptr);
    put<ULONG>(pcSize, f ? static_cast<ULONG>(f->size) : 0);
    return f ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetCodeInfo2(FunctionID functionID, ULONG32 cCodeInfos, ULONG32* pcCodeInfos,
                                      COR_PRF_CODE_INFO* codeInfos) {
    const Function* f = compiled(functionID);
    put<ULONG32>(pcCodeInfos, f ? 1 : 0);
    if (!f) return E_INVALIDARG;
    if (codeInfos && cCodeInfos >= 1) codeInfos[0] = COR_PRF_CODE_INFO{f->start, f->size};
    return S_OK;
}
// behaviour: answer.world
HRESULT InfoBase::answer_GetEventMask(DWORD* pdwEvents) {
    put<DWORD>(pdwEvents, g_world.mask_low);
    return S_OK;
}
// behaviour: answer.world
HRESULT InfoBase::answer_SetEventMask(DWORD dwEvents) {
    g_world.mask_low = dwEvents;
    return S_OK;
}
// behaviour: answer.world
HRESULT InfoBase::answer_GetEventMask2(DWORD* pdwEventsLow, DWORD* pdwEventsHigh) {
    put<DWORD>(pdwEventsLow, g_world.mask_low);
    put<DWORD>(pdwEventsHigh, g_world.mask_high);
    return S_OK;
}
// behaviour: answer.world
HRESULT InfoBase::answer_SetEventMask2(DWORD dwEventsLow, DWORD dwEventsHigh) {
    g_world.mask_low = dwEventsLow;
    g_world.mask_high = dwEventsHigh;
    return S_OK;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetFunctionFromIP(LPCBYTE ip, FunctionID* pFunctionId) {
    return Info::function_from_ip(reinterpret_cast<UINT_PTR>(ip), pFunctionId);
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetFunctionFromIP2(LPCBYTE ip, FunctionID* pFunctionId, ReJITID* pReJitId) {
    put<ReJITID>(pReJitId, 0);
    return Info::function_from_ip(reinterpret_cast<UINT_PTR>(ip), pFunctionId);
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetThreadInfo(ThreadID threadId, DWORD* pdwWin32ThreadId) {
    const FakeThread* t = entry(g_world.threads, threadId);
    if (!t || !t->worker) {
        put<DWORD>(pdwWin32ThreadId, 0);
        return E_INVALIDARG;
    }
    put<DWORD>(pdwWin32ThreadId, static_cast<DWORD>(t->worker->os_tid()));
    return S_OK;
}
// behaviour: answer.world, answer.not-managed-thread
HRESULT InfoBase::answer_GetCurrentThreadID(ThreadID* pThreadId) {
    put<ThreadID>(pThreadId, tl_thread);
    return tl_thread ? S_OK : CORPROF_E_NOT_MANAGED_THREAD;
}
// behaviour: answer.world
HRESULT InfoBase::answer_InitializeCurrentThread() { return S_OK; }
// behaviour: answer.world
HRESULT InfoBase::answer_SuspendRuntime() { return S_OK; }
// behaviour: answer.world
HRESULT InfoBase::answer_ResumeRuntime() { return S_OK; }
// behaviour: answer.world
HRESULT InfoBase::answer_ForceGC() { return S_OK; }
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetClassIDInfo(ClassID classId, ModuleID* pModuleId, mdTypeDef* pTypeDefToken) {
    const Class* c = entry(g_world.classes, classId);
    put<ModuleID>(pModuleId, c ? c->module : 0);
    put<mdTypeDef>(pTypeDefToken, c ? c->token : 0);
    return c ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetClassIDInfo2(ClassID classId, ModuleID* pModuleId, mdTypeDef* pTypeDefToken,
                                         ClassID* pParentClassId, ULONG32, ULONG32* pcNumTypeArgs, ClassID*) {
    const Class* c = entry(g_world.classes, classId);
    put<ModuleID>(pModuleId, c ? c->module : 0);
    put<mdTypeDef>(pTypeDefToken, c ? c->token : 0);
    put<ClassID>(pParentClassId, c ? c->parent : 0);
    put<ULONG32>(pcNumTypeArgs, 0);
    return c ? S_OK : E_INVALIDARG;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetFunctionInfo(FunctionID functionId, ClassID* pClassId, ModuleID* pModuleId,
                                         mdToken* pToken) {
    const Function* f = entry(g_world.functions, functionId);
    const FunctionInfo fi = f ? f->info : FunctionInfo{};
    put<ClassID>(pClassId, fi.classId);
    put<ModuleID>(pModuleId, fi.moduleId);
    put<mdToken>(pToken, fi.token);
    return f ? S_OK : E_INVALIDARG;
}
// A pair RequestReJIT cannot mark (a NULL methodDef, a token of another table) gets its ReJITError
// (functionId NULL, E_INVALIDARG) before RequestReJIT returns, on the calling thread, as 3.1.23 and 8.0.4 do.
// behaviour: rejit.request, rejit.not-enabled, rejit.error
HRESULT InfoBase::answer_RequestReJIT(ULONG cFunctions, ModuleID* moduleIds, mdMethodDef* methodIds) {
    if (!(g_world.mask_low & COR_PRF_ENABLE_REJIT)) return static_cast<HRESULT>(0x8013137C);
    if (cFunctions == 0 || !moduleIds || !methodIds) return E_INVALIDARG;
    std::vector<std::pair<ModuleID, mdMethodDef>> errors;
    {
        std::lock_guard<std::mutex> g(g_il_mu);
        for (ULONG i = 0; i < cFunctions; ++i) {
            const std::pair<ModuleID, mdMethodDef> key(moduleIds[i], methodIds[i]);
            if (!rejit_markable(key.second)) {
                errors.push_back(key);
                continue;
            }
            g_rejit_pending.push_back(key);
            g_rejit_active.insert(key);
        }
    }
    report_rejit_errors(errors);
    return S_OK;
}
// RequestRevert: the page's Status HRESULTs per pair. An active request is reverted (S_OK; a pending
// recompilation dropped, the next request recompiles anew); a NULL ModuleID or methodDef: E_INVALIDARG; a
// pair with no active request: S_OK in the observed world (3.1.23 and 8.0.4 write S_OK, REJIT-16's
// expectation), CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND in the documented one. A NULL status array is
// accepted (nothing written).
// behaviour: rejit.revert, rejit.revert-documented, rejit.revert-null, rejit.not-enabled
HRESULT InfoBase::answer_RequestRevert(ULONG cFunctions, ModuleID* moduleIds, mdMethodDef* methodIds,
                                       HRESULT* status) {
    if (!(g_world.mask_low & COR_PRF_ENABLE_REJIT)) return static_cast<HRESULT>(0x8013137C);
    if (cFunctions == 0 || !moduleIds || !methodIds) return E_INVALIDARG;
    std::lock_guard<std::mutex> g(g_il_mu);
    for (ULONG i = 0; i < cFunctions; ++i) {
        const std::pair<ModuleID, mdMethodDef> key(moduleIds[i], methodIds[i]);
        HRESULT hr = S_OK;
        if (key.first == 0 || key.second == 0) {
            hr = E_INVALIDARG;  // behaviour: rejit.revert-null
        } else if (g_rejit_active.erase(key)) {
            g_rejit_pending.erase(std::remove(g_rejit_pending.begin(), g_rejit_pending.end(), key),
                                  g_rejit_pending.end());
        } else if (g_world.documented) {
            // CORPROF_E_ACTIVE_REJIT_REQUEST_NOT_FOUND: the page's name; dotnet/runtime's corerror.xml
            // defines none, 0x8013137D is the gap where it would stand
            hr = static_cast<HRESULT>(0x8013137D);
        }
        if (status) status[i] = hr;
    }
    return S_OK;
}
// behaviour: il.body, answer.unknown-id
HRESULT InfoBase::answer_GetILFunctionBody(ModuleID moduleId, mdMethodDef methodId, LPCBYTE* ppMethodHeader,
                                           ULONG* pcbMethodSize) {
    const Function* f = function_by_token(moduleId, methodId);
    if (!f || f->il.empty()) {
        put<LPCBYTE>(ppMethodHeader, nullptr);
        put<ULONG>(pcbMethodSize, 0);
        return E_INVALIDARG;
    }
    put<LPCBYTE>(ppMethodHeader, f->il.data());
    put<ULONG>(pcbMethodSize, static_cast<ULONG>(f->il.size()));
    return S_OK;
}
// behaviour: il.allocator, answer.unknown-id
HRESULT InfoBase::answer_GetILFunctionBodyAllocator(ModuleID moduleId, IMethodMalloc** ppMalloc) {
    if (!entry(g_world.modules, moduleId)) {
        put<IMethodMalloc*>(ppMalloc, nullptr);
        return E_INVALIDARG;
    }
    put<IMethodMalloc*>(ppMalloc, reinterpret_cast<IMethodMalloc*>(static_cast<MethodMalloc*>(&g_method_malloc)));
    return S_OK;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetFunctionInfo2(FunctionID funcId, COR_PRF_FRAME_INFO, ClassID* pClassId,
                                          ModuleID* pModuleId, mdToken* pToken, ULONG32, ULONG32* pcTypeArgs,
                                          ClassID*) {
    put<ULONG32>(pcTypeArgs, 0);
    return answer_GetFunctionInfo(funcId, pClassId, pModuleId, pToken);
}
// behaviour: answer.world, answer.unknown-id, answer.buffer-size, answer.buffer-short-error, answer.buffer-short-documented
HRESULT InfoBase::answer_GetModuleInfo(ModuleID moduleId, LPCBYTE* ppBaseLoadAddress, ULONG cchName,
                                       ULONG* pcchName, WCHAR* szName, AssemblyID* pAssemblyId) {
    Module* m = entry(g_world.modules, moduleId);
    if (!m) {
        put<ULONG>(pcchName, 0);
        return E_INVALIDARG;
    }
    put<LPCBYTE>(ppBaseLoadAddress, reinterpret_cast<LPCBYTE>(m->base));
    put<AssemblyID>(pAssemblyId, m->assembly);
    const std::u16string& name = m->names.next();
    const ULONG need = static_cast<ULONG>(name.size() + 1);
    if (!g_world.documented && szName && cchName && cchName < need) {
        // What 3.1 and 8.0 answer a short buffer here (BUF-09's observation): the size, only the NUL they
        // store in element 0 first, ERROR_INSUFFICIENT_BUFFER.
        put<ULONG>(pcchName, need);
        szName[0] = 0;
        return static_cast<HRESULT>(0x8007007A);
    }
    return answer_text(name, cchName, pcchName, szName);
}
// behaviour: answer.world, answer.unknown-id, answer.buffer-size, answer.buffer-short-error, answer.buffer-short-documented
HRESULT InfoBase::answer_GetModuleInfo2(ModuleID moduleId, LPCBYTE* ppBaseLoadAddress, ULONG cchName,
                                        ULONG* pcchName, WCHAR* szName, AssemblyID* pAssemblyId,
                                        DWORD* pdwModuleFlags) {
    put<DWORD>(pdwModuleFlags, 0);
    return answer_GetModuleInfo(moduleId, ppBaseLoadAddress, cchName, pcchName, szName, pAssemblyId);
}
// behaviour: answer.world, answer.buffer-size, answer.buffer-short-truncate
HRESULT InfoBase::answer_GetRuntimeInformation(USHORT* pClrInstanceId, COR_PRF_RUNTIME_TYPE* pRuntimeType,
                                               USHORT* pMajorVersion, USHORT* pMinorVersion, USHORT* pBuildNumber,
                                               USHORT* pQFEVersion, ULONG cchVersionString,
                                               ULONG* pcchVersionString, WCHAR* szVersionString) {
    put<USHORT>(pClrInstanceId, 0);
    put<COR_PRF_RUNTIME_TYPE>(pRuntimeType, COR_PRF_CORE_CLR);
    put<USHORT>(pMajorVersion, 8);
    put<USHORT>(pMinorVersion, 0);
    put<USHORT>(pBuildNumber, 4);
    put<USHORT>(pQFEVersion, 0);
    return answer_text(u"8.0.4-fake", cchVersionString, pcchVersionString, szVersionString);
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetModuleMetaData(ModuleID moduleId, DWORD, REFIID riid, IUnknown** ppOut) {
    if (!ppOut) return E_POINTER;
    *ppOut = nullptr;
    if (!entry(g_world.modules, moduleId)) return E_INVALIDARG;
    if (!(riid == IID_IMetaDataImport || riid == IID_IUnknown)) return E_NOINTERFACE;
    *ppOut = static_cast<IMetaDataImport*>(new MetaData(moduleId));
    return S_OK;
}
// behaviour: answer.world, answer.unknown-id
HRESULT InfoBase::answer_GetTokenAndMetaDataFromFunction(FunctionID functionId, REFIID riid, IUnknown** ppImport,
                                                         mdToken* pToken) {
    const Function* f = entry(g_world.functions, functionId);
    put<mdToken>(pToken, f ? f->info.token : 0);
    if (ppImport) *ppImport = nullptr;
    if (!f) return E_INVALIDARG;
    if (!ppImport) return E_POINTER;
    if (!(riid == IID_IMetaDataImport || riid == IID_IUnknown)) return E_NOINTERFACE;
    *ppImport = static_cast<IMetaDataImport*>(new MetaData(f->info.moduleId));
    return S_OK;
}

// --- the profiler, the session, the command loop --------------------------------------------------------

namespace {

struct Session {
    IUnknown* unknown = nullptr;
    void* levels[kMaxCallbackLevel + 1] = {};
    int level = 0;
    Info* info = nullptr;
};

using GetClassObject = HRESULT (*)(REFCLSID, REFIID, void**);
GetClassObject g_get_class_object = nullptr;
GUID g_clsid{};
Session g_session;

// While a line holding a whole example is carried out, its replies wait here and go in one write at its
// end (the harness reads them all then: one wake-up, not one per reply).
std::string* g_replies = nullptr;

void reply(const Json& j) {
    std::string s = j.dump();
    s.push_back('\n');
    if (g_replies) g_replies->append(s);
    else write_all(STDOUT_FILENO, s);
}

Worker* take_worker() {
    if (!g_idle.empty()) {
        Worker* w = g_idle.back();
        g_idle.pop_back();
        return w;
    }
    g_workers.push_back(std::make_unique<Worker>());
    return g_workers.back().get();
}

// The worker of fake thread `thread` (not 0), which becomes a live fake thread if it is not one yet.
Worker* worker_of(ThreadID thread) {
    auto it = g_world.threads.find(thread);
    if (it == g_world.threads.end()) {
        FakeThread t;
        t.id = thread;
        t.worker = take_worker();
        it = g_world.threads.emplace(thread, std::move(t)).first;
    }
    return it->second.worker;
}

// The baton of an example's runs (run_pending): the command loop waits here while workers hold it.
std::mutex g_baton_mu;
std::condition_variable g_baton_cv;
bool g_baton_back = false;

void baton_back() {
    {
        std::lock_guard<std::mutex> lock(g_baton_mu);
        g_baton_back = true;
    }
    g_baton_cv.notify_all();
}

std::string callback_error(const std::string& name) { return "cannot make callback " + name; }

int callback_id(const std::string& name) {
    static std::unordered_map<std::string, int>* ids = [] {
        auto* m = new std::unordered_map<std::string, int>();
        for (int k = 0; k < static_cast<int>(Cb::Count_); ++k) (*m)[kCbNames[k]] = k;
        return m;
    }();
    auto it = ids->find(name);
    return it == ids->end() ? -1 : it->second;
}

template <typename T>
std::vector<T> array_of(const Json& args, const char* name) {
    std::vector<T> v;
    if (const Json* a = args.get(name))
        for (const Json& x : a->items()) v.push_back(static_cast<T>(x.kind() == Json::Kind::Int ? x.as_int() : x.as_uint()));
    return v;
}

// The recompilations RequestReJIT asked for, made on the calling thread (at a JITCompilationFinished, as a
// runtime recompiles at the next call of the method): per requested (module, methodDef) that has compiled
// functions, GetReJITParameters once with its function control, then ReJITCompilationStarted and
// ReJITCompilationFinished (S_OK) of each of its functions with a new ReJITID. A pair with no compiled
// function waits.
// behaviour: rejit.compile
// behaviour: rejit.error
void report_rejit_errors(const std::vector<std::pair<ModuleID, mdMethodDef>>& errors) {
    auto* cb4 = static_cast<ICorProfilerCallback4*>(g_session.levels[4]);
    if (!cb4) return;
    for (const auto& [module, method] : errors) {
        push_callback("ReJITError", Json::object()
                          .set("moduleId", Json(static_cast<std::uint64_t>(module)))
                          .set("methodId", Json(static_cast<std::uint64_t>(method)))
                          .set("functionId", Json(std::uint64_t{0}))
                          .set("hrStatus", Json(static_cast<std::uint32_t>(E_INVALIDARG))), false);
        pop_callback(cb4->ReJITError(module, method, 0, E_INVALIDARG));
    }
}

void play_rejits() {
    auto* cb4 = static_cast<ICorProfilerCallback4*>(g_session.levels[4]);
    if (!cb4) return;
    std::vector<std::pair<ModuleID, mdMethodDef>> todo;
    {
        std::lock_guard<std::mutex> g(g_il_mu);
        todo.swap(g_rejit_pending);
    }
    std::vector<std::pair<ModuleID, mdMethodDef>> later;
    std::set<std::pair<ModuleID, mdMethodDef>> done;
    for (const auto& [module, method] : todo) {
        std::vector<FunctionID> fns;
        for (const auto& [fid, f] : g_world.functions)
            if (f.info.moduleId == module && f.info.token == method) fns.push_back(fid);
        if (fns.empty()) {
            later.emplace_back(module, method);
            continue;
        }
        if (!done.insert({module, method}).second) continue;  // asked twice in one batch: one recompilation
        std::sort(fns.begin(), fns.end());
        auto* control = new FakeFunctionControl(module, method);
        push_callback("GetReJITParameters", Json::object()
                          .set("moduleId", Json(static_cast<std::uint64_t>(module)))
                          .set("methodId", Json(static_cast<std::uint64_t>(method)))
                          .set("pFunctionControl", Json::pointer(control)), false);
        pop_callback(cb4->GetReJITParameters(module, method, reinterpret_cast<ICorProfilerFunctionControl*>(
                                                                 static_cast<FunctionControlVtbl*>(control))));
        const ReJITID rejit = ++g_next_rejit;
        for (FunctionID fid : fns) {
            Json started = Json::object().set("functionId", Json(static_cast<std::uint64_t>(fid)))
                               .set("rejitId", Json(static_cast<std::uint64_t>(rejit))).set("fIsSafeToBlock", Json(1));
            push_callback("ReJITCompilationStarted", std::move(started), false);
            pop_callback(cb4->ReJITCompilationStarted(fid, rejit, 1));
            Json finished = Json::object().set("functionId", Json(static_cast<std::uint64_t>(fid)))
                                .set("rejitId", Json(static_cast<std::uint64_t>(rejit))).set("hrStatus", Json(0))
                                .set("fIsSafeToBlock", Json(1));
            push_callback("ReJITCompilationFinished", std::move(finished), false);
            pop_callback(cb4->ReJITCompilationFinished(fid, rejit, S_OK, 1));
        }
    }
    std::lock_guard<std::mutex> g(g_il_mu);
    g_rejit_pending.insert(g_rejit_pending.begin(), later.begin(), later.end());
}

// Makes one callback on the calling thread, recorded; the callbacks with arrays are made here by hand.
// behaviour: answer.mask, gc.mr2-failed
void deliver(int id, const Json& args) {
    const int level = kCbLevel[id];
    void* cb = g_session.levels[level];
    if (!cb) return;  // the profiler does not implement that interface: the runtime does not call it
    if (kCbMask[id] && !(g_world.mask_low & kCbMask[id])) return;  // not asked for
    const char* name = kCbNames[id];
    HRESULT hr = S_OK;
    const Cb which = static_cast<Cb>(id);
    if (which == Cb::MovedReferences && g_session.levels[4] && tl_moved2_failed) {
        tl_moved2_failed = false;  // MR2-12: a failed MovedReferences2 suppresses its MovedReferences
        return;
    }
    if (which == Cb::MovedReferences2 || which == Cb::MovedReferences) {
        std::vector<ObjectID> olds = array_of<ObjectID>(args, "oldObjectIDRangeStart");
        std::vector<ObjectID> news = array_of<ObjectID>(args, "newObjectIDRangeStart");
        std::vector<SIZE_T> lens = array_of<SIZE_T>(args, "cObjectIDRangeLength");
        const ULONG n = static_cast<ULONG>(olds.size());
        if (news.size() != n || lens.size() != n) {
            g_errors.push_back(std::string(name) + ": arrays of different lengths");
            return;
        }
        // the ranges as the proxy records them: a mark just before the callback's entry
        Json mark = Json::object();
        mark.set("name", "proxy.ranges").set("payload", name).set("callback", name)
            .set("oldObjectIDRangeStart", *args.get("oldObjectIDRangeStart"))
            .set("newObjectIDRangeStart", *args.get("newObjectIDRangeStart"))
            .set("cObjectIDRangeLength", *args.get("cObjectIDRangeLength"));
        record("mark", mark);
        push_callback(name, Json::object().set("cMovedObjectIDRanges", Json(n)), false);
        if (which == Cb::MovedReferences2) {
            hr = static_cast<ICorProfilerCallback4*>(cb)->MovedReferences2(n, olds.data(), news.data(), lens.data());
            tl_moved2_failed = hr < 0;
        } else {
            std::vector<ULONG> short_lens(lens.begin(), lens.end());
            hr = static_cast<ICorProfilerCallback*>(cb)->MovedReferences(n, olds.data(), news.data(), short_lens.data());
        }
        pop_callback(hr);
        return;
    }
    if (which == Cb::GarbageCollectionStarted) {
        std::vector<BOOL> collected = array_of<BOOL>(args, "generationCollected");
        push_callback(name, Json(args), false);
        hr = static_cast<ICorProfilerCallback2*>(cb)->GarbageCollectionStarted(
            static_cast<int>(collected.size()), collected.data(), arg_of<COR_PRF_GC_REASON>(args, "reason"));
        pop_callback(hr);
        return;
    }
    if (which == Cb::ObjectsAllocatedByClass) {
        std::vector<ClassID> classes = array_of<ClassID>(args, "classIds");
        std::vector<ULONG> counts = array_of<ULONG>(args, "cObjects");
        push_callback(name, Json(args), kCbLazy[id]);
        hr = static_cast<ICorProfilerCallback*>(cb)->ObjectsAllocatedByClass(
            static_cast<ULONG>(std::min(classes.size(), counts.size())), classes.data(), counts.data());
        pop_callback(hr);
        return;
    }
    if (which == Cb::ThreadAssignedToOSThread) {  // the OS thread is the worker's: only it knows its id
        Json with_os = args;
        with_os.set("osThreadId", Json(static_cast<std::int64_t>(os_tid())));
        push_callback(name, Json(with_os), kCbLazy[id]);
        if (!deliver_scalar(g_session.levels, id, with_os, hr)) g_errors.push_back(callback_error(name));
        pop_callback(hr);
        return;
    }
    // ObjectAllocated is recorded whole (the proxy keeps it lazily): the ObjectIDs it hands out tell the
    // model's MR2-17 bookkeeping that an address a moved object left has a new object now.
    push_callback(name, Json(args), kCbLazy[id] && which != Cb::ObjectAllocated);
    if (!deliver_scalar(g_session.levels, id, args, hr)) g_errors.push_back(callback_error(name));
    pop_callback(hr);
    if (which == Cb::JITCompilationFinished) play_rejits();
}

// The heap's version in force from here on (conformance/fuzz/world.py HEAP_MARK): a judge reads which
// ObjectIDs were live at each inspection from it.
void mark_heap(const Json& cmd) {
    Json rec = Json::object();
    rec.set("name", "fuzz.heap").set("payload", Json()).set("version", Json(arg_of<std::int64_t>(cmd, "version")));
    record("mark", rec);
}

// The world's entry a "module" or "class" command tells (its id and names), replacing any earlier one of
// that id; the caller fills in the rest.
template <class Kind>
Kind& told(std::unordered_map<UINT_PTR, Kind>& entries, const Json& cmd) {
    const UINT_PTR id = arg_of<UINT_PTR>(cmd, "id");
    Kind& e = entries[id];
    e = Kind{};
    e.id = id;
    e.names = names_of(cmd);
    return e;
}

void apply_state(const std::string& op, const Json& cmd) {
    if (op == "module") {
        Module& m = told(g_world.modules, cmd);
        m.base = arg_of<UINT_PTR>(cmd, "base");
        m.assembly = arg_of<AssemblyID>(cmd, "assembly");
    } else if (op == "class") {
        Class& c = told(g_world.classes, cmd);
        c.module = arg_of<ModuleID>(cmd, "module");
        c.token = arg_of<mdTypeDef>(cmd, "token");
        c.parent = arg_of<ClassID>(cmd, "parent");
    } else if (op == "function") {
        Function f;
        f.id = arg_of<FunctionID>(cmd, "id");
        f.info.classId = arg_of<ClassID>(cmd, "class");
        f.info.moduleId = arg_of<ModuleID>(cmd, "module");
        f.info.token = arg_of<mdMethodDef>(cmd, "token");
        f.start = arg_of<UINT_PTR>(cmd, "start");
        f.size = arg_of<SIZE_T>(cmd, "size");
        f.names = names_of(cmd);
        const Json* il = cmd.get("il");
        if (il && il->is_string()) {
            f.il = bytes_of_hex(il->as_string());
            // the assembly the body comes from, once per module: the judge's IL checker reads its metadata
            const Json* from = cmd.get("il_from");
            if (from && from->is_string() && g_world.il_told.insert(f.info.moduleId).second) {
                Json rec = Json::object();
                rec.set("name", "fuzz.il.module").set("payload", Json())
                    .set("moduleId", Json(static_cast<std::uint64_t>(f.info.moduleId))).set("path", Json(from->as_string()));
                record("mark", rec);
            }
        } else if (const Function* before = entry(g_world.functions, f.id)) {
            f.il = before->il;  // the same function's code range, told after its JITCompilationStarted
        }
        g_world.functions[f.id] = std::move(f);
    } else if (op == "thread") {
        const ThreadID id = arg_of<ThreadID>(cmd, "id");
        if (!g_world.threads.count(id)) {
            FakeThread t;
            t.id = id;
            t.worker = take_worker();
            g_world.threads.emplace(id, std::move(t));
        }
    } else if (op == "thread_gone") {
        auto it = g_world.threads.find(arg_of<ThreadID>(cmd, "id"));
        if (it != g_world.threads.end()) {
            g_idle.push_back(it->second.worker);
            g_world.threads.erase(it);
        }
    } else if (op == "heap" || op == "objects") {  // the whole heap, or objects added to it
        mark_heap(cmd);
        if (op == "heap") g_world.heap.clear();
        if (const Json* objs = cmd.get("objects")) {
            for (const Json& o : objs->items()) {
                const auto& f = o.items();
                if (f.size() == 3) g_world.heap[f[0].as_uint()] = Object{f[1].as_uint(), f[2].as_uint()};
            }
        }
    } else if (op == "world") {
        const Json* name = cmd.get("name");
        g_world.documented = name && name->is_string() && name->as_string() == "documented";
    } else if (op == "stack") {
        FakeThread* t = entry(g_world.threads, arg_of<ThreadID>(cmd, "thread"));
        if (!t) {
            g_errors.push_back("stack of an unknown thread");
            return;
        }
        t->stack.clear();
        if (const Json* fs = cmd.get("frames")) {
            for (const Json& fr : fs->items()) {
                const auto& f = fr.items();
                if (f.size() == 2) t->stack.emplace_back(f[0].as_uint(), f[1].as_uint());
            }
        }
    } else {
        g_errors.push_back("unknown command " + op);
    }
}

// World state is applied as the command loop's (tid null, the main OS thread's id in the trace), on
// whichever worker runs the batch it belongs to.
long g_main_os_tid = 0;

void apply_state_as_loop(const std::string& op, const Json& cmd) {
    const ThreadID thread = tl_thread;
    const long os = tl_os_tid;
    tl_thread = 0;
    tl_os_tid = g_main_os_tid;
    apply_state(op, cmd);
    tl_thread = thread;
    tl_os_tid = os;
}

void run_event(const Json& cmd) {
    const Json* name = cmd.get("name");
    const int id = name ? callback_id(name->as_string()) : -1;
    if (id < 0) {
        g_errors.push_back("unknown callback " + (name ? name->as_string() : std::string("?")));
        return;
    }
    static const Json kNoArgs = Json::object();
    const Json* args = cmd.get("args");
    deliver(id, args ? *args : kNoArgs);
}

const std::string& op_of(const Json& cmd) {
    static const std::string none;
    const Json* op = cmd.get("op");
    return op && op->is_string() ? op->as_string() : none;
}

// A run: commands [begin, end) whose events are all on one fake thread (with the world state sent
// between them), carried out on that thread.
struct Run {
    std::size_t begin;
    std::size_t end;
    ThreadID thread;
};

std::vector<Run> runs_of(const std::vector<const Json*>& cmds) {
    std::vector<Run> runs;
    std::size_t first_event = 0;
    while (first_event < cmds.size() && op_of(*cmds[first_event]) != "event") ++first_event;
    if (first_event == cmds.size()) {  // no events: the world state only, on the command loop
        if (!cmds.empty()) runs.push_back(Run{0, cmds.size(), 0});
        return runs;
    }
    std::size_t begin = 0;  // the state before the first event goes with it
    ThreadID thread = arg_of<ThreadID>(*cmds[first_event], "thread");
    for (std::size_t i = first_event + 1; i < cmds.size(); ++i) {
        const Json& c = *cmds[i];
        if (op_of(c) != "event") continue;
        const ThreadID t = arg_of<ThreadID>(c, "thread");
        if (t == thread) continue;
        runs.push_back(Run{begin, i, thread});
        begin = i;
        thread = t;
    }
    runs.push_back(Run{begin, cmds.size(), thread});  // the state after the last event goes with it
    return runs;
}

void carry_out(const std::vector<const Json*>& cmds, const Run& run) {
    for (std::size_t i = run.begin; i < run.end; ++i) {
        const Json& c = *cmds[i];
        const std::string& op = op_of(c);
        if (op == "event") run_event(c);
        else apply_state_as_loop(op, c);
    }
}

// Carries out an example's commands in order, one run after the other. A run is one job for its thread's
// worker (one hand-over per run, not per event), and a worker that finishes its run hands the baton
// straight to the next run's worker; the command loop takes it back only for a run of fake thread 0 (its
// own) and at the end: one wake-up per change of thread.
void run_pending(std::vector<const Json*>& cmds) {
    const std::vector<Run> runs = runs_of(cmds);
    std::vector<Job> jobs(runs.size());
    std::size_t next = 0;  // the run to carry out next (set by whichever thread holds the baton)
    for (std::size_t k = 0; k < runs.size(); ++k) {
        jobs[k] = [&, k] {
            tl_thread = runs[k].thread;
            carry_out(cmds, runs[k]);
            next = k + 1;
            if (next < runs.size() && runs[next].thread != 0) {
                worker_of(runs[next].thread)->post(&jobs[next]);
                return false;
            }
            return true;  // back to the command loop (its worker calls baton_back() after this returns)
        };
    }
    while (next < runs.size()) {
        const std::size_t k = next;
        if (runs[k].thread == 0) {
            carry_out(cmds, runs[k]);
            next = k + 1;
            continue;
        }
        {
            std::lock_guard<std::mutex> lock(g_baton_mu);
            g_baton_back = false;
        }
        worker_of(runs[k].thread)->post(&jobs[k]);
        std::unique_lock<std::mutex> lock(g_baton_mu);
        g_baton_cv.wait(lock, [] { return g_baton_back; });
    }
    cmds.clear();
}

void start(const Json& cmd) {
    Json out = Json::object().set("op", "started");
    g_errors.clear();
    g_world = World{};
    {
        std::lock_guard<std::mutex> g(g_il_mu);
        g_rejit_pending.clear();
        g_rejit_active.clear();
    }
    g_shutdown_returned.store(false);
    {
        std::lock_guard<std::mutex> lock(g_trace_mu);
        g_seq = 0;
        const Json* path = cmd.get("trace");
        g_trace_fd = path ? ::open(path->as_string().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644)
                          : -1;
    }
    if (g_trace_fd < 0) {
        reply(out.set("error", "cannot create the trace"));
        return;
    }
    IClassFactory* factory = nullptr;
    HRESULT hr = g_get_class_object(g_clsid, IID_IClassFactory, reinterpret_cast<void**>(&factory));
    IUnknown* obj = nullptr;
    if (hr == S_OK && factory) {
        hr = factory->CreateInstance(nullptr, IID_IUnknown, reinterpret_cast<void**>(&obj));
        factory->Release();
    }
    g_session = Session{};
    if (hr != S_OK || !obj) {
        Json rec = Json::object();
        rec.set("what", "the profiler's class factory created no profiler").set("where", "DllGetClassObject");
        record("probe_error", rec);
        reply(out.set("error", "the profiler's class factory created no profiler"));
        return;
    }
    g_session.unknown = obj;
    g_session.level = query_levels(obj, kMaxCallbackLevel, callback_iid, g_session.levels);
    Json header = Json::object();
    header.set("probe", "profharness-fakeruntime 1").set("pid", Json(static_cast<std::int64_t>(getpid())));
    header.set("runtime", Json::object().set("clr_type", Json(2)).set("major", Json(8)).set("minor", Json(0))
                              .set("build", Json(4)).set("qfe", Json(0)));
    header.set("context_size", Json(static_cast<std::uint64_t>(sizeof(AMD64Context))));
    header.set("proxy", Json::object().set("callbackLevel", Json(g_session.level)).set("infoLevel", Json(kMaxInfoLevel))
                            .set("fake", true));
    record("header", header);
    if (!g_session.levels[1]) {
        Json rec = Json::object();
        rec.set("what", "the profiler implements no ICorProfilerCallback").set("where", "QueryInterface");
        record("probe_error", rec);
        reply(out.set("error", "the profiler implements no ICorProfilerCallback"));
        return;
    }
    g_session.info = new Info();
    HRESULT init = S_OK;
    {  // on fake thread 0, the main one: the command loop's own OS thread
        push_callback("Initialize", Json::object().set("pICorProfilerInfoUnk", Json::pointer(g_session.info)), false);
        init = static_cast<ICorProfilerCallback*>(g_session.levels[1])
                   ->Initialize(static_cast<IUnknown*>(static_cast<ICorProfilerInfo*>(g_session.info)));
        pop_callback(init);
    }
    out.set("callbackLevel", Json(g_session.level)).set("hr", Json(static_cast<std::uint32_t>(init)));
    out.set("mask", Json(g_world.mask_low));
    reply(out);
}

void end() {
    Json out = Json::object().set("op", "ended");
    if (g_session.levels[1]) {
        {  // on fake thread 0, the command loop's own OS thread
            push_callback("Shutdown", Json::object(), false);
            HRESULT hr = static_cast<ICorProfilerCallback*>(g_session.levels[1])->Shutdown();
            pop_callback(hr);
        }
        g_shutdown_returned.store(true);
        for (int k = 1; k <= kMaxCallbackLevel; ++k)
            if (g_session.levels[k]) static_cast<IUnknown*>(g_session.levels[k])->Release();
        if (g_session.unknown) g_session.unknown->Release();
    }
    record("end", Json::object());
    {
        std::lock_guard<std::mutex> lock(g_trace_mu);
        if (g_trace_fd >= 0) ::close(g_trace_fd);
        g_trace_fd = -1;
    }
    // Fake threads end with the example; their workers wait for the next one.
    for (auto& [id, t] : g_world.threads) g_idle.push_back(t.worker);
    g_world.threads.clear();
    Json errors = Json::array();
    for (const std::string& e : g_errors) errors.push(Json(e));
    out.set("errors", errors);
    reply(out);
}

// The commands received since "start" (each line parsed once and kept whole: a line may hold a whole
// example), and the ones carried out at "end" or "sync" (pointers into the kept lines).
struct Lines {
    std::deque<Json> kept;
    std::vector<const Json*> pending;
    Json& keep(Json j) {
        kept.push_back(std::move(j));
        return kept.back();
    }
    void clear_after(const Json* keep_this) {  // drops every line except the one being read
        pending.clear();
        while (!kept.empty() && &kept.front() != keep_this) kept.pop_front();
        while (kept.size() > 1) kept.pop_back();
    }
};

// One command; false for "quit".
bool command(const Json& cmd, Lines& lines) {
    if (!cmd.is_object()) {
        g_errors.push_back("bad command: not an object");
        return true;
    }
    const std::string& op = op_of(cmd);
    if (op == "start") {
        lines.clear_after(&lines.kept.back());
        start(cmd);
    } else if (op == "end") {
        run_pending(lines.pending);
        end();
        lines.clear_after(&lines.kept.back());
    } else if (op == "sync") {
        run_pending(lines.pending);
        lines.clear_after(&lines.kept.back());
        reply(Json::object().set("op", "synced"));
    } else if (op == "quit") {
        return false;
    } else {
        lines.pending.push_back(&cmd);
    }
    return true;
}

// Lines from a file descriptor, read in large blocks (std::getline on std::cin reads a character at a time).
class LineReader {
 public:
    explicit LineReader(int fd) : fd_(fd) {}
    bool next(std::string& line) {
        for (;;) {
            const std::size_t nl = buf_.find('\n', pos_);
            if (nl != std::string::npos) {
                line.assign(buf_, pos_, nl - pos_);
                pos_ = nl + 1;
                return true;
            }
            buf_.erase(0, pos_);
            pos_ = 0;
            char chunk[1 << 16];
            ssize_t n = ::read(fd_, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                if (buf_.empty()) return false;
                line.swap(buf_);
                buf_.clear();
                return true;
            }
            buf_.append(chunk, static_cast<std::size_t>(n));
        }
    }

 private:
    int fd_;
    std::string buf_;
    std::size_t pos_ = 0;
};

}  // namespace

}  // namespace profharness::fake

using namespace profharness;
using namespace profharness::fake;

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: profharness-fakeruntime PROFILER.so {CLSID}\n");
        return 2;
    }
    if (!parse_guid(argv[2], g_clsid)) {
        std::fprintf(stderr, "profharness-fakeruntime: %s is not a CLSID\n", argv[2]);
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        std::fprintf(stderr, "profharness-fakeruntime: cannot load the profiler: %s\n", why ? why : "?");
        return 3;
    }
    g_get_class_object = reinterpret_cast<GetClassObject>(dlsym(lib, "DllGetClassObject"));
    if (!g_get_class_object) {
        std::fprintf(stderr, "profharness-fakeruntime: %s exports no DllGetClassObject\n", argv[1]);
        return 3;
    }
    install_crash_handlers();
    g_main_os_tid = os_tid();
    reply(Json::object().set("op", "ready").set("pid", Json(static_cast<std::int64_t>(getpid()))));
    std::string line;
    Lines lines;
    LineReader in(STDIN_FILENO);
    while (in.next(line)) {
        if (line.empty()) continue;
        Json& cmd = lines.keep(Json());
        std::string err;
        if (!Json::parse(line, cmd, err) || !(cmd.is_object() || cmd.is_array())) {
            g_errors.push_back("bad command: " + err);
            continue;
        }
        bool go_on = true;
        if (cmd.is_array()) {
            std::string replies;
            g_replies = &replies;
            for (const Json& item : cmd.items())
                if (!(go_on = command(item, lines))) break;
            g_replies = nullptr;
            write_all(STDOUT_FILENO, replies);
        } else {
            go_on = command(cmd, lines);
        }
        if (!go_on) break;
    }
    std::fflush(stdout);
    _exit(0);
}
