#include "dataset.h"

#include <filesystem>
#include <fstream>

namespace translate_de_en {
namespace {

// "4 8 15": integers separated by single spaces, as the export's files hold them.
template <class Int>
std::string join(const std::vector<Int>& ids) {
  std::string s;
  for (Int id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

// Opens a file of the export for writing, or fails naming it.
std::ofstream open_out(const std::filesystem::path& path) {
  std::ofstream out(path);
  KILN_CHECK(out.good(), "translate_de_en", "cannot write '", path.string(), "'");
  return out;
}

}  // namespace

EncodedSplit encode_split(const std::vector<kiln::data::SentencePair>& pairs,
                          const kiln::text::SentencePieceTokenizer& tokenizer, int64_t max_subwords) {
  EncodedSplit out;
  for (const auto& p : pairs) {
    // Targets "bos … eos", as the trainer splits them for teacher forcing.
    std::vector<int64_t> src = tokenizer.encode(p.source), tgt = tokenizer.encode(p.target, true, true);
    const auto tgt_subwords = static_cast<int64_t>(tgt.size()) - 2;
    if (static_cast<int64_t>(src.size()) > max_subwords || tgt_subwords > max_subwords || src.empty() ||
        tgt_subwords == 0) {
      ++out.skipped_long;
      continue;
    }
    out.text.push_back(p);
    out.ids.push_back({std::move(src), std::move(tgt)});
  }
  return out;
}

std::vector<kiln::data::TokenPair> sample_split(const EncodedSplit& split,
                                                const kiln::text::SentencePieceTokenizer& tokenizer, double alpha,
                                                bool targets, uint64_t seed, int64_t max_subwords) {
  std::vector<std::string> sources, target_texts;
  for (const auto& p : split.text) {
    sources.push_back(p.source);
    target_texts.push_back(p.target);
  }
  // Each side its own stream of draws.
  const std::vector<std::vector<int64_t>> src = tokenizer.sample_encode(sources, {alpha, -1, 2 * seed});
  std::vector<std::vector<int64_t>> tgt;
  if (targets) {
    tgt = tokenizer.sample_encode(target_texts, {alpha, -1, 2 * seed + 1}, true, true);
  } else {
    for (const auto& p : split.ids) tgt.push_back(p.target);
  }
  std::vector<kiln::data::TokenPair> out;
  out.reserve(split.ids.size());
  for (size_t i = 0; i < split.ids.size(); ++i) {
    const bool fits = static_cast<int64_t>(src[i].size()) <= max_subwords &&
                      static_cast<int64_t>(tgt[i].size()) - 2 <= max_subwords;
    out.push_back(fits ? kiln::data::TokenPair{src[i], tgt[i]} : split.ids[i]);
  }
  return out;
}

namespace {

// The model of --spm, or one trained on the training split (both languages: one table
// embeds source and target), or the one another process trained.
kiln::text::SentencePieceTokenizer make_tokenizer(const DatasetOptions& o, const kiln::data::ParallelCorpus& corpus) {
  if (!o.spm_path.empty()) return kiln::text::SentencePieceTokenizer::load(o.spm_path);
  if (!o.train_tokenizer) return kiln::text::SentencePieceTokenizer::load(o.spm_out);
  std::vector<std::string> sentences;
  for (const auto* pairs : {&corpus.train, &corpus.phrases})
    for (const auto& p : *pairs) {
      sentences.push_back(p.source);
      sentences.push_back(p.target);
    }
  kiln::text::SentencePieceTrainOptions t;
  t.vocab_size = o.vocab_size;
  t.model_type = o.spm_type;
  return kiln::text::SentencePieceTokenizer::train(sentences, o.spm_out, t);
}

kiln::data::ParallelCorpus read_corpus(const DatasetOptions& o) {
  kiln::data::DingCorpusOptions co;
  if (!o.corpus_path.empty()) co.path = o.corpus_path;
  co.phrases = o.phrases;
  co.max_phrases = o.max_phrases;
  return kiln::data::read_ding_corpus(co);
}

}  // namespace

Dataset load_dataset(const DatasetOptions& o) {
  kiln::data::ParallelCorpus corpus = read_corpus(o);
  kiln::text::SentencePieceTokenizer tokenizer = make_tokenizer(o, corpus);
  Dataset d{std::move(corpus), std::move(tokenizer), {}, {}, {}};
  std::vector<kiln::data::SentencePair> train = d.corpus.train;
  train.insert(train.end(), d.corpus.phrases.begin(), d.corpus.phrases.end());
  d.train = encode_split(train, d.tokenizer, o.max_subwords);
  d.valid = encode_split(d.corpus.valid, d.tokenizer, o.max_subwords);
  d.test = encode_split(d.corpus.test, d.tokenizer, o.max_subwords);
  return d;
}

void export_for_pytorch(const std::string& dir, const Dataset& data, const kiln::data::PairDataLoader& train,
                        int64_t epochs, const std::string& config_json) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path root(dir);
  data.tokenizer.save((root / "spm.model").string());
  open_out(root / "config.json") << config_json << "\n";
  const std::pair<const char*, const EncodedSplit*> splits[] = {{"train", &data.train}, {"valid", &data.valid},
                                                                {"test", &data.test}};
  for (const auto& [name, split] : splits) {
    std::ofstream ids = open_out(root / (std::string(name) + ".ids"));
    for (const auto& p : split->ids) ids << join(p.source) << '\t' << join(p.target) << '\n';
    if (split == &data.train) continue;
    std::ofstream de = open_out(root / (std::string(name) + ".de")), en = open_out(root / (std::string(name) + ".en"));
    for (const auto& p : split->text) {
      de << p.source << '\n';
      en << p.target << '\n';
    }
  }
  // The batches are fixed (PairDataLoaderOptions::max_tokens); each epoch reads them in
  // its own order.
  std::ofstream batches = open_out(root / "batches.txt");
  for (const auto& b : train.token_batches()) batches << join(b) << '\n';
  std::ofstream order = open_out(root / "order.txt");
  for (int64_t e = 0; e < epochs; ++e) order << join(train.token_batch_order(e)) << '\n';
}

}  // namespace translate_de_en
