// translate_toy: trains a small Transformer from scratch to translate the toy German →
// English corpus (000's "ich mochte ein bier" and pairs in its spirit), prints every
// translation with the exact-match rates, and draws what it learned as PNG files.
//
//   translate_toy [--epochs N] [--d-model D] [--heads H] [--layers L] [--ff F]
//                 [--dropout P] [--seed S] [--threads T] [--device cpu|cuda:0]
//                 [--beam K] [--checkpoint-dir DIR] [--resume FILE] [--load FILE]
//                 [--out DIR] [--metrics FILE] [--no-progress] [--bf16] [--translate "ich mochte ein bier"]
//
// --bf16: bfloat16 mixed precision (kiln::AutocastGuard): training's forward pass and loss
// and the translations run their GEMMs in bfloat16 with float32 accumulation; weights,
// gradients and Adam stay float32.
//
// Under mpirun (`mpirun -np 2 translate_toy`, a Kiln built with MPI) it trains data
// parallel: each process reads its shard of every batch of 16 (16 / N sentences, rounded
// up), the gradients are averaged (the Trainer's DistributedDataParallel), and rank 0
// alone prints, draws and writes the metrics and checkpoints.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>
#include <kiln/viz/plot.h>

#include "../common/attention_picture.h"
#include "../common/cli.h"
#include "../common/memory_budget.h"
#include "corpus.h"

namespace tr = kiln::transformer;
using kiln::Tensor;

namespace {

struct Args {
  int64_t epochs = 40;
  int64_t d_model = 64, heads = 4, layers = 2, ff = 128;
  double dropout = 0.1;
  uint64_t seed = 1;
  int threads = 0;  // 0: every core
  std::string device = "cpu";
  int64_t beam = 0;  // 0: greedy
  std::string checkpoint_dir, resume, load, out = "translate_toy_out", metrics, translate;
  bool progress = true;
  bool has_translate = false;
  bool bf16 = false;
};

const char* kUsage =
    "translate_toy [--epochs N] [--d-model D] [--heads H] [--layers L] [--ff F]\n"
    "                     [--dropout P] [--seed S] [--threads T] [--device cpu|cuda:0]\n"
    "                     [--beam K (0 = greedy)] [--checkpoint-dir DIR] [--resume FILE]\n"
    "                     [--load FILE] [--out DIR] [--metrics FILE.csv|.jsonl]\n"
    "                     [--no-progress] [--bf16] [--translate \"german sentence\"]";

Args parse(kiln_examples::Cli& cli) {
  Args a;
  a.epochs = cli.integer("--epochs", a.epochs, 0, 1'000'000);
  a.d_model = cli.integer("--d-model", a.d_model, 1, 65536);
  a.heads = cli.integer("--heads", a.heads, 1, 1024);
  a.layers = cli.integer("--layers", a.layers, 1, 1000);
  a.ff = cli.integer("--ff", a.ff, 1, 1 << 20);
  a.dropout = cli.real("--dropout", a.dropout, 0.0, 0.95);
  a.seed = static_cast<uint64_t>(cli.integer("--seed", 1, 0, INT64_MAX));
  a.threads = static_cast<int>(cli.integer("--threads", 0, 0, 4096));
  a.device = cli.nonempty_text("--device", a.device);
  a.beam = cli.integer("--beam", a.beam, 0, 64);
  a.resume = cli.nonempty_text("--resume", "");
  a.load = cli.nonempty_text("--load", "");
  a.metrics = cli.nonempty_text("--metrics", "");
  a.has_translate = cli.flag("--translate");
  a.translate = cli.text("--translate", "");
  a.progress = !cli.flag("--no-progress");
  a.bf16 = cli.flag("--bf16");
  // The directories are made (and checked) now, before any training; --out only when
  // there will be pictures to draw.
  a.checkpoint_dir = cli.directory("--checkpoint-dir", "");
  const std::string out = cli.text("--out", a.out);  // "" draws no pictures
  cli.finish();
  if (!a.resume.empty() && !a.load.empty()) cli.fail("--resume and --load exclude each other");
  if (a.d_model % a.heads != 0)
    cli.fail("--d-model (" + std::to_string(a.d_model) + ") must be a multiple of --heads (" + std::to_string(a.heads) +
             ")");
  a.out = out;
  if (!a.has_translate && !out.empty()) cli.make_directory("--out", out);
  return a;
}

struct Data {
  kiln::data::Vocab src_vocab, tgt_vocab;
  std::vector<kiln::data::TokenPair> train, held_out;
};

std::vector<std::string> side(const std::vector<translate_toy::SentencePair>& pairs, bool english) {
  std::vector<std::string> out;
  for (const auto& p : pairs) out.push_back(english ? p.second : p.first);
  return out;
}

Data make_data() {
  const auto& train = translate_toy::training_pairs();
  Data d{kiln::data::Vocab::build(side(train, false)), kiln::data::Vocab::build(side(train, true)), {}, {}};
  auto encode = [&](const translate_toy::SentencePair& p) {
    // Source: the words; target: "S words E" (the trainer shifts it for teacher forcing).
    return kiln::data::TokenPair{d.src_vocab.encode(p.first), d.tgt_vocab.encode(p.second, true, true)};
  };
  for (const auto& p : train) d.train.push_back(encode(p));
  for (const auto& p : translate_toy::held_out_pairs()) d.held_out.push_back(encode(p));
  return d;
}

tr::Seq2SeqOptions model_options(const Args& a, const Data& d) {
  tr::Seq2SeqOptions o;
  o.src_vocab_size = d.src_vocab.size();
  o.tgt_vocab_size = d.tgt_vocab.size();
  o.d_model = a.d_model;
  o.nhead = a.heads;
  o.num_encoder_layers = a.layers;
  o.num_decoder_layers = a.layers;
  o.dim_feedforward = a.ff;
  o.dropout = a.dropout;
  o.max_len = 64;
  o.pad_id = d.src_vocab.pad_id();
  return o;
}

// ids -> (1, len) int64 on the device: a batch of one sentence.
Tensor one_sentence(const std::vector<int64_t>& ids, kiln::Device device) {
  return kiln::from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}).to(device);
}

