// A small JSON value: parse the plan, build trace records. Objects keep insertion order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace profharness {

class Json {
 public:
    // UInts: an array of unsigned integers kept packed (8 bytes each, not a Json each: a MovedReferences2
    // batch's thousands of ranges, issue 23); it dumps and encodes as that array of numbers, items() is empty.
    enum class Kind { Null, Bool, Int, UInt, Double, String, Array, Object, UInts };

    Json() = default;
    Json(std::nullptr_t) {}
    Json(bool b) : kind_(Kind::Bool), b_(b) {}
    template <typename T, typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value &&
                                                      std::is_signed<T>::value,
                                                  int>::type = 0>
    Json(T v) : kind_(Kind::Int), i_(static_cast<std::int64_t>(v)) {}
    template <typename T, typename std::enable_if<std::is_integral<T>::value && !std::is_same<T, bool>::value &&
                                                      std::is_unsigned<T>::value,
                                                  int>::type = 0>
    Json(T v) : kind_(Kind::UInt), u_(static_cast<std::uint64_t>(v)) {}
    Json(double d) : kind_(Kind::Double), d_(d) {}
    Json(const char* s) : kind_(Kind::String), s_(s ? s : "") {}
    Json(std::string s) : kind_(Kind::String), s_(std::move(s)) {}

    static Json object() { Json j; j.kind_ = Kind::Object; return j; }
    static Json array() { Json j; j.kind_ = Kind::Array; return j; }
    static Json uints(const std::uint64_t* values, std::size_t n);
    static Json pointer(const void* p) { return Json(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p))); }

    Kind kind() const { return kind_; }
    bool is_null() const { return kind_ == Kind::Null; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::UInt || kind_ == Kind::Double; }
    bool is_integer() const { return kind_ == Kind::Int || kind_ == Kind::UInt; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_array() const { return kind_ == Kind::Array; }
    bool is_object() const { return kind_ == Kind::Object; }

    std::int64_t as_int() const;
    std::uint64_t as_uint() const;
    bool as_bool() const { return b_; }
    double as_double() const { return d_; }  // a Double's value
    const std::string& as_string() const { return s_; }
    const std::vector<Json>& items() const { return items_; }
    const std::vector<std::pair<std::string, Json>>& members() const { return members_; }
    // UInts: how many, and the k-th
    std::size_t uint_count() const { return kind_ == Kind::UInts ? s_.size() / sizeof(std::uint64_t) : 0; }
    std::uint64_t uint_at(std::size_t k) const;

    // Object: append (or replace) a member; returns *this for chaining.
    Json& set(const std::string& key, Json value);
    // Array: append an element.
    Json& push(Json value);
    // Array: room for n elements (an array whose length is known before it is built).
    Json& reserve(std::size_t n);
    // Object lookup; nullptr when absent or not an object.
    const Json* get(const std::string& key) const;

    void dump(std::string& out) const;
    std::string dump() const { std::string s; dump(s); return s; }

    // Parses text; on failure returns false and sets error to "offset N: what".
    static bool parse(const std::string& text, Json& out, std::string& error);

 private:
    Kind kind_ = Kind::Null;
    bool b_ = false;
    std::int64_t i_ = 0;
    std::uint64_t u_ = 0;
    double d_ = 0;
    std::string s_;
    std::vector<Json> items_;
    std::vector<std::pair<std::string, Json>> members_;
};

// JSON string escaping of UTF-8 text.
void json_escape(const std::string& s, std::string& out);
// UTF-16 (NUL-terminated, or n units when n >= 0) to UTF-8.
std::string utf16_to_utf8(const char16_t* s, long n = -1);

}  // namespace profharness
