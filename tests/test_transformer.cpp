// The Transformer of models/transformer and the data helpers it trains on:
//   - parity with PyTorch 1.13 (tests/fixtures/make_transformer_fixtures.py): forward
//     values within 1e-5 and gradients of inputs and every parameter within 1e-4, with
//     the weights loaded strictly from safetensors (so the state_dict keys are PyTorch's),
//     in float32 and float64;
//   - float64 gradient checks of attention and of one encoder and one decoder layer;
//   - the masks of seed 000, printed as the seed prints them;
//   - the toy translator of 000 learning its two pairs, greedy and beam decoding with and
//     without the key/value cache;
//   - bad input, Vocab, PairDataLoader, index_select, and resuming the trainer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "test_util.h"
#include "toy_task.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;
using kiln::testing::error_of;
using kiln::testing::leaf64;
using kiln::testing::ScratchDir;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kOutTol = 1e-5;   // forward values
constexpr double kGradTol = 1e-4;  // gradients

std::string fixture_path(const std::string& file) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + file;
}

const io::TensorMap& parity() {
  static const io::TensorMap m = io::load_safetensors(fixture_path("transformer_parity.safetensors")).tensors;
  return m;
}

bool has(const std::string& key) { return parity().count(key) > 0; }

Tensor fx(const std::string& key) {
  auto it = parity().find(key);
  if (it == parity().end()) FAIL("fixture has no tensor " << key);
  return it->second;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The "<case>.param.<key>" tensors of a case, keys as PyTorch's state_dict has them.
nn::StateDict params_of(const std::string& c) {
  nn::StateDict sd;
  const std::string prefix = c + ".param.";
  for (const auto& [k, v] : parity())
    if (starts_with(k, prefix)) sd[k.substr(prefix.size())] = v;
  return sd;
}

// The largest |got - want| / max(1, |want|); equal infinities count as equal.
double max_err(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.detach().to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> w = want.detach().to(kFloat64).contiguous().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    double e = std::abs(g[i] - w[i]) / std::max(1.0, std::abs(w[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? kInf : e;
  }
  return worst;
}

void check_close(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  CAPTURE(what);
  REQUIRE(got.defined());
  REQUIRE(shape_str(got.shape()) == shape_str(want.shape()));
  double e = max_err(got, want);
  CHECK_MESSAGE(e <= tol, what << ": max error " << e << " > " << tol);
}

using Inputs = std::map<std::string, Tensor>;
using Forward = std::function<tr::AttentionOutput(Inputs&)>;

// Runs case `c` of the fixture on module `m` (weights already loaded when !load) in
// `dtype` and compares outputs and gradients. Inputs named "*mask" stay masks (float
// ones are cast to dtype); other floating inputs become leaves of dtype.
void check_parity(const std::string& c, nn::Module& m, DType dtype, const Forward& forward, bool load = true) {
  const std::string dtype_str = dtype_name(dtype);
  CAPTURE(c);
  CAPTURE(dtype_str);
  if (load) m.load_state_dict(params_of(c), /*strict=*/true);
  if (dtype != kFloat32) m.to(dtype);
  m.train();  // dropout is 0; as the reference, which runs in train mode
  m.zero_grad();
  Inputs in;
  const std::string prefix = c + ".in.";
  for (const auto& [k, v] : parity()) {
    if (!starts_with(k, prefix)) continue;
    std::string name = k.substr(prefix.size());
    if (starts_with(name, "ref_")) continue;  // the merged mask the reference used
    bool mask = name.size() >= 4 && name.compare(name.size() - 4, 4, "mask") == 0;
    if (!v.is_floating_point()) {
      in[name] = v;
    } else if (mask) {
      in[name] = v.to(dtype);
    } else {
      in[name] = v.to(dtype).detach().requires_grad_();
    }
  }
  tr::AttentionOutput o = forward(in);
  check_close("output", o.output, fx(c + ".out"), kOutTol);
  Tensor loss = sum(mul(o.output, fx(c + ".R").to(dtype)));
  if (has(c + ".weights")) {
    check_close("attention weights", o.weights, fx(c + ".weights"), kOutTol);
    loss = add(loss, sum(mul(o.weights, fx(c + ".Rw").to(dtype))));
  } else {
    CHECK_FALSE(o.weights.defined());
  }
  loss.backward();
  int64_t grads = 0;
  std::map<std::string, Tensor> named;
  for (auto& [k, p] : m.named_parameters()) named[k] = p;
  for (const auto& [k, want] : parity()) {
    if (starts_with(k, c + ".grad.in.")) {
      std::string name = k.substr((c + ".grad.in.").size());
      REQUIRE(in.count(name));
      check_close("grad of input " + name, in[name].grad(), want, kGradTol);
    } else if (starts_with(k, c + ".grad.param.")) {
      std::string name = k.substr((c + ".grad.param.").size());
      REQUIRE_MESSAGE(named.count(name), "PyTorch has parameter " << name << ", Kiln does not");
      check_close("grad of " + name, named[name].grad(), want, kGradTol);
      ++grads;
    }
  }
  // Every parameter was compared (and the module has no others).
  CHECK(grads == static_cast<int64_t>(named.size()));
}

const std::vector<DType> kDtypes = {kFloat32, kFloat64};

Tensor opt(const Inputs& in, const std::string& name) {
  auto it = in.find(name);
  return it == in.end() ? Tensor() : it->second;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}


}  // namespace

// ====================================================================== parity with PyTorch

TEST_CASE("MultiheadAttention matches torch.nn.MultiheadAttention (forward and gradients)") {
  struct Case {
    std::string name;
    int64_t kdim = -1, vdim = -1;
    bool bias = true, bias_kv = false, zero_attn = false, batch_first = false, self_attn = false;
    bool need_weights = true, average = true;
  };
  // Mirrors mha_case(...) in make_transformer_fixtures.py; the masks come from the fixture.
  std::vector<Case> cases = {
      {.name = "mha_plain"},
      {.name = "mha_self_bf_kpm", .batch_first = true, .self_attn = true, .average = false},
      {.name = "mha_bool2d_kpm"},
      {.name = "mha_float2d_kpm_bf", .batch_first = true},
      {.name = "mha_floatkpm_noweights", .need_weights = false},
      {.name = "mha_bool3d", .average = false},
      {.name = "mha_float3d_floatkpm"},
      {.name = "mha_bool2d_floatkpm"},
      {.name = "mha_kdim_vdim", .kdim = 5, .vdim = 6},
      {.name = "mha_kdim_vdim_nobias_bf", .kdim = 5, .vdim = 6, .bias = false, .batch_first = true},
      {.name = "mha_bias_kv", .bias_kv = true},
      {.name = "mha_zero_attn_bf", .zero_attn = true, .batch_first = true, .average = false},
      {.name = "mha_bias_kv_zero_attn_kvdim", .kdim = 5, .vdim = 6, .bias_kv = true, .zero_attn = true},
      {.name = "mha_unbatched"},
      {.name = "mha_self_bias_kv_zero_bf_noweights", .bias_kv = true, .zero_attn = true, .batch_first = true,
       .self_attn = true, .need_weights = false},
  };
  for (const Case& c : cases) {
    for (DType dt : kDtypes) {
      SUBCASE((c.name + " " + std::string(dtype_name(dt))).c_str()) {
        tr::MultiheadAttentionOptions o;
        o.bias = c.bias;
        o.add_bias_kv = c.bias_kv;
        o.add_zero_attn = c.zero_attn;
        o.kdim = c.kdim;
        o.vdim = c.vdim;
        o.batch_first = c.batch_first;
        tr::MultiheadAttention mha(8, 2, o);
        check_parity(c.name, mha, dt, [&](Inputs& in) {
          Tensor q = c.self_attn ? in["x"] : in["query"];
          Tensor k = c.self_attn ? in["x"] : in["key"];
          Tensor v = c.self_attn ? in["x"] : in["value"];
          return mha.forward(q, k, v, opt(in, "key_padding_mask"), c.need_weights, opt(in, "attn_mask"), c.average);
        });
      }
    }
  }
}

TEST_CASE("TransformerEncoderLayer matches torch.nn.TransformerEncoderLayer") {
  struct Case {
    std::string name;
    bool norm_first;
    std::string activation;
    bool batch_first;
  };
  std::vector<Case> cases = {{"enc_post_relu", false, "relu", false},
                             {"enc_pre_gelu_bf", true, "gelu", true},
                             {"enc_post_gelu_bf", false, "gelu", true},
                             {"enc_pre_relu", true, "relu", false}};
  for (const Case& c : cases) {
    for (DType dt : kDtypes) {
      SUBCASE((c.name + " " + std::string(dtype_name(dt))).c_str()) {
        tr::TransformerLayerOptions o{.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                      .activation = c.activation, .batch_first = c.batch_first,
                                      .norm_first = c.norm_first};
        tr::TransformerEncoderLayer layer(o);
        check_parity(c.name, layer, dt, [&](Inputs& in) {
          return tr::AttentionOutput{layer.forward(in["src"], opt(in, "src_mask"), in["src_key_padding_mask"]), {}};
        });
      }
    }
  }
}

TEST_CASE("TransformerDecoderLayer matches torch.nn.TransformerDecoderLayer") {
  struct Case {
    std::string name;
    bool norm_first;
    std::string activation;
    bool batch_first;
  };
  std::vector<Case> cases = {{"dec_post_relu", false, "relu", false},
                             {"dec_pre_gelu_bf", true, "gelu", true},
                             {"dec_post_gelu_bf", false, "gelu", true},
                             {"dec_pre_relu", true, "relu", false}};
  for (const Case& c : cases) {
    for (DType dt : kDtypes) {
      SUBCASE((c.name + " " + std::string(dtype_name(dt))).c_str()) {
        tr::TransformerLayerOptions o{.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                      .activation = c.activation, .batch_first = c.batch_first,
                                      .norm_first = c.norm_first};
        tr::TransformerDecoderLayer layer(o);
        check_parity(c.name, layer, dt, [&](Inputs& in) {
          return tr::AttentionOutput{layer.forward(in["tgt"], in["memory"], in["tgt_mask"], in["memory_mask"],
                                                   in["tgt_key_padding_mask"], in["memory_key_padding_mask"]),
                                     {}};
        });
      }
    }
  }
}

TEST_CASE("Transformer matches torch.nn.Transformer; its safetensors state_dict loads strictly") {
  for (DType dt : kDtypes) {
    SUBCASE(dtype_name(dt)) {
      tr::TransformerOptions o;
      o.d_model = 8;
      o.nhead = 2;
      o.num_encoder_layers = 2;
      o.num_decoder_layers = 2;
      o.dim_feedforward = 16;
      o.dropout = 0.0;
      tr::Transformer model(o);
      // The file holds exactly torch's state_dict: a strict load fails on any missing or
      // unexpected key, so the names (and shapes) are PyTorch's.
      nn::Module::LoadResult r = io::load_state_dict(fixture_path("transformer_state.safetensors"), model, true);
      CHECK(r.missing_keys.empty());
      CHECK(r.unexpected_keys.empty());
      io::SafetensorsContents file = io::load_safetensors(fixture_path("transformer_state.safetensors"));
      std::set<std::string> torch_keys, kiln_keys;
      for (const auto& kv : file.tensors) torch_keys.insert(kv.first);
      for (const auto& kv : model.state_dict()) kiln_keys.insert(kv.first);
      CHECK(torch_keys == kiln_keys);
      CHECK(torch_keys.count("decoder.layers.1.multihead_attn.in_proj_weight"));
      CHECK(torch_keys.count("encoder.norm.bias"));
      check_parity(
          "transformer", model, dt,
          [&](Inputs& in) {
            return tr::AttentionOutput{
                model.forward(in["src"], in["tgt"], in["src_mask"], in["tgt_mask"], in["memory_mask"],
                              in["src_key_padding_mask"], in["tgt_key_padding_mask"], in["memory_key_padding_mask"]),
                {}};
          },
          /*load=*/false);
    }
  }
}

TEST_CASE("a state_dict with a missing or extra key does not load strictly") {
  tr::MultiheadAttention mha(8, 2);
  nn::StateDict sd = params_of("mha_plain");
  REQUIRE(sd.size() == 4);  // in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  nn::StateDict missing = sd;
  missing.erase("in_proj_bias");
  CHECK(error_of([&] { mha.load_state_dict(missing, true); }).find("in_proj_bias") != std::string::npos);
  nn::StateDict extra = sd;
  extra["bias_k"] = zeros({1, 1, 8});
  CHECK(error_of([&] { mha.load_state_dict(extra, true); }).find("bias_k") != std::string::npos);
  // kdim != embed_dim: separate projection weights, as PyTorch names them.
  tr::MultiheadAttention sep(8, 2, {.add_bias_kv = true, .kdim = 5, .vdim = 6});
  std::set<std::string> keys;
  for (const auto& kv : sep.state_dict()) keys.insert(kv.first);
  std::set<std::string> torch_keys;
  for (const auto& kv : params_of("mha_bias_kv_zero_attn_kvdim")) torch_keys.insert(kv.first);
  CHECK(keys == torch_keys);
  CHECK(keys.count("q_proj_weight"));
  CHECK(keys.count("bias_v"));
}

// ====================================================================== float64 gradcheck

namespace {

void randomise(nn::Module& m, uint64_t seed) {
  NoGradGuard no_grad;
  Generator g(seed);
  for (Tensor& p : m.parameters()) p.copy_(randn(p.shape(), TensorOptions(p.dtype()), &g) * 0.5);
}

// Inputs followed by every parameter of m (gradcheck perturbs them in place, and the
// module reads the same tensors).
std::vector<Tensor> with_params(std::vector<Tensor> inputs, nn::Module& m) {
  for (Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

Tensor flat_cat(const tr::AttentionOutput& a) {
  if (!a.weights.defined()) return a.output;
  return cat({a.output.reshape({-1}), a.weights.reshape({-1})}, 0);
}

}  // namespace

TEST_CASE("gradcheck: MultiheadAttention w.r.t. inputs and parameters (float64)") {
  using V = const std::vector<Tensor>&;
  const int64_t E = 4, H = 2, L = 2, S = 3, N = 2;
  Tensor kpm = from_vector<double>({0, 0, 0, 0, 0, 1}, {N, S}).ne(zeros({1}, kFloat64));
  Tensor float_mask = from_vector<double>({0.5, -kInf, 0.25, -0.75, 0.1, -kInf}, {L, S});
  Tensor mask3 = from_vector<double>({0, 1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1},
                                     {N * H, L, S})
                     .ne(zeros({1}, kFloat64));
  SUBCASE("cross-attention, padding and float masks, per-head weights") {
    tr::MultiheadAttention m(E, H);
    m.to(kFloat64);
    randomise(m, 1);
    std::vector<Tensor> in = with_params({leaf64({L, N, E}, 2), leaf64({S, N, E}, 3), leaf64({S, N, E}, 4)}, m);
    CHECK(gradcheck([&](V x) { return flat_cat(m.forward(x[0], x[1], x[2], kpm, true, float_mask, false)); }, in));
  }
  SUBCASE("kdim, vdim, add_bias_kv, add_zero_attn, batch_first, 3-D bool mask") {
    tr::MultiheadAttention m(E, H, {.add_bias_kv = true, .add_zero_attn = true, .kdim = 3, .vdim = 5,
                                    .batch_first = true});
    m.to(kFloat64);
    randomise(m, 5);
    std::vector<Tensor> in = with_params({leaf64({N, L, E}, 6), leaf64({N, S, 3}, 7), leaf64({N, S, 5}, 8)}, m);
    CHECK(gradcheck([&](V x) { return flat_cat(m.forward(x[0], x[1], x[2], kpm, true, mask3, true)); }, in));
  }
  SUBCASE("self-attention (one tensor as query, key and value) with a causal mask") {
    tr::MultiheadAttention m(E, H);
    m.to(kFloat64);
    randomise(m, 9);
    std::vector<Tensor> in = with_params({leaf64({S, N, E}, 10)}, m);
    Tensor causal = tr::causal_mask(S);
    CHECK(gradcheck([&](V x) { return m.forward(x[0], x[0], x[0], Tensor(), false, causal).output; }, in));
  }
}

TEST_CASE("gradcheck: one encoder layer and one decoder layer (float64)") {
  using V = const std::vector<Tensor>&;
  const int64_t E = 4, S = 3, T = 3, N = 2;
  Tensor src_kpm = from_vector<double>({0, 0, 0, 0, 1, 1}, {N, S}).ne(zeros({1}, kFloat64));
  Tensor tgt_kpm = from_vector<double>({0, 0, 1, 0, 0, 0}, {N, T}).ne(zeros({1}, kFloat64));
  for (bool norm_first : {false, true}) {
    SUBCASE((std::string("encoder norm_first=") + (norm_first ? "true" : "false")).c_str()) {
      tr::TransformerEncoderLayer layer({.d_model = E, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0,
                                         .activation = norm_first ? "gelu" : "relu", .norm_first = norm_first});
      layer.to(kFloat64);
      randomise(layer, 11);
      std::vector<Tensor> in = with_params({leaf64({S, N, E}, 12)}, layer);
      Tensor mask = tr::generate_square_subsequent_mask(S, kFloat64);
      CHECK(gradcheck([&](V x) { return layer.forward(x[0], mask, src_kpm); }, in));
    }
    SUBCASE((std::string("decoder norm_first=") + (norm_first ? "true" : "false")).c_str()) {
      tr::TransformerDecoderLayer layer({.d_model = E, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0,
                                         .activation = norm_first ? "relu" : "gelu", .batch_first = true,
                                         .norm_first = norm_first});
      layer.to(kFloat64);
      randomise(layer, 13);
      std::vector<Tensor> in = with_params({leaf64({N, T, E}, 14), leaf64({N, S, E}, 15)}, layer);
      Tensor causal = tr::causal_mask(T);
      CHECK(gradcheck([&](V x) { return layer.forward(x[0], x[1], causal, Tensor(), tgt_kpm, src_kpm); }, in));
    }
  }
}

// ====================================================================== masks

TEST_CASE("attn_pad_mask prints exactly as seed 000 prints get_attn_pad_mask") {
  Tensor seq_q = from_vector<int64_t>({1, 2, 3, 0, 0, 3, 4, 5, 6, 0, 2, 3, 0, 0, 0}, {3, 5});
  Tensor seq_k = from_vector<int64_t>({1, 2, 3, 4, 5, 1, 2, 0, 0, 0, 1, 2, 3, 0, 0}, {3, 5});
  Tensor m = tr::attn_pad_mask(seq_q, seq_k);
  CHECK(m.dtype() == kBool);
  const std::string expected =
      "tensor([[[False, False, False, False, False],\n"
      "         [False, False, False, False, False],\n"
      "         [False, False, False, False, False],\n"
      "         [False, False, False, False, False],\n"
      "         [False, False, False, False, False]],\n"
      "\n"
      "        [[False, False,  True,  True,  True],\n"
      "         [False, False,  True,  True,  True],\n"
      "         [False, False,  True,  True,  True],\n"
      "         [False, False,  True,  True,  True],\n"
      "         [False, False,  True,  True,  True]],\n"
      "\n"
      "        [[False, False, False,  True,  True],\n"
      "         [False, False, False,  True,  True],\n"
      "         [False, False, False,  True,  True],\n"
      "         [False, False, False,  True,  True],\n"
      "         [False, False, False,  True,  True]]])";
  CHECK(m.str() == expected);
  // seq_q's own padding does not matter (only the keys'), and a pad id other than 0 works.
  Tensor m7 = tr::attn_pad_mask(seq_q.narrow(1, 0, 2), add(seq_k, 7.0).to(kInt64), 7);
  CHECK(shape_str(m7.shape()) == "(3, 2, 5)");
  CHECK(equal(m7, m.narrow(1, 0, 2)));
}

TEST_CASE("attn_subsequence_mask has the values of seed 000's get_attn_subsequence_mask") {
  Tensor seq = from_vector<int64_t>({1, 2, 3, 0, 0, 1, 2, 3, 4, 0}, {2, 5});
  Tensor m = tr::attn_subsequence_mask(seq);
  CHECK(m.dtype() == kBool);
  // The seed prints a uint8 tensor; Kiln has no uint8, so its values as int64 print the
  // same text without the dtype suffix.
  const std::string expected =
      "tensor([[[0, 1, 1, 1, 1],\n"
      "         [0, 0, 1, 1, 1],\n"
      "         [0, 0, 0, 1, 1],\n"
      "         [0, 0, 0, 0, 1],\n"
      "         [0, 0, 0, 0, 0]],\n"
      "\n"
      "        [[0, 1, 1, 1, 1],\n"
      "         [0, 0, 1, 1, 1],\n"
      "         [0, 0, 0, 1, 1],\n"
      "         [0, 0, 0, 0, 1],\n"
      "         [0, 0, 0, 0, 0]]])";
  CHECK(m.to(kInt64).str() == expected);
  std::vector<int64_t> v = m.to(kInt64).to_vector<int64_t>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(v[static_cast<size_t>(b * 25 + i * 5 + j)] == (j > i ? 1 : 0));
}

TEST_CASE("generate_square_subsequent_mask equals torch's (-inf above the diagonal, 0 elsewhere)") {
  Tensor want = fx("square_subsequent_mask.5");
  Tensor got = tr::generate_square_subsequent_mask(5);
  CHECK(got.dtype() == kFloat32);
  CHECK(equal(got, want));
  CHECK(equal(tr::Transformer::generate_square_subsequent_mask(5, kFloat64), want.to(kFloat64)));
  CHECK(got.at({0, 1}) == -kInf);
  CHECK(got.at({1, 1}) == 0.0);
  CHECK(got.at({4, 0}) == 0.0);
  CHECK(tr::generate_square_subsequent_mask(0).numel() == 0);
}

TEST_CASE("key_padding_mask, causal_mask, decoder_self_attn_mask and combine_masks") {
  Tensor ids = from_vector<int64_t>({5, 6, 0, 7, 0, 0}, {2, 3});
  CHECK(tr::key_padding_mask(ids).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0, 1, 1});
  CHECK(tr::causal_mask(3).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  // Padding of the target OR the future.
  CHECK(tr::decoder_self_attn_mask(ids).to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 1, 0, 0, 1, 0, 0, 1, /**/ 0, 1, 1, 0, 1, 1, 0, 1, 1});
  // Masks of different (broadcastable) shapes combine to the broadcast shape.
  Tensor causal = tr::causal_mask(3);                            // (3, 3) bool
  Tensor pad = tr::key_padding_mask(ids).reshape({2, 1, 1, 3});  // (2, 1, 1, 3) bool
  Tensor fcausal = tr::generate_square_subsequent_mask(3);       // (3, 3) float
  Tensor fpad = masked_fill(zeros({2, 1, 1, 3}), pad, -kInf);
  Tensor both_bool = tr::combine_masks(causal, pad);
  CHECK(shape_str(both_bool.shape()) == "(2, 1, 3, 3)");
  Tensor want = masked_fill(zeros({2, 1, 3, 3}), both_bool, -kInf);
  CHECK(equal(tr::combine_masks(fcausal, pad), want));
  CHECK(equal(tr::combine_masks(causal, fpad), want));
  CHECK(equal(tr::combine_masks(pad, fcausal), want));
  CHECK(equal(tr::combine_masks(fcausal, fpad), want));
  CHECK(equal(tr::combine_masks(Tensor(), causal), causal));
  CHECK(equal(tr::combine_masks(causal, Tensor()), causal));
}

// ====================================================================== the toy translator of 000

namespace {

using Toy = kiln::testing::ToyTask;

Toy toy_data() {
  return kiln::testing::toy_task({{"ich mochte ein bier", "i want a beer ."}, {"ich mochte ein cola", "i want a coke ."}});
}

tr::Seq2SeqOptions toy_options(const Toy& t, double dropout = 0.0) {
  return kiln::testing::toy_model(t, 16, 2, 1, 32, dropout);
}

tr::TrainerOptions toy_trainer_options(int64_t epochs) {
  tr::TrainerOptions t;
  t.epochs = epochs;
  t.lr_factor = 0.5;
  t.warmup_steps = 10;
  t.label_smoothing = 0.0;
  t.progress = false;
  return t;
}

Tensor toy_sources(const Toy& t) {
  std::vector<std::vector<int64_t>> s;
  for (const auto& p : t.pairs) s.push_back(p.source);
  return data::pad_sequences(s);
}

tr::DecodeOptions toy_decode(const Toy& t, bool cache = true) {
  tr::DecodeOptions d;
  d.bos_id = t.tgt_vocab.bos_id();
  d.eos_id = t.tgt_vocab.eos_id();
  d.max_len = 10;
  d.use_cache = cache;
  return d;
}

// The model trained on the two pairs, shared by the decoding tests.
tr::Seq2SeqTransformer& trained_toy() {
  static std::unique_ptr<tr::Seq2SeqTransformer> model = [] {
    Toy t = toy_data();
    manual_seed(7);
    auto m = std::make_unique<tr::Seq2SeqTransformer>(toy_options(t));
    data::PairDataLoader loader(t.pairs, {.batch_size = 2, .shuffle = true, .seed = 3});
    tr::Trainer trainer(*m, loader, nullptr, toy_trainer_options(100));
    trainer.fit();
    return m;
  }();
  return *model;
}

// A model with random weights (decoding gives arbitrary but well-defined tokens).
tr::Seq2SeqTransformer& random_toy() {
  static std::unique_ptr<tr::Seq2SeqTransformer> model = [] {
    Toy t = toy_data();
    manual_seed(11);
    tr::Seq2SeqOptions o = toy_options(t);
    o.num_encoder_layers = 2;
    o.num_decoder_layers = 2;
    return std::make_unique<tr::Seq2SeqTransformer>(o);
  }();
  return *model;
}

}  // namespace

TEST_CASE("the toy translator of 000 learns both pairs exactly (greedy and beam search)") {
  Toy t = toy_data();
  // The vocabularies of the seed: P = 0, S = 1, E = 2, then the words.
  CHECK(t.src_vocab.id("ich") == 4);
  CHECK(t.tgt_vocab.size() == 4 + 6);
  tr::Seq2SeqTransformer& model = trained_toy();
  std::vector<std::vector<int64_t>> out = tr::greedy_decode(model, toy_sources(t), toy_decode(t));
  REQUIRE(out.size() == 2);
  CHECK(t.tgt_vocab.decode(out[0]) == "i want a beer .");
  CHECK(t.tgt_vocab.decode(out[1]) == "i want a coke .");
  for (size_t i = 0; i < 2; ++i) {
    tr::BeamOptions b;
    static_cast<tr::DecodeOptions&>(b) = toy_decode(t);
    b.beam_width = 3;
    Tensor src = from_vector<int64_t>(t.pairs[i].source, {1, static_cast<int64_t>(t.pairs[i].source.size())});
    std::vector<tr::Hypothesis> hyps = tr::beam_search(model, src, b);
    REQUIRE_FALSE(hyps.empty());
    CHECK(hyps.front().finished);
    CHECK(t.tgt_vocab.decode(hyps.front().tokens) == t.targets[i]);
  }
  // Decoding leaves the model's mode as it was.
  CHECK(model.is_training());
}

TEST_CASE("cached decoding gives the same tokens as decoding the whole prefix") {
  Toy t = toy_data();
  // Three sentences of different lengths (padding in the source), one unknown to the model.
  Tensor src = data::pad_sequences({{4, 5, 6, 7}, {4, 5, 8}, {6, 7}});
  for (tr::Seq2SeqTransformer* model : {&random_toy(), &trained_toy()}) {
    const std::string which = model == &random_toy() ? "random" : "trained";
    CAPTURE(which);
    std::vector<std::vector<int64_t>> cached = tr::greedy_decode(*model, src, toy_decode(t, true));
    std::vector<std::vector<int64_t>> full = tr::greedy_decode(*model, src, toy_decode(t, false));
    CHECK(cached == full);
    for (const auto& row : cached)
      for (int64_t tok : row) CHECK(tok != t.tgt_vocab.pad_id());  // padding is never generated
    for (int64_t i = 0; i < 3; ++i) {
      Tensor one = src.narrow(0, i, 1);
      for (int64_t width : {1, 3, 4}) {
        tr::BeamOptions b;
        static_cast<tr::DecodeOptions&>(b) = toy_decode(t, true);
        b.beam_width = width;
        std::vector<tr::Hypothesis> hc = tr::beam_search(*model, one, b);
        b.use_cache = false;
        std::vector<tr::Hypothesis> hf = tr::beam_search(*model, one, b);
        REQUIRE(hc.size() == hf.size());
        for (size_t k = 0; k < hc.size(); ++k) {
          CHECK(hc[k].tokens == hf[k].tokens);
          CHECK(hc[k].finished == hf[k].finished);
          CHECK(hc[k].log_prob == doctest::Approx(hf[k].log_prob).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("decode_step logits equal the full decode's, one position or several at a time") {
  tr::Seq2SeqTransformer& model = random_toy();
  model.eval();
  NoGradGuard no_grad;
  Tensor src = data::pad_sequences({{4, 5, 6, 7}, {6, 8}});
  Tensor tgt = from_vector<int64_t>({1, 4, 5, 6, 7, 8, 1, 9, 9, 5, 4, 6}, {2, 6});  // no padding
  Tensor memory = model.encode(src);
  Tensor full = model.decode(tgt, memory, src);  // (2, 6, V)
  SUBCASE("one position per step") {
    std::vector<tr::DecoderLayerCache> cache;
    for (int64_t i = 0; i < 6; ++i) {
      Tensor step = model.decode_step(tgt.narrow(1, i, 1), memory, src, cache);
      check_close("step " + std::to_string(i), step, full.narrow(1, i, 1), 1e-5);
    }
    CHECK(cache.size() == 2);
    CHECK(cache[0].self_attn.length() == 6);
    CHECK(cache[0].cross_attn.length() == 4);
  }
  SUBCASE("three positions, then one, then two") {
    std::vector<tr::DecoderLayerCache> cache;
    int64_t at = 0;
    for (int64_t len : {3, 1, 2}) {
      Tensor step = model.decode_step(tgt.narrow(1, at, len), memory, src, cache);
      check_close("positions from " + std::to_string(at), step, full.narrow(1, at, len), 1e-5);
      at += len;
    }
  }
  model.train();
}

TEST_CASE("decode_step: pre-norm, learned positions, and a trained model") {
  Toy t = toy_data();
  tr::Seq2SeqOptions o = toy_options(t, 0.1);  // dropout: eval mode must turn it off
  o.norm_first = true;
  o.learned_positions = true;
  o.activation = "gelu";
  manual_seed(31);
  tr::Seq2SeqTransformer pre(o);
  for (tr::Seq2SeqTransformer* model : {&pre, &trained_toy()}) {
    model->eval();
    NoGradGuard no_grad;
    Tensor src = data::pad_sequences({{4, 5, 6, 7}, {6, 8}});
    Tensor tgt = from_vector<int64_t>({1, 4, 5, 6, 7, 1, 9, 9, 5, 4}, {2, 5});
    Tensor memory = model->encode(src);
    Tensor full = model->decode(tgt, memory, src);
    std::vector<tr::DecoderLayerCache> cache;
    for (int64_t i = 0; i < 5; ++i)
      check_close("step " + std::to_string(i), model->decode_step(tgt.narrow(1, i, 1), memory, src, cache),
                  full.narrow(1, i, 1), 1e-5);
    model->train();
  }
}

TEST_CASE("TransformerDecoder::forward_step (sequence-first) equals forward with a causal mask") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    manual_seed(41);
    tr::TransformerDecoder dec({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                .norm_first = norm_first},
                               2, /*final_norm=*/true);
    Tensor tgt = randn({4, 2, 8}), memory = randn({5, 2, 8});  // (T, N, E), (S, N, E)
    Tensor mem_kpm = tr::key_padding_mask(data::pad_sequences({{1, 2, 3, 4, 5}, {1, 2, 3}}));
    NoGradGuard no_grad;
    Tensor full = dec.forward(tgt, memory, tr::generate_square_subsequent_mask(4), Tensor(), Tensor(), mem_kpm);
    std::vector<tr::DecoderLayerCache> cache;
    for (int64_t i = 0; i < 4; ++i)
      check_close("step " + std::to_string(i), dec.forward_step(tgt.narrow(0, i, 1), memory, cache, mem_kpm),
                  full.narrow(0, i, 1), 1e-5);
    CHECK(cache[1].self_attn.length() == 4);
    // The cross-attention weights kept per head: (N, nhead, T, S), none on padded keys.
    auto& last = *(*dec.layers)[1];
    last.keep_cross_attention = true;
    dec.forward(tgt, memory, tr::generate_square_subsequent_mask(4), Tensor(), Tensor(), mem_kpm);
    REQUIRE(last.last_cross_attention.defined());
    CHECK(shape_str(last.last_cross_attention.shape()) == "(2, 2, 4, 5)");
    CHECK(last.last_cross_attention.select(0, 1).narrow(-1, 3, 2).abs().sum().item() == 0.0);
    check_close("rows sum to 1", last.last_cross_attention.sum({-1}), ones({2, 2, 4}), 1e-6);
  }
}

TEST_CASE("beam search: width 1 is greedy; results sorted by score; log-probs are the model's") {
  Toy t = toy_data();
  Tensor src = data::pad_sequences({{4, 5, 6, 7}, {4, 5, 8}, {6, 7}});
  for (tr::Seq2SeqTransformer* model : {&random_toy(), &trained_toy()}) {
    const std::string which = model == &random_toy() ? "random" : "trained";
    CAPTURE(which);
    std::vector<std::vector<int64_t>> greedy = tr::greedy_decode(*model, src, toy_decode(t));
    for (int64_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      Tensor one = src.narrow(0, i, 1);
      tr::BeamOptions b;
      static_cast<tr::DecodeOptions&>(b) = toy_decode(t);
      b.beam_width = 1;
      std::vector<tr::Hypothesis> h1 = tr::beam_search(*model, one, b);
      REQUIRE(h1.size() == 1);
      CHECK(h1.front().tokens == greedy[static_cast<size_t>(i)]);
      b.beam_width = 4;
      b.length_penalty = 0.6;
      std::vector<tr::Hypothesis> hs = tr::beam_search(*model, one, b);
      REQUIRE_FALSE(hs.empty());
      CHECK(hs.size() <= 4);
      for (size_t k = 1; k < hs.size(); ++k) CHECK(hs[k - 1].score >= hs[k].score);
      // Each hypothesis' log_prob is the sum of the model's log-probabilities of its tokens
      // (and of the end token when finished), decoded with teacher forcing; padding is
      // never generated, so the distribution is over the other tokens.
      NoGradGuard no_grad;
      model->eval();
      Tensor memory = model->encode(one);
      for (const tr::Hypothesis& h : hs) {
        std::vector<int64_t> in{b.bos_id};
        in.insert(in.end(), h.tokens.begin(), h.tokens.end());
        std::vector<int64_t> next(h.tokens);
        if (h.finished) next.push_back(b.eos_id);
        else in.pop_back();
        Tensor logits = model->decode(from_vector<int64_t>(in, {1, static_cast<int64_t>(in.size())}), memory, one);
        Tensor is_pad = eq(arange(static_cast<double>(logits.size(-1))), 0.0);
        Tensor logp = log_softmax(masked_fill(logits, is_pad, -kInf).to(kFloat64), -1);
        double total = 0;
        for (size_t j = 0; j < next.size(); ++j) total += logp.at({0, static_cast<int64_t>(j), next[j]});
        CHECK(h.log_prob == doctest::Approx(total).epsilon(1e-4));
        double len = static_cast<double>(h.tokens.size() + (h.finished ? 1 : 0));
        CHECK(h.score == doctest::Approx(h.log_prob / std::pow((5.0 + len) / 6.0, 0.6)));
      }
      model->train();
    }
  }
}

// ====================================================================== bad input

TEST_CASE("bad input to attention, the Transformer, Seq2Seq and the masks names the op and what was given") {
  tr::MultiheadAttention mha(8, 2);
  Tensor q = randn({3, 2, 8}), k = randn({5, 2, 8});
  auto has_all = [](const std::string& msg, std::initializer_list<const char*> parts) {
    CAPTURE(msg);
    bool ok = !msg.empty();
    for (const char* p : parts) {
      bool found = msg.find(p) != std::string::npos;
      if (!found) MESSAGE("missing: " << p);
      ok = ok && found;
    }
    return ok;
  };
  // embed dim mismatch
  CHECK(has_all(error_of([&] { mha.forward(randn({3, 2, 7}), k, k); }),
                {"[MultiheadAttention]", "query 8", "(3, 2, 7)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, randn({5, 2, 6}), k); }),
                {"[MultiheadAttention]", "key 8", "(5, 2, 6)"}));
  // batch or length disagreement
  CHECK(has_all(error_of([&] { mha.forward(q, randn({5, 3, 8}), randn({5, 3, 8})); }),
                {"[MultiheadAttention]", "(3, 2, 8)", "(5, 3, 8)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, randn({4, 2, 8})); }), {"[MultiheadAttention]", "(4, 2, 8)"}));
  CHECK(has_all(error_of([&] { mha.forward(randn({3, 2, 2, 8}), k, k); }), {"[MultiheadAttention]", "(3, 2, 2, 8)"}));
  // dtypes
  CHECK(has_all(error_of([&] { mha.forward(q.to(kFloat64), k, k); }), {"[MultiheadAttention]", "float64", "float32"}));
  CHECK(has_all(error_of([&] { mha.forward(q.to(kInt64), k.to(kInt64), k.to(kInt64)); }),
                {"[MultiheadAttention]", "int64"}));
  // mask shapes
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, Tensor(), true, zeros({3, 4})); }),
                {"[MultiheadAttention]", "2-D attn_mask", "(3, 5)", "(3, 4)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, Tensor(), true, zeros({2, 3, 5})); }),
                {"[MultiheadAttention]", "3-D attn_mask", "(4, 3, 5)", "(2, 3, 5)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, Tensor(), true, zeros({1, 1, 3, 5})); }),
                {"[MultiheadAttention]", "attn_mask", "(1, 1, 3, 5)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, zeros({2, 4}, kBool)); }),
                {"[MultiheadAttention]", "key_padding_mask", "(2, 5)", "(2, 4)"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, zeros({5, 2}, kBool)); }),
                {"[MultiheadAttention]", "key_padding_mask", "(5, 2)"}));
  // mask dtypes
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, zeros({2, 5}, kInt64)); }),
                {"[MultiheadAttention]", "key_padding_mask", "int64"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, Tensor(), true, zeros({3, 5}, kInt64)); }),
                {"[MultiheadAttention]", "attn_mask", "int64"}));
  CHECK(has_all(error_of([&] { mha.forward(q, k, k, Tensor(), true, zeros({3, 5}, kFloat64)); }),
                {"[MultiheadAttention]", "attn_mask", "float64"}));
  // constructor
  CHECK(has_all(error_of([] { (void)tr::MultiheadAttention(10, 3); }),
                {"[MultiheadAttention]", "divisible", "10", "3"}));
  CHECK(has_all(error_of([] { (void)tr::TransformerEncoderLayer(8, 2, {.activation = "tanh"}); }),
                {"[TransformerEncoderLayer]", "'tanh'"}));
  CHECK(has_all(error_of([] {
                  tr::attention(randn({2, 3, 4}), randn({2, 5, 3}), randn({2, 5, 4}));
                }),
                {"[attention]", "(2, 3, 4)", "(2, 5, 3)"}));

  // Transformer
  tr::TransformerOptions o;
  o.d_model = 8;
  o.nhead = 2;
  o.num_encoder_layers = 1;
  o.num_decoder_layers = 1;
  o.dim_feedforward = 16;
  tr::Transformer model(o);
  CHECK(has_all(error_of([&] { model.forward(randn({5, 2, 8}), randn({4, 3, 8})); }),
                {"[Transformer]", "batch", "(5, 2, 8)", "(4, 3, 8)"}));
  CHECK(has_all(error_of([&] { model.forward(randn({5, 2, 8}), randn({4, 2, 6})); }),
                {"[Transformer]", "d_model (8)", "(4, 2, 6)"}));
  CHECK(has_all(error_of([&] { model.forward(randn({5, 2, 8}), randn({2, 8})); }), {"[Transformer]", "(2, 8)"}));
  CHECK(has_all(error_of([&] { model.forward(randn({5, 2, 8}), randn({4, 2, 8}), Tensor(), zeros({3, 3})); }),
                {"attn_mask", "(4, 4)", "(3, 3)"}));

  // Seq2Seq
  Toy t = toy_data();
  manual_seed(1);
  tr::Seq2SeqTransformer s2s(toy_options(t));
  Tensor ids = from_vector<int64_t>({4, 5, 6, 7}, {1, 4});
  CHECK(has_all(error_of([&] { s2s.forward(ids.to(kFloat32), ids); }),
                {"[Seq2SeqTransformer]", "src", "int64", "float32"}));
  CHECK(has_all(error_of([&] { s2s.forward(ids, from_vector<int64_t>({1, 2, 3}, {3})); }),
                {"[Seq2SeqTransformer]", "tgt", "(3,)"}));
  CHECK(has_all(error_of([&] { s2s.forward(from_vector<int64_t>({4, 5, 99}, {1, 3}), ids); }),
                {"[Seq2SeqTransformer]", "src", "99", std::to_string(t.src_vocab.size()).c_str()}));
  CHECK(has_all(error_of([&] { s2s.forward(ids, from_vector<int64_t>({1, -1}, {1, 2})); }),
                {"[Seq2SeqTransformer]", "tgt", "-1"}));
  CHECK(has_all(error_of([&] { s2s.forward(data::pad_sequences({{4}, {5}}), ids); }),
                {"[Seq2SeqTransformer]", "batch", "(2, 1)", "(1, 4)"}));
  CHECK(has_all(error_of([&] { tr::greedy_decode(s2s, ids, {.max_len = 0}); }), {"[greedy_decode]", "max_len", "0"}));
  CHECK(has_all(error_of([&] { tr::beam_search(s2s, data::pad_sequences({{4}, {5}})); }),
                {"[beam_search]", "(2, 1)"}));
  tr::BeamOptions zero_width;
  zero_width.beam_width = 0;
  CHECK(has_all(error_of([&] { tr::beam_search(s2s, ids, zero_width); }), {"[beam_search]", "beam_width", "0"}));

  // masks
  Tensor flat_ids = from_vector<int64_t>({1, 2, 0}, {3});
  CHECK(has_all(error_of([&] { tr::attn_pad_mask(flat_ids, flat_ids); }),
                {"[attn_pad_mask]", "2-D", "(3,)"}));
  CHECK(has_all(error_of([] { tr::attn_subsequence_mask(zeros({1, 2, 3}, kInt64)); }),
                {"[attn_subsequence_mask]", "2-D", "(1, 2, 3)"}));
  CHECK(has_all(error_of([] { tr::key_padding_mask(zeros({2, 3})); }), {"[key_padding_mask]", "int64", "float32"}));
  CHECK(has_all(error_of([] { tr::attn_pad_mask(zeros({2, 3}, kInt64), zeros({3, 3}, kInt64)); }),
                {"[attn_pad_mask]", "(2, 3)", "(3, 3)"}));
  CHECK(has_all(error_of([] { tr::generate_square_subsequent_mask(3, kInt64); }),
                {"[generate_square_subsequent_mask]", "int64"}));
}

