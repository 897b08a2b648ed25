// rejitloop -- calls the same two small methods (Work, Twice) every 10 ms for about a second, so that a method
// recompiled by a ReJIT request runs its new version on its next call. Exits 0 when every round computed what
// the first did.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

static class Program
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    static int Work(int x)
    {
        return x * 5 + 3;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static int Twice(int x)
    {
        return Work(x) + Work(x + 1);
    }

    static int Main()
    {
        int first = Twice(4);
        for (int round = 0; round < 100; round++)
        {
            Thread.Sleep(10);
            if (Twice(4) != first) return 1;
        }
        Console.WriteLine("rejitloop: " + first);
        return 0;
    }
}
