#pragma once
// Hugging Face tokenizers from their tokenizer.json, as PyPI's `tokenizers` runs them:
// the same ids, token type ids, attention mask and offsets for the same text.
//
//   auto tok = text::Tokenizer::from_file("all-MiniLM-L6-v2/tokenizer.json");
//   text::Encoding e = tok.encode("Grüße aus Köln!");      // [CLS] grusse aus koln ! [SEP]
//   e.ids; e.type_ids; e.attention_mask; e.offsets;         // offsets: bytes of the input
//   auto batch = tok.encode_batch({"a question", "a longer sentence to pad to"});
//   text::BatchTensors t = text::to_tensors(batch);         // (B, T) int64 tensors
//   std::string back = tok.decode(e.ids);                   // "grusse aus koln!"
//
// What it reads (anything else in tokenizer.json is one kiln::Error naming the part and
// its type): the WordPiece model; the BertNormalizer or none; the BertPreTokenizer or
// none; TemplateProcessing or BertProcessing or no post-processor; the WordPiece decoder
// or none; added tokens (special or not, normalized or not, lstrip/rstrip/single_word);
// the file's truncation and padding, which encode applies as `tokenizers` does (change
// them with enable_truncation / enable_padding, or turn them off).
//
// Offsets are byte ranges of the UTF-8 input (the Python binding gives code-point
// ranges of its str); special tokens added by the template get (0, 0). Input must be
// valid UTF-8 (an error names the byte where it is not).
//
// A tokenizer is immutable except for its truncation and padding settings: copies share
// the vocabulary, and const calls may run from many threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace kiln::text {

namespace detail {
struct TokenizerModel;  // the parsed tokenizer.json (tokenizer_model.h)
}  // namespace detail

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;             // 0 for the first sequence, 1 for the pair's second (as templated)
  std::vector<std::string> tokens;
  std::vector<std::pair<size_t, size_t>> offsets;  // bytes [begin, end) of the input its sequence came from
  std::vector<int64_t> attention_mask;       // 1, and 0 at padding
  std::vector<int64_t> special_tokens_mask;  // 1 at tokens the template or padding added
  std::vector<int64_t> sequence_ids;         // 0 or 1: which input a token came from; -1 where none
  size_t size() const { return ids.size(); }
};

struct TruncationOptions {
  enum class Strategy { LongestFirst, OnlyFirst, OnlySecond };
  enum class Direction { Right, Left };  // which end loses its tokens
  int64_t max_length = 512;              // with the special tokens the template adds
  Strategy strategy = Strategy::LongestFirst;
  Direction direction = Direction::Right;
  int64_t stride = 0;  // kept for tokenizer.json round trips; overflowing windows are not returned
};

struct PaddingOptions {
  std::optional<int64_t> length;  // pad to this length; empty: to the batch's longest
  enum class Direction { Right, Left };
  Direction direction = Direction::Right;
  int64_t pad_to_multiple_of = 0;  // 0: no rounding up
  int64_t pad_id = 0;
  int64_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

class Tokenizer {
 public:
  // Reads tokenizer.json; errors name the file and the part it cannot read.
  static Tokenizer from_file(const std::string& path);
  // The same from the JSON text; `name` stands for the file in messages.
  static Tokenizer from_json(const std::string& json, const std::string& name = "<tokenizer.json>");

  // One sequence (add_special_tokens: the template's [CLS] ... [SEP]).
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  // A pair: [CLS] A [SEP] B [SEP] with BERT's template, B's token types 1.
  Encoding encode(std::string_view text, std::string_view pair, bool add_special_tokens = true) const;
  // Each text, padded together (the padding setting, to the longest when it has no length).
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                           bool add_special_tokens = true) const;

  // Ids back to text through the file's decoder (special tokens left out unless asked).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  // The vocabulary with the added tokens.
  int64_t vocab_size() const;
  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;

  void enable_truncation(const TruncationOptions& options);
  void no_truncation() { truncation_.reset(); }
  const std::optional<TruncationOptions>& truncation() const { return truncation_; }
  void enable_padding(const PaddingOptions& options);
  void no_padding() { padding_.reset(); }
  const std::optional<PaddingOptions>& padding() const { return padding_; }

  // How many special tokens the template adds to one sequence or a pair.
  int64_t num_special_tokens_to_add(bool is_pair) const;

 private:
  Encoding encode_impl(std::string_view a, const std::string_view* b, bool add_special_tokens) const;
  void pad(std::vector<Encoding>& batch) const;

  std::shared_ptr<const detail::TokenizerModel> model_;
  std::optional<TruncationOptions> truncation_;
  std::optional<PaddingOptions> padding_;
};

// A batch of equally long encodings as (B, T) int64 tensors on the CPU.
struct BatchTensors {
  Tensor input_ids, attention_mask, token_type_ids;
};
BatchTensors to_tensors(const std::vector<Encoding>& batch);

}  // namespace kiln::text
