// The Llama package: configuration, names, the KV cache, generation's choices, loading
// Hugging Face's files (a tiny random model saved by transformers) and llama.cpp's (the
// SmolLM2-135M GGUF: llama.cpp's greedy tokens and logits to the bit, transformers'
// logits from the dequantised file), and nn::quantize. Fixtures: tests/fixtures/smollm2.txt and tiny_llama/,
// by make_smollm2_fixtures.py.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <kiln/llama/kiln_llama.h>

#include "backend/cpu/quant_matmul.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::llama;

namespace {

const testing::FixtureFile kFixtures("smollm2.txt", "make_smollm2_fixtures.py");

LlamaConfig small_config() {
  LlamaConfig c;
  c.vocab_size = 40;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rope_theta = 1000.0;
  return c;
}

std::shared_ptr<LlamaForCausalLM> smollm2(const GGUFLoadOptions& options = {}) {
  const std::string dir = testing::pretrained_dir("smollm2-135m");
  if (dir.empty()) return nullptr;
  return LlamaForCausalLM::from_gguf(dir + "/SmolLM2-135M-Instruct.Q4_1.gguf", options);
}

}  // namespace

TEST_CASE("llama: config.json's fields and errors") {
  const LlamaConfig c = LlamaConfig::from_json(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
          "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "tie_word_embeddings": true, "max_position_embeddings": 128,
          "hidden_act": "silu", "rope_scaling": null, "attention_bias": false})");
  CHECK(c.vocab_size == 100);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.attention_head_dim() == 8);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.rope_interleaved);
  CHECK(LlamaConfig::from_json(R"({"num_attention_heads": 4, "hidden_size": 64})").num_key_value_heads == 4);
  CHECK(LlamaConfig::from_json(R"({"rope_parameters": {"rope_theta": 500.0, "rope_type": "default"}})").rope_theta ==
        500.0);
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"rope_parameters": {"rope_type": "llama3"}})"),
                     "rope_type \"llama3\"");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"model_type": "bert"})", "c.json"), "c.json",
                     "model_type \"bert\"");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"hidden_act": "gelu"})"), "hidden_act \"gelu\"");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"rope_scaling": {"type": "linear"}})"),
                     "rope_scaling");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"attention_bias": true})"), "attention_bias");
  CHECK_ERROR_STARTS("[LlamaConfig]",
                     LlamaConfig::from_json(R"({"num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 48})"),
                     "not a multiple of num_key_value_heads 4");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"hidden_size": "big"})"), "hidden_size",
                     "integer");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json(R"({"vocab_size": 0})"), "vocab_size", "got 0");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_json("{"), "<config.json>");
  CHECK_ERROR_STARTS("[LlamaConfig]", LlamaConfig::from_file("/nonexistent/config.json"), "cannot open");
}

TEST_CASE("llama: Hugging Face names map to llama.cpp's") {
  CHECK(gguf_tensor_name("model.embed_tokens.weight") == "token_embd.weight");
  CHECK(gguf_tensor_name("model.norm.weight") == "output_norm.weight");
  CHECK(gguf_tensor_name("lm_head.weight") == "output.weight");
  CHECK(gguf_tensor_name("model.layers.12.self_attn.q_proj.weight") == "blk.12.attn_q.weight");
  CHECK(gguf_tensor_name("model.layers.0.self_attn.o_proj.weight") == "blk.0.attn_output.weight");
  CHECK(gguf_tensor_name("model.layers.3.mlp.down_proj.weight") == "blk.3.ffn_down.weight");
  CHECK(gguf_tensor_name("model.layers.3.post_attention_layernorm.weight") == "blk.3.ffn_norm.weight");
  CHECK_ERROR_STARTS("[gguf_tensor_name]", gguf_tensor_name("model.layers.x.mlp.up_proj.weight"), "not a Llama weight");
  CHECK_ERROR_STARTS("[gguf_tensor_name]", gguf_tensor_name("model.layers.1.mlp.up_proj.bias"), ".weight");
  CHECK_ERROR_STARTS("[gguf_tensor_name]", gguf_tensor_name("model.layers.1.attn.weight"), "not a Llama weight");
}

