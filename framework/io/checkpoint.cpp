#include "io/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "ops/ops.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kiln::io {
namespace {

constexpr const char* kFormat = "kiln-checkpoint-1";

// A decimal number of at most `max`; anything else (signs, spaces, overflow) is an error
// naming the key, raised before the checkpoint changes anything.
uint64_t parse_u64(const Metadata& m, const std::string& key, const std::string& path,
                   uint64_t max = std::numeric_limits<uint64_t>::max()) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), "load_checkpoint", path, ": metadata '", key, "' is missing");
  const std::string& s = it->second;
  uint64_t v = 0;
  const bool ok = parse_whole(s, &v) && v <= max;
  KILN_CHECK(ok, "load_checkpoint", path, ": metadata '", key, "' is not a number from 0 to ", max, ": '", s, "'");
  return v;
}

// Serialising a checkpoint takes one buffer the size of the file. glibc serves the
// first such buffer by mmap, and after freeing it raises its mmap threshold, so every
// later one comes from the heap and, freed, stays there: a long run's RSS rose by a
// checkpoint's size after its second save. Returning the free heap memory to the system
// after each save (malloc_trim: a walk of the free lists, nothing in use moves) keeps a
// run's memory flat; checkpoints are rare enough for its cost not to matter.
void release_freed_memory() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

// The plateau schedule's best metric: a number or an infinity (nothing seen yet), never NaN.
double parse_best(const Metadata& m, const std::string& path) {
  const std::string key = "plateau.best";
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), "load_checkpoint", path, ": metadata '", key, "' is missing");
  double v = 0;
  KILN_CHECK(parse_whole(it->second, &v) && !std::isnan(v), "load_checkpoint", path, ": metadata '", key,
             "' is not a number: '", it->second, "'");
  return v;
}

std::string best_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // reads back as the same double ("inf" too)
  return buf;
}

// An error message without its leading "[op] ", for a message that adds the file.
std::string without_op(const std::string& what, const std::string& op) {
  const std::string tag = "[" + op + "] ";
  return what.rfind(tag, 0) == 0 ? what.substr(tag.size()) : what;
}

// A file's model weights: a Kiln checkpoint's "model." tensors, or all of a plain state dict.
nn::StateDict model_tensors(SafetensorsContents& c) {
  auto fmt = c.metadata.find("format");
  nn::StateDict state;
  if (fmt == c.metadata.end() || fmt->second != kFormat) {
    state.insert(c.tensors.begin(), c.tensors.end());
    return state;
  }
  for (auto& [k, t] : c.tensors)
    if (k.rfind("model.", 0) == 0) state[k.substr(6)] = t;
  return state;
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointParts& parts, const Metadata& user) {
  KILN_CHECK(parts.model != nullptr, "save_checkpoint", "a checkpoint needs a model");
  TensorMap tensors;
  for (auto& [k, t] : parts.model->state_dict()) tensors["model." + k] = t;
  if (parts.optimizer)
    for (auto& [k, t] : parts.optimizer->state_dict()) tensors["optimizer." + k] = t;
  Metadata meta;
  meta["format"] = kFormat;
  if (parts.scheduler) meta["scheduler.last_step"] = std::to_string(parts.scheduler->last_step());
  if (parts.plateau) {
    const optim::ReduceLROnPlateau::State s = parts.plateau->state();
    meta["plateau.best"] = best_text(s.best);
    meta["plateau.num_bad_epochs"] = std::to_string(s.num_bad_epochs);
    meta["plateau.cooldown_counter"] = std::to_string(s.cooldown_counter);
    meta["plateau.last_step"] = std::to_string(s.last_step);
  }
  if (parts.generator) {
    GeneratorState s = parts.generator->get_state();
    meta["rng.seed"] = std::to_string(s.seed);
    meta["rng.offset"] = std::to_string(s.offset);
  }
  for (auto& [k, v] : user) meta["user." + k] = v;
  save_safetensors(path, tensors, meta);
  release_freed_memory();
}

