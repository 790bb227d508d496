// libFuzzer target: text::BytePairTokenizer (llama.cpp's byte-level BPE from GGUF
// metadata) on arbitrary bytes, with a small vocabulary built in memory
// (fuzz_byte_bpe_vocab.h; no model file). The first byte picks what the rest is:
//   'c'  a chat template: rendered for two messages, or refused with kiln::Error;
//   'i'  token ids (two bytes each): decoded every way, each piece joining to decode's text;
//   'g'  a GGUF file: its tokenizer read, or refused with kiln::Error, and used;
//   else text, under one of the pre-tokenizers (smollm, gpt-2, default): every id in the
//        vocabulary, the pieces joining to decode's text, and valid UTF-8 given back as it
//        was. Anything else (another exception, a sanitizer report) is a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_byte_bpe_vocab.h"
#include "text/byte_bpe.h"
#include "text/chat_template.h"

namespace {

using kiln::text::BytePairTokenizer;

[[noreturn]] void finding(const char* what, const std::string& input) {
  std::fprintf(stderr, "fuzz_byte_bpe: %s (input of %zu bytes)\n", what, input.size());
  std::abort();
}

const BytePairTokenizer& vocab_for(unsigned which) {
  static const std::vector<std::unique_ptr<BytePairTokenizer>> toks = [] {
    std::vector<std::unique_ptr<BytePairTokenizer>> out;
    for (const char* pre : {"smollm", "gpt-2", "default"}) {
      const std::string bytes = kiln::io::serialize_gguf(kiln::fuzz::byte_bpe_metadata(pre), {});
      out.push_back(std::make_unique<BytePairTokenizer>(BytePairTokenizer::from_gguf(kiln::io::parse_gguf(bytes))));
    }
    return out;
  }();
  return *toks[which % toks.size()];
}

void use(const BytePairTokenizer& tok, const std::string& text, unsigned flags) {
  const bool add_special = flags & 1, parse_special = flags & 2;
  const std::vector<int64_t> ids = tok.encode(text, add_special, parse_special);
  std::string pieces;
  for (int64_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) finding("an id outside the vocabulary", text);
    pieces += tok.token_to_piece(id, true);
  }
  const std::string back = tok.decode(ids, false, true);
  if (tok.pre_tokenizer() == "smollm" && back != pieces) finding("the pieces do not join to decode's text", text);
  if (tok.pre_tokenizer() == "smollm" && parse_special && kiln::text::valid_utf8(text) && back != text)
    finding("valid UTF-8 does not come back as it was", text);
  (void)tok.decode(ids, true, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string rest = input.substr(1);
  const BytePairTokenizer& tok = vocab_for(0);
  if (input[0] == 'c') {
    try {
      // marked ChatML, so that the renderer reads it rather than naming its family
      (void)kiln::text::render_chat_template(rest + "{# <|im_start|> #}", {{"user", "Hi"}, {"assistant", "Yo"}}, true,
                                             "<s>", "</s>");
    } catch (const kiln::Error&) {
    }
  } else if (input[0] == 'i') {
    std::vector<int64_t> ids;
    for (size_t i = 1; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % tok.vocab_size());
    std::string pieces;
    for (int64_t id : ids) pieces += tok.token_to_piece(id, true);
    if (tok.decode(ids, false, true) != pieces) finding("the pieces do not join to decode's text", input);
    for (int flags = 0; flags < 4; ++flags) (void)vocab_for(flags).decode(ids, flags & 1, flags & 2);
  } else if (input[0] == 'g') {
    try {
      const BytePairTokenizer t = BytePairTokenizer::from_gguf(kiln::io::parse_gguf(rest, "<fuzz>"));
      use(t, "Hello 123 <|im_end|> w\xC3\xB6rld \xFF", 3);
      if (t.vocab_size() > 0) (void)t.decode({0, t.vocab_size() - 1}, true, true);
      try {
        (void)t.apply_chat_template({{"user", "x"}}, true);
      } catch (const kiln::Error&) {
      }
    } catch (const kiln::Error&) {
    }
  } else {
    use(vocab_for(static_cast<unsigned char>(input[0]) >> 2), rest, static_cast<unsigned char>(input[0]));
  }
  return 0;
}
