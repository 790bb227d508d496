// The data of a real translator: the Ding dictionary's sentence pairs (the reader's rules
// and counts on a made-up excerpt, the splits' disjointness, the real file when Debian's
// trans-de-en is installed) and batches by a token budget (within budget, every pair once
// an epoch, deterministic, sharded alike over ranks).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {

std::string excerpt_path() {
  const char* dir = std::getenv("KILN_FIXTURES");
  REQUIRE(dir != nullptr);
  return std::string(dir) + "/ding_excerpt.txt";
}

// The excerpt with its word and phrase entries, every sentence in train.
data::DingCorpusOptions excerpt_with_phrases() {
  data::DingCorpusOptions o;
  o.path = excerpt_path();
  o.phrases = true;
  o.valid_per_mille = 0;
  o.test_per_mille = 0;
  return o;
}

std::map<std::string, std::string> by_source(const data::ParallelCorpus& c) {
  std::map<std::string, std::string> m;
  for (const auto* split : {&c.train, &c.valid, &c.test})
    for (const auto& p : *split) m[p.source] = p.target;
  return m;
}

}  // namespace

TEST_CASE("read_ding_corpus keeps the aligned sentence pairs of the excerpt and counts the rest") {
  data::DingCorpusOptions o;
  o.path = excerpt_path();
  const data::ParallelCorpus c = data::read_ding_corpus(o);
  const data::CorpusCounts& n = c.counts;
  CHECK(n.lines == 34);
  CHECK(n.comments == 2);
  CHECK(n.blank == 2);
  CHECK(n.invalid_utf8 == 1);  // Latin-1 "Grüße"
  CHECK(n.malformed == 3);     // no " :: ", sides that do not pair up, two " :: "
  CHECK(n.sub_entries == 29);
  // Words, annotations, a first alternative without a full stop, a lone "(", a phrase with
  // placeholders ("addiction to sth.").
  CHECK(n.not_sentences == 9);
  CHECK(c.phrases.empty());  // only with DingCorpusOptions::phrases
  CHECK(n.phrases == 0);
  CHECK(n.too_short == 1);      // "Ja. :: Yes."
  CHECK(n.duplicates == 1);     // "Das ist alles." a second time
  CHECK(n.train + n.valid + n.test == 18);
  CHECK(static_cast<int64_t>(c.train.size()) == n.train);
  CHECK(static_cast<int64_t>(c.valid.size()) == n.valid);
  CHECK(static_cast<int64_t>(c.test.size()) == n.test);

  const auto pairs = by_source(c);
  REQUIRE(pairs.size() == 18);
  // The first of "a; b" alternatives; the first duplicate wins.
  CHECK(pairs.at("Ich kann noch nichts Genaues sagen.") == "I cannot be more precise yet.");
  CHECK(pairs.at("Das ist alles.") == "That is all.");
  // A sentence sub-entry of a word entry; slash alternatives, glued and spaced.
  CHECK(pairs.at("Wir gehen nach Hause.") == "We are going home.");
  CHECK(pairs.at("Sie ging schnell nach Hause.") == "She went home quickly.");
  CHECK(pairs.at("Die Abiturienten feiern heute.") == "The school leavers celebrate today.");
  CHECK(pairs.at("Wir arbeiten rund um die Uhr, 24/7.") == "We work around the clock, 24/7.");
  // Optional words keep their words, not their parentheses.
  CHECK(pairs.at("Gegen ihn wurde ein Haftbefehl erlassen.") == "A warrant was issued for him.");
  // A closing quote after the final punctuation.
  CHECK(pairs.at("Er sagte: „Komm her!“") == "He said: “Come here!”");
  CHECK(n.summary().find("kept 18") != std::string::npos);
}

