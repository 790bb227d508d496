// The BERT package on the real all-MiniLM-L6-v2 weights against transformers' BertModel
// and sentence-transformers (tests/fixtures/minilm_outputs.safetensors, written by
// make_minilm_fixtures.py): last hidden states within 1e-5 at every non-padding position
// of 64 sentences in padded batches, the pooler, sentence embeddings with cosine >=
// 0.99999; config.json's and the loader's errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bert/kiln_bert.h"
#include "test_util.h"

using namespace kiln;

namespace {

io::SafetensorsContents fixture() {
  return io::load_safetensors(std::string(std::getenv("KILN_FIXTURES")) + "/minilm_outputs.safetensors");
}

std::vector<std::string> fixture_sentences(const io::SafetensorsContents& f) {
  std::vector<std::string> out;
  std::istringstream in(f.metadata.at("sentences"));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b))).item(); }

// The fixture's 64 sentences are 4 batches of 16; under the sanitizers the first alone (the
// others run the same code at ten times the cost).
constexpr int64_t kBatches = kiln::testing::kSanitized ? 1 : 4;

}  // namespace

TEST_CASE("BertModel gives transformers' hidden states and pooler on all-MiniLM-L6-v2") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  const io::SafetensorsContents f = fixture();
  auto model = bert::BertModel::from_pretrained(dir);
  model->eval();
  CHECK(model->config.hidden_size == 384);
  CHECK(model->config.num_hidden_layers == 6);
  CHECK(model->num_parameters() == 22713216);
  const Tensor ids = f.tensors.at("input_ids"), mask = f.tensors.at("attention_mask");
  std::vector<Tensor> hidden, pooled;
  for (int64_t b = 0; b < kBatches; ++b) {
    const Tensor m = mask.narrow(0, 16 * b, 16);
    const int64_t T = static_cast<int64_t>(amax(sum(m, {1})).item());  // each batch padded to its longest
    const Tensor bi = ids.narrow(0, 16 * b, 16).narrow(1, 0, T).contiguous();
    const Tensor bm = m.narrow(1, 0, T).contiguous();
    InferenceMode inference;
    const bert::BertOutput out = model->forward(bi, bm);
    CHECK(out.last_hidden_state.shape() == Shape{16, T, 384});
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t n = static_cast<int64_t>(sum(select(bm, 0, i)).item());
      hidden.push_back(select(out.last_hidden_state, 0, i).narrow(0, 0, n));
    }
    pooled.push_back(out.pooler_output);
  }
  const Tensor got = cat(hidden, 0);
  const Tensor all = f.tensors.at("hidden");  // every sentence's tokens, batch after batch
  REQUIRE(got.size(0) <= all.size(0));
  if (kBatches == 4) CHECK(got.size(0) == all.size(0));
  const Tensor want = all.narrow(0, 0, got.size(0));
  REQUIRE(got.shape() == want.shape());
  const double hidden_err = max_abs_diff(got, want);
  MESSAGE("last_hidden_state max |Kiln - transformers| = ", hidden_err, " over ", got.size(0), " tokens");
  CHECK(hidden_err <= 1e-5);
  CHECK(max_abs_diff(cat(pooled, 0), f.tensors.at("pooler").narrow(0, 0, 16 * kBatches)) <= 1e-5);
}

TEST_CASE("SentenceTransformer gives sentence-transformers' embeddings, and its tokenizer the same ids") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  const io::SafetensorsContents f = fixture();
  const std::vector<std::string> sentences = fixture_sentences(f);
  REQUIRE(sentences.size() == 64);
  const bert::SentenceTransformer st = bert::SentenceTransformer::from_directory(dir);
  CHECK(st.pooling() == bert::Pooling::Mean);
  CHECK(st.normalizes());
  CHECK(st.max_seq_length() == 256);
  CHECK(st.dimension() == 384);
  // The tokenizer pads each batch as transformers' tokenizer did.
  for (int64_t b = 0; b < 4; ++b) {
    const std::vector<std::string> batch(sentences.begin() + 16 * b, sentences.begin() + 16 * (b + 1));
    const text::BatchTensors t = text::to_tensors(st.tokenizer().encode_batch(batch));
    const int64_t T = t.input_ids.size(1);
    CHECK(equal(t.input_ids, f.tensors.at("input_ids").narrow(0, 16 * b, 16).narrow(1, 0, T)));
    CHECK(equal(t.attention_mask, f.tensors.at("attention_mask").narrow(0, 16 * b, 16).narrow(1, 0, T)));
  }
  const std::vector<std::string> used(sentences.begin(), sentences.begin() + 16 * kBatches);
  const Tensor e = st.encode(used, 16);
  const Tensor ref = f.tensors.at("embeddings").narrow(0, 0, 16 * kBatches);
  REQUIRE(e.shape() == ref.shape());
  const Tensor cosine = div(sum(mul(e, ref), {1}), mul(norm(e, 2.0, {1}), norm(ref, 2.0, {1})));
  MESSAGE("lowest cosine to sentence-transformers: ", amin(cosine).item(), "; max |difference| ", max_abs_diff(e, ref));
  CHECK(amin(cosine).item() >= 0.99999);
  CHECK(max_abs_diff(norm(e, 2.0, {1}), ones({16 * kBatches})) <= 1e-6);  // normalised
  // Another batch size and order give the same embeddings.
  const Tensor again = st.encode(std::vector<std::string>(used.rbegin(), used.rend()), 5);
  CHECK(max_abs_diff(again.flip({0}), e) <= 1e-5);
  CHECK(st.encode({}).shape() == Shape{0, 384});
  CHECK_ERROR_STARTS("[SentenceTransformer::encode]", st.encode(sentences, 0), "batch_size", "0");
}

