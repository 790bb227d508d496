#pragma once
// Training a Seq2SeqTransformer as 000 does: teacher forcing (decoder input "S w1 … wn",
// labels "w1 … wn E"), CrossEntropy ignoring padding with label smoothing, Adam(0.9,
// 0.98, 1e-9) driven by the paper's warm-up schedule, gradient clipping, a validation
// loss per epoch, a live progress bar, metrics to CSV or JSON lines, periodic and best
// checkpoints, and resuming exactly where a checkpoint left off. It trains where the
// model's parameters are: model.to(Device("cuda")) first, and every step (batches,
// optimizer state) runs on the GPU.
//
// Under mpirun (kiln::distributed initialised, more than one process) it trains data
// parallel: the model is wrapped in nn::parallel::DistributedDataParallel (rank 0's
// weights everywhere, gradients averaged during backward), the training loader must read
// this rank's shard (PairDataLoaderOptions::sampler, a DistributedSampler), and each step's
// loss is the mean over every rank's tokens, so that N processes at batch B follow one
// process at batch N·B. Only rank 0 draws the progress bar, writes the metrics log and
// the checkpoints; every rank reads resume_from (a path all of them can read). A
// checkpoint resumes under any number of processes: at an epoch boundary exactly, in
// mid-epoch at the same fraction of the epoch's batches. The bar, the log and the checkpoint directory are
// kiln::train's (framework/train), which a loop of one's own can use as well.
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/train/checkpoint_manager.h>
#include <kiln/train/metrics_log.h>
#include <kiln/train/progress_bar.h>

#include "seq2seq.h"