TEST_CASE("read_ding_corpus splits by the German side: disjoint, and each where split_of puts it") {
  data::DingCorpusOptions o;
  o.path = excerpt_path();
  o.valid_per_mille = 300;  // a third each, so that every split has some of 18 pairs
  o.test_per_mille = 300;
  const data::ParallelCorpus c = data::read_ding_corpus(o);
  CHECK(!c.train.empty());
  CHECK(!c.valid.empty());
  CHECK(!c.test.empty());
  std::set<std::string> seen;
  for (const auto& [split, pairs] : {std::pair{data::Split::Train, &c.train}, std::pair{data::Split::Valid, &c.valid},
                                     std::pair{data::Split::Test, &c.test}}) {
    for (const auto& p : *pairs) {
      CHECK(data::split_of(p.source, o) == split);
      CHECK(seen.insert(p.source).second);  // no German sentence in two places
    }
  }
  // Another share moves sentences between splits, never duplicates them.
  o.valid_per_mille = 0;
  o.test_per_mille = 0;
  const data::ParallelCorpus all_train = data::read_ding_corpus(o);
  CHECK(all_train.train.size() == 18);
  CHECK(all_train.valid.empty());
}

TEST_CASE("read_ding_corpus with phrases: the word and phrase entries, for training only") {
  data::DingCorpusOptions o = excerpt_with_phrases();
  const data::ParallelCorpus all_train = data::read_ding_corpus(o);
  CHECK(all_train.train.size() == 18);  // the sentences as without phrases
  std::map<std::string, std::string> phrases;
  for (const auto& p : all_train.phrases) phrases[p.source] = p.target;
  // Labels go, the first alternative stays; "(ganz" does not pair up; the second
  // "Haus" is a duplicate.
  const std::map<std::string, std::string> expected = {{"Haus", "house"},
                                                       {"Häuser", "houses"},
                                                       {"gehen", "to go"},
                                                       {"Das Wetter ist schön.", "The weather is nice."},
                                                       {"Es ist kalt", "It is cold."},
                                                       {"Abhängigkeit von etw.", "addiction to sth."},
                                                       {"Ich habe Hunger.", "I am hungry."}};
  CHECK(phrases == expected);
  CHECK(all_train.counts.phrases == 7);
  CHECK(all_train.counts.phrase_duplicates == 1);
  CHECK(all_train.counts.phrases_held_out == 0);
  CHECK(all_train.counts.summary().find("word and phrase entries for training 7") != std::string::npos);

  // A line that gives a valid or test sentence gives no entries ("gehen" shares its line
  // with two sentences), and no entry is a valid or test sentence (the annotated "Ich
  // habe Hunger [ugs.].").
  o.valid_per_mille = 300;
  o.test_per_mille = 400;
  const data::ParallelCorpus c = data::read_ding_corpus(o);
  const bool gehen_held_out = data::split_of("Wir gehen nach Hause.", o) != data::Split::Train ||
                              data::split_of("Sie ging schnell nach Hause.", o) != data::Split::Train;
  const bool hunger_held_out = data::split_of("Ich habe Hunger.", o) != data::Split::Train;
  // These shares put both in valid or test, so that both rules are exercised.
  CHECK(gehen_held_out);
  CHECK(hunger_held_out);
  CHECK(c.counts.phrases_held_out == (gehen_held_out ? 1 : 0) + (hunger_held_out ? 1 : 0));
  CHECK(c.counts.phrases == 7 - c.counts.phrases_held_out);
  CHECK(static_cast<int64_t>(c.phrases.size()) == c.counts.phrases);
  std::set<std::string> held_out;
  for (const auto* split : {&c.valid, &c.test})
    for (const auto& p : *split) held_out.insert(p.source);
  for (const auto& p : c.phrases) {
    CHECK((p.source != "gehen" || !gehen_held_out));
    CHECK(held_out.count(p.source) == 0);
  }
}

