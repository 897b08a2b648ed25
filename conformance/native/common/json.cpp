#include "profharness/json.h"

#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace profharness {

std::int64_t Json::as_int() const {
    switch (kind_) {
        case Kind::Int: return i_;
        case Kind::UInt: return static_cast<std::int64_t>(u_);
        case Kind::Double: return static_cast<std::int64_t>(d_);
        case Kind::Bool: return b_ ? 1 : 0;
        default: return 0;
    }
}

std::uint64_t Json::as_uint() const {
    switch (kind_) {
        case Kind::Int: return static_cast<std::uint64_t>(i_);
        case Kind::UInt: return u_;
        case Kind::Double: return static_cast<std::uint64_t>(d_);
        case Kind::Bool: return b_ ? 1 : 0;
        default: return 0;
    }
}

Json& Json::set(const std::string& key, Json value) {
    if (kind_ != Kind::Object) { *this = object(); }
    for (auto& m : members_) {
        if (m.first == key) { m.second = std::move(value); return *this; }
    }
    members_.emplace_back(key, std::move(value));
    return *this;
}

Json Json::uints(const std::uint64_t* values, std::size_t n) {
    Json j;
    j.kind_ = Kind::UInts;
    if (n) j.s_.assign(reinterpret_cast<const char*>(values), n * sizeof(std::uint64_t));
    return j;
}

std::uint64_t Json::uint_at(std::size_t k) const {
    std::uint64_t v = 0;
    std::memcpy(&v, s_.data() + k * sizeof v, sizeof v);
    return v;
}

Json& Json::reserve(std::size_t n) {
    if (kind_ != Kind::Array) { *this = array(); }
    items_.reserve(n);
    return *this;
}

Json& Json::push(Json value) {
    if (kind_ != Kind::Array) { *this = array(); }
    items_.push_back(std::move(value));
    return *this;
}

const Json* Json::get(const std::string& key) const {
    if (kind_ != Kind::Object) return nullptr;
    for (const auto& m : members_)
        if (m.first == key) return &m.second;
    return nullptr;
}

void json_escape(const std::string& s, std::string& out) {
    out.push_back('"');
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
    out.push_back('"');
}

void Json::dump(std::string& out) const {
    char buf[40];
    switch (kind_) {
        case Kind::Null: out += "null"; break;
        case Kind::Bool: out += b_ ? "true" : "false"; break;
        // integers by to_chars: the digits %lld / %llu print, without printf's machinery (issue 23: a
        // MovedReferences2 batch is thousands of them)
        case Kind::Int: out.append(buf, std::to_chars(buf, buf + sizeof buf, i_).ptr); break;
        case Kind::UInt: out.append(buf, std::to_chars(buf, buf + sizeof buf, u_).ptr); break;
        case Kind::Double:
            if (std::isfinite(d_)) { std::snprintf(buf, sizeof buf, "%.17g", d_); out += buf; }
            else out += "null";
            break;
        case Kind::String: json_escape(s_, out); break;
        case Kind::Array:
            out.push_back('[');
            for (std::size_t i = 0; i < items_.size(); ++i) {
                if (i) out.push_back(',');
                items_[i].dump(out);
            }
            out.push_back(']');
            break;
        case Kind::UInts:
            out.reserve(out.size() + 2 + uint_count() * 21);  // 20 digits and a comma a number at most
            out.push_back('[');
            for (std::size_t i = 0, n = uint_count(); i < n; ++i) {
                if (i) out.push_back(',');
                out.append(buf, std::to_chars(buf, buf + sizeof buf, uint_at(i)).ptr);
            }
            out.push_back(']');
            break;
        case Kind::Object:
            out.push_back('{');
            for (std::size_t i = 0; i < members_.size(); ++i) {
                if (i) out.push_back(',');
                json_escape(members_[i].first, out);
                out.push_back(':');
                members_[i].second.dump(out);
            }
            out.push_back('}');
            break;
    }
}

namespace {

void append_utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

class Parser {
 public:
    explicit Parser(const std::string& t) : t_(t) {}

    bool document(Json& out, std::string& error) {
        ws();
        if (!value(out, 0)) { error = msg(); return false; }
        ws();
        if (p_ != t_.size()) { err_ = "trailing characters"; error = msg(); return false; }
        return true;
    }

 private:
    const std::string& t_;
    std::size_t p_ = 0;
    std::string err_;

