#pragma once
// German-English sentence pairs from the Ding dictionary (Debian's package trans-de-en,
// one UTF-8 file /usr/share/trans/de-en). Each line is "German :: English"; a side holds
// sub-entries separated by " | ", aligned between the sides, and many of them are
// human-translated example sentences:
//
//   Ich kann noch nichts Konkretes sagen. :: I cannot yet be more specific.; I cannot be more specific yet.
//
// read_ding_corpus keeps the aligned sub-entries that are single full sentences on both
// sides, cleaned by fixed rules (below), removes duplicate German sentences and splits the
// rest into train, valid and test by a hash of the German side, so a sentence lands in
// one split whatever else the file holds:
//
//   data::ParallelCorpus c = data::read_ding_corpus();
//   std::puts(c.counts.summary().c_str());   // lines read, pairs kept, and why the rest went
//   c.train.size();                           // ~16,000 pairs; c.valid ~500, c.test ~1,000
//
// The rules, applied to each side of an aligned sub-entry:
//   - "a; b" lists alternatives (on the English side paraphrases): the first one is kept.
//   - Words with slash alternatives ("went/swung into action", "deal / agreement") keep
//     their first alternative ("went into action", "deal"); a word with digits ("24/7")
//     stays as it is.
//   - Parentheses mark optional words ("wurde (ein) Haftbefehl erlassen"): the words stay,
//     the parentheses go.
//   - Kept: from min_words to max_words words, starting with anything but a lower-case
//     letter, ending in . ! or ? (a closing quote may follow), without {} or [] annotations
//     (grammar and usage labels) and without the placeholders of phrase entries ("etw.",
//     "jdm.", "sth.", "sb."): those are not sentences.
// Lines that are blank, comments (#), not valid UTF-8, or without exactly one " :: " or
// with sub-entries that do not pair up are skipped and counted; nothing is dropped
// without a count.
//
// With DingCorpusOptions::phrases the dictionary's word and phrase entries come too, as
// extra training pairs ("Haus {n} :: house", "jdm. etw. leihen :: to lend sb. sth."),
// cleaned by clean_ding_phrase. They never go to valid or test; a line that gave a valid
// or test sentence gives no entries (its words are that sentence's own gloss), and no
// entry's German side is a valid or test sentence.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

struct SentencePair {
  std::string source;  // German
  std::string target;  // English
};

struct DingCorpusOptions {
  std::string path = "/usr/share/trans/de-en";
  int64_t min_words = 3;
  int64_t max_words = 40;
  // Of every 1000 German sentences (by hash), how many go to valid and to test; the rest
  // train. 29 and 58 give ~500 and ~1,000 of the file's ~17,000 pairs.
  int64_t valid_per_mille = 29;
  int64_t test_per_mille = 58;
  // Also read the word and phrase entries into ParallelCorpus::phrases (see above).
  bool phrases = false;
  // With phrases: keep at most this many of them, evenly spaced through the file (the
  // dictionary is alphabetical, so a spread keeps its mix of subjects where the first n
  // would be words from A to B). 0: all.
  int64_t max_phrases = 0;
};

// How many lines and sub-entries went where.
struct CorpusCounts {
  int64_t lines = 0;             // lines read
  int64_t comments = 0;          // starting with '#'
  int64_t blank = 0;             // empty or only spaces
  int64_t invalid_utf8 = 0;      // not valid UTF-8
  int64_t malformed = 0;         // no single " :: ", or sides with different numbers of sub-entries
  int64_t sub_entries = 0;       // aligned sub-entry pairs looked at
  int64_t not_sentences = 0;     // not a full sentence on both sides (words, phrases, annotated)
  int64_t too_short = 0;         // a side under min_words
  int64_t too_long = 0;          // a side over max_words
  int64_t duplicates = 0;        // a German sentence already kept
  int64_t train = 0, valid = 0, test = 0;
  // With DingCorpusOptions::phrases, of the sub-entries that are not sentences: entries
  // kept, left out beside or equal to a valid or test sentence, German repeats, and left
  // out by max_phrases.
  int64_t phrases = 0, phrases_held_out = 0, phrase_duplicates = 0, phrases_over_max = 0;
  std::string summary() const;
};

struct ParallelCorpus {
  std::vector<SentencePair> train, valid, test;
  std::vector<SentencePair> phrases;  // word and phrase entries, for training only
  CorpusCounts counts;
};

// Reads and splits the corpus (see the top of this file). A missing or unreadable file is
// one kiln::Error that names the file and the package that ships it; options out of range
// are errors naming them.
ParallelCorpus read_ding_corpus(const DingCorpusOptions& options = {});

enum class Split { Train, Valid, Test };

// The split of a German sentence: a 64-bit FNV-1a hash of its bytes, modulo 1000, against
// valid_per_mille and test_per_mille.
Split split_of(const std::string& source, const DingCorpusOptions& options = {});

// The pieces of s between the occurrences of sep (" :: ", " | ", ";"), empty ones kept.
std::vector<std::string> split_ding_fields(const std::string& s, const std::string& sep);
// The 64-bit FNV-1a hash of s's bytes, which decides a sentence's split.
uint64_t ding_hash(const std::string& s);

// The cleaning rules above on one side of a sub-entry; "" when it is not a sentence to keep
// (without the word-count rule, which read_ding_corpus counts apart).
std::string clean_ding_sentence(const std::string& side);

// One side of a word or phrase entry, tidied: {} and [] labels dropped, the first of
// "a; b" alternatives, slash alternatives and parentheses as for sentences, spaces
// collapsed ("Haus {n}; Gebäude {n}" -> "Haus"); "" when nothing is left or the brackets
// do not pair up.
std::string clean_ding_phrase(const std::string& side);

}  // namespace kiln::data
