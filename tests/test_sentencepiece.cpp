// text::SentencePieceTokenizer: the ids and pieces PyPI's sentencepiece gives for ~30
// sentences (unknown characters, empty text, stray spaces, umlauts) with three models
// (tests/fixtures/make_sentencepiece_fixtures.py), training in C++ (BPE and unigram,
// special ids, round trips, quiet), and the errors: files that are missing, empty,
// truncated, random, or that carry a broken normalization table, and bad train options.
// Compiled in every build: without SentencePiece the cases that need it say so and
// return, and every factory must throw a kiln::Error saying that it is not built in.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "text/sentencepiece.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::ScratchDir;
using text::SentencePieceTokenizer;
using text::SentencePieceTrainOptions;

namespace {

bool skip_without_sentencepiece() {
  if (SentencePieceTokenizer::available()) return false;
  MESSAGE("skipped: Kiln was built without SentencePiece");
  return true;
}

std::string fixture(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

std::vector<std::string> corpus_lines() {
  std::ifstream in(fixture("sentencepiece_corpus.txt"));
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// ---- tests/fixtures/sentencepiece.txt ----------------------------------------------------

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t end; (end = s.find(sep, begin)) != std::string::npos; begin = end + 1)
    out.push_back(s.substr(begin, end - begin));
  out.push_back(s.substr(begin));
  return out;
}

using kiln::testing::unescape_fixture_text;

std::vector<std::string> pieces_field(const std::string& field) {
  std::vector<std::string> out;
  if (field.empty()) return out;
  for (const std::string& p : split(field, ' ')) out.push_back(unescape_fixture_text(p));
  return out;
}

std::vector<int64_t> ids_field(const std::string& field) {
  std::vector<int64_t> out;
  std::istringstream in(field);
  for (int64_t id; in >> id;) out.push_back(id);
  return out;
}

struct EncodeCase {
  std::string text;
  std::vector<int64_t> ids;
  std::vector<std::string> pieces;
  std::string decoded, decoded_pieces;
};

struct ModelFixture {
  std::vector<int64_t> sizes;  // vocab_size, pad, unk, bos, eos
  std::vector<std::string> pieces;
  std::vector<EncodeCase> cases;
};

std::map<std::string, ModelFixture> read_fixture() {
  std::ifstream in(fixture("sentencepiece.txt"));
  REQUIRE_MESSAGE(in.good(), "cannot open sentencepiece.txt (rerun make_sentencepiece_fixtures.py)");
  std::map<std::string, ModelFixture> models;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> f = split(line, '\t');
    REQUIRE(f.size() >= 3);
    ModelFixture& m = models[f[1]];
    if (f[0] == "model") {
      for (size_t i = 2; i < f.size(); ++i) m.sizes.push_back(std::stoll(f[i]));
    } else if (f[0] == "pieces") {
      m.pieces = pieces_field(f[2]);
    } else {
      REQUIRE(f.size() == 7);
      m.cases.push_back({unescape_fixture_text(f[2]), ids_field(f[3]), pieces_field(f[4]), unescape_fixture_text(f[5]),
                         unescape_fixture_text(f[6])});
    }
  }
  return models;
}

// ---- Hand-made models ----------------------------------------------------------------------

std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  return out + static_cast<char>(v);
}
std::string field(uint64_t number, const std::string& payload) {
  return varint(number << 3 | 2) + varint(payload.size()) + payload;
}
std::string field_varint(uint64_t number, uint64_t v) { return varint(number << 3) + varint(v); }

// ModelProto.pieces entry: the piece, score -1, its type (1 normal, 2 unk).
std::string piece_field(const std::string& p, int type) {
  return field(1, field(1, p) + varint(2 << 3 | 5) + std::string("\0\0\x80\xbf", 4) + field_varint(3, type));
}

// A ModelProto: BPE over <unk> (id 0), "▁", "a", "b", "▁b", with the given normalizer
// charsmap (none when empty).
std::string bpe_model(const std::string& charsmap) {
  std::string m = piece_field("<unk>", 2) + piece_field("\xe2\x96\x81", 1) + piece_field("a", 1) +
                  piece_field("b", 1) + piece_field("\xe2\x96\x81" "b", 1);
  m += field(2, field_varint(3, 2));  // trainer_spec.model_type = BPE
  std::string spec = field_varint(3, 1) + field_varint(4, 1) + field_varint(5, 1);
  if (!charsmap.empty()) spec = field(2, charsmap) + spec;
  return m + field(3, spec);
}

