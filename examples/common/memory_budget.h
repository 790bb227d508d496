#pragma once
// Refusing a model too large for the machine before building it: the examples estimate
// what training needs from their flags, in overflow-checked (saturating) arithmetic, and
// compare it with the machine's physical memory (sysconf: pages × page size), so that
// `--d-model 1000000` is one line naming the flags and exit status 2, not minutes of
// swapping, std::bad_alloc or the kernel's OOM killer.
//
//   kiln_examples::Bytes need = kiln_examples::training_bytes(params, activations);
//   kiln_examples::check_fits(cli, "--d-model 512 --layers 6", params, need);
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>

#include "cli.h"

namespace kiln_examples {

using Bytes = uint64_t;
constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

// Products and sums that stop at 2^64 - 1 instead of wrapping: a saturated estimate is
// larger than any machine, which is what it means.
inline uint64_t mul(std::initializer_list<uint64_t> factors) {
  uint64_t r = 1;
  for (uint64_t f : factors)
    if (__builtin_mul_overflow(r, f, &r)) return kSaturated;
  return r;
}
inline uint64_t add(std::initializer_list<uint64_t> terms) {
  uint64_t r = 0;
  for (uint64_t t : terms)
    if (__builtin_add_overflow(r, t, &r)) return kSaturated;
  return r;
}
// A flag's value (already range-checked, so >= 0) as an unsigned size.
inline uint64_t u(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

// The machine's physical memory; 64 GiB where sysconf cannot tell.
inline Bytes physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return Bytes(64) << 30;
  return mul({static_cast<uint64_t>(pages), static_cast<uint64_t>(page)});
}

// Training in float32 with Adam keeps four copies of the parameters (weights, gradients
// and the two moments), plus the activations (elements) of a step.
inline Bytes training_bytes(uint64_t parameters, uint64_t activation_elements) {
  return add({mul({parameters, 4, 4}), mul({activation_elements, 4})});
}

// Parameters of an encoder-decoder Transformer (nn::Transformer's layout: attention
// projections with biases, the feed-forward pair, layer norms), its embeddings and its
// output layer.
inline uint64_t transformer_parameters(int64_t src_vocab, int64_t tgt_vocab, int64_t d_model, int64_t d_ff,
                                       int64_t encoder_layers, int64_t decoder_layers) {
  const uint64_t d = u(d_model), attention = add({mul({4, d, d}), mul({4, d})});
  const uint64_t feed_forward = add({mul({2, d, u(d_ff)}), u(d_ff), d});
  const uint64_t encoder = add({attention, feed_forward, mul({4, d})});
  const uint64_t decoder = add({mul({2, attention}), feed_forward, mul({6, d})});
  return add({mul({u(src_vocab), d}), mul({u(tgt_vocab), d}), mul({u(encoder_layers), encoder}),
              mul({u(decoder_layers), decoder}), mul({u(tgt_vocab), d}), u(tgt_vocab), mul({4, d})});
}

// The activations of one training step of such a model over batch × length tokens: per
// token and layer a few d_model-wide tensors and the feed-forward's hidden ones, the
// logits and their gradient, and `attention_maps` attention-weight tensors of
// batch·heads·length² (1 for Kiln's fused attention, which keeps none; a hand-written
// attention keeps scores and weights in every layer).
inline uint64_t transformer_activations(int64_t batch, int64_t length, int64_t heads, int64_t d_model, int64_t d_ff,
                                        int64_t layers, int64_t vocab, int64_t attention_maps = 1) {
  const uint64_t tokens = mul({u(batch), u(length)});
  const uint64_t per_token = add({mul({u(layers), add({mul({16, u(d_model)}), mul({2, u(d_ff)})})}), mul({4, u(vocab)})});
  return add({mul({tokens, per_token}), mul({u(attention_maps), u(batch), u(heads), u(length), u(length)})});
}

inline std::string gib(Bytes b) {
  char buf[48];
  if (b == kSaturated) return "more than 2^64 bytes";
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  return buf;
}

// Exit status 2 naming `flags` when `need` exceeds the physical memory.
inline void check_fits(const Cli& cli, const std::string& flags, uint64_t parameters, Bytes need) {
  const Bytes have = physical_memory();
  if (need <= have) return;
  cli.fail(flags + ": a model of " + (parameters == kSaturated ? std::string("more than 2^64") : std::to_string(parameters)) +
           " parameters needs about " + gib(need) +
           " to train (float32 weights, gradients, Adam's two moments and a step's activations), more than this "
           "machine's physical memory (" + gib(have) + ")");
}

}  // namespace kiln_examples
