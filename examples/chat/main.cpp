// Chat with a language model from a GGUF file, as llama.cpp runs it: SmolLM2-135M-Instruct
// in 4-bit blocks (scripts/fetch_models.sh), its byte-level BPE tokenizer and chat
// template from the file's metadata, the reply streamed as it is generated.
//
//   chat --prompt "What is the capital of France?"     # one turn
//   chat                                               # a conversation, a line a turn
//   chat --raw --prompt "Once upon a time"             # plain continuation, no template
//
// After each reply: prompt and generation tokens/s.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/llama/kiln_llama.h>
#include <kiln/text/byte_bpe.h>

#include "../common/cli.h"

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string model, prompt, system;
  bool has_prompt = false, raw = false;
  kiln::llama::GenerationConfig gen;
  int threads = 0;
};

std::string default_model() {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/") / ".cache/kiln/models";
  return (root / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
}

const char* kUsage =
    "chat [--prompt \"text\"] [--system \"text\"] [--raw] [--model FILE.gguf] [--max-tokens N]\n"
    "            [--temperature T] [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S] [--threads T]\n"
    "  without --prompt, a conversation: one user turn a line from standard input (Ctrl-D ends)\n"
    "  --temperature 0 (the default) decodes greedily; above 0 it samples";

Args parse(kiln_examples::Cli& cli) {
  Args a;
  a.model = cli.nonempty_text("--model", default_model());
  a.has_prompt = cli.flag("--prompt");
  a.prompt = cli.text("--prompt", "");
  a.system = cli.text("--system", "");
  a.raw = cli.flag("--raw");
  a.gen.max_new_tokens = cli.integer("--max-tokens", 256, 1, 1 << 20);
  const double temperature = cli.real("--temperature", 0.0, 0.0, 100.0);
  a.gen.do_sample = temperature > 0;
  a.gen.temperature = temperature > 0 ? temperature : 1.0;
  a.gen.top_k = cli.integer("--top-k", 0, 0, 1 << 30);
  a.gen.top_p = cli.real("--top-p", 1.0, 1e-6, 1.0);
  a.gen.repetition_penalty = cli.real("--repeat-penalty", 1.0, 0.01, 100.0);
  a.gen.seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  a.threads = static_cast<int>(cli.integer("--threads", 0, 0, 4096));
  cli.finish();
  if (a.has_prompt && a.prompt.find_first_not_of(" \t\r\n") == std::string::npos) cli.fail("--prompt: the prompt is empty");
  if (a.raw && !a.has_prompt) cli.fail("--raw needs --prompt (a conversation uses the chat template)");
  return a;
}

// Generates a reply to `text` (already templated), printing it as it comes; returns it.
std::string reply(kiln::llama::LlamaForCausalLM& model, const kiln::text::BytePairTokenizer& tok,
                  const std::string& text, const Args& a) {
  const std::vector<int64_t> ids = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
  kiln::llama::GenerationConfig g = a.gen;
  g.stop_tokens = tok.eog_ids();
  std::string out;
  const kiln::llama::GenerationResult r = kiln::llama::generate(model, ids, g, [&](int64_t id) {
    if (tok.is_eog(id)) return true;
    const std::string piece = tok.token_to_piece(id);
    out += piece;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n[prompt: %lld tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s%s]\n",
              static_cast<long long>(r.prompt_tokens), r.prompt_tokens_per_second(), r.tokens.size(),
              r.generation_tokens_per_second(), r.stopped ? "" : ", --max-tokens reached");
  return out;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, kUsage);
  const Args a = parse(cli);
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  KILN_CHECK(fs::exists(a.model), "chat", "no model at '", a.model,
             "': run scripts/fetch_models.sh (it fetches SmolLM2-135M-Instruct) or give --model FILE.gguf");
  const kiln::io::GGUFFile file = kiln::io::read_gguf(a.model);
  const auto model = kiln::llama::LlamaForCausalLM::from_gguf(file);
  const kiln::text::BytePairTokenizer tok = kiln::text::BytePairTokenizer::from_gguf(file);
  std::printf("model: %s (%lld layers, %lld heads / %lld kv heads, vocabulary %lld, %d threads)\n", a.model.c_str(),
              static_cast<long long>(model->config.num_hidden_layers),
              static_cast<long long>(model->config.num_attention_heads),
              static_cast<long long>(model->config.num_key_value_heads),
              static_cast<long long>(model->config.vocab_size), kiln::get_num_threads());
  std::vector<kiln::text::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  const auto turn = [&](const std::string& user) {
    if (a.raw) {
      std::printf("%s", user.c_str());
      reply(*model, tok, user, a);
      return;
    }
    messages.push_back({"user", user});
    const std::string answer = reply(*model, tok, tok.apply_chat_template(messages, true), a);
    messages.push_back({"assistant", answer});
  };
  if (a.has_prompt) {
    if (!a.raw) std::printf("> %s\n", a.prompt.c_str());
    turn(a.prompt);
    return 0;
  }
  std::printf("one turn a line (Ctrl-D ends):\n> ");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line); std::printf("> "), std::fflush(stdout))
    if (line.find_first_not_of(" \t\r") != std::string::npos) turn(line);
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return kiln_examples::run_main("chat", [&] { return run(argc, argv); }); }
