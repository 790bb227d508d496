// translate_de_en: trains the seeds' Transformer to translate real German into English —
// the Ding dictionary's example sentences (Debian's trans-de-en), a joint SentencePiece
// vocabulary, batches by a token budget, the paper's schedule — for a wall-clock budget,
// evaluating validation BLEU as it goes; then prints test BLEU and chrF, ten translations
// beside their references, and draws the loss and BLEU curves and a cross-attention map.
//
//   translate_de_en [--minutes M | --epochs N] [--out DIR] [--bf16] [--threads T] [--device cuda:0] …
//   translate_de_en --load DIR --translate "Ich kann noch nichts Konkretes sagen."
//   translate_de_en --load DIR --evaluate [--beam K] [--length-penalty A] [--average-last N]
//   mpirun -np 2 translate_de_en --minutes 15     (data parallel; a Kiln built with MPI)
//
// --out DIR (default translate_de_en_out) gets spm.model, model.safetensors (the weights
// at the end, the configuration in its metadata), checkpoints/ (last, best on validation
// loss; --resume checkpoints/last.safetensors continues a run exactly), metrics.csv,
// test_translations.txt and the pictures. --average-last N makes model.safetensors the
// mean of the run's newest N step checkpoints (see --checkpoint-every); with --load it
// averages those of DIR/checkpoints instead of reading model.safetensors. --evaluate
// scores a saved model on the validation and test splits. --export DIR writes the ids,
// batches and recipe for benchmarks/torch_translate.py (the same training in PyTorch)
// and exits. --subword-alpha A segments the training pairs anew each epoch (BPE-dropout
// with probability A, or unigram sampling with smoothing A: subword regularisation), both
// sides or (--subword-sides source) the German only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>
#include <kiln/viz/plot.h>

#include "../common/attention_picture.h"
#include "../common/checkpoint_metadata.h"
#include "../common/cli.h"
#include "dataset.h"
#include "translation.h"

namespace tr = kiln::transformer;
namespace fs = std::filesystem;
using kiln::Tensor;
using namespace translate_de_en;

