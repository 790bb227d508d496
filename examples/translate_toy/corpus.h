#pragma once
// The toy German→English corpus: the two sentences of the seed notebook 000 and pairs
// written for this project in the same spirit (subject, verb, object; "X ist Y"), with a
// held-out part whose every word also appears in the training part.
#include <string>
#include <utility>
#include <vector>

namespace translate_toy {

using SentencePair = std::pair<std::string, std::string>;  // German, English

// 000's pairs first ("ich mochte ein bier" → "i want a beer ."), then 76 more.
const std::vector<SentencePair>& training_pairs();
// 16 pairs never seen in training.
const std::vector<SentencePair>& held_out_pairs();

}  // namespace translate_toy
