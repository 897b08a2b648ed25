// Heap: the objects the gc-moves scenario and the fuzz-runtime heap programs track through a GC, and where a
// managed object stands now (those apps and buffers-basic hand object addresses to the probe).
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace ProfHarness
{
    /// <summary>A tracked object: live object i has Tag = i + 1, dead object k Tag = -(k + 1); Twin = ~Tag,
    /// so the probe can tell each object by its fields at the address the app hands it.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public sealed class Tagged
    {
        public long Tag;
        public long Twin;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static Tagged Create(long tag)
        {
            var t = new Tagged();
            t.Tag = tag;
            t.Twin = ~tag;
            return t;
        }

        /// <summary>The payload of the mark "expect.objects": how many live and dead objects the mark
        /// "ids.before" lists (live first), their class and the tag rule.</summary>
        public static string Expected(int live, int dead)
        {
            return new JsonObject().Add("live", live).Add("dead", dead).Add("class", "ProfHarness.Tagged")
                .Add("tag_rule", "ids.before[i < live]: Tag = i + 1; ids.before[live + k]: Tag = -(k + 1);"
                    + " Twin = ~Tag")
                .ToString();
        }
    }

    public static unsafe class Heap
    {
        /// <summary>The object's address (its ObjectID) at this instant, read through a TypedReference
        /// (__makeref): no allocation, no pinning; the GC may move the object right after.</summary>
        public static long Address(object o)
        {
            TypedReference tr = __makeref(o);
            return (long)**(IntPtr**)&tr;
        }
    }
}
