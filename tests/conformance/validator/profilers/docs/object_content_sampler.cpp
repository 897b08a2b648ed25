// object_content_sampler.cpp -- samples one allocated object in 50 and reads what is inside it.
//
// What it does: ObjectAllocated records one object in 50 of each class -- the 1st, 51st, 101st...,
// so that rare classes such as boxed values are seen too -- with its ObjectID, ClassID and
// generation.  Nothing is read then: the object is not constructed yet.  The IDs are carried
// across every GC with the MovedReferences2 / SurvivingReferences2 ranges; a sample whose
// generation was collected and that lies in no reported range is dropped as dead.  In
// GarbageCollectionStarted -- where the documents allow inspecting objects "in their original
// locations" -- each new sample is read once (arrays: rank, dimensions, element type, first
// elements; strings: length, first characters; boxed values and ordinary objects: primitive fields
// by GetClassLayout offsets, names and types from metadata); in GarbageCollectionFinished, once the
// IDs are updated, a few older samples are read again and compared with their first read.
// Shutdown prints "object_content_sampler: samples=<n> ..." and some example reads to stderr.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//  * COR_PRF_MONITOR: COR_PRF_ENABLE_OBJECT_ALLOCATED "Informs the runtime that the profiler may
//    want object allocation notifications. This flag must be set during initialization."; it
//    "allows the profiler to subsequently use the COR_PRF_MONITOR_OBJECT_ALLOCATED flag".
//  * ObjectAllocated: "The classId parameter can refer to a class in managed code that has not been
//    loaded yet." -- so class layouts and names are resolved later, not in the callback.
//  * GarbageCollectionStarted: "It is safe for the profiler to inspect objects in their original
//    locations during the GarbageCollectionStarted callback."; "the profiler should consider all object IDs to be invalid until it
//    receives a ICorProfilerCallback2::GarbageCollectionFinished callback."
//  * MovedReferences2: "profilers should not attempt to inspect objects during a MovedReferences2
//    call. A ICorProfilerCallback2::GarbageCollectionFinished callback indicates that all objects
//    have been moved to their new locations and inspection can be performed."; newObjectID =
//    newObjectIDRangeStart[i] + (oldObjectID - oldObjectIDRangeStart[i]).
//  * SurvivingReferences2: "the information is cumulative"; "For a garbage collection on any
//    particular generation, the profiler will receive either a SurvivingReferences2 callback or a
//    MovedReferences2 callback, but not both."
//  * GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their final
//    locations when the GarbageCollectionFinished method is called."
//  * GetObjectGeneration: "may be called from any profiler callback, provided that garbage
//    collection is not in progress" (called in ObjectAllocated and GarbageCollectionFinished).
//  * GetArrayObjectInfo: cDimensions is "The rank (number of dimensions) of the array" (taken from
//    IsArrayClass's pcRank; the two out arrays are sized to it).
//  * GetClassLayout: "returns only the fields defined by the class itself ... the profiler must call
//    GetClassLayout on the parent class"; "with string classes, the method will fail with error code
//    E_INVALIDARG ... will also fail when called with an array class" (never called for those);
//    "first call GetClassLayout with a zero-length rFieldOffset buffer to obtain the correct buffer
//    size" (two-pass, as in "Caller-Allocated Buffers": "If InfoBuffer is null, cBufferSizeStart
//    must be 0."); GetClassIDInfo2 and the metadata name buffers use the same two passes.
//  * GetStringLayout2: length "is stored as a DWORD"; "Strings may or may not be null-terminated."
//  * GetBoxClassLayout: "After pBufferOffset is applied to a boxed object, the value type's class
//    layout can be used to interpret the object's value."
//  * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after
//    the Shutdown method is called." (Shutdown only prints what was gathered.)
//
// Ambiguities: (1) whether a compacting GC reports unmoved survivors in MovedReferences2 is not
// stated -- a sample found in no range of a collected generation is dropped (losing a live sample
// is safe, keeping a dead ID is not).  (2) Whether GetClassLayout lists static fields is not said;
// fields with fdStatic or an offset beyond GetObjectSize2 are skipped.  (3) For a value type, the
// pages do not say whether GetClassLayout offsets include an object header; they are applied after
// the GetBoxClassLayout offset as that page says.  (4) GetObjectGeneration "from any callback"
// does not say whether ObjectAllocated (object not yet constructed) counts; it is treated as allowed.
// It fails on 8.0 for some objects ObjectAllocated reports (e.g. ""), kept as generation unknown.
#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.h"