std::vector<int64_t> translate(tr::Seq2SeqTransformer& model, const Data& d, const std::vector<int64_t>& src_ids,
                               const Args& a, kiln::Device device) {
  Tensor src = one_sentence(src_ids, device);
  tr::DecodeOptions base;
  base.bos_id = d.tgt_vocab.bos_id();
  base.eos_id = d.tgt_vocab.eos_id();
  base.max_len = 20;
  if (a.beam > 0) {
    tr::BeamOptions b;
    static_cast<tr::DecodeOptions&>(b) = base;
    b.beam_width = a.beam;
    return tr::beam_search(model, src, b).front().tokens;
  }
  return tr::greedy_decode(model, src, base).front();
}

// Prints each pair's translation and returns the exact-match rate.
double report(const char* title, const std::vector<translate_toy::SentencePair>& pairs, tr::Seq2SeqTransformer& model,
              const Data& d, const Args& a, kiln::Device device) {
  int64_t exact = 0;
  std::printf("\n%s\n", title);
  for (const auto& p : pairs) {
    std::string got = d.tgt_vocab.decode(translate(model, d, d.src_vocab.encode(p.first), a, device));
    bool ok = got == p.second;
    exact += ok;
    std::printf("  %s %-24s -> %-26s%s\n", ok ? "ok  " : "MISS", p.first.c_str(), got.c_str(),
                ok ? "" : (" (expected: " + p.second + ")").c_str());
  }
  double rate = pairs.empty() ? 0.0 : 100.0 * static_cast<double>(exact) / static_cast<double>(pairs.size());
  std::printf("  exact match: %lld/%zu = %.1f%%\n", static_cast<long long>(exact), pairs.size(), rate);
  return rate;
}

std::vector<std::string> words_of(const kiln::data::Vocab& v, const std::vector<int64_t>& ids) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.word(id));
  return w;
}

