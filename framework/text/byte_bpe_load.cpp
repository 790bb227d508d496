// BytePairTokenizer::from_gguf: the vocabulary, merges, special tokens and their
// attributes, read from a GGUF file's metadata as llama.cpp's loader reads them.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/byte_bpe.h"
#include "text/byte_bpe_vocab.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

using detail::BytePairVocab;
constexpr const char* kLoadOp = "BytePairTokenizer::from_gguf";

// The special tokens llama.cpp finds by their text where the file names no id. Where a
// vocabulary holds several names of one list (SmolLM2: "<|im_end|>" and "<|endoftext|>"
// for the end of turn), llama.cpp takes the first that its std::unordered_map of token
// texts yields, and so does this (find_by_name), walking the same map.
const std::vector<std::string> kEotNames = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                            "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                            "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                            "<end_of_utterance>"};
const std::vector<std::string> kEomNames = {"<|eom_id|>"};
const std::vector<std::string> kFimPreNames = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                               "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                               "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
const std::vector<std::string> kFimSufNames = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                               "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
                                               "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
const std::vector<std::string> kFimMidNames = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                               "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                               "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
const std::vector<std::string> kFimPadNames = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const std::vector<std::string> kFimRepNames = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const std::vector<std::string> kFimSepNames = {"<|file_sep|>"};
// Every token with one of these texts ends generation (and is a control token).
const std::set<std::string> kEogNames = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};

std::string quoted_text(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
    if (out.size() > 60) return out + "...'";
  }
  return out + "'";
}

class Loader {
 public:
  explicit Loader(const io::GGUFFile& f) : f_(f) {}

  const io::GGUFValue& need(const std::string& key) const {
    const io::GGUFValue* v = f_.find(key);
    KILN_CHECK(v != nullptr, kLoadOp, f_.source, ": no metadata key ", key);
    return *v;
  }
  // A typed read (GGUFValue::as_...), whose error (naming the key) is put under this op.
  template <class F>
  auto typed(F read) const -> decltype(read()) {
    try {
      return read();
    } catch (const Error& e) {
      const std::string what = e.what();  // "[gguf] <key> is a string, expected ..."
      KILN_FAIL(kLoadOp, f_.source, ": ", what.rfind("[gguf] ", 0) == 0 ? what.substr(7) : what);
    }
  }
  std::string string_of(const std::string& key) const {
    const io::GGUFValue& v = need(key);
    return typed([&] { return v.as_string(key); });
  }
  bool flag(const std::string& key, bool fallback) const {
    const io::GGUFValue* v = f_.find(key);
    return v ? typed([&] { return v->as_bool(key); }) : fallback;
  }
  // A token id, checked against the vocabulary; `fallback` where the key is absent.
  int64_t id(const std::string& key, int64_t fallback, int64_t n) const {
    const io::GGUFValue* v = f_.find(key);
    if (!v) return fallback;
    const int64_t i = typed([&] { return v->as_int(key); });
    KILN_CHECK(i >= 0 && i < n, kLoadOp, f_.source, ": ", key, " is ", i, ", not an id of the ", n, " tokens");
    return i;
  }
  const io::GGUFValue* find(const std::string& key) const { return f_.find(key); }
  const std::string& source() const { return f_.source; }

 private:
  const io::GGUFFile& f_;
};

