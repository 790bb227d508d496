#include "transformer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <typeinfo>

namespace kiln::transformer {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string join_losses(const std::vector<double>& v) {
  std::string s;
  // 17 digits: the losses read back are the same doubles, bit for bit.
  for (double x : v) {
    if (!s.empty()) s += ',';
    s += fmt("%.17g", x);
  }
  return s;
}

const std::string* metadata_find(const io::Metadata& m, const std::string& key, const std::string& path,
                                 bool required) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end() || !required, "Trainer::load", "checkpoint '", path, "' has no '", key,
             "' entry: not a trainer checkpoint");
  return it == m.end() ? nullptr : &it->second;
}

// The whole text as a decimal integer in [lo, hi]; anything else ("1e214", "-5", "",
// " 3", "7x", an overflow) is an error naming the entry.
int64_t strict_int(const std::string& text, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  int64_t v = 0;
  KILN_CHECK(io::parse_whole(text, &v) && v >= lo && v <= hi, "Trainer::load", "checkpoint '",
             path, "': '", key, "' must be an integer from ", lo, " to ", hi, ", got '", text, "'");
  return v;
}

// The whole text as a number >= 0, finite unless allow_inf (then "inf" too); NaN, a
// negative value or trailing characters are errors naming the entry.
double strict_loss(const std::string& text, const std::string& key, const std::string& path, bool allow_inf) {
  double v = NAN;
  const bool ok = io::parse_whole(text, &v) && !std::isnan(v) && v >= 0 && (allow_inf || std::isfinite(v));
  KILN_CHECK(ok, "Trainer::load", "checkpoint '", path, "': '", key, "' must be a ",
             allow_inf ? "non-negative number or inf" : "finite non-negative number", ", got '", text, "'");
  return v;
}

// "l1,l2,…" (each a strict loss); "" is none.
std::vector<double> split_losses(const std::string& s, const std::string& key, const std::string& path) {
  std::vector<double> v;
  if (s.empty()) return v;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    v.push_back(strict_loss(s.substr(at, comma - at), key + "[" + std::to_string(v.size()) + "]", path, false));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return v;
}

// While it lives, `gen` draws from rank's own stream: the shared seed for rank 0, mixed
// with the rank for the others (at the shared offset); its seed is restored after.
class RankStream {
 public:
  RankStream(Generator& gen, const GeneratorState& shared, int64_t rank) : gen_(gen), seed_(shared.seed) {
    if (rank > 0) gen_.set_state({seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank)), shared.offset});
  }
  ~RankStream() { gen_.set_state({seed_, gen_.get_state().offset}); }
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

 private:
  Generator& gen_;
  uint64_t seed_;
};

// Drops the oldest entries beyond the newest `kept`.
void keep_newest(std::vector<double>& v, int64_t kept) {
  const size_t k = static_cast<size_t>(std::max<int64_t>(kept, 0));
  if (v.size() > k) v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(k));
}

}  // namespace

std::pair<Tensor, Tensor> teacher_forcing_pair(const Tensor& tgt) {
  KILN_CHECK(tgt.defined() && tgt.dim() == 2 && tgt.size(1) >= 2, "teacher_forcing_pair",
             "targets must be (batch, length >= 2) with begin and end tokens, got ",
             tgt.defined() ? shape_str(tgt.shape()) : std::string("undefined"));
  const int64_t T = tgt.size(1);
  return {tgt.narrow(1, 0, T - 1).contiguous(), tgt.narrow(1, 1, T - 1).contiguous()};
}

Trainer::Trainer(Seq2SeqTransformer& model, const data::PairDataLoader& train,
                 const data::PairDataLoader* validation, TrainerOptions opts)
    : Trainer(model, &train, validation, std::move(opts)) {}

