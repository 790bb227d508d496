// LoRA adapters (nn/lora.h): which layers they attach to, what they freeze, the update
// and its gradients (float64 gradcheck), merge and unmerge, PEFT's names and files, and
// the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace kiln;

namespace {

// A two-block model whose Linear layers have the names PEFT users target.
struct Block : nn::Module {
  std::shared_ptr<nn::Linear> query, value, dense;
  Block() : nn::Module("Block") {
    query = register_module("query", std::make_shared<nn::Linear>(6, 6));
    value = register_module("value", std::make_shared<nn::Linear>(6, 6));
    dense = register_module("dense", std::make_shared<nn::Linear>(6, 4));
  }
  Tensor forward(const Tensor& x) { return dense->forward(add(query->forward(x), value->forward(x))); }
};

struct Net : nn::Module {
  std::shared_ptr<nn::ModuleList<Block>> layer;
  Net() : nn::Module("Net") {
    layer = register_module("layer", std::make_shared<nn::ModuleList<Block>>());
    layer->push_back(std::make_shared<Block>());
    layer->push_back(std::make_shared<Block>());
  }
  Tensor forward(const Tensor& x) {
    // Each block reads the input's first 6 features and returns 4; their sum is the output.
    return add((*layer)[0]->forward(x), (*layer)[1]->forward(x));
  }
};

double max_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b))).item(); }

}  // namespace

TEST_CASE("add_lora adapts the named Linear layers, freezes the rest and starts as the base model") {
  manual_seed(1);
  Net net;
  const Tensor x = randn({3, 6});
  const Tensor before = net.forward(x);
  const int64_t base_params = net.num_parameters();
  nn::LoraConfig c{.r = 2, .alpha = 4, .target_modules = {"query", "value"}};
  const std::vector<std::string> adapted = nn::add_lora(net, c);
  CHECK(adapted == std::vector<std::string>{"layer.0.query", "layer.0.value", "layer.1.query", "layer.1.value"});
  // Only the adapters train: r (in + out) per layer.
  CHECK(nn::trainable_parameters(net).size() == 8);
  CHECK(net.num_parameters(/*only_trainable=*/true) == 4 * 2 * (6 + 6));
  CHECK(net.num_parameters() == base_params + 4 * 2 * (6 + 6));
  CHECK_FALSE((*net.layer)[0]->dense->weight.requires_grad());
  CHECK(net.state_dict().count("layer.1.value.lora_B.weight"));
  CHECK(equal(net.forward(x), before));  // lora_B starts at zero
  CHECK(nn::lora_state_dict(net).count("base_model.model.layer.0.query.lora_A.weight"));
  CHECK(nn::lora_state_dict(net).size() == 8);
  // "query" does not match "my_query", and an adapter's own layers are never targets.
  CHECK_ERROR_STARTS("[add_lora]", nn::add_lora(net, {.target_modules = {"uery"}}), "no Linear layer matches",
                     "[uery]");
  CHECK_ERROR_STARTS("[add_lora]", nn::add_lora(net, {.target_modules = {"query"}}),
                     "'layer.0.query' already has an adapter");
  Net other;
  CHECK_ERROR_STARTS("[add_lora]", nn::add_lora(other, {.r = 0, .target_modules = {"query"}}), "r must be at least 1");
  CHECK_ERROR_STARTS("[add_lora]", nn::add_lora(other, {}), "target_modules is empty");
  CHECK_ERROR_STARTS("[add_lora]", nn::add_lora(other, {.dropout = 1.0, .target_modules = {"query"}}), "dropout");
}

TEST_CASE("a LoRA layer computes W x + b + (alpha / r) B A x, with float64 gradients for A, B and x") {
  manual_seed(2);
  nn::Linear l(5, 3);
  l.to(kFloat64);
  l.attach_lora(2, 1.5, 0.0);
  {
    NoGradGuard no_grad;
    l.lora_B->weight.copy_(randn({3, 2}, kFloat64));  // not zero, so the update shows
  }
  const Tensor x = randn({4, 5}, kFloat64);
  const Tensor want = add(linear(x, l.weight, l.bias),
                          mul(matmul(matmul(x, l.lora_A->weight.t()), l.lora_B->weight.t()), 1.5));
  CHECK(max_diff(l.forward(x), want) < 1e-12);
  const Tensor a = l.lora_A->weight.detach().requires_grad_(true);
  const Tensor b = l.lora_B->weight.detach().requires_grad_(true);
  const Tensor xin = x.detach().requires_grad_(true);
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        nn::Linear probe(5, 3);
        probe.to(kFloat64);
        probe.attach_lora(2, 1.5, 0.0);
        {
          NoGradGuard no_grad;
          probe.weight.copy_(l.weight);
          probe.bias.copy_(l.bias);
        }
        probe.lora_A->weight = in[1];
        probe.lora_B->weight = in[2];
        return probe.forward(in[0]);
      },
      {xin, a, b}));
}

