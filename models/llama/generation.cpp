#include "llama/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <unordered_set>

namespace kiln::llama {

namespace {

constexpr const char* kGenerateOp = "llama.generate";
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CTRL's penalty (Keskar et al., 2019), as transformers applies it: each token seen
// before has its logit divided by the penalty when positive, multiplied when negative.
void penalize_repeats(std::vector<float>& logits, const std::vector<int64_t>& history, double penalty) {
  if (penalty == 1.0) return;
  std::unordered_set<int64_t> seen(history.begin(), history.end());
  for (int64_t id : seen) {
    if (id < 0 || id >= static_cast<int64_t>(logits.size())) continue;
    float& l = logits[static_cast<size_t>(id)];
    l = l > 0 ? static_cast<float>(l / penalty) : static_cast<float>(l * penalty);
  }
}

int64_t argmax(const std::vector<float>& v) {
  return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Temperature, top-k, top-p, then one draw from the renormalised probabilities.
int64_t sample(const std::vector<float>& logits, const GenerationConfig& c, double draw) {
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto by_logit = [&](int64_t a, int64_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  size_t keep = order.size();
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < keep) {
    keep = static_cast<size_t>(c.top_k);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const double top = logits[order[0]] / c.temperature;
  std::vector<double> p(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp(logits[order[i]] / c.temperature - top);
  if (c.top_p < 1.0) {
    // The smallest prefix (most probable first) whose mass reaches top_p; at least one.
    double mass = 0;
    size_t n = 0;
    while (n < keep && (n == 0 || mass < c.top_p * total)) mass += p[n++];
    keep = n;
    total = mass;
  }
  double target = draw * total, acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (target < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

void GenerationConfig::validate() const {
  KILN_CHECK(max_new_tokens >= 0, kGenerateOp, "max_new_tokens must be >= 0, got ", max_new_tokens);
  KILN_CHECK(temperature > 0 && std::isfinite(temperature), kGenerateOp, "temperature must be positive, got ",
             temperature);
  KILN_CHECK(top_k >= 0, kGenerateOp, "top_k must be >= 0 (0: off), got ", top_k);
  KILN_CHECK(top_p > 0 && top_p <= 1, kGenerateOp, "top_p must be in (0, 1], got ", top_p);
  KILN_CHECK(repetition_penalty > 0 && std::isfinite(repetition_penalty), kGenerateOp,
             "repetition_penalty must be positive, got ", repetition_penalty);
}

double GenerationResult::prompt_tokens_per_second() const {
  return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0.0;
}

double GenerationResult::generation_tokens_per_second() const {
  const double steps = tokens.empty() ? 0.0 : static_cast<double>(tokens.size() - 1);
  return generation_seconds > 0 ? steps / generation_seconds : 0.0;
}

int64_t choose_token(const Tensor& logits, const std::vector<int64_t>& history, const GenerationConfig& c,
                     double draw) {
  KILN_CHECK(logits.defined() && logits.dim() == 1 && logits.numel() > 0, kGenerateOp,
             "logits must be one position's (vocab), got ", logits.defined() ? shape_str(logits.shape()) : "undefined");
  const Tensor l = logits.detach().to(kCPU).to(kFloat32).contiguous();
  std::vector<float> v(l.data<float>(), l.data<float>() + l.numel());
  penalize_repeats(v, history, c.repetition_penalty);
  return c.do_sample ? sample(v, c, draw) : argmax(v);
}

GenerationResult generate(LlamaForCausalLM& model, const std::vector<int64_t>& prompt, const GenerationConfig& c,
                          const TokenCallback& on_token) {
  c.validate();
  KILN_CHECK(!prompt.empty(), kGenerateOp, "the prompt has no tokens");
  const int64_t T = static_cast<int64_t>(prompt.size());
  const int64_t capacity = T + std::max<int64_t>(c.max_new_tokens, 1);
  KILN_CHECK(capacity <= model.config.max_position_embeddings, kGenerateOp, "a prompt of ", T, " tokens and ",
             c.max_new_tokens, " new ones exceed the context of ", model.config.max_position_embeddings);
  for (int64_t id : prompt)
    KILN_CHECK(id >= 0 && id < model.config.vocab_size, kGenerateOp, "prompt token ", id,
               " is outside the vocabulary of ", model.config.vocab_size);
  NoGradGuard no_grad;
  InferenceMode inference;
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  KVCache cache(model.config, 1, capacity);
  GenerationResult r;
  r.prompt_tokens = T;
  std::vector<int64_t> history = prompt;
  const std::unordered_set<int64_t> stops(c.stop_tokens.begin(), c.stop_tokens.end());
  auto t0 = Clock::now();
  Tensor logits = model.forward(from_vector<int64_t>(prompt, {1, T}), &cache, 1);
  for (int64_t step = 0; step < c.max_new_tokens; ++step) {
    const int64_t next = choose_token(logits.reshape({-1}), history, c, c.do_sample ? uniform(rng) : 0.0);
    if (step == 0) {
      r.prompt_seconds = seconds_since(t0);
      t0 = Clock::now();
    }
    r.tokens.push_back(next);
    history.push_back(next);
    if (on_token && !on_token(next)) r.stopped = true;
    if (stops.count(next)) r.stopped = true;
    if (r.stopped || step + 1 == c.max_new_tokens) break;
    logits = model.forward(from_vector<int64_t>({next}, {1, 1}), &cache, 1);
  }
  if (!r.tokens.empty()) r.generation_seconds = seconds_since(t0);
  return r;
}

}  // namespace kiln::llama