namespace kiln::transformer {

// The bar and the log were kiln::transformer's before they moved to kiln::train; these
// names stay for one release (0.3 drops them).
using ProgressBar = train::ProgressBar;
using MetricsLog = train::MetricsLog;

struct TrainerOptions {
  int64_t epochs = 10;
  // Schedule: lr = lr_factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5).
  double lr_factor = 1.0;
  int64_t warmup_steps = 4000;
  // Which step the k-th update uses: LambdaLR's k - 1 (The Annotated Transformer, the
  // default) or the paper's k (see optim::WarmupStepIndexing).
  optim::WarmupStepIndexing warmup_indexing = optim::WarmupStepIndexing::LambdaLR;
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
  double weight_decay = 0.0;
  double label_smoothing = 0.1;
  double clip_grad_norm = 1.0;  // 0 turns clipping off
  std::string metrics_path;     // "" for none; .csv, or .jsonl/.json for JSON lines
  // "" for none. A train::CheckpointManager directory holding
  //   ckpt-<step>.safetensors  the checkpoint of that step (9 digits: ckpt-000001200),
  //                            the checkpoint_keep_last newest of them;
  //   last.safetensors         the newest of them (a link), what resume_from is given;
  //   best.safetensors         the evaluation with the lowest validation loss (the
  //                            training loss at epoch ends without validation data).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps between periodic checkpoints (0: at epoch ends only)
  int64_t checkpoint_keep_last = 1;  // step checkpoints kept, at least 1
  std::string resume_from;      // a checkpoint to continue from (dir/last.safetensors)
  bool progress = true;         // the live bar and per-epoch lines on stderr
  // How many of the newest step losses step_losses() keeps (and checkpoints carry, so a
  // resumed run has them too); older ones are dropped, so memory stays flat however
  // long a run is. The whole history is in the metrics log (metrics_path).
  int64_t step_losses_kept = 1000;
  // Extra metadata stored in every checkpoint (e.g. the model's configuration).
  std::map<std::string, std::string> checkpoint_metadata;
  // kBFloat16: the forward pass and the loss run under kiln::AutocastGuard (bfloat16
  // GEMMs with float32 accumulation; weights, gradients, softmax, norms, the loss and
  // Adam stay float32), in train_step and in evaluate. Unset: the trainer leaves the
  // thread's autocast state as it finds it.
  std::optional<DType> autocast;
  // The generator and the loss as one kiln::linear_cross_entropy on the decoder's output
  // (rows in chunks): no (tokens, vocab) logits are held from forward to backward, or
  // made whole in evaluate. The same loss and gradients to rounding; false (or a
  // generator whose class is not nn::Linear itself): the model's logits, then cross_entropy.
  bool fused_loss = true;
  // Data-parallel training over the process group (see the top of this file). Unset: on
  // when kiln::distributed is initialised with more than one process; false: this
  // process trains alone even under mpirun; true: on (an error without the process group).
  std::optional<bool> data_parallel;
  // DistributedDataParallel's bucket size, MiB.
  double bucket_cap_mb = 25;
  // A budget of training time, seconds (0: none): fit() stops after the step that ends
  // past it, in mid-epoch if need be, evaluates, and checkpoints there. Only the steps are
  // on the clock (batches made, forward, backward, the update), not evaluation, logging or
  // checkpoints; the time trained travels in checkpoints, so a resumed run spends what is
  // left. Data parallel: the slowest process's clock, so that all stop at one step.
  double max_seconds = 0;
  // An evaluation every eval_every_seconds of training time (0: at epoch ends only): the
  // validation loss and eval_metrics, one metrics record and one line under the bar.
  double eval_every_seconds = 0;
  // Metrics of one's own computed at each evaluation (validation BLEU from decoding, say),
  // in the model's eval mode: the values of eval_metric_names, written as metrics-log
  // columns after train_seconds. Data parallel: called on every process (rank 0's values
  // are the ones logged; the others may return NaN).
  std::vector<std::string> eval_metric_names;
  std::function<std::vector<double>(Seq2SeqTransformer&)> eval_metrics;
};

// One evaluation during fit(): where and what.
struct Evaluation {
  int64_t step = 0;
  double train_seconds = 0;  // training time on the clock when it ran
  double val_loss = NAN;
  std::vector<double> metrics;  // eval_metrics' values, in eval_metric_names' order
};

struct EpochSummary {
  int64_t epoch = 0;
  double train_loss = 0;  // mean over the epoch's batches
  double val_loss = NAN;  // NaN without validation data
  double tokens_per_second = 0;
  double seconds = 0;
  bool complete = true;  // false: the time budget ended it part way
};

// Decoder input and labels from targets that start with bos and end with eos:
// tgt (N, T) -> {tgt[:, :-1], tgt[:, 1:]}.
std::pair<Tensor, Tensor> teacher_forcing_pair(const Tensor& tgt);

class Trainer {
 public:
  Trainer(Seq2SeqTransformer& model, const data::PairDataLoader& train, const data::PairDataLoader* validation,
          TrainerOptions opts);
  // Without a DataLoader: drive it with train_step(source, target) (fit() needs a loader).
  Trainer(Seq2SeqTransformer& model, TrainerOptions opts);

  // Runs the remaining epochs (all of them, or what is left after resume_from).
  std::vector<EpochSummary> fit();

  // One optimisation step on a batch; returns the loss.
  double train_step(const data::PairBatch& batch);
  // The same on tensors: source (N, S) and target (N, T >= 2) int64 ids padded with
  // pad_id, the target with its begin and end tokens (teacher forcing splits it).
  double train_step(const Tensor& source, const Tensor& target);
  // The total gradient norm (2-norm over all parameters, before clipping) of the last
  // train_step; NaN before the first one or when clip_grad_norm is 0 (nothing computes it).
  double last_grad_norm() const { return last_grad_norm_; }
  // Mean loss over a loader's batches (eval mode, no gradients), weighted by tokens.
  double evaluate(const data::PairDataLoader& loader);

  // Data parallel, only rank 0 writes (the others return at once).
  void save(const std::string& path) const;
  void load(const std::string& path);

