// SentencePieceTokenizer in a Kiln built without SentencePiece (meson found no
// libsentencepiece, or -Dsentencepiece=disabled): nothing of it is in the build, and
// every factory says so. No tokenizer can be made, so the member functions are never
// reached; they throw the same error all the same.
#include "text/sentencepiece.h"

#include "core/error.h"

namespace kiln::text {
namespace {

[[noreturn]] void not_built() {
  KILN_FAIL("SentencePieceTokenizer",
            "Kiln was built without SentencePiece (apt-get install libsentencepiece-dev, then meson setup "
            "--reconfigure -Dsentencepiece=enabled)");
}

}  // namespace

bool SentencePieceTokenizer::available() { return false; }
SentencePieceTokenizer SentencePieceTokenizer::load(const std::string&) { not_built(); }
SentencePieceTokenizer SentencePieceTokenizer::from_serialized(const std::string&) { not_built(); }
SentencePieceTokenizer SentencePieceTokenizer::train(const std::vector<std::string>&, const std::string&,
                                                     const SentencePieceTrainOptions&) {
  not_built();
}
std::vector<int64_t> SentencePieceTokenizer::encode(const std::string&, bool, bool) const { not_built(); }
std::vector<std::vector<int64_t>> SentencePieceTokenizer::sample_encode(const std::vector<std::string>&,
                                                                        const SubwordSampling&, bool, bool) const {
  not_built();
}
std::vector<std::string> SentencePieceTokenizer::encode_pieces(const std::string&) const { not_built(); }
std::string SentencePieceTokenizer::decode(const std::vector<int64_t>&) const { not_built(); }
std::string SentencePieceTokenizer::decode_pieces(const std::vector<std::string>&) const { not_built(); }
int64_t SentencePieceTokenizer::vocab_size() const { not_built(); }
int64_t SentencePieceTokenizer::pad_id() const { not_built(); }
int64_t SentencePieceTokenizer::unk_id() const { not_built(); }
int64_t SentencePieceTokenizer::bos_id() const { not_built(); }
int64_t SentencePieceTokenizer::eos_id() const { not_built(); }
int64_t SentencePieceTokenizer::piece_to_id(const std::string&) const { not_built(); }
const std::string& SentencePieceTokenizer::id_to_piece(int64_t) const { not_built(); }
std::string SentencePieceTokenizer::serialized() const { not_built(); }
void SentencePieceTokenizer::save(const std::string&) const { not_built(); }
const std::string& SentencePieceTokenizer::path() const { not_built(); }

}  // namespace kiln::text