// ====================================================================== Vocab and PairDataLoader

TEST_CASE("Vocab: ids, encode/decode round trip, unknown words, save and load") {
  data::Vocab v = data::Vocab::build({"ich mochte ein bier", "ich mochte ein cola"});
  CHECK(v.size() == 9);
  CHECK(v.word(0) == "P");
  CHECK(v.word(1) == "S");
  CHECK(v.word(2) == "E");
  CHECK(v.id("ich") == 4);
  CHECK(v.id("cola") == 8);
  CHECK(v.encode("ich mochte ein bier") == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(v.encode("ich  mochte\tein cola", true, true) == std::vector<int64_t>{1, 4, 5, 6, 8, 2});
  for (const char* s : {"ich mochte ein bier", "ein cola", "bier bier ich"}) {
    CHECK(v.decode(v.encode(s, true, true)) == s);
    CHECK(v.decode(v.encode_strict(s)) == s);
  }
  CHECK(v.decode({1, 4, 7, 2, 5}, true) == "ich bier");         // stops at the end token
  CHECK(v.decode({1, 4, 0, 0}, false) == "S ich P P");           // specials kept when asked
  // Unknown words: unk in encode, an error naming them in encode_strict.
  CHECK(v.encode("ich mag bier") == std::vector<int64_t>{4, v.unk_id(), 7});
  CHECK(v.decode(v.encode("ich mag bier")) == "ich <unk> bier");
  CHECK(v.unknown_words("ich mag kein bier") == std::vector<std::string>{"mag", "kein"});
  std::string e = error_of([&] { v.encode_strict("ich mag bier"); });
  CHECK(e.find("[Vocab::encode]") != std::string::npos);
  CHECK(e.find("'mag'") != std::string::npos);
  e = error_of([&] { v.encode_strict("ich mag kein bier"); });
  CHECK(e.find("'mag'") != std::string::npos);
  CHECK(e.find("'kein'") != std::string::npos);
  CHECK(error_of([&] { v.word(9); }).find("9") != std::string::npos);
  CHECK(error_of([&] { v.word(-1); }).find("[Vocab::word]") != std::string::npos);
  // min_freq keeps only frequent words (in order of first appearance).
  data::Vocab f = data::Vocab::build({"a b c", "c b", "c"}, 2);
  CHECK(f.words() == std::vector<std::string>{"P", "S", "E", "<unk>", "b", "c"});
  ScratchDir dir("transformer_vocab");
  v.save(dir / "vocab.txt");
  data::Vocab back = data::Vocab::load(dir / "vocab.txt");
  CHECK(back.words() == v.words());
  CHECK(back.id("cola") == 8);
}

TEST_CASE("PairDataLoader: padding, seeded shuffle, bucketing, drop_last") {
  // 10 examples; source length i % 5 + 1, target length (i * 3) % 4 + 2.
  std::vector<data::TokenPair> ex;
  for (int64_t i = 0; i < 10; ++i) {
    data::TokenPair p;
    for (int64_t j = 0; j <= i % 5; ++j) p.source.push_back(10 + i);
    for (int64_t j = 0; j < (i * 3) % 4 + 2; ++j) p.target.push_back(20 + i);
    ex.push_back(p);
  }
  SUBCASE("padding") {
    data::PairDataLoader dl(ex, {.batch_size = 3, .shuffle = false, .pad_id = 0});
    data::PairBatch b = dl.make_batch({0, 3, 1});
    CHECK(shape_str(b.source.shape()) == "(3, 4)");
    CHECK(b.source.to_vector<int64_t>() == std::vector<int64_t>{10, 0, 0, 0, 13, 13, 13, 13, 11, 11, 0, 0});
    CHECK(shape_str(b.target.shape()) == "(3, 5)");
    CHECK(b.target.to_vector<int64_t>() ==
          std::vector<int64_t>{20, 20, 0, 0, 0, 23, 23, 23, 0, 0, 21, 21, 21, 21, 21});
    CHECK(b.indices == std::vector<size_t>{0, 3, 1});
    data::PairDataLoader dl9(ex, {.batch_size = 3, .shuffle = false, .pad_id = 9});
    CHECK(dl9.make_batch({0, 1}).source.to_vector<int64_t>() == std::vector<int64_t>{10, 9, 11, 11});
    CHECK(error_of([&] { dl.make_batch({10}); }).find("10") != std::string::npos);
  }
  SUBCASE("no shuffle: in order") {
    data::PairDataLoader dl(ex, {.batch_size = 4, .shuffle = false});
    auto b = dl.batch_indices(3);
    REQUIRE(b.size() == 3);
    CHECK(b[0] == std::vector<size_t>{0, 1, 2, 3});
    CHECK(b[2] == std::vector<size_t>{8, 9});
  }
  SUBCASE("seeded shuffle: deterministic, a permutation, different across epochs and seeds") {
    data::PairDataLoader a(ex, {.batch_size = 4, .shuffle = true, .seed = 5});
    data::PairDataLoader b(ex, {.batch_size = 4, .shuffle = true, .seed = 5});
    data::PairDataLoader c(ex, {.batch_size = 4, .shuffle = true, .seed = 6});
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      auto ia = a.batch_indices(epoch);
      CHECK(ia == b.batch_indices(epoch));
      CHECK(ia == a.batch_indices(epoch));  // again: no hidden state
      std::vector<size_t> all;
      for (const auto& batch : ia) all.insert(all.end(), batch.begin(), batch.end());
      std::sort(all.begin(), all.end());
      std::vector<size_t> want(10);
      for (size_t i = 0; i < 10; ++i) want[i] = i;
      CHECK(all == want);
      CHECK(ia != c.batch_indices(epoch));
    }
    CHECK(a.batch_indices(0) != a.batch_indices(1));
    CHECK(a.batch_indices(1) != a.batch_indices(2));
    // The batches' tensors follow the indices.
    auto batches = a.epoch(1);
    CHECK(batches.front().indices == a.batch_indices(1).front());
  }
  SUBCASE("bucketing groups examples of similar length") {
    data::PairDataLoader dl(ex, {.batch_size = 2, .shuffle = true, .seed = 1, .bucket_pool = 5});
    auto length = [&](size_t i) { return std::max(ex[i].source.size(), ex[i].target.size()); };
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      auto bs = dl.batch_indices(epoch);
      REQUIRE(bs.size() == 5);
      // One pool holds the whole data set: the batches partition it by length, so sorted
      // by their shortest example, each batch's longest is at most the next one's shortest.
      std::vector<std::pair<size_t, size_t>> ranges;
      for (const auto& b : bs) {
        size_t lo = 1000, hi = 0;
        for (size_t i : b) lo = std::min(lo, length(i)), hi = std::max(hi, length(i));
        ranges.push_back({lo, hi});
      }
      std::sort(ranges.begin(), ranges.end());
      for (size_t j = 1; j < ranges.size(); ++j) CHECK(ranges[j - 1].second <= ranges[j].first);
    }
    // The order of the batches is shuffled too (and still seeded).
    CHECK(dl.batch_indices(0) == data::PairDataLoader(ex, dl.options()).batch_indices(0));
    bool order_differs = false;
    for (int64_t epoch = 1; epoch < 4; ++epoch) order_differs |= dl.batch_indices(epoch) != dl.batch_indices(0);
    CHECK(order_differs);
  }
  SUBCASE("drop_last") {
    data::PairDataLoader keep(ex, {.batch_size = 4, .shuffle = true, .seed = 2});
    data::PairDataLoader drop(ex, {.batch_size = 4, .shuffle = true, .seed = 2, .drop_last = true});
    CHECK(keep.num_batches() == 3);
    CHECK(drop.num_batches() == 2);
    auto k = keep.batch_indices(0), d = drop.batch_indices(0);
    REQUIRE(k.size() == 3);
    REQUIRE(d.size() == 2);
    CHECK(k[2].size() == 2);
    for (const auto& b : d) CHECK(b.size() == 4);
    CHECK(d[0] == k[0]);
    CHECK(d[1] == k[1]);
    CHECK(drop.epoch(0).size() == 2);
  }
  SUBCASE("bad options") {
    CHECK(error_of([&] { (void)data::PairDataLoader(ex, {.batch_size = 0}); }).find("batch_size") != std::string::npos);
    CHECK(error_of([] { (void)data::PairDataLoader({}, {}); }).find("empty") != std::string::npos);
  }
}

