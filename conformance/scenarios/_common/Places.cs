// Places: the places a sampler lands in, each a method a busy thread calls in turn (the capture-sampling
// scenario and the validator's sampling workload): pure managed code; small allocations (the allocation
// helpers); reference stores (the write barrier); a Monitor another thread keeps taking (Hold); a new
// DynamicMethod JIT-compiled; interface dispatch over five implementations (virtual stub dispatch); a gen-0
// GC on the calling thread. Native code is each app's own (what it P/Invokes differs). One instance holds
// the state they share: the contended lock, the arrays, the shapes.
using System;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Threading;

namespace ProfHarness
{
    public interface IShape { long Area(long x); }
    public sealed class Square : IShape { public long Area(long x) { return x * x; } }
    public sealed class Rect : IShape { public long Area(long x) { return x * (x + 1); } }
    public sealed class Tri : IShape { public long Area(long x) { return x * x / 2; } }
    public sealed class Disc : IShape { public long Area(long x) { return 3 * x * x; } }
    public sealed class Hex : IShape { public long Area(long x) { return 2 * x * x + 1; } }

    public sealed class Places
    {
        int released;
        object keep;
        readonly object gate = new object();
        readonly object[] refs = new object[1024];
        readonly IShape[] shapes = { new Square(), new Rect(), new Tri(), new Disc(), new Hex() };

        // The other side of the contended Monitor, a thread's body: holds the lock for a millisecond, then leaves
        // it free for three, again and again, until Release; asleep (preemptive mode) both times. So the busy
        // thread's Monitor.Enter finds the lock free, or spins for the runtime's bounded spin and then waits in
        // the kernel until the holder wakes: how its time splits between the spin and the wait is set by those
        // lengths, not by how the machine schedules the two threads, and a GC.Collect never waits for the holder
        // to reach a safe point. (It held the lock for Thread.SpinWait(100), microseconds in the runtime's spin
        // loop in cooperative mode: whether Enter spun or waited then followed the scheduling of 2 shared cores
        // and moved from run to run of the same sampler: bench/README.md.)
        [MethodImpl(MethodImplOptions.NoInlining)]
        public void Hold()
        {
            while (Volatile.Read(ref released) == 0)
            {
                lock (gate)
                {
                    Thread.Sleep(1);
                }
                Thread.Sleep(3);
            }
        }

        // Ends Hold.
        public void Release() { Volatile.Write(ref released, 1); }

        // Pure managed code: no calls, no allocation.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long BusyManaged(int iterations)
        {
            long x = 0;
            for (int i = 0; i < iterations; i++)
                x += i ^ (x >> 3);
            return x;
        }

        // Small allocations: the runtime's allocation helpers (and now and then a GC).
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long Allocate(int count)
        {
            long sum = 0;
            for (int i = 0; i < count; i++)
            {
                var a = new byte[32 + (i & 63)];
                sum += a.Length;
                keep = a;
            }
            return sum;
        }

        // Reference stores into an array of objects: each goes through the write barrier helper.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long StoreReferences(int count)
        {
            object[] r = refs;
            object[] s = shapes;
            for (int i = 0; i < count; i++)
                r[i & 1023] = s[i % 5];
            return r.Length;
        }

        // The Monitor Hold keeps taking: entering it waits (spin, then the runtime's wait).
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long Contend(int times)
        {
            long got = 0;
            for (int i = 0; i < times; i++)
            {
                lock (gate)
                {
                    got++;
                }
            }
            return got;
        }

        // A new method each call: DynamicMethod + CreateDelegate + the first call JIT-compile it.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long JitNewMethod(long seed)
        {
            var dm = new DynamicMethod("Generated" + seed, typeof(long), new[] { typeof(long) },
                typeof(Places).Module);
            ILGenerator il = dm.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            for (int i = 0; i < 64; i++)
            {
                il.Emit(OpCodes.Ldc_I8, seed + i);
                il.Emit((i & 1) == 0 ? OpCodes.Add : OpCodes.Xor);
            }
            il.Emit(OpCodes.Ret);
            var f = (Func<long, long>)dm.CreateDelegate(typeof(Func<long, long>));
            return f(seed);
        }

        // Interface calls over five implementations in turn: the runtime's dispatch stubs resolve them.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long Dispatch(int count)
        {
            long sum = 0;
            IShape[] s = shapes;
            for (int i = 0; i < count; i++)
                sum += s[i % 5].Area(i);
            return sum;
        }

        // A gen-0 collection on this thread: the collector runs here, in the runtime.
        [MethodImpl(MethodImplOptions.NoInlining)]
        public long Collect()
        {
            GC.Collect(0);
            return GC.CollectionCount(0);
        }
    }
}
