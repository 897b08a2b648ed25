// heapchurn -- workload for object_tracker: many "Tracked*" objects interleaved with garbage of
// varying sizes, forced compacting GCs of every generation (three rounds), a few tracked objects
// dropped along the way, and a LOH phase with large Tracked arrays under
// GCLargeObjectHeapCompactionMode.CompactOnce. The app verifies its own data after every GC and
// exits 0 when everything is intact.
using System;
using System.Collections.Generic;
using System.Runtime;

class TrackedNode
{
    public int id;
    public byte[] pad;
    public TrackedNode prev;
}

class TrackedLeaf
{
    public long stamp;
    public string label;
}

class Junk
{
    public long a, b, c;
    public object link;
}

static class Program
{
    static readonly List<TrackedNode> nodes = new List<TrackedNode>();
    static readonly List<TrackedLeaf> leaves = new List<TrackedLeaf>();
    static readonly List<TrackedNode[]> bigTracked = new List<TrackedNode[]>();
    static List<object> transient = new List<object>();
    static int nextId;
    static int failures;
    static int gcs;

    static int PadLen(int id) { return 8 + (id * 37) % 240; }

    static TrackedNode MakeNode()
    {
        int id = nextId++;
        var n = new TrackedNode();
        n.id = id;
        n.pad = new byte[PadLen(id)];
        n.pad[0] = (byte)id;
        n.pad[n.pad.Length - 1] = (byte)(id >> 3);
        n.prev = nodes.Count > 0 ? nodes[nodes.Count - 1] : null;
        return n;
    }

    static void MakeGarbage(Random r)
    {
        int kind = r.Next(5);
        switch (kind)
        {
            case 0: transient.Add(new byte[r.Next(16, 600)]); break;
            case 1: transient.Add(new Junk { a = r.Next(), b = 1, c = 2, link = transient }); break;
            case 2: transient.Add(new string('x', r.Next(1, 120))); break;
            case 3: transient.Add(new int[r.Next(1, 64)]); break;
            default: new object(); break;  // immediately dead
        }
    }

    static void Allocate(Random r, int count)
    {
        for (int i = 0; i < count; i++)
        {
            int junk = 1 + r.Next(4);
            for (int j = 0; j < junk; j++) MakeGarbage(r);
            nodes.Add(MakeNode());
            if ((i & 7) == 0)
            {
                leaves.Add(new TrackedLeaf { stamp = nextId, label = "leaf" + nextId });
                MakeGarbage(r);
            }
        }
    }

    // Drop a few tracked objects so that they die in the next GC.
    static void DropSome(int every)
    {
        int removed = 0;
        for (int i = nodes.Count - 1; i >= 0; i -= every)
        {
            nodes.RemoveAt(i);
            removed++;
        }
        // keep the prev chain consistent with list order
        for (int i = 0; i < nodes.Count; i++) nodes[i].prev = i > 0 ? nodes[i - 1] : null;
        if (leaves.Count > 10) { leaves.RemoveRange(0, 5); removed += 5; }
        Console.WriteLine("  dropped {0} tracked objects", removed);
    }

    static void Verify(string where)
    {
        int bad = 0;
        for (int i = 0; i < nodes.Count; i++)
        {
            var n = nodes[i];
            if (n.pad == null || n.pad.Length != PadLen(n.id) || n.pad[0] != (byte)n.id ||
                n.pad[n.pad.Length - 1] != (byte)(n.id >> 3) || (i > 0 && n.prev != nodes[i - 1]))
                bad++;
        }
        foreach (var l in leaves)
            if (l.label != "leaf" + l.stamp) bad++;
        foreach (var arr in bigTracked)
            for (int i = 0; i < arr.Length; i += 97)
                if (arr[i] != null && arr[i].pad.Length != PadLen(arr[i].id)) bad++;
        if (bad != 0) { failures += bad; Console.WriteLine("  VERIFY FAILED at {0}: {1}", where, bad); }
    }

    static void Collect(int gen)
    {
        transient = new List<object>();   // open the holes
        GC.Collect(gen, GCCollectionMode.Forced, true, true);
        gcs++;
        Verify("gen" + gen);
    }

    static int Main()
    {
        var r = new Random(12345);
        for (int round = 0; round < 3; round++)
        {
            Allocate(r, 6000);
            if (round > 0) DropSome(53);
            Collect(0);
            Allocate(r, 3000);
            Collect(1);
            Allocate(r, 2000);
            if (round > 0) DropSome(71);
            Collect(2);
            Console.WriteLine("round {0}: nodes={1} leaves={2} gcs={3}", round, nodes.Count, leaves.Count, gcs);
        }

        // LOH phase: large Tracked arrays with large garbage between them, then compact the LOH.
        var bigJunk = new List<byte[]>();
        for (int i = 0; i < 8; i++)
        {
            bigJunk.Add(new byte[100000 + i * 1000]);
            var arr = new TrackedNode[12000 + i * 100];   // > 85000 bytes -> LOH
            for (int j = 0; j < arr.Length; j += 97) arr[j] = nodes[(i * 131 + j) % nodes.Count];
            bigTracked.Add(arr);
        }
        bigJunk = null;
        bigTracked.RemoveAt(3);   // one large tracked array dies
        GCSettings.LargeObjectHeapCompactionMode = GCLargeObjectHeapCompactionMode.CompactOnce;
        GC.Collect();
        gcs++;
        Verify("loh-compact");
        Allocate(r, 1000);
        Collect(2);

        Console.WriteLine("heapchurn done: nodes={0} leaves={1} big={2} gcs={3} failures={4}",
            nodes.Count, leaves.Count, bigTracked.Count, gcs, failures);
        return failures == 0 ? 0 : 1;
    }
}
