"""The world the fuzzer invents, and the commands that tell the fake runtime about it and what to call.

The world is the model's: modules, classes and functions (with code ranges), fake threads with their
stacks, and the heap (ObjectID -> class, size). Each change is computed here and sent to the fake runtime
as state before the callback that announces it, so the fake runtime answers every ICorProfilerInfo call
from that state without asking back. Compacting GCs move objects by range tables the model validates
(:class:`clr_model.moved_refs.RangeTable`: MR2-03/06/07/14/15) and the heap after the GC is the model's
remapping (MR2-08); objects in no range stay where they are (MR2-16 is thereby no question: both of its
readings give the same ObjectID).

Every heap change has a version (:attr:`World.heap_version`, in its ``objects`` or ``heap`` command): the
fake runtime marks the trace with the version in force (``fuzz.heap``), so a judge knows from the commands
which ObjectIDs were live at each inspection (:func:`conformance.fuzz.judge.heaps_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clr_model.moved_refs import U64_MAX, RangeTable, to_v1

__all__ = ["HEAP_MARK", "ClassInfo", "FunctionInfo", "GcPlan", "ModuleInfo", "World"]

#: The mark the fake runtime writes when the heap changes (its ``version``: :attr:`World.heap_version`).
HEAP_MARK = "fuzz.heap"
#: Where invented things live (far from each other so no id is two things).
MODULE_BASE = 0x7F10_0000_0000
CLASS_BASE = 0x7F20_0000_0000
FUNCTION_BASE = 0x7F30_0000_0000
CODE_BASE = 0x7F40_0000_0000
THREAD_BASE = 0x7F50_0000_0000
NATIVE_CODE = 0x5555_0000_0000
#: The generations a GC reports (gen0, gen1, gen2, LOH, POH on 8.0).
GENERATIONS = 5
COR_PRF_SUSPEND_FOR_GC = 1
COR_PRF_GC_INDUCED = 1


@dataclass
class ModuleInfo:
    id: int
    names: list[str]


@dataclass
class ClassInfo:
    id: int
    module: int
    token: int
    names: list[str]


@dataclass
class FunctionInfo:
    id: int
    cls: int
    module: int
    token: int
    start: int
    size: int
    names: list[str]


@dataclass
class GcPlan:
    """How a compacting GC moves the heap: which objects move, where blocks split, where they go."""

    moved: list[bool]  # per object in address order
    split: list[bool]  # per pair of neighbours in address order: a new block starts at the second
    gaps: list[int]  # per block, before it in new space (0: adjacent to the one before)
    top: bool  # new blocks end right below 2**64 (else they start at ``base_offset`` in free space)
    base_offset: int
    reverse: bool  # new space in the opposite order
    array_rotation: int  # the arrays' order: rotated by this much
    batch: int  # ranges per MovedReferences2 call


@dataclass
class World:
    """One example's world and the commands sent for it, in order."""

    commands: list[dict[str, Any]] = field(default_factory=list)
    modules: dict[int, ModuleInfo] = field(default_factory=dict)
    classes: dict[int, ClassInfo] = field(default_factory=dict)
    functions: dict[int, FunctionInfo] = field(default_factory=dict)
    threads: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # ThreadID -> stack, leaf first
    heap: dict[int, tuple[int, int]] = field(default_factory=dict)  # ObjectID -> (class, size)
    #: the heap's version (0: empty at the start); each ``objects`` and ``heap`` command makes a new one
    heap_version: int = 0
    events: int = 0
    _next: int = 1

    # --- commands ------------------------------------------------------------------------------------

    def event(self, thread: int, name: str, **args: Any) -> None:
        self.commands.append({"op": "event", "thread": thread, "name": name, "args": args})
        self.events += 1

    def state(self, op: str, **fields: Any) -> None:
        self.commands.append({"op": op, **fields})

    def _id(self) -> int:
        self._next += 1
        return self._next

    # --- modules, classes, functions -------------------------------------------------------------------

    def load_module(self, thread: int, names: list[str]) -> int:
        mid = MODULE_BASE + self._id() * 0x1000
        self.event(thread, "ModuleLoadStarted", moduleId=mid)
        self.modules[mid] = ModuleInfo(mid, names)
        self.state("module", id=mid, base=mid + 0x10_0000, assembly=mid + 0x800, names=names)
        self.event(thread, "ModuleLoadFinished", moduleId=mid, hrStatus=0)
        self.event(thread, "ModuleAttachedToAssembly", moduleId=mid, AssemblyId=mid + 0x800)
        return mid

    def load_class(self, thread: int, module: int, names: list[str]) -> int:
        k = self._id()
        cid = CLASS_BASE + k * 0x100
        self.event(thread, "ClassLoadStarted", classId=cid)
        token = 0x0200_0000 + k
        self.classes[cid] = ClassInfo(cid, module, token, names)
        self.state("class", id=cid, module=module, token=token, parent=0, names=names)
        self.event(thread, "ClassLoadFinished", classId=cid, hrStatus=0)
        return cid

    def jit(self, thread: int, cls: int, names: list[str], size: int) -> int:
        k = self._id()
        fid = FUNCTION_BASE + k * 0x100
        start = CODE_BASE + k * 0x10_0000
        module = self.classes[cls].module
        self.event(thread, "JITCompilationStarted", functionId=fid, fIsSafeToBlock=1)
        token = 0x0600_0000 + k
        self.functions[fid] = FunctionInfo(fid, cls, module, token, start, size, names)
        self.state("function", id=fid, **{"class": cls}, module=module, token=token, start=start, size=size,
                   names=names)
        self.event(thread, "JITCompilationFinished", functionId=fid, hrStatus=0, fIsSafeToBlock=1)
        return fid

    # --- threads and stacks ------------------------------------------------------------------------------

    def create_thread(self) -> int:
        tid = THREAD_BASE + self._id() * 0x1000
        self.threads[tid] = []
        self.state("thread", id=tid)
        self.event(tid, "ThreadCreated", threadId=tid)
        self.event(tid, "ThreadAssignedToOSThread", managedThreadId=tid, osThreadId=0)
        return tid

    def destroy_thread(self, tid: int) -> None:
        self.event(tid, "ThreadDestroyed", threadId=tid)
        del self.threads[tid]
        self.state("thread_gone", id=tid)

    def frames_for(self, shape: list[int | None], offsets: list[int]) -> list[tuple[int, int]]:
        """A stack, leaf first: ``None`` is a run of native code (FunctionID 0), an int indexes the
        JIT-compiled functions; each frame's IP is inside its function's code at ``offsets[i]``."""
        funcs = sorted(self.functions)
        frames: list[tuple[int, int]] = []
        for i, pick in enumerate(shape):
            off = offsets[i] if i < len(offsets) else 0
            if pick is None or not funcs:
                frames.append((0, NATIVE_CODE + 0x1000 * i + 0x10))
            else:
                f = self.functions[funcs[pick % len(funcs)]]
                frames.append((f.id, f.start + off % f.size))
        return frames

    def set_stack(self, tid: int, frames: list[tuple[int, int]]) -> None:
        self.threads[tid] = frames
        self.state("stack", thread=tid, frames=[list(f) for f in frames])

    def exception(self, tid: int, frames: list[tuple[int, int]], catcher: int | None, cls: int) -> None:
        """An exception thrown at the leaf of ``frames`` and caught in frame ``catcher`` (None: no managed
        frame catches it; it goes on unhandled past what the runtime reports)."""
        self.set_stack(tid, frames)
        oid = self.allocate(tid, cls, [24])[0]
        self.event(tid, "ExceptionThrown", thrownObjectId=oid)
        last = len(frames) if catcher is None else catcher + 1
        for fid, _ in frames[:last]:
            if fid:
                self.event(tid, "ExceptionSearchFunctionEnter", functionId=fid)
                self.event(tid, "ExceptionSearchFunctionLeave")
        if catcher is None:
            return
        catch_fn = frames[catcher][0]
        self.event(tid, "ExceptionSearchCatcherFound", functionId=catch_fn)
        for k, (fid, _) in enumerate(frames[:catcher]):
            if fid:
                self.event(tid, "ExceptionUnwindFunctionEnter", functionId=fid)
                self.set_stack(tid, frames[k + 1 :])
                self.event(tid, "ExceptionUnwindFunctionLeave")
        self.set_stack(tid, frames[catcher:])
        self.event(tid, "ExceptionCatcherEnter", functionId=catch_fn, objectId=oid)
        self.event(tid, "ExceptionCatcherLeave")

    # --- the heap ----------------------------------------------------------------------------------------

    def _free_after(self, size: int, gap: int, top_id: int | None) -> int | None:
        """An address for a new object of ``size``: ``gap`` after the highest object (``top_id``, None for
        an empty heap), else the first hole."""
        if top_id is None:
            at = 0x10000 + gap
            return at if at + size <= U64_MAX else 0x10000
        at = top_id + self.heap[top_id][1] + gap
        if at + size <= U64_MAX:
            return at
        prev_end = 0x10000
        for oid, (_, osize) in sorted(self.heap.items()):
            if oid - prev_end >= size:
                return prev_end
            prev_end = oid + osize
        return None

    def _new_heap_version(self) -> int:
        self.heap_version += 1
        return self.heap_version

    def allocate(self, tid: int, cls: int, sizes: list[int], gaps: list[int] | None = None) -> list[int]:
        """Objects of class ``cls``, placed by the model; ObjectAllocated for each on thread ``tid``."""
        made: list[tuple[int, int]] = []
        top = max(self.heap) if self.heap else None  # the highest object, kept up to date below
        for k, size in enumerate(sizes):
            at = self._free_after(size, (gaps[k] if gaps and k < len(gaps) else 0), top)
            if at is None:
                break
            self.heap[at] = (cls, size)
            made.append((at, size))
            if top is None or at > top:
                top = at
        version = self._new_heap_version()
        self.state("objects", version=version, objects=[[oid, cls, size] for oid, size in made])
        for oid, _ in made:
            self.event(tid, "ObjectAllocated", objectId=oid, classId=cls)
        return [oid for oid, _ in made]

    def _gc_begin(self, tid: int, generations: list[int]) -> None:
        self.event(tid, "RuntimeSuspendStarted", suspendReason=COR_PRF_SUSPEND_FOR_GC)
        self.event(tid, "RuntimeSuspendFinished")
        self.event(tid, "GarbageCollectionStarted", generationCollected=generations,
                   reason=COR_PRF_GC_INDUCED)

    def _gc_end(self, tid: int) -> None:
        self.event(tid, "GarbageCollectionFinished")
        self.event(tid, "RuntimeResumeStarted")
        self.event(tid, "RuntimeResumeFinished")

    def gc(self, tid: int, generations: list[int]) -> None:
        """A GC that moves nothing."""
        self._gc_begin(tid, generations)
        self._gc_end(tid)

    def compacting_gc(self, tid: int, generations: list[int], plan: GcPlan) -> RangeTable:
        """A compacting GC by ``plan``: MovedReferences2 batches (each followed by its MovedReferences),
        the new heap, GarbageCollectionFinished. Returns the whole table (validated by the model)."""
        ordered = sorted(self.heap.items())
        blocks: list[list[tuple[int, int]]] = []  # runs of moved objects: (ObjectID, size)
        previous_moved = False
        for k, (oid, (_, size)) in enumerate(ordered):
            moved = plan.moved[k] if k < len(plan.moved) else False
            if moved:
                split = plan.split[k - 1] if 0 < k <= len(plan.split) else True
                if not previous_moved or split:
                    blocks.append([])
                blocks[-1].append((oid, size))
            previous_moved = moved
        olds = [b[0][0] for b in blocks]
        lengths = [b[-1][0] + b[-1][1] - b[0][0] for b in blocks]
        news = self._place(blocks, lengths, plan)
        if news is None:
            olds, lengths, news, blocks = [], [], [], []
        table = RangeTable(olds, news, lengths)  # the model refuses a table the contract does not allow
        moves: dict[int, int] = {}
        for block, new in zip(blocks, news, strict=True):
            for oid, _ in block:
                moves[oid] = new + (oid - block[0][0])
        heap = {oid: v for oid, v in self.heap.items() if oid not in moves}
        for old, new in moves.items():
            heap[new] = self.heap[old]
        self.heap = heap
        n = len(olds)
        rot = plan.array_rotation % n if n else 0
        order = list(range(rot, n)) + list(range(rot))
        v1 = to_v1(table).lengths  # MovedReferences' ULONG lengths (per range: the batches take their own)
        self._gc_begin(tid, generations)
        batch = max(1, plan.batch)
        first = True
        for at in range(0, n, batch) if n else [0]:
            idx = order[at : at + batch]
            if not idx and not first:
                break
            first = False
            o = [olds[i] for i in idx]
            w = [news[i] for i in idx]
            ln = [lengths[i] for i in idx]
            self.event(tid, "MovedReferences2", cMovedObjectIDRanges=len(idx), oldObjectIDRangeStart=o,
                       newObjectIDRangeStart=w, cObjectIDRangeLength=ln)
            self.event(tid, "MovedReferences", cMovedObjectIDRanges=len(idx), oldObjectIDRangeStart=o,
                       newObjectIDRangeStart=w, cObjectIDRangeLength=[int(v1[i]) for i in idx])
        version = self._new_heap_version()
        objects = [[oid, c, s] for oid, (c, s) in sorted(self.heap.items())]
        self.state("heap", version=version, objects=objects)
        self._gc_end(tid)
        return table

    def _place(
        self, blocks: list[list[tuple[int, int]]], lengths: list[int], plan: GcPlan
    ) -> list[int] | None:
        """New starts for the blocks, clear of the objects that stay (None: they do not fit anywhere)."""
        if not blocks:
            return []
        moved = {oid for b in blocks for oid, _ in b}
        staying = sorted((oid, oid + size) for oid, (_, size) in self.heap.items() if oid not in moved)
        order = list(range(len(blocks)))[:: -1 if plan.reverse else 1]
        for gaps in (plan.gaps, []):
            sizes = [lengths[i] for i in order]
            gap_list = [gaps[k] if k < len(gaps) else 0 for k in range(len(order))]
            total = sum(sizes) + sum(gap_list)
            holes: list[tuple[int, int]] = []
            at = 0x10000
            for lo, hi in staying:
                if lo > at:
                    holes.append((at, lo))
                at = max(at, hi)
            if at < U64_MAX:
                holes.append((at, U64_MAX))
            fits = [h for h in holes if h[1] - h[0] >= total]
            if not fits:
                continue
            if plan.top:
                lo, hi = fits[-1]
                base = hi - total
            else:
                lo, hi = fits[0]
                base = lo + min(plan.base_offset, hi - lo - total)
            starts: dict[int, int] = {}
            cursor = base
            for k, i in enumerate(order):
                cursor += gap_list[k]
                starts[i] = cursor
                cursor += sizes[k]
            return [starts[i] for i in range(len(blocks))]
        return None