Trainer::Trainer(Seq2SeqTransformer& model, const data::PairDataLoader* train,
                 const data::PairDataLoader* validation, TrainerOptions opts)
    : model_(model), train_(train), validation_(validation), opts_(std::move(opts)) {
  KILN_CHECK(opts_.epochs >= 0, "Trainer", "epochs must be non-negative, got ", opts_.epochs);
  KILN_CHECK(opts_.warmup_steps >= 1, "Trainer", "warmup_steps must be at least 1, got ", opts_.warmup_steps);
  KILN_CHECK(opts_.step_losses_kept >= 0, "Trainer", "step_losses_kept must be non-negative, got ",
             opts_.step_losses_kept);
  KILN_CHECK(std::isfinite(opts_.max_seconds) && opts_.max_seconds >= 0, "Trainer",
             "max_seconds must be a finite number >= 0 (0: no time budget), got ", opts_.max_seconds);
  KILN_CHECK(std::isfinite(opts_.eval_every_seconds) && opts_.eval_every_seconds >= 0, "Trainer",
             "eval_every_seconds must be a finite number >= 0 (0: at epoch ends only), got ", opts_.eval_every_seconds);
  KILN_CHECK(opts_.eval_metric_names.empty() || opts_.eval_metrics, "Trainer", "eval_metric_names (",
             opts_.eval_metric_names.size(), " of them) need eval_metrics, the function that computes them");
  KILN_CHECK(!opts_.autocast || *opts_.autocast == kBFloat16, "Trainer",
             "autocast supports bfloat16 only, got ", dtype_name(opts_.autocast.value_or(kBFloat16)));
  const bool data_parallel =
      opts_.data_parallel.value_or(distributed::is_initialized() && distributed::world_size() > 1);
  if (data_parallel) {
    KILN_CHECK(distributed::is_initialized(), "Trainer",
               "data_parallel needs the process group: call kiln::distributed::init() first (under mpirun)");
    world_ = distributed::world_size();
    const int64_t rank = distributed::rank();
    rank_ = rank;
    main_process_ = rank == 0;
    if (train_) {
      const auto& sampler = train_->options().sampler;
      KILN_CHECK(sampler && sampler->num_replicas() == world_ && sampler->rank() == rank, "Trainer",
                 "data-parallel training over ", world_, " processes needs a training DataLoader that reads rank ",
                 rank, "'s shard: PairDataLoaderOptions::sampler = a DistributedSampler of ", world_, " replicas",
                 sampler ? std::string(" (it has ") + std::to_string(sampler->num_replicas()) + " replicas, rank " +
                               std::to_string(sampler->rank()) + ")"
                         : std::string(" (it has none)"));
    }
  }
  optim::AdamOptions adam;
  adam.lr = 1.0;  // the schedule sets the actual rate
  adam.beta1 = opts_.beta1;
  adam.beta2 = opts_.beta2;
  adam.eps = opts_.eps;
  adam.weight_decay = opts_.weight_decay;
  optimizer_ = std::make_unique<optim::Adam>(model_.parameters(), adam);
  scheduler_ = std::make_unique<optim::WarmupInverseSqrtLR>(*optimizer_, model_.options.d_model, opts_.warmup_steps,
                                                            opts_.lr_factor, opts_.warmup_indexing);
  if (!opts_.resume_from.empty()) load(opts_.resume_from);
  // After loading: every rank read the same file, and DDP checks that, taking rank 0's
  // weights everywhere.
  if (data_parallel) ddp_ = std::make_unique<nn::parallel::DistributedDataParallel>(
                         model_, nn::parallel::DistributedDataParallelOptions{.bucket_cap_mb = opts_.bucket_cap_mb});
  if (!main_process_) return;  // the log and the checkpoints are rank 0's
  if (!opts_.metrics_path.empty()) {
    metrics_ = train::MetricsLog(opts_.metrics_path, metrics_columns(), /*append=*/!opts_.resume_from.empty());
  }
  if (!opts_.checkpoint_dir.empty()) {
    train::CheckpointManagerOptions co;
    co.keep_last = opts_.checkpoint_keep_last;
    co.latest_alias = "last.safetensors";  // the name resume_from has always been given
    checkpoints_ = std::make_unique<train::CheckpointManager>(opts_.checkpoint_dir, co);
  }
}