namespace {

struct Args {
  double minutes = 15;  // 0: no time budget (--epochs alone)
  int64_t epochs = 1'000'000;
  double eval_every = 60;
  std::string corpus, spm, out = "translate_de_en_out", resume, export_dir, load, translate, device = "cpu";
  int64_t vocab_size = 4000, max_subwords = 100;
  std::string spm_type = "bpe";
  int64_t d_model = 256, heads = 4, layers = 3, ff = 1024, max_tokens = 1500, warmup = 400;
  double dropout = 0.3, lr_factor = 1.0, label_smoothing = 0.1, clip = 1.0, weight_decay = 0.0;
  double subword_alpha = 0;  // 0: the training pairs keep one segmentation
  std::string subword_sides = "both";  // which sides --subword-alpha draws: both or source
  int64_t beam = 4, export_epochs = 400, checkpoint_every = 0, keep_checkpoints = 1, average_last = 1;
  int64_t max_phrases = 0;  // with --phrases: at most this many (0: all)
  double length_penalty = TranslateOptions{}.length_penalty;
  uint64_t seed = 1;
  int threads = 0;
  bool bf16 = false, progress = true, has_translate = false, evaluate = false, norm_first = true, phrases = false;
};

const char* kUsage =
    "translate_de_en [--minutes M (training time, default 15) | --epochs N] [--eval-every SECONDS]\n"
    "                       [--corpus FILE] [--phrases [--max-phrases N]] [--vocab-size V] [--spm-type bpe|unigram] [--spm FILE.model]\n"
    "                       [--subword-alpha A [--subword-sides both|source]] [--max-subwords N] [--d-model D] [--heads H] [--layers L] [--ff F] [--dropout P]\n"
    "                       [--post-norm]\n"
    "                       [--max-tokens N] [--lr-factor F] [--warmup STEPS] [--label-smoothing E] [--clip C]\n"
    "                       [--weight-decay W] [--beam K (0 = greedy)] [--length-penalty A] [--seed S]\n"
    "                       [--threads T] [--bf16] [--device cpu|cuda:N]\n"
    "                       [--checkpoint-every STEPS] [--keep-checkpoints N] [--average-last N]\n"
    "                       [--out DIR] [--resume FILE] [--no-progress] [--export DIR [--export-epochs N]]\n"
    "                       [--load DIR (--translate \"German sentence\" | --evaluate)]";

Args parse(kiln_examples::Cli& cli) {
  Args a;
  const double minutes = cli.real("--minutes", NAN, -1e9, 1e9);
  const int64_t epochs = cli.integer("--epochs", 0, 1, 1'000'000);
  a.eval_every = cli.real("--eval-every", a.eval_every, 1, 1e9);
  a.corpus = cli.nonempty_text("--corpus", "");
  a.phrases = cli.flag("--phrases");
  a.max_phrases = cli.integer("--max-phrases", a.max_phrases, 1, INT64_MAX);
  a.spm = cli.nonempty_text("--spm", "");
  a.vocab_size = cli.integer("--vocab-size", a.vocab_size, 16, 1'000'000);
  a.spm_type = cli.nonempty_text("--spm-type", a.spm_type);
  a.subword_alpha = cli.real("--subword-alpha", a.subword_alpha, 0.0, 1.0);
  a.subword_sides = cli.nonempty_text("--subword-sides", a.subword_sides);
  a.max_subwords = cli.integer("--max-subwords", a.max_subwords, 1, 10'000);
  a.d_model = cli.integer("--d-model", a.d_model, 1, 65536);
  a.heads = cli.integer("--heads", a.heads, 1, 1024);
  a.layers = cli.integer("--layers", a.layers, 1, 100);
  a.ff = cli.integer("--ff", a.ff, 1, 1 << 20);
  a.dropout = cli.real("--dropout", a.dropout, 0.0, 0.95);
  a.norm_first = !cli.flag("--post-norm");
  a.max_tokens = cli.integer("--max-tokens", a.max_tokens, 1, 1 << 24);
  a.lr_factor = cli.real("--lr-factor", a.lr_factor, 1e-6, 1e3);
  a.warmup = cli.integer("--warmup", a.warmup, 1, 10'000'000);
  a.label_smoothing = cli.real("--label-smoothing", a.label_smoothing, 0.0, 0.99);
  a.clip = cli.real("--clip", a.clip, 0.0, 1e6);
  a.weight_decay = cli.real("--weight-decay", a.weight_decay, 0.0, 1.0);
  a.beam = cli.integer("--beam", a.beam, 0, 64);
  a.length_penalty = cli.real("--length-penalty", a.length_penalty, 0.0, 10.0);
  a.checkpoint_every = cli.integer("--checkpoint-every", a.checkpoint_every, 0, INT64_MAX);
  a.keep_checkpoints = cli.integer("--keep-checkpoints", a.keep_checkpoints, 1, 1'000'000);
  a.average_last = cli.integer("--average-last", a.average_last, 1, 1'000'000);
  a.seed = static_cast<uint64_t>(cli.integer("--seed", 1, 0, INT64_MAX));
  a.threads = static_cast<int>(cli.integer("--threads", 0, 0, 4096));
  a.bf16 = cli.flag("--bf16");
  a.device = cli.nonempty_text("--device", a.device);
  a.progress = !cli.flag("--no-progress");
  a.resume = cli.nonempty_text("--resume", "");
  a.export_dir = cli.nonempty_text("--export", "");
  a.export_epochs = cli.integer("--export-epochs", a.export_epochs, 1, 100'000);
  a.load = cli.nonempty_text("--load", "");
  a.has_translate = cli.flag("--translate");
  a.translate = cli.text("--translate", "");
  a.evaluate = cli.flag("--evaluate");
  a.out = cli.nonempty_text("--out", a.out);
  cli.finish();
  if (!std::isnan(minutes) && minutes <= 0) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", minutes);
    cli.fail(std::string("--minutes must be more than 0 (minutes of training), got ") + given);
  }
  if (epochs > 0) a.epochs = epochs;
  a.minutes = !std::isnan(minutes) ? minutes : epochs > 0 ? 0.0 : a.minutes;
  if (a.spm_type != "bpe" && a.spm_type != "unigram") cli.fail("--spm-type must be bpe or unigram, got " + a.spm_type);
  if (a.d_model % a.heads != 0) cli.fail("--d-model must be a multiple of --heads");
  if (a.max_phrases > 0 && !a.phrases) cli.fail("--max-phrases N goes with --phrases");
  if (a.subword_sides != "both" && a.subword_sides != "source")
    cli.fail("--subword-sides must be both or source, got " + a.subword_sides);
  if (a.subword_sides != "both" && a.subword_alpha == 0) cli.fail("--subword-sides goes with --subword-alpha");
  if (a.subword_alpha > 0 && !a.export_dir.empty())
    cli.fail("--subword-alpha: the export holds one segmentation of the training pairs (leave it out with --export)");
  if (a.has_translate && a.evaluate) cli.fail("--translate and --evaluate: give one of them");
  if ((a.has_translate || a.evaluate) != !a.load.empty())
    cli.fail("--load DIR (a trained model's --out DIR) goes with --translate or --evaluate");
  if (a.has_translate && kiln::data::split_words(a.translate).empty()) cli.fail("--translate: the sentence is empty");
  if (a.load.empty()) cli.make_directory("--out", a.out);
  return a;
}

tr::Seq2SeqOptions model_options(const Args& a, int64_t vocab, int64_t pad_id) {
  tr::Seq2SeqOptions o;
  o.src_vocab_size = o.tgt_vocab_size = vocab;
  o.share_embeddings = true;  // one SentencePiece vocabulary for both languages
  o.d_model = a.d_model;
  o.nhead = a.heads;
  o.num_encoder_layers = o.num_decoder_layers = a.layers;
  o.dim_feedforward = a.ff;
  o.dropout = a.dropout;
  // Pre-norm layers (seed 003's): on this corpus they condition on the source sooner
  // than post-norm ones at the same learning rate (benchmarks/RESULTS.md).
  o.norm_first = a.norm_first;
  o.max_len = 256;
  o.pad_id = pad_id;
  return o;
}

// The Annotated Transformer's initialisation: Xavier-uniform for every matrix (the
// embedding too, which torch would draw from N(0, 1): scaled by sqrt(d_model) that
// drowns the positional encoding), the padding row back at zero.
void initialise(tr::Seq2SeqTransformer& model) {
  kiln::NoGradGuard no_grad;
  for (Tensor& p : model.parameters())
    if (p.dim() > 1) kiln::nn::init::xavier_uniform_(p);
  model.src_embedding->weight.select(0, model.options.pad_id).zero_();
}

// What model.safetensors' metadata holds: enough to rebuild the model for --translate.
kiln::io::Metadata model_metadata(const Args& a, int64_t vocab, int64_t pad_id) {
  return {{"vocab_size", std::to_string(vocab)}, {"pad_id", std::to_string(pad_id)},
          {"d_model", std::to_string(a.d_model)}, {"heads", std::to_string(a.heads)},
          {"layers", std::to_string(a.layers)},   {"ff", std::to_string(a.ff)},
          {"norm_first", a.norm_first ? "1" : "0"}};
}

std::string config_json(const Args& a, const tr::Seq2SeqOptions& m, const TranslateOptions& t, const Dataset& d) {
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "{\"vocab_size\": %lld, \"d_model\": %lld, \"nhead\": %lld, \"num_encoder_layers\": %lld, "
                "\"num_decoder_layers\": %lld, \"dim_feedforward\": %lld, \"dropout\": %.17g, \"activation\": \"relu\", "
                "\"norm_first\": %s, \"final_norms\": true, \"scale_embedding\": true, \"share_embeddings\": true, "
                "\"max_len\": %lld, \"pad_id\": %lld, \"bos_id\": %lld, \"eos_id\": %lld, \"label_smoothing\": %.17g, "
                "\"lr_factor\": %.17g, \"warmup_steps\": %lld, \"beta1\": 0.9, \"beta2\": 0.98, \"eps\": 1e-9, "
                "\"weight_decay\": %.17g, \"clip_grad_norm\": %.17g, \"seed\": %llu, \"max_tokens\": %lld, "
                "\"minutes\": %.17g, \"eval_every_seconds\": %.17g, \"valid_decode\": \"greedy\", \"test_beam\": %lld, "
                "\"length_penalty\": %.17g, \"decode_max_len_a\": %.17g, \"decode_max_len_b\": %lld, "
                "\"init\": \"xavier_uniform\", \"autocast\": \"%s\"}",
                static_cast<long long>(m.src_vocab_size), static_cast<long long>(m.d_model),
                static_cast<long long>(m.nhead), static_cast<long long>(m.num_encoder_layers),
                static_cast<long long>(m.num_decoder_layers), static_cast<long long>(m.dim_feedforward), m.dropout,
                m.norm_first ? "true" : "false",
                static_cast<long long>(m.max_len), static_cast<long long>(m.pad_id),
                static_cast<long long>(d.tokenizer.bos_id()), static_cast<long long>(d.tokenizer.eos_id()),
                a.label_smoothing, a.lr_factor, static_cast<long long>(a.warmup), a.weight_decay, a.clip,
                static_cast<unsigned long long>(a.seed), static_cast<long long>(a.max_tokens), a.minutes, a.eval_every,
                static_cast<long long>(a.beam), t.length_penalty, t.max_len_a, static_cast<long long>(t.max_len_b),
                a.bf16 ? "bf16" : "none");
  return buf;
}

std::vector<std::vector<int64_t>> sources_of(const EncodedSplit& s) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& p : s.ids) out.push_back(p.source);
  return out;
}

