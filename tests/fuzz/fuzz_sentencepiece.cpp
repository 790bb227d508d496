// libFuzzer target: text::SentencePieceTokenizer::load on arbitrary bytes as a .model file
// (SentencePiece's serialized ModelProto; the seeds are small trained models, one with a
// custom normalization table). Each load must return a tokenizer or throw kiln::Error;
// anything else (another exception, a crash, a sanitizer report) is a finding. A
// tokenizer it returns must work: encode, decode and the piece look-ups on a few strings
// and on the input's own first bytes, and saved and loaded again, the same ids.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "scratch_file.h"
#include "text/sentencepiece.h"

namespace {

using kiln::text::SentencePieceTokenizer;

// The files load reads (each input) and save writes.
const kiln::fuzz::ScratchFile& in_file() {
  static const kiln::fuzz::ScratchFile file("sentencepiece_in.model");
  return file;
}
const kiln::fuzz::ScratchFile& out_file() {
  static const kiln::fuzz::ScratchFile file("sentencepiece_out.model");
  return file;
}

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_sentencepiece: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Text that reaches the normalizer's table and the model's pieces: ASCII, umlauts, spaces
// to collapse, characters no small model has, invalid UTF-8.
std::vector<std::string> texts(const std::string& input) {
  return {"",
          "Hello world",
          "  Grüße aus Köln, Straße   ",
          "\xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87 \xef\xbc\xa1\xef\xac\x81",
          std::string("a\xff\xfe\xc3 b\0c", 8),
          input.substr(0, 64)};
}

// Everything a user may call on a loaded tokenizer; its ids for each text.
std::vector<std::vector<int64_t>> exercise(const SentencePieceTokenizer& tok, const std::string& input) {
  const int64_t n = tok.vocab_size();
  if (n <= 0) fail("a loaded model has no pieces", std::to_string(n));
  for (const int64_t id : {tok.pad_id(), tok.unk_id(), tok.bos_id(), tok.eos_id()})
    if (id < -1 || id >= n) fail("a special id is outside the vocabulary", std::to_string(id));
  for (int64_t id = 0; id < n && id < 256; ++id) (void)tok.piece_to_id(tok.id_to_piece(id));
  std::vector<std::vector<int64_t>> all;
  for (const std::string& text : texts(input)) {
    try {
      std::vector<int64_t> ids = tok.encode(text, tok.bos_id() >= 0, tok.eos_id() >= 0);
      for (const int64_t id : ids)
        if (id < 0 || id >= n) fail("encode gave an id outside the vocabulary", std::to_string(id));
      (void)tok.decode(ids);
      (void)tok.decode_pieces(tok.encode_pieces(text));
      all.push_back(std::move(ids));
    } catch (const kiln::Error&) {
      all.emplace_back();  // SentencePiece refused the text with a status: fine
    }
  }
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  in_file().write(data, size);
  std::vector<std::vector<int64_t>> ids;
  try {
    const SentencePieceTokenizer tok = SentencePieceTokenizer::load(in_file().path());
    ids = exercise(tok, input);
    tok.save(out_file().path());
  } catch (const kiln::Error&) {
    return 0;  // refused with Kiln's error: fine
  }
  // What save wrote loads back and gives the same ids.
  try {
    if (exercise(SentencePieceTokenizer::load(out_file().path()), input) != ids)
      fail("saved and loaded again, the ids differ", std::to_string(size) + " bytes");
  } catch (const kiln::Error& e) {
    fail("a saved model does not load again", e.what());
  }
  return 0;
}