std::string u32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// A precompiled charsmap from its trie units and NUL-terminated strings.
std::string charsmap(const std::vector<uint32_t>& units, const std::string& strings) {
  std::string blob = u32(static_cast<uint32_t>(units.size() * 4));
  for (uint32_t u : units) blob += u32(u);
  return blob + strings;
}

// Darts units: an inner unit with a label and the offset to its children (offsets here
// are below 2^21, the plain encoding), a leaf bit, and a value unit.
uint32_t inner(uint32_t label, uint32_t offset, bool leaf) { return offset << 10 | (leaf ? 1U << 8 : 0) | label; }
uint32_t value_unit(uint32_t value) { return 1U << 31 | value; }

// A trie over the byte 'a' repeated: `leaves` nodes in a chain, each a match mapping to
// strings[0] ("b"). Node k's children sit at base 256 (k + 1).
std::vector<uint32_t> chain_trie(int leaves) {
  std::vector<uint32_t> units(256 * (leaves + 2), 0);
  units[0] = inner(0, 256, false);  // the root: children at 256
  for (int k = 0; k < leaves; ++k) {
    const uint32_t base = 256 * (k + 1), child = base ^ 'a', next = 256 * (k + 2);
    units[base] = value_unit(0);  // also keeps byte 0 from matching at this node
    units[child] = inner('a', child ^ next, true);
  }
  units[256 * (leaves + 1)] = value_unit(0);
  return units;
}