Trainer::Trainer(Seq2SeqTransformer& model, TrainerOptions opts) : Trainer(model, nullptr, nullptr, std::move(opts)) {}

Tensor Trainer::batch_loss(const data::PairBatch& batch, Reduction reduction, int64_t* tokens) {
  // Batches are made on the CPU; the step runs where the model is.
  const Device device = model_device();
  auto [tgt_in, labels] = teacher_forcing_pair(batch.target.to(device));
  // Forward and loss only, as torch.autocast is used: backward and Adam run outside it.
  std::optional<AutocastGuard> autocast;
  if (opts_.autocast) autocast.emplace(*opts_.autocast);
  const double pad = static_cast<double>(model_.options.pad_id);
  *tokens = static_cast<int64_t>(ne(labels, pad).to(kInt64).sum().item());
  const Tensor src = batch.source.to(device);
  // A generator of another class than nn::Linear runs its own forward (the composition).
  const nn::Linear& generator = *model_.generator;
  if (opts_.fused_loss && typeid(generator) == typeid(nn::Linear)) {
    return linear_cross_entropy(model_.decoder_output(src, tgt_in), generator.weight, generator.bias, labels,
                                model_.options.pad_id, opts_.label_smoothing, reduction);
  }
  Tensor logits = model_.forward(src, tgt_in);  // (N, T, V)
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}), model_.options.pad_id,
                       opts_.label_smoothing, reduction);
}

Device Trainer::model_device() const { return model_.src_embedding->weight.device(); }

double Trainer::train_step(const data::PairBatch& batch) {
  model_.train();
  double value = NAN;
  Tensor loss;
  if (ddp_) {
    // The mean over every rank's tokens: this rank's sum scaled by world / (all tokens),
    // which DDP's average over the ranks turns into the sum over all of them / (all
    // tokens): one process's loss and gradient on the concatenated batch. One small
    // all-reduce gives the total tokens and the step's loss.
    //
    // Dropout: rank r > 0 draws from its own Philox stream (the seed mixed with r) while
    // its forward runs, so that the ranks' masks are independent, as one process's are
    // over the rows of its batch. The same all-reduce adds up the blocks each rank drew,
    // and every rank's generator then moves on by that sum from the shared seed and
    // offset: one state on every rank (what rank 0's checkpoint holds), new numbers
    // for the next step.
    Generator& gen = default_generator();
    const GeneratorState shared = gen.get_state();
    int64_t tokens = 0;
    Tensor sum;
    {
      RankStream stream(gen, shared, rank_);
      sum = batch_loss(batch, Reduction::Sum, &tokens);
    }
    const double drawn = static_cast<double>(gen.get_state().offset - shared.offset);
    Tensor totals = from_vector<double>({static_cast<double>(tokens), sum.item(), drawn}, {3});
    distributed::all_reduce(totals);
    const double all_tokens = totals.at({0}), all_sum = totals.at({1});
    gen.set_state({shared.seed, shared.offset + static_cast<uint64_t>(totals.at({2}))});
    last_step_tokens_ = static_cast<int64_t>(all_tokens);
    loss = sum * (static_cast<double>(world_) / all_tokens);
    value = all_sum / all_tokens;
  } else {
    loss = batch_loss(batch, Reduction::Mean, &last_step_tokens_);
  }
  optimizer_->zero_grad();
  loss.backward();  // data parallel: the gradients are averaged when it returns
  last_grad_norm_ = opts_.clip_grad_norm > 0 ? optim::clip_grad_norm_(model_.parameters(), opts_.clip_grad_norm) : NAN;
  optimizer_->step();
  scheduler_->step();
  ++global_step_;
  if (!ddp_) value = loss.item();
  step_losses_.push_back(value);
  keep_newest(step_losses_, opts_.step_losses_kept);
  return value;
}

