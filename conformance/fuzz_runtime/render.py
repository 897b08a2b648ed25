"""A program of the grammar (:mod:`.shapes`) as C#: one ``app.cs`` compiled with ``scenarios/_common``.

A stack program sends the marks of the ``stack-walks`` scenario (``expect.throw``, ``walk-now``,
``walk-reverse``), each with its own reflection stack (``{"stack", "above", "nativeAfter"}``: the frames
from ``System.Diagnostics.StackTrace`` leaf first, the probe's two frames above a mark, and the index after
which native code called back into managed code, read from the same frames), so the ``stack-walks`` judges
read its trace unchanged. A heap program sends the marks of ``gc-moves`` (``expect.objects``, ``ids.before``,
``ids.after``). Its plan is that scenario's ``plan.json``, copied verbatim.

The text depends on the program only (no clock, no random): the same program is the same file, so the
scenario compile cache (keyed by content) makes a repeated program free.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.core.fsio import atomic_write_text
from conformance.core.paths import SCENARIOS_DIR
from conformance.core.scenarios import APP_FILE, PLAN_FILE
from conformance.fuzz_runtime.shapes import GcKind, HeapProgram, Program, StackProgram, Step

__all__ = ["FAMILY_SCENARIO", "Rendered", "family_plan_text", "program_id", "render", "write_scenario"]

#: the scenario whose plan and judges a family's programs share (the registered experiment of that name)
FAMILY_SCENARIO: dict[str, str] = {StackProgram.family: "stack-walks", HeapProgram.family: "gc-moves"}

_NOINLINE = "[MethodImpl(MethodImplOptions.NoInlining)]"
#: mcs refuses MethodImplOptions.AggressiveOptimization (by name and by value), so optimised code comes from
#: a hot loop before the call: 3.1 jits a method with a loop fully optimised at once (no quick JIT for loops),
#: 8.0 starts it at tier 0 and moves to an optimised on-stack-replacement (OSR) version inside the loop
_HOT_LOOP = ("int hot = 0;", "for (int i = 0; i < 100000; i++)", "    hot += i & 1;")


@dataclass(frozen=True)
class Rendered:
    """A program's scenario files."""

    program: Program
    app_cs: str
    plan_json: str

    @property
    def id(self) -> str:
        return program_id(self.app_cs, self.plan_json)