// Redirects stderr to a file while alive; captured() is what was written.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    FILE* f = std::fopen(path_.c_str(), "w");
    REQUIRE(f != nullptr);
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  ~StderrCapture() { restore(); }
  std::string captured() {
    restore();
    return read_bytes(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

std::vector<std::string> pieces_of(const SentencePieceTokenizer& tok) {
  std::vector<std::string> pieces;
  for (int64_t id = 0; id < tok.vocab_size(); ++id) pieces.push_back(tok.id_to_piece(id));
  return pieces;
}

SentencePieceTrainOptions small_options(const std::string& type) {
  SentencePieceTrainOptions o;
  o.model_type = type;
  o.vocab_size = 200;
  return o;
}

}  // namespace

TEST_CASE("SentencePieceTokenizer: without SentencePiece every factory says how to get it") {
  if (SentencePieceTokenizer::available()) {
    MESSAGE("SentencePiece is built in: the error of a build without it is not reachable here");
    return;
  }
  const char* hint = "built without SentencePiece";
  CHECK_ERROR(SentencePieceTokenizer::load(fixture("spm_bpe.model")), "[SentencePieceTokenizer]", hint,
              "libsentencepiece-dev", "-Dsentencepiece=enabled");
  CHECK_ERROR(SentencePieceTokenizer::from_serialized("x"), hint);
  CHECK_ERROR(SentencePieceTokenizer::train({"a b c"}, "x.model"), hint);
}

TEST_CASE("SentencePieceTokenizer: kiln::config() says whether it is built in") {
  const std::string line = SentencePieceTokenizer::available()
                               ? "  - SentencePiece: built in\n"
                               : "  - SentencePiece: not built (install libsentencepiece-dev";
  CHECK(config().find(line) != std::string::npos);
}

TEST_CASE("SentencePieceTokenizer: ids, pieces and decodes are PyPI sentencepiece's") {
  if (skip_without_sentencepiece()) return;
  const auto models = read_fixture();
  REQUIRE(models.size() == 3);
  for (const auto& entry : models) {
    const std::string& name = entry.first;
    const ModelFixture& m = entry.second;
    INFO("model " << name);
    const auto tok = SentencePieceTokenizer::load(fixture(name + ".model"));
    REQUIRE(m.sizes.size() == 5);
    CHECK(std::vector<int64_t>{tok.vocab_size(), tok.pad_id(), tok.unk_id(), tok.bos_id(), tok.eos_id()} == m.sizes);
    REQUIRE(static_cast<int64_t>(m.pieces.size()) == tok.vocab_size());
    for (int64_t id = 0; id < tok.vocab_size(); ++id) {
      CHECK(tok.id_to_piece(id) == m.pieces[id]);
      CHECK(tok.piece_to_id(m.pieces[id]) == id);
    }
    REQUIRE(m.cases.size() >= 30);
    for (const EncodeCase& c : m.cases) {
      INFO("text '" << c.text << "'");
      CHECK(tok.encode(c.text) == c.ids);
      CHECK(tok.encode_pieces(c.text) == c.pieces);
      CHECK(tok.decode(c.ids) == c.decoded);
      CHECK(tok.decode_pieces(c.pieces) == c.decoded_pieces);
    }
  }
}

TEST_CASE("SentencePieceTokenizer: bos, eos and pad as the Transformer uses them") {
  if (skip_without_sentencepiece()) return;
  const auto tok = SentencePieceTokenizer::load(fixture("spm_bpe.model"));
  CHECK(tok.pad_id() == 0);
  CHECK(tok.unk_id() == 1);
  CHECK(tok.bos_id() == 2);
  CHECK(tok.eos_id() == 3);
  CHECK(tok.id_to_piece(0) == "<pad>");
  CHECK(tok.id_to_piece(1) == "<unk>");
  CHECK(tok.id_to_piece(2) == "<s>");
  CHECK(tok.id_to_piece(3) == "</s>");
  const std::string text = "Grüße aus Köln";
  const std::vector<int64_t> ids = tok.encode(text);
  std::vector<int64_t> framed = {2};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(3);
  CHECK(tok.encode(text, true, true) == framed);
  CHECK(tok.encode(text, true, false) == std::vector<int64_t>(framed.begin(), framed.end() - 1));
  // pad, bos and eos are dropped from the text.
  framed.insert(framed.end(), {0, 0, 0});
  CHECK(tok.decode(framed) == text);
  CHECK(tok.piece_to_id("no such piece") == tok.unk_id());

  // SentencePiece's own layout: unk 0, bos 1, eos 2, no pad.
  const auto uni = SentencePieceTokenizer::load(fixture("spm_unigram.model"));
  CHECK(uni.pad_id() == -1);
  CHECK(uni.encode("a", true, true).front() == 1);
  CHECK(uni.encode("a", true, true).back() == 2);
}

TEST_CASE("SentencePieceTokenizer: out-of-range ids are errors naming them") {
  if (skip_without_sentencepiece()) return;
  const auto tok = SentencePieceTokenizer::load(fixture("spm_bpe.model"));
  CHECK_ERROR_STARTS("[SentencePieceTokenizer::decode]", tok.decode({5, 300}), "id 300", "position 1", "[0, 300)");
  CHECK_ERROR(tok.decode({-1}), "id -1", "position 0");
  CHECK_ERROR(tok.decode({int64_t{1} << 40}), "id 1099511627776");
  CHECK_ERROR_STARTS("[SentencePieceTokenizer::id_to_piece]", tok.id_to_piece(300), "id 300");
  CHECK_ERROR(tok.id_to_piece(-1), "id -1");
  CHECK(tok.decode({}).empty());
  // Invalid UTF-8 is read as U+FFFD, not refused.
  CHECK_FALSE(tok.encode(std::string("a\xff\xfe b\xc3")).empty());
}

TEST_CASE("SentencePieceTokenizer: copies share the model; encode runs from many threads") {
  if (skip_without_sentencepiece()) return;
  const auto tok = SentencePieceTokenizer::load(fixture("spm_bpe.model"));
  const std::vector<std::string> lines = corpus_lines();
  std::vector<std::vector<int64_t>> expected;
  for (const std::string& line : lines) expected.push_back(tok.encode(line));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t, copy = tok] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < lines.size(); ++i)
          if (copy.encode(lines[i]) != expected[i] || copy.decode(expected[i]) != lines[i]) ++mismatches[t];
    });
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("SentencePieceTokenizer: save, serialized and from_serialized give the same model") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_save");
  const auto tok = SentencePieceTokenizer::load(fixture("spm_unigram.model"));
  CHECK(tok.path() == fixture("spm_unigram.model"));
  CHECK(tok.serialized() == read_bytes(fixture("spm_unigram.model")));
  tok.save(dir / "copy.model");
  CHECK(dir.entries() == std::vector<std::string>{"copy.model"});
  const auto again = SentencePieceTokenizer::load(dir / "copy.model");
  const auto mem = SentencePieceTokenizer::from_serialized(tok.serialized());
  CHECK(mem.path().empty());
  for (const std::string& line : corpus_lines()) {
    CHECK(again.encode(line) == tok.encode(line));
    CHECK(mem.encode(line) == tok.encode(line));
  }
}