TEST_CASE("read_ding_corpus with max_phrases: a spread of the entries, counted") {
  data::DingCorpusOptions o = excerpt_with_phrases();
  const data::ParallelCorpus all = data::read_ding_corpus(o);
  REQUIRE(all.phrases.size() == 7);
  o.max_phrases = 3;
  const data::ParallelCorpus c = data::read_ding_corpus(o);
  // Entries 0, 2 and 4 of the 7 (i · 7 / 3), in the file's order; the sentences unchanged.
  REQUIRE(c.phrases.size() == 3);
  const size_t picked[] = {0, 2, 4};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(c.phrases[i].source == all.phrases[picked[i]].source);
    CHECK(c.phrases[i].target == all.phrases[picked[i]].target);
  }
  CHECK(c.train.size() == all.train.size());
  CHECK(c.counts.phrases == 3);
  CHECK(c.counts.phrases_over_max == 4);
  CHECK(c.counts.summary().find("word and phrase entries for training 3 (") != std::string::npos);
  CHECK(c.counts.summary().find(", 4 over max_phrases)") != std::string::npos);
  // As many as there are, or more: all of them, nothing counted over.
  o.max_phrases = 7;
  CHECK(data::read_ding_corpus(o).phrases.size() == 7);
  o.max_phrases = 100;
  CHECK(data::read_ding_corpus(o).counts.phrases_over_max == 0);
  o.max_phrases = -1;
  CHECK(error_of([&] { data::read_ding_corpus(o); }).find("max_phrases must be >= 0 (0: all), got -1") !=
        std::string::npos);
}

TEST_CASE("clean_ding_sentence, clean_ding_phrase and text::valid_utf8") {
  CHECK(data::clean_ding_phrase("Haus {n}; Gebäude {n} [arch.]") == "Haus");
  CHECK(data::clean_ding_phrase("Haus {n} der Begegnung") == "Haus der Begegnung");
  CHECK(data::clean_ding_phrase("(sich) etw. ansehen/anschauen") == "sich etw. ansehen");
  CHECK(data::clean_ding_phrase("  to go   home ") == "to go home");
  CHECK(data::clean_ding_phrase("{n}") == "");
  CHECK(data::clean_ding_phrase("Haus {n") == "");
  CHECK(data::clean_ding_phrase("Haus ]") == "");
  CHECK(data::clean_ding_sentence("  Er ging/lief   nach Hause.  ") == "Er ging nach Hause.");
  CHECK(data::clean_ding_sentence("The deal / agreement was signed.") == "The deal was signed.");
  CHECK(data::clean_ding_sentence("They understand /recognise/grasp it.") == "They understand it.");
  CHECK(data::clean_ding_sentence("word {n}") == "");
  CHECK(data::clean_ding_sentence("to go home.") == "");               // lower case: a phrase entry
  CHECK(data::clean_ding_sentence("Abhängigkeit von etw.") == "");     // a placeholder
  CHECK(data::clean_ding_sentence("He gave sb.'s book back.") == "");
  CHECK(data::clean_ding_sentence("„Komm!“") == "„Komm!“");           // punctuation may start one
  CHECK(data::clean_ding_sentence("no full stop") == "");
  CHECK(data::clean_ding_sentence("Unbalanced ) here.") == "");
  CHECK(text::valid_utf8("Grüße, naïve — 😀"));
  CHECK_FALSE(text::valid_utf8("Gr\xFC\xDF"));                 // Latin-1
  CHECK_FALSE(text::valid_utf8("\xC0\xAF"));                   // an overlong '/'
  CHECK_FALSE(text::valid_utf8("\xED\xA0\x80"));               // a UTF-16 surrogate
  CHECK_FALSE(text::valid_utf8("\xF4\x90\x80\x80"));           // past U+10FFFF
  CHECK_FALSE(text::valid_utf8("\xE2\x82"));                   // cut short
  // Characters with their byte spans; a byte that is not UTF-8 is one of its own.
  const std::vector<text::Utf8Char> chars = text::decode_utf8("aü😀\xFFz");
  REQUIRE(chars.size() == 5);
  CHECK(chars[1].value == U'ü');
  CHECK((chars[1].begin == 1 && chars[1].size == 2));
  CHECK(chars[2].value == U'😀');
  CHECK(chars[2].size == 4);
  CHECK(chars[3].value == text::kNotUtf8);
  CHECK((chars[4].value == U'z' && chars[4].begin == 8));
  std::string back;
  for (char32_t c : {U'a', U'ü', U'€', U'😀'}) text::append_utf8(back, c);
  CHECK(back == "aü€😀");
}

