// char_gpt: a decoder-only, GPT-style character model, as a user who knows nanoGPT would
// write it with Kiln: causal self-attention, pre-norm blocks, the output layer tied to
// the token embedding, AdamW with decay and no-decay parameter groups, a warm-up and
// cosine learning rate, gradient clipping, and sampling with temperature and top-k.
// It trains on a text every Debian machine has, for a minute by default.
//
//   char_gpt [--data FILE] [--seconds S] [--steps N] [--layers L] [--heads H] [--embd C]
//            [--block T] [--batch B] [--lr LR] [--dropout P] [--seed S] [--threads N]
//            [--sample N] [--temperature T] [--top-k K] [--bf16]
//
// --bf16 runs the forward passes (training, evaluation, sampling) under
// kiln::AutocastGuard: bfloat16 GEMMs with float32 accumulation, float32 weights,
// gradients and AdamW, as torch.autocast("cpu", dtype=torch.bfloat16) would.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "../common/cli.h"
#include "../common/memory_budget.h"

using namespace kiln;

namespace {

struct GPTConfig {
  int64_t vocab_size = 0, block_size = 64;
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
};

// Multi-head causal self-attention: q, k, v from one projection, is_causal attention.
struct CausalSelfAttention : nn::Cloneable<CausalSelfAttention> {
  explicit CausalSelfAttention(const GPTConfig& c) : n_head(c.n_head), dropout(c.dropout) {
    c_attn = register_module("c_attn", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd));
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd));
    resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout));
  }

  Tensor forward(const Tensor& x) {  // (B, T, C) -> (B, T, C)
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<Tensor> qkv = (*c_attn)(x).split(C, 2);
    auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
    Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);  // (B, nh, T, hs)
    Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), training_effective() ? dropout : 0.0,
                                            /*is_causal=*/true);
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return (*resid_dropout)((*c_proj)(y));
  }

  int64_t n_head;
  double dropout;
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

struct MLP : nn::Cloneable<MLP> {
  explicit MLP(const GPTConfig& c) {
    c_fc = register_module("c_fc", std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd));
    gelu = register_module("gelu", std::make_shared<nn::GELU>());
    c_proj = register_module("c_proj", std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd));
    drop = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  }
  Tensor forward(const Tensor& x) { return (*drop)((*c_proj)((*gelu)((*c_fc)(x)))); }

  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::GELU> gelu;
  std::shared_ptr<nn::Dropout> drop;
};

struct Block : nn::Cloneable<Block> {
  explicit Block(const GPTConfig& c) {
    ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd));
    mlp = register_module("mlp", std::make_shared<MLP>(c));
  }
  Tensor forward(Tensor x) {
    x = x + attn->forward((*ln_1)(x));
    x = x + mlp->forward((*ln_2)(x));
    return x;
  }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

struct GPT : nn::Cloneable<GPT> {
  explicit GPT(const GPTConfig& c) : config(c) {
    wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
    drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
    h = register_module("h", std::make_shared<nn::ModuleList<Block>>());
    for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd));
    init_weights();
  }

  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the residual
  // projections scaled by 1/sqrt(2 · n_layer).
  void init_weights() {
    NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters()) {
      bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      bool is_ln = name.find("ln_") != std::string::npos;
      if (is_ln) continue;  // LayerNorm keeps ones and zeros
      if (is_bias) {
        nn::init::zeros_(p);
      } else {
        bool residual = name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
        double std = residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer)) : 0.02;
        nn::init::normal_(p, 0.0, std);
      }
    }
  }

  // idx (B, T) int64 -> logits (B, T, vocab). The output layer is the token embedding
  // itself (weight tying): logits = x · wteᵀ.
  Tensor forward(const Tensor& idx) {
    const int64_t T = idx.size(1);
    KILN_CHECK(T <= config.block_size, "GPT", "sequence of length ", T, " is longer than block_size ",
               config.block_size);
    Tensor pos = arange(static_cast<double>(T));
    Tensor x = (*drop)((*wte)(idx) + (*wpe)(pos));
    for (const auto& block : *h) x = block->forward(x);
    return linear((*ln_f)(x), wte->weight);
  }

  // Appends max_new_tokens tokens to idx (1, T0), each sampled from the softmax of the
  // last logits divided by temperature, restricted to the top_k most likely (0: all).
  Tensor generate(Tensor idx, int64_t max_new_tokens, double temperature, int64_t top_k, Generator& gen) {
    NoGradGuard no_grad;
    for (int64_t i = 0; i < max_new_tokens; ++i) {
      const int64_t T = idx.size(1);
      Tensor ctx = T <= config.block_size ? idx : idx.narrow(1, T - config.block_size, config.block_size);
      Tensor logits = forward(ctx).select(1, ctx.size(1) - 1) / temperature;  // (1, vocab)
      if (top_k > 0 && top_k < logits.size(-1)) {
        Tensor kth = topk(logits, top_k).values.narrow(-1, top_k - 1, 1);  // (1, 1)
        logits = logits.masked_fill(logits < kth, -INFINITY);
      }
      Tensor probs = softmax(logits, -1);
      Tensor next = multinomial(probs, 1, /*replacement=*/false, &gen);  // (1, 1)
      idx = cat({idx, next}, 1);
    }
    return idx;
  }

  GPTConfig config;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList<Block>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

