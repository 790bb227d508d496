// Semantic search over real sentences with a pretrained encoder: all-MiniLM-L6-v2 (from
// its own Hugging Face files, scripts/fetch_models.sh) embeds the English sentences of
// the Ding dictionary (Debian's trans-de-en), then answers queries with the nearest
// sentences by cosine similarity.
//
//   semantic_search --query "The weather is nice today."          # top 5 for one query
//   semantic_search --top-k 3 < queries.txt                        # a query per line
//
// The embeddings are kept in --out (semantic_search_out/embeddings.safetensors) and used
// again while the corpus and the model are the same.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <kiln/bert/kiln_bert.h>
#include <kiln/kiln.h>

#include "../common/cli.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, corpus = "/usr/share/trans/de-en", out = "semantic_search_out";
  std::vector<std::string> queries;
  int64_t top_k = 5, batch_size = 32, limit = 0;
  int threads = 0;
  bool fresh = false;
};

std::string default_model() {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/") / ".cache/kiln/models";
  return (root / "all-MiniLM-L6-v2").string();
}

const char* kUsage =
    "semantic_search [--query \"text\"] [--top-k K] [--model DIR] [--corpus FILE] [--limit N]\n"
    "                       [--batch-size B] [--threads T] [--out DIR] [--fresh]\n"
    "  without --query, reads one query per line from standard input";

Args parse(kiln_examples::Cli& cli) {
  Args a;
  a.model = cli.nonempty_text("--model", default_model());
  a.corpus = cli.nonempty_text("--corpus", a.corpus);
  if (cli.flag("--query")) a.queries.push_back(cli.text("--query", ""));
  a.top_k = cli.integer("--top-k", a.top_k, 1, 1000);
  a.batch_size = cli.integer("--batch-size", a.batch_size, 1, 4096);
  a.limit = cli.integer("--limit", 0, 0, 10'000'000);
  a.threads = static_cast<int>(cli.integer("--threads", 0, 0, 4096));
  a.out = cli.nonempty_text("--out", a.out);
  a.fresh = cli.flag("--fresh");
  cli.finish();
  for (const std::string& q : a.queries)
    if (q.find_first_not_of(" \t") == std::string::npos) cli.fail("--query: the query is empty");
  cli.make_directory("--out", a.out);
  return a;
}

// The corpus's distinct English sentences, every split (the search needs no held-out part).
std::vector<std::string> english_sentences(const std::string& path, int64_t limit) {
  kiln::data::DingCorpusOptions o;
  o.path = path;
  const kiln::data::ParallelCorpus c = kiln::data::read_ding_corpus(o);
  std::vector<std::string> out;
  for (const auto* split : {&c.train, &c.valid, &c.test})
    for (const kiln::data::SentencePair& p : *split) out.push_back(p.target);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (limit > 0 && static_cast<int64_t>(out.size()) > limit) out.resize(static_cast<size_t>(limit));
  return out;
}

// The sentences' embeddings (N, H): from the cache when it holds these sentences
// embedded by this model, else computed (and cached).
kiln::Tensor embeddings(const kiln::bert::SentenceTransformer& st, const std::vector<std::string>& sentences,
                        const Args& a) {
  const fs::path cache = fs::path(a.out) / "embeddings.safetensors";
  std::string key;
  for (const std::string& s : sentences) key += s + '\n';
  const std::string digest = std::to_string(std::hash<std::string>{}(key)) + " " + fs::absolute(a.model).string();
  if (!a.fresh && fs::exists(cache)) {
    try {
      kiln::io::SafetensorsContents c = kiln::io::load_safetensors(cache.string());
      auto it = c.tensors.find("embeddings");
      if (c.metadata["digest"] == digest && it != c.tensors.end() &&
          it->second.size(0) == static_cast<int64_t>(sentences.size())) {
        std::printf("embeddings: %zu sentences from %s\n", sentences.size(), cache.c_str());
        return it->second;
      }
    } catch (const kiln::Error& e) {
      std::printf("embeddings: %s is unusable (%s); computing them again\n", cache.c_str(), e.what());
    }
  }
  const auto t0 = Clock::now();
  const kiln::Tensor e = st.encode(sentences, a.batch_size);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("embedded %zu sentences in %.1f s: %.0f sentences/s (batch %lld, %d threads)\n", sentences.size(), s,
              static_cast<double>(sentences.size()) / s, static_cast<long long>(a.batch_size), kiln::get_num_threads());
  kiln::io::save_safetensors(cache.string(), {{"embeddings", e}}, {{"digest", digest}});
  return e;
}

void answer(const kiln::bert::SentenceTransformer& st, const kiln::Tensor& corpus,
            const std::vector<std::string>& sentences, const std::string& query, int64_t top_k) {
  kiln::InferenceMode inference;
  const auto t0 = Clock::now();
  const kiln::Tensor q = st.encode({query});                          // (1, H), normalised
  const kiln::Tensor scores = kiln::matmul(corpus, q.t()).reshape({-1});  // cosines (N)
  const int64_t k = std::min<int64_t>(top_k, scores.numel());
  const auto [values, indices] = kiln::topk(scores, k);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("\nquery: %s  (%.1f ms)\n", query.c_str(), ms);
  for (int64_t i = 0; i < k; ++i)
    std::printf("  %.4f  %s\n", kiln::select(values, 0, i).item(),
                sentences[static_cast<size_t>(kiln::select(indices, 0, i).item())].c_str());
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, kUsage);
  const Args a = parse(cli);
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  KILN_CHECK(fs::exists(fs::path(a.model) / "modules.json"), "semantic_search", "no model at '", a.model,
             "': run scripts/fetch_models.sh (it fetches all-MiniLM-L6-v2) or give --model DIR");
  const kiln::bert::SentenceTransformer st = kiln::bert::SentenceTransformer::from_directory(a.model);
  std::printf("model: %s (%lld parameters, %lld dimensions, %s pooling%s)\n", a.model.c_str(),
              static_cast<long long>(st.model().num_parameters()), static_cast<long long>(st.dimension()),
              kiln::bert::pooling_name(st.pooling()), st.normalizes() ? ", normalised" : "");
  const std::vector<std::string> sentences = english_sentences(a.corpus, a.limit);
  const kiln::Tensor corpus = embeddings(st, sentences, a);
  if (!a.queries.empty()) {
    for (const std::string& q : a.queries) answer(st, corpus, sentences, q, a.top_k);
    return 0;
  }
  std::printf("\none query a line (end with Ctrl-D):\n");
  for (std::string line; std::getline(std::cin, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) answer(st, corpus, sentences, line, a.top_k);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("semantic_search", [&] { return run(argc, argv); });
}
