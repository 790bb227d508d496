#pragma once
// Text generation with a Llama model: the prompt in one forward (prefill), then one token
// a step through the KV cache (decode), each chosen greedily or sampled. Token ids in and
// out; a tokenizer turns them into text (text::BytePairTokenizer for GGUF models).
//
//   llama::GenerationConfig g;
//   g.max_new_tokens = 64;                  // greedy unless do_sample
//   g.stop_tokens = {eos_id};
//   auto r = llama::generate(*model, prompt_ids, g, [&](int64_t id) {
//     std::cout << tokenizer.token_to_piece(id) << std::flush;  // streaming
//     return true;                                                // false stops
//   });
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llama.h"

namespace kiln::llama {

// Transformers' GenerationConfig's names. With do_sample, the logits go through the
// repetition penalty, temperature, top-k and top-p, in that order, and the token is drawn
// from what is left; without, the highest logit (after the repetition penalty) wins.
struct GenerationConfig {
  int64_t max_new_tokens = 128;
  bool do_sample = false;
  double temperature = 1.0;         // > 0
  int64_t top_k = 0;                // 0: all tokens
  double top_p = 1.0;               // in (0, 1]: the smallest set with this much probability
  double repetition_penalty = 1.0;  // >= 1 discourages tokens of the prompt and the output (CTRL's rule)
  uint64_t seed = 0;                // the sampler's; the same seed draws the same tokens
  std::vector<int64_t> stop_tokens; // ends generation (kept as the last token)
  void validate() const;
};

struct GenerationResult {
  std::vector<int64_t> tokens;  // generated, without the prompt
  bool stopped = false;         // ended by a stop token or the callback, not max_new_tokens
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0, generation_seconds = 0;  // prefill; the decode steps after it
  double prompt_tokens_per_second() const;
  double generation_tokens_per_second() const;  // tokens after the first / generation_seconds
};

// Called with each new token as soon as it is chosen; returning false stops.
using TokenCallback = std::function<bool(int64_t)>;

// One sequence. The prompt must be non-empty and prompt + max_new_tokens must fit the
// model's context. Runs without autograd.
GenerationResult generate(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, const GenerationConfig& config,
                          const TokenCallback& on_token = {});

// The next token from one position's logits (vocab) float32, as generate chooses it;
// `history` is what the repetition penalty looks at. `draw` is a uniform number in
// [0, 1) (used when sampling).
int64_t choose_token(const Tensor& logits, const std::vector<int64_t>& history, const GenerationConfig& config,
                     double draw);

}  // namespace kiln::llama
