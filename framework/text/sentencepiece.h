#pragma once
// SentencePiece subword tokenizers (Google's sentencepiece library, as PyPI's
// `sentencepiece` and Hugging Face's T5/LLaMA/Marian tokenizers use it): a .model file
// loaded, or trained on sentences, then text to ids and back. The same .model gives the
// same ids as Python's `SentencePieceProcessor`.
//
//   auto tok = text::SentencePieceTokenizer::train(sentences, "de_en.model", {.vocab_size = 8000});
//   std::vector<int64_t> ids = tok.encode("Grüße aus Köln", /*add_bos=*/true, /*add_eos=*/true);
//   std::string back = tok.decode(ids);  // "Grüße aus Köln": bos and eos dropped
//   auto again = text::SentencePieceTokenizer::load("de_en.model");
//
// Built when Kiln finds libsentencepiece (Debian: libsentencepiece-dev; meson option
// -Dsentencepiece). Without it the class is still declared and every factory throws a
// kiln::Error saying so; available() tells which. Errors are kiln::Error naming the op
// and what was given: a missing, truncated or corrupt .model names the file.
//
// A tokenizer is immutable once made: copies share one loaded model (cheap), and const
// calls (encode, decode, ...) may run from many threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::text {

namespace detail {
struct SentencePieceModel;  // the loaded model (sentencepiece.cpp), opaque here
}  // namespace detail

struct SentencePieceTrainOptions {
  // Pieces in the model, the special ones included. SentencePiece's error names the
  // largest size the sentences allow when this is more.
  int64_t vocab_size = 8000;
  // "bpe", "unigram" (SentencePiece's default), "char" or "word".
  std::string model_type = "bpe";
  // The share of characters (by frequency) the vocabulary covers; the rarest others
  // become unk. 1.0 suits small alphabets (Latin scripts), 0.9995 CJK text.
  double character_coverage = 1.0;
  // The special pieces' ids, as Kiln's Transformer uses them: pad 0, unk 1, bos 2, eos 3.
  // -1 leaves pad, bos or eos out of the vocabulary; unk must have an id. (SentencePiece's
  // own defaults are pad -1, unk 0, bos 1, eos 2.)
  int64_t pad_id = 0;
  int64_t unk_id = 1;
  int64_t bos_id = 2;
  int64_t eos_id = 3;
  // "nmt_nfkc" (SentencePiece's default: NFKC plus whitespace and control-character
  // clean-up), "nfkc", "nmt_nfkc_cf", "nfkc_cf" (case-folded), or "identity" (text kept
  // as given).
  std::string normalization = "nmt_nfkc";
  // Characters outside the vocabulary become their UTF-8 bytes (<0x00>..<0xFF> pieces,
  // 256 of the vocabulary) instead of unk, as LLaMA's tokenizer does.
  bool byte_fallback = false;
  // Pieces always kept whole (e.g. "<sep>", "<mask>"): never split, matched in text as is.
  // Each non-empty, without ',' (SentencePiece's list separator) or whitespace.
  std::vector<std::string> user_defined_symbols;
  // Sentences longer than this (in bytes) are skipped, as SentencePiece does; 10..65535.
  int64_t max_sentence_length = 4192;
  // Training threads. Training uses every sentence in order (no sampling, no shuffling),
  // so the same sentences and options give the same model: BPE the same pieces at any
  // thread count; unigram's EM adds up the threads' sums in thread order, so its pieces
  // can change with num_threads (keep it fixed for models that must match).
  int64_t num_threads = 1;
  // SentencePiece's training log on stderr (off: only its errors, which train throws).
  bool verbose = false;
};

