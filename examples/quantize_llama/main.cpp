// Writes a Llama model as llama.cpp's GGUF in another block type, as llama-quantize does:
// from a GGUF file (its tokenizer kept) or from a Hugging Face folder (config.json and
// model.safetensors; the tokenizer's metadata then from a GGUF file of the same vocabulary).
//
//   quantize_llama --input SmolLM2-135M-Instruct.Q4_1.gguf --output smollm2.Q8_0.gguf --type q8_0
//   quantize_llama --input tuned_hf_folder --tokenizer SmolLM2-135M-Instruct.Q4_1.gguf
//                  --output tuned.Q4_0.gguf --type q4_0        (one command line)
//
// Prints each tensor's type and the file's size; the file loads in llama.cpp and in Kiln
// (LlamaForCausalLM::from_gguf, examples/chat --model).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <kiln/kiln.h>
#include <kiln/llama/kiln_llama.h>

#include "../common/cli.h"

namespace {

namespace fs = std::filesystem;
using kiln::GGMLType;

const char* kUsage =
    "quantize_llama --input FILE.gguf|HF_FOLDER --output OUT.gguf [--type q8_0|q4_0|q4_1|f16|bf16|f32]\n"
    "               [--tokenizer FILE.gguf] [--name NAME]\n"
    "  a Hugging Face folder needs --tokenizer: a GGUF file whose tokenizer.* keys to copy";

GGMLType type_named(kiln_examples::Cli& cli, const std::string& name) {
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::F16, GGMLType::BF16, GGMLType::F32})
    if (name == kiln::ggml_type_info(t).name) return t;
  cli.fail("--type: expected q8_0, q4_0, q4_1, f16, bf16 or f32, got '" + name + "'");
  return GGMLType::F32;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, kUsage);
  const std::string input = cli.nonempty_text("--input", "");
  const std::string output = cli.nonempty_text("--output", "");
  const GGMLType type = type_named(cli, cli.text("--type", "q8_0"));
  const std::string tokenizer = cli.text("--tokenizer", "");
  const std::string name = cli.text("--name", "");
  cli.finish();
  if (input.empty()) cli.fail("--input: a GGUF file or a Hugging Face folder is needed");
  if (output.empty()) cli.fail("--output: the file to write is needed");
  const bool from_folder = fs::is_directory(input);
  if (from_folder && tokenizer.empty()) cli.fail("--tokenizer: a Hugging Face folder needs a GGUF file's tokenizer");

  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<kiln::llama::LlamaForCausalLM> model;
  kiln::llama::GGUFSaveOptions options{.type = type};
  options.name = name;
  if (from_folder) {
    model = kiln::llama::LlamaForCausalLM::from_pretrained(input);
  } else {
    // The blocks stay mapped: copied where the type matches, dequantised once otherwise.
    const kiln::io::GGUFFile file = kiln::io::read_gguf(input);
    model = kiln::llama::LlamaForCausalLM::from_gguf(file);
    options.tokenizer = kiln::llama::tokenizer_metadata(file);
    if (options.name.empty())
      if (const kiln::io::GGUFValue* n = file.find("general.name")) options.name = n->as_string("general.name");
  }
  if (!tokenizer.empty()) options.tokenizer = kiln::llama::tokenizer_metadata(kiln::io::read_gguf(tokenizer));
  kiln::llama::save_gguf(*model, output, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const kiln::io::GGUFFile written = kiln::io::read_gguf(output);
  for (const kiln::io::GGUFTensorInfo& t : written.tensors)
    std::printf("%-28s %-6s %s\n", t.name.c_str(), kiln::ggml_type_info(t.type).name,
                kiln::shape_str(t.shape()).c_str());
  std::printf("wrote %s: %zu tensors, %.1f MB, in %.2f s\n", output.c_str(), written.tensors.size(),
              static_cast<double>(fs::file_size(output)) / 1e6, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("quantize_llama", [&] { return run(argc, argv); });
}