    std::string msg() const { return "offset " + std::to_string(p_) + ": " + err_; }
    void ws() { while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t')) ++p_; }
    bool fail(const char* what) { err_ = what; return false; }
    bool literal(const char* word) {
        std::size_t n = std::char_traits<char>::length(word);
        if (t_.compare(p_, n, word) != 0) return fail("invalid literal");
        p_ += n;
        return true;
    }

    bool value(Json& out, int depth) {
        if (depth > 64) return fail("nesting too deep");
        if (p_ >= t_.size()) return fail("unexpected end of input");
        char c = t_[p_];
        if (c == '{') return object(out, depth);
        if (c == '[') return array(out, depth);
        if (c == '"') { std::string s; if (!string(s)) return false; out = Json(std::move(s)); return true; }
        if (c == 't') { if (!literal("true")) return false; out = Json(true); return true; }
        if (c == 'f') { if (!literal("false")) return false; out = Json(false); return true; }
        if (c == 'n') { if (!literal("null")) return false; out = Json(); return true; }
        if (c == '-' || (c >= '0' && c <= '9')) return number(out);
        return fail("unexpected character");
    }

    // The items of an object or array, from its opening bracket to `close`: `item` reads one (white space
    // around it skipped), ',' separates them.
    template <typename Item>
    bool items(char close, const char* expected_after_item, Item item) {
        ++p_;
        ws();
        if (p_ < t_.size() && t_[p_] == close) { ++p_; return true; }
        for (;;) {
            ws();
            if (!item()) return false;
            ws();
            if (p_ < t_.size() && t_[p_] == ',') { ++p_; continue; }
            if (p_ < t_.size() && t_[p_] == close) { ++p_; return true; }
            return fail(expected_after_item);
        }
    }

    bool object(Json& out, int depth) {
        out = Json::object();
        return items('}', "expected ',' or '}'", [&] {
            if (p_ >= t_.size() || t_[p_] != '"') return fail("expected a member name");
            std::string key;
            if (!string(key)) return false;
            ws();
            if (p_ >= t_.size() || t_[p_] != ':') return fail("expected ':'");
            ++p_;
            ws();
            Json v;
            if (!value(v, depth + 1)) return false;
            out.set(key, std::move(v));
            return true;
        });
    }

    bool array(Json& out, int depth) {
        out = Json::array();
        return items(']', "expected ',' or ']'", [&] {
            Json v;
            if (!value(v, depth + 1)) return false;
            out.push(std::move(v));
            return true;
        });
    }

    bool hex4(std::uint32_t& v) {
        if (p_ + 4 > t_.size()) return fail("short \\u escape");
        v = 0;
        for (int i = 0; i < 4; ++i) {
            char c = t_[p_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
            else return fail("bad \\u escape");
        }
        return true;
    }

    bool string(std::string& out) {
        ++p_;  // opening quote
        while (p_ < t_.size()) {
            char c = t_[p_++];
            if (c == '"') return true;
            if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
            if (c != '\\') { out.push_back(c); continue; }
            if (p_ >= t_.size()) break;
            char e = t_[p_++];
            switch (e) {
                case '"': out.push_back('"'); break;
                case '\\': out.push_back('\\'); break;
                case '/': out.push_back('/'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'u': {
                    std::uint32_t cp;
                    if (!hex4(cp)) return false;
                    if (cp >= 0xD800 && cp < 0xDC00 && p_ + 1 < t_.size() && t_[p_] == '\\' && t_[p_ + 1] == 'u') {
                        p_ += 2;
                        std::uint32_t lo;
                        if (!hex4(lo)) return false;
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else return fail("unpaired surrogate");
                    }
                    append_utf8(cp, out);
                    break;
                }
                default: return fail("bad escape");
            }
        }
        return fail("unterminated string");
    }

    bool number(Json& out) {
        std::size_t start = p_;
        bool neg = false, frac = false;
        if (t_[p_] == '-') { neg = true; ++p_; }
        if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return fail("bad number");
        while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
        if (p_ < t_.size() && t_[p_] == '.') {
            frac = true;
            ++p_;
            if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return fail("bad number");
            while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
        }
        if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
            frac = true;
            ++p_;
            if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
            if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return fail("bad number");
            while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
        }
        std::string text = t_.substr(start, p_ - start);
        if (frac) { out = Json(std::strtod(text.c_str(), nullptr)); return true; }
        errno = 0;
        if (neg) {
            long long v = std::strtoll(text.c_str(), nullptr, 10);
            if (errno == ERANGE) return fail("integer out of range");
            out = Json(static_cast<std::int64_t>(v));
        } else {
            unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
            if (errno == ERANGE) return fail("integer out of range");
            if (v <= static_cast<unsigned long long>(INT64_MAX)) out = Json(static_cast<std::int64_t>(v));
            else out = Json(static_cast<std::uint64_t>(v));
        }
        return true;
    }
};

}  // namespace

bool Json::parse(const std::string& text, Json& out, std::string& error) {
    Parser p(text);
    return p.document(out, error);
}

std::string utf16_to_utf8(const char16_t* s, long n) {
    std::string out;
    if (!s) return out;
    for (long i = 0; n < 0 ? s[i] != 0 : i < n; ++i) {
        std::uint32_t cp = s[i];
        if (cp >= 0xD800 && cp < 0xDC00 && (n < 0 ? s[i + 1] != 0 : i + 1 < n)) {
            std::uint32_t lo = s[i + 1];
            if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); ++i; }
        }
        append_utf8(cp, out);
    }
    return out;
}

}  // namespace profharness
