#include "text/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "ops/ops.h"
#include "text/bert_unicode_tables.h"
#include "text/tokenizer_model.h"
#include "text/utf8.h"

namespace kiln::text {

using detail::AddedToken;
using detail::TokenizerModel;

namespace {

constexpr const char* kTokenizerOp = "Tokenizer";

// One input's tokens before the template (ids with their tokens and input byte ranges).
struct Tokens {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  std::vector<std::pair<size_t, size_t>> offsets;
  size_t size() const { return ids.size(); }
  void keep(size_t n, TruncationOptions::Direction dir) {
    if (n >= size()) return;
    const size_t drop = size() - n;
    const auto cut = [&](auto& v) {
      if (dir == TruncationOptions::Direction::Right) v.resize(n);
      else v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(drop));
    };
    cut(ids);
    cut(tokens);
    cut(offsets);
  }
};

bool is_space(char32_t c) {
  return bert_tables::contains(bert_tables::kSplitSpace, bert_tables::kSplitSpace_size, c);
}
bool is_word_char(char32_t c) {
  // Letters and digits (not punctuation, space or a mark-less symbol) and '_'.
  return c == U'_' || (c > 0x7F ? !is_space(c) && !bert_tables::contains(bert_tables::kPunctuation,
                                                                          bert_tables::kPunctuation_size, c)
                                : (c >= U'0' && c <= U'9') || (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z'));
}

// The first byte of the character that ends just before byte i of s (valid UTF-8, i > 0).
size_t start_before(std::string_view s, size_t i) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  return j;
}
char32_t char_before(std::string_view s, size_t i) { return decode_utf8_at(s, start_before(s, i)).value; }

// A piece of text, or an added token matched in it.
struct Segment {
  size_t begin, end;
  const AddedToken* added;  // nullptr: text to tokenize
};

// Cuts s at the added tokens (those whose `normalized` equals `normalized`), leftmost
// first and the longest where several start at one place.
std::vector<Segment> split_added(std::string_view s, const std::vector<AddedToken>& added, bool normalized) {
  std::vector<Segment> out;
  size_t last = 0, i = 0;
  while (i < s.size()) {
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added) {
      if (a.normalized != normalized || a.match.empty() || (best && a.match.size() <= best->match.size())) continue;
      if (s.compare(i, a.match.size(), a.match) != 0) continue;
      if (a.single_word) {
        const size_t e = i + a.match.size();
        if (i > 0 && is_word_char(char_before(s, i))) continue;
        if (e < s.size() && is_word_char(decode_utf8_at(s, e).value)) continue;
      }
      best = &a;
    }
    if (!best) {
      i += decode_utf8_at(s, i).size;
      continue;
    }
    size_t b = i, e = i + best->match.size();
    if (best->lstrip)
      while (b > last && is_space(char_before(s, b))) b = start_before(s, b);
    if (best->rstrip)
      while (e < s.size() && is_space(decode_utf8_at(s, e).value)) e += decode_utf8_at(s, e).size;
    if (b > last) out.push_back({last, b, nullptr});
    out.push_back({b, e, best});
    last = i = e;
  }
  if (last < s.size()) out.push_back({last, s.size(), nullptr});
  return out;
}

void check_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8_at(s, i);
    KILN_CHECK(c.value != kNotUtf8, kTokenizerOp, "the text is not valid UTF-8 at byte ", i, " (of ", s.size(), ")");
    i += c.size;
  }
}