TEST_CASE("merge_lora folds the update into the weights and unmerge_lora takes it out again") {
  manual_seed(3);
  Net net;
  nn::add_lora(net, {.r = 3, .alpha = 6, .target_modules = {"value", "dense"}});
  for (const Tensor& p : nn::trainable_parameters(net)) {
    NoGradGuard no_grad;
    Tensor t = p;
    t.copy_(mul(randn(p.shape()), 0.1));
  }
  const Tensor x = randn({5, 6});
  const Tensor w0 = (*net.layer)[1]->value->weight.clone();
  const Tensor adapted = net.forward(x);
  nn::merge_lora(net);
  CHECK((*net.layer)[1]->value->lora_merged);
  CHECK(max_diff(net.forward(x), adapted) < 1e-5);
  CHECK(max_diff((*net.layer)[1]->value->weight, w0) > 1e-4);
  nn::merge_lora(net);  // twice is once
  CHECK(max_diff(net.forward(x), adapted) < 1e-5);
  nn::unmerge_lora(net);
  CHECK(max_diff((*net.layer)[1]->value->weight, w0) < 1e-6);
  CHECK(max_diff(net.forward(x), adapted) < 1e-5);
  // A clone keeps the adapters and their state.
  auto copy = std::dynamic_pointer_cast<nn::Linear>((*net.layer)[1]->value->clone());
  REQUIRE(copy != nullptr);
  CHECK(copy->has_lora());
  CHECK(equal(copy->lora_A->weight, (*net.layer)[1]->value->lora_A->weight));
}

TEST_CASE("save_lora and load_lora write and read PEFT's adapter files") {
  manual_seed(4);
  kiln::testing::ScratchDir dir("lora");
  Net net;
  const nn::LoraConfig c{.r = 2, .alpha = 8, .dropout = 0.1, .target_modules = {"query", "value"}};
  nn::add_lora(net, c);
  for (const Tensor& p : nn::trainable_parameters(net)) {
    NoGradGuard no_grad;
    Tensor t = p;
    t.copy_(randn(p.shape()));
  }
  net.eval();
  const Tensor x = randn({2, 6});
  const Tensor want = net.forward(x);
  nn::save_lora(dir / "adapter", net, c);
  CHECK(std::filesystem::exists(dir / "adapter/adapter_model.safetensors"));
  const io::SafetensorsContents file = io::load_safetensors(dir / "adapter/adapter_model.safetensors");
  CHECK(file.tensors.count("base_model.model.layer.1.query.lora_B.weight"));
  CHECK(file.tensors.size() == 8);

  // Into a fresh copy of the base model (same base weights).
  Net fresh;
  fresh.load_state_dict(
      [&] {
        nn::StateDict base;
        for (const auto& [k, v] : net.state_dict())
          if (k.find("lora_") == std::string::npos) base[k] = v;
        return base;
      }(),
      true);
  const nn::LoraConfig read = nn::load_lora(dir / "adapter", fresh);
  CHECK(read.r == 2);
  CHECK(read.alpha == 8);
  CHECK(read.dropout == doctest::Approx(0.1));
  CHECK(read.target_modules == c.target_modules);
  fresh.eval();
  CHECK(max_diff(fresh.forward(x), want) < 1e-6);

  // Bad files: a missing folder, a config PEFT would not write, weights for another model.
  Net other;
  CHECK_ERROR_STARTS("[load_lora]", nn::load_lora(dir / "nowhere", other), "cannot open");
  std::filesystem::create_directories(dir / "bad");
  std::ofstream(dir / "bad/adapter_config.json") << R"({"peft_type": "LORA", "r": 2, "target_modules": ["query"], "bias": "all"})";
  CHECK_ERROR_STARTS("[load_lora]", nn::load_lora(dir / "bad", other), "bias \"all\" is not supported");
  std::ofstream(dir / "bad/adapter_config.json") << R"({"peft_type": "PREFIX_TUNING"})";
  CHECK_ERROR_STARTS("[load_lora]", nn::load_lora(dir / "bad", other), "peft_type must be \"LORA\"");
  std::filesystem::copy_file(dir / "adapter/adapter_model.safetensors", dir / "bad/adapter_model.safetensors");
  std::ofstream(dir / "bad/adapter_config.json") << R"({"r": 2, "lora_alpha": 8, "target_modules": ["dense"]})";
  Net third;
  CHECK_ERROR_STARTS("[load_lora]", nn::load_lora(dir / "bad", third), "missing [", "unexpected [",
                     "layer.0.query.lora_A.weight");
  Net plain;
  CHECK_ERROR_STARTS("[save_lora]", nn::save_lora(dir / "x", plain, c), "no LoRA adapter");
}