TEST_CASE("llama: transformers' tiny LlamaForCausalLM from its safetensors") {
  auto model = LlamaForCausalLM::from_pretrained(testing::fixture_path("tiny_llama"));
  CHECK(model->config.num_key_value_heads == 2);
  CHECK_FALSE(model->config.tie_word_embeddings);
  NoGradGuard no_grad;
  const Tensor ids = kFixtures.get("tiny.ids");
  testing::check_matches("tiny logits", model->forward(ids), kFixtures.get("tiny.logits"), {1e-5, 1e-5});
  // The last position only, as generation asks.
  testing::check_matches("tiny last logits", model->forward(ids, nullptr, 1),
                         kFixtures.get("tiny.logits").narrow(1, 6, 1), {1e-5, 1e-5});
  CHECK_ERROR_STARTS("[LlamaForCausalLM]", LlamaForCausalLM::from_pretrained("/nonexistent"), "not a folder");
}

TEST_CASE("llama: a KV cache gives the full forward's logits, a token at a time") {
  Generator gen(3);
  auto model = std::make_shared<LlamaForCausalLM>(small_config());
  model->eval();
  NoGradGuard no_grad;
  const Tensor ids = randint(0, 40, {2, 9}, kInt64, &gen);
  const Tensor full = model->forward(ids);
  KVCache cache(model->config, 2, 16);
  // Prefill 4 positions, then one at a time: the causal mask with an offset, then none.
  std::vector<Tensor> parts = {model->forward(ids.narrow(1, 0, 4), &cache)};
  for (int64_t t = 4; t < 9; ++t) parts.push_back(model->forward(ids.narrow(1, t, 1), &cache));
  CHECK(cache.length() == 9);
  testing::check_matches("cached logits", cat(parts, 1), full, {1e-5, 1e-5});
  // Two chunks of several positions (the causal rule with a past).
  cache.truncate(0);
  const Tensor a = model->forward(ids.narrow(1, 0, 5), &cache), b = model->forward(ids.narrow(1, 5, 4), &cache);
  testing::check_matches("chunked logits", cat({a, b}, 1), full, {1e-5, 1e-5});
  CHECK_ERROR_STARTS("[llama.KVCache]", model->forward(ids, &cache), "exceed the capacity 16");
  KVCache other(model->config, 3, 8);
  CHECK_ERROR_STARTS("[LlamaForCausalLM]", model->forward(ids, &other), "batch of 3");
  CHECK_ERROR_STARTS("[llama.KVCache]", KVCache(model->config, 1, 33), "capacity");
  CHECK_ERROR_STARTS("[LlamaForCausalLM]", model->forward(ids.to(kFloat32)), "int64");
}

