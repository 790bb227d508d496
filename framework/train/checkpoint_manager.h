#pragma once
// A directory of training checkpoints with a keep policy, for any model:
//
//   train::CheckpointManager ckpt("runs/mlp", {.keep_last = 3});
//   io::CheckpointParts parts{&model, &optimizer};
//   io::Metadata meta;
//   if (resume && !ckpt.latest().empty()) meta = ckpt.resume(parts);  // as saved
//   ...
//   ckpt.save(step, parts, {{"epoch", std::to_string(epoch)}}, val_loss);
//
// The files, all in the directory:
//   <prefix>-<step>.safetensors  one per save(), the step zero-padded to 9 digits
//                                (ckpt-000001200.safetensors); the keep_last newest
//                                are kept, older ones deleted
//   best.safetensors             the checkpoint of the best metric so far, rewritten only
//                                when a save's metric improves on it (a hard link to the
//                                step file, or a copy where links are not possible)
//   <latest_alias>               optional ("last.safetensors"): the newest step file,
//                                under a name that does not change
// Each is written with io::save_checkpoint, atomically (a temporary file in the
// directory, then a rename; see io::atomic_temp_path), so a crash leaves the previous
// files whole and at most a stray temporary file, which the next CheckpointManager on
// the directory removes, as the next save of that name does (only temporaries whose
// process is gone: io::is_orphaned_atomic_temp_of). It deletes only files of its own
// names (those above and their temporaries): other files in the directory are never
// touched. What it knows comes
// from the directory itself, so a new manager after a restart sees the same checkpoints
// and the same best. One manager (one process) writes a directory at a time.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../io/checkpoint.h"

namespace kiln::train {

struct CheckpointManagerOptions {
  int64_t keep_last = 3;         // step checkpoints kept, at least 1
  bool lower_is_better = true;   // how save()'s metric ranks: a loss (lower) or an accuracy
  std::string prefix = "ckpt";   // step files are <prefix>-<step>.safetensors
  std::string best_name = "best.safetensors";  // "" keeps no best checkpoint
  std::string latest_alias = "";  // "" for none; a name such as "last.safetensors"
};

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
};

class CheckpointManager {
 public:
  // Creates the directory if needed and removes the temporary files an interrupted save
  // of its names left there (those of processes that are gone). Throws "[CheckpointManager] …" for bad options or a
  // directory that is a file or cannot be written.
  explicit CheckpointManager(std::string directory, CheckpointManagerOptions options = {});

  struct SaveResult {
    std::string path;   // the step checkpoint written
    bool best = false;  // whether it became the best one
  };
  // Writes the checkpoint of `step` (parts and metadata as io::save_checkpoint), then,
  // if `metric` is better than the best so far (strictly; NaN and infinities never
  // are), makes it the best; then deletes the step checkpoints beyond the keep_last
  // newest. A checkpoint of a later step than `step` is from a run that has since been
  // restarted from an earlier checkpoint: it is deleted too, so that latest() is always
  // the last one saved. Metadata keys starting "checkpoint_manager." are reserved.
  SaveResult save(int64_t step, const io::CheckpointParts& parts, const io::Metadata& metadata = {},
                  double metric = NAN);

  // The step checkpoints in the directory, oldest (lowest step) first.
  std::vector<CheckpointInfo> checkpoints() const;
  // The newest step checkpoint's path, "" when there is none.
  std::string latest() const;
  // Its step, -1 when there is none.
  int64_t latest_step() const;
  // Loads the newest checkpoint into parts (see io::load_checkpoint) and returns the
  // metadata it was saved with. Throws when there is nothing to resume.
  io::Metadata resume(const io::CheckpointParts& parts) const;

  // Deletes every file of this manager's names (step checkpoints, best, latest alias):
  // a run that starts over in a directory an earlier run used. Other files stay.
  void clear();

  // The best checkpoint's path, "" when there is none (or no best_name).
  std::string best() const;
  // Its metric; NaN when there is no best or its file does not record one.
  double best_metric() const { return best_metric_; }

  // Where save(step, ...) writes.
  std::string path_for(int64_t step) const;
  const std::string& directory() const { return directory_; }
  const CheckpointManagerOptions& options() const { return options_; }

 private:
  // The step of a file name of this manager's step pattern; -1 for any other name.
  int64_t step_of(const std::string& name) const;
  bool owns(const std::string& name) const;
  void remove_stale_temporaries() const;
  void remove_file(const std::string& path, const std::string& saved) const;

  std::string directory_;
  CheckpointManagerOptions options_;
  double best_metric_ = NAN;
};

}  // namespace kiln::train