double Trainer::train_step(const Tensor& source, const Tensor& target) {
  data::PairBatch batch;
  batch.source = source;
  batch.target = target;
  return train_step(batch);
}

double Trainer::evaluate(const data::PairDataLoader& loader) {
  InferenceMode inference;  // eval behaviour and no graph, without writing the model
  double total = 0;
  int64_t tokens = 0;
  for (const data::PairBatch& batch : loader.epoch(0)) {
    int64_t batch_tokens = 0;
    total += batch_loss(batch, Reduction::Sum, &batch_tokens).item();
    tokens += batch_tokens;
  }
  return tokens > 0 ? total / static_cast<double>(tokens) : NAN;
}

std::vector<std::string> Trainer::metrics_columns() const {
  std::vector<std::string> c{"step", "epoch", "lr", "loss", "grad_norm", "tokens_per_s", "val_loss", "train_seconds"};
  c.insert(c.end(), opts_.eval_metric_names.begin(), opts_.eval_metric_names.end());
  return c;
}

io::CheckpointParts Trainer::checkpoint_parts() const {
  return io::CheckpointParts{&model_, optimizer_.get(), scheduler_.get()};
}

io::Metadata Trainer::checkpoint_metadata() const {
  io::Metadata meta = opts_.checkpoint_metadata;
  meta["trainer.epoch"] = std::to_string(epoch_);
  meta["trainer.next_batch"] = std::to_string(next_batch_);
  meta["trainer.global_step"] = std::to_string(global_step_);
  meta["trainer.best_loss"] = fmt("%.17g", best_loss_);
  meta["trainer.epoch_loss_sum"] = fmt("%.17g", epoch_loss_sum_);
  meta["trainer.train_seconds"] = fmt("%.17g", train_seconds_);
  meta["trainer.step_losses"] = join_losses(step_losses_);
  // The layout the position in the epoch counts in (a run of another one maps it).
  meta["trainer.world_size"] = std::to_string(world_);
  if (train_) meta["trainer.epoch_batches"] = std::to_string(train_->num_batches(epoch_));
  return meta;
}

void Trainer::save(const std::string& path) const {
  if (!main_process_) return;
  io::save_checkpoint(path, checkpoint_parts(), checkpoint_metadata());
}

