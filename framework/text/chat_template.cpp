// A small Jinja2 interpreter for ChatML chat templates (chat_template.h): the template is
// parsed into a tree of text, outputs, for and if nodes over a few expression forms, and
// rendered with Jinja's whitespace rules as transformers configures them.
#include "text/chat_template.h"

#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "text/byte_bpe.h"
#include "text/byte_bpe_vocab.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

constexpr const char* kChatOp = "BytePairTokenizer::apply_chat_template";

// The template family, from the markers each family's turns are written with.
std::string template_family(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_start|>")) return "ChatML";
  if (has("<|start_header_id|>")) return "Llama 3";
  if (has("<|channel|>")) return "gpt-oss (harmony)";
  if (has("<start_of_turn>")) return "Gemma";
  if (has("[INST]")) return "Llama 2 / Mistral ([INST])";
  if (has("<|user|>") || has("<|assistant|>")) return "Zephyr / Phi-3 (<|user|>)";
  if (has("<|User|>") || has("<\xEF\xBD\x9CUser\xEF\xBD\x9C>")) return "DeepSeek";
  return "unrecognised";
}

// ---- expressions ----

struct Expr {
  enum Kind { Str, Int, Bool, None, Var, Attr, Index, Filter, Not, And, Or, Eq, Ne, In, NotIn, Concat, Cond } kind;
  std::string text;  // Str's value, Var's or Attr's name, Filter's name
  int64_t number = 0;
  std::unique_ptr<Expr> a, b, c;  // Cond: a if b else c
  size_t at = 0;  // offset in the template, for messages
};
using ExprPtr = std::unique_ptr<Expr>;

struct Value {
  // Undefined: what Jinja gives for a missing field or an if without else (prints "")
  enum Kind { Undefined, None, Bool, Int, Str, Message, Messages, Loop } kind = Undefined;
  bool flag = false;
  int64_t number = 0;  // Int's value, Message's index
  std::string text;
};

class ExprParser {
 public:
  ExprParser(const std::string& src, size_t begin, size_t end) : s_(src), pos_(begin), end_(end) {}

