// text::BytePairTokenizer on SmolLM2-135M's GGUF against llama.cpp (llama-cpp-python),
// from tests/fixtures/byte_bpe.txt (written by make_byte_bpe_fixtures.py, which says what
// it holds): the ids of the hand-made hard cases (byte_bpe_cases.txt), of 10,312 Ding
// dictionary strings and of 9,600 mutations of them drawn here as the script draws them,
// with and without parse_special; the same for three other pre-tokenizers; every token's
// piece; detokenizing; the EOG tokens; the chat template as Jinja2 renders it. Then the
// errors of bad metadata and bad ids, on small vocabularies built in memory.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "text/byte_bpe.h"

using namespace kiln;
using text::BytePairTokenizer;

namespace {

// ---- the fixture and the strings ----

std::string bpe_fixture_path(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + name;
}

std::vector<std::string> bpe_lines(const std::string& name) {
  std::ifstream in(bpe_fixture_path(name));
  REQUIRE_MESSAGE(in.good(), "cannot open ", bpe_fixture_path(name), "; rerun make_byte_bpe_fixtures.py");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}

std::vector<std::string> bpe_split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// The fixtures' escapes: \\ \n \r \t \s (space) \xHH (a byte) \u{HEX} (a code point), \e
// alone for the empty string.
std::string bpe_unescape(const std::string& s) {
  return s == "\\e" ? std::string() : testing::unescape_fixture_text(s);
}

std::string bpe_shown(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char hex[8];
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return "\"" + out + "\"";
}

std::string bpe_ids_text(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

std::vector<int64_t> bpe_ints(const std::string& s) {
  std::vector<int64_t> out;
  std::istringstream in(s);
  for (int64_t v; in >> v;) out.push_back(v);
  return out;
}

uint64_t bpe_fnv64(const std::vector<int64_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int64_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint64_t>(id) >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
  return h;
}

// The fixture's form of a hash: its 8 bytes big-endian in base64url, unpadded (11 characters).
std::string bpe_b64(uint64_t h) {
  const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  for (int bit = 58; bit > -6; bit -= 6) out += digits[bit >= 0 ? (h >> bit) & 63 : (h << -bit) & 63];
  return out;
}

std::string bpe_hex64(uint64_t h) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// splitmix64, as make_byte_bpe_fixtures.py runs it
struct BpeRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

// Each lead byte of a 4-byte sequence past U+10FFFF made 0xFF (llama.cpp aborts on them).
std::string bpe_fix_past_max(std::string s) {
  auto u = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i + 3 < s.size(); ++i) {
    if (u(i) < 0xF4 || u(i) > 0xF7) continue;
    if ((u(i + 1) & 0xC0) != 0x80 || (u(i + 2) & 0xC0) != 0x80 || (u(i + 3) & 0xC0) != 0x80) continue;
    const uint32_t v = ((u(i) & 7u) << 18) | ((u(i + 1) & 0x3Fu) << 12) | ((u(i + 2) & 0x3Fu) << 6) | (u(i + 3) & 0x3Fu);
    if (v > 0x10FFFF) s[i] = static_cast<char>(0xFF);
  }
  return s;
}

struct BpeCorpus {
  std::vector<std::string> strings;  // hard cases, then the dictionary's, then the mutations
  size_t cases = 0, ding = 0, mutations = 0;
  bool complete = false;  // false where /usr/share/trans/de-en is missing
};

const BpeCorpus& bpe_corpus() {
  static const BpeCorpus corpus = [] {
    BpeCorpus c;
    std::map<std::string, std::vector<std::string>> f;
    for (const std::string& line : bpe_lines("byte_bpe.txt")) {
      const auto fields = bpe_split(line, '\t');
      if (fields[0] == "corpus" || fields[0] == "fragments") f[fields[0]] = fields;
    }
    REQUIRE(f["corpus"].size() == 7);
    const size_t every = std::stoull(f["corpus"][1]), entries = std::stoull(f["corpus"][2]);
    const uint64_t seed = std::stoull(f["corpus"][6]);
    std::vector<std::string> fragments;
    for (const std::string& w : bpe_split(f["fragments"].at(1), ' ')) fragments.push_back(bpe_unescape(w));
    for (const std::string& line : bpe_lines("byte_bpe_cases.txt")) c.strings.push_back(bpe_unescape(line));
    c.cases = c.strings.size();
    REQUIRE_MESSAGE(c.cases == std::stoull(f["corpus"][3]), "byte_bpe_cases.txt changed: rerun make_byte_bpe_fixtures.py");
    std::ifstream in("/usr/share/trans/de-en");
    if (!in.good()) {
      MESSAGE("skipped the dictionary and its mutations: /usr/share/trans/de-en is not installed "
              "(apt-get install trans-de-en)");
      return c;
    }
    size_t entry = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t at = line.find(" :: ");
      if (at == std::string::npos || line.find(" :: ", at + 1) != std::string::npos) continue;
      if (entry++ % every != 0) continue;
      c.strings.push_back(line.substr(0, at));
      c.strings.push_back(line.substr(at + 4));
    }
    c.ding = c.strings.size() - c.cases;
    REQUIRE_MESSAGE(c.ding == 2 * entries, "this trans-de-en is not the one the fixture was made from");
    const std::vector<std::string> pool(c.strings.begin(), c.strings.end());
    BpeRng rng{seed};
    const size_t count = std::stoull(f["corpus"][5]);
    for (size_t k = 0; k < count; ++k) {
      std::string s = pool[rng.below(pool.size())];
      const size_t ops = 1 + rng.below(4);
      for (size_t o = 0; o < ops; ++o) {
        const size_t op = rng.below(6);
        if (op == 0) {
          const std::string& frag = fragments[rng.below(fragments.size())];
          s.insert(rng.below(s.size() + 1), frag);
        } else if (op == 1) {
          const size_t p = rng.below(s.size() + 1);
          s.erase(p, rng.below(8));
        } else if (op == 2) {
          const size_t p = rng.below(s.size() + 1);
          s.insert(p, 1, static_cast<char>(rng.below(256)));
        } else if (op == 3) {
          const size_t p = rng.below(s.size() + 1);
          const size_t n = rng.below(16);
          const size_t q = rng.below(s.size() + 1);
          s.insert(q, s.substr(p, n));
        } else if (op == 4) {
          if (!s.empty()) {
            const size_t p = rng.below(s.size());
            s[p] = static_cast<char>(rng.below(256));
          }
        } else {
          const std::string& t = pool[rng.below(pool.size())];
          const std::string& frag = fragments[rng.below(fragments.size())];
          s += frag + t;
        }
      }
      c.strings.push_back(bpe_fix_past_max(s.substr(0, 2000)));
    }
    c.mutations = count;
    c.complete = true;
    return c;
  }();
  return corpus;
}

