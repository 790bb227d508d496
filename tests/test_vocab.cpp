// data::Vocab's special tokens where a file puts them: BERT's vocab.txt ([PAD] 0, [UNK]
// 100, [CLS] 101, [SEP] 102), roles a vocabulary does not have, the errors of load (each
// naming the file and the line), round trips through save and load, and arbitrary bytes
// (an exception, never a crash). (Vocab's encode and decode: test_transformer.)
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::ScratchDir;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

std::string lines(const std::vector<std::string>& tokens, const std::string& end = "\n") {
  std::string s;
  for (const std::string& t : tokens) s += t + end;
  return s;
}

// A vocabulary laid out as BERT's vocab.txt: [PAD], 99 [unusedN], [UNK] 100, [CLS] 101,
// [SEP] 102, [MASK] 103, then words.
std::vector<std::string> bert_like_tokens() {
  std::vector<std::string> t{"[PAD]"};
  for (int i = 0; i < 99; ++i) t.push_back("[unused" + std::to_string(i) + "]");
  for (const char* w : {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", "!"}) t.push_back(w);
  return t;
}

const data::SpecialTokens kBert{.pad = "[PAD]", .bos = "[CLS]", .eos = "[SEP]", .unk = "[UNK]"};

std::vector<int64_t> role_ids(const data::Vocab& v) { return {v.pad_id(), v.bos_id(), v.eos_id(), v.unk_id()}; }

}  // namespace

TEST_CASE("Vocab: Vocab() and build put the specials first, at ids 0-3, as before") {
  data::Vocab v;
  CHECK(v.words() == std::vector<std::string>{"P", "S", "E", "<unk>"});
  CHECK(role_ids(v) == std::vector<int64_t>{0, 1, 2, 3});
  for (int64_t id = 0; id < 4; ++id) CHECK(v.is_special(id));
  CHECK_FALSE(v.is_special(4));
  CHECK_FALSE(v.is_special(-1));
  data::Vocab b = data::Vocab::build({"a b", "b c"}, 1, kBert);
  CHECK(b.words() == std::vector<std::string>{"[PAD]", "[CLS]", "[SEP]", "[UNK]", "a", "b", "c"});
  CHECK(role_ids(b) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(b.encode("a x", true, true) == std::vector<int64_t>{1, 4, 3, 2});
}

TEST_CASE("Vocab::load: a BERT-like vocab.txt keeps its special tokens at their lines") {
  ScratchDir dir("vocab_bert");
  const std::vector<std::string> tokens = bert_like_tokens();
  for (const std::string end : {"\n", "\r\n"}) {
    CAPTURE(end.size());
    write_file(dir / "vocab.txt", lines(tokens, end));
    data::Vocab v = data::Vocab::load(dir / "vocab.txt", kBert);
    CHECK(v.size() == static_cast<int64_t>(tokens.size()));
    CHECK(v.words() == tokens);
    CHECK(v.pad_id() == 0);
    CHECK(v.unk_id() == 100);
    CHECK(v.bos_id() == 101);
    CHECK(v.eos_id() == 102);
    CHECK(v.id("[MASK]") == 103);
    CHECK(v.id("the") == 104);
    for (int64_t id : {0, 100, 101, 102}) CHECK(v.is_special(id));
    for (int64_t id : {1, 99, 103, 104, -1, 1000}) CHECK_FALSE(v.is_special(id));
    CHECK(v.encode("the dog sat", true, true) == std::vector<int64_t>{101, 104, 100, 106, 102});
    CHECK(v.decode({101, 104, 105, 0, 102, 106}) == "the cat");  // pad and bos dropped, stops at eos
    CHECK(v.decode({101, 104, 102}, false) == "[CLS] the [SEP]");
  }
  SUBCASE("a file whose last line has no newline") {
    std::string text = lines(tokens);
    text.pop_back();
    write_file(dir / "vocab.txt", text);
    CHECK(data::Vocab::load(dir / "vocab.txt", kBert).words() == tokens);
  }
  SUBCASE("roles the vocabulary lacks: empty in SpecialTokens, an error naming the role when asked for") {
    data::Vocab v = data::Vocab::load(dir / "vocab.txt", {.pad = "[PAD]", .bos = "", .eos = "", .unk = "[UNK]"});
    CHECK(v.pad_id() == 0);
    CHECK(v.unk_id() == 100);
    CHECK_FALSE(v.has_bos());
    CHECK_FALSE(v.has_eos());
    CHECK(v.has_pad());
    CHECK(v.has_unk());
    CHECK_ERROR_STARTS("[Vocab::bos_id]", v.bos_id(), "no bos token", "SpecialTokens::bos is empty");
    CHECK_ERROR_STARTS("[Vocab::eos_id]", v.eos_id(), "no eos token");
    CHECK_ERROR_STARTS("[Vocab::bos_id]", v.encode("the", true), "bos");
    CHECK(v.encode("the cat") == std::vector<int64_t>{104, 105});
    CHECK_FALSE(v.is_special(101));  // [CLS] plays no role here
    CHECK(v.decode({101, 104, 102, 105}) == "[CLS] the [SEP] cat");  // no eos to stop at
  }
  SUBCASE("no unk token: an unknown word is an error naming it") {
    data::Vocab v = data::Vocab::load(dir / "vocab.txt", {.pad = "[PAD]", .bos = "[CLS]", .eos = "[SEP]", .unk = ""});
    CHECK(v.id("cat") == 105);
    CHECK_ERROR_STARTS("[Vocab::id]", v.id("dog"), "'dog'", "no unk token");
    CHECK_ERROR_STARTS("[Vocab::id]", v.encode("the dog"), "'dog'");
    CHECK_ERROR_STARTS("[Vocab::unk_id]", v.unk_id(), "no unk token");
    CHECK_ERROR_STARTS("[Vocab::encode]", v.encode_strict("the dog"), "'dog'");
  }
  SUBCASE("no specials at all") {
    data::Vocab v = data::Vocab::load(dir / "vocab.txt", {.pad = "", .bos = "", .eos = "", .unk = ""});
    CHECK(v.size() == static_cast<int64_t>(tokens.size()));
    for (int64_t id = 0; id < v.size(); ++id) CHECK_FALSE(v.is_special(id));
    CHECK(v.decode({0, 104}) == "[PAD] the");
  }
}

TEST_CASE("Vocab: save then load gives the same ids and roles") {
  ScratchDir dir("vocab_round_trip");
  SUBCASE("built with the default specials") {
    data::Vocab v = data::Vocab::build({"ich mochte ein bier", "ich mochte ein cola"});
    v.save(dir / "v.txt");
    data::Vocab back = data::Vocab::load(dir / "v.txt");
    CHECK(back.words() == v.words());
    CHECK(role_ids(back) == role_ids(v));
  }
  SUBCASE("built without bos and eos") {
    const data::SpecialTokens s{.pad = "<pad>", .bos = "", .eos = "", .unk = "<unk>"};
    data::Vocab v = data::Vocab::build({"x y z"}, 1, s);
    CHECK(v.words() == std::vector<std::string>{"<pad>", "<unk>", "x", "y", "z"});
    v.save(dir / "v.txt");
    data::Vocab back = data::Vocab::load(dir / "v.txt", s);
    CHECK(back.words() == v.words());
    CHECK(back.pad_id() == 0);
    CHECK(back.unk_id() == 1);
    CHECK_FALSE(back.has_bos());
  }
  SUBCASE("a BERT-like file, after words are added") {
    write_file(dir / "bert.txt", lines(bert_like_tokens()));
    data::Vocab v = data::Vocab::load(dir / "bert.txt", kBert);
    CHECK(v.add("dog") == 109);
    v.save(dir / "again.txt");
    data::Vocab back = data::Vocab::load(dir / "again.txt", kBert);
    CHECK(back.words() == v.words());
    CHECK(role_ids(back) == std::vector<int64_t>{0, 101, 102, 100});
    CHECK(back.id("dog") == 109);
  }
}

TEST_CASE("Vocab::load: errors name the file and the line") {
  ScratchDir dir("vocab_errors");
  const std::string path = dir / "vocab.txt";
  auto load_text = [&](const std::string& text, data::SpecialTokens s = {}) {
    write_file(path, text);
    return data::Vocab::load(path, s);
  };
  // A special token the caller names that the file lacks.
  CHECK_ERROR_STARTS("[Vocab::load]", load_text(lines(bert_like_tokens())), path.c_str(), "no line 'P'", "pad");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("[PAD]\n[UNK]\nthe\n", kBert), path.c_str(), "'[CLS]'", "bos");
  // Lines: empty, blank, two words, a token twice.
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\n\nE\n<unk>\n"), path.c_str(), "line 3 is empty");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\nE\n<unk>\n \t\n"), path.c_str(), "line 5 is empty");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\nE\n<unk>\n\n"), path.c_str(), "line 5 is empty");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\nE\n<unk>\nein bier\n"), path.c_str(), "line 5", "2 words",
                     "'ein bier'");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\nbier\nE\n<unk>\nbier\n"), path.c_str(), "line 6", "'bier'",
                     "appears twice", "first on line 3");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\nS\nE\nP\n<unk>\n"), path.c_str(), "line 4", "'P'", "appears twice");
  // Control bytes are shown escaped; a long line is cut.
  CHECK_ERROR_STARTS("[Vocab::load]", load_text(std::string("P\nS\nE\n<unk>\na\x01 b\n")), "'a\\x01 b'");
  CHECK_ERROR_STARTS("[Vocab::load]", load_text("P\n" + std::string(500, 'x') + " y\n"), "(502 bytes)");
  // Files that cannot be read.
  CHECK_ERROR_STARTS("[Vocab::load]", load_text(""), path.c_str(), "is empty");
  CHECK_ERROR_STARTS("[Vocab::load]", data::Vocab::load(dir / "missing.txt"), "cannot open", "missing.txt");
  CHECK_ERROR_STARTS("[Vocab::load]", data::Vocab::load(dir.path.string()), "is a directory");
  // Special tokens that cannot be: checked before the file is read.
  CHECK_ERROR_STARTS("[Vocab::load]", data::Vocab::load(dir / "missing.txt", {.pad = "a b"}), "pad",
                     "one word without spaces", "'a b'");
  CHECK_ERROR_STARTS("[Vocab::load]", data::Vocab::load(dir / "missing.txt", {.bos = "X", .eos = "X"}),
                     "'X' is given as both the bos and the eos token");
  CHECK_ERROR_STARTS("[Vocab]", data::Vocab({.unk = " <unk>"}), "unk", "one word");
  CHECK_ERROR_STARTS("[Vocab]", data::Vocab({.pad = "E"}), "'E' is given as both the pad and the eos token");
  CHECK_ERROR_STARTS("[Vocab::add]", data::Vocab().add("a b"), "one word without spaces");
  CHECK_ERROR_STARTS("[Vocab::add]", data::Vocab().add(""), "one word");
}