// ====================================================================== index_select

TEST_CASE("index_select: values, negative indices, dims, errors") {
  Tensor x = arange(12.0, kFloat32).reshape({3, 4});
  Tensor r0 = index_select(x, 0, from_vector<int64_t>({2, 0, 2}, {3}));
  CHECK(shape_str(r0.shape()) == "(3, 4)");
  CHECK(r0.to_vector<float>() == std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor r1 = index_select(x, 1, from_vector<int64_t>({-1, 0}, {2}));
  CHECK(shape_str(r1.shape()) == "(3, 2)");
  CHECK(r1.to_vector<float>() == std::vector<float>{3, 0, 7, 4, 11, 8});
  Tensor rn = index_select(x, -1, from_vector<int64_t>({1, -4}, {2}));
  CHECK(rn.to_vector<float>() == std::vector<float>{1, 0, 5, 4, 9, 8});
  // Integer tensors, non-contiguous inputs, 3-D, an empty index.
  Tensor xi = arange(24.0, kInt64).reshape({2, 3, 4});
  Tensor ri = index_select(xi, 1, from_vector<int64_t>({2, 2}, {2}));
  CHECK(ri.dtype() == kInt64);
  CHECK(ri.to_vector<int64_t>() ==
        std::vector<int64_t>{8, 9, 10, 11, 8, 9, 10, 11, 20, 21, 22, 23, 20, 21, 22, 23});
  Tensor rt = index_select(x.t(), 0, from_vector<int64_t>({3}, {1}));
  CHECK(rt.to_vector<float>() == std::vector<float>{3, 7, 11});
  CHECK(shape_str(index_select(x, 0, zeros({0}, kInt64)).shape()) == "(0, 4)");
  // Errors name the op and what was given.
  std::string e = error_of([&] { index_select(x, 0, from_vector<int64_t>({0, 3}, {2})); });
  CHECK(e.find("[index_select]") != std::string::npos);
  CHECK(e.find("index 3") != std::string::npos);
  CHECK(e.find("size 3") != std::string::npos);
  CHECK(error_of([&] { index_select(x, 1, from_vector<int64_t>({-5}, {1})); }).find("-5") != std::string::npos);
  CHECK(error_of([&] { index_select(x, 0, zeros({2})); }).find("int64") != std::string::npos);
  CHECK(error_of([&] { index_select(x, 0, zeros({1, 2}, kInt64)); }).find("(1, 2)") != std::string::npos);
  CHECK(error_of([&] { index_select(x, 2, zeros({1}, kInt64)); }).find("[index_select]") != std::string::npos);
  // Gradients scatter-add into repeated rows.
  Tensor w = leaf64({3, 2}, 21);
  index_select(w, 0, from_vector<int64_t>({1, 1, 0}, {3})).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 2, 2, 0, 0});
}

