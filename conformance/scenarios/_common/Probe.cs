// Probe: the scenario's side of the probe seam (docs/design.md, "Exports of the probe .so").
// Marks go to the probe's profharness_mark export (marks with object addresses to profharness_mark_ids), resolved as libprofharness_probe.so next to the app (the
// same file the runtime loaded as profiler). Without the probe (a plain run) the first call fails with
// DllNotFoundException or EntryPointNotFoundException and every later mark is a no-op.
// PROFHARNESS_ECHO_MARKS=1 also prints each mark to stdout as "mark NAME PAYLOAD".
using System;
using System.Runtime.InteropServices;

namespace ProfHarness
{
    public static class Probe
    {
        /// <summary>Returned by <see cref="Mark"/> when the probe library is not there.</summary>
        public const int NotLoaded = -2;

        [DllImport("profharness_probe", CharSet = CharSet.Unicode)]
        static extern int profharness_mark(string name, string payload);

        [DllImport("profharness_probe", CharSet = CharSet.Unicode)]
        static extern int profharness_mark_ids(string name, long[] ids, int count);

        static bool missing;
        static readonly bool echo = Environment.GetEnvironmentVariable("PROFHARNESS_ECHO_MARKS") == "1";

        /// <summary>False once a call found no probe library.</summary>
        public static bool Present { get { return !missing; } }

        /// <summary>Record a mark (and run the experiments planned at "mark:NAME" before returning).
        /// Returns the probe's result (0, or -1 when not loaded as profiler), or NotLoaded.</summary>
        public static int Mark(string name, string payload)
        {
            if (echo)
                Console.WriteLine("mark " + name + " " + (payload ?? "null"));
            if (missing)
                return NotLoaded;
            try
            {
                return profharness_mark(name, payload);
            }
            catch (DllNotFoundException)
            {
                missing = true;
            }
            catch (EntryPointNotFoundException)
            {
                missing = true;
            }
            return NotLoaded;
        }

        public static int Mark(string name)
        {
            return Mark(name, null);
        }

        /// <summary>Record a mark that carries count object addresses (ids, preallocated: no allocation
        /// between reading the addresses and the call); the probe reads each object's class and fields.
        /// NotLoaded after a mark found no probe library, or when this call finds none.</summary>
        public static int MarkIds(string name, long[] ids, int count)
        {
            if (missing)
                return NotLoaded;
            try
            {
                return profharness_mark_ids(name, ids, count);
            }
            catch (DllNotFoundException)
            {
                return NotLoaded;
            }
            catch (EntryPointNotFoundException)
            {
                return NotLoaded;
            }
        }
    }
}
