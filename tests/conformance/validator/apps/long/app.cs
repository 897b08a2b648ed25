// long -- docfixtures' long25 with its duration from the environment: runs PROFHARNESS_APP_SECONDS seconds
// (25 when unset) doing light work: mostly sleeping, a little allocation, a GC every 5 seconds (every
// second when it runs less than 10 s). Exits 0. Nothing in it keeps a callback or a profiler call open.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Threading;

static class Program
{
    static int Main()
    {
        int seconds;
        if (!int.TryParse(Environment.GetEnvironmentVariable("PROFHARNESS_APP_SECONDS"), out seconds)) seconds = 25;
        long every = seconds < 10 ? 1000 : 5000;
        var sw = Stopwatch.StartNew();
        var keep = new List<string>();
        int ticks = 0, gcs = 0;
        long nextGc = every;
        while (sw.ElapsedMilliseconds < seconds * 1000L)
        {
            Thread.Sleep(200);
            ticks++;
            for (int i = 0; i < 50; i++) keep.Add("tick" + ticks + "/" + i);
            if (keep.Count > 2000) keep.RemoveRange(0, 1000);
            if (sw.ElapsedMilliseconds >= nextGc)
            {
                GC.Collect();
                gcs++;
                Console.WriteLine("long: t={0}s ticks={1} gcs={2}", sw.ElapsedMilliseconds / 1000, ticks, gcs);
                nextGc += every;
            }
        }
        Console.WriteLine("long done: ticks={0} gcs={1} kept={2}", ticks, gcs, keep.Count);
        return 0;
    }
}