def program_id(app_cs: str, plan_json: str) -> str:
    """The content hash naming a program (its folder, its findings)."""
    digest = hashlib.sha256()
    for part in (app_cs, plan_json):
        data = part.encode()
        digest.update(f"{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def family_plan_text(family: str, scenarios_root: Path = SCENARIOS_DIR) -> str:
    """The ``plan.json`` text of the family's scenario (symbolic names, as written there)."""
    return (scenarios_root / FAMILY_SCENARIO[family] / PLAN_FILE).read_text(encoding="utf-8")


def render(program: Program, scenarios_root: Path = SCENARIOS_DIR) -> Rendered:
    text = _render_stack(program) if isinstance(program, StackProgram) else _render_heap(program)
    return Rendered(program, text, family_plan_text(program.family, scenarios_root))


def write_scenario(rendered: Rendered, folder: Path, extra: dict[str, str] | None = None) -> Path:
    """Write the program as a ready scenario folder (``app.cs``, ``plan.json``, any ``extra`` files)."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / APP_FILE, rendered.app_cs)
    atomic_write_text(folder / PLAN_FILE, rendered.plan_json)
    for name, text in (extra or {}).items():
        atomic_write_text(folder / name, text)
    return folder


# ----------------------------------------------------------------------------------------------------------
# C# text helpers


class _Code:
    """Lines of C# with indentation."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, indent: int, *lines: str) -> None:
        for line in lines:
            self.lines.append(("    " * indent + line) if line else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _comment(lines: Sequence[str]) -> list[str]:
    return [f"// {line}" if line else "//" for line in lines]


# ----------------------------------------------------------------------------------------------------------
# Stack programs


_STACK_SUPPORT = """\
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void Callback();

    // The program's own view of its stack at a mark (the payload the stack-walks judges read).
    public static class Truth
    {
        static string FrameJson(MethodBase method)
        {
            var frame = new JsonObject();
            if (method == null)
                return frame.Add("token", 0).Raw("type", "null").Raw("method", "null").Raw("module", "null")
                    .Add("pinvoke", false).ToString();
            int token = 0;
            string module = null;
            try { token = method.MetadataToken; } catch (InvalidOperationException) { }
            try { module = method.Module.Name; } catch (InvalidOperationException) { }
            return frame.Add("token", token)
                .Add("type", method.DeclaringType == null ? null : method.DeclaringType.FullName)
                .Add("method", method.Name)
                .Add("module", module)
                .Add("pinvoke", (method.Attributes & MethodAttributes.PinvokeImpl) != 0)
                .ToString();
        }

        // {"stack": the caller's frames leaf first, "above": the probe's frames above a mark (Probe.Mark and
        //  its P/Invoke target, leaf first), "nativeAfter": the first index of a managed frame followed by a
        //  P/Invoke frame (native code calling back into managed code), or -1}
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static string Payload()
        {
            return Build(2, false);
        }

        // Payload() sent from an exception filter: the caller (frame 0) is the filter funclet, which the
        // runtime's first-pass exception dispatch (native code, not shown by StackTrace) called; the payload
        // says so as {"dispatched": [0]}
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static string PayloadInFilter()
        {
            return Build(2, true);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static string Build(int skip, bool inFilter)
        {
            var trace = new StackTrace(skip, false);
            var stack = new JsonArray();
            int nativeAfter = -1;
            bool previousManaged = false;
            for (int i = 0; i < trace.FrameCount; i++)
            {
                MethodBase method = trace.GetFrame(i).GetMethod();
                bool pinvoke = method != null && (method.Attributes & MethodAttributes.PinvokeImpl) != 0;
                if (pinvoke && previousManaged && nativeAfter < 0)
                    nativeAfter = i - 1;
                previousManaged = !pinvoke;
                stack.Raw(FrameJson(method));
            }
            var above = new JsonArray();
            const BindingFlags hidden = BindingFlags.NonPublic | BindingFlags.Static;
            above.Raw(FrameJson(typeof(Probe).GetMethod("profharness_mark", hidden)));
            var markArgs = new Type[] { typeof(string), typeof(string) };
            above.Raw(FrameJson(typeof(Probe).GetMethod("Mark", markArgs)));
            var dispatched = new JsonArray();
            if (inFilter)
                dispatched.Raw("0");
            return new JsonObject().Raw("stack", stack.ToString()).Raw("above", above.ToString())
                .Add("nativeAfter", nativeAfter).Raw("dispatched", dispatched.ToString()).ToString();
        }
    }

    // DynamicMethods (System.Reflection.Emit) that call a static int(int) method, with or without `tail.`.
    public static class Emitted
    {
        public static Func<int, int> Hop(string name, string target, bool tail)
        {
            MethodInfo next = typeof(Program).GetMethod(target, BindingFlags.Public | BindingFlags.Static);
            var args = new Type[] { typeof(int) };
            var method = new DynamicMethod(name, typeof(int), args, typeof(Program).Module, true);
            ILGenerator il = method.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            if (tail)
                il.Emit(OpCodes.Tailcall);
            il.Emit(OpCodes.Call, next);
            il.Emit(OpCodes.Ret);
            return (Func<int, int>)method.CreateDelegate(typeof(Func<int, int>));
        }
    }
"""


def _step_methods(code: _Code, name: str, step: Step, nxt: str) -> None:
    """Step ``step`` as method ``name`` (static int(int)) calling ``nxt`` (a static int(int) of Program),
    plus its helper members."""
    call = f"{nxt}(d + 1)"
    kind = step.kind
    if kind in ("plain", "optimized", "try-finally", "try-catch"):
        body = {
            "plain": [f"return {call} + 1;"],
            "optimized": [*_HOT_LOOP, f"return {call} + (hot & 1) + 1;"],
            "try-finally": ["try", "{", f"    return {call} + 1;", "}", "finally", "{", "    sink++;", "}"],
            "try-catch": [
                "try", "{", f"    return {call} + 1;", "}",
                "catch (ArgumentException)", "{", "    return -1;", "}",
            ],
        }[kind]  # fmt: skip
        code.add(2, _NOINLINE, f"public static int {name}(int d)", "{")
        code.add(3, *body)
        code.add(2, "}", "")
    elif kind == "inlined":
        code.add(2, _NOINLINE, f"public static int {name}(int d)", "{")
        code.add(3, *_HOT_LOOP, f"return {name}_In(d + 1) + (hot & 1) + 1;")
        code.add(2, "}")
        code.add(
            2, "[MethodImpl(MethodImplOptions.AggressiveInlining)]", f"public static int {name}_In(int d)"
        )
        code.add(2, "{", f"    return {call} + 1;", "}", "")
    elif kind in ("generic-ref", "generic-value"):
        args = "<string>.Go<object>" if kind == "generic-ref" else "<int>.Go<long>"
        code.add(
            2, _NOINLINE, f"public static int {name}(int d)", "{", f"    return {name}_G{args}(d + 1) + 1;"
        )
        code.add(2, "}", f"public sealed class {name}_G<T>", "{", f"    {_NOINLINE}")
        code.add(
            2, "    public static int Go<U>(int d)", "    {", f"        return {call} + 1;", "    }", "}", ""
        )
    elif kind == "virtual":
        code.add(
            2, _NOINLINE, f"public static int {name}(int d)", "{", f"    {name}_Base b = new {name}_Impl();"
        )
        code.add(2, "    return b.Go(d + 1) + 1;", "}")
        code.add(2, f"public abstract class {name}_Base", "{", "    public abstract int Go(int d);", "}")
        code.add(2, f"public sealed class {name}_Impl : {name}_Base", "{", f"    {_NOINLINE}")
        code.add(
            2, "    public override int Go(int d)", "    {", f"        return {call} + 1;", "    }", "}", ""
        )
    elif kind in ("interface", "struct"):
        via = (
            f"{name}_Face i = new {name}_Value();"
            if kind == "interface"
            else f"{name}_Value i = new {name}_Value();"
        )
        code.add(
            2, _NOINLINE, f"public static int {name}(int d)", "{", f"    {via}", "    return i.Go(d + 1) + 1;"
        )
        code.add(2, "}")
        if kind == "interface":
            code.add(2, f"public interface {name}_Face", "{", "    int Go(int d);", "}")
        base = f" : {name}_Face" if kind == "interface" else ""
        code.add(2, f"public struct {name}_Value{base}", "{", "    public int Extra;", f"    {_NOINLINE}")
        code.add(
            2, "    public int Go(int d)", "    {", f"        return {call} + Extra + 1;", "    }", "}", ""
        )
    elif kind == "delegate":
        code.add(
            2, f"static Func<int, int> {name}_Delegate;", _NOINLINE, f"public static int {name}(int d)", "{"
        )
        code.add(3, f"if ({name}_Delegate == null)", f"    {name}_Delegate = {name}_Target;")
        code.add(3, f"return {name}_Delegate(d + 1) + 1;")
        code.add(
            2,
            "}",
            _NOINLINE,
            f"public static int {name}_Target(int d)",
            "{",
            f"    return {call} + 1;",
            "}",
            "",
        )
    elif kind == "lambda":
        code.add(2, _NOINLINE, f"public static int {name}(int d)", "{", "    int k = 1;")
        code.add(2, f"    Func<int, int> f = x => {nxt}(x + k) + 1;", "    return f(d) + 1;", "}", "")
    elif kind == "recursion":
        code.add(2, f"static int {name}_Frames;", _NOINLINE, f"public static int {name}(int d)", "{")
        code.add(
            3, f"if (++{name}_Frames < {step.depth})", f"    return {name}(d + 1) + 1;", f"return {call} + 1;"
        )
        code.add(2, "}", "")
    elif kind in ("dynamic-call", "dynamic-tail"):
        tail = "true" if kind == "dynamic-tail" else "false"
        code.add(
            2, f"static Func<int, int> {name}_Emitted;", _NOINLINE, f"public static int {name}(int d)", "{"
        )
        code.add(3, f"if ({name}_Emitted == null)")
        code.add(3, f'    {name}_Emitted = Emitted.Hop("{name}_Hop", "{nxt}", {tail});')
        code.add(3, f"return {name}_Emitted(d + 1) + 1;")
        code.add(2, "}", "")
    elif kind == "reverse":
        code.add(2, f"static Callback {name}_Callback;", f"static int {name}_Arg, {name}_Result;")
        code.add(2, _NOINLINE, f"public static int {name}(int d)", "{", f"    {name}_Arg = d + 1;")
        code.add(3, f"{name}_Callback = new Callback({name}_Callee);")
        code.add(3, f"int rc = profharness_call_back({name}_Callback);", f"GC.KeepAlive({name}_Callback);")
        code.add(3, f"return rc == 0 ? {name}_Result + 1 : -1000000;")
        code.add(2, "}", _NOINLINE, f"public static void {name}_Callee()", "{")
        code.add(3, f"{name}_Result = {nxt}({name}_Arg);")
        code.add(2, "}", "")
    elif kind == "async":
        code.add(
            2,
            _NOINLINE,
            f"public static int {name}(int d)",
            "{",
            f"    return {name}_Async(d + 1).Result + 1;",
        )
        code.add(
            2,
            "}",
            f"public static async Task<int> {name}_Async(int d)",
            "{",
            f"    return {call} + 1;",
            "}",
            "",
        )
    else:  # pragma: no cover - STEP_KINDS is closed
        raise ValueError(f"no renderer for step {kind!r}")


def _chain(code: _Code, prefix: str, chain: Sequence[Step], terminal: str) -> str:
    """The chain's methods ``{prefix}0``, ``{prefix}1``, ... ending in ``terminal``; returns the entry."""
    names = [f"{prefix}{i}" for i in range(len(chain))]
    for i, step in enumerate(chain):
        _step_methods(code, names[i], step, names[i + 1] if i + 1 < len(chain) else terminal)
    return names[0] if names else terminal


_THROW = 'throw new InvalidOperationException("fuzz-runtime: thrown at depth " + d);'


def _catcher(code: _Code, handler: str) -> None:
    code.add(2, "// The throw section's catcher: its callee Thrower sends expect.throw and throws.")
    code.add(2, _NOINLINE, "public static int Catcher(int d)", "{")
    if handler == "finally":
        code.add(3, "try", "{", "    try", "    {", "        return Thrower(d + 1);", "    }")
        code.add(3, "    finally", "    {", "        sink++;", "    }", "}")
    else:
        code.add(3, "try", "{", "    return Thrower(d + 1);", "}")
    when = " when (d >= 0)" if handler == "filter" else ""
    code.add(3, f"catch (InvalidOperationException){when}", "{", "    caught = true;", "    return d;", "}")
    code.add(2, "}", "")
    code.add(2, _NOINLINE, "public static int Thrower(int d)", "{")
    code.add(3, 'Probe.Mark("expect.throw", Truth.Payload());', _THROW)
    code.add(2, "}", "")


def _leaf(code: _Code, name: str, mark: str, context: str) -> None:
    truth = "Truth.PayloadInFilter()" if context == "filter" else "Truth.Payload()"
    send = f'Probe.Mark("{mark}", {truth})'
    code.add(2, _NOINLINE, f"public static int {name}(int d)", "{")
    if context == "plain":
        code.add(3, f"{send};")
    elif context == "catch":
        code.add(
            3, "try", "{", f"    {_THROW}", "}", "catch (InvalidOperationException)", "{", f"    {send};", "}"
        )
    elif context == "filter":
        code.add(
            3, "try", "{", f"    {_THROW}", "}", f"catch (InvalidOperationException) when ({send} != 12345)"
        )
        code.add(3, "{", "    sink++;", "}")
    elif context == "finally":
        code.add(3, "try", "{", "    sink++;", "}", "finally", "{", f"    {send};", "}")
    elif context == "finally-unwind":
        code.add(3, "try", "{", "    try", "    {", f"        {_THROW}", "    }", "    finally", "    {")
        code.add(
            3, f"        {send};", "    }", "}", "catch (InvalidOperationException)", "{", "    sink++;", "}"
        )
    else:  # pragma: no cover - LEAF_CONTEXTS is closed
        raise ValueError(f"no renderer for leaf context {context!r}")
    code.add(3, "return d;")
    code.add(2, "}", "")


def _render_stack(p: StackProgram) -> str:
    code = _Code()
    code.add(0, *_comment([
        "fuzz-runtime stack program (made by profharness fuzz-runtime, issue 12), judged as stack-walks.",
        f"Shape: {p.describe()}.",
        "Main runs the throw section first (Catcher catches what Thrower throws right after its mark",
        "expect.throw; the plan walks at the first ExceptionThrown), then the walk-now section (its leaf",
        "sends walk-now), then the reverse section (P/Invoke into profharness_call_back, whose callback",
        "chain sends walk-reverse). Each mark carries the program's own reflection stack. Exit 0 when",
        "Catcher caught.",
    ]))  # fmt: skip
    code.add(
        0,
        "using System;",
        "using System.Diagnostics;",
        "using System.Reflection;",
        "using System.Reflection.Emit;",
    )
    code.add(0, "using System.Runtime.CompilerServices;", "using System.Runtime.InteropServices;")
    code.add(0, "using System.Threading.Tasks;", "", "namespace ProfHarness.Fuzz", "{")
    code.lines.extend(_STACK_SUPPORT.rstrip("\n").splitlines())
    code.add(0, "")
    code.add(1, "public static class Program", "{")
    code.add(2, '[DllImport("profharness_probe", CallingConvention = CallingConvention.Cdecl)]')
    code.add(2, "static extern int profharness_call_back(Callback fn);", "")
    code.add(2, "static int sink;", "static bool caught;", "")
    throw_entry = _chain(code, "Throwing", p.throw_chain, "Catcher")
    _catcher(code, p.handler)
    now_entry = _chain(code, "Now", p.now_chain, "NowLeaf")
    _leaf(code, "NowLeaf", "walk-now", p.now_leaf)
    reverse_chain = (*p.reverse_before, Step("reverse"), *p.reverse_after)
    reverse_entry = _chain(code, "Reverse", reverse_chain, "ReverseLeaf")
    _leaf(code, "ReverseLeaf", "walk-reverse", "plain")
    code.add(2, _NOINLINE, "public static int Main()", "{", '    Probe.Mark("begin", null);')
    code.add(
        3,
        f"int thrown = {throw_entry}(1);",
        f"int now = {now_entry}(1);",
        f"int reverse = {reverse_entry}(1);",
    )
    code.add(3, 'Probe.Mark("done", new JsonObject().Add("caught", caught).Add("throw", thrown)')
    code.add(3, '    .Add("now", now).Add("reverse", reverse).Add("sink", sink).ToString());')
    code.add(3, "return caught && reverse > 0 ? 0 : 1;")
    code.add(2, "}")
    code.add(1, "}")
    code.add(0, "}")
    return code.text()


# ----------------------------------------------------------------------------------------------------------
# Heap programs

#: the live large objects' size: above the 85000-byte large object threshold
LARGE_BYTES = 90_000
#: a large Tagged[] holder has at least this many slots (8 bytes each: on the large object heap)
LARGE_ARRAY_SLOTS = 12_000


def _collect(gc: GcKind) -> list[str]:
    lines = []
    if gc.compact_loh:
        lines.append(
            "GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;"
        )
    compacting = "true" if gc.compacting else "false"
    lines.append(f"GC.Collect({gc.generation}, GCCollectionMode.Forced, true, {compacting});")
    return lines


_HOLDERS: dict[str, Callable[[int], tuple[str, str, str, str]]] = {
    # holder -> (field declaration, creation, get expression of i, set statement of i and t)
    "array": lambda live: ("static Tagged[] held;", f"held = new Tagged[{live}];", "held[i]", "held[i] = t;"),
    "object-array": lambda live: (
        "static object[] held;",
        f"held = new object[{2 * live}];",
        "(Tagged)held[2 * i]",
        'held[2 * i] = t; held[2 * i + 1] = "odd";',
    ),
    "large-array": lambda live: (
        "static Tagged[] held;",
        f"held = new Tagged[{max(live, LARGE_ARRAY_SLOTS)}];",
        "held[i]",
        "held[i] = t;",
    ),
    "list": lambda live: (
        "static List<Tagged> held;",
        f"held = new List<Tagged>({live});",
        "held[i]",
        "held.Add(t);",
    ),
}


#: A heap program: C# with ``$name`` slots that :func:`_fill` fills
_HEAP_PROGRAM = """\
// fuzz-runtime heap program (generated by profharness fuzz-runtime, issue 12; judged as gc-moves).
// Shape: $shape.
// Live object i has Tag = i + 1, dead object k Tag = -(k + 1), Twin = ~Tag (mark expect.objects). The
// program reads every tracked object's address into a preallocated long[] (mark ids.before, dead
// objects last, then dropped), runs exactly one GC, reads the live ones again (mark ids.after).
// Exit 0 when the tags are intact.
using System;
using System.Collections.Generic;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace ProfHarness.Fuzz
{
    public static class Program
    {
        // static readonly, not const: mcs refuses `i % DeadEvery` with a constant 0 even where never run
        static readonly int Live = $live, DeadEvery = $dead_every, Dead = $dead;
        static readonly int Young = $young;
        static readonly int GarbageBytes = $garbage_bytes, PinnedEvery = $pinned_every;
        static readonly int LargeEvery = $large_every;

        $declare
        static Tagged[] dead;
        static int deadMade;
        static object sink;
        static List<byte[]> large = new List<byte[]>();

        static Tagged Get(int i)
        {
            return $get;
        }

        // Separate, not inlined: no temporary of Main's frame keeps a dead object reachable.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Build(int from, int to)
        {
            for (int i = from; i < to; i++)
            {
                Tagged t = Tagged.Create(i + 1);
                $put
                if (DeadEvery > 0 && i % DeadEvery == DeadEvery - 1 && deadMade < Dead)
                {
                    dead[deadMade] = Tagged.Create(-(deadMade + 1));
                    deadMade++;
                }
                if (GarbageBytes > 0)
                    sink = new byte[GarbageBytes];
                if (LargeEvery > 0 && i % LargeEvery == LargeEvery - 1)
                    large.Add(new byte[$large_bytes]);
            }
                sink = null;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void CaptureAndDrop(long[] into, int at)
        {
            for (int j = 0; j < Dead; j++)
            {
                into[at + j] = Heap.Address(dead[j]);
                dead[j] = null;
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void WarmUp()
        {
            $warmup
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            $create
            dead = new Tagged[Dead];
            Build(0, Live - Young);
            WarmUp();
            Build(Live - Young, Live);
            var before = new long[Live + Dead];
            var after = new long[Live];
            int pins = PinnedEvery > 0 ? Live / PinnedEvery : 0;
            var handles = new GCHandle[pins];
            for (int j = 0; j < pins; j++)
                handles[j] = GCHandle.Alloc(Get(j * PinnedEvery + PinnedEvery - 1), GCHandleType.Pinned);
            Probe.Mark("expect.objects", Tagged.Expected(Live, Dead));
            int g0 = GC.CollectionCount(0);
            for (int i = 0; i < Live; i++)
                before[i] = Heap.Address(Get(i));
            CaptureAndDrop(before, Live);
            Probe.MarkIds("ids.before", before, Live + Dead);
            int g0Captured = GC.CollectionCount(0);

            $between

            int g0Collected = GC.CollectionCount(0);
            for (int i = 0; i < Live; i++)
                after[i] = Heap.Address(Get(i));
            Probe.MarkIds("ids.after", after, Live);
            int g0After = GC.CollectionCount(0);
            for (int j = 0; j < pins; j++)
                handles[j].Free();
            bool intact = true;
            for (int i = 0; i < Live; i++)
                intact &= Get(i).Tag == i + 1 && Get(i).Twin == ~(long)(i + 1);
            bool oneGc = g0Captured == g0 && g0Collected == g0 + 1 && g0After == g0Collected;
            Probe.Mark("fuzz.done", new JsonObject().Add("intact", intact)
                .Add("one_gc_between_captures", oneGc)
                .Add("large", large.Count).ToString());
            GC.KeepAlive(held);
            GC.KeepAlive(large);
            return intact ? 0 : 1;
        }
    }
}
"""


def _fill(template: str, **slots: object) -> str:
    """``template`` (C#) with its ``$name`` slots filled: a line that is a slot alone and whose value is a
    list takes those lines at its indent (none: the line goes); any other slot, the value's text."""
    lines: list[str] = []
    for line in template.splitlines():
        body = line.lstrip()
        value = slots.get(body[1:]) if body.startswith("$") else None
        if isinstance(value, list):
            lines += [line[: len(line) - len(body)] + part for part in value]
        else:
            lines.append(string.Template(line).substitute(slots))
    return "\n".join(lines) + "\n"


def _render_heap(p: HeapProgram) -> str:
    declare, create, get, put = _HOLDERS[p.holder](p.live)
    return _fill(
        _HEAP_PROGRAM, shape=p.describe(), live=p.live, dead_every=p.dead_every, dead=p.dead, young=p.young,
        garbage_bytes=p.garbage_bytes, pinned_every=p.pinned_every, large_every=p.large_every,
        declare=declare, get=get, put=put, large_bytes=LARGE_BYTES, create=create,
        warmup=[line for gc in p.warmup for line in _collect(gc)], between=_collect(p.between),
    )  # fmt: skip


def describe_json(program: Program) -> str:
    """The program as JSON (one line per key), for finding.json and logs."""
    return json.dumps(program.to_dict(), indent=2, sort_keys=True)
