// text::Tokenizer against PyPI's `tokenizers` on all-MiniLM-L6-v2's tokenizer.json
// (tests/fixtures/minilm_tokenizer.txt, written by make_minilm_fixtures.py): a hash of
// every encoding of 20,624 dictionary strings, and ~700 adversarial and random strings,
// truncation, padding, pairs and decoding in full; and tokenizer.json's errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "text/tokenizer.h"

using namespace kiln;
using kiln::testing::unescape_fixture_text;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& w : split(s, ' '))
    if (!w.empty()) out.push_back(w);
  return out;
}

std::vector<int64_t> ints(const std::string& s) {
  std::vector<int64_t> out;
  for (const std::string& w : words(s)) out.push_back(std::stoll(w));
  return out;
}

std::vector<std::string> fixture_lines() {
  std::ifstream in(std::string(std::getenv("KILN_FIXTURES")) + "/minilm_tokenizer.txt");
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

// The tokenizer set up as a fixture's SETTINGS field says (see the script).
text::Tokenizer configured(const text::Tokenizer& base, const std::string& settings, bool& add_special) {
  text::Tokenizer t = base;
  t.no_padding();
  add_special = true;
  for (const std::string& s : words(settings)) {
    if (s == "-") continue;
    if (s == "notrunc") {
      t.no_truncation();
    } else if (s == "nopad") {
      t.no_padding();
    } else if (s == "nospecial") {
      add_special = false;
    } else if (s.rfind("trunc=", 0) == 0) {
      const std::vector<std::string> f = split(s.substr(6), ':');
      text::TruncationOptions o;
      o.max_length = std::stoll(f.at(0));
      using S = text::TruncationOptions::Strategy;
      o.strategy = f.at(1) == "LongestFirst" ? S::LongestFirst : f.at(1) == "OnlyFirst" ? S::OnlyFirst : S::OnlySecond;
      o.direction = f.at(2) == "Left" ? text::TruncationOptions::Direction::Left : text::TruncationOptions::Direction::Right;
      t.enable_truncation(o);
    } else if (s.rfind("pad=", 0) == 0) {
      const std::vector<std::string> f = split(s.substr(4), ':');
      text::PaddingOptions o;
      if (std::stoll(f.at(0)) > 0) o.length = std::stoll(f.at(0));
      o.direction = f.at(1) == "Left" ? text::PaddingOptions::Direction::Left : text::PaddingOptions::Direction::Right;
      o.pad_to_multiple_of = std::stoll(f.at(2));
      t.enable_padding(o);
    } else {
      FAIL("unknown setting ", s);
    }
  }
  return t;
}

// Compares one encoding with a "case" line's fields.
void check_case(const text::Encoding& e, const std::vector<std::string>& f) {
  CHECK(e.ids == ints(f.at(4)));
  CHECK(e.type_ids == ints(f.at(5)));
  std::vector<std::string> tokens;
  for (const std::string& t : words(f.at(6))) tokens.push_back(unescape_fixture_text(t));
  CHECK(e.tokens == tokens);
  std::vector<std::pair<size_t, size_t>> offsets;
  for (const std::string& o : words(f.at(7))) {
    const size_t colon = o.find(':');
    offsets.emplace_back(std::stoull(o.substr(0, colon)), std::stoull(o.substr(colon + 1)));
  }
  CHECK(e.offsets == offsets);
  CHECK(e.attention_mask == ints(f.at(8)));
  CHECK(e.special_tokens_mask == ints(f.at(9)));
}

uint32_t fnv32(const text::Encoding& e) {
  uint32_t h = 0x811C9DC5u;
  auto add = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i))) * 0x01000193u;
  };
  for (int64_t id : e.ids) add(id);
  for (const auto& [b, end] : e.offsets) {
    add(static_cast<int64_t>(b));
    add(static_cast<int64_t>(end));
  }
  for (int64_t t : e.type_ids) add(t);
  return h;
}

}  // namespace