// llama.cpp's arithmetic on a small random model: keys, values, queries and attention
// weights in float16 (relative rounding 2^-11 each) keep the logits within 2e-3 of the
// float32 path; a cache filled a chunk or a token at a time gives the full forward's
// logits up to the two dot orders (prompt and step), a few float32 roundings.
TEST_CASE("llama: llama.cpp's arithmetic keeps a float16 cache near the float32 path") {
  Generator gen(3);
  LlamaConfig c = small_config();
  auto plain = std::make_shared<LlamaForCausalLM>(c);
  c.llama_cpp_numerics = true;
  auto like_cpp = std::make_shared<LlamaForCausalLM>(c);
  like_cpp->load_state_dict(plain->state_dict());
  plain->eval();
  like_cpp->eval();
  const Tensor ids = randint(0, 40, {2, 9}, kInt64, &gen);
  Tensor full;
  {
    NoGradGuard no_grad;
    full = like_cpp->forward(ids);
    testing::check_matches("float16 attention", full, plain->forward(ids), {2e-3, 2e-3});
    CHECK_FALSE(equal(full, plain->forward(ids)));  // the float16 path did run
    KVCache cache(like_cpp->config, 2, 16);
    CHECK(cache.is_float16());
    CHECK_FALSE(KVCache(plain->config, 2, 16).is_float16());
    std::vector<Tensor> parts = {like_cpp->forward(ids.narrow(1, 0, 4), &cache)};
    for (int64_t t = 4; t < 9; ++t) parts.push_back(like_cpp->forward(ids.narrow(1, t, 1), &cache));
    testing::check_matches("float16 cache, a token at a time", cat(parts, 1), full, {1e-5, 1e-5});
    cache.truncate(0);
    const Tensor a = like_cpp->forward(ids.narrow(1, 0, 5), &cache), b = like_cpp->forward(ids.narrow(1, 5, 4), &cache);
    testing::check_matches("float16 cache, in chunks", cat({a, b}, 1), full, {1e-5, 1e-5});
    const Tensor k = zeros({2, 2, 1, 8});
    CHECK_ERROR_STARTS("[llama.KVCache]", cache.append(0, k, k), "append_float16");
    CHECK_ERROR_STARTS("[llama.KVCache]", KVCache(plain->config, 2, 4).append_float16(0, k, k), "float16 cache");
    CHECK_ERROR_STARTS("[llama.KVCache]", cache.append_float16(0, zeros({2, 2, 1, 4}), zeros({2, 2, 1, 4})), "(2, 2, T, 8)");
    CHECK_ERROR_STARTS("[llama.f16_attention]", f16_attention(zeros({2, 2, 3, 8}), cache, 0, 2), "group * 2");
    CHECK_ERROR_STARTS("[llama.f16_attention]", f16_attention(zeros({2, 2, 2, 8}), KVCache(plain->config, 2, 4), 0, 1),
                       "not float16");
  }
  // Recording gradients: the float32 ops, and the float16 cache refused.
  testing::check_matches("with gradients", like_cpp->forward(ids), plain->forward(ids), {1e-6, 1e-6});
  KVCache cache(like_cpp->config, 2, 16);
  CHECK_ERROR_STARTS("[LlamaForCausalLM]", like_cpp->forward(ids, &cache), "inference only");
}

// ggml's pieces alone: exp within 2 ulp of the exact value with expf's limits; SwiGLU near
// silu · up; the rope tables' float recurrence near the float64 tables; the float16 dots'
// vector code equal to the portable loops bit for bit, and near the exact sum.
TEST_CASE("llama: ggml's exp, SwiGLU, rope tables and float16 dots") {
  Generator gen(11);
  const auto ulps = [](float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
  };
  int64_t worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f)
    worst = std::max(worst, ulps(ggml::exp(x), static_cast<float>(std::exp(static_cast<double>(x)))));
  CHECK(worst <= 2);
  CHECK(ggml::exp(0.0f) == 1.0f);
  CHECK(ggml::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(ggml::exp(-120.0f) == 0.0f);
  CHECK(std::isinf(ggml::exp(89.0f)));
  CHECK(std::isnan(ggml::exp(std::nanf(""))));

  const Tensor g = mul(randn({3, 50}, kFloat32, &gen), scalar_tensor(4.0)), u = randn({3, 50}, kFloat32, &gen);
  testing::check_matches("swiglu", ggml::swiglu(g, u), mul(silu(g), u), {1e-6, 1e-6});
  CHECK_ERROR_STARTS("[llama.ggml.swiglu]", ggml::swiglu(g, u.narrow(1, 0, 10)), "(3, 50)", "(3, 10)");
  CHECK_ERROR_STARTS("[llama.ggml.swiglu]", ggml::swiglu(g.to(kFloat64), u), "float64");

  const RotaryTables t = ggml::rope_tables(5, 7, 8, 1000.0);
  const RotaryTables ref = rotary_tables(arange(5.0, 12.0, 1.0, TensorOptions(kInt64)), 8, 1000.0, TensorOptions(kFloat32));
  testing::check_matches("ggml's cos", t.cos, ref.cos, {1e-5, 1e-5});
  testing::check_matches("ggml's sin", t.sin, ref.sin, {1e-5, 1e-5});
  CHECK_ERROR_STARTS("[llama.ggml.rope_tables]", ggml::rope_tables(0, 4, 7, 1e4), "head_dim 7");

  for (int64_t n : {8, 40, 64, 96, 256}) {
    CAPTURE(n);
    const Tensor a = randn({n}, kFloat32, &gen), b = randn({n}, kFloat32, &gen);
    std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(ha.size());
    ggml::to_half(a.data<float>(), ha.data(), n);
    ggml::to_half(b.data<float>(), hb.data(), n);
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(ggml::from_half(ha[i])) * ggml::from_half(hb[i]);
    for (F16DotOrder order : {F16DotOrder::kBlocked8, F16DotOrder::kStrided32}) {
      const float v = f16_dot(ha.data(), hb.data(), n, order);
      CHECK(v == f16_dot(ha.data(), hb.data(), n, order, /*simd=*/false));
      CHECK(std::fabs(v - exact) <= 1e-5 * (1 + std::fabs(exact)));
    }
  }
  std::vector<uint16_t> twelve(12);
  CHECK_ERROR_STARTS("[llama.f16_dot]", f16_dot(twelve.data(), twelve.data(), 12, F16DotOrder::kBlocked8), "got 12");
}