void Trainer::load(const std::string& path) {
  // Every entry is checked, from the header alone, before anything changes: a bad value
  // (a step of "1e214", a NaN loss, a negative batch) is an error naming the entry, not a
  // run that crashes or trains on garbage.
  const io::Metadata header = io::load_safetensors_metadata(path);
  io::Metadata meta;  // what load_checkpoint returns: the user entries without "user."
  for (const auto& [k, v] : header)
    if (k.rfind("user.", 0) == 0) meta[k.substr(5)] = v;
  const int64_t kMax = int64_t(1) << 53;  // beyond any real run, and exact as a double
  auto entry = [&](const std::string& key) { return *metadata_find(meta, key, path, true); };
  const int64_t epoch = strict_int(entry("trainer.epoch"), "trainer.epoch", path, 0, kMax);
  const int64_t step = strict_int(entry("trainer.global_step"), "trainer.global_step", path, 0, kMax);
  // A mid-epoch checkpoint resumes at a batch of the epoch, so it must be one of the
  // loader's (a loader of another size cannot continue that epoch).
  const int64_t batches = train_ ? train_->num_batches(epoch) : kMax;
  int64_t saved_batches = batches;  // older checkpoints lack the entry: this loader's count
  if (const std::string* b = metadata_find(meta, "trainer.epoch_batches", path, false))
    saved_batches = strict_int(*b, "trainer.epoch_batches", path, 1, kMax);
  int64_t next_batch = strict_int(entry("trainer.next_batch"), "trainer.next_batch", path, 0,
                                  std::max<int64_t>(saved_batches - 1, 0));
  // Saved by a run whose epoch had another number of batches (another number of
  // processes, another batch size): the epoch goes on at the same fraction of it.
  const int64_t steps_in_epoch = next_batch;
  if (train_ && saved_batches != batches) next_batch = std::min(next_batch * batches / saved_batches, batches - 1);
  KILN_CHECK(next_batch <= std::max<int64_t>(batches - 1, 0), "Trainer::load", "checkpoint '", path,
             "': 'trainer.next_batch' must be an integer from 0 to ", std::max<int64_t>(batches - 1, 0), ", got '",
             next_batch, "'");
  KILN_CHECK(steps_in_epoch <= step, "Trainer::load", "checkpoint '", path, "': 'trainer.next_batch' (",
             steps_in_epoch, ") exceeds 'trainer.global_step' (", step, ")");
  const double best = strict_loss(entry("trainer.best_loss"), "trainer.best_loss", path, true);
  std::vector<double> losses = split_losses(entry("trainer.step_losses"), "trainer.step_losses", path);
  KILN_CHECK(static_cast<int64_t>(losses.size()) <= step, "Trainer::load", "checkpoint '", path, "': ",
             losses.size(), " entries in 'trainer.step_losses' but 'trainer.global_step' is ", step);
  double epoch_sum = 0;
  if (const std::string* sum = metadata_find(meta, "trainer.epoch_loss_sum", path, false)) {
    epoch_sum = strict_loss(*sum, "trainer.epoch_loss_sum", path, false);
  } else {
    // Checkpoints of Kiln 0.2.0 have the whole history and no sum: add up the epoch's.
    KILN_CHECK(static_cast<int64_t>(losses.size()) >= steps_in_epoch, "Trainer::load", "checkpoint '", path,
               "' has neither 'trainer.epoch_loss_sum' nor the losses of the epoch's ", steps_in_epoch, " steps");
    for (size_t i = losses.size() - static_cast<size_t>(steps_in_epoch); i < losses.size(); ++i) epoch_sum += losses[i];
  }
  KILN_CHECK(steps_in_epoch > 0 || epoch_sum == 0, "Trainer::load", "checkpoint '", path,
             "': 'trainer.epoch_loss_sum' must be 0 at an epoch's start, got ", fmt("%.17g", epoch_sum));
  // Mapped to another layout: the epoch's mean so far stands for the batches skipped or repeated.
  if (next_batch != steps_in_epoch)
    epoch_sum = steps_in_epoch > 0 ? epoch_sum * static_cast<double>(next_batch) / static_cast<double>(steps_in_epoch) : 0;

  double seconds = 0;  // checkpoints before the time budget have no clock: it starts at 0
  if (const std::string* t = metadata_find(meta, "trainer.train_seconds", path, false))
    seconds = strict_loss(*t, "trainer.train_seconds", path, false);

  io::load_checkpoint(path, checkpoint_parts());
  train_seconds_ = seconds;
  epoch_ = epoch;
  next_batch_ = next_batch;
  global_step_ = step;
  best_loss_ = best;
  epoch_loss_sum_ = epoch_sum;
  step_losses_ = std::move(losses);
  keep_newest(step_losses_, opts_.step_losses_kept);
}

void Trainer::maybe_checkpoint(bool epoch_end, double val_loss, bool force) {
  if (!checkpoints_) return;
  bool periodic = opts_.checkpoint_every > 0 && global_step_ % opts_.checkpoint_every == 0;
  // The trainer judges "best" itself (its best loss travels in the checkpoint, so a run
  // resumed from a file of another directory keeps it); the manager then keeps the file.
  bool improved = std::isfinite(val_loss) && val_loss < best_loss_;
  if (improved) best_loss_ = val_loss;
  if (epoch_end || periodic || improved || force)
    checkpoints_->save(global_step_, checkpoint_parts(), checkpoint_metadata(), improved ? val_loss : NAN);
}

double Trainer::synced_train_seconds() const {
  if (!ddp_) return train_seconds_;
  Tensor t = from_vector<double>({train_seconds_}, {1});
  distributed::all_reduce(t, distributed::ReduceOp::kMax);
  return t.at({0});
}