uint32_t attr_of_type(int64_t type) {
  switch (type) {  // llama.cpp's token types (gguf-py's TokenType)
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

void read_pre(const Loader& in, BytePairVocab& v) {
  // llama.cpp takes a vocabulary without the key as "default" (and warns)
  v.pre = in.find("tokenizer.ggml.pre") ? in.string_of("tokenizer.ggml.pre") : "default";
  if (v.pre == "smollm") {
    v.split = detail::PreSplit::DigitsThenGpt2, v.clean_spaces = false;
  } else if (v.pre == "starcoder") {
    v.split = detail::PreSplit::DigitsThenGpt2;
  } else if (v.pre == "gpt-2") {
    v.split = detail::PreSplit::Gpt2;
  } else if (v.pre == "default") {
    v.split = detail::PreSplit::Default;
  } else {
    KILN_FAIL(kLoadOp, in.source(), ": tokenizer.ggml.pre is ", quoted_text(v.pre),
              ", a pre-tokenizer this does not know (it knows smollm, starcoder, gpt-2 and default)");
  }
}

void read_tokens(const Loader& in, BytePairVocab& v) {
  const std::string key = "tokenizer.ggml.tokens";
  const io::GGUFValue& tv = in.need(key);
  v.tokens = in.typed([&] { return tv.as_strings(key); });
  const size_t n = v.tokens.size();
  KILN_CHECK(n > 0, kLoadOp, in.source(), ": ", key, " holds no tokens");
  KILN_CHECK(n < (size_t{1} << 31), kLoadOp, in.source(), ": ", key, " holds ", n, " tokens, more than int32 ids reach");
  // No reserve(): the map must grow as llama.cpp's does, for find_by_name's order.
  for (size_t i = 0; i < n; ++i) {
    if (v.tokens[i].empty()) v.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";  // llama.cpp's name for it
    const auto [it, fresh] = v.ids.emplace(v.tokens[i], static_cast<int32_t>(i));
    KILN_CHECK(fresh, kLoadOp, in.source(), ": ", key, " holds ", quoted_text(v.tokens[i]), " twice (ids ", it->second,
               " and ",
               i, ")");
  }
  v.attrs.assign(n, kAttrNormal);
  const std::string tkey = "tokenizer.ggml.token_type";
  const io::GGUFValue* types = in.find(tkey);
  if (!types) return;  // every token normal
  const std::vector<int64_t> t = in.typed([&] { return types->as_ints(tkey); });
  KILN_CHECK(t.size() >= n, kLoadOp, in.source(), ": ", tkey, " has ", t.size(), " entries for ", n, " tokens");
  for (size_t i = 0; i < n; ++i) v.attrs[i] = attr_of_type(t[i]);
}

void read_merges(const Loader& in, BytePairVocab& v) {
  const std::string key = "tokenizer.ggml.merges";
  const io::GGUFValue& mv = in.need(key);
  const std::vector<std::string> merges = in.typed([&] { return mv.as_strings(key); });
  KILN_CHECK(merges.size() < (size_t{1} << 31), kLoadOp, in.source(), ": ", key, " holds too many merges");
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.empty() ? std::string::npos : m.find(' ', 1);  // a side may be a space itself
    KILN_CHECK(space != std::string::npos, kLoadOp, in.source(), ": ", key, "[", i, "] is ", quoted_text(m),
               ", not two tokens with a space between");
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    const auto l = v.ids.find(left), r = v.ids.find(right);
    KILN_CHECK(l != v.ids.end() && r != v.ids.end(), kLoadOp, in.source(), ": ", key, "[", i, "] is ", quoted_text(m),
               ", which names ", quoted_text(l == v.ids.end() ? left : right), ", no token of tokenizer.ggml.tokens");
    const auto joined = v.ids.find(left + right);
    const uint64_t pair = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    v.merges.emplace(pair, detail::MergeRule{static_cast<int32_t>(i), joined == v.ids.end() ? -1 : joined->second});
  }
}

// The first token with one of these names in the order of the text -> id map, or -1:
// llama.cpp walks a map of this type filled in the same order (token ids ascending,
// from an empty map), so with the same C++ library the two take the same token.
int64_t find_by_name(const BytePairVocab& v, const std::vector<std::string>& names) {
  for (const auto& entry : v.ids)
    if (std::find(names.begin(), names.end(), entry.first) != names.end()) return entry.second;
  return -1;
}

void read_special(const Loader& in, BytePairVocab& v) {
  const int64_t n = v.size();
  // llama.cpp's defaults for a "gpt2" vocabulary: BOS and EOS both id 11, where there is one.
  const int64_t gpt2_default = n > 11 ? 11 : -1;
  v.bos = in.id("tokenizer.ggml.bos_token_id", gpt2_default, n);
  v.eos = in.id("tokenizer.ggml.eos_token_id", gpt2_default, n);
  v.unknown = in.id("tokenizer.ggml.unknown_token_id", -1, n);
  v.padding = in.id("tokenizer.ggml.padding_token_id", -1, n);
  v.add_bos = in.flag("tokenizer.ggml.add_bos_token", false);
  v.add_eos = in.flag("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = in.flag("tokenizer.ggml.add_space_prefix", false);
  KILN_CHECK(!v.add_bos || v.bos >= 0, kLoadOp, in.source(),
             ": tokenizer.ggml.add_bos_token is true but there is no BOS token");
  KILN_CHECK(!v.add_eos || v.eos >= 0, kLoadOp, in.source(),
             ": tokenizer.ggml.add_eos_token is true but there is no EOS token");

  // The ids the file names, else found by text; a token found by text becomes a control
  // token.
  auto slot = [&](const std::string& key, const std::vector<std::string>& names) {
    int64_t id = in.id(key, -1, n);
    if (id < 0) {
      id = find_by_name(v, names);
      if (id >= 0) v.attrs[id] |= kAttrControl;
    }
    return id;
  };
  v.eot = slot("tokenizer.ggml.eot_token_id", kEotNames);
  v.eom = slot("tokenizer.ggml.eom_token_id", kEomNames);
  const int64_t pre_id = in.id("tokenizer.ggml.prefix_token_id", -1, n);  // the old keys, where present
  const int64_t suf_id = in.id("tokenizer.ggml.suffix_token_id", -1, n);
  const int64_t mid_id = in.id("tokenizer.ggml.middle_token_id", -1, n);
  if (pre_id < 0) slot("tokenizer.ggml.fim_pre_token_id", kFimPreNames);
  if (suf_id < 0) slot("tokenizer.ggml.fim_suf_token_id", kFimSufNames);
  if (mid_id < 0) slot("tokenizer.ggml.fim_mid_token_id", kFimMidNames);
  const int64_t fim_pad = slot("tokenizer.ggml.fim_pad_token_id", kFimPadNames);
  const int64_t fim_rep = slot("tokenizer.ggml.fim_rep_token_id", kFimRepNames);
  const int64_t fim_sep = slot("tokenizer.ggml.fim_sep_token_id", kFimSepNames);

  std::set<int64_t> eog;
  for (int64_t id : {fim_pad, fim_rep, fim_sep})
    if (id >= 0) eog.insert(id);
  for (int64_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (kEogNames.count(t)) {
      eog.insert(i);
      v.attrs[i] |= kAttrControl;
    }
    // gpt-oss's channel markers are always written out (llama.cpp makes them user-defined)
    if (t == "<|channel|>" || t == "<|message|>" || t == "<|start|>" || t == "<|constrain|>")
      v.attrs[i] = kAttrUserDefined;
  }
  for (int64_t id : {v.eos, v.eot, v.eom})
    if (id >= 0) eog.insert(id);
  // Where "<|return|>" and "<|call|>" (gpt-oss) or "<|calls|>" and "<|flush|>" (solar-open)
  // end generation, "<|end|>" does not: it is a user-defined token there.
  auto eog_has = [&](const char* text) {
    const auto it = v.ids.find(text);
    return it != v.ids.end() && eog.count(it->second) ? int64_t{it->second} : int64_t{-1};
  };
  const int64_t end_id = eog_has("<|end|>");
  const bool has_call = eog_has("<|call|>") >= 0 || eog_has("<|calls|>") >= 0;
  if (end_id >= 0 && has_call && (eog_has("<|return|>") >= 0 || eog_has("<|flush|>") >= 0)) {
    eog.erase(end_id);
    v.attrs[end_id] = kAttrUserDefined;
  }
  // "</s>" is a normal token where "<|tool_response>" (gemma4) or "<|plamo:eos|>" ends generation.
  const int64_t s_id = eog_has("</s>");
  if (s_id >= 0 && (eog_has("<|tool_response>") >= 0 || eog_has("<|plamo:eos|>") >= 0)) {
    eog.erase(s_id);
    v.attrs[s_id] = kAttrNormal;
  }
  v.eog.assign(eog.begin(), eog.end());
  v.is_eog.assign(n, false);
  for (int64_t id : v.eog) v.is_eog[id] = true;
}

// What a normal token's stored text stands for: each character GPT-2's byte; a character
// that stands for no byte is written as llama.cpp writes it, "[UNK_BYTE_0x<its UTF-8 in
// hex><the token's text>]".
std::string bytes_of_text(const Loader& in, int64_t id, const std::string& text) {
  std::string out;
  std::string utf8;
  for (size_t at = 0; at < text.size();) {
    size_t len = 0;
    bool past_max = false;
    const uint32_t c = detail::decode_code_point_at(text, at, len, past_max);
    // llama.cpp cannot load such a vocabulary either
    KILN_CHECK(!past_max, kLoadOp, in.source(), ": token ", id, " (", quoted_text(text),
               ") holds a UTF-8 sequence past U+10FFFF");
    at += len;
    const int b = detail::byte_of_char(c);
    utf8.clear();
    append_utf8(utf8, c);
    if (b >= 0) {
      out += static_cast<char>(b);
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (unsigned char u : utf8) {
      const char* hex = "0123456789abcdef";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
    out += text + "]";
  }
  return out;
}

void build_tables(const Loader& in, BytePairVocab& v) {
  const int64_t n = v.size();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, detail::byte_to_char(static_cast<uint8_t>(b)));
    const auto it = v.ids.find(ch);
    v.byte_token[b] = it == v.ids.end() ? -1 : it->second;
    for (char c : ch) {
      const auto one = v.ids.find(std::string(1, c));
      if (one != v.ids.end()) v.byte_fallback[b].push_back(one->second);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    if (v.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_order.push_back(static_cast<int32_t>(i));
  // The same call llama.cpp makes (std::sort, longest first, from ascending ids), so that
  // tokens of one length come in the same order.
  std::sort(v.special_order.begin(), v.special_order.end(),
            [&](int32_t a, int32_t b) { return v.tokens[a].size() > v.tokens[b].size(); });
  v.pieces.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = v.attrs[i];
    const std::string& t = v.tokens[i];
    if (a & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      v.pieces[i] = t;
    } else if (a & kAttrNormal) {
      v.pieces[i] = bytes_of_text(in, i, t);
    } else if (a & kAttrByte) {
      // "<0xAB>": llama.cpp reads the two characters after "<0x" as hex
      KILN_CHECK(t.size() >= 3, kLoadOp, in.source(), ": token ", i, " is a byte token but its text ", quoted_text(t),
                 " is not <0xHH>");
      v.pieces[i] = std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    }
  }
}

}  // namespace

BytePairTokenizer BytePairTokenizer::from_gguf(const io::GGUFFile& file) {
  Loader in(file);
  auto v = std::make_shared<BytePairVocab>();
  const std::string model = in.string_of("tokenizer.ggml.model");
  KILN_CHECK(model == "gpt2", kLoadOp, file.source, ": tokenizer.ggml.model is ", quoted_text(model),
             "; this reads byte-level BPE vocabularies ('gpt2') only");
  read_pre(in, *v);
  read_tokens(in, *v);
  read_merges(in, *v);
  read_special(in, *v);
  build_tables(in, *v);
  if (const io::GGUFValue* t = file.find("tokenizer.chat_template"))
    v->chat_template = in.typed([&] { return t->as_string("tokenizer.chat_template"); });
  return BytePairTokenizer(std::move(v));
}

}  // namespace kiln::text
