#pragma once
// The small byte-level BPE vocabulary of the fuzz_byte_bpe target, shared with the seed
// generator (whose GGUF seed carries it): GGUF tokenizer metadata as llama.cpp's
// converter writes it, without a model file.
#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "text/utf8.h"

namespace kiln::fuzz {

// 256 tokens for GPT-2's byte characters, 4 control tokens, a user-defined one, then the
// results of the merges.
inline io::GGUFMetadata byte_bpe_metadata(const std::string& pre) {
  std::vector<std::string> tokens;
  uint32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    tokens.emplace_back();
    text::append_utf8(tokens.back(), printable ? b : next++);
  }
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<reponame>", "<tool>"};
  tokens.insert(tokens.end(), specials.begin(), specials.end());
  const std::vector<std::string> merges = {"\xC4\xA0 t", "h e", "\xC4\xA0t he", "i n", "\xC4\xA0 \xC4\xA0", "1 2",
                                           "\xC3\x83 \xC2\xA4", "' s", "\xC4\x8A \xC4\x8A", "e r", "\xC4\xA0 a"};
  for (const std::string& m : merges) {
    const size_t space = m.find(' ', 1);
    tokens.push_back(m.substr(0, space) + m.substr(space + 1));
  }
  std::vector<io::GGUFValue> types;
  for (size_t i = 0; i < tokens.size(); ++i)
    types.push_back(io::GGUFValue::i32(i >= 256 && i < 260 ? 3 : i == 260 ? 4 : 1));
  return {
      {"general.architecture", io::GGUFValue::str("llama")},
      {"tokenizer.ggml.model", io::GGUFValue::str("gpt2")},
      {"tokenizer.ggml.pre", io::GGUFValue::str(pre)},
      {"tokenizer.ggml.tokens", io::GGUFValue::strings(tokens)},
      {"tokenizer.ggml.token_type", io::GGUFValue::array(io::GGUFValueType::Int32, types)},
      {"tokenizer.ggml.merges", io::GGUFValue::strings(merges)},
      {"tokenizer.ggml.bos_token_id", io::GGUFValue::u32(257)},
      {"tokenizer.ggml.eos_token_id", io::GGUFValue::u32(258)},
      {"tokenizer.ggml.add_bos_token", io::GGUFValue::flag(pre == "gpt-2")},
      {"tokenizer.chat_template",
       io::GGUFValue::str("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\n"
                          "Hi<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")},
  };
}

}  // namespace kiln::fuzz
