// libFuzzer target: io::parse_json on arbitrary bytes. It must return a value or throw
// kiln::Error; anything else (another exception, a sanitizer report) is a crash. A value
// it returns is written back out (json_quote for strings) and parsed again, and must be
// the same value: the parser and the writer agree.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/json.h"

namespace {

using kiln::io::JsonValue;

// JSON text for v. Numbers written as integers when they were read as integers, else
// with 17 significant digits (enough to read back the same double).
std::string write(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::Null: return "null";
    case JsonValue::Kind::Bool: return v.boolean ? "true" : "false";
    case JsonValue::Kind::Number: {
      if (v.is_integer) return std::to_string(v.integer);
      // A number too large for a double reads as infinity ("1e400"); 1e999 reads so again.
      if (std::isinf(v.number)) return v.number > 0 ? "1e999" : "-1e999";
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.number);  // "1e+300", "5": valid JSON numbers
      std::string s = buf;
      // Still a fraction or an exponent: "2E+10" reads as 2e10, written "20000000000".
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      return s;
    }
    case JsonValue::Kind::String: return kiln::io::json_quote(v.string);
    case JsonValue::Kind::Array: {
      std::string s = "[";
      // Appended piece by piece: g++ 12 -O2 warns (-Wrestrict, a false positive) on
      // const char* + std::string&&.
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (i) s += ',';
        s += write(v.array[i]);
      }
      return s + "]";
    }
    case JsonValue::Kind::Object: {
      std::string s = "{";
      for (size_t i = 0; i < v.object.size(); ++i) {
        if (i) s += ',';
        s += kiln::io::json_quote(v.object[i].first);
        s += ':';
        s += write(v.object[i].second);
      }
      return s + "}";
    }
  }
  return "";
}

bool same(const JsonValue& a, const JsonValue& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case JsonValue::Kind::Null: return true;
    case JsonValue::Kind::Bool: return a.boolean == b.boolean;
    case JsonValue::Kind::Number:
      return a.is_integer == b.is_integer && (a.is_integer ? a.integer == b.integer : a.number == b.number);
    case JsonValue::Kind::String: return a.string == b.string;
    case JsonValue::Kind::Array:
      if (a.array.size() != b.array.size()) return false;
      for (size_t i = 0; i < a.array.size(); ++i)
        if (!same(a.array[i], b.array[i])) return false;
      return true;
    case JsonValue::Kind::Object:
      if (a.object.size() != b.object.size()) return false;
      for (size_t i = 0; i < a.object.size(); ++i)
        if (a.object[i].first != b.object[i].first || !same(a.object[i].second, b.object[i].second)) return false;
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  JsonValue v;
  try {
    v = kiln::io::parse_json(text, "fuzz_json");
  } catch (const kiln::Error&) {
    return 0;  // refused with Kiln's error: fine
  }
  // Accepted: what the writer makes of it must parse back to the same value.
  const std::string again = write(v);
  JsonValue w;
  try {
    w = kiln::io::parse_json(again, "fuzz_json");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "fuzz_json: accepted input, but its re-written form is refused: %s\n%s\n", e.what(),
                 again.c_str());
    std::abort();
  }
  if (!same(v, w)) {
    std::fprintf(stderr, "fuzz_json: accepted input parses back differently after writing:\n%s\n", again.c_str());
    std::abort();
  }
  return 0;
}