// GPT-2's character of each byte (bytes ! to ~, ¡ to ¬, ® to ÿ themselves; the rest from
// U+0100 in order).
std::string bpe_byte_char(unsigned b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    uint32_t next = 256;
    for (unsigned c = 0; c < 256; ++c) {
      const bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
      text::append_utf8(t[c], printable ? c : next++);
    }
    return t;
  }();
  return table[b];
}

// ---- the tokenizers ----

const io::GGUFFile* bpe_model_file() {
  static const std::unique_ptr<io::GGUFFile> file = []() -> std::unique_ptr<io::GGUFFile> {
    const std::string dir = testing::pretrained_dir("smollm2-135m");
    if (dir.empty()) return nullptr;
    return std::make_unique<io::GGUFFile>(io::read_gguf(dir + "/SmolLM2-135M-Instruct.Q4_1.gguf"));
  }();
  return file.get();
}

// The file's metadata with some keys replaced or added (value) or removed (nullptr),
// as a GGUF file without tensors.
io::GGUFFile bpe_with_metadata(const io::GGUFMetadata& base,
                               const std::vector<std::pair<std::string, const io::GGUFValue*>>& changes) {
  io::GGUFMetadata meta;
  for (const auto& kv : base) {
    bool changed = false;
    for (const auto& c : changes) changed = changed || c.first == kv.first;
    if (!changed) meta.push_back(kv);
  }
  for (const auto& c : changes)
    if (c.second) meta.emplace_back(c.first, *c.second);
  return io::parse_gguf(io::serialize_gguf(meta, {}), "test.gguf");
}

