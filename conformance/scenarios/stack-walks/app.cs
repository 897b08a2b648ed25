// stack-walks: same-thread DoStackSnapshot checks, all in one process.
// 1. Main -> Outer -> Middle -> Leaf: Leaf sends the mark "walk-now" whose payload is
//    {"stack": Leaf's own stack from reflection (leaf first), "above": [...], "nativeAfter": -1} (see Payload); the plan runs
//    many walks there (flags, clientData, callback replies, seeds, contextSize, GetFunctionFromIP). The probe's
//    walk also sees ProfHarness.Probe::Mark above Leaf and the P/Invoke target (the probe) on top.
// 2. Main -> Reverse -> profharness_call_back (native, in the probe) -> Callee (a delegate: reverse P/Invoke):
//    Callee sends "walk-reverse" with {"stack": ..., "nativeAfter": 0}: a run of unmanaged frames lies between
//    reflection frame 0 (Callee) and frame 1 (Reverse).
// 3. Main -> Throwing -> Thrower: Thrower sends "expect.throw" {"stack": ..., "nativeAfter": -1} and throws;
//    the plan walks at ExceptionThrown (a synchronous walk from inside a callback). Main catches.
// Then the mark "done" with {"caught": bool, "callbacks": n}. Exit code 0 when all went as planned.
using System;
using System.Diagnostics;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace ProfHarness.Scenarios
{
    public static class StackWalks
    {
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate void Callback();

        [DllImport("profharness_probe", CallingConvention = CallingConvention.Cdecl)]
        static extern int profharness_call_back(Callback fn);

        static Callback keep;
        static int callbacks;

        static string FrameJson(MethodBase method)
        {
            var frame = new JsonObject();
            if (method == null)
                return frame.Add("token", 0).Raw("type", "null").Raw("method", "null").Raw("module", "null")
                    .Add("pinvoke", false).ToString();
            return frame.Add("token", method.MetadataToken)
                .Add("type", method.DeclaringType == null ? null : method.DeclaringType.FullName)
                .Add("method", method.Name)
                .Add("module", method.Module.Name)
                .Add("pinvoke", (method.Attributes & MethodAttributes.PinvokeImpl) != 0)
                .ToString();
        }

        // {"stack": the caller's stack from reflection, leaf first (index 0 = the method calling Payload), each
        //  frame {token, type, method, module, pinvoke} (pinvoke: a P/Invoke method, i.e. unmanaged code),
        //  "above": the frames the probe's walk will also see above index 0 (Probe.Mark and its P/Invoke
        //  target profharness_mark, leaf first), "nativeAfter": index after which native code (not seen by
        //  reflection) called into managed code, or -1}
        [MethodImpl(MethodImplOptions.NoInlining)]
        static string Payload(int nativeAfter)
        {
            var trace = new StackTrace(1, false);
            var stack = new JsonArray();
            for (int i = 0; i < trace.FrameCount; i++)
                stack.Raw(FrameJson(trace.GetFrame(i).GetMethod()));
            var above = new JsonArray();
            above.Raw(FrameJson(typeof(Probe).GetMethod("profharness_mark", BindingFlags.NonPublic | BindingFlags.Static)));
            above.Raw(FrameJson(typeof(Probe).GetMethod("Mark", new Type[] { typeof(string), typeof(string) })));
            return new JsonObject().Raw("stack", stack.ToString()).Raw("above", above.ToString())
                .Add("nativeAfter", nativeAfter).ToString();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Probe.Mark("begin", null);
            int depth = Outer(1);
            int rc = Reverse();
            bool caught = false;
            try
            {
                Throwing(1);
            }
            catch (InvalidOperationException)
            {
                caught = true;
            }
            Probe.Mark("done", new JsonObject().Add("caught", caught).Add("callbacks", callbacks)
                .Add("callBack", rc).Add("depth", depth).ToString());
            return caught && callbacks == 1 && rc == 0 ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Outer(int d) { return Middle(d + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Middle(int d) { return Leaf(d + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Leaf(int d)
        {
            Probe.Mark("walk-now", Payload(-1));
            return d;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Reverse()
        {
            keep = new Callback(Callee);
            int rc = profharness_call_back(keep);
            GC.KeepAlive(keep);
            return rc;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Callee()
        {
            callbacks++;
            Probe.Mark("walk-reverse", Payload(0));
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Throwing(int d) { return Thrower(d + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Thrower(int d)
        {
            Probe.Mark("expect.throw", Payload(-1));
            throw new InvalidOperationException("stack-walks: thrown at depth " + d);
        }
    }
}
