// Reading tokenizer.json (Hugging Face tokenizers' serialized form) into the parts
// text::Tokenizer runs. Every field it reads is checked for its JSON type and range; a
// part of a kind it does not run is refused by name, never silently skipped.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "io/json.h"
#include "text/tokenizer_model.h"
#include "text/utf8.h"

namespace kiln::text::detail {
namespace {

using io::JsonValue;
using Kind = JsonValue::Kind;
constexpr const char* kJsonOp = "Tokenizer";

// Field access with messages that name the file and the field's path.
class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    KILN_FAIL(kJsonOp, name_, ": ", path, ": ", what);
  }

  const JsonValue* get(const JsonValue& obj, const std::string& path, const char* key) const {
    if (obj.kind != Kind::Object) fail(path, "expected an object");
    return obj.find(key);
  }
  const JsonValue& need(const JsonValue& obj, const std::string& path, const char* key) const {
    const JsonValue* v = get(obj, path, key);
    if (!v) fail(path, std::string("has no \"") + key + "\"");
    return *v;
  }
  std::string string(const JsonValue& v, const std::string& path) const {
    if (v.kind != Kind::String) fail(path, "expected a string");
    return v.string;
  }
  bool boolean(const JsonValue& v, const std::string& path) const {
    if (v.kind != Kind::Bool) fail(path, "expected true or false");
    return v.boolean;
  }
  int64_t integer(const JsonValue& v, const std::string& path, int64_t lo = 0,
                  int64_t hi = std::numeric_limits<int32_t>::max()) const {
    if (v.kind != Kind::Number || !v.is_integer) fail(path, "expected an integer");
    if (v.integer < lo || v.integer > hi)
      fail(path, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v.integer));
    return v.integer;
  }
  // An optional boolean field; `fallback` where absent (or null, where `null_ok`).
  bool flag(const JsonValue& obj, const std::string& path, const char* key, bool fallback) const {
    const JsonValue* v = get(obj, path, key);
    if (!v || v->kind == Kind::Null) return fallback;
    return boolean(*v, path + "." + key);
  }
  std::string type_of(const JsonValue& part, const std::string& path) const {
    return string(need(part, path, "type"), path + ".type");
  }

 private:
  std::string name_;
};

void read_normalizer(const Reader& r, const JsonValue& v, TokenizerModel& m) {
  if (v.kind == Kind::Null) return;
  const std::string type = r.type_of(v, "normalizer");
  if (type != "BertNormalizer")
    r.fail("normalizer", "type \"" + type + "\" is not supported (Kiln reads BertNormalizer or null)");
  BertNormalizerOptions o;
  o.clean_text = r.flag(v, "normalizer", "clean_text", true);
  o.handle_chinese_chars = r.flag(v, "normalizer", "handle_chinese_chars", true);
  o.lowercase = r.flag(v, "normalizer", "lowercase", true);
  // strip_accents null follows lowercase, as in BERT's original tokenizer.
  o.strip_accents = r.flag(v, "normalizer", "strip_accents", o.lowercase);
  m.normalizer = o;
}

void read_pre_tokenizer(const Reader& r, const JsonValue& v, TokenizerModel& m) {
  if (v.kind == Kind::Null) return;
  const std::string type = r.type_of(v, "pre_tokenizer");
  if (type != "BertPreTokenizer")
    r.fail("pre_tokenizer", "type \"" + type + "\" is not supported (Kiln reads BertPreTokenizer or null)");
  m.bert_pre_tokenizer = true;
}

