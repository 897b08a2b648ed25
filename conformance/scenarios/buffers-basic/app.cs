// buffers-basic: gives the buffer probe real IDs with type arguments, then throws from inside them.
// Main reports its ground truth (mark "expect.buffers": module path, assembly name, AppDomain name, the
// ClassIDs of the class and method type arguments as RuntimeTypeHandle values, the instance field count),
// then calls Trio<int, long, double>.Pick<byte, short, char, bool>, which throws and catches an exception.
// The default plan runs the buffer_probe experiment at ExceptionThrown for every probed method: the frame of
// Pick supplies the FunctionID, ClassID, ModuleID, AssemblyID and AppDomainID. Value-type arguments only, so
// the instantiations are exact (no shared __Canon code). Exit code 0 when Pick caught its exception.
using System;
using System.Runtime.CompilerServices;

namespace ProfHarness.Scenarios
{
    public sealed class Trio<A, B, C>
    {
        public A First;
        public B Second;
        public C Third;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Pick<P, Q, R, S>(int seed)
        {
            int caught = 0;
            try
            {
                throw new InvalidOperationException("buffers-basic: thrown from Pick " + seed);
            }
            catch (InvalidOperationException)
            {
                caught = 1;
            }
            return caught;
        }
    }

    public static class BuffersBasic
    {
        static string Handles(params Type[] types)
        {
            var array = new JsonArray();
            foreach (Type t in types)
                array.Raw(Json.Num(t.TypeHandle.Value.ToInt64()));
            return array.ToString();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Main()
        {
            Type trio = typeof(Trio<int, long, double>);
            var truth = new JsonObject()
                .Add("frame", "Pick")
                .Add("modulePath", trio.Assembly.Location)
                .Add("assemblyName", trio.Assembly.GetName().Name)
                .Add("appDomainName", AppDomain.CurrentDomain.FriendlyName)
                .Raw("classTypeArgs", Handles(typeof(int), typeof(long), typeof(double)))
                .Raw("methodTypeArgs", Handles(typeof(byte), typeof(short), typeof(char), typeof(bool)))
                .Add("classId", trio.TypeHandle.Value.ToInt64())
                .Add("instanceFields", 3);
            Probe.Mark("expect.buffers", truth.ToString());
            int caught = Trio<int, long, double>.Pick<byte, short, char, bool>(7);
            Probe.Mark("done", new JsonObject().Add("caught", caught == 1).ToString());
            return caught == 1 ? 0 : 1;
        }
    }
}
