// SentencePieceTokenizer over libsentencepiece (the one file that includes its headers;
// sentencepiece_none.cpp stands in when Kiln is built without it).
//
// Loading checks what SentencePiece 0.1.97 trusts. Its Load reports a file that is not a
// protobuf, and most nonsense in one (empty or duplicate pieces, no unk, bad byte
// pieces), as a status; but
//   - it reads the normalization table (the "precompiled charsmap": a double-array trie
//     over UTF-8 bytes and the NUL-terminated strings it maps to) without bounds: a trie
//     size past the blob, a node whose children lie past the array, a value pointing past
//     the strings or a path with more than 32 matches read outside memory at load or at
//     the first encode;
//   - a piece that starts with a NUL byte makes its trie builder throw past Load, which
//     ends the process.
// validate_model_bytes() checks both in the serialized model before Load sees it.
#include "text/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "core/splitmix64.h"
#include "io/read_all.h"
#include "io/safetensors.h"  // write_file_atomic

namespace kiln::text {

namespace detail {
struct SentencePieceModel {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;  // "" for from_serialized
};
}  // namespace detail

namespace {

constexpr const char* kSerializedSource = "<serialized model>";

// ---- The protobuf wire format, as far as validation needs it ----------------------------

// One field of a protobuf message: its number, wire type and, for length-delimited
// fields (wire type 2), the payload.
struct WireField {
  uint64_t number = 0;
  int wire = 0;
  std::string_view payload;
};

// Reads the fields of one message in order. Where protobuf parses a message too, both see
// the same fields; what only protobuf would take (groups, tags past 32 bits) is no
// SentencePiece model, and is refused.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}

  // The next field into f; false at the end or on malformed input (then error() says).
  bool next(WireField& f) {
    if (pos_ >= data_.size() || !error_.empty()) return false;
    uint64_t tag = 0;
    if (!varint(tag)) return fail("a field tag is cut off");
    if (tag > std::numeric_limits<uint32_t>::max() || (tag >> 3) == 0) return fail("a field tag is invalid");
    f.number = tag >> 3;
    f.wire = static_cast<int>(tag & 7);
    f.payload = {};
    return skip_value(f);
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(const char* why) {
    error_ = why;
    return false;
  }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool take(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool skip_value(WireField& f) {
    uint64_t v = 0;
    switch (f.wire) {
      case 0:
        return varint(v) || fail("a varint is cut off");
      case 1:
        return take(8) || fail("a 64-bit field is cut off");
      case 5:
        return take(4) || fail("a 32-bit field is cut off");
      case 2: {
        if (!varint(v)) return fail("a length is cut off");
        if (v > data_.size() - pos_) return fail("a length runs past the end of the data");
        f.payload = data_.substr(pos_, v);
        pos_ += v;
        return true;
      }
      default:
        return fail("a field has a wire type SentencePiece models never use (a group or invalid)");
    }
  }

  std::string_view data_;
  size_t pos_ = 0;
  std::string error_;
};

// ---- The normalization table ------------------------------------------------------------

// Darts-clone's double-array unit, as SentencePiece's normalizer reads it.
struct DartsUnit {
  uint32_t u;
  bool has_leaf() const { return ((u >> 8) & 1) == 1; }
  uint32_t value() const { return u & ((1U << 31) - 1); }
  uint32_t label() const { return u & ((1U << 31) | 0xFF); }
  uint32_t offset() const { return (u >> 10) << ((u & (1U << 9)) >> 6); }
};

// The most matches of one commonPrefixSearch the normalizer has room for
// (Normalizer::kMaxTrieResultsSize): it reads every match counted, also those past it.
constexpr int kMaxTrieMatches = 32;

uint32_t little_endian_u32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
         static_cast<uint32_t>(b[3]) << 24;
}

// Walks every node that a search can reach from the root, as Darts' commonPrefixSearch
// does on any input bytes: each node's 256 child slots must lie inside the array, a leaf
// must map into the strings, no path may loop, and none may pass more than
// kMaxTrieMatches leaves. A node is identified by its children's base index; each is
// visited once (the longest path below it is remembered), so the cost is 256 steps a
// reachable node. Returns "" or what is wrong.
class TrieCheck {
 public:
  TrieCheck(std::vector<DartsUnit> units, size_t strings_size)
      : units_(std::move(units)), strings_size_(strings_size), depth_(units_.size(), -1), state_(units_.size(), 0) {}