TEST_CASE("pool: mean, CLS, max and mean over sqrt(length) over the unpadded tokens") {
  const Tensor h = tensor({{{1.0, 2.0}, {3.0, -4.0}, {100.0, 100.0}}});  // (1, 3, 2), last token padding
  const Tensor m = tensor({{1, 1, 0}});
  CHECK(equal(bert::pool(h, m, bert::Pooling::Mean), tensor({{2.0, -1.0}})));
  CHECK(equal(bert::pool(h, m, bert::Pooling::Cls), tensor({{1.0, 2.0}})));
  CHECK(equal(bert::pool(h, m, bert::Pooling::Max), tensor({{3.0, 2.0}})));
  CHECK(max_abs_diff(bert::pool(h, m, bert::Pooling::MeanSqrtLen), tensor({{4.0 / std::sqrt(2.0), -2.0 / std::sqrt(2.0)}})) < 1e-6);
  CHECK(max_abs_diff(bert::l2_normalize(tensor({{3.0, 4.0}, {0.0, 0.0}})), tensor({{0.6, 0.8}, {0.0, 0.0}})) < 1e-7);
  CHECK_ERROR_STARTS("[pool]", bert::pool(h, tensor({{1, 1}}), bert::Pooling::Mean), "attention_mask", "(1, 2)");
  CHECK_ERROR_STARTS("[pool]", bert::pool(ones({3, 2}), m, bert::Pooling::Mean), "hidden", "(3, 2)");
}

TEST_CASE("BertConfig reads config.json and names what it cannot use") {
  const bert::BertConfig c = bert::BertConfig::from_json(
      R"({"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 50, "hidden_act": "gelu_new", "layer_norm_eps": 1e-7, "pad_token_id": null, "unused": [1, 2]})");
  CHECK(c.hidden_size == 8);
  CHECK(c.num_hidden_layers == 2);
  CHECK(c.hidden_act == "gelu_new");
  CHECK(c.layer_norm_eps == 1e-7);
  CHECK(c.pad_token_id == 0);
  CHECK(c.max_position_embeddings == 512);
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"model_type": "gpt2"})", "c.json"), "c.json",
                     "\"gpt2\" is not a BERT model");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"hidden_size": "big"})", "c.json"), "c.json",
                     "hidden_size must be an integer");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"hidden_size": 10, "num_attention_heads": 3})", "c.json"),
                     "c.json", "hidden_size 10 is not a multiple of num_attention_heads 3");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"hidden_act": "mish"})"), "hidden_act \"mish\"");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"num_hidden_layers": 0})"), "num_hidden_layers",
                     "got 0");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json(R"({"position_embedding_type": "relative_key"})"),
                     "\"relative_key\" is not supported");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_json("{\"hidden_size\": ", "c.json"), "c.json");
  CHECK_ERROR_STARTS("[BertConfig]", bert::BertConfig::from_file("/no/such/config.json"), "cannot open");
}

TEST_CASE("BertModel checks its inputs and loads Hugging Face's names strictly") {
  bert::BertConfig c;
  c.vocab_size = 20;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 6;
  bert::BertModel m(c);
  m.eval();
  const nn::StateDict sd = m.state_dict();
  CHECK(sd.count("embeddings.word_embeddings.weight"));
  CHECK(sd.count("encoder.layer.0.attention.self.query.weight"));
  CHECK(sd.count("encoder.layer.0.attention.output.LayerNorm.bias"));
  CHECK(sd.count("encoder.layer.0.intermediate.dense.weight"));
  CHECK(sd.count("encoder.layer.0.output.dense.weight"));
  CHECK(sd.count("pooler.dense.weight"));
  const Tensor ids = tensor({{1, 2, 3}});
  CHECK(m.forward(ids).last_hidden_state.shape() == Shape{1, 3, 8});
  CHECK_ERROR_STARTS("[BertModel]", m.forward(tensor({{1.0, 2.0}})), "input_ids must be (batch, tokens) int64",
                     "float32");
  CHECK_ERROR_STARTS("[BertModel]", m.forward(zeros({1, 7}, kInt64)), "7 tokens", "max_position_embeddings 6");
  CHECK_ERROR_STARTS("[BertModel]", m.forward(ids, ones({1, 2}, kInt64)), "attention_mask", "(1, 3)", "(1, 2)");
  CHECK_ERROR_STARTS("[BertModel]", m.forward(ids, Tensor(), zeros({1, 3})), "token_type_ids must be int64");

  // A "bert." prefix comes off; position_ids is checked and dropped; a missing or extra
  // name is an error that names it.
  io::TensorMap state;
  for (const auto& [name, t] : sd) state.emplace("bert." + name, t.clone());
  state.emplace("bert.embeddings.position_ids", arange(6.0).reshape({1, 6}));
  bert::BertModel fresh(c);
  fresh.eval();
  fresh.load_hf_state_dict(state);
  CHECK(equal(fresh.forward(ids).last_hidden_state, m.forward(ids).last_hidden_state));
  io::TensorMap missing = state;
  missing.erase("bert.pooler.dense.bias");
  CHECK_ERROR(fresh.load_hf_state_dict(missing), "pooler.dense.bias");
  io::TensorMap odd = state;
  odd["bert.embeddings.position_ids"] = arange(1.0, 7.0).reshape({1, 6});
  CHECK_ERROR_STARTS("[BertModel]", fresh.load_hf_state_dict(odd), "position_ids is not 0, 1, ...");
  CHECK_ERROR_STARTS("[BertModel]", bert::BertModel::from_pretrained("/no/such/model"), "is not a folder");
}

