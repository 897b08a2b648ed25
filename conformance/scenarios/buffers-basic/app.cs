// buffers-basic: gives the buffer probe real IDs with type arguments, then throws from inside them.
// Main reports its ground truth (mark "expect.buffers"): the module path (Assembly.Location), the assembly
// name, the AppDomain name (AppDomain.CurrentDomain.FriendlyName), the runtime version (Environment.Version),
// how many app domains hold the assembly (the current one, when no other can exist), the ClassIDs of the class
// and method type arguments as RuntimeTypeHandle values, the instance field count and each instance field's
// metadata token and offset from the start of the object (read through a pinned pointer); then it calls
// Pick (of Trio<int, long, double>, with method type arguments byte, short, char, bool), which throws and
// catches an exception. The default plan runs the buffer_probe experiment at ExceptionThrown for every probed
// method: the frame of Pick supplies the FunctionID, ClassID, ModuleID, AssemblyID and AppDomainID. Value-type
// arguments only, so the instantiations are exact (no shared __Canon code). Exit code 0 when Pick caught its
// exception.
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

    public static unsafe class BuffersBasic
    {
        static string Field(string name, long offset)
        {
            int token = typeof(Trio<int, long, double>).GetField(name).MetadataToken;
            return new JsonObject().Add("name", name).Add("token", token).Add("offset", offset).ToString();
        }

        // Each instance field's token and offset from the object's start (where its MethodTable pointer is),
        // measured on a pinned instance: the object cannot move between the reads.
        static string Fields()
        {
            var t = new Trio<int, long, double>();
            var array = new JsonArray();
            fixed (int* first = &t.First)
            fixed (long* second = &t.Second)
            fixed (double* third = &t.Third)
            {
                long start = Heap.Address(t);
                array.Raw(Field("First", (long)first - start))
                    .Raw(Field("Second", (long)second - start))
                    .Raw(Field("Third", (long)third - start));
            }
            return array.ToString();
        }

        // The app domains holding the assembly: the current one holds it; no other exists where the runtime
        // cannot create one (CoreCLR: AppDomain.CreateDomain throws PlatformNotSupportedException). -1: unknown.
        static int DomainsHolding(System.Reflection.Assembly assembly)
        {
            bool here = Array.IndexOf(AppDomain.CurrentDomain.GetAssemblies(), assembly) >= 0;
            try
            {
                AppDomain.CreateDomain("buffers-basic-probe");
                return -1;
            }
            catch (PlatformNotSupportedException)
            {
                return here ? 1 : 0;
            }
        }

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
                .Add("runtimeVersion", Environment.Version.ToString())
                .Add("appDomainsHoldingModule", DomainsHolding(trio.Assembly))
                .Raw("classTypeArgs", Handles(typeof(int), typeof(long), typeof(double)))
                .Raw("methodTypeArgs", Handles(typeof(byte), typeof(short), typeof(char), typeof(bool)))
                .Add("classId", trio.TypeHandle.Value.ToInt64())
                .Add("instanceFields", 3)
                .Raw("fields", Fields());
            Probe.Mark("expect.buffers", truth.ToString());
            int caught = Trio<int, long, double>.Pick<byte, short, char, bool>(7);
            Probe.Mark("done", new JsonObject().Add("caught", caught == 1).ToString());
            return caught == 1 ? 0 : 1;
        }
    }
}
