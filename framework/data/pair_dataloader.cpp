#include "data/pair_dataloader.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "core/error.h"
#include "core/splitmix64.h"
#include "ops/ops.h"

namespace kiln::data {
namespace {

// Uniform in [0, n) without modulo bias (Lemire's multiply-and-reject).
uint64_t uniform_below(uint64_t& state, uint64_t n) {
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    unsigned __int128 m = static_cast<unsigned __int128>(splitmix64(state)) * n;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

std::vector<size_t> seeded_permutation(size_t n, uint64_t seed) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t{0});
  uint64_t state = seed;
  for (size_t i = n; i > 1; --i) std::swap(p[i - 1], p[uniform_below(state, i)]);
  return p;
}

std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, int64_t epoch) {
  // Distinct, well-mixed streams per epoch.
  return seeded_permutation(n, seed * 0x100000001B3ull + static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull);
}

Tensor pad_sequences(const std::vector<std::vector<int64_t>>& seqs, int64_t pad_id) {
  size_t len = 0;
  for (const auto& s : seqs) len = std::max(len, s.size());
  std::vector<int64_t> flat(seqs.size() * len, pad_id);
  for (size_t i = 0; i < seqs.size(); ++i) std::copy(seqs[i].begin(), seqs[i].end(), flat.begin() + i * len);
  return from_vector<int64_t>(flat, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(len)});
}

PairDataLoader::PairDataLoader(std::vector<TokenPair> examples, PairDataLoaderOptions opts)
    : examples_(std::move(examples)), opts_(opts) {
  KILN_CHECK(opts_.batch_size >= 1, "DataLoader", "batch_size must be at least 1, got ", opts_.batch_size);
  KILN_CHECK(opts_.bucket_pool >= 0, "DataLoader", "bucket_pool must be >= 0, got ", opts_.bucket_pool);
  KILN_CHECK(!examples_.empty(), "DataLoader", "the dataset is empty");
  if (opts_.sampler) {
    KILN_CHECK(!opts_.shuffle, "DataLoader",
               "shuffle must be false with a sampler (the DistributedSampler shuffles: its options' shuffle)");
    KILN_CHECK(opts_.sampler->dataset_size() == num_examples(), "DataLoader", "the sampler covers ",
               opts_.sampler->dataset_size(), " examples but the dataset has ", num_examples());
  }
  for (size_t i = 0; i < examples_.size(); ++i) {
    KILN_CHECK(!examples_[i].source.empty() && !examples_[i].target.empty(), "DataLoader", "example ", i,
               " has an empty ", examples_[i].source.empty() ? "source" : "target");
  }
  KILN_CHECK(opts_.max_tokens >= 0, "DataLoader", "max_tokens must be >= 0 (0: batches of batch_size), got ",
             opts_.max_tokens);
  if (opts_.max_tokens > 0) token_batches_ = make_token_batches(examples_);
}

namespace {

size_t example_length(const TokenPair& p) { return std::max(p.source.size(), p.target.size()); }

// The order token batches are cut in: by length, then by the source's and the target's
// own lengths, so that a batch's shorter sides are alike too. On translate_de_en's
// 1,500-token batches this cut the padding from 12.6% to 4.5% of the source positions
// and from 5.1% to 3.6% of the target's, in as many batches, against length alone.
bool shorter(const TokenPair& x, const TokenPair& y) {
  return std::tuple(example_length(x), x.source.size(), x.target.size()) <
         std::tuple(example_length(y), y.source.size(), y.target.size());
}

}  // namespace

std::vector<std::vector<size_t>> PairDataLoader::make_token_batches(const std::vector<TokenPair>& examples) const {
  const size_t budget = static_cast<size_t>(opts_.max_tokens);
  // Rows a batch needs at least: one per rank, so that every rank has a share of each.
  const size_t min_rows = opts_.sampler ? static_cast<size_t>(opts_.sampler->num_replicas()) : 1;
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffled()) order = seeded_permutation(order.size(), order_seed() ^ 0x6A09E667F3BCC909ull);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return shorter(examples[x], examples[y]); });
  std::vector<std::vector<size_t>> batches(1);
  for (size_t i : order) {
    const size_t len = example_length(examples[i]);
    KILN_CHECK(len * min_rows <= budget, "DataLoader", "example ", i, " has ", len, " tokens",
               min_rows > 1 ? " (times " + std::to_string(min_rows) + " ranks)" : std::string(),
               ", more than max_tokens ", opts_.max_tokens, ": filter such sentences out or raise max_tokens");
    // Sorted by length: this example is the longest of its batch, whose padded size it sets.
    std::vector<size_t>& open = batches.back();
    if (open.size() >= min_rows && (open.size() + 1) * len > budget) batches.emplace_back();
    batches.back().push_back(i);
  }
  return batches;
}

std::vector<size_t> PairDataLoader::token_batch_order(int64_t epoch) const {
  std::shared_ptr<const EpochExamples> hold;
  return batch_order(epoch_token_batches(epoch, hold).size(), epoch);
}