TEST_CASE("llama: gradients reach every parameter of a float model") {
  Generator gen(5);
  LlamaConfig c = small_config();
  c.tie_word_embeddings = true;
  auto model = std::make_shared<LlamaForCausalLM>(c);
  const Tensor ids = randint(0, 40, {2, 6}, kInt64, &gen);
  const Tensor loss = cross_entropy(model->forward(ids.narrow(1, 0, 5)).reshape({-1, 40}),
                                    ids.narrow(1, 1, 5).reshape({-1}));
  loss.backward();
  // Tied: the head is the embedding table, listed once.
  CHECK(model->lm_head->weight.impl() == model->model->embed_tokens->weight.impl());
  int n = 0;
  for (const auto& named : model->named_parameters()) {
    CAPTURE(named.first);
    CHECK(named.second.grad().defined());
    ++n;
  }
  CHECK(n == 1 + 2 * 9 + 1);
}

TEST_CASE("llama: generation's choices") {
  const Tensor logits = from_vector<float>({1.0f, 3.0f, 2.0f, -1.0f, 2.9f}, {5});
  GenerationConfig g;
  CHECK(choose_token(logits, {}, g, 0.0) == 1);
  // CTRL's penalty: 3 / 2 = 1.5 < 2.9 and 2.
  g.repetition_penalty = 2.0;
  CHECK(choose_token(logits, {1}, g, 0.0) == 4);
  CHECK(choose_token(logits, {1, 4}, g, 0.0) == 2);
  // Sampling: top_k 1 is greedy whatever the draw; top_p keeps the smallest head.
  GenerationConfig s;
  s.do_sample = true;
  s.top_k = 1;
  CHECK(choose_token(logits, {}, s, 0.999) == 1);
  s.top_k = 0;
  s.top_p = 0.5;  // p(1) = 0.48, p(4) = 0.44: the two of them hold 0.5
  CHECK(choose_token(logits, {}, s, 0.0) == 1);
  CHECK(choose_token(logits, {}, s, 0.99) == 4);
  s.top_p = 1.0;
  s.temperature = 1e-3;  // nearly greedy
  CHECK(choose_token(logits, {}, s, 0.9) == 1);
  GenerationConfig bad;
  bad.temperature = 0;
  CHECK_ERROR_STARTS("[llama.generate]", bad.validate(), "temperature");
  bad = {};
  bad.top_p = 1.5;
  CHECK_ERROR_STARTS("[llama.generate]", bad.validate(), "top_p");
  CHECK_ERROR_STARTS("[llama.generate]", choose_token(zeros({2, 3}), {}, g, 0.0), "(2, 3)");
}