// The text as token ids: one token per distinct byte, in byte order.
struct CharData {
  std::vector<char> chars;    // id -> byte
  std::vector<int64_t> ids;   // the whole text
  int64_t vocab() const { return static_cast<int64_t>(chars.size()); }
  std::string decode(const Tensor& t) const {
    std::string s;
    for (int64_t id : t.to_vector<int64_t>()) s += chars.at(static_cast<size_t>(id));
    return s;
  }
};

CharData read_text(const std::string& path) {
  // A regular file of sensible size: not a directory, nor /dev/zero read without end.
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_regular_file(path, ec), "char_gpt", "the text '", path,
             "' is not a regular file", ec ? ": " + ec.message() : std::string());
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec && bytes <= (uintmax_t(1) << 30), "char_gpt", "the text '", path, "' must be at most 1 GiB, it has ",
             ec ? 0 : bytes, " bytes");
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "char_gpt", "cannot open the text '", path, "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CharData d;
  std::vector<int64_t> id_of(256, -1);
  std::vector<bool> present(256, false);
  for (unsigned char c : text) present[c] = true;
  for (int b = 0; b < 256; ++b)
    if (present[b]) {
      id_of[b] = static_cast<int64_t>(d.chars.size());
      d.chars.push_back(static_cast<char>(b));
    }
  d.ids.reserve(text.size());
  for (unsigned char c : text) d.ids.push_back(id_of[c]);
  return d;
}