  ExprPtr parse() {
    ExprPtr e = parse_conditional();
    skip();
    return e;
  }
  bool done() {
    skip();
    return pos_ >= end_;
  }
  size_t pos() const { return pos_; }
  // The next word (a name), consumed; "" where none.
  std::string word() {
    skip();
    size_t p = pos_;
    while (p < end_ && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '_')) ++p;
    std::string w = s_.substr(pos_, p - pos_);
    pos_ = p;
    return w;
  }
  bool accept(std::string_view tok) {
    skip();
    if (s_.compare(pos_, tok.size(), tok) != 0) return false;
    // a keyword must end where a name would
    if (std::isalpha(static_cast<unsigned char>(tok.back())) && pos_ + tok.size() < end_ &&
        (std::isalnum(static_cast<unsigned char>(s_[pos_ + tok.size()])) || s_[pos_ + tok.size()] == '_'))
      return false;
    pos_ += tok.size();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    KILN_FAIL(kChatOp, "ChatML template: ", what, " at offset ", pos_, " is not supported by this renderer (",
              "text/chat_template.h lists what is)");
  }

 private:
  void skip() {
    while (pos_ < end_ && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  ExprPtr make(Expr::Kind k, ExprPtr a = nullptr, ExprPtr b = nullptr) {
    auto e = std::make_unique<Expr>();
    e->kind = k, e->a = std::move(a), e->b = std::move(b), e->at = pos_;
    return e;
  }
  // x if cond else y (the else part may be left out)
  ExprPtr parse_conditional() {
    ExprPtr e = parse_or();
    if (!accept("if")) return e;
    ExprPtr cond = make(Expr::Cond, std::move(e), parse_or());
    if (accept("else")) cond->c = parse_conditional();
    return cond;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (accept("or")) e = make(Expr::Or, std::move(e), parse_and());
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (accept("and")) e = make(Expr::And, std::move(e), parse_not());
    return e;
  }
  ExprPtr parse_not() {
    if (accept("not")) return make(Expr::Not, parse_not());
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_concat();
    if (accept("==")) return make(Expr::Eq, std::move(e), parse_concat());
    if (accept("!=")) return make(Expr::Ne, std::move(e), parse_concat());
    if (accept("in")) return make(Expr::In, std::move(e), parse_concat());
    const size_t save = pos_;
    if (accept("not") && accept("in")) return make(Expr::NotIn, std::move(e), parse_concat());
    pos_ = save;
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_postfix();
    while (true) {
      skip();
      if (pos_ < end_ && (s_[pos_] == '+' || s_[pos_] == '~')) {
        ++pos_;
        e = make(Expr::Concat, std::move(e), parse_postfix());
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_postfix() {
    ExprPtr e = parse_primary();
    while (true) {
      if (accept("[")) {
        ExprPtr index = parse_or();
        if (!accept("]")) fail("an index without ']'");
        e = make(Expr::Index, std::move(e), std::move(index));
      } else if (accept(".")) {
        ExprPtr attr = make(Expr::Attr, std::move(e));
        attr->text = word();
        if (attr->text.empty()) fail("'.' without a name");
        e = std::move(attr);
      } else if (accept("|")) {
        ExprPtr f = make(Expr::Filter, std::move(e));
        f->text = word();
        if (f->text != "trim" && f->text != "length") fail("the filter '" + f->text + "'");
        e = std::move(f);
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_primary() {
    skip();
    if (pos_ >= end_) fail("an expression that ends early");
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      ExprPtr e = parse_conditional();
      if (!accept(")")) fail("'(' without ')'");
      return e;
    }
    if (c == '\'' || c == '"') return parse_string(c);
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      ExprPtr e = make(Expr::Int);
      const bool negative = c == '-';
      if (negative) ++pos_;
      size_t p = pos_;
      while (p < end_ && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        if (e->number > (int64_t{1} << 40)) fail("a number this large");
        e->number = e->number * 10 + (s_[p++] - '0');
      }
      if (p == pos_) fail("a '-' without a number");
      pos_ = p;
      if (negative) e->number = -e->number;
      return e;
    }
    const size_t at = pos_;
    const std::string name = word();
    if (name.empty()) fail(std::string("'") + c + "'");
    if (name == "true" || name == "True" || name == "false" || name == "False") {
      ExprPtr e = make(Expr::Bool);
      e->number = name[0] == 't' || name[0] == 'T';
      return e;
    }
    if (name == "none" || name == "None") return make(Expr::None);
    if (name == "if" || name == "else" || name == "in" || name == "and" || name == "or") {
      pos_ = at;
      fail("the keyword '" + name + "' here");
    }
    skip();
    if (pos_ < end_ && s_[pos_] == '(') {
      pos_ = at;
      fail("the call " + name + "()");
    }
    ExprPtr e = make(Expr::Var);
    e->text = name;
    return e;
  }
  // Jinja reads a string literal as Python's unicode-escape does.
  ExprPtr parse_string(char quote) {
    ExprPtr e = make(Expr::Str);
    ++pos_;
    std::string& out = e->text;
    while (true) {
      if (pos_ >= end_) fail("a string without its closing quote");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= end_) fail("a string without its closing quote");
      const char k = s_[pos_++];
      auto hex = [&](int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          if (pos_ >= end_ || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) fail("a bad \\x, \\u or \\U escape");
          const char h = s_[pos_++];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > 0x10FFFF) fail("an escape past U+10FFFF");
        append_utf8(out, v);
      };
      switch (k) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // a line continuation
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (k >= '0' && k <= '7') {
            uint32_t v = static_cast<uint32_t>(k - '0');
            for (int i = 0; i < 2 && pos_ < end_ && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i) v = v * 8 + (s_[pos_++] - '0');
            append_utf8(out, v);
          } else if (k == 'N') {
            fail("a \\N{name} escape");
          } else {
            out += '\\';  // Python keeps an unknown escape as it is
            out += k;
          }
      }
    }
    return e;
  }

  const std::string& s_;
  size_t pos_, end_;
};

// ---- the template's tree ----

struct Node {
  enum Kind { Text, Output, For, If } kind = Text;
  std::string text;                                      // Text; For's loop variable
  ExprPtr expr;                                          // Output; For's sequence
  std::vector<Node> body;                                // For
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // If: conditions (null: else) and bodies
};

// One tag or stretch of text, after Jinja's whitespace rules.
struct Piece {
  enum Kind { Text, Output, Statement } kind;
  size_t begin, end;  // Text: its bytes; tags: their inside
  std::string text;   // Text, trimmed
};

bool blank(std::string_view s) { return s.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos; }

// The template's text and tags in order. Jinja's whitespace rules: "{%-" ("{{-", "{#-")
// strips the whitespace before the tag and "-%}" the whitespace after; trim_blocks drops
// the newline right after a block or comment tag; lstrip_blocks drops the spaces and tabs
// from the start of a line up to a block or comment tag ("{%+" keeps them).
std::vector<Piece> split_pieces(const std::string& t) {
  std::vector<Piece> out;
  size_t pos = 0;
  bool line_starting = true;  // whether pos starts a line, for lstrip_blocks
  while (pos <= t.size()) {
    size_t open = pos;
    while ((open = t.find('{', open)) != std::string::npos &&
           (open + 1 >= t.size() || (t[open + 1] != '{' && t[open + 1] != '%' && t[open + 1] != '#')))
      ++open;
    std::string text = t.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::Text, pos, t.size(), text});
      break;
    }
    const char kind = t[open + 1];
    const char sign = open + 2 < t.size() ? t[open + 2] : 0;
    if (sign == '-') {
      const size_t keep = text.find_last_not_of(" \t\n\r\f\v");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (sign != '+' && kind != '{') {
      const size_t line = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((line > 0 || line_starting) && line < text.size() && blank(std::string_view(text).substr(line)))
        text.erase(line);
    }
    if (!text.empty()) out.push_back({Piece::Text, pos, open, text});
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t inner = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
    const size_t shut = t.find(close, inner);
    KILN_CHECK(shut != std::string::npos, kChatOp, "ChatML template: the tag at offset ", open, " has no closing ", close);
    const bool strip_after = shut > inner && t[shut - 1] == '-';
    if (kind != '#')
      out.push_back({kind == '{' ? Piece::Output : Piece::Statement, inner, shut - (strip_after ? 1 : 0), ""});
    pos = shut + 2;
    line_starting = false;
    if (strip_after) {
      while (pos < t.size() && std::isspace(static_cast<unsigned char>(t[pos]))) line_starting = t[pos++] == '\n';
    } else if (kind != '{' && pos < t.size() && t[pos] == '\n') {
      ++pos, line_starting = true;  // trim_blocks
    }
  }
  return out;
}