// SmolLM2's tokenizer, or with another pre-tokenizer as the fixture script writes it.
const BytePairTokenizer* bpe_tokenizer(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<BytePairTokenizer>> cache;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(variant);
  if (it != cache.end()) return it->second.get();
  const io::GGUFFile* f = bpe_model_file();
  if (!f) return nullptr;
  const io::GGUFValue pre = io::GGUFValue::str(variant), yes = io::GGUFValue::flag(true);
  std::unique_ptr<BytePairTokenizer> tok;
  if (variant == "smollm") {
    tok = std::make_unique<BytePairTokenizer>(BytePairTokenizer::from_gguf(*f));
  } else if (variant == "gpt-2") {
    tok = std::make_unique<BytePairTokenizer>(BytePairTokenizer::from_gguf(
        bpe_with_metadata(f->metadata, {{"tokenizer.ggml.pre", &pre}, {"tokenizer.ggml.add_bos_token", &yes}})));
  } else if (variant == "default") {
    tok = std::make_unique<BytePairTokenizer>(BytePairTokenizer::from_gguf(
        bpe_with_metadata(f->metadata, {{"tokenizer.ggml.pre", &pre}, {"tokenizer.ggml.add_eos_token", &yes}})));
  } else {
    tok = std::make_unique<BytePairTokenizer>(
        BytePairTokenizer::from_gguf(bpe_with_metadata(f->metadata, {{"tokenizer.ggml.pre", &pre}})));
  }
  return cache.emplace(variant, std::move(tok)).first->second.get();
}

// Checks the fixture's hashes of one variant over `count` strings (all when 0); returns
// the number of strings compared (each with and without parse_special).
size_t bpe_check_hashes(const std::string& variant, size_t count) {
  const BytePairTokenizer* tok = bpe_tokenizer(variant);
  const BpeCorpus& corpus = bpe_corpus();
  std::vector<std::string> hashes;
  std::map<size_t, std::string> special;
  std::map<std::pair<size_t, int>, std::string> full;
  for (const std::string& line : bpe_lines("byte_bpe.txt")) {
    const auto f = bpe_split(line, '\t');
    if (f.size() < 2 || f[1] != variant) continue;
    if (f[0] == "hashes")
      for (size_t at = 0; at + 11 <= f.at(2).size(); at += 11) hashes.push_back(f[2].substr(at, 11));
    if (f[0] == "special" && !f.at(2).empty())
      for (const std::string& w : bpe_split(f[2], ' ')) special[std::stoull(w)] = w.substr(w.find(':') + 1);
    if (f[0] == "ids") full[{std::stoull(f.at(2)), std::stoi(f.at(3))}] = f.at(4);
  }
  // the strings the script hashed for this variant: all, or the hard cases and the
  // first 1000 mutations
  std::vector<size_t> which;
  for (size_t i = 0; i < corpus.cases; ++i) which.push_back(i);
  if (count == 0) {
    for (size_t i = corpus.cases; i < corpus.strings.size(); ++i) which.push_back(i);
  } else {
    for (size_t i = 0; i < count && corpus.complete; ++i) which.push_back(corpus.cases + corpus.ding + i);
  }
  REQUIRE_MESSAGE(hashes.size() >= which.size(), "byte_bpe.txt has ", hashes.size(), " hashes for ", variant);
  size_t wrong = 0;
  for (size_t k = 0; k < which.size(); ++k) {
    const std::string& s = corpus.strings[which[k]];
    for (int mode = 0; mode < 2; ++mode) {
      const std::vector<int64_t> ids = tok->encode(s, true, mode == 1);
      const auto sp = special.find(k);
      const std::string want = mode == 1 && sp != special.end() ? sp->second : hashes[k];
      if (bpe_b64(bpe_fnv64(ids)) == want) continue;
      if (++wrong > 10) continue;
      const auto known = full.find({k, mode == 1 && full.count({k, 1}) ? 1 : 0});
      MESSAGE(variant, " string ", k, " ", bpe_shown(s), " parse_special=", mode, "\n  llama.cpp: ",
              known == full.end() ? "hash " + want : known->second, "\n  Kiln:      ", bpe_ids_text(ids));
    }
  }
  CHECK_MESSAGE(wrong == 0, wrong, " encodings of ", which.size(),
                " strings (each with and without parse_special) differ from llama.cpp's ids (", variant, ")");
  return which.size();
}

}  // namespace

