// StackReport: the scenario's own view of its stack, for comparison with what DoStackSnapshot delivers.
// Report() sends the mark "expect.stack" whose payload is a JSON array, leaf first, of
// {"token": MetadataToken, "type": declaring type full name, "method": name, "module": module name}
// built from new StackTrace(0, false); StackReport's own frames are left out, so index 0 is the caller.
using System;
using System.Diagnostics;
using System.Reflection;
using System.Runtime.CompilerServices;

namespace ProfHarness
{
    public static class StackReport
    {
        public const string MarkName = "expect.stack";

        /// <summary>The caller's stack as JSON (see the file comment).</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static string CallerStackJson()
        {
            var trace = new StackTrace(0, false);
            var frames = new JsonArray();
            bool skipping = true;
            for (int i = 0; i < trace.FrameCount; i++)
            {
                MethodBase method = trace.GetFrame(i).GetMethod();
                if (skipping && method != null && method.DeclaringType == typeof(StackReport))
                    continue;
                skipping = false;
                var frame = new JsonObject();
                if (method == null)
                {
                    frame.Add("token", 0).Raw("type", "null").Raw("method", "null").Raw("module", "null");
                }
                else
                {
                    frame.Add("token", method.MetadataToken)
                        .Add("type", method.DeclaringType == null ? null : method.DeclaringType.FullName)
                        .Add("method", method.Name)
                        .Add("module", method.Module.Name);
                }
                frames.Raw(frame.ToString());
            }
            return frames.ToString();
        }

        /// <summary>Send the caller's stack as the mark "expect.stack"; returns what Probe.Mark returned.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Report()
        {
            return Probe.Mark(MarkName, CallerStackJson());
        }
    }
}
