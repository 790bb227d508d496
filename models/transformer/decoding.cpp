#include "transformer/decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

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

// One sentence's beam search.
struct Beams {
  std::vector<Hypothesis> live{Hypothesis{}};  // the decoder input of each: bos and its tokens
  std::vector<Hypothesis> finished;
  bool done = false;  // beam_width finished hypotheses, or no live one left

  // One step: lp holds the next token's log-probabilities of each live beam (live.size()
  // rows of V). Keeps the best extensions as the new live beams and returns, for each,
  // the beam it extends (the rows of the cache to keep); empty when the sentence is done.
  std::vector<int64_t> advance(const double* lp, int64_t V, const BeamOptions& opts) {
    const size_t K = static_cast<size_t>(opts.beam_width);
    // Every (beam, token) extension c = beam·V + token, best first (the lower c among
    // equals); 2K of them are enough to refill K beams. The totals are summed once, not
    // at each comparison.
    std::vector<double> totals(live.size() * static_cast<size_t>(V));
    std::vector<int64_t> order(totals.size());
    for (size_t beam = 0, i = 0; beam < live.size(); ++beam)
      for (int64_t token = 0; token < V; ++token, ++i) {
        totals[i] = live[beam].log_prob + lp[i];
        order[i] = static_cast<int64_t>(i);
      }
    auto total = [&](int64_t c) { return totals[static_cast<size_t>(c)]; };
    size_t take = std::min(order.size(), 2 * K);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      [&](int64_t a, int64_t b) { return total(a) > total(b) || (total(a) == total(b) && a < b); });
    std::vector<Hypothesis> next;
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
      next.push_back(std::move(h));
      origin.push_back(beam);
    }
    // With no extension left the live beams stay those of the last step: they are the
    // answer when nothing has finished.
    if (next.empty()) {
      done = true;
      return {};
    }
    live = std::move(next);
    done = finished.size() >= K;
    return done ? std::vector<int64_t>{} : origin;
  }

  // The finished hypotheses, or the live ones when none finished (cut at max_len), best
  // first; a stable sort keeps the order they were found in among equal scores.
  std::vector<Hypothesis> best(size_t K) const {
    std::vector<Hypothesis> all = finished.empty() ? live : finished;
    std::stable_sort(all.begin(), all.end(),
                     [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
    if (all.size() > K) all.resize(K);
    return all;
  }
};

// beam_search_batch, with the op to name in errors (beam_search calls it too).
std::vector<std::vector<Hypothesis>> beam_search_rows(const char* op, Seq2SeqTransformer& model, const Tensor& src,
                                                      const BeamOptions& opts) {
  check_decode_options(op, opts, model.options.tgt_vocab_size);
  KILN_CHECK(opts.beam_width >= 1, op, "beam_width must be at least 1, got ", opts.beam_width);
  KILN_CHECK(src.defined() && src.dtype() == kInt64 && src.dim() == 2, op,
             "expects src of shape (N, S) int64 ids, got ",
             src.defined() ? dtype_name(src.dtype()) + std::string(" ") + shape_str(src.shape())
                           : std::string("undefined"));
  KILN_CHECK(src.size(0) >= 1 && src.size(1) >= 1, op, "expects at least one sentence of at least one token, got src ",
             shape_str(src.shape()));
  // Eval behaviour and no graph for this thread only: the shared model is not written.
  InferenceMode inference;
  const Device dev = src.device();
  const size_t K = static_cast<size_t>(opts.beam_width);
  const Tensor memory = model.encode(src);  // (N, S, E)
  const Tensor forbidden = forbidden_tokens(model, opts.eos_id, dev);
  std::vector<Beams> beams(static_cast<size_t>(src.size(0)));
  // The sentences still decoding, in the order of their rows in the batch; each has as
  // many consecutive rows as live beams.
  std::vector<int64_t> active(beams.size());
  for (size_t i = 0; i < active.size(); ++i) active[i] = static_cast<int64_t>(i);
  std::vector<DecoderLayerCache> cache;  // R rows, one per live beam

  for (int64_t step = 0; step < opts.max_len && !active.empty(); ++step) {
    // R = the live beams of the active sentences; each row's sentence and prefix.
    std::vector<int64_t> sentence_of_row;
    std::vector<std::vector<int64_t>> prefixes;
    for (int64_t s : active) {
      const Beams& b = beams[static_cast<size_t>(s)];
      sentence_of_row.insert(sentence_of_row.end(), b.live.size(), s);
      for (const Hypothesis& h : b.live) {
        prefixes.push_back({opts.bos_id});  // bos and the hypothesis's tokens
        prefixes.back().insert(prefixes.back().end(), h.tokens.begin(), h.tokens.end());
      }
    }
    const int64_t R = static_cast<int64_t>(sentence_of_row.size());
    Tensor rows = from_vector<int64_t>(sentence_of_row, {R}).to(dev);  // (R)
    Tensor src_rows = index_select(src, 0, rows);                        // (R, S): the padding mask of each row
    // With the cache the memory is read at the first step only: the cross-attention keeps
    // its keys and values, reordered below with the rest of the cache. Gathering it at
    // every step would copy R·S·E values for nothing.
    Tensor mem_rows = opts.use_cache && !cache.empty() ? Tensor() : index_select(memory, 0, rows);  // (R, S, E)
    Tensor logits = next_logits(model, prefixes, mem_rows, src_rows, cache, opts.use_cache, forbidden);  // (R, V)
    const Tensor logp = log_softmax(logits.to(kFloat64), -1);  // (R, V)
    const int64_t V = logp.size(1);
    const std::vector<double> lp = logp.to_vector<double>();
    // The rows whose beams go on, in the order of the next step's rows.
    std::vector<int64_t> keep;
    std::vector<int64_t> still_active;
    int64_t first_row = 0;
    for (int64_t s : active) {
      Beams& b = beams[static_cast<size_t>(s)];
      const int64_t n_live = static_cast<int64_t>(b.live.size());
      std::vector<int64_t> origin = b.advance(lp.data() + first_row * V, V, opts);
      if (!b.done) {
        for (int64_t beam : origin) keep.push_back(first_row + beam);
        still_active.push_back(s);
      }
      first_row += n_live;
    }
    active = std::move(still_active);
    if (active.empty()) break;
    // The cross-attention's keys and values depend on the row's sentence only, so they
    // move only when some row's sentence changes (a sentence left the batch or kept fewer
    // beams), not when beams of one sentence trade places: most steps copy no R·S·E
    // memory keys and values, only the self-attention's.
    bool same_rows = static_cast<int64_t>(keep.size()) == R, same_sentences = same_rows;
    for (int64_t i = 0; same_sentences && i < R; ++i) {
      const int64_t from = keep[static_cast<size_t>(i)];
      same_rows = same_rows && from == i;
      same_sentences = sentence_of_row[static_cast<size_t>(from)] == sentence_of_row[static_cast<size_t>(i)];
    }
    if (!same_rows) {
      Tensor index = from_vector<int64_t>(keep, {static_cast<int64_t>(keep.size())}).to(dev);  // (R')
      for (DecoderLayerCache& c : cache) {
        c.self_attn.select_batch(index);
        if (!same_sentences) c.cross_attn.select_batch(index);
      }
    }
  }
  std::vector<std::vector<Hypothesis>> out;
  out.reserve(beams.size());
  for (const Beams& b : beams) out.push_back(b.best(K));
  return out;
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

std::vector<std::vector<Hypothesis>> beam_search_batch(Seq2SeqTransformer& model, const Tensor& src,
                                                       const BeamOptions& opts) {
  return beam_search_rows("beam_search_batch", model, src, opts);
}

std::vector<Hypothesis> beam_search(Seq2SeqTransformer& model, const Tensor& src, const BeamOptions& opts) {
  const char* op = "beam_search";
  KILN_CHECK(src.defined() && src.dim() == 2 && src.size(0) == 1, op, "expects one sentence, src of shape (1, S); got ",
             src.defined() ? shape_str(src.shape()) : std::string("undefined"));
  return std::move(beam_search_rows(op, model, src, opts).front());
}

}  // namespace kiln::transformer