using namespace docfix;

namespace {
enum : CorElementType { ET_BOOL = 2, ET_CHAR, ET_I1, ET_U1, ET_I2, ET_U2, ET_I4, ET_U4, ET_I8, ET_U8, ET_R4, ET_R8,
                        ET_I = 0x18, ET_U = 0x19, ET_CMOD_REQD = 0x1f, ET_CMOD_OPT = 0x20 };
constexpr DWORD kFdStatic = 0x10;
ULONG prim_size(CorElementType et) {
    switch (et) {
        case ET_BOOL: case ET_I1: case ET_U1: return 1;
        case ET_CHAR: case ET_I2: case ET_U2: return 2;
        case ET_I4: case ET_U4: case ET_R4: return 4;
        case ET_I8: case ET_U8: case ET_R8: case ET_I: case ET_U: return 8;
        default: return 0;
    }
}
std::string prim_text(CorElementType et, const BYTE* p) {
    char b[40];
    if (et == ET_R4) { float f; std::memcpy(&f, p, 4); std::snprintf(b, sizeof b, "%g", f); return b; }
    if (et == ET_R8) { double d; std::memcpy(&d, p, 8); std::snprintf(b, sizeof b, "%g", d); return b; }
    if (et == ET_BOOL) return *p ? "true" : "false";
    std::uint64_t u = 0;
    ULONG n = prim_size(et);
    std::memcpy(&u, p, n);  // little-endian x64
    bool sgn = et == ET_I1 || et == ET_I2 || et == ET_I4 || et == ET_I8 || et == ET_I;
    if (sgn && n < 8 && ((u >> (n * 8 - 1)) & 1)) u |= ~0ull << (n * 8);
    if (sgn) std::snprintf(b, sizeof b, "%lld", (long long)u);
    else std::snprintf(b, sizeof b, "%llu", (unsigned long long)u);
    return b;
}
std::uint64_t fnv(std::uint64_t h, const void* p, size_t n) {
    const BYTE* b = static_cast<const BYTE*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
struct Field { std::string name; ULONG offset; CorElementType et; };
enum Kind { K_UNKNOWN, K_ARRAY, K_STRING, K_BOXED, K_OBJECT };
struct ClassInfo {
    Kind kind = K_UNKNOWN; std::string name; CorElementType elem = 0; ULONG rank = 0;
    ULONG32 box_offset = 0; std::vector<Field> fields;
};
struct Sample { ObjectID id; ClassID cls; int gen; bool read = false; std::uint64_t fp = 0; };
struct MoveRange { ObjectID old_start, new_start; SIZE_T len; };
}  // namespace

class ObjectContentSampler : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) { std::fprintf(stderr, "[ocs] QI(ICorProfilerInfo4) failed 0x%08x\n", (unsigned)hr); return hr; }
        hr = info_->SetEventMask(COR_PRF_ENABLE_OBJECT_ALLOCATED | COR_PRF_MONITOR_OBJECT_ALLOCATED | COR_PRF_MONITOR_GC);
        if (failed(hr)) { std::fprintf(stderr, "[ocs] SetEventMask failed 0x%08x\n", (unsigned)hr); info_->Release(); info_ = nullptr; return hr; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE ObjectAllocated(ObjectID id, ClassID cls) override {
        if (shutdown_) return S_OK;
        { std::lock_guard<std::mutex> g(mu_); if ((per_class_[cls]++ % 50) != 0) return S_OK; }
        COR_PRF_GC_GENERATION_RANGE r{};
        int gen = succeeded(info_->GetObjectGeneration(id, &r)) ? r.generation : -1;
        std::lock_guard<std::mutex> g(mu_);
        if (samples_.size() >= 20000) { ++skipped_; return S_OK; }
        samples_.push_back(Sample{id, cls, gen});
        ++total_samples_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int n, BOOL* collected, COR_PRF_GC_REASON) override {
        if (shutdown_) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        collected_.assign(collected, collected + n);
        moved_.clear(); survived_.clear();
        for (Sample& s : samples_)  // first read, objects still in their original locations
            if (!s.read) { s.fp = read_sample(s, true); s.read = true; ++reads_; }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID* olds, ObjectID* news, SIZE_T* lens) override {
        std::lock_guard<std::mutex> g(mu_);  // IDs only copied: no object is inspected here
        for (ULONG i = 0; i < n; ++i) moved_.push_back(MoveRange{olds[i], news[i], lens[i]});
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG n, ObjectID* starts, SIZE_T* lens) override {
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) survived_.push_back(MoveRange{starts[i], starts[i], lens[i]});
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        if (shutdown_) return S_OK;
        std::lock_guard<std::mutex> g(mu_);
        ++gcs_;
        auto by_old = [](const MoveRange& a, const MoveRange& b) { return a.old_start < b.old_start; };
        std::sort(moved_.begin(), moved_.end(), by_old);
        std::sort(survived_.begin(), survived_.end(), by_old);
        auto find = [&](const std::vector<MoveRange>& v, ObjectID id) -> const MoveRange* {
            auto it = std::upper_bound(v.begin(), v.end(), MoveRange{id, 0, 0}, by_old);
            if (it == v.begin()) return nullptr;
            --it;
            return (id >= it->old_start && id < it->old_start + it->len) ? &*it : nullptr;
        };
        std::vector<Sample> live;
        for (Sample s : samples_) {
            if (const MoveRange* m = find(moved_, s.id)) {
                ObjectID n = m->new_start + (s.id - m->old_start);
                if (n != s.id) ++moved_samples_;
                s.id = n;
            } else if (!find(survived_, s.id)) {
                bool gen_known_uncollected = s.gen >= 0 && s.gen < (int)collected_.size() && !collected_[s.gen];
                if (!gen_known_uncollected) { ++dead_; continue; }  // collected (or unknown) and in no range
            }
            COR_PRF_GC_GENERATION_RANGE r{};
            s.gen = succeeded(info_->GetObjectGeneration(s.id, &r)) ? r.generation : -1;
            live.push_back(s);
        }
        samples_.swap(live);
        unsigned rereads = 0;
        for (size_t k = 0; k < samples_.size() && rereads < 8; ++k) {  // a few samples again, new locations
            Sample& s = samples_[(reread_cursor_ + k) % samples_.size()];
            if (!s.read) continue;
            std::uint64_t fp = read_sample(s, false);
            ++rereads; ++rereads_total_;
            if (fp == s.fp) ++reread_same_; else ++reread_changed_;
        }
        if (!samples_.empty()) reread_cursor_ = (reread_cursor_ + rereads) % samples_.size();
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        shutdown_ = true;
        std::lock_guard<std::mutex> g(mu_);
        auto u = [](std::uint64_t v) { return (unsigned long long)v; };
        std::fprintf(stderr, "object_content_sampler: samples=%llu live=%zu dead=%llu moved=%llu gcs=%u reads=%llu "
                     "arrays=%llu strings=%llu boxed=%llu objects=%llu fields=%llu rereads=%llu same=%llu "
                     "changed=%llu class_mismatch=%llu errors=%llu skipped=%llu\n", u(total_samples_), samples_.size(),
                     u(dead_), u(moved_samples_), gcs_, u(reads_), u(kinds_[K_ARRAY]), u(kinds_[K_STRING]),
                     u(kinds_[K_BOXED]), u(kinds_[K_OBJECT]), u(fields_read_), u(rereads_total_), u(reread_same_),
                     u(reread_changed_), u(class_mismatch_), u(errors_), u(skipped_));
        for (const std::string& e : examples_) std::fprintf(stderr, "  %s\n", e.c_str());
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }
        return S_OK;
    }