// ====================================================================== Trainer

namespace {

// Shares the weights of `real`, and throws on its `crash_at`-th forward call: a crash in
// the middle of an epoch, after the checkpoint of the previous step was written.
class CrashingLinear : public nn::Linear {
 public:
  CrashingLinear(const nn::Linear& real, int64_t crash_at)
      : nn::Linear(real.in_features, real.out_features), crash_at_(crash_at) {
    weight = real.weight;
    bias = real.bias;
  }
  Tensor forward(const Tensor& x) override {
    if (++calls_ == crash_at_) throw Error("[test] simulated crash");
    return nn::Linear::forward(x);
  }

 private:
  int64_t crash_at_, calls_ = 0;
};

std::vector<data::TokenPair> trainer_pairs(const Toy& t) {
  // Six pairs (the two of 000 and shuffled variants), three batches of two per epoch.
  std::vector<data::TokenPair> ex = t.pairs;
  for (int64_t i = 0; i < 4; ++i) {
    data::TokenPair p = t.pairs[static_cast<size_t>(i % 2)];
    std::rotate(p.source.begin(), p.source.begin() + 1 + i % 3, p.source.end());
    ex.push_back(p);
  }
  return ex;
}

std::vector<std::string> csv_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_text(path));
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string csv_field(const std::string& line, size_t i) {
  std::istringstream in(line);
  std::string f;
  for (size_t k = 0; k <= i; ++k) std::getline(in, f, ',');
  return f;
}

}  // namespace