TEST_CASE("llama: generate is reproducible, stops and streams") {
  auto model = std::make_shared<LlamaForCausalLM>(small_config());
  model->eval();
  GenerationConfig g;
  g.max_new_tokens = 10;
  g.do_sample = true;
  g.temperature = 1.5;
  g.seed = 42;
  std::vector<int64_t> streamed;
  const GenerationResult a = generate(*model, {1, 2, 3}, g, [&](int64_t id) {
    streamed.push_back(id);
    return true;
  });
  CHECK(a.tokens.size() == 10);
  CHECK(streamed == a.tokens);
  CHECK(generate(*model, {1, 2, 3}, g).tokens == a.tokens);
  g.seed = 43;
  CHECK(generate(*model, {1, 2, 3}, g).tokens != a.tokens);
  g.seed = 42;
  g.stop_tokens = {a.tokens[3]};
  const GenerationResult stopped = generate(*model, {1, 2, 3}, g);
  CHECK(stopped.stopped);
  CHECK(stopped.tokens.back() == a.tokens[3]);
  CHECK(stopped.tokens.size() <= 4);
  const GenerationResult two = generate(*model, {1, 2, 3}, g, [n = 0](int64_t) mutable { return ++n < 2; });
  CHECK(two.tokens.size() == 2);
  // Greedy decoding through the cache picks the full forward's argmax at every step.
  GenerationConfig greedy;
  greedy.max_new_tokens = 6;
  const std::vector<int64_t> out = generate(*model, {5, 6}, greedy).tokens;
  std::vector<int64_t> seq = {5, 6};
  NoGradGuard no_grad;
  for (int64_t t : out) {
    const Tensor l = model->forward(from_vector<int64_t>(seq, {1, static_cast<int64_t>(seq.size())}));
    CHECK(argmax(l.select(1, -1).reshape({-1})).item<int64_t>() == t);
    seq.push_back(t);
  }
  CHECK_ERROR_STARTS("[llama.generate]", generate(*model, {}, greedy), "no tokens");
  CHECK_ERROR_STARTS("[llama.generate]", generate(*model, {40}, greedy), "token 40");
  greedy.max_new_tokens = 40;
  CHECK_ERROR_STARTS("[llama.generate]", generate(*model, {1}, greedy), "context of 32");
}

TEST_CASE("llama: nn::quantize reports each layer's error and keeps the model close") {
  Generator gen(9);
  auto model = std::make_shared<LlamaForCausalLM>(small_config());
  model->eval();
  const Tensor ids = randint(0, 40, {1, 8}, kInt64, &gen);
  NoGradGuard no_grad;
  const Tensor before = model->forward(ids);
  const nn::QuantizeReport r = nn::quantize(*model, GGMLType::Q8_0);
  // 7 projections a block and the head; the 48-wide down projections are not whole blocks.
  CHECK(r.layers.size() == 2 * 6 + 1);
  CHECK(r.skipped.size() == 2);
  CHECK(r.skipped[0].find("mlp.down_proj: input size 48 is not a multiple of 32") != std::string::npos);
  for (const auto& l : r.layers) {
    CAPTURE(l.name);
    CHECK(l.rel_rms_error > 0);
    CHECK(l.rel_rms_error < 0.01);  // 8 bits: about 2^-8 relative
  }
  CHECK(r.quantized_bytes * 3 < r.float_bytes);
  CHECK((*model->model->layers)[0]->self_attn->q_proj->is_quantized());
  CHECK_FALSE((*model->model->layers)[0]->self_attn->q_proj->weight.defined());
  const Tensor after = model->forward(ids);
  const double rel = (norm(sub(after, before)) / norm(before)).item<double>();
  CHECK(rel > 0);
  CHECK(rel < 0.02);
  CHECK(r.str().find("relative RMS error") != std::string::npos);
  // Twice is a no-op: everything quantized is skipped.
  CHECK(nn::quantize(*model, GGMLType::Q4_0).layers.empty());
  CHECK_ERROR_STARTS("[Linear.quantize]", model->lm_head->quantize(GGMLType::Q4_0), "already quantized");
}