// The pictures: positional encoding, a batch's masks, cross-attention, loss curve.
void draw(const std::string& dir, tr::Seq2SeqTransformer& model, const Data& d, const Args& a,
          const std::vector<double>& losses, kiln::Device device) {
  namespace fs = std::filesystem;
  namespace viz = kiln::viz;
  fs::create_directories(dir);
  auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };

  viz::HeatmapOptions pe;
  pe.title = "sinusoidal positional encoding";
  pe.x_label = "dimension";
  pe.y_label = "position";
  pe.cell = 6;
  viz::save_heatmap(path("positional_encoding.png"), tr::sinusoidal_table(64, a.d_model), pe);

  // 000's first sentence and the shortest one, padded with P as the seed pads them.
  size_t shortest = 0;
  for (size_t i = 0; i < d.train.size(); ++i) {
    if (d.train[i].source.size() < d.train[shortest].source.size()) shortest = i;
  }
  kiln::data::PairDataLoader two({d.train[0], d.train[shortest]}, {.batch_size = 2, .shuffle = false});
  kiln::data::PairBatch batch = two.make_batch({0, 1});
  const Tensor& tgt_in = batch.target;  // whole targets "S … E", so the padding shows
  std::vector<std::string> src_titles, tgt_titles;
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<int64_t> s = batch.source.select(0, i).to_vector<int64_t>();
    std::vector<int64_t> t = tgt_in.select(0, i).to_vector<int64_t>();
    src_titles.push_back(d.src_vocab.decode(s, false));
    tgt_titles.push_back(d.tgt_vocab.decode(t, false));
  }
  viz::HeatmapOptions m;
  m.cell = 24;
  m.colorbar = false;
  m.x_label = "key";
  m.y_label = "query";
  m.title = "padding mask (yellow = pad key, ignored)";
  Tensor pad = tr::attn_pad_mask(batch.source, batch.source);
  viz::save_heatmap_grid(path("padding_mask.png"), {pad.select(0, 0), pad.select(0, 1)}, src_titles, 2, m);
  m.title = "subsequence mask (yellow = future)";
  viz::save_heatmap(path("subsequence_mask.png"), tr::attn_subsequence_mask(tgt_in).select(0, 0), m);
  m.title = "decoder self-attention mask (padding or future)";
  Tensor dec = tr::decoder_self_attn_mask(tgt_in);
  viz::save_heatmap_grid(path("decoder_mask.png"), {dec.select(0, 0), dec.select(0, 1)}, tgt_titles, 2, m);

  // Cross-attention of the last decoder layer while translating 000's first sentence.
  const auto& example = translate_toy::training_pairs().front();
  std::vector<int64_t> src_ids = d.src_vocab.encode(example.first);
  std::vector<int64_t> out_ids = translate(model, d, src_ids, a, device);
  std::vector<int64_t> dec_in{d.tgt_vocab.bos_id()};
  dec_in.insert(dec_in.end(), out_ids.begin(), out_ids.end());
  viz::HeatmapOptions ca;
  ca.row_labels = words_of(d.tgt_vocab, dec_in);
  ca.col_labels = words_of(d.src_vocab, src_ids);
  ca.cell = 28;
  ca.title = "cross-attention: " + example.first;
  kiln_examples::save_attention_heads(
      path("cross_attention.png"),
      model.cross_attention(one_sentence(src_ids, device), one_sentence(dec_in, device)).select(0, 0), ca);

  if (!losses.empty()) {
    viz::LinePlotOptions lp;
    lp.title = "training loss";
    viz::save_line_plot(path("loss.png"), losses, lp);
  }
  std::printf("\npictures: %s/{positional_encoding,padding_mask,subsequence_mask,decoder_mask,cross_attention,loss}.png\n",
              dir.c_str());
}

