// sampling: the workload of `validate --walk-quality` (issue 24 part 4): one busy thread ("sampled") that
// cycles, below a 70-frame managed recursion (Run -> Deep x70 -> Work), through the places of the probe's
// capture-sampling scenario: managed code, native code (libc strlen over 64 KiB of unmanaged memory), small
// allocations, reference stores (the write barrier), a Monitor a second thread keeps taking, a new
// DynamicMethod JIT-compiled every 8 rounds, interface dispatch over five implementations, and a gen-0 GC every
// 32 rounds. It runs PROFHARNESS_APP_SECONDS seconds (3 when unset), then stops and joins both threads.
// Marks: "workload.begin", "workload.end" (payload: rounds). Exit code 0 when both threads ended.
using System;
using System.Diagnostics;
using System.Globalization;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

namespace ProfHarness.Workloads
{
    public interface IShape { long Area(long x); }
    public sealed class Square : IShape { public long Area(long x) { return x * x; } }
    public sealed class Rect : IShape { public long Area(long x) { return x * (x + 1); } }
    public sealed class Tri : IShape { public long Area(long x) { return x * x / 2; } }
    public sealed class Disc : IShape { public long Area(long x) { return 3 * x * x; } }
    public sealed class Hex : IShape { public long Area(long x) { return 2 * x * x + 1; } }

    public static class Sampling
    {
        const int Depth = 70;
        static int stop;
        static long rounds;
        static object keep;
        static IntPtr text;
        static readonly object gate = new object();
        static readonly object[] refs = new object[1024];
        static readonly IShape[] shapes = { new Square(), new Rect(), new Tri(), new Disc(), new Hex() };

        [DllImport("libc", EntryPoint = "strlen")]
        static extern IntPtr strlen(IntPtr s);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            double seconds = 3.0;
            string given = Environment.GetEnvironmentVariable("PROFHARNESS_APP_SECONDS");
            if (given != null && (!double.TryParse(given, NumberStyles.Float, CultureInfo.InvariantCulture,
                    out seconds) || !(seconds > 0)))
            {
                Console.Error.WriteLine("sampling: PROFHARNESS_APP_SECONDS=" + given + ": not a positive number");
                return 2;
            }
            text = Marshal.AllocHGlobal(65536);
            for (int i = 0; i < 65535; i++)
                Marshal.WriteByte(text, i, (byte)'a');
            Marshal.WriteByte(text, 65535, 0);
            ProfHarness.Probe.Mark("workload.begin");
            var holder = new Thread(Hold) { IsBackground = true, Name = "holder" };
            var sampled = new Thread(Run) { IsBackground = true, Name = "sampled" };
            holder.Start();
            sampled.Start();
            Thread.Sleep(TimeSpan.FromSeconds(seconds));
            Volatile.Write(ref stop, 1);
            bool ended = sampled.Join(30000) & holder.Join(30000);
            ProfHarness.Probe.Mark("workload.end", "{\"rounds\": " + Volatile.Read(ref rounds) + "}");
            return ended ? 0 : 1;
        }

        // The other side of the contended Monitor: holds the lock for a while, again and again (waiting in
        // Thread.SpinWait, the runtime's spin loop, as capture-sampling's holder does: a sampler's timer lands
        // here too; its samples have none of Work's methods on the stack, which tells them apart. A version
        // that waited in managed code made the holder contend for the lock most of its time instead).
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Hold()
        {
            while (Volatile.Read(ref stop) == 0)
            {
                lock (gate)
                {
                    Thread.SpinWait(100);
                }
                Thread.SpinWait(100);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run() { Deep(Depth); }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Deep(int n)
        {
            if (n == 0)
                return Work();
            return Deep(n - 1) + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static int Work()
        {
            long n = 0, total = 0;
            while (Volatile.Read(ref stop) == 0)
            {
                total += BusyManaged(20000);
                total += Native(4);
                total += Allocate(200);
                total += StoreReferences(4000);
                total += Contend(4);
                if ((n & 7) == 0)
                    total += JitNewMethod(n);
                total += Dispatch(4000);
                if ((n & 31) == 0)
                    total += Collect();
                n++;
            }
            Volatile.Write(ref rounds, n);
            return (int)(total & 1);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long BusyManaged(int iterations)
        {
            long x = 0;
            for (int i = 0; i < iterations; i++)
                x += i ^ (x >> 3);
            return x;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Native(int times)
        {
            long sum = 0;
            for (int i = 0; i < times; i++)
                sum += (long)strlen(text);
            return sum;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Allocate(int count)
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

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long StoreReferences(int count)
        {
            object[] r = refs;
            object[] s = shapes;
            for (int i = 0; i < count; i++)
                r[i & 1023] = s[i % 5];
            return r.Length;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Contend(int times)
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

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long JitNewMethod(long seed)
        {
            var dm = new DynamicMethod("Generated" + seed, typeof(long), new[] { typeof(long) },
                typeof(Sampling).Module);
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

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Dispatch(int count)
        {
            long sum = 0;
            IShape[] s = shapes;
            for (int i = 0; i < count; i++)
                sum += s[i % 5].Area(i);
            return sum;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static long Collect()
        {
            GC.Collect(0);
            return GC.CollectionCount(0);
        }
    }
}
