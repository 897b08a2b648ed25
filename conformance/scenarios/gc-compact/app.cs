// gc-compact: objects that survive compacting full GCs, for MovedReferences2.
// Allocates 20,000 small tagged objects (Tag = 1..N) with garbage interleaved between them so compaction has
// gaps to close, plus 8 surviving large (>= 100 KB, LOH) arrays with dead large arrays between them; then
// three blocking, compacting gen-2 collections (LOH compaction requested). Marks: "gc.begin" before the
// collections, "gc.end" after them with the sum of the survivors' tags and whether the large arrays kept
// their contents, then "done". Exit code 0 when everything survived intact, 1 otherwise.
using System;
using System.Runtime;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public sealed class Tagged
    {
        public long Tag;
        public byte[] Pad;
    }

    public static class GcCompact
    {
        const int Count = 20000;
        const int LargeCount = 8;
        const int LargeBytes = 100 * 1024;
        const int Collections = 3;

        static object sink;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            var survivors = new Tagged[Count];
            for (int i = 0; i < Count; i++)
            {
                survivors[i] = new Tagged { Tag = i + 1, Pad = new byte[8 + (i % 56)] };
                sink = new Tagged { Tag = -1, Pad = new byte[16 + (i % 200)] };
                sink = new byte[i % 64];
            }

            var large = new byte[LargeCount][];
            for (int i = 0; i < LargeCount; i++)
            {
                large[i] = new byte[LargeBytes + i * 4096];
                for (int j = 0; j < large[i].Length; j += 512)
                    large[i][j] = (byte)(i + 1);
                sink = new byte[LargeBytes * 2];
            }
            sink = null;

            long expected = (long)Count * (Count + 1) / 2;
            int gen2Before = GC.CollectionCount(2);
            Probe.Mark("gc.begin", new JsonObject()
                .Add("objects", Count).Add("large", LargeCount).Add("collections", Collections)
                .Add("gen2_count", gen2Before).ToString());

            for (int c = 0; c < Collections; c++)
            {
                GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;
                GC.Collect(2, GCCollectionMode.Forced, true, true);
            }

            long sum = 0;
            bool intact = true;
            for (int i = 0; i < Count; i++)
            {
                sum += survivors[i].Tag;
                intact &= survivors[i].Pad.Length == 8 + (i % 56);
            }
            bool largeOk = true;
            for (int i = 0; i < LargeCount; i++)
                for (int j = 0; j < large[i].Length; j += 512)
                    largeOk &= large[i][j] == (byte)(i + 1);

            int gen2After = GC.CollectionCount(2);
            bool ok = sum == expected && intact && largeOk && gen2After - gen2Before >= Collections;
            Probe.Mark("gc.end", new JsonObject()
                .Add("tag_sum", sum).Add("expected_tag_sum", expected).Add("pads_intact", intact)
                .Add("large_intact", largeOk).Add("gen2_count", gen2After).Add("ok", ok).ToString());
            GC.KeepAlive(survivors);
            GC.KeepAlive(large);
            GC.KeepAlive(sink);
            Probe.Mark("done", new JsonObject().Add("ok", ok).ToString());
            return ok ? 0 : 1;
        }
    }
}