// The words of normalized text t's bytes [from, to), each its model pieces, appended to out.
void tokenize_words(const TokenizerModel& m, const AlignedText& t, size_t from, size_t to, Tokens& out) {
  const std::string_view part = std::string_view(t.text).substr(from, to - from);
  std::vector<TextSpan> words;
  if (m.bert_pre_tokenizer) words = bert_pre_tokenize(part);
  else if (!part.empty()) words.push_back({0, part.size()});
  std::vector<WordPieceToken> pieces;
  for (const TextSpan& w : words) {
    pieces.clear();
    m.wordpiece->tokenize(part.substr(w.begin, w.end - w.begin), pieces);
    for (const WordPieceToken& p : pieces) {
      const size_t at = from + w.begin;  // the word's first byte in t
      out.ids.push_back(p.id);
      out.tokens.push_back(m.id_to_token.at(p.id));
      out.offsets.emplace_back(t.origin[at + p.begin].begin, t.origin[at + p.end - 1].end);
    }
  }
}

Tokens tokenize(const TokenizerModel& m, std::string_view input) {
  check_utf8(input);
  Tokens out;
  for (const Segment& seg : split_added(input, m.added, false)) {
    if (seg.added) {
      out.ids.push_back(seg.added->id);
      out.tokens.push_back(seg.added->content);
      out.offsets.emplace_back(seg.begin, seg.end);
      continue;
    }
    const std::string_view piece = input.substr(seg.begin, seg.end - seg.begin);
    const AlignedText t = m.normalizer ? bert_normalize(piece, seg.begin, *m.normalizer) : unnormalized(piece, seg.begin);
    for (const Segment& sub : split_added(t.text, m.added, true)) {
      if (!sub.added) {
        tokenize_words(m, t, sub.begin, sub.end, out);
        continue;
      }
      out.ids.push_back(sub.added->id);
      out.tokens.push_back(sub.added->content);
      out.offsets.emplace_back(t.origin[sub.begin].begin, t.origin[sub.end - 1].end);
    }
  }
  return out;
}

// tokenizers' truncation of one input or a pair to `budget` tokens in all (max_length less
// the template's special tokens). As tokenizers does: a budget of 0 empties both inputs
// whatever the strategy, and a negative one (special tokens alone over max_length) leaves
// them whole.
void truncate(Tokens& a, Tokens* b, int64_t budget, const TruncationOptions& o) {
  if (budget < 0) return;
  if (budget == 0) {
    a.keep(0, o.direction);
    if (b) b->keep(0, o.direction);
    return;
  }
  const size_t max = static_cast<size_t>(budget);
  const size_t total = a.size() + (b ? b->size() : 0);
  if (total <= max) return;
  const size_t to_remove = total - max;
  using S = TruncationOptions::Strategy;
  if (o.strategy == S::LongestFirst) {
    if (!b) return a.keep(max, o.direction);
    // The shorter input keeps what it can up to half; the longer one the rest.
    size_t n1 = a.size(), n2 = b->size();
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > max ? n1 : std::max(n1, max - n1);
    if (n1 + n2 > max) {
      n1 = max / 2;
      n2 = n1 + max % 2;
    }
    if (swap) std::swap(n1, n2);
    a.keep(n1, o.direction);
    b->keep(n2, o.direction);
    return;
  }
  KILN_CHECK(o.strategy == S::OnlyFirst || b, kTokenizerOp, "truncation OnlySecond needs a pair, got one text");
  Tokens& target = o.strategy == S::OnlyFirst ? a : *b;
  KILN_CHECK(target.size() > to_remove, kTokenizerOp, "truncation ", o.strategy == S::OnlyFirst ? "OnlyFirst" : "OnlySecond",
             " cannot reach max_length ", o.max_length, ": the ", o.strategy == S::OnlyFirst ? "first" : "second",
             " text has ", target.size(), " tokens and ", to_remove, " must go");
  target.keep(target.size() - to_remove, o.direction);
}

void append_sequence(Encoding& e, const Tokens& t, int64_t type_id, int64_t sequence) {
  e.ids.insert(e.ids.end(), t.ids.begin(), t.ids.end());
  e.tokens.insert(e.tokens.end(), t.tokens.begin(), t.tokens.end());
  e.offsets.insert(e.offsets.end(), t.offsets.begin(), t.offsets.end());
  e.type_ids.insert(e.type_ids.end(), t.size(), type_id);
  e.special_tokens_mask.insert(e.special_tokens_mask.end(), t.size(), 0);
  e.sequence_ids.insert(e.sequence_ids.end(), t.size(), sequence);
}

