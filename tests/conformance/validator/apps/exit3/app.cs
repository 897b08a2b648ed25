// exit3 -- a normal app that prints something and returns exit code 3 from Main.
using System;

static class Program
{
    static int Main(string[] args)
    {
        int sum = 0;
        for (int i = 1; i <= 10; i++) sum += i;
        Console.WriteLine("exit3: sum(1..10)={0}, returning 3", sum);
        return 3;
    }
}