Evaluation Trainer::run_evaluation() {
  Evaluation e;
  e.step = global_step_;
  e.train_seconds = train_seconds_;
  if (validation_) e.val_loss = evaluate(*validation_);
  if (opts_.eval_metrics) {
    nn::TrainingModeGuard eval_mode(model_, false);
    e.metrics = opts_.eval_metrics(model_);
    KILN_CHECK(e.metrics.size() == opts_.eval_metric_names.size(), "Trainer::fit", "eval_metrics returned ",
               e.metrics.size(), " values for the ", opts_.eval_metric_names.size(), " eval_metric_names");
  }
  evaluations_.push_back(e);
  return e;
}

void Trainer::write_metrics(double lr, double loss, double grad_norm, double tokens_per_s, const Evaluation* e) {
  std::vector<double> row{static_cast<double>(global_step_), static_cast<double>(epoch_ + 1), lr, loss, grad_norm,
                          tokens_per_s, e ? e->val_loss : NAN, train_seconds_};
  for (size_t i = 0; i < opts_.eval_metric_names.size(); ++i) row.push_back(e ? e->metrics[i] : NAN);
  metrics_.write(row);
}

namespace {

// "  val loss 2.3456  bleu 12.34" for the bar's lines.
std::string evaluation_text(const Evaluation& e, const std::vector<std::string>& names) {
  std::string s = std::isnan(e.val_loss) ? "" : "  val loss " + fmt("%.4f", e.val_loss);
  for (size_t i = 0; i < e.metrics.size(); ++i) s += "  " + names[i] + " " + fmt("%.2f", e.metrics[i]);
  return s;
}

}  // namespace

