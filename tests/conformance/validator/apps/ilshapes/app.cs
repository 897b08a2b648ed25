// ilshapes -- a short app whose methods have the body shapes IL rewriters get wrong: a tiny body that
// needs two stack slots (Add3), a tiny body of 58..63 bytes of code (Mix: a prologue pushes it past the
// tiny format's 63), a fat body with a try/catch ending near the end of the code (Guarded), and a fat
// body with a loop (Spin). Each is called from Main, which prints their results and exits 0.
using System;

static class Program
{
    static int Add3(int a, int b, int c)
    {
        return a + b + c;
    }

    static int Mix(int a, int b)
    {
        return ((a * 31 + b) ^ (a >> 3)) + ((b * 17 - a) ^ (b << 2)) + ((a + b) * (a - b)) + ((a ^ b) & 0x7f)
            + ((a | b) >> 1) + ((a & 0xff) * 3) + (b & 3) + (a & 1);
    }

    static int Guarded(int n)
    {
        int r;
        try
        {
            // thrown, not trapped: a hardware divide-by-zero (SIGFPE) is not what the app is about
            if (n == 0) throw new DivideByZeroException();
            r = 100 / n;
        }
        catch (DivideByZeroException)
        {
            r = -1;
        }
        return r;
    }

    static long Spin(int n)
    {
        long s = 0;
        for (int i = 0; i < n; i++) s += i % 7;
        return s;
    }

    static int Main()
    {
        int add = Add3(1, 2, 3);
        int mix = Mix(5, 9);
        int guarded = Guarded(0) + Guarded(4);
        long spin = Spin(1000);
        Console.WriteLine("ilshapes: add3=" + add + " mix=" + mix + " guarded=" + guarded + " spin=" + spin);
        return 0;
    }
}