TEST_CASE("SentencePieceTokenizer: train BPE and unigram, save, load, round trip") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_train");
  const std::vector<std::string> lines = corpus_lines();
  for (const std::string type : {"bpe", "unigram"}) {
    INFO("model_type " << type);
    const std::string path = dir / (type + ".model");
    StderrCapture capture(dir / (type + ".stderr"));
    const auto tok = SentencePieceTokenizer::train(lines, path, small_options(type));
    // SentencePiece's training log stays off stderr by default.
    CHECK(capture.captured().empty());
    CHECK(tok.path() == path);
    CHECK(tok.vocab_size() == 200);
    CHECK(std::vector<int64_t>{tok.pad_id(), tok.unk_id(), tok.bos_id(), tok.eos_id()} ==
          std::vector<int64_t>{0, 1, 2, 3});
    const auto loaded = SentencePieceTokenizer::load(path);
    CHECK(loaded.serialized() == tok.serialized());
    for (const std::string& line : lines) {
      const std::vector<int64_t> ids = loaded.encode(line, true, true);
      CHECK(ids == tok.encode(line, true, true));
      CHECK(tok.decode(ids) == line);
    }
  }
  // Only the models (and the captured logs) are left: no temporary files.
  CHECK(dir.entries() == std::vector<std::string>{"bpe.model", "bpe.stderr", "unigram.model", "unigram.stderr"});
}

TEST_CASE("SentencePieceTokenizer: sample_encode draws segmentations, the same for the same seed") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_sample");
  const std::vector<std::string> lines = corpus_lines();
  using text::SubwordSampling;
  for (const std::string type : {"bpe", "unigram"}) {
    INFO("model_type " << type);
    const auto tok = SentencePieceTokenizer::train(lines, dir / (type + ".model"), small_options(type));
    std::vector<std::vector<int64_t>> best;
    size_t best_pieces = 0;
    for (const std::string& line : lines) {
      best.push_back(tok.encode(line));
      best_pieces += best.back().size();
    }
    // No sampling: BPE at alpha 0, unigram from a 1-best list.
    const SubwordSampling none = type == "bpe" ? SubwordSampling{0.0, -1, 5} : SubwordSampling{0.1, 1, 5};
    CHECK(tok.sample_encode(lines, none) == best);
    const SubwordSampling s{0.2, -1, 7};
    const auto a = tok.sample_encode(lines, s);
    // The same arguments, the same draws, on another thread too; another seed, others.
    CHECK(tok.sample_encode(lines, s) == a);
    std::vector<std::vector<int64_t>> on_thread;
    std::thread([&] { on_thread = tok.sample_encode(lines, s); }).join();
    CHECK(on_thread == a);
    CHECK(tok.sample_encode(lines, {0.2, -1, 8}) != a);
    CHECK(a != best);
    size_t pieces = 0, differ = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      // Another segmentation of the same text.
      CHECK(tok.decode(a[i]) == tok.decode(best[i]));
      pieces += a[i].size();
      differ += a[i] != best[i];
    }
    CHECK(differ >= lines.size() / 4);
    // Dropped merges (or likelier short pieces) make more, shorter pieces.
    CHECK(pieces > best_pieces);
    const auto framed = tok.sample_encode({lines[0]}, s, true, true).front();
    CHECK(framed.front() == tok.bos_id());
    CHECK(framed.back() == tok.eos_id());
  }
  // BPE with every merge dropped: one piece a character.
  const auto bpe = SentencePieceTokenizer::load(dir / "bpe.model");
  const auto chars = bpe.sample_encode({"abc de"}, {1.0, -1, 0}).front();
  CHECK(chars.size() == 7);  // "▁a" "b" "c" "▁" ... as single characters: ▁ a b c ▁ d e
  for (int64_t id : chars) CHECK(bpe.id_to_piece(id) != "▁abc");
}

