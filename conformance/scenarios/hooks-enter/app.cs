// hooks-enter: known, non-inlined static methods called with known int/long arguments, for FunctionEnter2.
// Calls, in this order: Add(3, 4), Mul(5L, 6L), Five(1, -2, 3, -4, 5), Eight(7, 8L, -9, 10L, 11, 12L, 13, -14L)
// (eight arguments: on SysV x64 the last two travel on the stack) and Add(100, -200) again. Then one mark
// "fe2.calls" reports what was called, in order: each call's method name, its metadata token (reflection,
// MethodBase.MetadataToken) and its arguments ({"type": "int"|"long", "value": n}); then the mark
// "fe2.flush" (the probe writes out what its enter hook buffered) and "done". Exit code 0 when every
// method returned the value it should.
using System;
using System.Reflection;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class Targets
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Add(int a, int b)
        {
            return a + b;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long Mul(long a, long b)
        {
            return a * b;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Five(int a, int b, int c, int d, int e)
        {
            return a + b + c + d + e;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static long Eight(int a, long b, int c, long d, int e, long f, int g, long h)
        {
            return a + b + c + d + e + f + g + h;
        }
    }

    public static class HooksEnter
    {
        static string Arg(string type, long value)
        {
            return new JsonObject().Add("type", type).Add("value", value).ToString();
        }

        static string Call(string name, params string[] args)
        {
            MethodInfo m = typeof(Targets).GetMethod(name);
            var list = new JsonArray();
            foreach (string a in args)
                list.Raw(a);
            return new JsonObject().Add("method", "Targets::" + name).Add("token", m.MetadataToken)
                .Raw("args", list.ToString()).ToString();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            int add1 = Targets.Add(3, 4);
            long mul = Targets.Mul(5L, 6L);
            int five = Targets.Five(1, -2, 3, -4, 5);
            long eight = Targets.Eight(7, 8L, -9, 10L, 11, 12L, 13, -14L);
            int add2 = Targets.Add(100, -200);
            bool ok = add1 == 7 && mul == 30 && five == 3 && eight == 38 && add2 == -100;

            var calls = new JsonArray()
                .Raw(Call("Add", Arg("int", 3), Arg("int", 4)))
                .Raw(Call("Mul", Arg("long", 5), Arg("long", 6)))
                .Raw(Call("Five", Arg("int", 1), Arg("int", -2), Arg("int", 3), Arg("int", -4), Arg("int", 5)))
                .Raw(Call("Eight", Arg("int", 7), Arg("long", 8), Arg("int", -9), Arg("long", 10), Arg("int", 11),
                    Arg("long", 12), Arg("int", 13), Arg("long", -14)))
                .Raw(Call("Add", Arg("int", 100), Arg("int", -200)));
            Probe.Mark("fe2.calls", new JsonObject().Raw("calls", calls.ToString()).Add("ok", ok).ToString());
            Probe.Mark("fe2.flush");
            Probe.Mark("done");
            return ok ? 0 : 1;
        }
    }
}