TEST_CASE("Trainer: resuming a mid-epoch checkpoint gives bitwise the losses of an uninterrupted run") {
  Toy t = toy_data();
  std::vector<data::TokenPair> ex = trainer_pairs(t);
  data::PairDataLoader loader(ex, {.batch_size = 2, .shuffle = true, .seed = 4});
  REQUIRE(loader.num_batches() == 3);
  const int64_t epochs = 3;  // 9 steps
  ScratchDir dir("transformer_trainer");

  auto options = [&](const std::string& sub) {
    tr::TrainerOptions o = toy_trainer_options(epochs);
    o.label_smoothing = 0.1;
    o.checkpoint_dir = dir / sub;
    o.checkpoint_every = 4;  // step 4 is the second batch of epoch 2
    o.metrics_path = dir / (sub + ".csv");
    return o;
  };

  // Uninterrupted (dropout on, so the random generator's state matters too).
  manual_seed(21);
  tr::Seq2SeqTransformer a(toy_options(t, 0.1));
  tr::Trainer ta(a, loader, nullptr, options("a"));
  std::vector<tr::EpochSummary> sa = ta.fit();
  REQUIRE(ta.step_losses().size() == 9);
  REQUIRE(sa.size() == 3);

  // The same run, crashing in step 5: the last checkpoint is the periodic one of step 4.
  manual_seed(21);
  tr::Seq2SeqTransformer b(toy_options(t, 0.1));
  std::shared_ptr<nn::Linear> real = b.generator;
  {
    // Building the stand-in draws initial weights: keep the generator where it was.
    GeneratorState rng = default_generator().get_state();
    b.generator = std::make_shared<CrashingLinear>(*real, 5);
    default_generator().set_state(rng);
  }
  {
    tr::Trainer tb(b, loader, nullptr, options("b"));
    std::string e = error_of([&] { tb.fit(); });
    REQUIRE(e == "[test] simulated crash");
    CHECK(tb.global_step() == 4);
  }
  b.generator = real;
  // Meanwhile the generator and the data moved on; resuming restores them.
  manual_seed(999);
  (void)randn({100});

  // Resumed in a new model and trainer from the crashed run's checkpoint.
  manual_seed(5);
  tr::Seq2SeqTransformer c(toy_options(t, 0.1));
  tr::TrainerOptions oc = options("b");
  oc.resume_from = dir / "b/last.safetensors";
  tr::Trainer tc(c, loader, nullptr, oc);
  CHECK(tc.global_step() == 4);
  REQUIRE(tc.step_losses().size() == 4);
  std::vector<tr::EpochSummary> sc = tc.fit();
  REQUIRE(tc.step_losses().size() == 9);
  for (size_t i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(tc.step_losses()[i] == ta.step_losses()[i]);  // bitwise
  }
  // The remaining epochs (2 and 3), with the same mean losses.
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].epoch == 2);
  CHECK(sc[0].train_loss == sa[1].train_loss);
  CHECK(sc[1].train_loss == sa[2].train_loss);
  // The weights are the same too.
  for (const auto& entry : a.state_dict()) {
    const auto& name = entry.first;
    const auto& p = entry.second;
    CAPTURE(name);
    CHECK(equal(p, c.state_dict().at(name)));
  }

  // The metrics CSV: a header, one row per step and one per epoch; the resumed run
  // appended to the crashed run's file and reads like the uninterrupted one.
  std::vector<std::string> la = csv_lines(dir / "a.csv"), lb = csv_lines(dir / "b.csv");
  REQUIRE(la.size() == 1 + 9 + 3);
  CHECK(la[0] == "step,epoch,lr,loss,grad_norm,tokens_per_s,val_loss,train_seconds");
  REQUIRE(lb.size() == la.size());
  CHECK(lb[0] == la[0]);
  for (size_t i = 1; i < la.size(); ++i) {
    CAPTURE(la[i]);
    CAPTURE(lb[i]);
    for (size_t f : {0, 1, 2, 3, 4, 6}) CHECK(csv_field(la[i], f) == csv_field(lb[i], f));  // all but the speed
  }
  CHECK(csv_field(la[1], 0) == "1");
  CHECK(csv_field(la[4], 0) == "3");  // the epoch row after step 3
  CHECK(csv_field(la[4], 2).empty());  // no lr on an epoch row
  CHECK(std::stod(csv_field(la[4], 3)) == doctest::Approx(sa[0].train_loss).epsilon(1e-6));
}