class TreeBuilder {
 public:
  TreeBuilder(const std::string& t, std::vector<Piece> pieces) : t_(t), pieces_(std::move(pieces)) {}

  std::vector<Node> build() {
    std::string end;
    std::vector<Node> nodes = block(end);
    if (!end.empty()) KILN_FAIL(kChatOp, "ChatML template: '", end, "' without its opening statement");
    return nodes;
  }

 private:
  // Nodes up to a statement that closes the enclosing block (endfor, endif, elif, else),
  // whose keyword goes to `end` (its parser left in `closer_` for elif's condition).
  std::vector<Node> block(std::string& end) {
    std::vector<Node> nodes;
    while (i_ < pieces_.size()) {
      Piece& p = pieces_[i_++];
      if (p.kind == Piece::Text) {
        nodes.push_back(Node{Node::Text, p.text, nullptr, {}, {}});
      } else if (p.kind == Piece::Output) {
        ExprParser e(t_, p.begin, p.end);
        Node n;
        n.kind = Node::Output;
        n.expr = e.parse();
        if (!e.done()) e.fail("text after the expression");
        nodes.push_back(std::move(n));
      } else {
        closer_ = std::make_unique<ExprParser>(t_, p.begin, p.end);
        const std::string kw = closer_->word();
        if (kw == "endfor" || kw == "endif" || kw == "elif" || kw == "else") {
          end = kw;
          return nodes;
        }
        if (kw == "for") {
          nodes.push_back(for_node());
        } else if (kw == "if") {
          nodes.push_back(if_node());
        } else {
          closer_->fail("the statement '" + kw + "'");
        }
      }
    }
    end.clear();
    return nodes;
  }
  Node for_node() {
    Node n;
    n.kind = Node::For;
    n.text = closer_->word();
    if (n.text.empty() || !closer_->accept("in")) closer_->fail("a for loop other than 'for x in messages'");
    n.expr = closer_->parse();
    if (!closer_->done() || n.expr->kind == Expr::Cond) closer_->fail("a for loop with filters or conditions");
    std::string end;
    n.body = block(end);
    if (end != "endfor") KILN_FAIL(kChatOp, "ChatML template: a for loop closed by '", end, "' instead of endfor");
    return n;
  }
  Node if_node() {
    Node n;
    n.kind = Node::If;
    ExprPtr cond = closer_->parse();
    if (!closer_->done()) closer_->fail("text after the condition");
    while (true) {
      std::string end;
      std::vector<Node> body = block(end);
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "endif") return n;
      if (end == "elif") {
        cond = closer_->parse();
        if (!closer_->done()) closer_->fail("text after the condition");
      } else if (end == "else" && n.branches.back().first) {
        cond = nullptr;
      } else {
        KILN_FAIL(kChatOp, "ChatML template: an if closed by '", end.empty() ? "the end of the template" : end,
                  "' instead of endif");
      }
    }
  }

  const std::string& t_;
  std::vector<Piece> pieces_;
  size_t i_ = 0;
  std::unique_ptr<ExprParser> closer_;
};

