#pragma once
// The tables behind text::BytePairTokenizer (byte_bpe.h), private to the library:
// built once by byte_bpe_load.cpp, read by byte_bpe.cpp (encode, decode) and
// byte_bpe_pretokenize.cpp (the pre-tokenizers' word splits).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text::detail {

// How a pre-tokenizer splits text into words (tokenizer.ggml.pre, byte_bpe.h).
enum class PreSplit {
  DigitsThenGpt2,  // "smollm", "starcoder": each \p{N} alone, then GPT-2's pattern
  Gpt2,            // "gpt-2": GPT-2's pattern
  Default,         // "default": punctuation runs, GPT-2's pattern, \p{N}+, then 3 ASCII digits
};

// The code points of `text` as llama.cpp reads them: each byte that starts no sequence
// (or a 4-byte one past U+10FFFF) is U+FFFD; overlong forms and surrogates are decoded.
void decode_code_points(std::string_view text, std::vector<uint32_t>& out);
// The one code point at byte i (< text.size()) and its length in bytes (1 for U+FFFD);
// past_max is set where the bytes form a 4-byte sequence past U+10FFFF.
uint32_t decode_code_point_at(std::string_view text, size_t i, size_t& len, bool& past_max);
// The words of code points [0, cps.size()): `ends` gets each word's end, in order.
void split_words(PreSplit split, const std::vector<uint32_t>& cps, std::vector<size_t>& ends);

struct MergeRule {
  int32_t rank;    // its index in tokenizer.ggml.merges (the first, where a pair repeats)
  int32_t result;  // the id of the joined text, -1 where that is no token
};

struct BytePairVocab {
  std::vector<std::string> tokens;                 // as stored (GPT-2's characters)
  std::vector<uint32_t> attrs;                     // TokenAttr bits
  std::vector<std::string> pieces;                 // token_to_piece(id, special = true)
  std::unordered_map<std::string, int32_t> ids;    // text -> id
  std::unordered_map<uint64_t, MergeRule> merges;  // (left id << 32 | right id)
  std::array<int32_t, 256> byte_token{};           // the token of one byte's character, or -1
  // Where a symbol is no token, llama.cpp emits, for each byte of its characters' UTF-8,
  // the token whose text is that one byte, where there is one.
  std::array<std::vector<int32_t>, 256> byte_fallback;
  std::vector<int32_t> special_order;              // control/user-defined/unknown ids, longest text first
  std::vector<int64_t> eog;                        // ascending
  std::vector<bool> is_eog;
  PreSplit split = PreSplit::DigitsThenGpt2;
  std::string pre;
  std::string chat_template;
  bool add_bos = false, add_eos = false, add_space_prefix = false, clean_spaces = true;
  int64_t bos = -1, eos = -1, eot = -1, eom = -1, unknown = -1, padding = -1;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

// GPT-2's printable character of each byte, and back (-1 for a code point that stands
// for no byte).
uint32_t byte_to_char(uint8_t b);
int byte_of_char(uint32_t c);

}  // namespace kiln::text::detail