std::vector<EpochSummary> Trainer::fit() {
  using clock = std::chrono::steady_clock;
  KILN_CHECK(train_ != nullptr, "Trainer::fit",
             "this trainer has no training DataLoader: build it with one, or call train_step(source, target)");
  // The bar's scale (an epoch's batches can vary: PairDataLoaderOptions::resample).
  const int64_t per_epoch = train_->num_batches(epoch_);
  const bool timed = opts_.max_seconds > 0 || opts_.eval_every_seconds > 0;
  train::ProgressBar bar(opts_.epochs * per_epoch, stderr, opts_.progress && main_process_);
  bar.set_unit("tok");
  const int64_t first_step = global_step_;
  const double first_seconds = train_seconds_;
  double next_eval = opts_.eval_every_seconds > 0
                         ? (std::floor(train_seconds_ / opts_.eval_every_seconds) + 1) * opts_.eval_every_seconds
                         : INFINITY;
  std::vector<EpochSummary> summaries;
  bool out_of_time = opts_.max_seconds > 0 && train_seconds_ >= opts_.max_seconds;
  while (epoch_ < opts_.epochs && !out_of_time) {
    double epoch_seconds = 0;
    std::vector<std::vector<size_t>> batches = train_->batch_indices(epoch_);
    int64_t tokens = 0;
    std::optional<Evaluation> last_eval;  // one made at this epoch's last step
    while (next_batch_ < static_cast<int64_t>(batches.size())) {
      const auto step_start = clock::now();
      data::PairBatch batch = train_->make_batch(batches[static_cast<size_t>(next_batch_)], epoch_);
      double lr = optimizer_->param_groups().front().get("lr");
      double loss = train_step(batch);
      const double step_seconds = std::chrono::duration<double>(clock::now() - step_start).count();
      train_seconds_ += step_seconds;
      epoch_seconds += step_seconds;
      epoch_loss_sum_ += loss;
      ++next_batch_;
      tokens += last_step_tokens_;
      double tps = tokens / std::max(epoch_seconds, 1e-9);
      if (timed) train_seconds_ = synced_train_seconds();
      write_metrics(lr, loss, last_grad_norm_, tps, nullptr);
      if (opts_.max_seconds > 0 && global_step_ > first_step) {
        // The steps the budget allows at this run's pace so far: the bar's time left.
        const double pace = (train_seconds_ - first_seconds) / static_cast<double>(global_step_ - first_step);
        const auto left = static_cast<int64_t>(std::ceil((opts_.max_seconds - train_seconds_) / std::max(pace, 1e-9)));
        bar.set_total(std::min(opts_.epochs * per_epoch, global_step_ + std::max<int64_t>(left, 0)));
      }
      const std::string status = "epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(opts_.epochs) +
                                 "  loss " + fmt("%.4f", loss);
      bar.update(opts_.max_seconds > 0 ? global_step_ : epoch_ * per_epoch + next_batch_, status, last_step_tokens_);
      out_of_time = opts_.max_seconds > 0 && train_seconds_ >= opts_.max_seconds;
      if (train_seconds_ >= next_eval || out_of_time) {
        while (next_eval <= train_seconds_) next_eval += opts_.eval_every_seconds;
        last_eval = run_evaluation();
        bar.report(global_step_, "step " + std::to_string(global_step_) + "  " +
                                     train::ProgressBar::format_duration(train_seconds_) + " trained" +
                                     evaluation_text(*last_eval, opts_.eval_metric_names));
        // At the epoch's last step the epoch's record and checkpoint below carry it.
        if (next_batch_ < static_cast<int64_t>(batches.size())) {
          write_metrics(NAN, NAN, NAN, NAN, &*last_eval);
          maybe_checkpoint(false, last_eval->val_loss, out_of_time);
          last_eval.reset();
        }
      } else if (next_batch_ < static_cast<int64_t>(batches.size())) {
        maybe_checkpoint(false, NAN);
      }
      if (out_of_time) break;
    }
    EpochSummary s;
    s.epoch = epoch_ + 1;
    s.complete = next_batch_ == static_cast<int64_t>(batches.size());
    // next_batch_ steps of this epoch ran (some of them before a resume, whose sum the
    // checkpoint carried), in order: the same sum as an uninterrupted run's.
    s.train_loss = next_batch_ ? epoch_loss_sum_ / static_cast<double>(next_batch_) : NAN;
    s.seconds = epoch_seconds;
    s.tokens_per_second = tokens / std::max(s.seconds, 1e-9);
    if (!s.complete) {
      // Stopped by the time budget: evaluated and checkpointed where it stopped above.
      if (!evaluations_.empty()) s.val_loss = evaluations_.back().val_loss;
      summaries.push_back(s);
      break;
    }
    // Evaluated at this very step already (a timed evaluation), or now.
    if (!last_eval && (validation_ || opts_.eval_metrics)) last_eval = run_evaluation();
    if (last_eval) s.val_loss = last_eval->val_loss;
    write_metrics(NAN, s.train_loss, NAN, s.tokens_per_second, last_eval ? &*last_eval : nullptr);
    // The checkpoint written at an epoch's end resumes at the next epoch's start.
    ++epoch_;
    next_batch_ = 0;
    epoch_loss_sum_ = 0;
    maybe_checkpoint(true, validation_ ? s.val_loss : s.train_loss, out_of_time);
    std::string line = "epoch " + std::to_string(s.epoch) + "/" + std::to_string(opts_.epochs) + "  train loss " +
                       fmt("%.4f", s.train_loss) + (validation_ ? "  val loss " + fmt("%.4f", s.val_loss) : "") +
                       "  " + fmt("%.0f", s.tokens_per_second) + " tok/s  " + fmt("%.2f", s.seconds) + " s";
    if (last_eval)
      for (size_t i = 0; i < last_eval->metrics.size(); ++i)
        line += "  " + opts_.eval_metric_names[i] + " " + fmt("%.2f", last_eval->metrics[i]);
    bar.println(line);
    summaries.push_back(s);
  }
  return summaries;
}

}  // namespace kiln::transformer