void read_model(const Reader& r, const JsonValue& v, TokenizerModel& m) {
  const std::string type = v.kind == Kind::Object && v.find("type") ? r.type_of(v, "model") : "WordPiece";
  if (type != "WordPiece") r.fail("model", "type \"" + type + "\" is not supported (Kiln reads WordPiece)");
  const JsonValue& vocab = r.need(v, "model", "vocab");
  if (vocab.kind != Kind::Object) r.fail("model.vocab", "expected an object of piece: id");
  if (vocab.object.empty()) r.fail("model.vocab", "is empty");
  std::unordered_map<std::string, int64_t> pieces;
  pieces.reserve(vocab.object.size());
  for (const auto& [piece, id] : vocab.object) {
    const std::string path = "model.vocab[\"" + piece + "\"]";
    if (!valid_utf8(piece)) r.fail("model.vocab", "a piece is not valid UTF-8");
    pieces.emplace(piece, r.integer(id, path));
  }
  const std::string unk = r.string(r.need(v, "model", "unk_token"), "model.unk_token");
  if (!pieces.count(unk)) r.fail("model.unk_token", "\"" + unk + "\" is not in model.vocab");
  std::string prefix = "##";
  if (const JsonValue* p = r.get(v, "model", "continuing_subword_prefix"))
    prefix = r.string(*p, "model.continuing_subword_prefix");
  int64_t max_chars = 100;
  if (const JsonValue* p = r.get(v, "model", "max_input_chars_per_word"))
    max_chars = r.integer(*p, "model.max_input_chars_per_word");
  for (const auto& [piece, id] : pieces) m.id_to_token.emplace(id, piece);
  m.wordpiece = std::make_unique<WordPiece>(std::move(pieces), unk, prefix, max_chars);
}