TEST_CASE("Trainer: fused_loss (linear_cross_entropy) trains as the logits and cross_entropy do, to rounding") {
  Toy t = toy_data();
  std::vector<data::TokenPair> ex = trainer_pairs(t);
  data::PairDataLoader loader(ex, {.batch_size = 2, .shuffle = true, .seed = 4});
  // float64, dropout and label smoothing on: the two runs differ only in how the loss is made
  auto train = [&](bool fused) {
    manual_seed(33);
    auto m = std::make_unique<tr::Seq2SeqTransformer>(toy_options(t, 0.1));
    m->to(kFloat64);
    tr::TrainerOptions o = toy_trainer_options(4);
    o.label_smoothing = 0.1;
    o.fused_loss = fused;
    tr::Trainer trainer(*m, loader, nullptr, o);
    trainer.fit();
    const double eval = trainer.evaluate(loader);
    return std::make_tuple(trainer.step_losses(), eval, std::move(m));
  };
  auto [plain_losses, plain_eval, plain] = train(false);
  auto [fused_losses, fused_eval, fused] = train(true);
  REQUIRE(plain_losses.size() == 12);
  REQUIRE(fused_losses.size() == plain_losses.size());
  for (size_t i = 0; i < plain_losses.size(); ++i) {
    CAPTURE(i);
    CHECK(fused_losses[i] == doctest::Approx(plain_losses[i]).epsilon(1e-12));
  }
  CHECK(fused_eval == doctest::Approx(plain_eval).epsilon(1e-12));
  CHECK(plain_losses.back() < plain_losses.front());
  const nn::NamedTensors want = plain->named_parameters(), got = fused->named_parameters();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].first == want[i].first);
    check_close(got[i].first, got[i].second, want[i].second, 1e-10);
  }
}

