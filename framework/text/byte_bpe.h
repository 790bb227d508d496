#pragma once
// A byte-level BPE tokenizer (GPT-2's kind) read from a GGUF file's tokenizer metadata,
// giving llama.cpp's ids token for token: encode() is llama_tokenize, token_to_piece()
// llama_token_to_piece and decode() llama_detokenize, for the same file.
//
//   io::GGUFFile f = io::read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto tok = text::BytePairTokenizer::from_gguf(f);
//   std::vector<int64_t> ids = tok.encode("Hello world!");     // {19556, 905, 17}
//   std::string prompt = tok.apply_chat_template({{"user", "Hi"}}, true);
//   ids = tok.encode(prompt, true, /*parse_special=*/true);   // <|im_start|> as one id
//   std::string back = tok.decode(ids);                        // without the special tokens' text
//
// What it reads: tokenizer.ggml.model ("gpt2"), tokenizer.ggml.pre (the pre-tokenizer:
// "smollm", "starcoder", "gpt-2" or "default"; absent means "default"), tokens,
// token_type, merges, the bos/eos/eot/eom/unknown/padding/fim_pad/fim_rep/fim_sep ids,
// add_bos_token, add_eos_token, add_space_prefix and tokenizer.chat_template. Anything
// missing or malformed is a kiln::Error naming the key.
//
// The steps, as llama.cpp takes them:
//  - special tokens are cut out of the text first: with parse_special, every control,
//    user-defined and unknown token's text, longest first; without it, only
//    user-defined tokens' (so "<|im_start|>" in a user's text is plain text);
//  - each remaining stretch is decoded to code points, each byte that starts no UTF-8
//    sequence becoming U+FFFD (llama.cpp does not check for overlong forms or
//    surrogates: C0 80 is U+0000, ED A0 80 is U+D800, and they are written back so);
//  - the pre-tokenizer splits them into words (for "smollm": every \p{N} alone, then
//    GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    with the Unicode classes of byte_bpe_unicode_tables.h);
//  - each word's UTF-8 bytes become GPT-2's printable characters (bytes ! to ~, ¡ to ¬
//    and ® to ÿ stand for themselves, the other 68 for U+0100 onwards in byte order), and
//    the merges are applied lowest rank first, the leftmost pair first on a tie. A byte
//    whose character is no token is dropped (SmolLM2 has none for the control bytes
//    04 06 13 14 16 1D), as llama.cpp drops it.
// One divergence: a 4-byte sequence that decodes past U+10FFFF (F4 90 80 80 .. F7 BF BF
// BF) makes llama.cpp throw out of llama_tokenize (the process aborts); here its lead
// byte becomes U+FFFD like any other byte that starts no sequence.
//
// Pieces and streaming: token_to_piece(id) is the token's bytes, which need not be whole
// UTF-8 (an emoji is often two or three tokens, each a part of its 4 bytes): a program
// that prints tokens as they come must keep the bytes of an unfinished character until
// the next piece completes it. Control and unknown tokens give "" unless `special`.
//
// A tokenizer is immutable: copies share the vocabulary and every const call may run from
// many threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../io/gguf.h"

namespace kiln::text {

namespace detail {
struct BytePairVocab;  // the tables (byte_bpe_vocab.h)
}  // namespace detail

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

// llama.cpp's token attributes (llama_token_attr), as bits.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
};

class BytePairTokenizer {
 public:
  // Reads the tokenizer of a GGUF file (the tensors are not touched).
  static BytePairTokenizer from_gguf(const io::GGUFFile& file);

  // llama_tokenize(text, add_special, parse_special): add_special puts the BOS token
  // first where the file asks for it (tokenizer.ggml.add_bos_token; SmolLM2's says no)
  // and EOS last where tokenizer.ggml.add_eos_token does; parse_special reads the text
  // of control tokens as those tokens. Any bytes are accepted.
  std::vector<int64_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;

  // llama_token_to_piece(id, lstrip 0, special): the bytes the token stands for (maybe a
  // part of a UTF-8 character); control and unknown tokens give "" unless `special`,
  // which gives their text. Throws for an id outside [0, vocab_size()).
  std::string token_to_piece(int64_t id, bool special = false) const;

  // llama_detokenize: the pieces joined. remove_special drops a leading BOS and a trailing
  // EOS where the file adds them; unparse_special writes control tokens' text. For the
  // "gpt-2", "starcoder" and "default" pre-tokenizers (not "smollm") llama.cpp then takes
  // the space out of " ?", " !", " .", " ,", " ' ", " 's", " 'm", " 're" and " 've", and so
  // does this.
  std::string decode(const std::vector<int64_t>& ids, bool remove_special = false, bool unparse_special = false) const;

  // The file's chat template (tokenizer.chat_template) rendered for these messages as
  // Jinja2 renders it (with transformers' trim_blocks and lstrip_blocks), followed by
  // the assistant's header when add_generation_prompt. Only ChatML templates (turns
  // between <|im_start|> and <|im_end|>) written with the statements text/chat_template.h
  // lists; any other template is a kiln::Error naming its family.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  int64_t vocab_size() const;
  int64_t bos_id() const;      // -1 where the file has none
  int64_t eos_id() const;
  // End of turn: tokenizer.ggml.eot_token_id, else a token found by its name
  // (<|eot_id|>, <|im_end|>, <|endoftext|>, ...). Where several are in the vocabulary,
  // the one llama.cpp takes: for SmolLM2 that is <|endoftext|> (0), not <|im_end|> (2),
  // which is its EOS. Both end generation (eog_ids).
  int64_t eot_id() const;
  int64_t eom_id() const;  // end of message (<|eom_id|>)
  int64_t unknown_id() const;
  int64_t padding_id() const;
  bool add_bos() const;        // whether encode(text, true) puts BOS first
  bool add_eos() const;
  // The tokens llama.cpp stops generating at (llama_vocab_is_eog), ascending: EOS, EOT,
  // EOM, the fim pad/repo/separator tokens and every token named like an end of turn or
  // text (<|im_end|>, <|endoftext|>, <|eot_id|>, </s>, ...). For SmolLM2: 0, 2 and 4.
  const std::vector<int64_t>& eog_ids() const;
  bool is_eog(int64_t id) const;
  uint32_t token_attr(int64_t id) const;  // TokenAttr bits; throws outside the vocabulary

  // The id of the token whose text (as stored, in GPT-2's characters: "Ġthe") is `text`,
  // or -1.
  int64_t token_to_id(std::string_view text) const;
  const std::string& id_to_token(int64_t id) const;  // throws outside the vocabulary
  const std::string& pre_tokenizer() const;           // tokenizer.ggml.pre as read
  const std::string& chat_template() const;           // "" where the file has none

 private:
  explicit BytePairTokenizer(std::shared_ptr<const detail::BytePairVocab> vocab) : vocab_(std::move(vocab)) {}
  std::shared_ptr<const detail::BytePairVocab> vocab_;
};

}  // namespace kiln::text