// Subword regularisation: a segmentation drawn at random instead of the best one, so that
// a model trained on many epochs of the same sentences sees each word split several ways
// (SentencePieceTokenizer::sample_encode).
//   BPE models drop each merge with probability alpha (BPE-dropout, Provilkov et al.
//   2020; they train with 0.1); nbest_size is ignored. alpha 0 gives encode()'s ids,
//   alpha >= 1 single characters.
//   Unigram models draw a segmentation with probability proportional to its likelihood
//   to the power alpha (Kudo 2018: smaller alpha, more varied; 0 uniform), among the
//   nbest_size best ones, or among all of them with -1; nbest_size 0 or 1 gives encode()'s.
//   char and word models have one segmentation: an error.
struct SubwordSampling {
  double alpha = 0.1;
  int64_t nbest_size = -1;
  // The draws depend on (texts, alpha, nbest_size, seed) alone.
  uint64_t seed = 0;
};

class SentencePieceTokenizer {
 public:
  // Whether this Kiln was built with SentencePiece (false: every factory throws).
  static bool available();

  // A .model file (SentencePiece's serialized ModelProto, as spm_train, PyPI's trainer
  // and Hugging Face's "spiece.model"/"tokenizer.model" write it). Throws naming the file
  // when it is missing, a directory, empty, truncated or not a valid model.
  static SentencePieceTokenizer load(const std::string& model_path);
  // The same from the file's bytes (e.g. a model kept inside a checkpoint); errors name
  // "<serialized model>".
  static SentencePieceTokenizer from_serialized(const std::string& bytes);

  // Trains a model on `sentences` and writes it to model_path (atomically: a temporary
  // file beside it, renamed over it); returns it loaded. A sentence with '\n' in it counts
  // as one sentence a line, as SentencePiece reads a text file ("\r\n" too); empty lines
  // are skipped. Throws before training for options out of range, no non-empty sentence,
  // or a model_path whose directory does not exist; SentencePiece's own refusals (a
  // vocab_size larger than the sentences allow) come as kiln::Error too.
  static SentencePieceTokenizer train(const std::vector<std::string>& sentences, const std::string& model_path,
                                      const SentencePieceTrainOptions& options = {});

  // Text (UTF-8; an invalid byte is read as U+FFFD) to ids, bos first and eos last when
  // asked (an error if the model has no such piece).
  std::vector<int64_t> encode(const std::string& text, bool add_bos = false, bool add_eos = false) const;
  // Each text encoded with a segmentation drawn as `sampling` says (see SubwordSampling);
  // the same arguments give the same ids on any machine and thread. Decoding gives back
  // what decode(encode(text)) does. An alpha that is negative or not finite, or an
  // nbest_size under -1, is an error naming it.
  std::vector<std::vector<int64_t>> sample_encode(const std::vector<std::string>& texts,
                                                  const SubwordSampling& sampling, bool add_bos = false,
                                                  bool add_eos = false) const;
  // The same as pieces ("▁Grü", "ße"): a character the model lacks is its own piece.
  std::vector<std::string> encode_pieces(const std::string& text) const;
  // Ids back to text. pad, bos and eos (and other control pieces) are dropped; unk is
  // " ⁇ "; byte pieces join into UTF-8. An id outside [0, vocab_size()) is an error
  // naming it and its position.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode_pieces(const std::vector<std::string>& pieces) const;

  int64_t vocab_size() const;
  // The special pieces' ids; -1 where the model has none (unk always exists).
  int64_t pad_id() const;
  int64_t unk_id() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  // unk_id() for a piece the vocabulary lacks (as SentencePiece's PieceToId).
  int64_t piece_to_id(const std::string& piece) const;
  // An id outside [0, vocab_size()) is an error naming it.
  const std::string& id_to_piece(int64_t id) const;

  // The model's bytes, as a .model file holds them.
  std::string serialized() const;
  // Writes serialized() to path (atomically, as train does).
  void save(const std::string& path) const;
  // The file it was loaded from or trained into ("" for from_serialized).
  const std::string& path() const;

 private:
  explicit SentencePieceTokenizer(std::shared_ptr<const detail::SentencePieceModel> model)
      : model_(std::move(model)) {}
  std::shared_ptr<const detail::SentencePieceModel> model_;
};

}  // namespace kiln::text