private:
    IMetaDataImport* metadata(ModuleID mod) {
        auto it = mdi_.find(mod);
        if (it != mdi_.end()) return it->second;
        IMetaDataImport* mdi = nullptr;  // riid = IID_IMetaDataImport: the out pointer is that interface
        if (failed(info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, reinterpret_cast<IUnknown**>(&mdi)))) mdi = nullptr;
        mdi_[mod] = mdi;
        return mdi;
    }
    // Name of a (non-array) class and its parent, GetClassIDInfo2 type arguments fetched in two passes.
    std::string class_name(ClassID cls, ClassID* parent, ModuleID* mod_out, mdTypeDef* td_out) {
        ModuleID mod = 0; mdTypeDef td = 0; ULONG32 nargs = 0;
        if (failed(info_->GetClassIDInfo2(cls, &mod, &td, parent, 0, &nargs, nullptr))) return "";
        std::vector<ClassID> args(nargs);
        if (nargs > 0 && failed(info_->GetClassIDInfo2(cls, &mod, &td, parent, nargs, &nargs, args.data()))) return "";
        *mod_out = mod; *td_out = td;
        IMetaDataImport* mdi = metadata(mod);
        if (mdi == nullptr) return "";
        ULONG len = 0; DWORD flags = 0; mdToken ext = 0;
        if (failed(mdi->GetTypeDefProps(td, nullptr, 0, &len, &flags, &ext)) || len == 0) return "";
        std::vector<WCHAR> buf(len);
        if (failed(mdi->GetTypeDefProps(td, buf.data(), len, &len, &flags, &ext))) return "";
        return to_utf8(buf.data(), buf.size());
    }
    // Fields the class itself defines (GetClassLayout two-pass, names/types from metadata).
    void add_fields(ClassID cls, ModuleID mod, std::vector<Field>& out) {
        ULONG count = 0, size = 0;
        if (failed(info_->GetClassLayout(cls, nullptr, 0, &count, &size)) || count == 0) return;
        std::vector<COR_FIELD_OFFSET> offs(count);
        if (failed(info_->GetClassLayout(cls, offs.data(), count, &count, &size))) return;
        IMetaDataImport* mdi = metadata(mod);
        if (mdi == nullptr) return;
        for (ULONG i = 0; i < std::min<ULONG>(count, (ULONG)offs.size()); ++i) {
            mdTypeDef owner = 0; ULONG len = 0, cb = 0; DWORD attr = 0, cplus = 0; PCCOR_SIGNATURE sig = nullptr;
            const void* val = nullptr; ULONG cval = 0;
            if (failed(mdi->GetFieldProps(offs[i].ridOfField, &owner, nullptr, 0, &len, &attr, &sig, &cb, &cplus, &val, &cval))) continue;
            std::vector<WCHAR> name(len + 1, 0);
            if (failed(mdi->GetFieldProps(offs[i].ridOfField, &owner, name.data(), len, &len, &attr, &sig, &cb, &cplus, &val, &cval))) continue;
            if ((attr & kFdStatic) || sig == nullptr || cb < 2) continue;
            ULONG p = 1;  // skip IMAGE_CEE_CS_CALLCONV_FIELD, then custom modifiers (type token follows each)
            while (p + 1 < cb && (sig[p] == ET_CMOD_REQD || sig[p] == ET_CMOD_OPT))  // compressed token: 1, 2 or 4 bytes
                p += 1 + ((sig[p + 1] & 0x80) == 0 ? 1 : (sig[p + 1] & 0xC0) == 0x80 ? 2 : 4);
            if (p >= cb) continue;
            out.push_back(Field{to_utf8(name.data(), name.size()), offs[i].ulOffset, sig[p]});
        }
    }
    const ClassInfo& class_info(ClassID cls) {
        auto it = classes_.find(cls);
        if (it != classes_.end()) return it->second;
        ClassInfo ci;
        CorElementType et = 0; ClassID ecls = 0; ULONG rank = 0;
        if (info_->IsArrayClass(cls, &et, &ecls, &rank) == S_OK) {
            ci.kind = K_ARRAY; ci.elem = et; ci.rank = rank;
            char nb[48];
            std::snprintf(nb, sizeof nb, "array(elem=0x%x,rank=%u)", (unsigned)et, (unsigned)rank);
            ci.name = nb;
            return classes_[cls] = ci;
        }
        ClassID parent = 0; ModuleID mod = 0; mdTypeDef td = 0;
        ci.name = class_name(cls, &parent, &mod, &td);
        if (ci.name.empty()) return classes_[cls] = ci;  // unknown: nothing read
        ClassID pparent = 0; ModuleID pmod = 0; mdTypeDef ptd = 0;
        std::string pname = parent ? class_name(parent, &pparent, &pmod, &ptd) : "";
        if (ci.name == "System.String" && pname == "System.Object") {
            ci.kind = K_STRING;
        } else if ((pname == "System.ValueType" || pname == "System.Enum") &&
                   succeeded(info_->GetBoxClassLayout(cls, &ci.box_offset))) {
            ci.kind = K_BOXED;
            add_fields(cls, mod, ci.fields);
        } else {
            ci.kind = K_OBJECT;
            for (ClassID c = cls; c != 0;) {  // own fields, then each parent's (GetClassLayout remark)
                ClassID p = 0; ModuleID m = 0; mdTypeDef t = 0;
                if (class_name(c, &p, &m, &t).empty()) break;
                add_fields(c, m, ci.fields);
                c = p;
            }
        }
        return classes_[cls] = ci;
    }
    // Reads one sample (only from GarbageCollectionStarted/Finished); returns a fingerprint of the content.
    std::uint64_t read_sample(const Sample& s, bool first) {
        ClassID now = 0;
        if (failed(info_->GetClassFromObject(s.id, &now))) { ++errors_; return 0; }
        if (now != s.cls) { ++class_mismatch_; return 0; }
        SIZE_T size = 0;
        if (failed(info_->GetObjectSize2(s.id, &size))) { ++errors_; return 0; }
        const ClassInfo& ci = class_info(s.cls);
        const BYTE* obj = reinterpret_cast<const BYTE*>(s.id);
        std::uint64_t h = fnv(fnv(14695981039346656037ull, &now, sizeof now), &size, sizeof size);
        std::string text = ci.name + " size=" + std::to_string(size) + " gen=" + std::to_string(s.gen) + ":";
        if (ci.kind == K_ARRAY) {
            std::vector<ULONG32> dims(ci.rank ? ci.rank : 1);
            std::vector<int> lbs(dims.size());
            BYTE* data = nullptr;
            if (ci.rank == 0 || failed(info_->GetArrayObjectInfo(s.id, ci.rank, dims.data(), lbs.data(), &data))) { ++errors_; return 0; }
            std::uint64_t total = 1;
            for (ULONG r = 0; r < ci.rank; ++r) { total *= dims[r]; text += " dim" + std::to_string(r) + "=" + std::to_string(dims[r]); }
            h = fnv(h, dims.data(), dims.size() * sizeof(ULONG32));
            ULONG es = prim_size(ci.elem);
            bool ref = ci.elem == 0x12 || ci.elem == 0x1c || ci.elem == 0x0e || ci.elem == 0x1d || ci.elem == 0x14;
            for (std::uint64_t i = 0; i < std::min<std::uint64_t>(total, 4); ++i) {
                if (es) { text += " " + prim_text(ci.elem, data + i * es); h = fnv(h, data + i * es, es); }
                else if (ref) { ObjectID r; std::memcpy(&r, data + i * 8, 8); text += r ? " ref" : " null"; }
            }
        } else if (ci.kind == K_STRING) {
            ULONG len_off = 0, buf_off = 0;
            if (failed(info_->GetStringLayout2(&len_off, &buf_off))) { ++errors_; return 0; }
            DWORD len; std::memcpy(&len, obj + len_off, sizeof len);
            const WCHAR* chars = reinterpret_cast<const WCHAR*>(obj + buf_off);
            if (buf_off + (SIZE_T)len * 2 > size) { ++errors_; return 0; }
            h = fnv(fnv(h, &len, sizeof len), chars, (size_t)len * 2);
            text += " len=" + std::to_string(len) + " \"" + to_utf8(chars, std::min<DWORD>(len, 24)) + "\"";
        } else if (ci.kind == K_BOXED || ci.kind == K_OBJECT) {
            ULONG base = ci.kind == K_BOXED ? ci.box_offset : 0;
            for (const Field& f : ci.fields) {
                ULONG fs = prim_size(f.et);
                if (fs == 0 || base + f.offset + fs > size) continue;  // references, structs, generics
                text += " " + f.name + "=" + prim_text(f.et, obj + base + f.offset);
                h = fnv(h, obj + base + f.offset, fs);
                if (first) ++fields_read_;
            }
        }
        if (first) {
            ++kinds_[ci.kind];
            if (examples_.size() < 16 && example_kinds_[ci.kind]++ < 4) examples_.push_back(text);
        }
        return h;
    }

    ICorProfilerInfo4* info_ = nullptr;
    std::atomic<bool> shutdown_{false};
    std::mutex mu_;
    std::vector<Sample> samples_;
    std::vector<BOOL> collected_;
    std::vector<MoveRange> moved_, survived_;
    std::map<ClassID, ClassInfo> classes_;
    std::map<ModuleID, IMetaDataImport*> mdi_;
    std::unordered_map<ClassID, std::uint32_t> per_class_;
    std::vector<std::string> examples_;
    unsigned example_kinds_[5] = {}, gcs_ = 0;
    size_t reread_cursor_ = 0;
    std::uint64_t total_samples_ = 0, dead_ = 0, moved_samples_ = 0, reads_ = 0, kinds_[5] = {}, fields_read_ = 0;
    std::uint64_t rereads_total_ = 0, reread_same_ = 0, reread_changed_ = 0, class_mismatch_ = 0, errors_ = 0, skipped_ = 0;
};

DOCFIX_DEFINE_PROFILER(ObjectContentSampler)
