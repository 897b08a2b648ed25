// stack-basic: a deep chain of non-inlined calls that ends in a throw.
// Main -> Level1 -> ... -> Level6 -> Thrower. Thrower reports its own stack (mark "expect.stack", leaf first,
// from reflection) and throws InvalidOperationException, which Main catches; then the mark "done".
// The default plan walks the stack with DoStackSnapshot at ExceptionThrown, once with infoFlags 0 and once
// with COR_PRF_SNAPSHOT_REGISTER_CONTEXT, so the walk can be compared frame by frame with expect.stack.
// Exit code 0 when the exception reached Main, 1 otherwise.
using System;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class StackBasic
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Probe.Mark("begin");
            bool caught = false;
            try
            {
                Level1(1);
            }
            catch (InvalidOperationException)
            {
                caught = true;
            }
            Probe.Mark("done", new JsonObject().Add("caught", caught).ToString());
            return caught ? 0 : 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level1(int depth) { return Level2(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level2(int depth) { return Level3(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level3(int depth) { return Level4(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level4(int depth) { return Level5(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level5(int depth) { return Level6(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Level6(int depth) { return Thrower(depth + 1) + 1; }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Thrower(int depth)
        {
            StackReport.Report();
            throw new InvalidOperationException("stack-basic: thrown at depth " + depth);
        }
    }
}