  std::string run() {
    const uint32_t root = units_[0].offset();  // node 0 ^ its offset
    if (!enter(root)) return error_;
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.c == 256) {
        finish();
        continue;
      }
      if (!step(f)) return error_;
    }
    if (depth_[root] > kMaxTrieMatches) return "a path of the trie has more matches than SentencePiece has room for";
    return "";
  }

 private:
  struct Frame {
    uint32_t base;
    int c = 0;          // the next child label to look at
    int longest = 0;    // the most leaves on a path below, so far
    int pending = 0;    // 1 when the child being walked is itself a leaf
  };

  bool fail(std::string why) {
    error_ = std::move(why);
    return false;
  }

  // A node's child slots (base ^ 0..255) must all be in the array.
  bool enter(uint32_t base) {
    if ((static_cast<uint64_t>(base) | 0xFF) >= units_.size())
      return fail("a trie node's children lie past the end of the array");
    state_[base] = 1;
    stack_.push_back(Frame{base});
    return true;
  }

  // Follows the node's next transition (the next byte c whose slot carries label c).
  bool step(Frame& f) {
    auto c = static_cast<uint32_t>(f.c);
    while (c < 256 && units_[f.base ^ c].label() != c) ++c;
    if (c == 256) {
      f.c = 256;
      return true;
    }
    f.c = static_cast<int>(c) + 1;
    const uint32_t child = f.base ^ c;
    const DartsUnit unit = units_[child];
    const uint32_t next = child ^ unit.offset();
    if ((static_cast<uint64_t>(next) | 0xFF) >= units_.size())
      return fail("a trie node's children lie past the end of the array");
    const int leaf = unit.has_leaf() ? 1 : 0;
    if (leaf && units_[next].value() >= strings_size_)
      return fail("a trie value points past the normalized strings");
    if (state_[next] == 1) return fail("the trie has a loop");
    if (state_[next] == 2) {
      f.longest = std::max(f.longest, leaf + depth_[next]);
      return true;
    }
    f.pending = leaf;
    return enter(next);
  }

  void finish() {
    const Frame done = stack_.back();
    stack_.pop_back();
    depth_[done.base] = done.longest;
    state_[done.base] = 2;
    if (!stack_.empty()) {
      Frame& parent = stack_.back();
      parent.longest = std::max(parent.longest, parent.pending + done.longest);
    }
  }

  std::vector<DartsUnit> units_;
  size_t strings_size_;
  std::vector<int> depth_;
  std::vector<uint8_t> state_;  // 0 not seen, 1 on the walk, 2 done
  std::vector<Frame> stack_;
  std::string error_;
};

// A precompiled charsmap: <trie size, 4 bytes LE><trie units, 4 bytes LE each><strings>.
std::string check_charsmap(std::string_view blob) {
  if (blob.empty()) return "";  // no table: text is only split, never mapped
  if (blob.size() <= 4) return "its normalization table has " + std::to_string(blob.size()) + " bytes";
  const uint32_t trie_bytes = little_endian_u32(blob.data());
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes >= blob.size() - 4)
    return "its normalization table's trie size (" + std::to_string(trie_bytes) + " bytes) does not fit its " +
           std::to_string(blob.size()) + " bytes";
  const std::string_view strings = blob.substr(4 + trie_bytes);
  if (strings.back() != '\0') return "its normalization table's strings do not end with a NUL";
  std::vector<DartsUnit> units(trie_bytes / 4);
  for (size_t i = 0; i < units.size(); ++i) units[i].u = little_endian_u32(blob.data() + 4 + 4 * i);
  const std::string why = TrieCheck(std::move(units), strings.size()).run();
  return why.empty() ? "" : "its normalization table is broken: " + why;
}

