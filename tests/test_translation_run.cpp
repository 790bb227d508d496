// A real translator in half a minute: the seeds' Transformer trained on the Ding
// dictionary's sentence pairs (Debian's trans-de-en) with a SentencePiece vocabulary and
// token-budget batches, evaluated on the validation split. The validation loss must fall
// well below where it starts, and greedy translations must score. A number of epochs, not
// seconds, so that a loaded machine runs the same steps (about 20 s on two idle cores).
// Built in the release tree only (it is a training run); it skips without the corpus or
// SentencePiece.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;

namespace {

constexpr int64_t kEpochs = 4;

std::vector<data::TokenPair> encode(const std::vector<data::SentencePair>& pairs, const text::SentencePieceTokenizer& t,
                                    size_t limit) {
  std::vector<data::TokenPair> out;
  for (const auto& p : pairs) {
    if (out.size() == limit) break;
    std::vector<int64_t> src = t.encode(p.source), tgt = t.encode(p.target, true, true);
    if (src.empty() || src.size() > 40 || tgt.size() > 42) continue;
    out.push_back({std::move(src), std::move(tgt)});
  }
  return out;
}

}  // namespace

TEST_CASE("translation run: 4 epochs of 4,000 real German-English pairs take the validation loss 2 nats down") {
  const data::DingCorpusOptions corpus_options;
  if (!std::filesystem::exists(corpus_options.path) || !text::SentencePieceTokenizer::available()) {
    MESSAGE("skipped: needs ", corpus_options.path, " (trans-de-en) and Kiln built with SentencePiece");
    return;
  }
  const data::ParallelCorpus corpus = data::read_ding_corpus(corpus_options);
  testing::ScratchDir dir("translation_run");
  std::vector<std::string> sentences;
  for (size_t i = 0; i < 4000 && i < corpus.train.size(); ++i) {
    sentences.push_back(corpus.train[i].source);
    sentences.push_back(corpus.train[i].target);
  }
  text::SentencePieceTrainOptions so;
  so.vocab_size = 1000;
  const auto tok = text::SentencePieceTokenizer::train(sentences, dir / "spm.model", so);
  const std::vector<data::TokenPair> train = encode(corpus.train, tok, 4000), valid = encode(corpus.valid, tok, 200);
  REQUIRE(valid.size() == 200);

  manual_seed(1);
  tr::Seq2SeqOptions mo;
  mo.src_vocab_size = mo.tgt_vocab_size = tok.vocab_size();
  mo.share_embeddings = true;
  mo.d_model = 128;
  mo.nhead = 4;
  mo.num_encoder_layers = mo.num_decoder_layers = 2;
  mo.dim_feedforward = 256;
  mo.max_len = 64;
  mo.pad_id = tok.pad_id();
  tr::Seq2SeqTransformer model(mo);
  data::PairDataLoader train_loader(train, {.shuffle = true, .seed = 1, .pad_id = tok.pad_id(), .max_tokens = 1500});
  data::PairDataLoader valid_loader(valid, {.shuffle = false, .pad_id = tok.pad_id(), .max_tokens = 1500});

  tr::TrainerOptions to;
  to.epochs = kEpochs;
  to.lr_factor = 1.0;
  to.warmup_steps = 100;
  to.progress = false;
  std::vector<double> bleu;
  to.eval_metric_names = {"val_bleu"};
  to.eval_metrics = [&](tr::Seq2SeqTransformer& m) {
    std::vector<std::string> hyps, refs;
    for (size_t i = 0; i < 100; ++i) {
      const Tensor src = from_vector<int64_t>(valid[i].source, {1, static_cast<int64_t>(valid[i].source.size())});
      tr::DecodeOptions d;
      d.bos_id = tok.bos_id();
      d.eos_id = tok.eos_id();
      d.max_len = static_cast<int64_t>(valid[i].source.size()) * 3 / 2 + 5;
      hyps.push_back(tok.decode(tr::greedy_decode(m, src, d).front()));
      refs.push_back(corpus.valid[i].target);
    }
    bleu.push_back(text::corpus_bleu(hyps, refs).score);
    return std::vector<double>{bleu.back()};
  };
  tr::Trainer trainer(model, train_loader, &valid_loader, to);
  const double before = trainer.evaluate(valid_loader);
  trainer.fit();
  const double after = trainer.evaluations().back().val_loss;
  MESSAGE("validation loss ", before, " -> ", after, " in ", trainer.global_step(), " steps (",
          trainer.train_seconds(), " s); BLEU of 100 greedy translations ", bleu.back());
  CHECK(trainer.global_step() == kEpochs * train_loader.num_batches());
  // Uniform guessing over 1000 pieces is ln(1000) = 6.9 nats; the loss falls from there by
  // more than 2 nats (to ~4.6 in the 232 steps of these 4 epochs).
  CHECK(before > 6.0);
  CHECK(after < before - 2.0);
  REQUIRE(!bleu.empty());
  CHECK(std::isfinite(bleu.back()));
  CHECK(bleu.back() >= 0.0);
}