TEST_CASE("read_ding_corpus errors name the file, the package and the options") {
  data::DingCorpusOptions o;
  o.path = "/nonexistent/de-en";
  const std::string missing = error_of([&] { data::read_ding_corpus(o); });
  CHECK(missing.find("[read_ding_corpus]") != std::string::npos);
  CHECK(missing.find("/nonexistent/de-en") != std::string::npos);
  CHECK(missing.find("trans-de-en") != std::string::npos);
  o.path = excerpt_path();
  o.min_words = 5;
  o.max_words = 4;
  CHECK(error_of([&] { data::read_ding_corpus(o); }).find("min_words 5 and max_words 4") != std::string::npos);
  o.min_words = 3;
  o.max_words = 40;
  o.valid_per_mille = 600;
  o.test_per_mille = 400;
  CHECK(error_of([&] { data::read_ding_corpus(o); }).find("valid_per_mille") != std::string::npos);
  // A file of another kind: no pairs at all.
  o = {};
  o.path = std::string(std::getenv("KILN_FIXTURES")) + "/torch_defaults.txt";
  CHECK(error_of([&] { data::read_ding_corpus(o); }).find("no training pairs") != std::string::npos);
}

TEST_CASE("read_ding_corpus on Debian's trans-de-en: ~18,000 pairs, valid ~500, test ~1,000") {
  const data::DingCorpusOptions o;
  if (!std::filesystem::exists(o.path)) {
    MESSAGE("skipped: ", o.path, " is not installed (apt-get install trans-de-en)");
    return;
  }
  const data::ParallelCorpus c = data::read_ding_corpus(o);
  CHECK(c.train.size() > 15000);
  CHECK(c.valid.size() > 400);
  CHECK(c.valid.size() < 700);
  CHECK(c.test.size() > 850);
  CHECK(c.test.size() < 1300);
  CHECK(c.counts.invalid_utf8 == 0);
  CHECK(c.phrases.empty());
  std::set<std::string> valid_and_test;
  for (const auto& p : c.valid) valid_and_test.insert(p.source);
  for (const auto& p : c.test) CHECK(valid_and_test.insert(p.source).second);
  for (const auto& p : c.train) CHECK(valid_and_test.count(p.source) == 0);
}

namespace {

// Pairs of random lengths 1..max_len (sources and targets apart).
std::vector<data::TokenPair> random_pairs(size_t n, size_t max_len, uint64_t seed) {
  std::vector<data::TokenPair> v;
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(s >> 33);
  };
  for (size_t i = 0; i < n; ++i)
    v.push_back({std::vector<int64_t>(1 + next() % max_len, 5), std::vector<int64_t>(1 + next() % max_len, 6)});
  return v;
}

size_t longest_side(const data::TokenPair& p) { return std::max(p.source.size(), p.target.size()); }

}  // namespace

