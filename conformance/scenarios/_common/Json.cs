// Json: a tiny JSON text builder for mark payloads (no reflection, no System.Text.Json on 3.1).
using System;
using System.Globalization;
using System.Text;

namespace ProfHarness
{
    public static class Json
    {
        /// <summary>A JSON string literal for s (null gives null).</summary>
        public static string Str(string s)
        {
            if (s == null)
                return "null";
            var sb = new StringBuilder(s.Length + 2);
            sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    case '\b': sb.Append("\\b"); break;
                    case '\f': sb.Append("\\f"); break;
                    default:
                        if (c < 0x20)
                            sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else
                            sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
            return sb.ToString();
        }

        public static string Num(long n)
        {
            return n.ToString(CultureInfo.InvariantCulture);
        }

        public static string Bool(bool b)
        {
            return b ? "true" : "false";
        }
    }

    /// <summary>Builds one JSON object: new JsonObject().Add("a", 1).Add("b", "x").ToString().</summary>
    public sealed class JsonObject
    {
        readonly StringBuilder sb = new StringBuilder("{");
        bool first = true;

        JsonObject Key(string name)
        {
            if (!first)
                sb.Append(',');
            first = false;
            sb.Append(Json.Str(name)).Append(':');
            return this;
        }

        public JsonObject Add(string name, string value) { Key(name).sb.Append(Json.Str(value)); return this; }
        public JsonObject Add(string name, long value) { Key(name).sb.Append(Json.Num(value)); return this; }
        public JsonObject Add(string name, bool value) { Key(name).sb.Append(Json.Bool(value)); return this; }
        /// <summary>Adds an already encoded JSON value.</summary>
        public JsonObject Raw(string name, string json) { Key(name).sb.Append(json); return this; }

        public override string ToString()
        {
            return sb.ToString() + "}";
        }
    }

    /// <summary>Builds one JSON array of already encoded JSON values.</summary>
    public sealed class JsonArray
    {
        readonly StringBuilder sb = new StringBuilder("[");
        bool first = true;

        public JsonArray Raw(string json)
        {
            if (!first)
                sb.Append(',');
            first = false;
            sb.Append(json);
            return this;
        }

        public override string ToString()
        {
            return sb.ToString() + "]";
        }
    }
}