// The charsmap that protobuf leaves in NormalizerSpec `spec_field` of the ModelProto: a
// message field given more than once is merged, so the last precompiled_charsmap (field
// 2) of any of them wins.
std::string find_charsmap(std::string_view model, uint64_t spec_field, std::string_view& charsmap) {
  WireReader top(model);
  WireField f;
  while (top.next(f)) {
    if (f.number != spec_field || f.wire != 2) continue;
    WireReader spec(f.payload);
    WireField g;
    while (spec.next(g))
      if (g.number == 2 && g.wire == 2) charsmap = g.payload;
    if (!spec.error().empty()) return spec.error();
  }
  return top.error();
}

// SentencePiece builds its tries of pieces (Darts-clone) from C strings: a piece with a
// NUL byte in it is cut there, and one that starts with NUL is an empty key, for which
// Darts throws an exception that ends the process. Refuses any (ModelProto.pieces = 1,
// SentencePiece.piece = 1; every occurrence, also one a later one overrides).
std::string check_pieces(std::string_view model) {
  WireReader top(model);
  WireField f;
  int64_t index = 0;
  while (top.next(f)) {
    if (f.number != 1 || f.wire != 2) continue;
    WireReader piece(f.payload);
    WireField g;
    while (piece.next(g))
      if (g.number == 1 && g.wire == 2 && g.payload.find('\0') != std::string_view::npos)
        return "piece " + std::to_string(index) + " has a NUL byte in it";
    if (!piece.error().empty()) return "not a protobuf: " + piece.error();
    ++index;
  }
  return top.error().empty() ? "" : "not a protobuf: " + top.error();
}

// "" when the bytes are safe to hand to SentencePiece's Load, else what is wrong.
std::string validate_model_bytes(std::string_view bytes) {
  if (std::string why = check_pieces(bytes); !why.empty()) return why;
  // ModelProto: normalizer_spec = 3, denormalizer_spec = 5.
  for (const uint64_t field : {uint64_t{3}, uint64_t{5}}) {
    std::string_view charsmap;
    std::string why = find_charsmap(bytes, field, charsmap);
    if (!why.empty()) return "not a protobuf: " + why;
    why = check_charsmap(charsmap);
    if (!why.empty()) return why;
  }
  return "";
}

// ---- Loading ----------------------------------------------------------------------------

