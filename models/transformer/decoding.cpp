#include "transformer/decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::transformer {
namespace {

void check_decode_options(const char* op, const DecodeOptions& o, int64_t vocab) {
  KILN_CHECK(o.max_len >= 1, op, "max_len must be at least 1, got ", o.max_len);
  KILN_CHECK(o.bos_id >= 0 && o.bos_id < vocab && o.eos_id >= 0 && o.eos_id < vocab, op, "bos_id ", o.bos_id,
             " and eos_id ", o.eos_id, " must be ids of the target vocabulary (size ", vocab, ")");
}

Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows, Device device) {
  const int64_t n = static_cast<int64_t>(rows.size()), len = static_cast<int64_t>(rows.front().size());
  std::vector<int64_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return from_vector<int64_t>(flat, {n, len}, TensorOptions(kInt64)).to(device);
}

// The logits of the last position for each row of `prefixes` (all of one length):
// with the cache only the newest token is fed; without it the whole prefix.
Tensor next_logits(Seq2SeqTransformer& model, const std::vector<std::vector<int64_t>>& prefixes,
                   const Tensor& memory, const Tensor& src, std::vector<DecoderLayerCache>& cache, bool use_cache,
                   const Tensor& forbidden) {
  const Device dev = src.device();
  Tensor logits;
  if (use_cache) {
    std::vector<std::vector<int64_t>> last;
    for (const auto& p : prefixes) last.push_back({p.back()});
    logits = model.decode_step(ids_tensor(last, dev), memory, src, cache);
  } else {
    logits = model.decode(ids_tensor(prefixes, dev), memory, src);
  }
  logits = logits.select(1, logits.size(1) - 1);  // (N, V)
  return forbidden.defined() ? masked_fill(logits, forbidden, -std::numeric_limits<double>::infinity()) : logits;
}

// (V) bool, true at the pad id, or undefined when pad is the end token. Padding is never
// a word to generate: a pad id inside a prefix would be a masked key when the whole
// prefix is decoded but a visible one in the cache, so the two ways of decoding would
// disagree (and the word would vanish from the output). Built once per decoding call.
Tensor forbidden_tokens(const Seq2SeqTransformer& model, int64_t eos_id, Device device) {
  const int64_t pad = model.options.pad_id;
  if (pad == eos_id) return Tensor();
  return eq(arange(static_cast<double>(model.options.tgt_vocab_size), TensorOptions(kInt64).device(device)),
            static_cast<double>(pad));
}

double length_normalised(double log_prob, size_t length, double alpha) {
  return log_prob / std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

}  // namespace

std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tensor& src,
                                                const DecodeOptions& opts) {
  check_decode_options("greedy_decode", opts, model.options.tgt_vocab_size);
  // Eval behaviour and no graph for this thread only: the shared model is not written.
  InferenceMode inference;
  Tensor memory = model.encode(src);
  const size_t n = static_cast<size_t>(src.size(0));
  std::vector<std::vector<int64_t>> prefixes(n, std::vector<int64_t>{opts.bos_id});
  std::vector<std::vector<int64_t>> out(n);
  std::vector<bool> done(n, false);
  std::vector<DecoderLayerCache> cache;
  size_t remaining = n;
  const Tensor forbidden = forbidden_tokens(model, opts.eos_id, src.device());
  for (int64_t step = 0; step < opts.max_len && remaining > 0; ++step) {
    Tensor logits = next_logits(model, prefixes, memory, src, cache, opts.use_cache, forbidden);
    std::vector<int64_t> best = argmax(logits, -1).to_vector<int64_t>();
    for (size_t i = 0; i < n; ++i) {
      // A finished row keeps being fed (rows are independent); its tokens are ignored.
      prefixes[i].push_back(done[i] ? model.options.pad_id : best[i]);
      if (done[i]) continue;
      if (best[i] == opts.eos_id) {
        done[i] = true;
        --remaining;
      } else {
        out[i].push_back(best[i]);
      }
    }
  }
  return out;
}