std::vector<std::string> references_of(const EncodedSplit& s) {
  std::vector<std::string> out;
  for (const auto& p : s.text) out.push_back(p.target);
  return out;
}

// A piece as the plot's ASCII font can draw it: SentencePiece's word-start mark "▁"
// (U+2581) as "_"; other characters outside ASCII are drawn as "?" by the font.
std::string printable_piece(const std::string& piece) {
  const std::string mark = "\xE2\x96\x81";
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const bool at_mark = piece.compare(i, mark.size(), mark) == 0;
    out += at_mark ? '_' : piece[i];
    i += at_mark ? mark.size() : 1;
  }
  return out;
}

// Cross-attention of the last decoder layer, head by head, while translating `ids`.
void draw_cross_attention(const std::string& path, tr::Seq2SeqTransformer& model,
                          const kiln::text::SentencePieceTokenizer& tok, const std::vector<int64_t>& src_ids,
                          const std::string& title) {
  TranslateOptions greedy;
  const std::vector<int64_t> out = translate_ids(model, {src_ids}, tok.bos_id(), tok.eos_id(), greedy).front();
  std::vector<int64_t> dec_in{tok.bos_id()};
  dec_in.insert(dec_in.end(), out.begin(), out.end());
  const kiln::Device device = model.src_embedding->weight.device();
  auto row = [&](const std::vector<int64_t>& ids) {
    return kiln::from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}).to(device);
  };
  kiln::viz::HeatmapOptions o;
  for (int64_t id : dec_in) o.row_labels.push_back(printable_piece(tok.id_to_piece(id)));
  for (int64_t id : src_ids) o.col_labels.push_back(printable_piece(tok.id_to_piece(id)));
  o.cell = 22;
  o.title = title;
  kiln_examples::save_attention_heads(path, model.cross_attention(row(src_ids), row(dec_in)).select(0, 0), o);
}

