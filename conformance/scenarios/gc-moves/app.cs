// gc-moves: ground truth for MovedReferences2: the addresses of tagged objects before and after one compacting GC.
// Allocates Live objects of class Tagged {Tag = i + 1, Twin = ~Tag} and, after every third one, a Dead object
// {Tag = -(k + 1), Twin = ~Tag} plus unreferenced garbage; a first compacting full GC packs them together.
// Then it drops the Dead objects, reads every tracked object's address (__makeref, no allocation between
// the reads and the mark) into a preallocated long[] and hands them to the probe as mark "ids.before"
// (profharness_mark_ids: the probe reads class and fields at each address); forces ONE compacting gen-2 GC;
// reads the Live objects' addresses again: mark "ids.after". Marks: "expect.objects" (the tag rule, before
// the captures), "gc-moves.done" (collection counts around the GC, tags intact). Exit 0 when intact.
using System;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public static class GcMoves
    {
        const int Live = 2000;
        const int DeadEvery = 3;
        const int Dead = Live / DeadEvery;

        static object sink;

        // Separate, not inlined: no temporary of Main's frame keeps a Dead object reachable.
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Build(Tagged[] live, Tagged[] dead)
        {
            int k = 0;
            for (int i = 0; i < Live; i++)
            {
                live[i] = Tagged.Create(i + 1);
                if (i % DeadEvery == DeadEvery - 1 && k < Dead)
                {
                    dead[k] = Tagged.Create(-(k + 1));
                    k++;
                }
                sink = new byte[8 + i % 40];
            }
            sink = null;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void CaptureAndDrop(Tagged[] dead, long[] into, int at)
        {
            for (int j = 0; j < dead.Length; j++)
            {
                into[at + j] = Heap.Address(dead[j]);
                dead[j] = null;
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            var live = new Tagged[Live];
            var dead = new Tagged[Dead];
            Build(live, dead);
            GC.Collect(2, GCCollectionMode.Forced, true, true);  // pack the survivors (Dead still referenced)

            var before = new long[Live + Dead];
            var after = new long[Live];
            Probe.Mark("expect.objects", Tagged.Expected(Live, Dead));

            int g0 = GC.CollectionCount(0), g2 = GC.CollectionCount(2);
            for (int i = 0; i < Live; i++)
                before[i] = Heap.Address(live[i]);
            CaptureAndDrop(dead, before, Live);
            dead = null;  // the Dead objects are garbage from here on (their addresses stay in before[])
            Probe.MarkIds("ids.before", before, Live + Dead);
            int g0Captured = GC.CollectionCount(0);

            GC.Collect(2, GCCollectionMode.Forced, true, true);

            int g0Collected = GC.CollectionCount(0), g2Collected = GC.CollectionCount(2);
            for (int i = 0; i < Live; i++)
                after[i] = Heap.Address(live[i]);
            Probe.MarkIds("ids.after", after, Live);
            int g0After = GC.CollectionCount(0);

            bool intact = true;
            for (int i = 0; i < Live; i++)
                intact &= live[i].Tag == i + 1 && live[i].Twin == ~(long)(i + 1);
            bool oneGc = g0Captured == g0 && g0Collected == g0 + 1 && g2Collected == g2 + 1 && g0After == g0Collected;
            Probe.Mark("gc-moves.done", new JsonObject()
                .Add("intact", intact).Add("one_gc_between_captures", oneGc)
                .Add("gen0_before", g0).Add("gen0_after", g0After).Add("gen2_before", g2).Add("gen2_after", g2Collected)
                .ToString());
            GC.KeepAlive(live);
            return intact ? 0 : 1;
        }
    }
}
