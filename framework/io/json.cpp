#include "io/json.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>

#include "core/error.h"
#include "text/utf8.h"

namespace kiln::io {

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(const std::string& s, const char* op, const std::string& context) : s_(s), op_(op), context_(context) {}

  JsonValue parse_document() {
    JsonValue v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    KILN_FAIL(op_, context_, "corrupt header: ", what, " at byte ", pos_, " of the JSON header");
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  JsonValue value(int depth) {
    if (depth > 64) fail("nesting too deep");
    char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      JsonValue v;
      v.kind = JsonValue::Kind::String;
      v.string = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    return literal();
  }

  JsonValue object(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Object;
    expect('{');
    std::set<std::string> keys;
    if (peek() == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      if (peek() != '"') fail("expected a string key");
      std::string k = string();
      if (!keys.insert(k).second) fail("duplicate key \"" + k + "\"");
      expect(':');
      v.object.emplace_back(k, value(depth + 1));
      char c = peek();
      ++pos_;
      if (c == '}') return v;
      if (c != ',') fail("expected ',' or '}'");
    }
  }

  JsonValue array(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::Array;
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      v.array.push_back(value(depth + 1));
      char c = peek();
      ++pos_;
      if (c == ']') return v;
      if (c != ',') fail("expected ',' or ']'");
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate must be followed by a low one
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          text::append_utf8(out, static_cast<char32_t>(cp));
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= h - '0';
      else if (h >= 'a' && h <= 'f') cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') cp |= h - 'A' + 10;
      else fail("bad \\u escape");
    }
    return cp;
  }

  // RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  JsonValue number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    auto bad = [&] {
      while (pos_ < s_.size() && std::string_view("0123456789+-.eE").find(s_[pos_]) != std::string_view::npos) ++pos_;
      fail("bad number '" + s_.substr(start, pos_ - start) + "'");
    };
    if (s_[pos_] == '-') ++pos_;
    size_t int_start = pos_;
    size_t n = digits();
    if (n == 0 || (n > 1 && s_[int_start] == '0')) bad();
    bool integer = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      integer = false;
      if (digits() == 0) bad();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      integer = false;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) bad();
    }
    std::string tok = s_.substr(start, pos_ - start);
    JsonValue v;
    v.kind = JsonValue::Kind::Number;
    v.number = std::strtod(tok.c_str(), nullptr);
    if (integer) {
      errno = 0;
      long long i = std::strtoll(tok.c_str(), nullptr, 10);
      if (errno != 0) fail("integer out of range '" + tok + "'");
      v.is_integer = true;
      v.integer = i;
    }
    return v;
  }

  JsonValue literal() {
    JsonValue v;
    auto match = [&](const char* w) {
      size_t n = std::char_traits<char>::length(w);
      if (s_.compare(pos_, n, w) == 0) {
        pos_ += n;
        return true;
      }
      return false;
    };
    if (match("true")) v.kind = JsonValue::Kind::Bool, v.boolean = true;
    else if (match("false")) v.kind = JsonValue::Kind::Bool;
    else if (match("null")) v.kind = JsonValue::Kind::Null;
    else fail("unexpected character");
    return v;
  }

  const std::string& s_;
  const char* op_;
  const std::string& context_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue parse_json(const std::string& text, const char* op, const std::string& context) {
  return Parser(text, op, context).parse_document();
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace kiln::io