void draw_curves(const std::string& dir, const tr::Trainer& trainer) {
  kiln::viz::LinePlotOptions loss;
  loss.title = "training loss (label-smoothed cross entropy)";
  kiln::viz::save_line_plot((fs::path(dir) / "loss.png").string(), trainer.step_losses(), loss);
  std::vector<double> minutes, bleu, chrf;
  for (const tr::Evaluation& e : trainer.evaluations()) {
    if (e.metrics.size() < 2 || std::isnan(e.metrics[0])) continue;
    minutes.push_back(e.train_seconds / 60.0);
    bleu.push_back(e.metrics[0]);
    chrf.push_back(e.metrics[1]);
  }
  if (minutes.empty()) return;
  kiln::viz::LinePlotOptions b;
  b.title = "validation BLEU and chrF (greedy)";
  b.x_label = "minutes of training";
  b.y_label = "score";
  kiln::viz::save_line_plot((fs::path(dir) / "bleu.png").string(),
                            {{"BLEU", bleu, minutes}, {"chrF", chrf, minutes}}, b);
}

// The newest n step checkpoints of a run's checkpoint directory (fewer if it holds
// fewer), oldest first.
std::vector<std::string> newest_checkpoints(const fs::path& dir, int64_t n) {
  KILN_CHECK(fs::is_directory(dir), "translate_de_en", "--average-last: no checkpoint directory ", dir.string());
  const std::vector<kiln::train::CheckpointInfo> all = kiln::train::CheckpointManager(dir.string()).checkpoints();
  KILN_CHECK(!all.empty(), "translate_de_en", "--average-last: ", dir.string(), " holds no step checkpoints");
  std::vector<std::string> paths;
  for (size_t i = all.size() - std::min(all.size(), static_cast<size_t>(n)); i < all.size(); ++i)
    paths.push_back(all[i].path);
  return paths;
}