TEST_CASE("read_ding_paraphrases: the English alternatives that are all sentences, each in one set") {
  kiln::testing::ScratchDir dir("paraphrases");
  const std::string path = dir / "de-en";
  std::ofstream(path) << "# comment\n"
                         "Ich kann noch nichts Genaues sagen. :: I cannot be more precise yet.; I cannot yet be more precise.\n"
                         "Haus {n} [arch.] :: house; building\n"
                         "Er kommt. | Sie geht. :: He comes.; He is coming. | She goes.\n"
                         "Noch einmal. :: I cannot yet be more precise.; Once more, please.; Again and again, please!\n"
                         "Nur einer. :: Only one here.; too short\n"
                         "kaputt\n";
  data::DingParaphraseOptions o;
  o.path = path;
  o.test_per_mille = 0;
  const data::ParaphraseSets p = data::read_ding_paraphrases(o);
  CHECK(p.lines == 7);
  CHECK(p.skipped_lines == 2);  // the comment, the line without " :: "
  CHECK(p.candidates == 5);     // every English sub-entry with ';'
  // "house; building" are no sentences; "He comes.; He is coming." has two words each
  // (under min_words 3); "Only one here." stands alone; the fourth line's first sentence
  // was seen in the first set, the other two make a set.
  REQUIRE(p.train.size() == 2);
  CHECK(p.train[0] == std::vector<std::string>{"I cannot be more precise yet.", "I cannot yet be more precise."});
  CHECK(p.train[1] == std::vector<std::string>{"Once more, please.", "Again and again, please!"});
  CHECK(p.short_sets == 3);
  CHECK(p.sentences() == 4);
  CHECK(p.summary().find("kept 2 sets") != std::string::npos);
  o.test_per_mille = 999;
  const data::ParaphraseSets all_test = data::read_ding_paraphrases(o);
  CHECK(all_test.train.size() + all_test.test.size() == 2);
  CHECK_ERROR_STARTS("[read_ding_paraphrases]", data::read_ding_paraphrases({.path = dir / "missing"}), "trans-de-en");
  CHECK_ERROR_STARTS("[read_ding_paraphrases]", data::read_ding_paraphrases({.path = path, .test_per_mille = 1000}),
                     "test_per_mille");
  const std::string real = "/usr/share/trans/de-en";
  if (!std::filesystem::exists(real)) return;
  const data::ParaphraseSets d = data::read_ding_paraphrases();
  MESSAGE("Debian's trans-de-en: ", d.summary());
  CHECK(d.train.size() + d.test.size() > 500);
  CHECK(d.test.size() > 100);
  std::set<std::string> seen;
  for (const auto* split : {&d.train, &d.test})
    for (const auto& set : *split) {
      CHECK(set.size() >= 2);
      for (const std::string& s : set) CHECK(seen.insert(s).second);
    }
}

TEST_CASE("PairDataLoader max_tokens: batches within budget, every pair once an epoch, deterministic") {
  const auto pairs = random_pairs(500, 40, 7);
  const int64_t budget = 200;
  data::PairDataLoader loader(pairs, {.shuffle = true, .seed = 3, .max_tokens = budget});
  std::vector<std::vector<size_t>> first;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const auto batches = loader.batch_indices(epoch);
    CHECK(static_cast<int64_t>(batches.size()) == loader.num_batches());
    std::vector<int> seen(pairs.size(), 0);
    for (const auto& b : batches) {
      size_t longest = 0;
      for (size_t i : b) {
        ++seen[i];
        longest = std::max(longest, longest_side(pairs[i]));
      }
      CHECK(b.size() * longest <= static_cast<size_t>(budget));
      const data::PairBatch t = loader.make_batch(b);
      CHECK(t.source.numel() <= budget);
      CHECK(t.target.numel() <= budget);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    if (epoch == 0) first = batches;
    if (epoch == 1) CHECK(batches != first);  // another order each epoch
  }
  // Similar lengths together: far less padding than batches of random pairs.
  size_t padded = 0, real = 0;
  for (const auto& b : first) {
    size_t longest = 0;
    for (size_t i : b) longest = std::max(longest, longest_side(pairs[i]));
    padded += longest * b.size();
    for (size_t i : b) real += longest_side(pairs[i]);
  }
  CHECK(static_cast<double>(real) / static_cast<double>(padded) > 0.9);
  // And each side on its own: within a length, sorted by the source's and the target's own
  // lengths (by the longer side alone: 74-76% of either side's padded positions are real;
  // here 81% and 80%).
  size_t source_padded = 0, source_real = 0, target_padded = 0, target_real = 0;
  for (const auto& b : first) {
    const data::PairBatch t = loader.make_batch(b);
    source_padded += static_cast<size_t>(t.source.numel());
    target_padded += static_cast<size_t>(t.target.numel());
    for (size_t i : b) {
      source_real += pairs[i].source.size();
      target_real += pairs[i].target.size();
    }
  }
  CHECK(static_cast<double>(source_real) / static_cast<double>(source_padded) > 0.78);
  CHECK(static_cast<double>(target_real) / static_cast<double>(target_padded) > 0.78);
  // The same seed, the same batches; another seed, others.
  data::PairDataLoader again(pairs, {.shuffle = true, .seed = 3, .max_tokens = budget});
  CHECK(again.batch_indices(0) == first);
  data::PairDataLoader other(pairs, {.shuffle = true, .seed = 4, .max_tokens = budget});
  CHECK(other.batch_indices(0) != first);
}