// A batch of B windows of T + 1 tokens from ids[lo, hi): inputs (B, T) and the next
// tokens (B, T).
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& ids, int64_t lo, int64_t hi, int64_t B, int64_t T,
                                    Generator& gen) {
  Tensor starts = randint(lo, hi - T - 1, {B}, kInt64, &gen);
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
  std::vector<int64_t> s = starts.to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      x[static_cast<size_t>(b * T + t)] = ids[static_cast<size_t>(s[b] + t)];
      y[static_cast<size_t>(b * T + t)] = ids[static_cast<size_t>(s[b] + t + 1)];
    }
  return {from_vector<int64_t>(x, {B, T}), from_vector<int64_t>(y, {B, T})};
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv,
                         "char_gpt [--data FILE] [--seconds S] [--steps N] [--layers L] [--heads H] [--embd C]\n"
                         "                [--block T] [--batch B] [--lr LR] [--dropout P] [--seed S] [--threads N]\n"
                         "                [--sample N] [--temperature T] [--top-k K] [--bf16]");
  const std::string data_path = cli.nonempty_text("--data", "/usr/share/common-licenses/GPL-3");
  const double seconds = cli.real("--seconds", 60.0, 0.0, 86400.0);
  const int64_t max_steps = cli.integer("--steps", 1'000'000, 1, 1'000'000'000);
  GPTConfig c;
  c.n_layer = cli.integer("--layers", 4, 1, 64);
  c.n_head = cli.integer("--heads", 4, 1, 64);
  c.n_embd = cli.integer("--embd", 128, 1, 4096);
  c.block_size = cli.integer("--block", 64, 2, 4096);
  c.dropout = cli.real("--dropout", 0.0, 0.0, 0.9);
  const int64_t batch = cli.integer("--batch", 32, 1, 4096);
  const double lr = cli.real("--lr", 1e-3, 0.0, 1.0);
  const uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 1337, 0, INT64_MAX));
  const int64_t threads = cli.integer("--threads", 0, 0, 1024);
  const int64_t sample_len = cli.integer("--sample", 300, 0, 100000);
  const double temperature = cli.real("--temperature", 0.8, 1e-3, 100.0);
  const int64_t top_k = cli.integer("--top-k", 10, 0, 256);
  const bool bf16 = cli.flag("--bf16");
  cli.finish();
  if (c.n_embd % c.n_head != 0)
    cli.fail("--embd (" + std::to_string(c.n_embd) + ") must be a multiple of --heads (" +
             std::to_string(c.n_head) + ")");
  {
    // Before reading or building anything: would training fit in memory? (At most 256
    // tokens: one per byte value.) Parameters: the two embeddings and per block the
    // attention (4·C² + 4·C), the MLP (8·C² + 5·C) and two layer norms.
    namespace ke = kiln_examples;
    const uint64_t C = ke::u(c.n_embd);
    const uint64_t block = ke::add({ke::mul({12, C, C}), ke::mul({13, C})});
    const uint64_t params = ke::add({ke::mul({256 + ke::u(c.block_size), C}), ke::mul({ke::u(c.n_layer), block}),
                                     ke::mul({2, C})});
    const uint64_t activations =
        ke::transformer_activations(batch, c.block_size, c.n_head, c.n_embd, 4 * c.n_embd, c.n_layer, 256);
    ke::check_fits(cli,
                   "--layers " + std::to_string(c.n_layer) + " --embd " + std::to_string(c.n_embd) + " --block " +
                       std::to_string(c.block_size) + " --batch " + std::to_string(batch),
                   params, ke::training_bytes(params, activations));
  }
  if (threads > 0) set_num_threads(static_cast<int>(threads));

  CharData data = read_text(data_path);
  c.vocab_size = data.vocab();
  const int64_t n = static_cast<int64_t>(data.ids.size()), split = n * 9 / 10;
  KILN_CHECK(split - c.block_size - 1 > 0 && n - split - c.block_size - 1 > 0, "char_gpt", "the text '",
             data_path, "' (", n, " bytes) is too short for --block ", c.block_size);
  manual_seed(seed);
  Generator gen(seed);
  GPT model(c);
  std::printf("%s: %lld characters, vocabulary %lld; %lld parameters\n", data_path.c_str(), (long long)n,
              (long long)c.vocab_size, (long long)model.num_parameters());

  // Weight decay on matrices (and the tied embedding), none on biases and norms.
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamOptions o;
  o.lr = lr;
  o.beta2 = 0.99;
  optim::AdamW optimizer({optim::ParamGroup(decay, {{"weight_decay", 0.1}}),
                          optim::ParamGroup(no_decay, {{"weight_decay", 0.0}})},
                         o);

  // The forward passes under bfloat16 autocast with --bf16 (a guard that does nothing else).
  auto autocast = [bf16] { return AutocastGuard(kBFloat16, bf16); };
  auto eval_loss = [&](int64_t lo, int64_t hi) {
    NoGradGuard no_grad;
    const AutocastGuard ac = autocast();
    nn::TrainingModeGuard eval(model, false);
    Generator eval_gen(seed + 1);
    double total = 0;
    const int batches = 8;
    for (int i = 0; i < batches; ++i) {
      auto [x, y] = get_batch(data.ids, lo, hi, batch, c.block_size, eval_gen);
      total += cross_entropy(model.forward(x).view({-1, c.vocab_size}), y.view({-1})).item();
    }
    return total / batches;
  };

  const double first_val = eval_loss(split, n);
  std::printf("step     0  val loss %.4f\n", first_val);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const int64_t warmup = 50;
  int64_t step = 0;
  double loss_value = 0;
  while (step < max_steps && (step == 0 || elapsed() < seconds)) {
    // Linear warm-up, then a cosine decay towards lr/10 over the time budget.
    double progress = seconds > 0 ? std::min(1.0, elapsed() / seconds) : 1.0;
    double step_lr = step < warmup ? lr * static_cast<double>(step + 1) / warmup
                                   : lr * (0.1 + 0.45 * (1.0 + std::cos(M_PI * progress)));
    for (auto& group : optimizer.param_groups()) group.options["lr"] = step_lr;

    auto [x, y] = get_batch(data.ids, 0, split, batch, c.block_size, gen);
    Tensor loss;
    {
      const AutocastGuard ac = autocast();
      loss = cross_entropy(model.forward(x).view({-1, c.vocab_size}), y.view({-1}));
    }
    optimizer.zero_grad();
    loss.backward();
    double grad_norm = nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    optimizer.step();
    loss_value = loss.item();
    ++step;
    if (step % 100 == 0 || step == 1)
      std::printf("step %5lld  loss %.4f  grad norm %.3f  lr %.2e  %.1f s\n", (long long)step, loss_value,
                  grad_norm, step_lr, elapsed());
  }
  const double last_val = eval_loss(split, n);
  std::printf("step %5lld  val loss %.4f (from %.4f), %.1f s, %.1f ms/step\n", (long long)step, last_val, first_val,
              elapsed(), 1e3 * elapsed() / static_cast<double>(step));

  if (sample_len > 0) {
    nn::TrainingModeGuard eval(model, false);
    const AutocastGuard ac = autocast();
    Tensor prompt = from_vector<int64_t>({data.ids[0]}, {1, 1});
    Tensor out = model.generate(prompt, sample_len, temperature, top_k, gen);
    std::printf("--- sample (temperature %.2f, top-k %lld) ---\n%s\n---\n", temperature, (long long)top_k,
                data.decode(out.view({-1})).c_str());
  }
  if (!(last_val < first_val)) {
    std::fprintf(stderr, "char_gpt: the validation loss did not fall (%.4f -> %.4f)\n", first_val, last_val);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("char_gpt", [&] { return run(argc, argv); });
}