Metadata load_checkpoint(const std::string& path, const CheckpointParts& parts) {
  KILN_CHECK(parts.model != nullptr, "load_checkpoint", "a checkpoint needs a model");
  SafetensorsContents c = load_safetensors(path);
  auto fmt = c.metadata.find("format");
  KILN_CHECK(fmt != c.metadata.end() && fmt->second == kFormat, "load_checkpoint", path,
             ": not a Kiln training checkpoint (metadata 'format' is '",
             fmt == c.metadata.end() ? std::string("missing") : fmt->second, "')");
  nn::StateDict model_state;
  optim::OptimizerState opt_state;
  for (auto& [k, t] : c.tensors) {
    if (k.rfind("model.", 0) == 0) model_state[k.substr(6)] = t;
    else if (k.rfind("optimizer.", 0) == 0) opt_state[k.substr(10)] = t;
    else KILN_FAIL("load_checkpoint", path, ": unexpected tensor '", k, "'");
  }
  // Parse every number first, so a bad file changes nothing.
  uint64_t last_step = parts.scheduler ? parse_u64(c.metadata, "scheduler.last_step", path,
                                                   static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                                       : 0;
  optim::ReduceLROnPlateau::State plateau;
  if (parts.plateau) {
    constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    plateau.best = parse_best(c.metadata, path);
    plateau.num_bad_epochs = static_cast<int64_t>(parse_u64(c.metadata, "plateau.num_bad_epochs", path, kMax));
    plateau.cooldown_counter = static_cast<int64_t>(parse_u64(c.metadata, "plateau.cooldown_counter", path, kMax));
    plateau.last_step = static_cast<int64_t>(parse_u64(c.metadata, "plateau.last_step", path, kMax));
  }
  GeneratorState rng;
  if (parts.generator) rng = {parse_u64(c.metadata, "rng.seed", path), parse_u64(c.metadata, "rng.offset", path)};
  KILN_CHECK(!parts.optimizer || !opt_state.empty(), "load_checkpoint", path, ": the checkpoint holds no optimizer state");
  // A training run cannot resume from weights that are not finite: say so now, not with
  // a NaN loss later. (A plain state dict, load_state_dict, may hold anything.)
  for (const auto& kv : model_state) {
    const Tensor& t = kv.second;
    KILN_CHECK(!t.is_floating_point() || isfinite(t).all().item<bool>(), "load_checkpoint", path, ": 'model.",
               kv.first, "' holds NaN or infinite values");
  }
  try {
    parts.model->check_state_dict(model_state, /*strict=*/true);
    if (parts.optimizer) parts.optimizer->check_state_dict(opt_state);
  } catch (const Error& e) {  // say which file did not fit
    KILN_FAIL("load_checkpoint", path, ": ", e.what());
  }
  parts.model->load_state_dict(model_state, /*strict=*/true);
  if (parts.optimizer) parts.optimizer->load_state_dict(opt_state);
  if (parts.scheduler) parts.scheduler->set_last_step(static_cast<int64_t>(last_step));
  if (parts.plateau) parts.plateau->load_state(plateau);
  if (parts.generator) parts.generator->set_state(rng);
  Metadata user;
  for (auto& [k, v] : c.metadata)
    if (k.rfind("user.", 0) == 0) user[k.substr(5)] = v;
  return user;
}

void load_averaged_checkpoints(const std::vector<std::string>& paths, nn::Module& model) {
  KILN_CHECK(!paths.empty(), "load_averaged_checkpoints", "no files given");
  nn::StateDict mean;  // float64 sums of the floating-point tensors; the rest as last read
  for (const std::string& path : paths) {
    SafetensorsContents c = load_safetensors(path);
    const nn::StateDict state = model_tensors(c);
    try {
      model.check_state_dict(state, /*strict=*/true);
    } catch (const Error& e) {  // say which file did not fit: "[load_averaged_checkpoints] <path>: …"
      KILN_FAIL("load_averaged_checkpoints", path, ": ", without_op(e.what(), "load_state_dict"));
    }
    for (const auto& [name, t] : state) {
      if (!t.is_floating_point()) {
        mean[name] = t;
        continue;
      }
      KILN_CHECK(isfinite(t).all().item<bool>(), "load_averaged_checkpoints", path, ": '", name,
                 "' holds NaN or infinite values");
      const Tensor wide = t.to(kFloat64);
      auto it = mean.find(name);
      if (it == mean.end()) mean[name] = wide.clone();
      else it->second.add_(wide);
    }
  }
  const double n = static_cast<double>(paths.size());
  for (auto& [name, t] : mean)
    if (t.is_floating_point()) t.div_(n);
  model.load_state_dict(mean, /*strict=*/true);
}

void save_state_dict(const std::string& path, const nn::Module& model, const Metadata& metadata) {
  TensorMap tensors;
  for (auto& [k, t] : model.state_dict()) tensors[k] = t;
  save_safetensors(path, tensors, metadata);
}

nn::Module::LoadResult load_state_dict(const std::string& path, nn::Module& model, bool strict) {
  SafetensorsContents c = load_safetensors(path);
  nn::StateDict state(c.tensors.begin(), c.tensors.end());
  try {
    model.check_state_dict(state, strict);
  } catch (const Error& e) {  // say which file did not fit: "[load_state_dict] <path>: …"
    KILN_FAIL("load_state_dict", path, ": ", without_op(e.what(), "load_state_dict"));
  }
  return model.load_state_dict(state, strict);
}

}  // namespace kiln::io