// Replaces the model's weights by the mean of the run's newest n step checkpoints and
// says which were averaged.
void average_newest(tr::Seq2SeqTransformer& model, const fs::path& checkpoint_dir, int64_t n) {
  const std::vector<std::string> paths = newest_checkpoints(checkpoint_dir, n);
  kiln::io::load_averaged_checkpoints(paths, model);
  std::printf("weights: the mean of %zu checkpoints, %s to %s\n", paths.size(),
              fs::path(paths.front()).filename().c_str(), fs::path(paths.back()).filename().c_str());
}

// A finished run's model (--load DIR): its configuration from model.safetensors'
// metadata, its weights from that file or averaged from DIR/checkpoints.
struct TrainedModel {
  std::unique_ptr<tr::Seq2SeqTransformer> model;
  std::string spm_path;
  kiln::text::SentencePieceTokenizer tokenizer;  // read from spm_path
};

TrainedModel load_trained(const Args& a) {
  const std::string weights = (fs::path(a.load) / "model.safetensors").string();
  const kiln::io::Metadata meta = kiln::io::load_safetensors_metadata(weights);
  namespace ke = kiln_examples;
  Args m = a;
  const int64_t vocab = ke::metadata_integer(meta, "vocab_size", weights, 1, 1'000'000);
  const int64_t pad = ke::metadata_integer(meta, "pad_id", weights, 0, vocab - 1);
  m.d_model = ke::metadata_integer(meta, "d_model", weights, 1, 65536);
  m.heads = ke::metadata_integer(meta, "heads", weights, 1, 1024);
  m.layers = ke::metadata_integer(meta, "layers", weights, 1, 100);
  m.ff = ke::metadata_integer(meta, "ff", weights, 1, 1 << 20);
  m.norm_first = ke::metadata_integer(meta, "norm_first", weights, 0, 1) == 1;
  KILN_CHECK(m.d_model % m.heads == 0, "translate_de_en", weights, ": d_model ", m.d_model, " is not a multiple of heads ",
             m.heads);
  const std::string spm_path = (fs::path(a.load) / "spm.model").string();
  TrainedModel t{std::make_unique<tr::Seq2SeqTransformer>(model_options(m, vocab, pad)), spm_path,
                 kiln::text::SentencePieceTokenizer::load(spm_path)};
  KILN_CHECK(t.tokenizer.vocab_size() == vocab, "translate_de_en", "spm.model has ", t.tokenizer.vocab_size(),
             " pieces but ", weights, " was trained with ", vocab);
  if (a.average_last > 1) average_newest(*t.model, fs::path(a.load) / "checkpoints", a.average_last);
  else kiln::io::load_state_dict(weights, *t.model, true);
  t.model->to(kiln::Device(a.device));
  t.model->eval();
  return t;
}

TranslateOptions beam_options(const Args& a) {
  TranslateOptions t;
  t.beam = a.beam;
  t.length_penalty = a.length_penalty;
  return t;
}

int translate_one(const Args& a) {
  TrainedModel m = load_trained(a);
  const kiln::text::SentencePieceTokenizer& tok = m.tokenizer;
  const std::vector<int64_t> ids = tok.encode(a.translate);
  KILN_CHECK(!ids.empty(), "translate_de_en", "the sentence gives no subwords: '", a.translate, "'");
  std::printf("%s\n",
              tok.decode(translate_ids(*m.model, {ids}, tok.bos_id(), tok.eos_id(), beam_options(a)).front()).c_str());
  return 0;
}

std::string decoding_name(const TranslateOptions& t) {
  char buf[64];
  if (t.beam == 0) return "greedy";
  std::snprintf(buf, sizeof buf, "beam %lld, length penalty %g", static_cast<long long>(t.beam), t.length_penalty);
  return buf;
}