TEST_CASE("Trainer: metrics as JSON lines, checkpoints and teacher forcing") {
  Toy t = toy_data();
  data::PairDataLoader loader(t.pairs, {.batch_size = 1, .shuffle = false});
  ScratchDir dir("transformer_trainer_json");
  manual_seed(2);
  tr::Seq2SeqTransformer m(toy_options(t));
  tr::TrainerOptions o = toy_trainer_options(2);
  o.metrics_path = dir / "m.jsonl";
  o.checkpoint_dir = dir / "ck";
  tr::Trainer trainer(m, loader, &loader, o);
  std::vector<tr::EpochSummary> s = trainer.fit();
  REQUIRE(s.size() == 2);
  CHECK(std::isfinite(s[1].val_loss));
  std::vector<std::string> lines = csv_lines(dir / "m.jsonl");
  REQUIRE(lines.size() == 2 * 2 + 2);
  CHECK(lines[0].rfind("{\"step\":1,\"epoch\":1,", 0) == 0);
  CHECK(lines[0].find("\"val_loss\":null,\"train_seconds\":") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "ck/last.safetensors"));
  CHECK(std::filesystem::exists(dir / "ck/best.safetensors"));
  auto [in, labels] = tr::teacher_forcing_pair(from_vector<int64_t>({1, 4, 5, 2, 1, 6, 2, 0}, {2, 4}));
  CHECK(in.to_vector<int64_t>() == std::vector<int64_t>{1, 4, 5, 1, 6, 2});
  CHECK(labels.to_vector<int64_t>() == std::vector<int64_t>{4, 5, 2, 6, 2, 0});
  CHECK(error_of([] { tr::teacher_forcing_pair(zeros({2, 1}, kInt64)); }).find("(2, 1)") != std::string::npos);
}

TEST_CASE("Trainer: a resampling loader trains each epoch on its own batches and resumes them exactly") {
  Toy t = toy_data();
  const std::vector<data::TokenPair> ex = trainer_pairs(t);  // 6 pairs
  // A stand-in for subword sampling: epoch e repeats each source's first token 2 (e % 3)
  // times at its end, past the targets' length, so that the epochs' batches differ in
  // number too.
  auto resample = [ex](int64_t epoch) {
    std::vector<data::TokenPair> out = ex;
    for (auto& p : out) p.source.insert(p.source.end(), static_cast<size_t>(2 * (epoch % 3)), p.source.front());
    return out;
  };
  data::PairDataLoader loader(ex, {.shuffle = true, .seed = 4, .max_tokens = 14, .resample = resample});
  const int64_t epochs = 3;
  int64_t steps = 0;
  for (int64_t e = 0; e < epochs; ++e) steps += loader.num_batches(e);
  REQUIRE(loader.num_batches(2) != loader.num_batches(0));
  ScratchDir dir("transformer_trainer_resample");
  auto options = [&](const std::string& sub) {
    tr::TrainerOptions o = toy_trainer_options(epochs);
    o.checkpoint_dir = dir / sub;
    o.checkpoint_every = 1;
    return o;
  };
  manual_seed(21);
  tr::Seq2SeqTransformer a(toy_options(t, 0.1));
  tr::Trainer ta(a, loader, nullptr, options("a"));
  ta.fit();
  REQUIRE(static_cast<int64_t>(ta.step_losses().size()) == steps);

  // Crashing in the second step of the last epoch, then resumed from the step before.
  const int64_t crash = loader.num_batches(0) + loader.num_batches(1) + 2;
  manual_seed(21);
  tr::Seq2SeqTransformer b(toy_options(t, 0.1));
  std::shared_ptr<nn::Linear> real = b.generator;
  {
    GeneratorState rng = default_generator().get_state();
    b.generator = std::make_shared<CrashingLinear>(*real, crash);
    default_generator().set_state(rng);
  }
  {
    tr::Trainer tb(b, loader, nullptr, options("b"));
    REQUIRE(error_of([&] { tb.fit(); }) == "[test] simulated crash");
  }
  manual_seed(5);
  tr::Seq2SeqTransformer c(toy_options(t, 0.1));
  tr::TrainerOptions oc = options("b");
  oc.resume_from = dir / "b/last.safetensors";
  tr::Trainer tc(c, loader, nullptr, oc);
  CHECK(tc.global_step() == crash - 1);
  tc.fit();
  REQUIRE(tc.step_losses().size() == ta.step_losses().size());
  for (size_t i = 0; i < ta.step_losses().size(); ++i) {
    CAPTURE(i);
    CHECK(tc.step_losses()[i] == ta.step_losses()[i]);  // bitwise
  }
  // And the resampled epochs were the ones trained on: without resample, other losses.
  manual_seed(21);
  tr::Seq2SeqTransformer d(toy_options(t, 0.1));
  data::PairDataLoader plain(ex, {.shuffle = true, .seed = 4, .max_tokens = 14});
  tr::Trainer td(d, plain, nullptr, toy_trainer_options(epochs));
  td.fit();
  CHECK(td.step_losses().back() != ta.step_losses().back());
}

TEST_CASE("Trainer: a time budget stops at the step past it, evaluates on the training clock, resumes what is left") {
  Toy t = toy_data();
  std::vector<data::TokenPair> ex = trainer_pairs(t);
  data::PairDataLoader loader(ex, {.batch_size = 1, .shuffle = true, .seed = 4});
  ScratchDir dir("transformer_trainer_budget");
  manual_seed(5);
  tr::Seq2SeqTransformer m(toy_options(t));
  tr::TrainerOptions o = toy_trainer_options(1'000'000);
  o.max_seconds = 0.3;
  o.eval_every_seconds = 0.1;
  o.checkpoint_dir = dir / "ck";
  o.metrics_path = dir / "m.csv";
  o.eval_metric_names = {"calls", "half"};
  int calls = 0;
  o.eval_metrics = [&](tr::Seq2SeqTransformer& model) {
    CHECK_FALSE(model.is_training());  // evaluated in eval mode
    ++calls;
    return std::vector<double>{static_cast<double>(calls), 0.5};
  };
  tr::Trainer trainer(m, loader, &loader, o);
  const std::vector<tr::EpochSummary> s = trainer.fit();
  REQUIRE(!s.empty());
  CHECK(trainer.train_seconds() >= 0.3);
  CHECK(trainer.global_step() > 0);
  // Every 0.1 s of training (epoch ends too), the last one where the budget ran out.
  const std::vector<tr::Evaluation>& evals = trainer.evaluations();
  REQUIRE(evals.size() >= 3);
  CHECK(static_cast<int>(evals.size()) == calls);
  for (size_t i = 0; i < evals.size(); ++i) {
    CAPTURE(i);
    CHECK(evals[i].metrics == std::vector<double>{static_cast<double>(i + 1), 0.5});
    CHECK(std::isfinite(evals[i].val_loss));
    if (i > 0) CHECK(evals[i].train_seconds >= evals[i - 1].train_seconds);
  }
  CHECK(evals.back().step == trainer.global_step());
  CHECK(evals.back().train_seconds == trainer.train_seconds());
  int64_t timed = 0;  // evaluations at or past each multiple of 0.1 s
  for (double at = 0.1; at <= trainer.train_seconds(); at += 0.1)
    timed += std::any_of(evals.begin(), evals.end(), [&](const tr::Evaluation& e) {
      return e.train_seconds >= at - 1e-12 && e.train_seconds < at + 0.1;
    });
  CHECK(timed >= 3);
  // The metrics log carries the clock and the metrics of one's own.
  std::vector<std::string> lines = csv_lines(dir / "m.csv");
  REQUIRE(lines.size() > 1);
  CHECK(lines[0] == "step,epoch,lr,loss,grad_norm,tokens_per_s,val_loss,train_seconds,calls,half");

  // Resumed from where it stopped: the clock comes back; with the budget spent nothing
  // more trains, with more budget it goes on.
  REQUIRE(std::filesystem::exists(dir / "ck/last.safetensors"));
  tr::TrainerOptions o2 = o;
  o2.resume_from = dir / "ck/last.safetensors";
  o2.metrics_path = "";
  o2.checkpoint_dir = "";
  tr::Seq2SeqTransformer m2(toy_options(t));
  tr::Trainer spent(m2, loader, &loader, o2);
  CHECK(spent.global_step() == trainer.global_step());
  CHECK(spent.train_seconds() == trainer.train_seconds());
  CHECK(spent.fit().empty());
  CHECK(spent.global_step() == trainer.global_step());
  o2.max_seconds = trainer.train_seconds() + 0.05;
  tr::Trainer more(m2, loader, &loader, o2);
  more.fit();
  CHECK(more.global_step() > trainer.global_step());
  CHECK(more.train_seconds() >= o2.max_seconds);

  // Bad budgets and metrics without their function.
  tr::TrainerOptions bad = toy_trainer_options(1);
  bad.max_seconds = -1;
  CHECK(error_of([&] { tr::Trainer(m, loader, nullptr, bad); }).find("max_seconds must be a finite number >= 0") !=
        std::string::npos);
  bad.max_seconds = NAN;
  CHECK(error_of([&] { tr::Trainer(m, loader, nullptr, bad); }).find("max_seconds") != std::string::npos);
  bad.max_seconds = 0;
  bad.eval_every_seconds = INFINITY;
  CHECK(error_of([&] { tr::Trainer(m, loader, nullptr, bad); }).find("eval_every_seconds") != std::string::npos);
  bad.eval_every_seconds = 0;
  bad.eval_metric_names = {"bleu"};
  CHECK(error_of([&] { tr::Trainer(m, loader, nullptr, bad); }).find("need eval_metrics") != std::string::npos);
}