// The SmolLM2 file against llama.cpp (its AVX2 build, default float16 KV cache, flash
// attention off; fixtures by make_smollm2_fixtures.py). Loaded with its quantized weights,
// Kiln computes every step as llama.cpp does (LlamaConfig::llama_cpp_numerics: the 4-bit
// and 8-bit dots in ggml's order, RMSNorm, rope, SwiGLU and float16 attention with ggml's
// roundings), so greedy decoding gives the same tokens and the logits have the same bits:
// the tolerance is zero. Both quantise every activation to 8 bits, so any other rounding
// order would move the logits by up to a logit (as much as the quantisation moves them
// from float32) and change the tokens at near-ties. The portable integer kernels (no
// AVX2) sum in another order and are held to the tokens where llama.cpp's choice was
// decisive, as the teacher-forced check below.
constexpr double kDecisiveMargin = 1.0;

TEST_CASE("llama: SmolLM2-135M's GGUF generates llama.cpp's tokens and logits, bit for bit") {
  auto model = smollm2();
  if (!model) return;
  CHECK(model->config.num_hidden_layers == 30);
  CHECK(model->config.num_key_value_heads == 3);
  CHECK(model->config.tie_word_embeddings);
  CHECK(model->config.rope_interleaved);
  CHECK(model->config.llama_cpp_numerics);
  CHECK(model->lm_head->is_quantized());
  CHECK((*model->model->layers)[0]->mlp->down_proj->qweight->type == GGMLType::Q4_1);
  const bool exact = std::string(cpu::quant_dot_path_name()) != "portable";
  if (!exact) MESSAGE("no AVX2: the portable integer kernels, tokens checked where llama.cpp's choice was decisive");
  NoGradGuard no_grad;
  const auto top_logits = [](const Tensor& logits, const Tensor& ids) { return index_select(logits.reshape({-1}), 0, ids); };
  // All 10 prompts; 3 under the sanitizers (the same code, 64 decoding steps each).
  const int prompts = testing::kSanitized ? 3 : 10;
  for (int i = 0; i < prompts; ++i) {
    CAPTURE(i);
    const std::string p = "p" + std::to_string(i);
    const std::vector<int64_t> prompt = kFixtures.get(p + ".prompt").to_vector<int64_t>();
    const std::vector<int64_t> want = kFixtures.get(p + ".greedy").to_vector<int64_t>();
    const float* margin = kFixtures.get(p + ".margin").data<float>();
    KVCache cache(model->config, 1, static_cast<int64_t>(prompt.size() + want.size()));
    CHECK(cache.is_float16());
    Tensor logits = model->forward(from_vector<int64_t>(prompt, {1, static_cast<int64_t>(prompt.size())}), &cache, 1);
    if (exact)
      testing::check_matches("logits after the prompt", top_logits(logits, kFixtures.get(p + ".first.ids")),
                             kFixtures.get(p + ".first.top"), {0.0, 0.0});
    std::vector<int64_t> got;
    for (size_t t = 0; t < want.size(); ++t) {
      got.push_back(argmax(logits.reshape({-1})).item<int64_t>());
      if (!exact && margin[t] >= kDecisiveMargin) CHECK(got.back() == want[t]);
      logits = model->forward(from_vector<int64_t>({exact ? got.back() : want[t]}, {1, 1}), &cache);
    }
    if (!exact) continue;
    CHECK(got == want);
    testing::check_matches("logits after the 64th token", top_logits(logits, kFixtures.get(p + ".last.ids")),
                           kFixtures.get(p + ".last.top"), {0.0, 0.0});
  }
  // generate() takes the same path: the same text.
  for (int i = 0; i < 2 && exact; ++i) {
    GenerationConfig g;
    g.max_new_tokens = 64;
    CHECK(generate(*model, kFixtures.get("p" + std::to_string(i) + ".prompt").to_vector<int64_t>(), g).tokens ==
          kFixtures.get("p" + std::to_string(i) + ".greedy").to_vector<int64_t>());
  }
}