std::string read_model_file(const std::string& path) {
  constexpr const char* op = "SentencePieceTokenizer::load";
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();  // other failures: open's errno
  KILN_CHECK(type != std::filesystem::file_type::not_found, op, "'", path, "': no such file");
  KILN_CHECK(type != std::filesystem::file_type::directory, op, "'", path, "' is a directory, not a .model file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), op, "cannot open '", path, "': ", std::strerror(errno));
  std::string bytes = io::detail::read_all(in);
  KILN_CHECK(!in.bad(), op, "reading '", path, "' failed after ", bytes.size(), " bytes");
  return bytes;
}

using detail::SentencePieceModel;

std::shared_ptr<SentencePieceModel> load_bytes(const std::string& bytes, const std::string& source, const char* op) {
  KILN_CHECK(!bytes.empty(), op, source, ": empty, not a SentencePiece model");
  const std::string why = validate_model_bytes(bytes);
  KILN_CHECK(why.empty(), op, source, ": not a valid SentencePiece model (", why, ")");
  auto model = std::make_shared<SentencePieceModel>();
  const auto status = model->sp.LoadFromSerializedProto(bytes);
  KILN_CHECK(status.ok(), op, source, ": not a valid SentencePiece model (", status.ToString(), ")");
  KILN_CHECK(model->sp.GetPieceSize() > 0, op, source, ": not a valid SentencePiece model (no pieces)");
  return model;
}

// ---- Training ---------------------------------------------------------------------------

constexpr const char* kTrainOp = "SentencePieceTokenizer::train";

// The sentences as SentencePiece would read them from a text file: one a line, "\r\n"
// endings cut, empty lines skipped.
std::vector<std::string> training_lines(const std::vector<std::string>& sentences) {
  std::vector<std::string> lines;
  lines.reserve(sentences.size());
  for (const std::string& s : sentences) {
    size_t begin = 0;
    while (begin <= s.size()) {
      size_t end = s.find('\n', begin);
      if (end == std::string::npos) end = s.size();
      std::string line = s.substr(begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) lines.push_back(std::move(line));
      begin = end + 1;
    }
  }
  return lines;
}

// Hands the lines to the trainer one by one (no temporary input file).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

void check_special_ids(const SentencePieceTrainOptions& o) {
  const std::pair<const char*, int64_t> ids[] = {{"pad_id", o.pad_id}, {"unk_id", o.unk_id},
                                                 {"bos_id", o.bos_id}, {"eos_id", o.eos_id}};
  KILN_CHECK(o.unk_id >= 0, kTrainOp, "unk_id must be an id (SentencePiece always has unk), got ", o.unk_id);
  for (size_t i = 0; i < std::size(ids); ++i) {
    const auto& [name, id] = ids[i];
    KILN_CHECK(id >= -1 && id < o.vocab_size, kTrainOp, name, " must be -1 (none) or in [0, vocab_size ",
               o.vocab_size, "), got ", id);
    for (size_t j = i + 1; j < std::size(ids); ++j)
      KILN_CHECK(id == -1 || id != ids[j].second, kTrainOp, name, " and ", ids[j].first, " are both ", id);
  }
}

void check_symbols(const std::vector<std::string>& symbols) {
  for (const std::string& s : symbols)
    KILN_CHECK(!s.empty() && s.find_first_of(", \t\r\n") == std::string::npos, kTrainOp,
               "user_defined_symbols: '", s, "' is empty or has ',' or whitespace in it");
}

void check_options(const SentencePieceTrainOptions& o) {
  const std::string& type = o.model_type;
  KILN_CHECK(type == "bpe" || type == "unigram" || type == "char" || type == "word", kTrainOp,
             "model_type must be \"bpe\", \"unigram\", \"char\" or \"word\", got \"", type, "\"");
  KILN_CHECK(o.vocab_size > 0 && o.vocab_size <= std::numeric_limits<int32_t>::max(), kTrainOp,
             "vocab_size must be positive (and fit in 32 bits), got ", o.vocab_size);
  KILN_CHECK(o.character_coverage > 0.0 && o.character_coverage <= 1.0, kTrainOp,
             "character_coverage must be in (0, 1], got ", o.character_coverage);
  const std::string& norm = o.normalization;
  KILN_CHECK(norm == "nmt_nfkc" || norm == "nfkc" || norm == "nmt_nfkc_cf" || norm == "nfkc_cf" ||
                 norm == "identity",
             kTrainOp, "normalization must be \"nmt_nfkc\", \"nfkc\", \"nmt_nfkc_cf\", \"nfkc_cf\" or ",
             "\"identity\", got \"", norm, "\"");
  // SentencePiece's BPE trainer keeps positions in 16 bits and stops the process beyond.
  KILN_CHECK(o.max_sentence_length >= 10 && o.max_sentence_length <= 65535, kTrainOp,
             "max_sentence_length must be in [10, 65535], got ", o.max_sentence_length);
  KILN_CHECK(o.num_threads >= 1 && o.num_threads <= 1024, kTrainOp, "num_threads must be in [1, 1024], got ",
             o.num_threads);
  check_special_ids(o);
  check_symbols(o.user_defined_symbols);
}

// The directory must be there before minutes of training, not after.
void check_model_path(const std::string& model_path) {
  KILN_CHECK(!model_path.empty(), kTrainOp, "model_path is empty");
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(model_path, ec), kTrainOp, "model_path '", model_path,
             "' is a directory");
  std::filesystem::path dir = std::filesystem::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  KILN_CHECK(std::filesystem::is_directory(dir, ec), kTrainOp, "model_path '", model_path, "': directory '",
             dir.string(), "' does not exist");
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

std::unordered_map<std::string, std::string> trainer_args(const SentencePieceTrainOptions& o) {
  std::string symbols;
  for (const std::string& s : o.user_defined_symbols) symbols += (symbols.empty() ? "" : ",") + s;
  std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", number(o.character_coverage)},
      {"pad_id", std::to_string(o.pad_id)},
      {"unk_id", std::to_string(o.unk_id)},
      {"bos_id", std::to_string(o.bos_id)},
      {"eos_id", std::to_string(o.eos_id)},
      {"normalization_rule_name", o.normalization},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"max_sentence_length", std::to_string(o.max_sentence_length)},
      {"num_threads", std::to_string(o.num_threads)},
      // Every sentence, in order: nothing random in what the trainer sees.
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      // Sets SentencePiece's process-wide log level: 2 keeps only errors (which come
      // back as the status thrown below).
      {"minloglevel", o.verbose ? "0" : "2"},
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  return args;
}

}  // namespace

