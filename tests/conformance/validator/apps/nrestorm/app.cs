// nrestorm -- the main thread takes NullReferenceExceptions (hardware faults the runtime turns into
// exceptions) in a loop while a second thread sends it SIGPROF every 20 microseconds or so, for up to 10 seconds.
// Validated with a profiler that handles SIGPROF (a sampler): on .NET 8.0.4 a SIGPROF that arrives while the
// runtime handles a fault on the thread's alternate signal stack does not fit there, and the kernel ends the
// process with SIGSEGV; on .NET Core 3.1 the app ends normally.
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

static class Program
{
    [DllImport("libc", SetLastError = true)] static extern int getpid();
    [DllImport("libc", SetLastError = true)] static extern long syscall(long number, long a, long b, long c);
    [DllImport("libc")] static extern int usleep(uint microseconds);
    const long SYS_tgkill = 234;  // x86-64
    const long SIGPROF = 27;

    [MethodImpl(MethodImplOptions.NoInlining)] static object Nothing() { return null; }

    static volatile bool done;

    static int Main(string[] args)
    {
        int pid = getpid();  // the main thread's id is the process's
        var storm = new Thread(() =>
        {
            var until = DateTime.UtcNow.AddSeconds(10);
            while (DateTime.UtcNow < until)
            {
                if (syscall(SYS_tgkill, pid, pid, SIGPROF) != 0) break;
                usleep(20);  // paced: a signal every few faults, not a thread that only handles signals
            }
            done = true;
        });
        storm.Start();
        long caught = 0;
        while (!done)
        {
            try { Nothing().ToString(); }
            catch (NullReferenceException) { caught++; }
        }
        storm.Join();
        Console.WriteLine("nrestorm: {0} NullReferenceExceptions caught", caught);
        return 0;
    }
}