std::string cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
      {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string f(from), t(to);
    for (size_t at = s.find(f); at != std::string::npos; at = s.find(f, at + t.size())) s.replace(at, f.size(), t);
  }
  return s;
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& json, const std::string& name) {
  Tokenizer t;
  t.model_ = detail::parse_tokenizer_json(json, name);
  t.truncation_ = t.model_->truncation;
  t.padding_ = t.model_->padding;
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), kTokenizerOp, "cannot open tokenizer file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  KILN_CHECK(!in.bad(), kTokenizerOp, "cannot read tokenizer file '", path, "'");
  return from_json(ss.str(), path);
}

int64_t Tokenizer::num_special_tokens_to_add(bool is_pair) const {
  if (!model_->has_template) return 0;
  int64_t n = 0;
  for (const detail::TemplatePiece& p : is_pair ? model_->pair : model_->single)
    if (!p.is_sequence) n += static_cast<int64_t>(model_->special_tokens.at(p.name).ids.size());
  return n;
}

Encoding Tokenizer::encode_impl(std::string_view a_text, const std::string_view* b_text, bool add_special) const {
  Tokens a = tokenize(*model_, a_text);
  Tokens b;
  if (b_text) b = tokenize(*model_, *b_text);
  if (truncation_) {
    const int64_t budget = truncation_->max_length - (add_special ? num_special_tokens_to_add(b_text) : 0);
    truncate(a, b_text ? &b : nullptr, budget, *truncation_);
  }
  Encoding e;
  if (!model_->has_template) {
    append_sequence(e, a, 0, 0);
    if (b_text) append_sequence(e, b, 1, 1);
  } else {
    for (const detail::TemplatePiece& p : b_text ? model_->pair : model_->single) {
      if (p.is_sequence) {
        append_sequence(e, p.name == "A" ? a : b, p.type_id, p.name == "A" ? 0 : 1);
        continue;
      }
      if (!add_special) continue;
      const detail::SpecialTokens& s = model_->special_tokens.at(p.name);
      e.ids.insert(e.ids.end(), s.ids.begin(), s.ids.end());
      e.tokens.insert(e.tokens.end(), s.tokens.begin(), s.tokens.end());
      e.offsets.insert(e.offsets.end(), s.ids.size(), {0, 0});
      e.type_ids.insert(e.type_ids.end(), s.ids.size(), p.type_id);
      e.special_tokens_mask.insert(e.special_tokens_mask.end(), s.ids.size(), 1);
      e.sequence_ids.insert(e.sequence_ids.end(), s.ids.size(), -1);
    }
  }
  e.attention_mask.assign(e.ids.size(), 1);
  return e;
}

void Tokenizer::pad(std::vector<Encoding>& batch) const {
  if (!padding_) return;
  size_t target = 0;
  if (padding_->length) target = static_cast<size_t>(*padding_->length);
  else
    for (const Encoding& e : batch) target = std::max(target, e.size());
  if (padding_->pad_to_multiple_of > 0) {
    const size_t m = static_cast<size_t>(padding_->pad_to_multiple_of);
    target = (target + m - 1) / m * m;
  }
  const bool left = padding_->direction == PaddingOptions::Direction::Left;
  for (Encoding& e : batch) {
    if (e.size() >= target) continue;
    const size_t n = target - e.size();
    const auto grow = [&](auto& v, const auto& value) { v.insert(left ? v.begin() : v.end(), n, value); };
    grow(e.ids, padding_->pad_id);
    grow(e.type_ids, padding_->pad_type_id);
    grow(e.tokens, padding_->pad_token);
    grow(e.offsets, std::pair<size_t, size_t>{0, 0});
    grow(e.attention_mask, int64_t{0});
    grow(e.special_tokens_mask, int64_t{1});
    grow(e.sequence_ids, int64_t{-1});
  }
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<Encoding> one{encode_impl(text, nullptr, add_special_tokens)};
  pad(one);
  return std::move(one.front());
}