bool SentencePieceTokenizer::available() { return true; }

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& model_path) {
  auto model = load_bytes(read_model_file(model_path), "'" + model_path + "'", "SentencePieceTokenizer::load");
  model->path = model_path;
  return SentencePieceTokenizer(std::move(model));
}

SentencePieceTokenizer SentencePieceTokenizer::from_serialized(const std::string& bytes) {
  return SentencePieceTokenizer(load_bytes(bytes, kSerializedSource, "SentencePieceTokenizer::from_serialized"));
}

SentencePieceTokenizer SentencePieceTokenizer::train(const std::vector<std::string>& sentences,
                                                     const std::string& model_path,
                                                     const SentencePieceTrainOptions& options) {
  check_options(options);
  check_model_path(model_path);
  const std::vector<std::string> lines = training_lines(sentences);
  KILN_CHECK(!lines.empty(), kTrainOp, "no sentences to train on (", sentences.size(),
             " given, none with text)");
  LineIterator it(lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(trainer_args(options), &it, &model);
  KILN_CHECK(status.ok(), kTrainOp, "SentencePiece refused to train (model_type \"", options.model_type,
             "\", vocab_size ", options.vocab_size, ", ", lines.size(), " sentences): ", status.ToString());
  auto loaded = load_bytes(model, "the trained model", kTrainOp);
  io::write_file_atomic(model_path, model);
  loaded->path = model_path;
  return SentencePieceTokenizer(std::move(loaded));
}

std::vector<int64_t> SentencePieceTokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  constexpr const char* op = "SentencePieceTokenizer::encode";
  KILN_CHECK(!add_bos || bos_id() >= 0, op, "add_bos: the model has no bos piece");
  KILN_CHECK(!add_eos || eos_id() >= 0, op, "add_eos: the model has no eos piece");
  std::vector<int> ids;
  const auto status = model_->sp.Encode(text, &ids);
  KILN_CHECK(status.ok(), op, "SentencePiece failed: ", status.ToString());
  std::vector<int64_t> out;
  out.reserve(ids.size() + 2);
  if (add_bos) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_eos) out.push_back(eos_id());
  return out;
}

namespace {

// SentencePiece's seed for `seed`: 32 well-mixed bits, never 0xFFFFFFFF, which
// SetRandomGeneratorSeed takes for "no seed" (then std::random_device).
unsigned int sentencepiece_seed(uint64_t seed) {
  const auto s = static_cast<unsigned int>(splitmix64(seed) >> 32);
  return s == 0xFFFFFFFFu ? 0u : s;
}

}  // namespace