std::vector<size_t> PairDataLoader::batch_order(size_t batches, int64_t epoch) const {
  if (shuffled()) return epoch_permutation(batches, order_seed(), epoch);
  std::vector<size_t> order(batches);
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

const std::vector<std::vector<size_t>>& PairDataLoader::epoch_token_batches(
    int64_t epoch, std::shared_ptr<const EpochExamples>& hold) const {
  if (!opts_.resample) return token_batches_;
  hold = resampled(epoch);
  return hold->token_batches;
}

std::vector<std::vector<size_t>> PairDataLoader::token_batch_indices(int64_t epoch) const {
  std::shared_ptr<const EpochExamples> hold;
  const std::vector<std::vector<size_t>>& cut = epoch_token_batches(epoch, hold);
  std::vector<std::vector<size_t>> out;
  out.reserve(cut.size());
  for (size_t b : batch_order(cut.size(), epoch)) {
    const std::vector<size_t>& batch = cut[b];
    if (!opts_.sampler) {
      out.push_back(batch);
      continue;
    }
    const auto world = static_cast<size_t>(opts_.sampler->num_replicas());
    const auto rank = static_cast<size_t>(opts_.sampler->rank());
    std::vector<size_t> share;
    for (size_t r = rank; r < batch.size(); r += world) share.push_back(batch[r]);
    // Only the last batch cut can have fewer rows than ranks: a rank without a row of its
    // own repeats one, as DistributedSampler pads its shards.
    if (share.empty()) share.push_back(batch[rank % batch.size()]);
    out.push_back(std::move(share));
  }
  return out;
}

int64_t PairDataLoader::num_batches() const { return num_batches(0); }

int64_t PairDataLoader::num_batches(int64_t epoch) const {
  if (opts_.max_tokens > 0) {
    std::shared_ptr<const EpochExamples> hold;
    return static_cast<int64_t>(epoch_token_batches(epoch, hold).size());
  }
  int64_t n = opts_.sampler ? opts_.sampler->size() : num_examples(), b = opts_.batch_size;
  return opts_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::vector<size_t>> PairDataLoader::batch_indices(int64_t epoch) const {
  if (opts_.max_tokens > 0) return token_batch_indices(epoch);
  size_t n = examples_.size(), b = static_cast<size_t>(opts_.batch_size);
  // Distinct, well-mixed streams per epoch (and one more for the batch order).
  const bool shuffle = shuffled();
  const uint64_t seed = order_seed();
  uint64_t epoch_seed = seed * 0x100000001B3ull + static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  if (opts_.sampler) {
    order.clear();
    for (int64_t i : opts_.sampler->indices(epoch)) order.push_back(static_cast<size_t>(i));
    n = order.size();
  } else if (shuffle) {
    order = epoch_permutation(n, seed, epoch);
  }
  if (opts_.bucket_pool > 0) {
    size_t pool = b * static_cast<size_t>(opts_.bucket_pool);
    auto length = [&](size_t i) { return std::max(examples_[i].source.size(), examples_[i].target.size()); };
    for (size_t start = 0; start < n; start += pool) {
      auto first = order.begin() + static_cast<std::ptrdiff_t>(start);
      auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(n, start + pool));
      std::stable_sort(first, last, [&](size_t x, size_t y) { return length(x) < length(y); });
    }
  }
  std::vector<std::vector<size_t>> batches;
  for (size_t start = 0; start < n; start += b) {
    size_t end = std::min(n, start + b);
    if (end - start < b && opts_.drop_last) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                         order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  // With bucketing, batches come out sorted by length; shuffle their order too.
  if (opts_.bucket_pool > 0 && shuffle) {
    std::vector<size_t> p = seeded_permutation(batches.size(), epoch_seed ^ 0xD1B54A32D192ED03ull);
    std::vector<std::vector<size_t>> shuffled;
    for (size_t i : p) shuffled.push_back(std::move(batches[i]));
    batches = std::move(shuffled);
  }
  return batches;
}

PairBatch PairDataLoader::pad_batch(const std::vector<TokenPair>& examples, const std::vector<size_t>& indices) const {
  KILN_CHECK(!indices.empty(), "DataLoader", "a batch needs at least one example");
  std::vector<std::vector<int64_t>> src, tgt;
  for (size_t i : indices) {
    KILN_CHECK(i < examples.size(), "DataLoader", "example index ", i, " out of range for ", examples.size(),
               " examples");
    src.push_back(examples[i].source);
    tgt.push_back(examples[i].target);
  }
  return PairBatch{pad_sequences(src, opts_.pad_id), pad_sequences(tgt, opts_.pad_id), indices};
}

PairBatch PairDataLoader::make_batch(const std::vector<size_t>& indices) const { return pad_batch(examples_, indices); }

PairBatch PairDataLoader::make_batch(const std::vector<size_t>& indices, int64_t epoch) const {
  if (!opts_.resample) return pad_batch(examples_, indices);
  return pad_batch(resampled(epoch)->examples, indices);
}

std::shared_ptr<const PairDataLoader::EpochExamples> PairDataLoader::resampled(int64_t epoch) const {
  ResampleCache& cache = *resample_cache_;
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.data && cache.epoch == epoch) return cache.data;
  auto data = std::make_shared<EpochExamples>();
  data->examples = opts_.resample(epoch);
  KILN_CHECK(data->examples.size() == examples_.size(), "DataLoader", "resample(", epoch, ") gave ",
             data->examples.size(), " examples; the loader holds ", examples_.size());
  for (size_t i = 0; i < data->examples.size(); ++i) {
    const TokenPair& p = data->examples[i];
    KILN_CHECK(!p.source.empty() && !p.target.empty(), "DataLoader", "resample(", epoch, "): example ", i,
               " has an empty ", p.source.empty() ? "source" : "target");
  }
  if (opts_.max_tokens > 0) data->token_batches = make_token_batches(data->examples);
  cache.epoch = epoch;
  cache.data = data;
  return data;
}

std::vector<PairBatch> PairDataLoader::epoch(int64_t epoch) const {
  std::vector<PairBatch> out;
  for (const auto& idx : batch_indices(epoch)) out.push_back(make_batch(idx, epoch));
  return out;
}

}  // namespace kiln::data
