// libFuzzer target: data::Vocab::load on arbitrary bytes, with the notebooks' special
// tokens, with BERT's, and with no special tokens at all. Each load must return a
// vocabulary or throw kiln::Error; anything else (another exception, a sanitizer report)
// is a crash. A vocabulary it returns must be what the file says: every token at the id
// of its line, each special role at its token's line, and saved and loaded again, the
// same words in the same order.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/vocab.h"
#include "scratch_file.h"

namespace {

using kiln::data::SpecialTokens;
using kiln::data::Vocab;

// The files Vocab::load reads (each input) and save writes.
const kiln::fuzz::ScratchFile& in_file() {
  static const kiln::fuzz::ScratchFile file("vocab_in.txt");
  return file;
}
const kiln::fuzz::ScratchFile& out_file() {
  static const kiln::fuzz::ScratchFile file("vocab_out.txt");
  return file;
}

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_vocab: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The role's token sits at the id the vocabulary gives it.
void check_role(const Vocab& v, const std::string& token, bool has, int64_t (Vocab::*id)() const) {
  if (token.empty()) {
    if (has) fail("a role without a token reports one", token);
    return;
  }
  if (!has) fail("a role with a token reports none", token);
  if (v.word((v.*id)()) != token) fail("a special token's id is not its line", token);
}

void check(const std::string& input, const SpecialTokens& specials) {
  Vocab v;
  try {
    v = Vocab::load(in_file().path(), specials);
  } catch (const kiln::Error&) {
    return;  // refused with Kiln's error: fine
  }
  for (int64_t i = 0; i < v.size(); ++i)
    if (v.id(v.word(i)) != i) fail("a token is not at the id of its line", v.word(i));
  check_role(v, specials.pad, v.has_pad(), &Vocab::pad_id);
  check_role(v, specials.bos, v.has_bos(), &Vocab::bos_id);
  check_role(v, specials.eos, v.has_eos(), &Vocab::eos_id);
  check_role(v, specials.unk, v.has_unk(), &Vocab::unk_id);
  // What save writes loads back the same.
  v.save(out_file().path());
  Vocab again = Vocab::load(out_file().path(), specials);
  if (again.words() != v.words()) fail("saved and loaded again, the words differ", input.substr(0, 200));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  in_file().write(data, size);
  check(input, SpecialTokens{});
  check(input, SpecialTokens{.pad = "[PAD]", .bos = "[CLS]", .eos = "[SEP]", .unk = "[UNK]"});
  check(input, SpecialTokens{.pad = "", .bos = "", .eos = "", .unk = ""});
  return 0;
}
