#pragma once
// The parts of a tokenizer.json that text::Tokenizer runs (internal: tokenizer.cpp runs
// them, tokenizer_json.cpp reads them).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/bert_normalizer.h"
#include "text/tokenizer.h"
#include "text/wordpiece.h"

namespace kiln::text::detail {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // and after it
  bool normalized = false;   // matched in the normalized text, not the input
  std::string match;         // what is searched for: content, normalized when `normalized`
};

// One piece of a post-processing template: a special token, or sequence A or B.
struct TemplatePiece {
  bool is_sequence = false;
  std::string name;  // "A" / "B", or the special token's key
  int64_t type_id = 0;
};

struct SpecialTokens {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
};

struct TokenizerModel {
  std::string name;  // the file, for messages
  std::optional<BertNormalizerOptions> normalizer;
  bool bert_pre_tokenizer = false;
  std::unique_ptr<WordPiece> wordpiece;
  std::vector<AddedToken> added;  // in file order

  bool has_template = false;
  std::vector<TemplatePiece> single, pair;
  std::map<std::string, SpecialTokens> special_tokens;

  bool wordpiece_decoder = false;
  std::string decoder_prefix = "##";
  bool decoder_cleanup = true;

  std::optional<TruncationOptions> truncation;
  std::optional<PaddingOptions> padding;

  // Every id's token: the model's pieces, then the added tokens (which win).
  std::unordered_map<int64_t, std::string> id_to_token;
  std::unordered_map<std::string, int64_t> added_ids;
  std::unordered_map<int64_t, const AddedToken*> added_by_id;
};

std::shared_ptr<const TokenizerModel> parse_tokenizer_json(const std::string& json, const std::string& name);

}  // namespace kiln::text::detail
