// BytePairTokenizer: encode (special tokens cut out, words split, merges applied),
// token_to_piece and decode, as llama.cpp's llama_tokenize and llama_detokenize.
#include "text/byte_bpe.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/byte_bpe_vocab.h"
#include "text/chat_template.h"
#include "text/utf8.h"

namespace kiln::text {

namespace {

using detail::BytePairVocab;

// A stretch of the input: raw text, or one special token cut out of it.
struct Fragment {
  int32_t token;  // -1 for text
  size_t begin, size;
};

// Cuts the texts of the special tokens out of `text`, longest token first; each token
// splits every text fragment at each of its occurrences, left to right.
std::vector<Fragment> cut_special(const BytePairVocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : v.special_order) {
    // without parse_special only user-defined tokens are cut out
    if (!parse_special && (v.attrs[id] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& t = v.tokens[id];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      const size_t end = f.begin + f.size;
      while (pos < end) {
        const size_t m = text.substr(pos, end - pos).find(t);
        if (m == std::string_view::npos) break;
        if (m > 0) next.push_back({-1, pos, m});
        next.push_back({id, pos + m, t.size()});
        pos += m + t.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags.swap(next);
  }
  return frags;
}

// One call's scratch space (each call its own: const calls may run in parallel).
struct Scratch {
  std::vector<uint32_t> cps;
  std::vector<size_t> ends;
  std::string bytes;
  struct Symbol {
    int32_t id;  // its token, -1 where its text is none
    int32_t prev, next;
    uint32_t begin, size;  // bytes of the word; size 0 once merged into its left neighbour
  };
  std::vector<Symbol> syms;
  struct Pair {
    int32_t rank, left, right, left_id, right_id, result;
    // std::priority_queue pops its largest: the lowest rank, then the leftmost pair
    bool operator<(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Pair> heap;
};

// Byte-level BPE over one word's bytes, appending its ids.
void merge_word(const BytePairVocab& v, Scratch& s, std::string_view word, std::vector<int64_t>& out) {
  const int32_t n = static_cast<int32_t>(word.size());
  s.syms.resize(n);
  for (int32_t i = 0; i < n; ++i)
    s.syms[i] = {v.byte_token[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, static_cast<uint32_t>(i), 1};
  s.heap.clear();
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t a = s.syms[l].id, b = s.syms[r].id;
    if (a < 0 || b < 0) return;  // merges join tokens only
    const auto it = v.merges.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    if (it == v.merges.end()) return;
    s.heap.push_back({it->second.rank, l, r, a, b, it->second.result});
    std::push_heap(s.heap.begin(), s.heap.end());
  };
  for (int32_t i = 1; i < n; ++i) push(i - 1, i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end());
    const Scratch::Pair p = s.heap.back();
    s.heap.pop_back();
    Scratch::Symbol& l = s.syms[p.left];
    Scratch::Symbol& r = s.syms[p.right];
    // a pair whose sides have changed since it was queued is stale
    if (l.size == 0 || r.size == 0 || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
    l.id = p.result;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) s.syms[r.next].prev = p.left;
    push(l.prev, p.left);
    push(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0 && n > 0; i = s.syms[i].next) {
    const Scratch::Symbol& sym = s.syms[i];
    if (sym.id >= 0) {
      out.push_back(sym.id);
      continue;
    }
    for (uint32_t k = 0; k < sym.size; ++k)
      for (int32_t id : v.byte_fallback[static_cast<uint8_t>(word[sym.begin + k])]) out.push_back(id);
  }
}

void encode_text(const BytePairVocab& v, Scratch& s, std::string_view text, std::vector<int64_t>& out) {
  detail::decode_code_points(text, s.cps);
  detail::split_words(v.split, s.cps, s.ends);
  size_t begin = 0;
  for (size_t end : s.ends) {
    // the word's UTF-8 as llama.cpp writes its code points back (so C0 80 is one 0 byte)
    s.bytes.clear();
    for (size_t i = begin; i < end; ++i) append_utf8(s.bytes, s.cps[i]);
    merge_word(v, s, s.bytes, out);
    begin = end;
  }
}

int64_t checked(const BytePairVocab& v, int64_t id, const char* op) {
  KILN_CHECK(id >= 0 && id < v.size(), op, "token id ", id, " is outside the vocabulary of ", v.size(), " tokens");
  return id;
}

// llama.cpp's clean-up of spaces before punctuation and in contractions (byte_bpe.h),
// in place over `t` as llama_detokenize does it.
void clean_spaces(std::string& t) {
  size_t total = t.empty() ? 0 : 1;
  for (size_t i = 1, n = t.size(); i < n; ++i) {  // " ?", " !", " .", " ,"
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    t[total++] = x;
  }
  t.resize(total);
  total = t.empty() ? 0 : 1;
  for (size_t i = 1, n = t.size(); i < n; ++i) {  // " ' " -> "'"
    const char x = t[i];
    if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --total;
      t[++i] = '\0';  // the next space, skipped; as llama.cpp, it stays in the buffer as 0
    }
    t[total++] = x;
  }
  t.resize(total);
  total = t.empty() ? 0 : 1;
  for (size_t i = 1, n = t.size(); i < n; ++i) {  // " 's", " 'm", " 're", " 've"
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    t[total++] = x;
  }
  t.resize(total);
}

}  // namespace

std::vector<int64_t> BytePairTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const BytePairVocab& v = *vocab_;
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && v.add_bos) out.push_back(v.bos);
  Scratch s;
  for (const Fragment& f : cut_special(v, text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      encode_text(v, s, text.substr(f.begin, f.size), out);
    }
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string BytePairTokenizer::token_to_piece(int64_t id, bool special) const {
  const BytePairVocab& v = *vocab_;
  checked(v, id, "BytePairTokenizer::token_to_piece");
  if (!special && (v.attrs[id] & (kAttrControl | kAttrUnknown))) return "";
  return v.pieces[id];
}

std::string BytePairTokenizer::decode(const std::vector<int64_t>& ids, bool remove_special, bool unparse_special) const {
  const BytePairVocab& v = *vocab_;
  size_t first = 0, last = ids.size();
  bool remove_space = v.add_space_prefix;  // the space the encoder would have put first
  if (remove_special && v.add_bos && last > first && ids[first] == v.bos) ++first, remove_space = false;
  if (remove_special && v.add_eos && last > first && ids[last - 1] == v.eos) --last;
  std::string out;
  for (size_t i = first; i < last; ++i) {
    checked(v, ids[i], "BytePairTokenizer::decode");
    if (!unparse_special && (v.attrs[ids[i]] & (kAttrControl | kAttrUnknown))) {
      remove_space = false;
      continue;
    }
    const std::string& piece = v.pieces[ids[i]];
    out.append(piece, remove_space && !piece.empty() && piece[0] == ' ' ? 1 : 0);
    remove_space = false;
  }
  if (v.clean_spaces) clean_spaces(out);
  return out;
}

std::string BytePairTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                                   bool add_generation_prompt) const {
  const BytePairVocab& v = *vocab_;
  return render_chat_template(v.chat_template, messages, add_generation_prompt, v.bos >= 0 ? v.tokens[v.bos] : "",
                              v.eos >= 0 ? v.tokens[v.eos] : "");
}

int64_t BytePairTokenizer::vocab_size() const { return vocab_->size(); }
int64_t BytePairTokenizer::bos_id() const { return vocab_->bos; }
int64_t BytePairTokenizer::eos_id() const { return vocab_->eos; }
int64_t BytePairTokenizer::eot_id() const { return vocab_->eot; }
int64_t BytePairTokenizer::eom_id() const { return vocab_->eom; }
int64_t BytePairTokenizer::unknown_id() const { return vocab_->unknown; }
int64_t BytePairTokenizer::padding_id() const { return vocab_->padding; }
bool BytePairTokenizer::add_bos() const { return vocab_->add_bos; }
bool BytePairTokenizer::add_eos() const { return vocab_->add_eos; }
const std::vector<int64_t>& BytePairTokenizer::eog_ids() const { return vocab_->eog; }
bool BytePairTokenizer::is_eog(int64_t id) const { return id >= 0 && id < vocab_->size() && vocab_->is_eog[id]; }
uint32_t BytePairTokenizer::token_attr(int64_t id) const {
  return vocab_->attrs[checked(*vocab_, id, "BytePairTokenizer::token_attr")];
}
int64_t BytePairTokenizer::token_to_id(std::string_view text) const {
  const auto it = vocab_->ids.find(std::string(text));
  return it == vocab_->ids.end() ? -1 : it->second;
}
const std::string& BytePairTokenizer::id_to_token(int64_t id) const {
  return vocab_->tokens[checked(*vocab_, id, "BytePairTokenizer::id_to_token")];
}
const std::string& BytePairTokenizer::pre_tokenizer() const { return vocab_->pre; }
const std::string& BytePairTokenizer::chat_template() const { return vocab_->chat_template; }

}  // namespace kiln::text