// ---- rendering ----

struct Loop {
  int64_t index0 = 0, length = 0;
  std::string var;
  int64_t message = 0;
};

class Renderer {
 public:
  Renderer(const std::vector<ChatMessage>& m, bool gen, const std::string& bos, const std::string& eos)
      : messages_(m), gen_(gen), bos_(bos), eos_(eos) {}

  void run(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& n : nodes) {
      switch (n.kind) {
        case Node::Text: out += n.text; break;
        case Node::Output: out += str(eval(*n.expr), n.expr->at); break;
        case Node::If:
          for (const auto& [cond, body] : n.branches) {
            if (!cond || truthy(eval(*cond))) {
              run(body, out);
              break;
            }
          }
          break;
        case Node::For: {
          const Value seq = eval(*n.expr);
          if (seq.kind != Value::Messages) fail(n.expr->at, "a for loop over something other than messages");
          loops_.push_back({0, static_cast<int64_t>(messages_.size()), n.text, 0});
          for (size_t i = 0; i < messages_.size(); ++i) {
            loops_.back().index0 = loops_.back().message = static_cast<int64_t>(i);
            run(n.body, out);
          }
          loops_.pop_back();
          break;
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    KILN_FAIL(kChatOp, "ChatML template: ", what, " at offset ", at, " is not supported by this renderer");
  }
  static bool truthy(const Value& v) {
    switch (v.kind) {
      case Value::Undefined:
      case Value::None: return false;
      case Value::Bool: return v.flag;
      case Value::Int: return v.number != 0;
      case Value::Str: return !v.text.empty();
      default: return true;
    }
  }
  std::string str(const Value& v, size_t at) const {
    switch (v.kind) {
      case Value::Undefined: return "";
      case Value::None: return "None";
      case Value::Bool: return v.flag ? "True" : "False";
      case Value::Int: return std::to_string(v.number);
      case Value::Str: return v.text;
      default: fail(at, "printing a message, the messages or the loop");
    }
  }
  static Value text(std::string s) { return Value{Value::Str, false, 0, std::move(s)}; }
  static Value boolean(bool b) { return Value{Value::Bool, b, 0, ""}; }
  static Value integer(int64_t i) { return Value{Value::Int, false, i, ""}; }
  static bool equal(const Value& a, const Value& b) {
    if (a.kind == Value::Str || b.kind == Value::Str) return a.kind == b.kind && a.text == b.text;
    if (a.kind == Value::None || b.kind == Value::None || a.kind == Value::Undefined || b.kind == Value::Undefined)
      return a.kind == b.kind;
    if ((a.kind == Value::Int || a.kind == Value::Bool) && (b.kind == Value::Int || b.kind == Value::Bool))
      return (a.kind == Value::Int ? a.number : a.flag) == (b.kind == Value::Int ? b.number : b.flag);
    return a.kind == b.kind && a.number == b.number;
  }
  Value field(const Value& obj, const std::string& name, size_t at) const {
    if (obj.kind == Value::Message) {
      const ChatMessage& m = messages_[obj.number];
      if (name == "role") return text(m.role);
      if (name == "content") return text(m.content);
      return Value{};  // Jinja's undefined, which tests false and prints as ""
    }
    if (obj.kind == Value::Loop) {
      const Loop& l = loops_.back();
      if (name == "first") return boolean(l.index0 == 0);
      if (name == "last") return boolean(l.index0 + 1 == l.length);
      if (name == "index0") return integer(l.index0);
      if (name == "index") return integer(l.index0 + 1);
      if (name == "length") return integer(l.length);
    }
    fail(at, "the field '" + name + "'");
  }
  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Str: return text(e.text);
      case Expr::Int: return integer(e.number);
      case Expr::Bool: return boolean(e.number != 0);
      case Expr::None: return Value{Value::None, false, 0, ""};
      case Expr::Cond:
        if (truthy(eval(*e.b))) return eval(*e.a);
        return e.c ? eval(*e.c) : Value{};
      case Expr::Var:
        if (e.text == "messages") return Value{Value::Messages, false, 0, ""};
        if (e.text == "add_generation_prompt") return boolean(gen_);
        if (e.text == "bos_token") return text(bos_);
        if (e.text == "eos_token") return text(eos_);
        if (!loops_.empty() && e.text == "loop") return Value{Value::Loop, false, 0, ""};
        for (auto l = loops_.rbegin(); l != loops_.rend(); ++l)
          if (l->var == e.text) return Value{Value::Message, false, l->message, ""};
        fail(e.at, "the variable '" + e.text + "'");
      case Expr::Attr: return field(eval(*e.a), e.text, e.at);
      case Expr::Index: {
        const Value obj = eval(*e.a), key = eval(*e.b);
        if (obj.kind == Value::Messages && key.kind == Value::Int) {
          const int64_t n = static_cast<int64_t>(messages_.size());
          const int64_t i = key.number < 0 ? key.number + n : key.number;
          KILN_CHECK(i >= 0 && i < n, kChatOp, "ChatML template: messages[", key.number, "] with ", n,
                     " messages (offset ", e.at, ")");
          return Value{Value::Message, false, i, ""};
        }
        if (key.kind == Value::Str) return field(obj, key.text, e.at);
        fail(e.at, "this index");
      }
      case Expr::Filter: {
        const Value v = eval(*e.a);
        if (e.text == "length") {
          if (v.kind == Value::Messages) return integer(static_cast<int64_t>(messages_.size()));
          if (v.kind == Value::Str) {
            int64_t n = 0;  // characters, not bytes
            for (unsigned char c : v.text) n += (c & 0xC0) != 0x80;
            return integer(n);
          }
        } else if (v.kind == Value::Str) {  // trim: Python's str.strip()
          const size_t b = v.text.find_first_not_of(" \t\n\r\f\v");
          return text(b == std::string::npos ? "" : v.text.substr(b, v.text.find_last_not_of(" \t\n\r\f\v") - b + 1));
        }
        fail(e.at, "the filter '" + e.text + "' on this value");
      }
      case Expr::Not: return boolean(!truthy(eval(*e.a)));
      case Expr::And: {
        Value a = eval(*e.a);
        return truthy(a) ? eval(*e.b) : a;
      }
      case Expr::Or: {
        Value a = eval(*e.a);
        return truthy(a) ? a : eval(*e.b);
      }
      case Expr::Eq: return boolean(equal(eval(*e.a), eval(*e.b)));
      case Expr::Ne: return boolean(!equal(eval(*e.a), eval(*e.b)));
      case Expr::In:
      case Expr::NotIn: {
        const Value a = eval(*e.a), b = eval(*e.b);
        if (a.kind != Value::Str || b.kind != Value::Str) fail(e.at, "'in' on other than strings");
        return boolean((b.text.find(a.text) != std::string::npos) == (e.kind == Expr::In));
      }
      case Expr::Concat: {
        const Value a = eval(*e.a), b = eval(*e.b);
        if (a.kind != Value::Str || b.kind != Value::Str) fail(e.at, "'+' on other than strings");
        return text(a.text + b.text);
      }
    }
    fail(e.at, "this expression");
  }

  const std::vector<ChatMessage>& messages_;
  bool gen_;
  std::string bos_, eos_;
  std::vector<Loop> loops_;
};

}  // namespace

std::string render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token) {
  KILN_CHECK(!tmpl.empty(), kChatOp, "the file has no tokenizer.chat_template");
  const std::string family = template_family(tmpl);
  KILN_CHECK(family == "ChatML", kChatOp, "the chat template is of the ", family,
             " family; only ChatML templates (<|im_start|>role ... <|im_end|>) are rendered");
  // Jinja reads \r\n and \r as \n, and drops one newline at the template's end
  std::string t;
  t.reserve(tmpl.size());
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '\r') {
      t += '\n';
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '\n') ++i;
    } else {
      t += tmpl[i];
    }
  }
  if (!t.empty() && t.back() == '\n') t.pop_back();
  const std::vector<Node> tree = TreeBuilder(t, split_pieces(t)).build();
  std::string out;
  Renderer(messages, add_generation_prompt, bos_token, eos_token).run(tree, out);
  return out;
}

}  // namespace kiln::text