std::vector<Hypothesis> beam_search(Seq2SeqTransformer& model, const Tensor& src, const BeamOptions& opts) {
  const char* op = "beam_search";
  check_decode_options(op, opts, model.options.tgt_vocab_size);
  KILN_CHECK(opts.beam_width >= 1, op, "beam_width must be at least 1, got ", opts.beam_width);
  KILN_CHECK(src.defined() && src.dim() == 2 && src.size(0) == 1, op, "expects one sentence, src of shape (1, S); got ",
             src.defined() ? shape_str(src.shape()) : std::string("undefined"));
  // Eval behaviour and no graph for this thread only: the shared model is not written.
  InferenceMode inference;
  const size_t K = static_cast<size_t>(opts.beam_width);
  Tensor memory = model.encode(src);  // (1, S, E)
  std::vector<Hypothesis> live{Hypothesis{}};
  std::vector<std::vector<int64_t>> prefixes{{opts.bos_id}};
  std::vector<Hypothesis> finished;
  std::vector<DecoderLayerCache> cache;
  const Tensor forbidden = forbidden_tokens(model, opts.eos_id, src.device());

  for (int64_t step = 0; step < opts.max_len && finished.size() < K; ++step) {
    const int64_t n_live = static_cast<int64_t>(live.size());
    Tensor src_k = src.expand({n_live, src.size(1)});
    Tensor mem_k = memory.expand({n_live, memory.size(1), memory.size(2)});
    Tensor logits = next_logits(model, prefixes, mem_k, src_k, cache, opts.use_cache, forbidden);
    Tensor logp = log_softmax(logits.to(kFloat64), -1);
    const int64_t V = logp.size(1);
    std::vector<double> lp = logp.to_vector<double>();
    // Every (beam, token) extension, best first; 2K of them are enough to refill K beams.
    std::vector<int64_t> order(lp.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    auto total = [&](int64_t c) { return live[static_cast<size_t>(c / V)].log_prob + lp[static_cast<size_t>(c)]; };
    size_t take = std::min(order.size(), 2 * K);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      [&](int64_t a, int64_t b) { return total(a) > total(b) || (total(a) == total(b) && a < b); });
    std::vector<Hypothesis> next;
    std::vector<std::vector<int64_t>> next_prefixes;
    std::vector<int64_t> origin;
    for (size_t r = 0; r < take && next.size() < K; ++r) {
      int64_t c = order[r], beam = c / V, token = c % V;
      if (!std::isfinite(total(c))) break;  // only forbidden tokens (padding) are left
      Hypothesis h = live[static_cast<size_t>(beam)];
      h.log_prob = total(c);
      if (token == opts.eos_id) {
        // Only an end among the K best counts, as in the usual beam search.
        if (r < K) {
          h.finished = true;
          h.score = length_normalised(h.log_prob, h.tokens.size() + 1, opts.length_penalty);
          finished.push_back(h);
        }
        continue;
      }
      h.tokens.push_back(token);
      h.score = length_normalised(h.log_prob, h.tokens.size(), opts.length_penalty);
      next_prefixes.push_back(prefixes[static_cast<size_t>(beam)]);
      next_prefixes.back().push_back(token);
      next.push_back(std::move(h));
      origin.push_back(beam);
    }
    if (next.empty()) break;
    Tensor index = from_vector<int64_t>(origin, {static_cast<int64_t>(origin.size())}).to(src.device());
    for (DecoderLayerCache& c : cache) {
      c.self_attn.select_batch(index);
      c.cross_attn.select_batch(index);
    }
    live = std::move(next);
    prefixes = std::move(next_prefixes);
  }
  std::vector<Hypothesis> all = finished.empty() ? live : finished;
  std::stable_sort(all.begin(), all.end(), [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  if (all.size() > K) all.resize(K);
  return all;
}

}  // namespace kiln::transformer