std::vector<std::vector<int64_t>> SentencePieceTokenizer::sample_encode(const std::vector<std::string>& texts,
                                                                        const SubwordSampling& sampling, bool add_bos,
                                                                        bool add_eos) const {
  constexpr const char* op = "SentencePieceTokenizer::sample_encode";
  KILN_CHECK(std::isfinite(sampling.alpha) && sampling.alpha >= 0, op, "alpha must be finite and >= 0, got ",
             sampling.alpha);
  // SentencePiece's own limit on the n-best list it samples from.
  KILN_CHECK(sampling.nbest_size >= -1 && sampling.nbest_size <= 512, op,
             "nbest_size must be -1 (all segmentations) or in [0, 512], got ", sampling.nbest_size);
  KILN_CHECK(!add_bos || bos_id() >= 0, op, "add_bos: the model has no bos piece");
  KILN_CHECK(!add_eos || eos_id() >= 0, op, "add_eos: the model has no eos piece");
  std::vector<std::vector<int64_t>> out(texts.size());
  std::exception_ptr failure;
  auto encode_all = [&] {
    try {
      std::vector<int> ids;
      for (size_t i = 0; i < texts.size(); ++i) {
        const auto status = model_->sp.SampleEncode(texts[i], static_cast<int>(sampling.nbest_size),
                                                    static_cast<float>(sampling.alpha), &ids);
        KILN_CHECK(status.ok(), op, "SentencePiece failed on text ", i, ": ", status.ToString());
        std::vector<int64_t>& row = out[i];
        row.reserve(ids.size() + 2);
        if (add_bos) row.push_back(bos_id());
        row.insert(row.end(), ids.begin(), ids.end());
        if (add_eos) row.push_back(eos_id());
      }
    } catch (...) {
      failure = std::current_exception();
    }
  };
  {
    // SentencePiece draws from a thread_local std::mt19937 that a thread seeds at its
    // first draw from the process-wide seed (SetRandomGeneratorSeed), and never again:
    // draws on a thread of their own, started after the seed is set, depend on `seed`
    // alone. The lock keeps two calls from setting the process-wide seed at once.
    static std::mutex seeding;
    std::lock_guard<std::mutex> lock(seeding);
    sentencepiece::SetRandomGeneratorSeed(sentencepiece_seed(sampling.seed));
    std::thread(encode_all).join();
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

std::vector<std::string> SentencePieceTokenizer::encode_pieces(const std::string& text) const {
  std::vector<std::string> pieces;
  const auto status = model_->sp.Encode(text, &pieces);
  KILN_CHECK(status.ok(), "SentencePieceTokenizer::encode_pieces", "SentencePiece failed: ", status.ToString());
  return pieces;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  constexpr const char* op = "SentencePieceTokenizer::decode";
  const int64_t n = vocab_size();
  std::vector<int> narrow(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    KILN_CHECK(ids[i] >= 0 && ids[i] < n, op, "id ", ids[i], " at position ", i, " is outside the vocabulary [0, ", n,
               ")");
    narrow[i] = static_cast<int>(ids[i]);
  }
  std::string text;
  const auto status = model_->sp.Decode(narrow, &text);
  KILN_CHECK(status.ok(), op, "SentencePiece failed: ", status.ToString());
  return text;
}

std::string SentencePieceTokenizer::decode_pieces(const std::vector<std::string>& pieces) const {
  std::string text;
  const auto status = model_->sp.Decode(pieces, &text);
  KILN_CHECK(status.ok(), "SentencePieceTokenizer::decode_pieces", "SentencePiece failed: ", status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return model_->sp.GetPieceSize(); }
int64_t SentencePieceTokenizer::pad_id() const { return model_->sp.pad_id(); }
int64_t SentencePieceTokenizer::unk_id() const { return model_->sp.unk_id(); }
int64_t SentencePieceTokenizer::bos_id() const { return model_->sp.bos_id(); }
int64_t SentencePieceTokenizer::eos_id() const { return model_->sp.eos_id(); }

int64_t SentencePieceTokenizer::piece_to_id(const std::string& piece) const { return model_->sp.PieceToId(piece); }

const std::string& SentencePieceTokenizer::id_to_piece(int64_t id) const {
  KILN_CHECK(id >= 0 && id < vocab_size(), "SentencePieceTokenizer::id_to_piece", "id ", id,
             " is outside the vocabulary [0, ", vocab_size(), ")");
  return model_->sp.IdToPiece(static_cast<int>(id));
}

std::string SentencePieceTokenizer::serialized() const { return model_->sp.serialized_model_proto(); }

void SentencePieceTokenizer::save(const std::string& path) const { io::write_file_atomic(path, serialized()); }

const std::string& SentencePieceTokenizer::path() const { return model_->path; }

}  // namespace kiln::text
