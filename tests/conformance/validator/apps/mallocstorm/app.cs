// mallocstorm -- the main thread allocates and frees 4 KiB native blocks (Marshal.AllocHGlobal: malloc) in a
// loop for up to 10 seconds, so most of its time is inside the C allocator, holding its arena's lock.
// Validated with a sampler of the main thread whose signal handler allocates (sampler_malloc): a signal that
// interrupts the thread inside malloc and then allocates waits for the lock its own thread holds, a real
// deadlock (ASYNC-07) with no injection.
using System;
using System.Runtime.InteropServices;

static class Program
{
    static int Main(string[] args)
    {
        var until = DateTime.UtcNow.AddSeconds(10);
        long blocks = 0;
        while (DateTime.UtcNow < until)
        {
            for (int k = 0; k < 1000; k++)
            {
                IntPtr p = Marshal.AllocHGlobal(4096);
                Marshal.FreeHGlobal(p);
            }
            blocks += 1000;
        }
        Console.WriteLine($"mallocstorm: {blocks} blocks");
        return 0;
    }
}
