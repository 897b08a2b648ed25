// leak_detector.cpp -- GC-handle, finalization-queue, root-kind and survivor-age leak detector.
//
// What it does: with COR_PRF_MONITOR_GC only, it keeps, across GCs, every live object (ObjectID ->
// ClassID, age) learned from ObjectReferences; at each GarbageCollectionFinished it carries the
// previous GC's IDs forward through this GC's MovedReferences2 ranges, matches them against this GC's
// ObjectReferences set and ages the survivors.  Classes whose instances survived >= 3 GCs, and whose
// count of such instances keeps growing, are leak suspects.  It also follows GC handles (HandleCreated
// with the initial object, HandleDestroyed; current target from RootReferences2 handle roots), the
// objects queued for finalization, and counts roots by COR_PRF_GC_ROOT_KIND / _FLAGS.  No object is
// inspected and no class is named before GarbageCollectionFinished; Shutdown prints the summary
// ("leak_detector: gcs=<n> ...") to stderr and only Releases the info pointer.
//
// Documentation followed (learn.microsoft.com/dotnet/framework/unmanaged-api/profiling/...):
//   * COR_PRF_MONITOR: COR_PRF_MONITOR_GC "Controls the GarbageCollectionStarted, GarbageCollectionFinished,
//     MovedReferences, MovedReferences2, SurvivingReferences, SurvivingReferences2, ObjectReferences,
//     ObjectsAllocatedByClass, RootReferences, RootReferences2, HandleCreated, HandleDestroyed, and
//     FinalizeableObjectQueued callbacks".
//   * GarbageCollectionStarted: "After the profiler has returned from this callback, the profiler should
//     consider all object IDs to be invalid until it receives a ICorProfilerCallback2::GarbageCollectionFinished
//     callback."  GarbageCollectionFinished: "It is safe for the profiler to inspect objects in their
//     final locations when the GarbageCollectionFinished method is called."
//   * MovedReferences2: "newObjectID = newObjectIDRangeStart[i] + (oldObjectID - oldObjectIDRangeStart[i])";
//     "profilers should not attempt to inspect objects during a MovedReferences2 call."
//   * SurvivingReferences2: "For a garbage collection on any particular generation, the profiler will
//     receive either a SurvivingReferences2 callback or a MovedReferences2 callback, but not both." and
//     "the information is cumulative" (ranges from several callbacks of one GC are merged).
//   * ObjectReferences: "The ObjectReferences method is called for each object remaining in the heap
//     after a garbage collection has completed."; "profilers must not attempt to inspect objects during
//     an ObjectReferences call."; "A null ClassId indicates that objectId has a type that is unloading."
//   * RootReferences2: "If the type of the root is a handle, the root ID is for the garbage collection
//     handle."; "It is possible for entries in rootRefIds to be zero"; "profilers should not attempt to
//     inspect objects during a RootReferences2 call."
//   * ClassLoadFinished: "The value of classId is not valid for an information request until the
//     ClassLoadFinished method is called." (ClassIDs named here come from live objects, so are loaded.)
//   * GetClassIDInfo2 / "Caller-Allocated Buffers": "you can first call GetClassIDInfo2 with a zero-length
//     typeArgs buffer to obtain the correct buffer size" (double pass, also for GetTypeDefProps).
//   * IsArrayClass: "If the specified class is an array class, the IsArrayClass method returns an S_OK
//     HRESULT ... Otherwise, it returns S_FALSE."  GetModuleMetaData: modules without metadata give
//     "S_FALSE, and a null in *ppOut".
//   * Shutdown: "The profiler code cannot safely call methods of the ICorProfilerInfo interface after the
//     Shutdown method is called."
//
// Ambiguities (and what this file does about them):
//   * Whether IDs given by ObjectReferences / RootReferences2 / FinalizeableObjectQueued are pre- or
//     post-move relative to the same GC's MovedReferences2, and the order of these callbacks, are not
//     stated.  "after a garbage collection has completed" is read as final IDs; FinalizeableObjectQueued
//     IDs are looked up as-is first, then through this GC's moves, and the two outcomes are counted.
//     A small sample of IDs is checked with GetClassFromObject at GarbageCollectionFinished.
//   * Whether HandleCreated's initialObjectId may be inspected inside HandleCreated is not stated: it is
//     not; it is carried through moves and resolved at the next GarbageCollectionFinished.
//   * Whether the GCHandleID in RootReferences2's rootIds is the same value HandleCreated gave is implied
//     ("the root ID is for the garbage collection handle"), not promised: matches are counted.
//   * Objects in generations a GC did not condemn appear in neither Moved nor Surviving ranges; an ID
//     outside every range keeps its value and counts as surviving only if the new ObjectReferences set
//     holds it with the same ClassID.  Whether class naming (not object inspection) is allowed inside
//     the other GC callbacks is not stated: naming is done only at GarbageCollectionFinished.
#include "common.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace docfix;