TEST_CASE("BytePairTokenizer gives llama.cpp's ids for SmolLM2 on every fixture string") {
  if (!bpe_tokenizer("smollm")) return;
  const size_t n = bpe_check_hashes("smollm", 0);
  const BpeCorpus& c = bpe_corpus();
  MESSAGE("compared ", n, " strings (", c.cases, " hard cases, ", c.ding, " dictionary strings, ", c.mutations,
          " mutations), each with and without parse_special");
  if (c.complete) CHECK(n >= 20000);
}

TEST_CASE("BytePairTokenizer's hard cases give llama.cpp's ids in full") {
  const BytePairTokenizer* tok = bpe_tokenizer("smollm");
  if (!tok) return;
  const BpeCorpus& c = bpe_corpus();
  size_t checked = 0;
  for (const std::string& line : bpe_lines("byte_bpe.txt")) {
    const auto f = bpe_split(line, '\t');
    if (f[0] != "ids" || f[1] != "smollm") continue;
    const size_t i = std::stoull(f.at(2));
    const bool parse_special = f.at(3) == "1";
    const std::vector<int64_t> want = bpe_ints(f.at(4)), got = tok->encode(c.strings.at(i), true, parse_special);
    CHECK_MESSAGE(got == want, "case ", i, " ", bpe_shown(c.strings[i]), " parse_special=", parse_special,
                  "\n  llama.cpp: ", f[4], "\n  Kiln:      ", bpe_ids_text(got));
    ++checked;
  }
  CHECK(checked >= c.cases);
  // the header's example
  CHECK(tok->encode("Hello world!") == std::vector<int64_t>{19556, 905, 17});
}

TEST_CASE("BytePairTokenizer's other pre-tokenizers (gpt-2, default, starcoder) give llama.cpp's ids") {
  if (!bpe_tokenizer("smollm")) return;
  for (const char* variant : {"gpt-2", "default", "starcoder"}) {
    CAPTURE(variant);
    bpe_check_hashes(variant, 1000);
  }
  // add_bos_token and add_eos_token, which these copies of the file set
  const BytePairTokenizer* gpt2 = bpe_tokenizer("gpt-2");
  CHECK(gpt2->add_bos());
  CHECK(gpt2->encode("Hi").front() == gpt2->bos_id());
  CHECK(gpt2->encode("Hi", false).front() != gpt2->bos_id());
  CHECK(bpe_tokenizer("default")->encode("Hi").back() == 2);
}