TEST_CASE("PairDataLoader max_tokens with a DistributedSampler: every rank reads its share of each batch") {
  const auto pairs = random_pairs(300, 30, 11);
  const int64_t world = 3;
  std::vector<std::vector<std::vector<size_t>>> shares;
  for (int64_t r = 0; r < world; ++r) {
    auto sampler = std::make_shared<data::DistributedSampler>(
        static_cast<int64_t>(pairs.size()), data::DistributedSamplerOptions{.num_replicas = world, .rank = r, .seed = 5});
    data::PairDataLoader rank(pairs, {.shuffle = false, .max_tokens = 150, .sampler = sampler});
    shares.push_back(rank.batch_indices(2));
  }
  REQUIRE(shares[0].size() == shares[1].size());
  REQUIRE(shares[0].size() == shares[2].size());
  std::vector<int> seen(pairs.size(), 0);
  int64_t short_batches = 0;
  for (size_t b = 0; b < shares[0].size(); ++b) {
    size_t longest = 0;
    std::set<size_t> rows;
    for (int64_t r = 0; r < world; ++r) {
      CHECK(!shares[static_cast<size_t>(r)][b].empty());  // no rank idles at a step
      for (size_t i : shares[static_cast<size_t>(r)][b]) {
        rows.insert(i);
        longest = std::max(longest, longest_side(pairs[i]));
      }
    }
    for (size_t i : rows) ++seen[i];
    CHECK(rows.size() * longest <= 150);
    // Fewer rows than ranks (padded by repeating one) only for the last batch cut.
    short_batches += rows.size() < static_cast<size_t>(world);
  }
  CHECK(short_batches <= 1);
  CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
}

TEST_CASE("PairDataLoader max_tokens errors: an example over the budget, a negative budget") {
  auto pairs = random_pairs(20, 10, 1);
  pairs[7].target.assign(64, 6);
  const std::string e = error_of([&] { data::PairDataLoader(pairs, {.max_tokens = 50}); });
  CHECK(e.find("example 7 has 64 tokens") != std::string::npos);
  CHECK(e.find("max_tokens 50") != std::string::npos);
  CHECK(error_of([&] { data::PairDataLoader(pairs, {.max_tokens = -1}); }).find("max_tokens must be >= 0") !=
        std::string::npos);
}