// --evaluate: the saved model's BLEU and chrF on the validation and test splits (the
// splits and subwords of the run that trained it).
int evaluate_saved(const Args& a) {
  TrainedModel m = load_trained(a);
  const Dataset data = load_dataset({a.corpus, m.spm_path, "", 0, a.spm_type, a.max_subwords, false, false});
  const TranslateOptions t = beam_options(a);
  for (const auto& [name, split] : {std::pair{"valid", &data.valid}, std::pair{"test", &data.test}}) {
    const Scored s = translate_and_score(*m.model, data.tokenizer, sources_of(*split), references_of(*split), t);
    std::printf("%s (%zu sentences, %s): %s  chrF = %.2f\n", name, split->text.size(), decoding_name(t).c_str(),
                s.bleu.to_string().c_str(), s.chrf);
  }
  return 0;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, kUsage);
  const Args a = parse(cli);
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  (void)kiln::Device(a.device);  // a bad --device fails here, before any data is read
  if (a.has_translate) return translate_one(a);
  if (a.evaluate) return evaluate_saved(a);
  if (kiln::distributed::launched_by_mpi()) kiln::distributed::init();
  const int world = kiln::distributed::is_initialized() ? kiln::distributed::world_size() : 1;
  const bool main_rank = world == 1 || kiln::distributed::rank() == 0;
  const fs::path out(a.out);

  // Rank 0 trains the SentencePiece model; the others read the file it wrote.
  DatasetOptions dopt{a.corpus, a.spm, (out / "spm.model").string(), a.vocab_size, a.spm_type, a.max_subwords, main_rank,
                      a.phrases, a.max_phrases};
  if (!main_rank) kiln::distributed::barrier();
  Dataset data = load_dataset(dopt);
  if (main_rank && world > 1) kiln::distributed::barrier();
  const int64_t vocab = data.tokenizer.vocab_size(), pad = data.tokenizer.pad_id();
  KILN_CHECK(pad >= 0 && data.tokenizer.bos_id() >= 0 && data.tokenizer.eos_id() >= 0, "translate_de_en",
             "the SentencePiece model needs pad, bos and eos ids (train one here: leave out --spm)");
  if (main_rank) {
    std::printf("corpus: %s\n", data.corpus.counts.summary().c_str());
    std::printf("subwords: %s %lld pieces; pairs over %lld subwords left out: train %lld, valid %lld, test %lld\n",
                a.spm_type.c_str(), static_cast<long long>(vocab), static_cast<long long>(a.max_subwords),
                static_cast<long long>(data.train.skipped_long), static_cast<long long>(data.valid.skipped_long),
                static_cast<long long>(data.test.skipped_long));
  }

  kiln::manual_seed(a.seed);
  tr::Seq2SeqTransformer model(model_options(a, vocab, pad));
  initialise(model);
  model.to(kiln::Device(a.device));
  kiln::data::PairDataLoaderOptions lo{.shuffle = true, .seed = a.seed, .pad_id = pad, .max_tokens = a.max_tokens};
  if (world > 1) {
    lo.shuffle = false;
    lo.sampler = std::make_shared<kiln::data::DistributedSampler>(
        static_cast<int64_t>(data.train.ids.size()), kiln::data::DistributedSamplerOptions{.shuffle = true, .seed = a.seed});
  }
  if (a.subword_alpha > 0) {
    // Each epoch the training pairs segmented anew (the batches stay those cut on the
    // best segmentation): a seed for every (run seed, epoch).
    lo.resample = [&data, &a](int64_t epoch) {
      return sample_split(data.train, data.tokenizer, a.subword_alpha, a.subword_sides == "both",
                          a.seed * 0x100000001B3ull + static_cast<uint64_t>(epoch), a.max_subwords);
    };
  }
  kiln::data::PairDataLoader train(data.train.ids, lo);
  kiln::data::PairDataLoader valid(data.valid.ids, {.shuffle = false, .pad_id = pad, .max_tokens = a.max_tokens});
  const TranslateOptions greedy, beam = beam_options(a);

  if (!a.export_dir.empty()) {
    if (main_rank)
      export_for_pytorch(a.export_dir, data, train, a.export_epochs, config_json(a, model.options, beam, data));
    if (main_rank) std::printf("exported to %s\n", a.export_dir.c_str());
    return 0;
  }
  if (main_rank)
    std::printf("model: d_model %lld, %lld heads, %lld+%lld layers, d_ff %lld, shared %lld-piece embeddings: %lld "
                "parameters; %lld batches of <= %lld tokens per epoch%s; %s\n",
                static_cast<long long>(a.d_model), static_cast<long long>(a.heads), static_cast<long long>(a.layers),
                static_cast<long long>(a.layers), static_cast<long long>(a.ff), static_cast<long long>(vocab),
                static_cast<long long>(model.num_parameters()), static_cast<long long>(train.num_batches()),
                static_cast<long long>(a.max_tokens),
                a.subword_alpha > 0 ? " (the first; each epoch's subwords are drawn anew)" : "", kiln::config().c_str());

  const std::vector<std::vector<int64_t>> valid_src = sources_of(data.valid);
  const std::vector<std::string> valid_ref = references_of(data.valid);
  tr::TrainerOptions t;
  t.epochs = a.epochs;
  t.max_seconds = a.minutes * 60;
  t.eval_every_seconds = a.eval_every;
  t.lr_factor = a.lr_factor;
  t.warmup_steps = a.warmup;
  t.label_smoothing = a.label_smoothing;
  t.clip_grad_norm = a.clip;
  t.weight_decay = a.weight_decay;
  t.metrics_path = main_rank ? (out / "metrics.csv").string() : "";
  t.checkpoint_dir = (out / "checkpoints").string();
  t.checkpoint_every = a.checkpoint_every;
  t.checkpoint_keep_last = std::max(a.keep_checkpoints, a.average_last);
  t.resume_from = a.resume;
  t.progress = a.progress;
  t.step_losses_kept = 1'000'000;  // the whole curve, for loss.png
  if (a.bf16) t.autocast = kiln::kBFloat16;
  t.eval_metric_names = {"val_bleu", "val_chrf"};
  t.eval_metrics = [&](tr::Seq2SeqTransformer& m) -> std::vector<double> {
    if (!main_rank) return {NAN, NAN};  // rank 0 decodes; the others wait at the next step
    std::optional<kiln::AutocastGuard> autocast;
    if (a.bf16) autocast.emplace(kiln::kBFloat16);
    const Scored s = translate_and_score(m, data.tokenizer, valid_src, valid_ref, greedy);
    return {s.bleu.score, s.chrf};
  };
  t.checkpoint_metadata = model_metadata(a, vocab, pad);
  tr::Trainer trainer(model, train, &valid, t);
  const std::vector<tr::EpochSummary> epochs = trainer.fit();
  if (!main_rank) return 0;
  double tokens = 0, seconds = 0;
  for (const tr::EpochSummary& e : epochs) {
    tokens += e.tokens_per_second * e.seconds;
    seconds += e.seconds;
  }
  std::printf("trained %lld steps in %.1f minutes of training, %.0f target tokens/s\n",
              static_cast<long long>(trainer.global_step()), trainer.train_seconds() / 60.0,
              tokens / std::max(seconds, 1e-9));
  if (a.average_last > 1) average_newest(model, t.checkpoint_dir, a.average_last);
  kiln::io::save_state_dict((out / "model.safetensors").string(), model, model_metadata(a, vocab, pad));

  std::optional<kiln::AutocastGuard> autocast;  // decoding as trained
  if (a.bf16) autocast.emplace(kiln::kBFloat16);
  const Scored test = translate_and_score(model, data.tokenizer, sources_of(data.test), references_of(data.test), beam);
  std::printf("\ntest (%zu sentences, %s): %s  chrF = %.2f\n", data.test.text.size(), decoding_name(beam).c_str(),
              test.bleu.to_string().c_str(), test.chrf);
  std::ofstream hyps(out / "test_translations.txt");
  for (const std::string& h : test.hypotheses) hyps << h << '\n';
  std::printf("\nten test sentences:\n");
  for (size_t i = 0; i < std::min<size_t>(10, test.hypotheses.size()); ++i)
    std::printf("  de:  %s\n  ref: %s\n  out: %s\n\n", data.test.text[i].source.c_str(),
                data.test.text[i].target.c_str(), test.hypotheses[i].c_str());

  draw_curves(a.out, trainer);
  // A real test sentence of middling length for the attention picture.
  size_t pick = 0;
  for (size_t i = 0; i < data.test.ids.size(); ++i)
    if (data.test.ids[i].source.size() >= 8 && data.test.ids[i].source.size() <= 14) { pick = i; break; }
  draw_cross_attention((out / "cross_attention.png").string(), model, data.tokenizer, data.test.ids[pick].source,
                       "cross-attention: " + data.test.text[pick].source);
  std::printf("written: %s/{model.safetensors,spm.model,metrics.csv,test_translations.txt,loss.png,bleu.png,"
              "cross_attention.png}\n", a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("translate_de_en", [&] { return run(argc, argv); });
}