TEST_CASE("BytePairTokenizer's pieces, decode, special tokens and EOG ids are llama.cpp's") {
  const BytePairTokenizer* tok = bpe_tokenizer("smollm");
  if (!tok) return;
  size_t blocks = 0, decodes = 0;
  for (const std::string& line : bpe_lines("byte_bpe.txt")) {
    const auto f = bpe_split(line, '\t');
    if (f[0] == "pieces") {
      const int64_t first = std::stoll(f.at(1));
      uint64_t h[2] = {0xCBF29CE484222325ull, 0xCBF29CE484222325ull};
      for (int64_t i = first; i < std::min<int64_t>(first + 1024, tok->vocab_size()); ++i) {
        for (int special = 0; special < 2; ++special) {
          const std::string p = tok->token_to_piece(i, special == 1);
          const uint32_t n = static_cast<uint32_t>(p.size());
          for (int k = 0; k < 4; ++k) h[special] = (h[special] ^ ((n >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
          for (unsigned char b : p) h[special] = (h[special] ^ b) * 0x100000001B3ull;
        }
      }
      CHECK_MESSAGE(bpe_hex64(h[0]) == f.at(2), "token_to_piece(special=false) of ids ", first, "..", first + 1023);
      CHECK_MESSAGE(bpe_hex64(h[1]) == f.at(3), "token_to_piece(special=true) of ids ", first, "..", first + 1023);
      ++blocks;
    } else if (f[0] == "decode") {
      const BytePairTokenizer* v = bpe_tokenizer(f.at(1));
      const std::vector<int64_t> ids = bpe_ints(f.at(4));
      const std::string got = v->decode(ids, f.at(2) == "1", f.at(3) == "1");
      CHECK_MESSAGE(got == bpe_unescape(f.at(5)), f[1], " decode(", f[4], ", remove_special=", f[2],
                    ", unparse_special=", f[3], ")\n  llama.cpp: ", bpe_shown(bpe_unescape(f[5])),
                    "\n  Kiln:      ", bpe_shown(got));
      ++decodes;
    } else if (f[0] == "eog") {
      CHECK(tok->eog_ids() == bpe_ints(f.at(2)));
    } else if (f[0] == "eot") {
      CHECK(tok->eot_id() == std::stoll(f.at(2)));
    }
  }
  CHECK(blocks == 48);
  CHECK(decodes >= 600);
  CHECK(tok->vocab_size() == 49152);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->unknown_id() == 0);
  CHECK(tok->padding_id() == 2);
  CHECK(!tok->add_bos());
  CHECK(tok->is_eog(2));
  CHECK(!tok->is_eog(1));
  CHECK(!tok->is_eog(-1));
  CHECK(tok->token_to_id("<|im_end|>") == 2);
  CHECK(tok->token_to_id("\xC4\xA0the") == tok->encode(" the").at(0));
  CHECK(tok->token_to_id("no such token") == -1);
  CHECK(tok->id_to_token(1) == "<|im_start|>");
  CHECK(tok->token_attr(1) == text::kAttrControl);
  CHECK(tok->pre_tokenizer() == "smollm");
  CHECK(tok->token_to_piece(2).empty());
  CHECK(tok->token_to_piece(2, true) == "<|im_end|>");
  // parse_special reads control tokens' text as those tokens; without, it is text
  CHECK(tok->encode("<|im_end|>", true, true) == std::vector<int64_t>{2});
  CHECK(tok->encode("<|im_end|>", true, false).size() > 1);
}

TEST_CASE("BytePairTokenizer's pieces, one token at a time, join to decode's text") {
  const BytePairTokenizer* tok = bpe_tokenizer("smollm");
  if (!tok) return;
  const BpeCorpus& c = bpe_corpus();
  for (size_t i = 0; i < c.strings.size(); i += 7) {
    const std::vector<int64_t> ids = tok->encode(c.strings[i], true, true);
    std::string streamed;
    for (int64_t id : ids) streamed += tok->token_to_piece(id, true);  // bytes; may end inside a character
    CHECK(streamed == tok->decode(ids, false, true));
    // llama.cpp writes invalid UTF-8 back as U+FFFD and overlong forms shortened, and drops
    // the bytes whose character is no token (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14,
    // 0x16, 0x1D and bytes that UTF-8 never holds); other valid text comes back as it was
    bool whole = text::valid_utf8(c.strings[i]);
    for (unsigned char b : c.strings[i]) whole = whole && tok->token_to_id(bpe_byte_char(b)) >= 0;
    if (whole)
      CHECK_MESSAGE(streamed == c.strings[i], "string ", i, " ", bpe_shown(c.strings[i]), " came back as ",
                    bpe_shown(streamed));
  }
}

TEST_CASE("BytePairTokenizer gives the same ids from several threads at once") {
  const BytePairTokenizer* tok = bpe_tokenizer("smollm");
  if (!tok) return;
  const BpeCorpus& c = bpe_corpus();
  const size_t n = std::min<size_t>(c.strings.size(), 3000);
  std::vector<std::vector<int64_t>> want(n);
  std::vector<std::string> text(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = tok->encode(c.strings[i], true, i % 2 == 1);
    text[i] = tok->decode(want[i]);
  }
  std::vector<size_t> wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < n; i += 2)
        if (tok->encode(c.strings[i], true, i % 2 == 1) != want[i] || tok->decode(want[i]) != text[i]) ++wrong[t];
    });
  for (std::thread& th : threads) th.join();
  for (size_t w : wrong) CHECK(w == 0);
}