TEST_CASE("PairDataLoader resample: each epoch's examples, cut into batches of their own, made once an epoch") {
  const auto pairs = random_pairs(200, 20, 5);
  // A stand-in for a sampled segmentation: epoch e appends 2e copies of id 9 to every
  // source, and counts its calls.
  auto calls = std::make_shared<std::vector<int64_t>>();
  auto resample = [pairs, calls](int64_t epoch) {
    calls->push_back(epoch);
    std::vector<data::TokenPair> out = pairs;
    for (auto& p : out) p.source.insert(p.source.end(), static_cast<size_t>(2 * epoch), 9);
    return out;
  };
  const int64_t budget = 120;
  data::PairDataLoader plain(pairs, {.shuffle = true, .seed = 3, .max_tokens = budget});
  data::PairDataLoader loader(pairs, {.shuffle = true, .seed = 3, .max_tokens = budget, .resample = resample});
  std::vector<int64_t> counts;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    INFO("epoch " << epoch);
    const auto extra = static_cast<size_t>(2 * epoch);
    const auto batches = loader.batch_indices(epoch);
    CHECK(static_cast<int64_t>(batches.size()) == loader.num_batches(epoch));
    counts.push_back(loader.num_batches(epoch));
    // Epoch 0 adds nothing: the loader's own batches.
    if (epoch == 0) CHECK(batches == plain.batch_indices(0));
    std::vector<int> seen(pairs.size(), 0);
    for (const auto& b : batches) {
      const data::PairBatch got = loader.make_batch(b, epoch);
      const data::PairBatch own = loader.make_batch(b);  // without an epoch: the loader's examples
      CHECK(got.indices == b);
      // Within the budget on this epoch's lengths.
      CHECK(got.source.numel() <= budget);
      size_t longest = 0;
      for (size_t i : b) {
        ++seen[i];
        longest = std::max(longest, pairs[i].source.size() + extra);
      }
      CHECK(got.source.size(1) == static_cast<int64_t>(longest));
      CHECK(own.source.size(1) + static_cast<int64_t>(extra) == got.source.size(1));
      // Row 0: the pair's source, then 2e nines, then padding.
      const auto row = got.source.select(0, 0).to_vector<int64_t>();
      const auto& src = pairs[b[0]].source;
      CHECK(std::equal(src.begin(), src.end(), row.begin()));
      CHECK(std::count(row.begin() + static_cast<std::ptrdiff_t>(src.size()), row.end(), 9) ==
            static_cast<std::ptrdiff_t>(extra));
      CHECK(got.target.to_vector<int64_t>() == own.target.to_vector<int64_t>());
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    CHECK(loader.epoch(epoch).size() == batches.size());
  }
  // Longer examples, more batches.
  CHECK(counts[2] > counts[0]);
  // One call an epoch however often it is read; another loader, the same batches.
  CHECK(*calls == std::vector<int64_t>{0, 1, 2});
  data::PairDataLoader again(pairs, {.shuffle = true, .seed = 3, .max_tokens = budget, .resample = resample});
  CHECK(again.batch_indices(2) == loader.batch_indices(2));
  // Batches of batch_size stay the loader's; their rows are the epoch's.
  data::PairDataLoader rows(pairs, {.batch_size = 16, .shuffle = true, .seed = 3, .resample = resample});
  data::PairDataLoader rows_plain(pairs, {.batch_size = 16, .shuffle = true, .seed = 3});
  CHECK(rows.batch_indices(1) == rows_plain.batch_indices(1));
  CHECK(rows.num_batches(1) == rows_plain.num_batches());
  const auto first = rows.batch_indices(1).front();
  CHECK(rows.make_batch(first, 1).source.size(1) == rows_plain.make_batch(first).source.size(1) + 2);
}

TEST_CASE("PairDataLoader resample errors: another count, an empty side") {
  const auto pairs = random_pairs(20, 10, 1);
  data::PairDataLoader fewer(pairs, {.resample = [pairs](int64_t) {
                                       return std::vector<data::TokenPair>(pairs.begin(), pairs.end() - 1);
                                     }});
  const std::string e = error_of([&] { fewer.make_batch({0, 1}, 4); });
  CHECK(e.find("DataLoader") != std::string::npos);
  CHECK(e.find("resample(4) gave 19 examples; the loader holds 20") != std::string::npos);
  data::PairDataLoader empty(pairs, {.resample = [pairs](int64_t) {
                                       auto out = pairs;
                                       out[3].target.clear();
                                       return out;
                                     }});
  CHECK(error_of([&] { empty.epoch(0); }).find("resample(0): example 3 has an empty target") != std::string::npos);
}
