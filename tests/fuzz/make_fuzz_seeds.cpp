// Writes the fuzz targets' seed corpora with Kiln itself: make_fuzz_seeds OUT_DIR writes
// OUT_DIR/{json,safetensors,checkpoint,vocab,byte_bpe}/<name>. The committed seeds (tests/fuzz/seeds)
// are its output; run it again after a format change:
//   ninja -C build-sanitize tests/fuzz/make_fuzz_seeds && build-sanitize/tests/fuzz/make_fuzz_seeds tests/fuzz/seeds
// (a clang tree configured with -Dfuzzing=true, as scripts/test.sh's build-sanitize)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data/vocab.h"
#include "fuzz_byte_bpe_vocab.h"
#include "fuzz_model.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/loss.h"
#include "ops/ops.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  KILN_CHECK(out.good(), "make_fuzz_seeds", "cannot write ", path.string());
}

// The JSON header of a safetensors file (its bytes 8 .. 8 + N).
std::string header_of(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  return file.substr(8, n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* d : {"json", "safetensors", "checkpoint", "vocab"}) fs::create_directories(out / d);
  Generator gen(7);

  // safetensors: each dtype Kiln writes, empty and scalar tensors, metadata.
  const io::TensorMap mixed = {
      {"f32", randn({2, 3}, {}, &gen)},
      {"f64", randn({3}, kFloat64, &gen)},
      {"i64", arange(4)},
      {"flag", ones({2}, kBool)},
      {"scalar", full({}, 2.5)},
      {"empty", zeros({0, 4})},
  };
  const std::string files[][2] = {
      {"mixed", io::serialize_safetensors(mixed, {{"format", "pt"}, {"note", "seed"}})},
      {"empty", io::serialize_safetensors({})},
      {"metadata_only", io::serialize_safetensors({}, {{"k", "v"}})},
      {"linear", io::serialize_safetensors({{"weight", randn({2, 3}, {}, &gen)}, {"bias", zeros({2})}})},
  };
  for (const auto& [name, bytes] : files) {
    write(out / "safetensors" / (name + ".safetensors"), bytes);
    write(out / "json" / (name + ".json"), header_of(bytes));
  }
  // JSON: the value kinds and escapes a header does not hold.
  write(out / "json" / "values.json",
        R"({"a":[null,true,false,0,-1,1.5e-3,2E+10,"\u00e9\ud83d\ude00\n\t\"\\\/"],"b":{"c":[[[]]],"d":{}}})");

  // Checkpoints of the fuzz target's model: fresh, after two training steps, with user
  // metadata.
  fuzz::FuzzModel m;
  io::save_checkpoint((out / "checkpoint" / "fresh.safetensors").string(), m.parts(&gen));
  for (int step = 0; step < 2; ++step) {
    m.optimizer->zero_grad();
    mse_loss((*m.model)(randn({4, 3}, {}, &gen)), randn({4, 2}, {}, &gen)).backward();
    m.optimizer->step();
    m.scheduler->step();
    m.plateau->step(1.0);  // a best of 1, then a step without improvement
  }
  io::save_checkpoint((out / "checkpoint" / "trained.safetensors").string(), m.parts(&gen),
                      {{"epoch", "2"}, {"best", "0.5"}});

  // Vocabularies as Vocab::save writes them (the notebooks' specials first) and as BERT's
  // vocab.txt has them (specials at other lines, CRLF endings).
  data::Vocab::build({"ich mochte ein bier", "i want a beer"}).save((out / "vocab" / "notebook.txt").string());
  write(out / "vocab" / "bert.txt", "[PAD]\n[unused0]\n[unused1]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n");
  write(out / "vocab" / "crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n");

  // fuzz_byte_bpe: the first byte picks the input's kind (see the target): text under each
  // pre-tokenizer, a chat template, ids, and a GGUF file with the target's vocabulary.
  fs::create_directories(out / "byte_bpe");
  write(out / "byte_bpe" / "text_smollm.txt",
        std::string("\x03") + "Hello the 123 <|im_end|>  in\n\n\t's w\xC3\xA4r \xF0\x9F\x98\x80");
  write(out / "byte_bpe" / "text_gpt2.txt", std::string("\x07") + "A  'll 4567 <tool>x\xFF\xC0\x80 \xED\xA0\x80");
  write(out / "byte_bpe" / "text_default.txt",
        std::string("\x0A") + "x+=1; (a|b) ~$9 1234567 \xE2\x80\xA8 \xC2\xA0");
  write(out / "byte_bpe" / "template.txt",
        "c{%- for m in messages %}{% if loop.first %}<|im_start|>system\n{{ 'S' ~ '\\n' }}{% endif %}<|im_start|>"
        "{{ m.role }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor -%}\n{% if add_generation_prompt %}x{% endif %}");
  write(out / "byte_bpe" / "ids.bin", std::string("i\x01\x01\x05\x01\x80\x00\xC3\x00\x09\x01\xFF\x00", 13));
  write(out / "byte_bpe" / "vocab.gguf", "g" + io::serialize_gguf(fuzz::byte_bpe_metadata("smollm"), {}));
  std::printf("seeds written under %s\n", out.string().c_str());
  return 0;
}
