#pragma once
// A small strict JSON reader and writer, enough for safetensors headers.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::io {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // the number was written without fraction or exponent
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in file order

  // Declared here and defaulted below, once JsonValue is complete. Left implicit, they
  // would be defined when std::pair<std::string, JsonValue> is instantiated (pair's
  // conditionally explicit constructors ask whether JsonValue is default constructible),
  // while that pair is still incomplete: with libstdc++, clang refuses ~vector of it.
  JsonValue();
  JsonValue(const JsonValue&);
  JsonValue(JsonValue&&) noexcept;
  JsonValue& operator=(const JsonValue&);
  JsonValue& operator=(JsonValue&&) noexcept;
  ~JsonValue();

  const JsonValue* find(const std::string& key) const;
};

inline JsonValue::JsonValue() = default;
inline JsonValue::JsonValue(const JsonValue&) = default;
inline JsonValue::JsonValue(JsonValue&&) noexcept = default;
inline JsonValue& JsonValue::operator=(const JsonValue&) = default;
inline JsonValue& JsonValue::operator=(JsonValue&&) noexcept = default;
inline JsonValue::~JsonValue() = default;

// Throws kiln::Error "[op] <context>corrupt header: …" with the byte position on bad
// input, including duplicate object keys, unpaired surrogates and numbers outside
// RFC 8259's grammar (leading zeros, "1.", ".5"). Nesting deeper than 64 is refused.
JsonValue parse_json(const std::string& text, const char* op, const std::string& context = "");

// A JSON string literal for s (quotes and escapes).
std::string json_quote(const std::string& s);

}  // namespace kiln::io