TEST_CASE("BytePairTokenizer renders ChatML chat templates as Jinja2 does") {
  const io::GGUFFile* f = bpe_model_file();
  if (!f) return;
  std::map<std::string, std::string> templates;
  // One tokenizer per template (building one reads the 49,152-token vocabulary and its
  // merges), however many conversations render through it.
  std::map<std::string, std::shared_ptr<const BytePairTokenizer>> with_template;
  size_t renders = 0;
  for (const std::string& line : bpe_lines("byte_bpe.txt")) {
    const auto fields = bpe_split(line, '\t');
    if (fields[0] == "template") templates[fields.at(1)] = bpe_unescape(fields.at(2));
    if (fields[0] != "chat") continue;
    std::vector<text::ChatMessage> messages;
    for (size_t k = 5; k + 1 < fields.size(); k += 2)
      messages.push_back({bpe_unescape(fields[k]), bpe_unescape(fields[k + 1])});
    const std::string name = fields.at(1);
    const bool gen = fields.at(3) == "1";
    std::string got;
    if (name == "file") {
      got = bpe_tokenizer("smollm")->apply_chat_template(messages, gen);
    } else {
      REQUIRE(templates.count(name));
      auto& tok = with_template[name];
      if (!tok) {
        const io::GGUFValue t = io::GGUFValue::str(templates[name]);
        tok = std::make_shared<const BytePairTokenizer>(
            BytePairTokenizer::from_gguf(bpe_with_metadata(f->metadata, {{"tokenizer.chat_template", &t}})));
      }
      got = tok->apply_chat_template(messages, gen);
    }
    CHECK_MESSAGE(got == bpe_unescape(fields.at(4)), "template ", name, ", conversation ", fields.at(2),
                  ", add_generation_prompt ", gen, "\n  Jinja2: ", bpe_shown(bpe_unescape(fields[4])),
                  "\n  Kiln:   ", bpe_shown(got));
    ++renders;
  }
  CHECK(renders >= 48);
  // SmolLM2's default system message comes from the template's text
  const std::string one = bpe_tokenizer("smollm")->apply_chat_template({{"user", "Hi"}}, true);
  CHECK(one ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- without the model: a small vocabulary built in memory ----

namespace {

// 256 byte tokens, then "<|im_start|>" "<|im_end|>" as control tokens, then the merges'
// results: "Ġt" "he" "Ġthe" "in".
io::GGUFMetadata bpe_small_metadata() {
  std::vector<std::string> tokens;
  std::vector<io::GGUFValue> types;
  for (unsigned b = 0; b < 256; ++b) tokens.push_back(bpe_byte_char(b));
  tokens.insert(tokens.end(), {"<|im_start|>", "<|im_end|>", "\xC4\xA0t", "he", "\xC4\xA0the", "in"});
  for (size_t i = 0; i < tokens.size(); ++i) types.push_back(io::GGUFValue::i32(i == 256 || i == 257 ? 3 : 1));
  return {
      {"general.architecture", io::GGUFValue::str("llama")},
      {"tokenizer.ggml.model", io::GGUFValue::str("gpt2")},
      {"tokenizer.ggml.pre", io::GGUFValue::str("smollm")},
      {"tokenizer.ggml.tokens", io::GGUFValue::strings(tokens)},
      {"tokenizer.ggml.token_type", io::GGUFValue::array(io::GGUFValueType::Int32, types)},
      {"tokenizer.ggml.merges", io::GGUFValue::strings({"\xC4\xA0 t", "h e", "\xC4\xA0t he", "i n"})},
      {"tokenizer.ggml.bos_token_id", io::GGUFValue::u32(256)},
      {"tokenizer.ggml.eos_token_id", io::GGUFValue::u32(257)},
      {"tokenizer.chat_template",
       io::GGUFValue::str("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")},
  };
}

BytePairTokenizer bpe_small(const std::vector<std::pair<std::string, const io::GGUFValue*>>& changes = {}) {
  return BytePairTokenizer::from_gguf(bpe_with_metadata(bpe_small_metadata(), changes));
}

}  // namespace

TEST_CASE("BytePairTokenizer on a small vocabulary: merges, bytes, special tokens, EOG") {
  const BytePairTokenizer tok = bpe_small();
  CHECK(tok.vocab_size() == 262);
  const int64_t the = tok.token_to_id("\xC4\xA0the"), in = tok.token_to_id("in");
  const int64_t sp = tok.token_to_id(bpe_byte_char(' ')), a = tok.token_to_id("a");
  CHECK(tok.encode("a the in") == std::vector<int64_t>{a, the, sp, in});
  CHECK(tok.encode("<|im_end|>", true, true) == std::vector<int64_t>{257});
  CHECK(tok.eot_id() == 257);  // found by its text
  CHECK(tok.eog_ids() == std::vector<int64_t>{257});
  for (const std::string& s : {std::string("Gr\xC3\xBC\xC3\x9F" "e 123 \xF0\x9F\x98\x80"), std::string("x\n\n  y\t")}) {
    const std::vector<int64_t> ids = tok.encode(s);
    CHECK(tok.decode(ids) == s);
  }
  // invalid UTF-8 becomes U+FFFD; overlong forms are written back shortened
  CHECK(tok.decode(tok.encode("\xFF")) == "\xEF\xBF\xBD");
  CHECK(tok.decode(tok.encode("\xC0\x80")) == std::string(1, '\0'));
  CHECK(tok.decode(tok.encode(std::string("\xF4\x90\x80\x80", 4))) == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(tok.apply_chat_template({{"user", "hi"}}, false) == "<|im_start|>user\nhi<|im_end|>\n");
}

TEST_CASE("BytePairTokenizer refuses bad metadata, naming the key") {
  const io::GGUFValue llama = io::GGUFValue::str("llama"), odd_pre = io::GGUFValue::str("qwen2");
  const io::GGUFValue number = io::GGUFValue::u32(7), big = io::GGUFValue::u32(999), yes = io::GGUFValue::flag(true);
  const io::GGUFValue bad_merge = io::GGUFValue::strings({"h e", "x zz"}), no_space = io::GGUFValue::strings({"he"});
  const io::GGUFValue twice = io::GGUFValue::strings({"a", "b", "a"}), none = io::GGUFValue::strings({});
  const io::GGUFValue short_types = io::GGUFValue::array(io::GGUFValueType::Int32, {io::GGUFValue::i32(1)});
  const char* op = "[BytePairTokenizer::from_gguf]";
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.tokens", nullptr}}), "no metadata key tokenizer.ggml.tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.merges", nullptr}}), "no metadata key tokenizer.ggml.merges");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.model", nullptr}}), "no metadata key tokenizer.ggml.model");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.model", &llama}}), "tokenizer.ggml.model is 'llama'", "'gpt2'");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.pre", &odd_pre}}), "tokenizer.ggml.pre is 'qwen2'", "smollm");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.tokens", &number}}), "tokenizer.ggml.tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.tokens", &none}}), "tokenizer.ggml.tokens holds no tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.tokens", &twice}, {"tokenizer.ggml.token_type", nullptr},
                                    {"tokenizer.ggml.merges", &none}, {"tokenizer.ggml.bos_token_id", nullptr},
                                    {"tokenizer.ggml.eos_token_id", nullptr}}),
                     "holds 'a' twice (ids 0 and 2)");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.merges", &bad_merge}}), "tokenizer.ggml.merges[1] is 'x zz'",
                     "names 'zz', no token");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.merges", &no_space}}), "tokenizer.ggml.merges[0] is 'he'",
                     "not two tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.merges", &number}}), "tokenizer.ggml.merges");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.token_type", &short_types}}),
                     "tokenizer.ggml.token_type has 1 entries for 262 tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.bos_token_id", &big}}), "tokenizer.ggml.bos_token_id is 999",
                     "262 tokens");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.add_bos_token", &number}}), "tokenizer.ggml.add_bos_token");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.ggml.eot_token_id", &llama}}), "tokenizer.ggml.eot_token_id");
  // defaults where keys are absent: BOS/EOS id 11 (llama.cpp's for gpt2), pre-tokenizer "default"
  const BytePairTokenizer plain = bpe_small({{"tokenizer.ggml.bos_token_id", nullptr},
                                            {"tokenizer.ggml.pre", nullptr}, {"tokenizer.ggml.token_type", nullptr}});
  CHECK(plain.bos_id() == 11);
  CHECK(plain.pre_tokenizer() == "default");
  CHECK(plain.token_attr(256) == text::kAttrNormal);
  CHECK(bpe_small({{"tokenizer.ggml.add_bos_token", &yes}}).encode("a").front() == 256);
}