TEST_CASE("Vocab::load: arbitrary bytes give a kiln::Error or a consistent vocabulary, never a crash") {
  ScratchDir dir("vocab_fuzz");
  const std::string path = dir / "vocab.txt";
  std::mt19937 rng(20261128);
  const std::string valid = lines(bert_like_tokens());
  // Bytes a vocabulary file's parser meets: newlines, CR, spaces, tabs, NUL, high bytes.
  const std::string alphabet = std::string("\n\n\n\r \t") + '\0' + "\x7f\xff\xc3\xa9" + "ab[]PSE<unk>";
  int loaded = 0, rejected = 0;
  for (int round = 0; round < 600; ++round) {
    std::string bytes;
    const int kind = round % 3;
    if (kind == 0) {  // random bytes of any value
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    } else if (kind == 1) {  // random tokens of the bytes that matter
      bytes.resize(rng() % 300);
      for (char& c : bytes) c = alphabet[rng() % alphabet.size()];
    } else {  // a valid file, mutated: bytes changed, inserted, cut
      bytes = valid;
      for (unsigned n = rng() % 4 + 1; n > 0; --n) {
        const size_t at = rng() % bytes.size();
        switch (rng() % 3) {
          case 0: bytes[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: bytes.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          default: bytes.resize(at + 1); break;
        }
      }
    }
    write_file(path, bytes);
    const data::SpecialTokens specials = kind == 2 ? kBert : data::SpecialTokens{.pad = "", .bos = "", .eos = "", .unk = ""};
    try {
      data::Vocab v = data::Vocab::load(path, specials);
      ++loaded;
      // What loads is consistent: each word at its id, the roles at their tokens.
      for (int64_t id = 0; id < v.size(); ++id) REQUIRE(v.id(v.word(id)) == id);
      if (kind == 2) {
        CHECK(v.word(v.pad_id()) == "[PAD]");
        CHECK(v.word(v.unk_id()) == "[UNK]");
      }
    } catch (const Error& e) {
      ++rejected;
      REQUIRE(std::string(e.what()).rfind("[Vocab::load]", 0) == 0);
    }
  }
  MESSAGE(loaded << " inputs loaded, " << rejected << " rejected");
  CHECK(loaded > 0);
  CHECK(rejected > 0);
}