Encoding Tokenizer::encode(std::string_view text, std::string_view pair, bool add_special_tokens) const {
  std::vector<Encoding> one{encode_impl(text, &pair, add_special_tokens)};
  pad(one);
  return std::move(one.front());
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(encode_impl(t, nullptr, add_special_tokens));
  pad(out);
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                                    bool add_special_tokens) const {
  std::vector<Encoding> out;
  out.reserve(pairs.size());
  for (const auto& [a, b] : pairs) {
    const std::string_view bv = b;
    out.push_back(encode_impl(a, &bv, add_special_tokens));
  }
  pad(out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    auto it = model_->id_to_token.find(id);
    KILN_CHECK(it != model_->id_to_token.end(), "Tokenizer::decode", "id ", id, " is not in the vocabulary (",
               model_->id_to_token.size(), " tokens)");
    auto added = model_->added_by_id.find(id);
    if (skip_special_tokens && added != model_->added_by_id.end() && added->second->special) continue;
    tokens.push_back(it->second);
  }
  std::string out;
  if (!model_->wordpiece_decoder) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  const std::string& prefix = model_->decoder_prefix;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    std::string t;
    if (!prefix.empty() && token.compare(0, prefix.size(), prefix) == 0) t.assign(token, prefix.size());
    else t = (i > 0 ? std::string(" ") : std::string()) + token;
    out += model_->decoder_cleanup ? cleanup(std::move(t)) : t;
  }
  return out;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(model_->id_to_token.size()); }

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string t(token);
  if (auto it = model_->added_ids.find(t); it != model_->added_ids.end()) return it->second;
  const auto& vocab = model_->wordpiece->vocab();
  if (auto it = vocab.find(t); it != vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  auto it = model_->id_to_token.find(id);
  if (it == model_->id_to_token.end()) return std::nullopt;
  return it->second;
}

void Tokenizer::enable_truncation(const TruncationOptions& o) {
  KILN_CHECK(o.max_length >= 0, "Tokenizer::enable_truncation", "max_length must not be negative, got ", o.max_length);
  KILN_CHECK(o.stride >= 0 && (o.max_length == 0 || o.stride < o.max_length), "Tokenizer::enable_truncation",
             "stride must be in [0, max_length), got ", o.stride, " with max_length ", o.max_length);
  truncation_ = o;
}

void Tokenizer::enable_padding(const PaddingOptions& o) {
  KILN_CHECK(!o.length || *o.length >= 0, "Tokenizer::enable_padding", "length must not be negative, got ",
             o.length.value_or(0));
  KILN_CHECK(o.pad_to_multiple_of >= 0, "Tokenizer::enable_padding", "pad_to_multiple_of must not be negative, got ",
             o.pad_to_multiple_of);
  padding_ = o;
}

BatchTensors to_tensors(const std::vector<Encoding>& batch) {
  const int64_t B = static_cast<int64_t>(batch.size());
  const int64_t T = B ? static_cast<int64_t>(batch.front().size()) : 0;
  std::vector<int64_t> ids, mask, types;
  ids.reserve(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B; ++i) {
    const Encoding& e = batch[static_cast<size_t>(i)];
    KILN_CHECK(static_cast<int64_t>(e.size()) == T, "text::to_tensors", "encoding ", i, " has ", e.size(),
               " tokens and encoding 0 has ", T, ": pad the batch (Tokenizer::enable_padding)");
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    mask.insert(mask.end(), e.attention_mask.begin(), e.attention_mask.end());
    types.insert(types.end(), e.type_ids.begin(), e.type_ids.end());
  }
  return {from_vector(ids, {B, T}), from_vector(mask, {B, T}), from_vector(types, {B, T})};
}

}  // namespace kiln::text
