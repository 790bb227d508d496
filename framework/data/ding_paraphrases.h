#pragma once
// English paraphrase sets from the Ding dictionary (Debian's trans-de-en): where the
// English side of a sub-entry lists alternatives that are each a full sentence,
//
//   Niemand will dir etwas Böses. :: No one is out to harm you.; Nobody has it in for you.
//
// the alternatives say the same thing in other words: a real task for sentence
// embeddings (find a sentence's paraphrase among many) and for contrastive fine-tuning.
//
//   data::ParaphraseSets p = data::read_ding_paraphrases();
//   std::puts(p.summary().c_str());
//   p.train[0];   // {"No one is out to harm you.", "Nobody has it in for you."}
//
// Each alternative is cleaned as read_ding_corpus cleans a sentence (clean_ding_sentence,
// min_words to max_words words); a set keeps its sentences not seen in an earlier set
// (so a sentence is in one set at most) and is kept with two or more. Sets are split into
// train and test by a 64-bit FNV-1a hash of their first sentence.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

struct DingParaphraseOptions {
  std::string path = "/usr/share/trans/de-en";
  int64_t min_words = 3;
  int64_t max_words = 40;
  int64_t test_per_mille = 300;  // of every 1000 sets (by hash), how many are test sets
};

struct ParaphraseSets {
  std::vector<std::vector<std::string>> train, test;
  int64_t lines = 0;         // lines read
  int64_t skipped_lines = 0; // blank, comments, not UTF-8, no single " :: "
  int64_t candidates = 0;    // English sub-entries with "; " alternatives
  int64_t short_sets = 0;    // left with fewer than two new sentences
  std::string summary() const;
  int64_t sentences() const;  // in all sets
};

// A missing file is one kiln::Error naming the package; bad options name themselves.
ParaphraseSets read_ding_paraphrases(const DingParaphraseOptions& options = {});

}  // namespace kiln::data