TEST_CASE("Tokenizer gives tokenizers' encodings of 20,624 dictionary strings") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  const std::string corpus = "/usr/share/trans/de-en";
  if (!std::filesystem::exists(corpus)) {
    MESSAGE("skipped: ", corpus, " is not installed (apt-get install trans-de-en)");
    return;
  }
  text::Tokenizer tok = text::Tokenizer::from_file(dir + "/tokenizer.json");
  tok.no_padding();
  std::vector<std::string> header, hashes;
  for (const std::string& line : fixture_lines()) {
    if (line.rfind("corpus\t", 0) == 0) header = split(line, '\t');
    if (line.rfind("hashes\t", 0) == 0) hashes = words(split(line, '\t').at(1));
  }
  REQUIRE(header.size() == 4);
  const size_t every = std::stoull(header[1]), lines_expected = std::stoull(header[2]);
  std::ifstream in(corpus);
  std::vector<std::string> strings;
  size_t entry = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t at = line.find(" :: ");
    if (at == std::string::npos || line.find(" :: ", at + 1) != std::string::npos) continue;
    if (entry++ % every != 0) continue;
    strings.push_back(line.substr(0, at));
    strings.push_back(line.substr(at + 4));
  }
  REQUIRE_MESSAGE(strings.size() == 2 * lines_expected, "this trans-de-en is not the one the fixture was made from");
  REQUIRE(hashes.size() == strings.size());
  size_t wrong = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const text::Encoding e = tok.encode(strings[i]);
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", fnv32(e));
    if (hashes[i] == hex) continue;
    if (++wrong <= 5) {
      std::string got;
      for (const std::string& t : e.tokens) got += t + " ";
      MESSAGE("string ", i, " \"", strings[i], "\" -> ", got);
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("Tokenizer matches tokenizers on adversarial text, truncation, padding, pairs and decoding") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  const text::Tokenizer base = text::Tokenizer::from_file(dir + "/tokenizer.json");
  const std::vector<std::string> lines = fixture_lines();
  size_t cases = 0, errors = 0, decodes = 0, batches = 0;
  for (size_t li = 0; li < lines.size(); ++li) {
    const std::vector<std::string> f = split(lines[li], '\t');
    if (f[0] == "case" || f[0] == "error") {
      const std::string text = unescape_fixture_text(f.at(2));
      const bool pair = f.at(3) != "\\0";
      const std::string second = pair ? unescape_fixture_text(f.at(3)) : "";
      bool add = true;
      const text::Tokenizer t = configured(base, f.at(1), add);
      INFO("line ", li, ": ", f[0], " [", f[1], "] \"", text, "\"", pair ? " + \"" + second + "\"" : "");
      if (f[0] == "error") {
        ++errors;
        CHECK_THROWS_AS(pair ? t.encode(text, second, add) : t.encode(text, add), Error);
        continue;
      }
      ++cases;
      check_case(pair ? t.encode(text, second, add) : t.encode(text, add), f);
    } else if (f[0] == "batch") {
      ++batches;
      const size_t n = std::stoull(f.at(2));
      std::vector<std::vector<std::string>> rows;
      std::vector<std::string> texts;
      for (size_t i = 0; i < n; ++i) {
        rows.push_back(split(lines.at(li + 1 + i), '\t'));
        texts.push_back(unescape_fixture_text(rows.back().at(2)));
      }
      bool add = true;
      const std::vector<text::Encoding> got = configured(base, f.at(1), add).encode_batch(texts);
      REQUIRE(got.size() == n);
      for (size_t i = 0; i < n; ++i) {
        INFO("batch at line ", li, " [", f[1], "] row ", i);
        check_case(got[i], rows[i]);
      }
      li += n;
    } else if (f[0] == "decode") {
      ++decodes;
      INFO("line ", li);
      CHECK(base.decode(ints(f.at(2)), f.at(1) == "1") == unescape_fixture_text(f.at(3)));
    }
  }
  CHECK(cases > 600);
  CHECK(errors > 20);
  CHECK(batches == 3);
  CHECK(decodes == 10);
}

