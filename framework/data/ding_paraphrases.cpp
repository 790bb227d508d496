#include "data/ding_paraphrases.h"

#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "data/ding_corpus.h"
#include "data/vocab.h"
#include "text/utf8.h"

namespace kiln::data {
namespace {

constexpr const char* kParaphraseOp = "read_ding_paraphrases";

}  // namespace

ParaphraseSets read_ding_paraphrases(const DingParaphraseOptions& o) {
  KILN_CHECK(o.min_words >= 1 && o.max_words >= o.min_words, kParaphraseOp,
             "need 1 <= min_words <= max_words, got min_words ", o.min_words, " and max_words ", o.max_words);
  KILN_CHECK(o.test_per_mille >= 0 && o.test_per_mille < 1000, kParaphraseOp,
             "test_per_mille must be in [0, 1000), got ", o.test_per_mille);
  std::ifstream in(o.path, std::ios::binary);
  KILN_CHECK(in.good(), kParaphraseOp, "cannot open '", o.path,
             "': the Ding German-English dictionary comes with Debian's package trans-de-en "
             "(apt-get install trans-de-en, or scripts/install_deps.sh)");
  ParaphraseSets out;
  std::unordered_set<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    ++out.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> sides = split_ding_fields(line, " :: ");
    if (line.empty() || line[0] == '#' || sides.size() != 2 || !text::valid_utf8(line)) {
      ++out.skipped_lines;
      continue;
    }
    for (const std::string& entry : split_ding_fields(sides[1], " | ")) {
      if (entry.find(';') == std::string::npos) continue;
      ++out.candidates;
      std::vector<std::string> set;
      for (const std::string& alternative : split_ding_fields(entry, ";")) {
        const std::string s = clean_ding_sentence(alternative);
        const auto words = static_cast<int64_t>(split_words(s).size());
        if (s.empty() || words < o.min_words || words > o.max_words || !seen.insert(s).second) continue;
        set.push_back(s);
      }
      if (set.size() < 2) {
        ++out.short_sets;
        continue;
      }
      const bool test = static_cast<int64_t>(ding_hash(set.front()) % 1000) < o.test_per_mille;
      (test ? out.test : out.train).push_back(std::move(set));
    }
  }
  KILN_CHECK(!in.bad(), kParaphraseOp, "reading '", o.path, "' failed after ", out.lines, " lines");
  return out;
}

int64_t ParaphraseSets::sentences() const {
  int64_t n = 0;
  for (const auto* split : {&train, &test})
    for (const auto& set : *split) n += static_cast<int64_t>(set.size());
  return n;
}

std::string ParaphraseSets::summary() const {
  std::ostringstream os;
  os << lines << " lines (" << skipped_lines << " skipped); " << candidates << " English sub-entries with "
     << "alternatives, " << short_sets << " with fewer than two new sentences; kept " << (train.size() + test.size())
     << " sets = train " << train.size() << " + test " << test.size() << ", " << sentences() << " sentences";
  return os.str();
}

}  // namespace kiln::data
