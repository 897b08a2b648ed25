// basic -- a short general app: a few threads, exceptions with try/catch/finally, generic
// methods, some allocation and two GCs. Exits 0.
using System;
using System.Collections.Generic;
using System.Threading;

class Box<T>
{
    public T Value;
    public Box(T v) { Value = v; }
}

class AppException : Exception
{
    public int Code;
    public AppException(string m, int code) : base(m) { Code = code; }
}

static class Program
{
    static int finallies;
    static readonly object gate = new object();
    static long total;

    static T Echo<T>(T v) { return v; }

    static List<Box<T>> Wrap<T>(IEnumerable<T> items)
    {
        var list = new List<Box<T>>();
        foreach (var i in items) list.Add(new Box<T>(Echo(i)));
        return list;
    }

    static int Thrower(int depth)
    {
        try
        {
            if (depth == 0) throw new AppException("bottom", 42);
            return Thrower(depth - 1) + 1;
        }
        finally
        {
            Interlocked.Increment(ref finallies);
        }
    }

    static void Worker(object o)
    {
        int n = (int)o;
        long local = 0;
        for (int i = 0; i < 20000; i++)
        {
            var s = (n * i).ToString();
            local += s.Length;
        }
        try { Thrower(3); }
        catch (AppException e) { local += e.Code; }
        lock (gate) total += local;
    }

    static int Main()
    {
        var threads = new List<Thread>();
        for (int i = 0; i < 3; i++)
        {
            var t = new Thread(Worker);
            t.Name = "worker" + i;
            threads.Add(t);
            t.Start(i + 1);
        }
        foreach (var t in threads) t.Join();

        int caught = 0;
        for (int i = 0; i < 5; i++)
        {
            try { Thrower(i); }
            catch (AppException) { caught++; }
            finally { finallies++; }
        }
        try { object o = null; o.ToString(); }
        catch (NullReferenceException) { caught++; }

        var ints = Wrap(new[] { 1, 2, 3 });
        var strs = Wrap(new List<string> { "a", "b" });
        var garbage = new List<byte[]>();
        for (int i = 0; i < 2000; i++) garbage.Add(new byte[64 + i % 512]);
        GC.Collect();
        garbage = null;
        GC.Collect();

        Console.WriteLine("basic: total={0} caught={1} finallies={2} boxes={3}/{4}",
            total, caught, finallies, ints.Count, strs.Count);
        return 0;
    }
}