TEST_CASE("SentencePieceTokenizer: sample_encode errors name the op and the value") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_sample_errors");
  const auto tok = SentencePieceTokenizer::train(corpus_lines(), dir / "bpe.model", small_options("bpe"));
  auto error = [&](double alpha, int64_t nbest) { return error_of([&] { tok.sample_encode({"x"}, {alpha, nbest, 1}); }); };
  for (const double bad : {-0.1, std::nan(""), double(INFINITY)}) {
    INFO("alpha " << bad);
    const std::string e = error(bad, -1);
    CHECK(e.find("SentencePieceTokenizer::sample_encode") != std::string::npos);
    CHECK(e.find("alpha must be finite and >= 0") != std::string::npos);
  }
  for (const int64_t bad : {-2, 513}) {
    INFO("nbest_size " << bad);
    CHECK(error(0.1, bad).find("nbest_size must be -1 (all segmentations) or in [0, 512], got " + std::to_string(bad)) !=
          std::string::npos);
  }
  // A char model has one segmentation: SentencePiece's refusal, as a kiln::Error.
  auto char_options = small_options("char");
  char_options.vocab_size = 60;
  const auto chars = SentencePieceTokenizer::train(corpus_lines(), dir / "char.model", char_options);
  const std::string e = error_of([&] { chars.sample_encode({"a b", "c"}, {0.1, -1, 1}); });
  CHECK(e.find("SentencePieceTokenizer::sample_encode") != std::string::npos);
  CHECK(e.find("text 0") != std::string::npos);
}

TEST_CASE("SentencePieceTokenizer: training is deterministic; a sentence with newlines is its lines") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_lines");
  const std::vector<std::string> lines = corpus_lines();
  std::string joined;
  for (const std::string& line : lines) joined += line + "\r\n\n";
  const auto a = SentencePieceTokenizer::train(lines, dir / "a.model", small_options("bpe"));
  const auto b = SentencePieceTokenizer::train({joined, "", "\n"}, dir / "b.model", small_options("bpe"));
  CHECK(a.serialized() == b.serialized());
  // BPE: the same pieces at another thread count (the bytes differ: a model records its
  // options, num_threads among them). Unigram: its EM adds the threads' sums in thread
  // order, so the same pieces again at the same thread count.
  auto four = small_options("bpe");
  four.num_threads = 4;
  CHECK(pieces_of(SentencePieceTokenizer::train(lines, dir / "c.model", four)) == pieces_of(a));
  for (const int64_t threads : {1, 4}) {
    INFO("unigram, num_threads " << threads);
    auto uni = small_options("unigram");
    uni.num_threads = threads;
    const auto x = SentencePieceTokenizer::train(lines, dir / "x.model", uni);
    CHECK(SentencePieceTokenizer::train(lines, dir / "y.model", uni).serialized() == x.serialized());
  }
}

TEST_CASE("SentencePieceTokenizer: trained options: ids without pad or bos, symbols, byte fallback") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_options");
  const std::vector<std::string> lines = corpus_lines();
  SentencePieceTrainOptions o = small_options("unigram");
  o.pad_id = -1;
  o.unk_id = 0;
  o.bos_id = -1;
  o.eos_id = 1;
  o.user_defined_symbols = {"<sep>", "<mask>"};
  const auto tok = SentencePieceTokenizer::train(lines, dir / "u.model", o);
  CHECK(std::vector<int64_t>{tok.pad_id(), tok.unk_id(), tok.bos_id(), tok.eos_id()} ==
        std::vector<int64_t>{-1, 0, -1, 1});
  CHECK_ERROR_STARTS("[SentencePieceTokenizer::encode]", tok.encode("a", true), "add_bos", "no bos");
  CHECK(tok.encode("a", false, true).back() == 1);
  const std::vector<std::string> pieces = tok.encode_pieces("Hund<sep>Katze<mask>");
  CHECK(std::count(pieces.begin(), pieces.end(), "<sep>") == 1);
  CHECK(std::count(pieces.begin(), pieces.end(), "<mask>") == 1);

  SentencePieceTrainOptions bytes = small_options("bpe");
  bytes.vocab_size = 400;
  bytes.byte_fallback = true;
  const auto b = SentencePieceTokenizer::train(lines, dir / "b.model", bytes);
  const std::string text = "Grüße 😀 中文";
  const std::vector<int64_t> ids = b.encode(text);
  CHECK(std::find(ids.begin(), ids.end(), b.unk_id()) == ids.end());
  CHECK(b.decode(ids) == text);
}