// Refuses (exit 2) a model whose training would not fit in the machine's memory,
// before building it.
void check_size(const kiln_examples::Cli& cli, const Args& a, const Data& d) {
  namespace ke = kiln_examples;
  const uint64_t params = ke::transformer_parameters(d.src_vocab.size(), d.tgt_vocab.size(), a.d_model, a.ff, a.layers,
                                                     a.layers);
  const int64_t kBatch = 16, kMaxLen = 64;
  const uint64_t activations = ke::transformer_activations(kBatch, kMaxLen, a.heads, a.d_model, a.ff, 2 * a.layers,
                                                           d.tgt_vocab.size());
  ke::check_fits(cli,
                 "--d-model " + std::to_string(a.d_model) + " --ff " + std::to_string(a.ff) + " --layers " +
                     std::to_string(a.layers) + " --heads " + std::to_string(a.heads),
                 params, ke::training_bytes(params, activations));
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, kUsage);
  const Args a = parse(cli);
  Data d = make_data();
  check_size(cli, a, d);
  // Launched by mpirun: one process per rank, training together; rank 0 reports.
  if (kiln::distributed::launched_by_mpi()) kiln::distributed::init();
  const int world = kiln::distributed::is_initialized() ? kiln::distributed::world_size() : 1;
  const bool main_rank = world == 1 || kiln::distributed::rank() == 0;
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  kiln::Device device(a.device);
  kiln::manual_seed(a.seed);

  // Check a sentence to translate before spending time on training.
  std::vector<int64_t> user_ids;
  if (a.has_translate) {
    KILN_CHECK(!kiln::data::split_words(a.translate).empty(), "translate",
               "the sentence to translate is empty; give German words, e.g. --translate \"ich mochte ein bier\"");
    user_ids = d.src_vocab.encode_strict(a.translate);
  }

  tr::Seq2SeqTransformer model(model_options(a, d));
  model.to(device);
  if (main_rank) {
    std::printf("translate_toy: %zu training pairs, %zu held out; vocabularies %lld (de) and %lld (en)\n",
                d.train.size(), d.held_out.size(), static_cast<long long>(d.src_vocab.size()),
                static_cast<long long>(d.tgt_vocab.size()));
    std::printf("model: d_model %lld, %lld heads, %lld+%lld layers, d_ff %lld: %lld parameters; %s\n",
                static_cast<long long>(a.d_model), static_cast<long long>(a.heads), static_cast<long long>(a.layers),
                static_cast<long long>(a.layers), static_cast<long long>(a.ff),
                static_cast<long long>(model.num_parameters()), kiln::config().c_str());
    if (world > 1) std::printf("data parallel: %d processes (mpirun)\n", world);
  }

  std::vector<double> losses;
  if (!a.load.empty()) {
    kiln::io::load_state_dict(a.load, model, true);
    if (main_rank) std::printf("loaded %s\n", a.load.c_str());
  } else {
    kiln::data::PairDataLoaderOptions batches{.batch_size = 16, .shuffle = true, .seed = a.seed};
    if (world > 1) {
      // The same batches of 16 as one process: each rank reads its share of every one.
      batches.batch_size = (16 + world - 1) / world;
      batches.shuffle = false;
      batches.sampler = std::make_shared<kiln::data::DistributedSampler>(
          static_cast<int64_t>(d.train.size()), kiln::data::DistributedSamplerOptions{.shuffle = true, .seed = a.seed});
    }
    kiln::data::PairDataLoader train(d.train, batches);
    kiln::data::PairDataLoader held(d.held_out, {.batch_size = 16, .shuffle = false});
    tr::TrainerOptions t;
    t.epochs = a.epochs;
    t.lr_factor = 0.3;
    t.warmup_steps = 50;
    t.label_smoothing = 0.1;
    t.clip_grad_norm = 1.0;
    t.metrics_path = a.metrics;
    t.checkpoint_dir = a.checkpoint_dir;
    t.resume_from = a.resume;
    t.progress = a.progress;
    if (a.bf16) t.autocast = kiln::kBFloat16;
    t.step_losses_kept = std::min<int64_t>(a.epochs * train.num_batches(), 1'000'000);  // for the loss plot
    auto start = std::chrono::steady_clock::now();
    tr::Trainer trainer(model, train, &held, t);
    trainer.fit();
    losses = trainer.step_losses();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (main_rank)
      std::printf("trained %lld steps in %.2f s (%.1f ms/step)\n", static_cast<long long>(trainer.global_step()), secs,
                  1000.0 * secs / static_cast<double>(std::max<int64_t>(trainer.global_step(), 1)));
    if (!a.checkpoint_dir.empty() && main_rank) {
      std::string weights = (std::filesystem::path(a.checkpoint_dir) / "model.safetensors").string();
      kiln::io::save_state_dict(weights, model);
      std::printf("saved %s (load it with --load)\n", weights.c_str());
    }
  }

  if (!main_rank) return 0;  // the others trained the same weights; rank 0 reports
  std::optional<kiln::AutocastGuard> autocast;  // decoding as trained
  if (a.bf16) autocast.emplace(kiln::kBFloat16);
  if (a.has_translate) {
    std::printf("\n%s -> %s\n", a.translate.c_str(),
                d.tgt_vocab.decode(translate(model, d, user_ids, a, device)).c_str());
    return 0;
  }
  report("training pairs", translate_toy::training_pairs(), model, d, a, device);
  report("held-out pairs (never seen in training)", translate_toy::held_out_pairs(), model, d, a, device);
  if (!a.out.empty()) draw(a.out, model, d, a, losses, device);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("translate_toy", [&] { return run(argc, argv); });
}
