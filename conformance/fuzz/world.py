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

Every behaviour is a row of :data:`conformance.fuzz.behaviours.BEHAVIOURS` (issue 22): the world tags what it
does with its row (:meth:`World.does`) and asks before a choice only a document allows (:meth:`World.may`);
the ``observed`` world (the default) makes none of those, the ``documented`` world makes them too and tells
the fake runtime so first (a ``world`` command: its answers follow the same table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from clr_model.moved_refs import U64_MAX, RangeTable, to_v1
from conformance.fuzz.behaviours import DEFAULT_WORLD, WORLDS, allowed
from conformance.fuzz.names import AppType, Dictionary

__all__ = ["HEAP_MARK", "ClassInfo", "FunctionInfo", "GcPlan", "ModuleInfo", "World", "world_of"]

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
#: The ranges a MovedReferences2 batch holds on the bundled runtimes (the last one fewer).
BATCH_OBSERVED = 512


def world_of(commands: Sequence[Mapping[str, Any]]) -> str:
    """The world an example's commands were made in (a ``world`` command first, else the default)."""
    first = commands[0] if commands else {}
    name = first.get("name") if isinstance(first, Mapping) and first.get("op") == "world" else None
    return name if isinstance(name, str) and name in WORLDS else DEFAULT_WORLD


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
    delta0: int = 0  # 0, or k >= 2: every k-th block (never the first) is reported where it is (delta 0)


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
    #: which world (:data:`conformance.fuzz.behaviours.WORLDS`) this one is
    world: str = DEFAULT_WORLD
    #: the behaviours (their table ids) this world did
    used: set[str] = field(default_factory=set)
    #: the names it may draw besides invented ones (the profiler's strings, the app's metadata)
    dictionary: Dictionary = field(default_factory=Dictionary)
    #: the app's module (``--app``: the first module loaded), and its classes loaded: ClassID -> type
    app_module: int | None = None
    app_classes: dict[int, AppType] = field(default_factory=dict)
    #: the app's methods JIT-compiled (their MethodDef tokens: each is compiled once)
    app_methods: set[int] = field(default_factory=set)
    _next: int = 1

    def __post_init__(self) -> None:
        if not allowed("names.grow", self.world):  # checks the name too
            return
        self.commands.append({"op": "world", "name": self.world})  # the fake runtime's answers follow it

    # --- behaviours ------------------------------------------------------------------------------------

    def may(self, behaviour_id: str) -> bool:
        """Whether this world has behaviour ``behaviour_id`` (a choice a caller makes only when it does)."""
        return allowed(behaviour_id, self.world)

    def does(self, behaviour_id: str) -> None:
        """Tags a behaviour this world does (refused when its world does not have it)."""
        if not allowed(behaviour_id, self.world):
            raise ValueError(f"the {self.world} world has no behaviour {behaviour_id!r}")
        self.used.add(behaviour_id)

    # --- commands ------------------------------------------------------------------------------------

    def event(self, thread: int, name: str, **args: Any) -> None:
        if thread not in self.threads:  # every callback on a managed thread the runtime announced
            raise ValueError(f"{name} on {thread:#x}, not a live thread (ThreadCreated, not ThreadDestroyed)")
        self.does("thread.managed")
        self.commands.append({"op": "event", "thread": thread, "name": name, "args": args})
        self.events += 1

    def state(self, op: str, **fields: Any) -> None:
        self.commands.append({"op": op, **fields})

    def _id(self) -> int:
        self._next += 1
        return self._next

    # --- modules, classes, functions -------------------------------------------------------------------

    def load_module(self, thread: int, names: list[str], *, app: bool = False) -> int:
        """A module; ``app``: the app's own (its classes are the app's types, with their tokens)."""
        self.does("module.load")
        self._names(names, app)
        mid = MODULE_BASE + self._id() * 0x1000
        if app:
            self.does("names.app")
            self.app_module = mid
        self.event(thread, "ModuleLoadStarted", moduleId=mid)
        self.modules[mid] = ModuleInfo(mid, names)
        self.state("module", id=mid, base=mid + 0x10_0000, assembly=mid + 0x800, names=names)
        self.event(thread, "ModuleLoadFinished", moduleId=mid, hrStatus=0)
        self.event(thread, "ModuleAttachedToAssembly", moduleId=mid, AssemblyId=mid + 0x800)
        return mid

    def load_class(self, thread: int, module: int, names: list[str], app_type: AppType | None = None) -> int:
        """A class of ``module``; ``app_type``: the app's type (in the app's module, with its TypeDef
        token; loaded once)."""
        self.does("class.load")
        self._names(names, app_type is not None)
        k = self._id()
        cid = CLASS_BASE + k * 0x100
        token = 0x0200_0000 + k
        if app_type is not None:
            if self.app_module is None or app_type in self.app_classes.values():
                raise ValueError(f"{app_type.name}: no app module, or loaded already")
            self.does("names.app")
            module, token = self.app_module, app_type.token
            self.app_classes[cid] = app_type
        self.event(thread, "ClassLoadStarted", classId=cid)
        self.classes[cid] = ClassInfo(cid, module, token, names)
        self.state("class", id=cid, module=module, token=token, parent=0, names=names)
        self.event(thread, "ClassLoadFinished", classId=cid, hrStatus=0)
        return cid

    def jit(self, thread: int, cls: int, names: list[str], size: int, token: int | None = None,
            il: tuple[int, bytes] | None = None) -> int:
        """A method of ``cls`` JIT-compiled; ``token``: an app method's MethodDef token (once each); ``il``:
        a real method body and its MethodDef token (:mod:`conformance.fuzz.ilpool`, behaviour ``il.body``),
        told before JITCompilationStarted, as a runtime knows the method it compiles (its token, its IL)."""
        self.does("jit")
        self._names(names, token is not None)
        k = self._id()
        fid = FUNCTION_BASE + k * 0x100
        start = CODE_BASE + k * 0x10_0000
        module = self.classes[cls].module
        if token is not None:
            if cls not in self.app_classes or token in self.app_methods:
                raise ValueError(f"method {token:#x}: not of an app class, or compiled already")
            self.does("names.app")
            self.app_methods.add(token)
        elif il is not None:
            token = il[0]
        else:
            token = 0x0600_0000 + k
        if il is not None:
            self.does("il.body")
            self.state("function", id=fid, **{"class": cls}, module=module, token=token, start=0, size=0,
                       names=names, il=il[1].hex(), il_from=self.dictionary.il_from)
        self.event(thread, "JITCompilationStarted", functionId=fid, fIsSafeToBlock=1)
        self.functions[fid] = FunctionInfo(fid, cls, module, token, start, size, names)
        self.state("function", id=fid, **{"class": cls}, module=module, token=token, start=start, size=size,
                   names=names)
        self.event(thread, "JITCompilationFinished", functionId=fid, hrStatus=0, fIsSafeToBlock=1)
        return fid

    def _names(self, names: list[str], app: bool = False) -> None:
        """Tags the names' behaviours (an app's names are its own, whatever their characters)."""
        if app:
            return
        self.does("names.ascii" if all(c.isascii() for n in names for c in n) else "names.unicode")
        if len(set(names)) > 1:
            self.does("names.grow")

    # --- threads and stacks ------------------------------------------------------------------------------

    def create_thread(self) -> int:
        self.does("thread.create")
        tid = THREAD_BASE + self._id() * 0x1000
        self.threads[tid] = []
        self.state("thread", id=tid)
        self.event(tid, "ThreadCreated", threadId=tid)
        self.event(tid, "ThreadAssignedToOSThread", managedThreadId=tid, osThreadId=0)
        return tid

    def destroy_thread(self, tid: int) -> None:
        self.does("thread.destroy")
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
        if any(fid == 0 for fid, _ in frames):
            self.does("stack.native-runs")
        self.threads[tid] = frames
        self.state("stack", thread=tid, frames=[list(f) for f in frames])

    def exception(self, tid: int, frames: list[tuple[int, int]], catcher: int, cls: int) -> None:
        """An exception thrown at the leaf of ``frames`` and caught in managed frame ``catcher``, with no run
        of unmanaged frames at or below it (an exception unhandled, or crossing unmanaged frames, ends a
        runtime's process on Linux: no runtime goes on after one)."""
        if not frames[catcher][0] or any(fid == 0 for fid, _ in frames[:catcher]):
            raise ValueError(f"exception caught in frame {catcher}: not managed, or unmanaged frames below")
        self.does("exception.caught")
        self.set_stack(tid, frames)
        oid = self.allocate(tid, cls, [24])[0]
        self.event(tid, "ExceptionThrown", thrownObjectId=oid)
        for fid, _ in frames[: catcher + 1]:
            self.event(tid, "ExceptionSearchFunctionEnter", functionId=fid)
            self.event(tid, "ExceptionSearchFunctionLeave")
        catch_fn = frames[catcher][0]
        self.event(tid, "ExceptionSearchCatcherFound", functionId=catch_fn)
        for k, (fid, _) in enumerate(frames[:catcher]):
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
        self.does("alloc")
        if any(s >= 2**32 for s in sizes):
            self.does("alloc.huge")
        if gaps and any(g >= 2**32 for g in gaps):
            self.does("alloc.far")
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
        self.does("gc.plain")
        self._gc_begin(tid, generations)
        self._gc_end(tid)

    def compacting_gc(self, tid: int, generations: list[int], plan: GcPlan) -> RangeTable:
        """A compacting GC by ``plan``: MovedReferences2 batches (each followed by its MovedReferences),
        the new heap, GarbageCollectionFinished. Returns the whole table (validated by the model)."""
        ordered = sorted(self.heap.items())
        blocks: list[list[tuple[int, int]]] = []  # runs of moved, contiguous objects: (ObjectID, size)
        previous_moved = False
        previous_end = -1
        for k, (oid, (_, size)) in enumerate(ordered):
            moved = plan.moved[k] if k < len(plan.moved) else False
            if moved:
                split = plan.split[k - 1] if 0 < k <= len(plan.split) else True
                # a range is a block of contiguous live objects: free space between two ends it
                if not previous_moved or split or oid != previous_end:
                    blocks.append([])
                blocks[-1].append((oid, size))
            previous_moved = moved
            previous_end = oid + size
        olds = [b[0][0] for b in blocks]
        lengths = [b[-1][0] + b[-1][1] - b[0][0] for b in blocks]
        if plan.top and not self.may("gc.top"):
            plan = replace(plan, top=False)
        if plan.batch != BATCH_OBSERVED and not self.may("gc.batch-small"):
            plan = replace(plan, batch=BATCH_OBSERVED)
        k = plan.delta0
        kept = [k >= 2 and i % k == k - 1 for i in range(len(blocks))]
        placed = self._place([b for b, keep in zip(blocks, kept, strict=True) if not keep],
                             [ln for ln, keep in zip(lengths, kept, strict=True) if not keep], plan)
        news: list[int] | None = None
        if placed is not None:
            moving = iter(placed)
            news = [old if keep else next(moving) for old, keep in zip(olds, kept, strict=True)]
        if news is None:
            olds, lengths, news, blocks = [], [], [], []
        if not blocks:  # nothing moves: a plain GC (the observed world has none: every live GC moved some)
            if self.may("gc.plain"):
                self.gc(tid, generations)
            return RangeTable([], [], [])
        if plan.top and blocks:
            self.does("gc.top")
        self.does("gc.compact")
        self._tag_layout(olds, news, lengths, plan)
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
        for at in range(0, n, batch):
            idx = order[at : at + batch]
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

    def _tag_layout(self, olds: list[int], news: list[int], lengths: list[int], plan: GcPlan) -> None:
        """Tags what a compacting GC's ranges do (the rows of the table they rest on)."""
        n = len(olds)
        if n > plan.batch:
            self.does("gc.batches")
        self.does("gc.batch-512" if plan.batch == BATCH_OBSERVED else "gc.batch-small")
        if any(o == w for o, w in zip(olds, news, strict=True)):
            self.does("gc.delta0")
        if plan.reverse or plan.array_rotation % max(n, 1):
            self.does("gc.order")
        left = sorted((o, o + ln) for o, w, ln in zip(olds, news, lengths, strict=True) if o != w)
        for w, ln in zip(news, lengths, strict=True):
            if any(lo < w + ln and w < hi for lo, hi in left):
                self.does("gc.reuse")
                break

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