// Teacher forcing: llama.cpp's continuation in one forward, Kiln's choice at each of the 64
// steps. One forward over all positions rounds as llama.cpp's prompt pass (its tiled
// products), not as the step-by-step decoding that made the fixture, so only the choices
// where llama.cpp's top logit beat its runner-up by a logit or more must agree.
TEST_CASE("llama: SmolLM2-135M's GGUF picks llama.cpp's decisive tokens in one forward") {
  auto model = smollm2();
  if (!model) return;
  NoGradGuard no_grad;
  int decisive = 0;
  const int prompts = testing::kSanitized ? 3 : 10;  // as in the bit-for-bit case
  for (int i = 0; i < prompts; ++i) {
    CAPTURE(i);
    const std::string p = "p" + std::to_string(i);
    const std::vector<int64_t> prompt = kFixtures.get(p + ".prompt").to_vector<int64_t>();
    const std::vector<int64_t> want = kFixtures.get(p + ".greedy").to_vector<int64_t>();
    const Tensor margin = kFixtures.get(p + ".margin");
    std::vector<int64_t> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end() - 1);
    const Tensor logits = model->forward(from_vector<int64_t>(seq, {1, static_cast<int64_t>(seq.size())}), nullptr, 64);
    const std::vector<int64_t> got = argmax(logits.select(0, 0), 1).to_vector<int64_t>();
    for (int t = 0; t < 64; ++t) {
      if (margin.data<float>()[t] < kDecisiveMargin) continue;
      CAPTURE(t);
      CHECK(got[t] == want[t]);
      ++decisive;
    }
  }
  // The steps of the fixture with a margin of a logit or more.
  if (prompts == 10) CHECK(decisive == 445);
  CHECK(decisive > 0);
}

// The logits after each prompt against the float32 model (the dequantised file, itself
// checked against transformers below): the 4-bit path is exactly as far from it as
// llama.cpp's (0.1846 on average at every 97th id; with the portable integer kernels
// about as far), asserted within 1.5 times llama.cpp's distance.
TEST_CASE("llama: SmolLM2's 4-bit logits are as near float32's as llama.cpp's") {
  auto q = smollm2(), f = smollm2({.dequantize = true});
  if (!q) return;
  NoGradGuard no_grad;
  double kiln_err = 0, llama_err = 0;
  for (int i = 0; i < 10; ++i) {
    CAPTURE(i);
    const std::string p = "p" + std::to_string(i);
    const Tensor ids = kFixtures.get(p + ".prompt").unsqueeze(0);
    const Tensor lq = q->forward(ids, nullptr, 1).reshape({-1}), lf = f->forward(ids, nullptr, 1).reshape({-1});
    const Tensor llama_cpp = kFixtures.get(p + ".first.every97");
    const Tensor every97 = arange(0.0, static_cast<double>(lq.numel()), 97.0, TensorOptions(kInt64));
    const Tensor fq = index_select(lq, 0, every97), ff = index_select(lf, 0, every97);
    kiln_err += mean(abs(sub(fq, ff))).item<double>();
    llama_err += mean(abs(sub(llama_cpp, ff))).item<double>();
    // The top token after the prompt, and llama.cpp's top 16 logits near Kiln's.
    const Tensor top_ids = kFixtures.get(p + ".first.ids");
    if (kFixtures.get(p + ".margin").data<float>()[0] >= kDecisiveMargin)
      CHECK(argmax(lq).item<int64_t>() == top_ids.select(0, 0).item<int64_t>());
    testing::check_matches("logits at llama.cpp's top ids", index_select(lq, 0, top_ids), kFixtures.get(p + ".first.top"),
                           {0.0, 1.5});
  }
  MESSAGE("mean |logit - float32|: Kiln " << kiln_err / 10 << ", llama.cpp " << llama_err / 10);
  CHECK(kiln_err > 0);
  CHECK(kiln_err < 1.5 * llama_err);
}

TEST_CASE("llama: SmolLM2 dequantised to float32 gives transformers' logits") {
  auto model = smollm2({.dequantize = true});
  if (!model) return;
  CHECK_FALSE(model->lm_head->is_quantized());
  CHECK(model->lm_head->weight.dtype() == kFloat32);
  NoGradGuard no_grad;
  const Tensor ids = kFixtures.get("p0.prompt").unsqueeze(0);
  const Tensor logits = model->forward(ids).select(0, 0);  // (T, vocab)
  testing::check_matches("float32 logits", logits.slice(1, 0, logits.size(1), 97), kFixtures.get("hf.p0.logits.every97"),
                         {1e-4, 1e-4});
}