TEST_CASE("Tokenizer reads tokenizer.json's settings and turns into tensors") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  text::Tokenizer tok = text::Tokenizer::from_file(dir + "/tokenizer.json");
  REQUIRE(tok.truncation().has_value());
  CHECK(tok.truncation()->max_length == 128);
  REQUIRE(tok.padding().has_value());
  CHECK(tok.padding()->length == std::optional<int64_t>(128));
  CHECK(tok.encode("hello").size() == 128);  // the file pads to 128
  CHECK(tok.vocab_size() == 30522);
  CHECK(tok.token_to_id("[CLS]") == std::optional<int64_t>(101));
  CHECK(tok.token_to_id("##ing").has_value());
  CHECK_FALSE(tok.token_to_id("no-such-piece").has_value());
  CHECK(tok.id_to_token(102) == std::optional<std::string>("[SEP]"));
  CHECK_FALSE(tok.id_to_token(30522).has_value());
  CHECK(tok.num_special_tokens_to_add(false) == 2);
  CHECK(tok.num_special_tokens_to_add(true) == 3);

  tok.no_padding();
  text::PaddingOptions pad;
  tok.enable_padding(pad);  // to the longest
  const std::vector<text::Encoding> batch = tok.encode_batch({"a b", "c d e f"});
  const text::BatchTensors t = text::to_tensors(batch);
  CHECK(t.input_ids.shape() == Shape{2, 6});
  CHECK(t.input_ids.dtype() == kInt64);
  CHECK(t.attention_mask.sum().item() == 10.0);
  CHECK(t.token_type_ids.sum().item() == 0.0);
  tok.no_padding();
  CHECK_ERROR_STARTS("[text::to_tensors]", text::to_tensors(tok.encode_batch({"a b", "c d e f"})), "encoding 1 has 6",
                     "enable_padding");

  // Bad input: the text is not UTF-8; impossible settings; an id outside the vocabulary.
  CHECK_ERROR_STARTS("[Tokenizer]", tok.encode("ok \xff\xfe"), "not valid UTF-8 at byte 3");
  text::TruncationOptions bad;
  bad.max_length = -1;
  CHECK_ERROR_STARTS("[Tokenizer::enable_truncation]", tok.enable_truncation(bad), "max_length", "-1");
  text::PaddingOptions badpad;
  badpad.pad_to_multiple_of = -8;
  CHECK_ERROR_STARTS("[Tokenizer::enable_padding]", tok.enable_padding(badpad), "pad_to_multiple_of", "-8");
  CHECK_ERROR_STARTS("[Tokenizer::decode]", tok.decode({101, 99999}), "id 99999");
  text::TruncationOptions only_second;
  only_second.max_length = 4;
  only_second.strategy = text::TruncationOptions::Strategy::OnlySecond;
  tok.enable_truncation(only_second);
  CHECK_ERROR_STARTS("[Tokenizer]", tok.encode("a b c d e"), "OnlySecond needs a pair");
}

namespace {

// A small tokenizer.json around `parts` (JSON members after "model"), for the reader's errors.
std::string tiny_json(const std::string& model, const std::string& rest = "") {
  return "{\"version\": \"1.0\", \"model\": " + model + (rest.empty() ? "" : ", " + rest) + "}";
}
const std::string kModel =
    R"({"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "un": 3, "##aff": 4, "##able": 5, "a": 6}})";

}  // namespace

TEST_CASE("Tokenizer runs a small WordPiece model: longest pieces first, unknown words whole") {
  const text::Tokenizer t = text::Tokenizer::from_json(tiny_json(
      kModel,
      R"("normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "decoder": {"type": "WordPiece"})"));
  const text::Encoding e = t.encode("Unaffable a unaffx");
  CHECK(e.tokens == std::vector<std::string>{"un", "##aff", "##able", "a", "[UNK]"});
  CHECK(e.ids == std::vector<int64_t>{3, 4, 5, 6, 0});
  CHECK(e.offsets == std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 5}, {5, 9}, {10, 11}, {12, 18}});
  CHECK(e.type_ids == std::vector<int64_t>(5, 0));
  CHECK(t.decode(e.ids) == "unaffable a [UNK]");
  CHECK(t.encode("").ids.empty());
  // Without a normalizer, case matters and the model sees the text as it is.
  const text::Tokenizer raw = text::Tokenizer::from_json(tiny_json(kModel));
  CHECK(raw.encode("un").ids == std::vector<int64_t>{3});
  CHECK(raw.encode("Un").ids == std::vector<int64_t>{0});
  CHECK(raw.decode({3, 4, 5}) == "un ##aff ##able");  // no decoder: the tokens, spaced
}