TEST_CASE("Seq2SeqTransformer::cross_attention: the last decoder layer's weights, head by head") {
  Toy t = toy_data();
  tr::Seq2SeqTransformer m(toy_options(t, 0.1));
  const Tensor src = data::pad_sequences({{4, 5, 6, 7}, {4, 5}});
  const Tensor tgt = data::pad_sequences({{1, 4, 5}, {1, 6, 7}});
  const Tensor w = m.cross_attention(src, tgt);
  CHECK(shape_str(w.shape()) == "(2, " + std::to_string(m.options.nhead) + ", 3, 4)");
  CHECK_FALSE(w.requires_grad());
  check_close("rows sum to 1", w.sum({-1}), ones({2, m.options.nhead, 3}), 1e-6);
  CHECK(w.select(0, 1).narrow(-1, 2, 2).abs().sum().item() == 0.0);  // the padded source positions
  CHECK(m.is_training());                                               // the mode comes back
  const auto& last = *(*m.transformer->decoder->layers)[m.transformer->decoder->layers->size() - 1];
  CHECK_FALSE(last.keep_cross_attention);                               // kept only for the call
  // Eval behaviour: dropout off, so the same weights twice.
  CHECK(equal(w, m.cross_attention(src, tgt)));
}

TEST_CASE("Seq2SeqTransformer share_embeddings: one table for source and target") {
  Toy t = toy_data();
  tr::Seq2SeqOptions o = toy_options(t);
  o.tgt_vocab_size = o.src_vocab_size = std::max(o.src_vocab_size, o.tgt_vocab_size);
  tr::Seq2SeqTransformer separate(o);
  o.share_embeddings = true;
  tr::Seq2SeqTransformer shared(o);
  CHECK(shared.src_embedding == shared.tgt_embedding);
  const int64_t table = o.src_vocab_size * o.d_model;
  CHECK(separate.num_parameters() - shared.num_parameters() == table);  // listed once
  const auto state = shared.state_dict();
  CHECK(state.count("src_embedding.weight") == 1);
  CHECK(state.count("tgt_embedding.weight") == 1);  // under both names, as torch's
  tr::Seq2SeqTransformer loaded(o);
  loaded.load_state_dict(state);
  CHECK(equal(loaded.tgt_embedding->weight, shared.src_embedding->weight));
  o.tgt_vocab_size += 1;
  CHECK(error_of([&] { tr::Seq2SeqTransformer bad(o); }).find("share_embeddings needs one vocabulary size") !=
        std::string::npos);
}

// ====================================================================== batched beam search

namespace {

// A random model with more words than the toy's, whose end token is likelier than the
// others (a larger generator bias), so hypotheses end at different steps and sentences
// leave the batch at different times.
tr::Seq2SeqTransformer& random_wide() {
  static std::unique_ptr<tr::Seq2SeqTransformer> model = [] {
    tr::Seq2SeqOptions o;
    o.src_vocab_size = 20;
    o.tgt_vocab_size = 24;
    o.d_model = 16;
    o.nhead = 2;
    o.num_encoder_layers = 2;
    o.num_decoder_layers = 2;
    o.dim_feedforward = 32;
    o.dropout = 0.0;
    o.max_len = 32;
    manual_seed(57);
    auto m = std::make_unique<tr::Seq2SeqTransformer>(o);
    NoGradGuard no_grad;
    m->generator->bias.narrow(0, 2, 1).fill_(0.8);  // eos_id 2
    return m;
  }();
  return *model;
}

Tensor one_sentence(const std::vector<int64_t>& ids) {
  return from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())});
}

void check_same_hypotheses(const std::vector<tr::Hypothesis>& got, const std::vector<tr::Hypothesis>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    CHECK(got[k].tokens == want[k].tokens);
    CHECK(got[k].finished == want[k].finished);
    CHECK(std::abs(got[k].log_prob - want[k].log_prob) <= 1e-5);
    CHECK(std::abs(got[k].score - want[k].score) <= 1e-5);
  }
}

// The model's log-probability of h's tokens (and of the end token when h finished) for
// the sentence `src` (1, S), decoded with teacher forcing: what a search must report,
// found without searching. Padding is never generated, so the distribution is over the
// other tokens.
double teacher_forced_log_prob(tr::Seq2SeqTransformer& model, const Tensor& src, const tr::Hypothesis& h,
                               const tr::BeamOptions& b) {
  InferenceMode inference;
  std::vector<int64_t> in{b.bos_id};
  in.insert(in.end(), h.tokens.begin(), h.tokens.end());
  std::vector<int64_t> next(h.tokens);
  if (h.finished) next.push_back(b.eos_id);
  else in.pop_back();
  Tensor logits = model.decode(one_sentence(in), model.encode(src), src);  // (1, T, V)
  Tensor is_pad = eq(arange(static_cast<double>(logits.size(-1))), static_cast<double>(model.options.pad_id));
  Tensor logp = log_softmax(masked_fill(logits, is_pad, -kInf).to(kFloat64), -1);
  double total = 0;
  for (size_t j = 0; j < next.size(); ++j) total += logp.at({0, static_cast<int64_t>(j), next[j]});
  return total;
}

}  // namespace

TEST_CASE("beam_search_batch equals beam_search on each sentence alone; width 1 is greedy") {
  Toy t = toy_data();
  struct Case {
    tr::Seq2SeqTransformer* model;
    std::vector<std::vector<int64_t>> sentences;  // of different lengths, padded in the batch
    int64_t max_len;
  };
  const std::vector<Case> cases = {
      {&random_wide(), {{4, 5, 6, 7, 8, 9}, {3}, {10, 11, 12}, {5, 5, 7, 13, 14, 15, 16}, {19, 18}}, 9},
      {&trained_toy(), {{4, 5, 6, 7}, {6, 7}, {4, 5, 8}, {4}}, 10},
  };
  for (const Case& c : cases) {
    const std::string which = c.model == &trained_toy() ? "trained toy" : "random";
    CAPTURE(which);
    Tensor src = data::pad_sequences(c.sentences, c.model->options.pad_id);
    size_t finished = 0, cut = 0;
    for (int64_t width : {1, 3, 5}) {
      CAPTURE(width);
      tr::BeamOptions b;
      b.bos_id = t.tgt_vocab.bos_id();
      b.eos_id = t.tgt_vocab.eos_id();
      b.max_len = c.max_len;
      b.beam_width = width;
      std::vector<std::vector<tr::Hypothesis>> by_cache[2];  // without, with the cache
      for (bool use_cache : {false, true}) {
        CAPTURE(use_cache);
        b.use_cache = use_cache;
        std::vector<std::vector<tr::Hypothesis>>& batch = by_cache[use_cache] = tr::beam_search_batch(*c.model, src, b);
        REQUIRE(batch.size() == c.sentences.size());
        for (size_t i = 0; i < c.sentences.size(); ++i) {
          CAPTURE(i);
          const Tensor one = one_sentence(c.sentences[i]);
          check_same_hypotheses(batch[i], tr::beam_search(*c.model, one, b));
          REQUIRE_FALSE(batch[i].empty());
          CHECK(batch[i].size() <= static_cast<size_t>(width));
          for (size_t k = 0; k < batch[i].size(); ++k) {
            const tr::Hypothesis& h = batch[i][k];
            (h.finished ? finished : cut) += 1;
            if (k > 0) CHECK(batch[i][k - 1].score >= h.score);
            CHECK(std::abs(h.log_prob - teacher_forced_log_prob(*c.model, one, h, b)) <= 1e-4);
          }
        }
        if (width == 1) {
          std::vector<std::vector<int64_t>> greedy = tr::greedy_decode(*c.model, src, b);
          for (size_t i = 0; i < c.sentences.size(); ++i) {
            CAPTURE(i);
            REQUIRE(batch[i].size() == 1);
            CHECK(batch[i].front().tokens == greedy[i]);
          }
        }
      }
      // The cache (reordered as beams move) and the whole prefix decode to the same beams.
      for (size_t i = 0; i < c.sentences.size(); ++i) {
        CAPTURE(i);
        check_same_hypotheses(by_cache[true][i], by_cache[false][i]);
      }
    }
    // Both endings were exercised: hypotheses that ended, and (for the random model)
    // hypotheses cut at max_len.
    CHECK(finished > 0);
    if (c.model == &random_wide()) CHECK(cut > 0);
  }
  CHECK(trained_toy().is_training());  // decoding leaves the model's mode as it was
}

TEST_CASE("beam_search_batch: a padded sentence decodes as unpadded, first or last in the batch") {
  tr::Seq2SeqTransformer& model = random_wide();
  const std::vector<int64_t> short_one{7, 3}, long_one{4, 5, 6, 7, 8, 9, 10, 11, 12};
  tr::BeamOptions b;
  b.max_len = 9;
  b.beam_width = 3;
  for (bool use_cache : {true, false}) {
    CAPTURE(use_cache);
    b.use_cache = use_cache;
    const std::vector<tr::Hypothesis> alone = tr::beam_search(model, one_sentence(short_one), b);
    REQUIRE_FALSE(alone.empty());
    Tensor padded = data::pad_sequences({short_one, long_one}, model.options.pad_id);  // (2, 9)
    std::vector<std::vector<tr::Hypothesis>> first = tr::beam_search_batch(model, padded, b);
    check_same_hypotheses(first[0], alone);
    std::vector<std::vector<tr::Hypothesis>> last =
        tr::beam_search_batch(model, data::pad_sequences({long_one, short_one}, model.options.pad_id), b);
    check_same_hypotheses(last[1], alone);
    check_same_hypotheses(last[0], first[1]);
    // The padded row alone, (1, 9) with seven pad ids.
    check_same_hypotheses(tr::beam_search(model, padded.narrow(0, 0, 1), b), alone);
  }
}

TEST_CASE("bad input to beam_search_batch names it and what was given") {
  tr::Seq2SeqTransformer& model = random_wide();
  Tensor src = data::pad_sequences({{4, 5, 6}, {7}}, model.options.pad_id);
  const tr::BeamOptions ok;
  const char* op = "[beam_search_batch]";
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, src.to(kFloat32), ok), "(N, S) int64", "float32 (2, 3)");
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, from_vector<int64_t>({4, 5, 6}, {3}), ok), "int64 (3,)");
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, Tensor(), ok), "undefined");
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, zeros({0, 3}, kInt64), ok), "at least one sentence", "(0, 3)");
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, zeros({2, 0}, kInt64), ok), "(2, 0)");
  tr::BeamOptions b;
  b.beam_width = 0;
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, src, b), "beam_width", "0");
  b = {};
  b.max_len = -3;
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, src, b), "max_len", "-3");
  b = {};
  b.eos_id = 24;
  CHECK_ERROR_STARTS(op, tr::beam_search_batch(model, src, b), "eos_id 24", "size 24");
  // beam_search, which calls it, still names itself.
  CHECK_ERROR_STARTS("[beam_search]", tr::beam_search(model, src.narrow(0, 0, 1).to(kFloat32)), "float32 (1, 3)");
}
