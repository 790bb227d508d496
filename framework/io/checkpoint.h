#pragma once
// Training checkpoints: model, optimizer state, schedule position, random generator
// state and user metadata in one safetensors file, so that training resumed from it
// continues exactly as if it had never stopped.
#include <charconv>
#include <string>
#include <system_error>
#include <vector>

#include "../core/generator.h"
#include "safetensors.h"
#include "../nn/module.h"
#include "../optim/lr_scheduler.h"
#include "../optim/optimizer.h"

namespace kiln::io {

// Whether `text`, the whole of it, is a number of type T as std::from_chars reads it (no
// sign on an unsigned type, no spaces, no "0x", no overflow); stored in *value. How
// checkpoint metadata is read back: "1e214" is no integer, "7x" no number.
template <class T>
bool parse_whole(const std::string& text, T* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

struct CheckpointParts {
  nn::Module* model = nullptr;                 // required
  optim::Optimizer* optimizer = nullptr;       // optional
  optim::LRScheduler* scheduler = nullptr;     // optional
  Generator* generator = &default_generator();  // optional (null: not saved/restored)
  optim::ReduceLROnPlateau* plateau = nullptr;  // optional
};

// Keys: "model.<name>", "optimizer.<name>"; metadata "scheduler.last_step",
// "plateau.best", "plateau.num_bad_epochs", "plateau.cooldown_counter",
// "plateau.last_step", "rng.seed", "rng.offset" and "user.<key>" for each user entry.
// Written atomically.
void save_checkpoint(const std::string& path, const CheckpointParts& parts, const Metadata& user = {});

// Validates the whole file and every part before changing anything; returns the user
// metadata. The model is loaded strictly (keys and shapes; dtypes convert as
// Module::load_state_dict's).
Metadata load_checkpoint(const std::string& path, const CheckpointParts& parts);

// Loads the mean of several files' model weights into `model`: the last checkpoints of a
// run averaged (fairseq's average_checkpoints), which often scores better than any one
// of them. A file is a training checkpoint (its "model." tensors) or a plain state dict.
// Floating-point tensors are summed in float64, divided by the number of files and
// converted to the model's dtypes; other tensors (integer buffers) take the last file's
// values. Every file is read and checked (keys and shapes strictly, finite values)
// before the model changes; an error names the file.
void load_averaged_checkpoints(const std::vector<std::string>& paths, nn::Module& model);

// A module's state_dict to and from a plain safetensors file (PyTorch-compatible keys).
// Loading checks every key and shape before copying anything; values convert to the
// model's dtypes as Module::load_state_dict does (a float64 file into a float32 model).
void save_state_dict(const std::string& path, const nn::Module& model, const Metadata& metadata = {});
nn::Module::LoadResult load_state_dict(const std::string& path, nn::Module& model, bool strict = true);

}  // namespace kiln::io