void read_added_tokens(const Reader& r, const JsonValue* v, TokenizerModel& m) {
  if (!v || v->kind == Kind::Null) return;
  if (v->kind != Kind::Array) r.fail("added_tokens", "expected an array");
  for (size_t i = 0; i < v->array.size(); ++i) {
    const JsonValue& t = v->array[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    AddedToken a;
    a.id = r.integer(r.need(t, path, "id"), path + ".id");
    a.content = r.string(r.need(t, path, "content"), path + ".content");
    if (a.content.empty()) r.fail(path + ".content", "is empty");
    if (!valid_utf8(a.content)) r.fail(path + ".content", "is not valid UTF-8");
    a.special = r.flag(t, path, "special", false);
    a.single_word = r.flag(t, path, "single_word", false);
    a.lstrip = r.flag(t, path, "lstrip", false);
    a.rstrip = r.flag(t, path, "rstrip", false);
    a.normalized = r.flag(t, path, "normalized", !a.special);
    m.added.push_back(std::move(a));
  }
}

std::vector<TemplatePiece> read_template(const Reader& r, const JsonValue& v, const std::string& path) {
  if (v.kind != Kind::Array) r.fail(path, "expected an array of pieces");
  std::vector<TemplatePiece> out;
  for (size_t i = 0; i < v.array.size(); ++i) {
    const JsonValue& p = v.array[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (p.kind != Kind::Object || p.object.size() != 1)
      r.fail(at, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const auto& [kind, body] = p.object.front();
    TemplatePiece piece;
    if (kind == "Sequence") {
      piece.is_sequence = true;
      piece.name = r.string(r.need(body, at + ".Sequence", "id"), at + ".Sequence.id");
      if (piece.name != "A" && piece.name != "B") r.fail(at + ".Sequence.id", "must be \"A\" or \"B\", got \"" + piece.name + "\"");
    } else if (kind == "SpecialToken") {
      piece.name = r.string(r.need(body, at + ".SpecialToken", "id"), at + ".SpecialToken.id");
    } else {
      r.fail(at, "piece kind \"" + kind + "\" is not SpecialToken or Sequence");
    }
    piece.type_id = r.integer(r.need(body, at + "." + kind, "type_id"), at + "." + kind + ".type_id");
    out.push_back(std::move(piece));
  }
  return out;
}

void read_post_processor(const Reader& r, const JsonValue& v, TokenizerModel& m) {
  if (v.kind == Kind::Null) return;
  const std::string type = r.type_of(v, "post_processor");
  m.has_template = true;
  if (type == "BertProcessing") {
    // {"sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}: BERT's fixed template.
    for (const char* key : {"cls", "sep"}) {
      const std::string path = std::string("post_processor.") + key;
      const JsonValue& e = r.need(v, "post_processor", key);
      if (e.kind != Kind::Array || e.array.size() != 2) r.fail(path, "expected [token, id]");
      m.special_tokens[key] = {{r.integer(e.array[1], path + "[1]")}, {r.string(e.array[0], path + "[0]")}};
    }
    m.single = {{false, "cls", 0}, {true, "A", 0}, {false, "sep", 0}};
    m.pair = {{false, "cls", 0}, {true, "A", 0}, {false, "sep", 0}, {true, "B", 1}, {false, "sep", 1}};
    return;
  }
  if (type != "TemplateProcessing")
    r.fail("post_processor", "type \"" + type + "\" is not supported (Kiln reads TemplateProcessing, "
                             "BertProcessing or null)");
  m.single = read_template(r, r.need(v, "post_processor", "single"), "post_processor.single");
  m.pair = read_template(r, r.need(v, "post_processor", "pair"), "post_processor.pair");
  const JsonValue& specials = r.need(v, "post_processor", "special_tokens");
  if (specials.kind != Kind::Object) r.fail("post_processor.special_tokens", "expected an object");
  for (const auto& [key, e] : specials.object) {
    const std::string path = "post_processor.special_tokens[\"" + key + "\"]";
    const JsonValue& ids = r.need(e, path, "ids");
    const JsonValue& tokens = r.need(e, path, "tokens");
    if (ids.kind != Kind::Array || tokens.kind != Kind::Array || ids.array.size() != tokens.array.size())
      r.fail(path, "ids and tokens must be arrays of one length");
    SpecialTokens s;
    for (size_t i = 0; i < ids.array.size(); ++i) {
      s.ids.push_back(r.integer(ids.array[i], path + ".ids[" + std::to_string(i) + "]"));
      s.tokens.push_back(r.string(tokens.array[i], path + ".tokens[" + std::to_string(i) + "]"));
    }
    m.special_tokens[key] = std::move(s);
  }
  for (const auto* pieces : {&m.single, &m.pair})
    for (const TemplatePiece& p : *pieces)
      if (!p.is_sequence && !m.special_tokens.count(p.name))
        r.fail("post_processor", "the template names special token \"" + p.name + "\", which special_tokens lacks");
  const auto count = [](const std::vector<TemplatePiece>& ps, const char* seq) {
    return std::count_if(ps.begin(), ps.end(), [&](const TemplatePiece& p) { return p.is_sequence && p.name == seq; });
  };
  if (count(m.single, "A") != 1 || count(m.single, "B") != 0)
    r.fail("post_processor.single", "must hold sequence A once and not B");
  if (count(m.pair, "A") != 1 || count(m.pair, "B") != 1)
    r.fail("post_processor.pair", "must hold sequences A and B once each");
}

void read_decoder(const Reader& r, const JsonValue& v, TokenizerModel& m) {
  if (v.kind == Kind::Null) return;
  const std::string type = r.type_of(v, "decoder");
  if (type != "WordPiece") r.fail("decoder", "type \"" + type + "\" is not supported (Kiln reads WordPiece or null)");
  m.wordpiece_decoder = true;
  if (const JsonValue* p = r.get(v, "decoder", "prefix")) m.decoder_prefix = r.string(*p, "decoder.prefix");
  m.decoder_cleanup = r.flag(v, "decoder", "cleanup", true);
}

void read_truncation(const Reader& r, const JsonValue* v, TokenizerModel& m) {
  if (!v || v->kind == Kind::Null) return;
  TruncationOptions t;
  t.max_length = r.integer(r.need(*v, "truncation", "max_length"), "truncation.max_length");
  if (const JsonValue* s = r.get(*v, "truncation", "stride")) t.stride = r.integer(*s, "truncation.stride");
  if (const JsonValue* s = r.get(*v, "truncation", "strategy")) {
    const std::string strategy = r.string(*s, "truncation.strategy");
    if (strategy == "LongestFirst") t.strategy = TruncationOptions::Strategy::LongestFirst;
    else if (strategy == "OnlyFirst") t.strategy = TruncationOptions::Strategy::OnlyFirst;
    else if (strategy == "OnlySecond") t.strategy = TruncationOptions::Strategy::OnlySecond;
    else r.fail("truncation.strategy", "\"" + strategy + "\" is not LongestFirst, OnlyFirst or OnlySecond");
  }
  if (const JsonValue* d = r.get(*v, "truncation", "direction")) {
    const std::string dir = r.string(*d, "truncation.direction");
    if (dir == "Right") t.direction = TruncationOptions::Direction::Right;
    else if (dir == "Left") t.direction = TruncationOptions::Direction::Left;
    else r.fail("truncation.direction", "\"" + dir + "\" is not Right or Left");
  }
  m.truncation = t;
}

void read_padding(const Reader& r, const JsonValue* v, TokenizerModel& m) {
  if (!v || v->kind == Kind::Null) return;
  PaddingOptions p;
  const JsonValue& strategy = r.need(*v, "padding", "strategy");
  if (strategy.kind == Kind::String && strategy.string == "BatchLongest") {
    p.length.reset();
  } else if (strategy.kind == Kind::Object && strategy.object.size() == 1 && strategy.object.front().first == "Fixed") {
    p.length = r.integer(strategy.object.front().second, "padding.strategy.Fixed");
  } else {
    r.fail("padding.strategy", "expected \"BatchLongest\" or {\"Fixed\": length}");
  }
  if (const JsonValue* d = r.get(*v, "padding", "direction")) {
    const std::string dir = r.string(*d, "padding.direction");
    if (dir == "Right") p.direction = PaddingOptions::Direction::Right;
    else if (dir == "Left") p.direction = PaddingOptions::Direction::Left;
    else r.fail("padding.direction", "\"" + dir + "\" is not Right or Left");
  }
  if (const JsonValue* x = r.get(*v, "padding", "pad_to_multiple_of"); x && x->kind != Kind::Null)
    p.pad_to_multiple_of = r.integer(*x, "padding.pad_to_multiple_of");
  if (const JsonValue* x = r.get(*v, "padding", "pad_id")) p.pad_id = r.integer(*x, "padding.pad_id");
  if (const JsonValue* x = r.get(*v, "padding", "pad_type_id")) p.pad_type_id = r.integer(*x, "padding.pad_type_id");
  if (const JsonValue* x = r.get(*v, "padding", "pad_token")) p.pad_token = r.string(*x, "padding.pad_token");
  m.padding = p;
}

}  // namespace

std::shared_ptr<const TokenizerModel> parse_tokenizer_json(const std::string& json, const std::string& name) {
  const JsonValue root = io::parse_json(json, kJsonOp, name + ": ");
  const Reader r(name);
  if (root.kind != Kind::Object) r.fail("the top level", "expected an object");
  auto m = std::make_shared<TokenizerModel>();
  m->name = name;
  read_model(r, r.need(root, "the top level", "model"), *m);
  const JsonValue null;
  auto part = [&](const char* key) -> const JsonValue& {
    const JsonValue* v = root.find(key);
    return v ? *v : null;
  };
  read_normalizer(r, part("normalizer"), *m);
  read_pre_tokenizer(r, part("pre_tokenizer"), *m);
  read_added_tokens(r, root.find("added_tokens"), *m);
  read_post_processor(r, part("post_processor"), *m);
  read_decoder(r, part("decoder"), *m);
  read_truncation(r, root.find("truncation"), *m);
  read_padding(r, root.find("padding"), *m);
  for (AddedToken& a : m->added) {
    a.match = a.content;
    if (a.normalized && m->normalizer) a.match = bert_normalize(a.content, 0, *m->normalizer).text;
    m->id_to_token[a.id] = a.content;
    m->added_ids[a.content] = a.id;
  }
  for (const AddedToken& a : m->added) m->added_by_id[a.id] = &a;
  return m;
}

}  // namespace kiln::text::detail