TEST_CASE("tokenizer.json: a part Kiln does not run, or a broken one, is an error naming it") {
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_file("/no/such/tokenizer.json"), "cannot open",
                     "/no/such/tokenizer.json");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json("{\"model\": ", "t.json"), "t.json");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json("[]", "t.json"), "t.json", "expected an object");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json("{}", "t.json"), "has no \"model\"");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(R"({"type": "BPE", "vocab": {}})")),
                     "model", "\"BPE\" is not supported");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(R"({"type": "WordPiece", "unk_token": "[UNK]", "vocab": {}})")),
                     "model.vocab", "is empty");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(R"({"type": "WordPiece", "unk_token": "?", "vocab": {"a": 0}})")),
                     "model.unk_token", "\"?\" is not in model.vocab");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(R"({"type": "WordPiece", "unk_token": "a", "vocab": {"a": -1}})")),
                     "model.vocab[\"a\"]", "must be in [0,");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(R"({"type": "WordPiece", "unk_token": "a", "vocab": {"a": "zero"}})")),
                     "expected an integer");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("normalizer": {"type": "NFKC"})")),
                     "normalizer", "\"NFKC\" is not supported");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("normalizer": {"lowercase": true})")),
                     "normalizer", "has no \"type\"");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("normalizer": {"type": "BertNormalizer", "lowercase": 1})")),
                     "normalizer.lowercase", "expected true or false");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("pre_tokenizer": {"type": "ByteLevel"})")),
                     "pre_tokenizer", "\"ByteLevel\" is not supported");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("post_processor": {"type": "RobertaProcessing"})")),
                     "post_processor", "\"RobertaProcessing\" is not supported");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {}})")),
                     "special token \"[CLS]\", which special_tokens lacks");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "C", "type_id": 0}}], "pair": [], "special_tokens": {}})")),
                     "post_processor.single[0].Sequence.id", "\"C\"");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("decoder": {"type": "ByteLevel"})")),
                     "decoder", "\"ByteLevel\" is not supported");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("truncation": {"max_length": 8, "strategy": "Middle"})")),
                     "truncation.strategy", "\"Middle\"");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("padding": {"strategy": "Longest"})")),
                     "padding.strategy", "BatchLongest");
  CHECK_ERROR_STARTS("[Tokenizer]", text::Tokenizer::from_json(tiny_json(kModel, R"("added_tokens": [{"id": 9, "content": ""}])")),
                     "added_tokens[0].content", "is empty");
}

TEST_CASE("Tokenizer: added tokens are matched in the text, longest first, with their whitespace rules") {
  const std::string added =
      R"("added_tokens": [{"id": 1, "content": "[CLS]", "special": true}, {"id": 7, "content": "<x>", "special": false, "lstrip": true, "rstrip": true, "normalized": false}, {"id": 8, "content": "<x>>", "special": false, "normalized": false}])";
  const text::Tokenizer t = text::Tokenizer::from_json(
      tiny_json(kModel, R"("normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "decoder": {"type": "WordPiece"}, )" + added));
  const text::Encoding e = t.encode("a  <x>  a<x>>[CLS]un");
  CHECK(e.tokens == std::vector<std::string>{"a", "<x>", "a", "<x>>", "[CLS]", "un"});
  CHECK(e.offsets == std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 8}, {8, 9}, {9, 13}, {13, 18}, {18, 20}});
  CHECK(t.decode(e.ids) == "a <x> a <x>> un");  // [CLS] is special: left out
  CHECK(t.decode(e.ids, false) == "a <x> a <x>> [CLS] un");
}