TEST_CASE("SentencePieceTokenizer: bad train options are errors naming train and the value") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_bad_train");
  const std::vector<std::string> lines = corpus_lines();
  const std::string path = dir / "m.model";
  auto with = [](auto change) {
    SentencePieceTrainOptions o = small_options("bpe");
    change(o);
    return o;
  };
  const char* op = "[SentencePieceTokenizer::train]";
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train({}, path), "no sentences", "0 given");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train({"", "\n", "\r\n"}, path), "no sentences", "3 given");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.model_type = "bep"; })),
                     "model_type", "\"bep\"");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.vocab_size = 0; })),
                     "vocab_size", "got 0");
  // More pieces than the sentences have: SentencePiece's own message, with its limit.
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.vocab_size = 50000; })),
                     "vocab_size 50000", "Vocabulary size too high");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.unk_id = -1; })),
                     "unk_id", "got -1");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.eos_id = 0; })),
                     "pad_id and eos_id are both 0");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.bos_id = 200; })),
                     "bos_id", "got 200");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.pad_id = -2; })),
                     "pad_id", "got -2");
  CHECK_ERROR_STARTS(op,
                     SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.character_coverage = 0.0; })),
                     "character_coverage", "got 0");
  CHECK_ERROR_STARTS(op,
                     SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.normalization = "nfd"; })),
                     "normalization", "\"nfd\"");
  CHECK_ERROR_STARTS(op,
                     SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.max_sentence_length = 70000; })),
                     "max_sentence_length", "got 70000");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, path, with([](auto& o) { o.num_threads = 0; })),
                     "num_threads", "got 0");
  CHECK_ERROR_STARTS(op,
                     SentencePieceTokenizer::train(lines, path,
                                                   with([](auto& o) { o.user_defined_symbols = {"a,b"}; })),
                     "user_defined_symbols", "'a,b'");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, dir / "no/such/dir/m.model"), "no/such/dir",
                     "does not exist");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, dir.path.string()), "is a directory");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::train(lines, ""), "model_path is empty");
  CHECK(dir.entries().empty());
}

TEST_CASE("SentencePieceTokenizer: missing, empty, truncated and random files are errors naming them") {
  if (skip_without_sentencepiece()) return;
  ScratchDir dir("sentencepiece_corrupt");
  const char* op = "[SentencePieceTokenizer::load]";
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::load(dir / "missing.model"), "missing.model", "no such file");
  const std::string dir_path = dir.path.string();
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::load(dir_path), dir_path.c_str(), "directory");
  const std::string empty = dir / "empty.model";
  write_bytes(empty, "");
  CHECK_ERROR_STARTS(op, SentencePieceTokenizer::load(empty), "empty.model", "empty");

  // A cut inside a field is an error; a cut between two fields can leave a smaller model
  // that loads (a protobuf has no end marker): then it must work.
  for (const std::string name : {"spm_bpe", "spm_unigram", "spm_bytes"}) {
    const std::string bytes = read_bytes(fixture(name + ".model"));
    const std::string path = dir / (name + "_cut.model");
    std::vector<size_t> cuts = {1, 2, 3, 10, 100, 1000, bytes.size() / 3, bytes.size() / 2, bytes.size() - 2,
                                bytes.size() - 1};
    for (size_t n = 5; n < bytes.size(); n += bytes.size() / 40) cuts.push_back(n);
    for (size_t n : cuts) {
      INFO(name << " cut to " << n << " of " << bytes.size() << " bytes");
      write_bytes(path, bytes.substr(0, n));
      const std::string msg = error_of([&] {
        const auto tok = SentencePieceTokenizer::load(path);
        CHECK(tok.decode(tok.encode("Grüße, world")).size() > 0);
      });
      if (n <= 3 || n >= bytes.size() - 2) CHECK_FALSE(msg.empty());
      if (!msg.empty()) {
        CHECK(msg.rfind(op, 0) == 0);
        CHECK(msg.find(path) != std::string::npos);
      }
    }
  }

  std::mt19937 rng(1234);
  const std::string path = dir / "random.model";
  for (int i = 0; i < 40; ++i) {
    std::string bytes(1 + rng() % 2000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    write_bytes(path, bytes);
    CHECK_ERROR_STARTS(op, SentencePieceTokenizer::load(path), "random.model", "not a valid SentencePiece model");
  }
  CHECK_ERROR_STARTS("[SentencePieceTokenizer::from_serialized]", SentencePieceTokenizer::from_serialized("\x0a"),
                     "<serialized model>");
  // Sound protobuf, nonsense model: SentencePiece's own checks, as errors.
  const std::string unigram = field(2, field_varint(3, 1));
  CHECK_ERROR(SentencePieceTokenizer::from_serialized(unigram), "not a valid SentencePiece model");
  CHECK_ERROR(SentencePieceTokenizer::from_serialized(piece_field("a", 1) + unigram), "unk is not defined");
  CHECK_ERROR(SentencePieceTokenizer::from_serialized(piece_field("<unk>", 2) + piece_field("", 1) + unigram),
              "piece must not be empty");
  CHECK_ERROR(SentencePieceTokenizer::from_serialized(piece_field("<unk>", 2) + piece_field("a", 1) +
                                                      piece_field("a", 1) + unigram),
              "already defined");
  // A piece that starts with NUL: SentencePiece's trie builder would end the process.
  CHECK_ERROR(SentencePieceTokenizer::from_serialized(piece_field("<unk>", 2) + piece_field(std::string("\0a", 2), 1) +
                                                      unigram),
              "piece 1 has a NUL byte");
}

