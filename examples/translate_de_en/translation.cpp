#include "translation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tr = kiln::transformer;

namespace translate_de_en {

std::vector<std::vector<int64_t>> translate_ids(tr::Seq2SeqTransformer& model,
                                                const std::vector<std::vector<int64_t>>& sources, int64_t bos_id,
                                                int64_t eos_id, const TranslateOptions& o) {
  // Sorted by length, so that a batch pads little; results go back to the input order.
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sources[a].size() < sources[b].size(); });
  const kiln::Device device = model.src_embedding->weight.device();
  std::vector<std::vector<int64_t>> out(sources.size());
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(o.batch_sentences)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(o.batch_sentences));
    std::vector<std::vector<int64_t>> batch;
    size_t longest = 0;
    for (size_t i = start; i < end; ++i) {
      batch.push_back(sources[order[i]]);
      longest = std::max(longest, batch.back().size());
    }
    const kiln::Tensor src = kiln::data::pad_sequences(batch, model.options.pad_id).to(device);
    tr::BeamOptions b;
    b.bos_id = bos_id;
    b.eos_id = eos_id;
    b.max_len = static_cast<int64_t>(std::floor(o.max_len_a * static_cast<double>(longest))) + o.max_len_b;
    b.beam_width = o.beam;
    b.length_penalty = o.length_penalty;
    std::vector<std::vector<int64_t>> got;
    if (o.beam > 0) {
      for (auto& hyps : tr::beam_search_batch(model, src, b)) got.push_back(hyps.front().tokens);
    } else {
      got = tr::greedy_decode(model, src, b);
    }
    for (size_t i = start; i < end; ++i) {
      // Each sentence's own limit (the batch ran to its longest's): what decoding it
      // alone gives for greedy, and for a beam very nearly.
      std::vector<int64_t>& ids = got[i - start];
      const auto limit = static_cast<size_t>(std::floor(o.max_len_a * static_cast<double>(sources[order[i]].size()))) +
                         static_cast<size_t>(o.max_len_b);
      if (ids.size() > limit) ids.resize(limit);
      out[order[i]] = std::move(ids);
    }
  }
  return out;
}

Scored translate_and_score(tr::Seq2SeqTransformer& model, const kiln::text::SentencePieceTokenizer& tokenizer,
                           const std::vector<std::vector<int64_t>>& sources, const std::vector<std::string>& references,
                           const TranslateOptions& o) {
  Scored s;
  for (const auto& ids : translate_ids(model, sources, tokenizer.bos_id(), tokenizer.eos_id(), o))
    s.hypotheses.push_back(tokenizer.decode(ids));
  s.bleu = kiln::text::corpus_bleu(s.hypotheses, references);
  s.chrf = kiln::text::corpus_chrf(s.hypotheses, references).score;
  return s;
}

}  // namespace translate_de_en