namespace {
constexpr unsigned kOldAge = 3;  // "survived several GCs"
struct Range { ObjectID oldStart, newStart; SIZE_T len; };
struct Obj { ClassID cls; unsigned age; };
struct Handle { ObjectID obj; bool createdInGc; };
struct ClassHist { size_t firstOld = 0, lastOld = 0, prevOld = 0; unsigned growing = 0, seenGcs = 0; size_t bytes = 0; };
const char* kKindNames[4] = {"other", "stack", "finalizer", "handle"};
}  // namespace

class LeakDetector : public CallbackBase {
public:
    HRESULT STDMETHODCALLTYPE Initialize(IUnknown* unk) override {
        if (unk == nullptr) return E_INVALIDARG;
        HRESULT hr = unk->QueryInterface(IID_ICorProfilerInfo4, reinterpret_cast<void**>(&info_));
        if (failed(hr)) { std::fprintf(stderr, "leak_detector: no ICorProfilerInfo4 (0x%08x)\n", (unsigned)hr); return hr; }
        hr = info_->SetEventMask(COR_PRF_MONITOR_GC);
        if (failed(hr)) { info_->Release(); info_ = nullptr; return hr; }
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionStarted(int, BOOL*, COR_PRF_GC_REASON) override {
        std::lock_guard<std::mutex> g(mu_);
        inGc_ = true;
        moves_.clear(); cur_.clear(); handleRoots_.clear(); queued_.clear();
        return S_OK;  // nothing inspected here although it would still be allowed
    }
    HRESULT STDMETHODCALLTYPE MovedReferences2(ULONG n, ObjectID* oldS, ObjectID* newS, SIZE_T* len) override {
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) moves_.push_back({oldS[i], newS[i], len[i]});
        movedRanges_ += n;
        return S_OK;  // IDs only stored, never dereferenced
    }
    HRESULT STDMETHODCALLTYPE SurvivingReferences2(ULONG n, ObjectID*, SIZE_T*) override {
        std::lock_guard<std::mutex> g(mu_);
        survivingRanges_ += n;  // survivors keep their IDs: nothing to translate
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE ObjectReferences(ObjectID id, ClassID cls, ULONG, ObjectID*) override {
        std::lock_guard<std::mutex> g(mu_);
        cur_[id] = cls;
        return S_OK;  // an error return would stop these callbacks for the rest of the GC
    }
    HRESULT STDMETHODCALLTYPE RootReferences2(ULONG n, ObjectID* refs, COR_PRF_GC_ROOT_KIND* kinds,
                                              COR_PRF_GC_ROOT_FLAGS* flags, UINT_PTR* ids) override {
        std::lock_guard<std::mutex> g(mu_);
        for (ULONG i = 0; i < n; ++i) {
            if (refs[i] == 0) { ++nullRoots_; continue; }
            int k = (kinds[i] >= 0 && kinds[i] <= 3) ? kinds[i] : 0;
            ++rootKinds_[k];
            for (int b = 0; b < 4; ++b) if (flags[i] & (1 << b)) ++rootFlags_[b];
            if (k == 3) handleRoots_[ids[i]] = refs[i];  // handle -> current target (a number, not inspected)
        }
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE FinalizeableObjectQueued(DWORD fl, ObjectID id) override {
        std::lock_guard<std::mutex> g(mu_);
        ++finalQueued_;
        if (fl & 0x1) ++finalCritical_;  // COR_PRF_FINALIZER_CRITICAL
        queued_.push_back(id);
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE HandleCreated(GCHandleID h, ObjectID initial) override {
        std::lock_guard<std::mutex> g(mu_);
        ++handlesCreated_;
        if (inGc_) ++handlesCreatedInGc_;
        handles_[h] = {initial, inGc_};
        return S_OK;
    }
    HRESULT STDMETHODCALLTYPE HandleDestroyed(GCHandleID h) override {
        std::lock_guard<std::mutex> g(mu_);
        ++handlesDestroyed_;
        if (handles_.erase(h) == 0) ++handlesUnknown_;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE GarbageCollectionFinished() override {
        std::lock_guard<std::mutex> g(mu_);
        if (shutdown_ || info_ == nullptr) return S_OK;
        ++gcs_;
        std::sort(moves_.begin(), moves_.end(), [](const Range& a, const Range& b) { return a.oldStart < b.oldStart; });
        // 1. carry the previous GC's IDs through this GC's moves and age the survivors.
        std::unordered_map<ObjectID, Obj> next;
        next.reserve(cur_.size());
        for (auto& e : cur_) next.emplace(e.first, Obj{e.second, 0});
        for (auto& e : live_) {
            auto it = next.find(translate(e.first));
            if (it != next.end() && it->second.cls == e.second.cls) it->second.age = e.second.age + 1;
        }
        live_.swap(next);
        // 2. handles: current target from this GC's handle roots, else the carried initial object.
        handleHeld_.clear();
        for (auto& h : handles_) {
            auto r = handleRoots_.find(h.first);
            if (r != handleRoots_.end()) { ++handleRootMatches_; h.second.obj = r->second; }
            else if (!h.second.createdInGc) h.second.obj = translate(h.second.obj);
            h.second.createdInGc = false;
            auto o = live_.find(h.second.obj);
            if (o != live_.end()) ++handleHeld_[o->second.cls]; else ++handleTargetsGone_;
        }
        // 3. objects queued for finalization: as-is first, then through the moves.
        for (ObjectID id : queued_) {
            auto o = live_.find(id);
            if (o != live_.end()) ++finalDirect_;
            else if ((o = live_.find(translate(id))) != live_.end()) ++finalTranslated_;
            else { ++finalUnmatched_; continue; }
            ++finalClasses_[o->second.cls];
        }
        // 4. census of old survivors per class.
        std::unordered_map<ClassID, size_t> old;
        for (auto& e : live_) if (e.second.age >= kOldAge && e.second.cls != 0) ++old[e.second.cls];
        for (auto& c : old) {
            ClassHist& h = hist_[c.first];
            if (h.seenGcs++ == 0) h.firstOld = c.second;
            h.growing = (h.seenGcs > 1 && c.second > h.prevOld) ? h.growing + 1 : h.growing;
            h.prevOld = h.lastOld = c.second;
        }
        for (auto& h : hist_) if (old.find(h.first) == old.end()) h.second.lastOld = h.second.prevOld = 0;
        liveObjects_ = live_.size();
        oldObjects_ = 0;
        for (auto& c : old) oldObjects_ += c.second;
        // 5. inspection and naming: allowed now ("safe ... to inspect objects in their final locations").
        std::vector<std::pair<size_t, ClassID>> top;
        for (auto& c : old) top.push_back({c.second, c.first});
        std::sort(top.rbegin(), top.rend());
        if (top.size() > 6) top.resize(6);
        for (auto& t : top) { name(t.second, 0); hist_[t.second].bytes = 0; }
        unsigned sampled = 0;
        for (auto& e : live_) {
            if (e.second.cls == 0) continue;
            for (auto& t : top)
                if (t.second == e.second.cls && e.second.age >= kOldAge) {
                    SIZE_T sz = 0;
                    if (succeeded(info_->GetObjectSize2(e.first, &sz))) hist_[t.second].bytes += sz;
                }
            if (sampled < 32 && e.second.age > 0) {  // an aged (carried) ID: does the heap agree?
                ++sampled;
                ClassID c = 0;
                if (succeeded(info_->GetClassFromObject(e.first, &c)) && c == e.second.cls) ++idVerified_; else ++idMismatch_;
            }
        }
        for (auto& h : handleHeld_) name(h.first, 0);
        for (auto& f : finalClasses_) name(f.first, 0);
        inGc_ = false;
        return S_OK;
    }

    HRESULT STDMETHODCALLTYPE Shutdown() override {
        std::lock_guard<std::mutex> g(mu_);
        std::fprintf(stderr, "leak_detector: gcs=%u live_objects=%zu aged>=%u=%zu moved_ranges=%zu surviving_ranges=%zu "
                     "id_check verified=%zu mismatched=%zu\n", gcs_, liveObjects_, kOldAge, oldObjects_, movedRanges_,
                     survivingRanges_, idVerified_, idMismatch_);
        std::fprintf(stderr, "leak_detector: roots");
        for (int k = 0; k < 4; ++k) std::fprintf(stderr, " %s=%zu", kKindNames[k], rootKinds_[k]);
        std::fprintf(stderr, " null=%zu flags pinning=%zu weak=%zu interior=%zu refcounted=%zu\n", nullRoots_,
                     rootFlags_[0], rootFlags_[1], rootFlags_[2], rootFlags_[3]);
        std::fprintf(stderr, "leak_detector: handles created=%zu destroyed=%zu live=%zu created_in_gc=%zu destroyed_unknown=%zu "
                     "root_matches=%zu targets_gone=%zu held:%s\n", handlesCreated_, handlesDestroyed_, handles_.size(),
                     handlesCreatedInGc_, handlesUnknown_, handleRootMatches_, handleTargetsGone_, topList(handleHeld_).c_str());
        std::fprintf(stderr, "leak_detector: finalization queued=%zu critical=%zu matched_direct=%zu matched_translated=%zu "
                     "unmatched=%zu classes:%s\n", finalQueued_, finalCritical_, finalDirect_, finalTranslated_,
                     finalUnmatched_, topList(finalClasses_).c_str());
        std::vector<std::pair<size_t, ClassID>> sus;
        for (auto& h : hist_) if (h.second.lastOld > 0) sus.push_back({h.second.lastOld, h.first});
        std::sort(sus.rbegin(), sus.rend());
        for (size_t i = 0; i < sus.size() && i < 5; ++i) {
            const ClassHist& h = hist_[sus[i].second];
            std::fprintf(stderr, "leak_detector: survivor class=%s old_instances=%zu first_seen=%zu growing_gcs=%u "
                         "bytes=%zu%s\n", cachedName(sus[i].second).c_str(), h.lastOld, h.firstOld, h.growing, h.bytes,
                         h.growing >= 2 && h.lastOld > h.firstOld ? " SUSPECT" : "");
        }
        shutdown_ = true;
        if (info_ != nullptr) { info_->Release(); info_ = nullptr; }  // the only call made on the info pointer here
        return S_OK;
    }

private:
    ObjectID translate(ObjectID id) const {
        auto it = std::upper_bound(moves_.begin(), moves_.end(), id,
                                   [](ObjectID v, const Range& r) { return v < r.oldStart; });
        if (it == moves_.begin()) return id;
        --it;
        return (id < it->oldStart + it->len) ? it->newStart + (id - it->oldStart) : id;
    }

    std::string cachedName(ClassID c) const {
        auto it = names_.find(c);
        if (it != names_.end()) return it->second;
        char b[40];
        std::snprintf(b, sizeof b, "<class 0x%zx>", (size_t)c);
        return b;
    }
    std::string topList(const std::unordered_map<ClassID, size_t>& m) const {
        std::vector<std::pair<size_t, ClassID>> v;
        for (auto& e : m) v.push_back({e.second, e.first});
        std::sort(v.rbegin(), v.rend());
        std::string s;
        for (size_t i = 0; i < v.size() && i < 4; ++i) s += " " + cachedName(v[i].second) + "=" + std::to_string(v[i].first);
        return s.empty() ? " -" : s;
    }

    // Called only from GarbageCollectionFinished.
    std::string name(ClassID cls, int depth) {
        if (cls == 0) return "<unloading>";
        auto it = names_.find(cls);
        if (it != names_.end()) return it->second;
        if (depth > 3) return cachedName(cls);
        std::string out;
        CorElementType et = 0;
        ClassID elem = 0;
        ULONG rank = 0;
        if (info_->IsArrayClass(cls, &et, &elem, &rank) == S_OK) {
            out = elem != 0 ? name(elem, depth + 1) : "elem" + std::to_string(et);
            out += "[" + std::string(rank > 1 ? rank - 1 : 0, ',') + "]";
            return names_[cls] = out;
        }
        ModuleID mod = 0;
        mdTypeDef td = 0;
        ClassID parent = 0;
        ULONG32 nArgs = 0;
        if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, 0, &nArgs, nullptr))) return cachedName(cls);
        std::vector<ClassID> args(nArgs);
        if (nArgs > 0) {
            ULONG32 got = 0;
            if (failed(info_->GetClassIDInfo2(cls, &mod, &td, &parent, nArgs, &got, args.data())) || got > nArgs) args.clear();
        }
        IUnknown* unk = nullptr;
        if (info_->GetModuleMetaData(mod, ofRead, IID_IMetaDataImport, &unk) != S_OK || unk == nullptr) return cachedName(cls);
        auto* md = static_cast<IMetaDataImport*>(unk);
        out = typeDefName(md, td);
        mdTypeDef encl = 0;
        for (int n = 0; n < 4 && succeeded(md->GetNestedClassProps(td, &encl)) && encl != 0; ++n) {
            out = typeDefName(md, encl) + "+" + out;
            td = encl;
        }
        md->Release();
        if (!args.empty()) {
            out = out.substr(0, out.find('`')) + "<";
            for (size_t i = 0; i < args.size(); ++i) out += (i ? "," : "") + name(args[i], depth + 1);
            out += ">";
        }
        return names_[cls] = out;
    }
    static std::string typeDefName(IMetaDataImport* md, mdTypeDef td) {
        ULONG len = 0;
        DWORD flags = 0;
        mdToken ext = 0;
        if (failed(md->GetTypeDefProps(td, nullptr, 0, &len, &flags, &ext)) || len == 0) return "?";
        std::vector<WCHAR> buf(len + 1, 0);
        if (failed(md->GetTypeDefProps(td, buf.data(), len, &len, &flags, &ext))) return "?";
        return to_utf8(buf.data(), buf.size());
    }

    ICorProfilerInfo4* info_ = nullptr;
    std::mutex mu_;
    bool inGc_ = false, shutdown_ = false;
    unsigned gcs_ = 0;
    std::vector<Range> moves_;
    std::unordered_map<ObjectID, ClassID> cur_;
    std::unordered_map<ObjectID, Obj> live_;
    std::unordered_map<GCHandleID, Handle> handles_;
    std::unordered_map<UINT_PTR, ObjectID> handleRoots_;
    std::unordered_map<ClassID, size_t> handleHeld_, finalClasses_;
    std::unordered_map<ClassID, ClassHist> hist_;
    std::unordered_map<ClassID, std::string> names_;
    std::vector<ObjectID> queued_;
    size_t movedRanges_ = 0, survivingRanges_ = 0, liveObjects_ = 0, oldObjects_ = 0, idVerified_ = 0, idMismatch_ = 0;
    size_t rootKinds_[4] = {}, rootFlags_[4] = {}, nullRoots_ = 0;
    size_t handlesCreated_ = 0, handlesDestroyed_ = 0, handlesCreatedInGc_ = 0, handlesUnknown_ = 0;
    size_t handleRootMatches_ = 0, handleTargetsGone_ = 0;
    size_t finalQueued_ = 0, finalCritical_ = 0, finalDirect_ = 0, finalTranslated_ = 0, finalUnmatched_ = 0;
};

DOCFIX_DEFINE_PROFILER(LeakDetector)