  int64_t global_step() const { return global_step_; }
  // Training time on the clock so far (see TrainerOptions::max_seconds), resumed runs' included.
  double train_seconds() const { return train_seconds_; }
  // The evaluations fit() has made in this run, oldest first.
  const std::vector<Evaluation>& evaluations() const { return evaluations_; }
  // The losses of the newest steps, oldest first: at most options().step_losses_kept
  // of them (after a resume, those of the steps before the checkpoint too).
  const std::vector<double>& step_losses() const { return step_losses_; }
  optim::Adam& optimizer() { return *optimizer_; }
  const TrainerOptions& options() const { return opts_; }
  // Data parallel: the wrapper (its bucket statistics); null when training alone.
  const nn::parallel::DistributedDataParallel* data_parallel() const { return ddp_.get(); }
  // Whether this process writes the bar, the log and the checkpoints (rank 0, or alone).
  bool is_main_process() const { return main_process_; }

 private:
  // The teacher-forced loss of a batch (moved to the model's device); *tokens gets the
  // number of non-pad labels.
  Tensor batch_loss(const data::PairBatch& batch, Reduction reduction, int64_t* tokens);
  // Where the model's parameters are.
  Device model_device() const;
  // What both public constructors do; train may be null.
  Trainer(Seq2SeqTransformer& model, const data::PairDataLoader* train, const data::PairDataLoader* validation,
          TrainerOptions opts);
  // Saves at epoch ends, every checkpoint_every steps, on a new best validation loss, and
  // when forced (where a time budget stops).
  void maybe_checkpoint(bool epoch_end, double val_loss, bool force = false);
  // The validation loss and eval_metrics now, recorded in evaluations_ and the metrics log.
  Evaluation run_evaluation();
  // One metrics-log record at the current step; e: the evaluation made there, if any.
  void write_metrics(double lr, double loss, double grad_norm, double tokens_per_s, const Evaluation* e);
  // The training clock, agreed by every process (the largest) when data parallel.
  double synced_train_seconds() const;
  // The metrics log's columns.
  std::vector<std::string> metrics_columns() const;
  // What a checkpoint holds: the model, the optimizer, the schedule and the generator,
  // and where the run is (epoch, batch, step, best loss, the epoch's loss sum so far,
  // the newest step losses).
  io::CheckpointParts checkpoint_parts() const;
  io::Metadata checkpoint_metadata() const;

  Seq2SeqTransformer& model_;
  const data::PairDataLoader* train_;  // null: train_step only
  const data::PairDataLoader* validation_;
  TrainerOptions opts_;
  std::unique_ptr<optim::Adam> optimizer_;
  std::unique_ptr<optim::WarmupInverseSqrtLR> scheduler_;
  train::MetricsLog metrics_;
  std::unique_ptr<train::CheckpointManager> checkpoints_;  // null without checkpoint_dir
  int64_t global_step_ = 0;
  int64_t epoch_ = 0;       // the epoch in progress
  int64_t next_batch_ = 0;  // its next batch
  double best_loss_ = INFINITY;
  double last_grad_norm_ = NAN;
  int64_t last_step_tokens_ = 0;  // non-pad labels of the last train_step's batch
  // The sum of the losses of the epoch in progress (its first next_batch_ steps): the
  // epoch's mean loss, bitwise the same whether or not the run was resumed mid-epoch.
  double epoch_loss_sum_ = 0;
  double train_seconds_ = 0;  // training time on the clock (max_seconds)
  std::vector<Evaluation> evaluations_;
  std::vector<double> step_losses_;  // the newest step_losses_kept
  std::unique_ptr<nn::parallel::DistributedDataParallel> ddp_;  // null when training alone
  int64_t world_ = 1;          // processes training together
  int64_t rank_ = 0;           // this one's rank among them
  bool main_process_ = true;   // rank 0 (or alone): writes the bar, the log and the checkpoints
};

}  // namespace kiln::transformer