TEST_CASE("SentencePieceTokenizer: a model whose normalization table is broken is refused") {
  if (skip_without_sentencepiece()) return;
  // A sound hand-made table first: 'a' normalizes to "b".
  const std::string strings("b\0", 2);
  const auto good = SentencePieceTokenizer::from_serialized(bpe_model(charsmap(chain_trie(1), strings)));
  CHECK(good.encode_pieces("a") == std::vector<std::string>{"\xe2\x96\x81" "b"});
  CHECK(SentencePieceTokenizer::from_serialized(bpe_model("")).encode_pieces("a") ==
        std::vector<std::string>{"\xe2\x96\x81", "a"});
  // 32 matches on one path are what SentencePiece has room for.
  const auto deep = SentencePieceTokenizer::from_serialized(bpe_model(charsmap(chain_trie(32), strings)));
  CHECK(deep.encode_pieces(std::string(40, 'a')).size() > 0);

  auto refused = [](const std::string& map) {
    return error_of([&] { SentencePieceTokenizer::from_serialized(bpe_model(map)); });
  };
  const std::string valid = charsmap(chain_trie(1), strings);
  // The trie's size past the blob, zero, not whole units; strings without their NUL.
  std::string blob = valid;
  blob.replace(0, 4, u32(1 << 30));
  CHECK(refused(blob).find("trie size") != std::string::npos);
  blob.replace(0, 4, u32(0));
  CHECK(refused(blob).find("trie size") != std::string::npos);
  blob.replace(0, 4, u32(6));
  CHECK(refused(blob).find("trie size") != std::string::npos);
  CHECK(refused("abc").find("normalization table") != std::string::npos);
  CHECK(refused(charsmap(chain_trie(1), "b")).find("NUL") != std::string::npos);
  // Children past the array (the root's and an inner node's).
  std::vector<uint32_t> units = chain_trie(1);
  units[0] = inner(0, 1 << 20, false);
  CHECK(refused(charsmap(units, strings)).find("past the end of the array") != std::string::npos);
  units = chain_trie(1);
  units[256 ^ 'a'] = inner('a', 1 << 20, true);
  CHECK(refused(charsmap(units, strings)).find("past the end of the array") != std::string::npos);
  // A value past the strings.
  units = chain_trie(1);
  units[512] = value_unit(2);
  CHECK(refused(charsmap(units, strings)).find("past the normalized strings") != std::string::npos);
  // A loop: 'a' leads back to the node it leaves.
  units = chain_trie(1);
  units[256 ^ 'a'] = inner('a', 'a', false);
  CHECK(refused(charsmap(units, strings)).find("loop") != std::string::npos);
  // 33 matches on one path.
  CHECK(refused(charsmap(chain_trie(33), strings)).find("more matches") != std::string::npos);
  // The denormalizer's table is checked too (ModelProto field 5).
  const std::string with_bad_denormalizer = bpe_model("") + field(5, field(2, charsmap(chain_trie(33), strings)));
  CHECK(error_of([&] { SentencePieceTokenizer::from_serialized(with_bad_denormalizer); }).find("more matches") !=
        std::string::npos);
}