TEST_CASE("BytePairTokenizer refuses bad ids and chat templates it cannot render") {
  const BytePairTokenizer tok = bpe_small();
  CHECK_ERROR_STARTS("[BytePairTokenizer::token_to_piece]", tok.token_to_piece(262), "token id 262",
                     "vocabulary of 262 tokens");
  CHECK_ERROR_STARTS("[BytePairTokenizer::token_to_piece]", tok.token_to_piece(-1), "token id -1");
  CHECK_ERROR_STARTS("[BytePairTokenizer::decode]", tok.decode({1, 2, 1000}), "token id 1000");
  CHECK_ERROR_STARTS("[BytePairTokenizer::id_to_token]", tok.id_to_token(5000), "token id 5000");
  const io::GGUFValue llama3 = io::GGUFValue::str(
      "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}");
  const io::GGUFValue set = io::GGUFValue::str("{% set x = 1 %}<|im_start|>{{ x }}");
  const io::GGUFValue call = io::GGUFValue::str("<|im_start|>{{ raise_exception('no') }}");
  const io::GGUFValue open_tag = io::GGUFValue::str("<|im_start|>{{ messages");
  const io::GGUFValue unclosed = io::GGUFValue::str("<|im_start|>{% if add_generation_prompt %}x");
  const char* op = "[BytePairTokenizer::apply_chat_template]";
  const std::vector<text::ChatMessage> msgs = {{"user", "hi"}};
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", nullptr}}).apply_chat_template(msgs, true),
                     "no tokenizer.chat_template");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", &llama3}}).apply_chat_template(msgs, true),
                     "Llama 3 family", "only ChatML");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", &set}}).apply_chat_template(msgs, true),
                     "the statement 'set'", "offset");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", &call}}).apply_chat_template(msgs, true),
                     "raise_exception()");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", &open_tag}}).apply_chat_template(msgs, true),
                     "no closing }}");
  CHECK_ERROR_STARTS(op, bpe_small({{"tokenizer.chat_template", &unclosed}}).apply_chat_template(msgs, true),
                     "an if closed by 'the end of the template'");
}