TEST_CASE("full fine-tuning: the first 10 losses are sentence-transformers' within 1e-4 relative") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  // tests/fixtures/minilm_finetune.txt: the batches and each step's loss (see its script).
  std::ifstream in(std::string(std::getenv("KILN_FIXTURES")) + "/minilm_finetune.txt");
  REQUIRE(in.good());
  std::vector<std::vector<std::string>> anchors(10), positives(10);
  std::vector<double> losses(10, NAN);
  const size_t steps = kiln::testing::kSanitized ? 3 : 10;  // the rest would repeat the same code
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    const size_t step = std::stoul(f.at(1));
    REQUIRE(step < 10);
    if (f[0] == "pair") {
      anchors[step].push_back(kiln::testing::unescape_fixture_text(f.at(2)));
      positives[step].push_back(kiln::testing::unescape_fixture_text(f.at(3)));
    } else if (f[0] == "loss") {
      losses[step] = std::stod(f.at(2));
    }
  }
  bert::SentenceTransformer st = bert::SentenceTransformer::from_directory(dir);
  st.model().eval();  // dropout off, as the reference ran; gradients on
  optim::AdamW opt(st.model().parameters(), {.lr = 2e-5, .weight_decay = 0.01});
  double worst = 0;
  for (size_t step = 0; step < steps; ++step) {
    REQUIRE(anchors[step].size() == 32);
    opt.zero_grad();
    const Tensor loss = bert::multiple_negatives_ranking_loss(st.forward(anchors[step]), st.forward(positives[step]));
    const double got = loss.item();
    INFO("step ", step, ": Kiln ", got, ", sentence-transformers ", losses[step]);
    CHECK(std::abs(got - losses[step]) <= 1e-4 * std::abs(losses[step]));
    worst = std::max(worst, std::abs(got - losses[step]) / std::abs(losses[step]));
    loss.backward();
    opt.step();
  }
  MESSAGE(steps, " fine-tuning steps: largest relative difference to sentence-transformers' loss ", worst);
}

TEST_CASE("a LoRA adapter saved by PEFT loads and gives PEFT's hidden states") {
  const std::string dir = kiln::testing::pretrained_dir("all-MiniLM-L6-v2");
  if (dir.empty()) return;
  const std::string fixtures = std::getenv("KILN_FIXTURES");
  auto model = bert::BertModel::from_pretrained(dir);
  const nn::LoraConfig c = nn::load_lora(fixtures + "/minilm_lora", *model);
  CHECK(c.r == 4);
  CHECK(c.alpha == 8);
  CHECK(c.target_modules == std::vector<std::string>{"query", "value"});
  CHECK(nn::lora_state_dict(*model).size() == 24);  // 6 layers x (query, value) x (A, B)
  model->eval();
  const io::SafetensorsContents ref = io::load_safetensors(fixtures + "/minilm_lora_outputs.safetensors");
  const Tensor ids = ref.tensors.at("input_ids"), mask = ref.tensors.at("attention_mask");
  InferenceMode inference;
  const Tensor hidden = model->forward(ids, mask).last_hidden_state;
  const Tensor keep = mask.to(kFloat32).unsqueeze(-1);  // padding positions compared as 0
  const double err = max_abs_diff(mul(hidden, keep), mul(ref.tensors.at("hidden"), keep));
  MESSAGE("PEFT adapter: max |Kiln - PEFT| = ", err);
  CHECK(err <= 1e-5);
  // The adapter changes the output (its B is not zero), and merged it gives the same.
  auto plain = bert::BertModel::from_pretrained(dir);
  plain->eval();
  CHECK(max_abs_diff(mul(plain->forward(ids, mask).last_hidden_state, keep), mul(hidden, keep)) > 1e-3);
  nn::merge_lora(*model);
  CHECK(max_abs_diff(mul(model->forward(ids, mask).last_hidden_state, keep), mul(hidden, keep)) <= 1e-5);
}
