// Kiln's defaults against PyTorch's, in one audit: every option of the optimizers, the LR
// schedulers, gradient clipping, the modules and losses (and their functions), nn::init,
// the Transformer family, the data loaders, DistributedDataParallel and activation
// checkpointing, compared with the default torch itself gives the argument of the same
// name (tests/fixtures/torch_defaults.txt, written by make_defaults_fixtures.py with
// inspect.signature; no Python at test time).
//
// Kiln's values are read through the public API: a default-constructed options struct, the
// options of an optimizer built with {}, a module's public fields, or, for a default
// argument of a function, what the function does (f(x) against f(x, torch's value)).
// The fixture's entries and Kiln's options must meet one to one, except those listed in
// the three tables below (each with its reason): kDiffers (Kiln's default is not torch's),
// kAbsent (a torch argument Kiln does not have) and kKilnOnly (Kiln's own options). A
// fixture entry nobody checks or lists fails the test, as does a Kiln option checked
// against an entry the fixture lacks, or a table entry that no longer applies.
#include <doctest/doctest.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {

// ---------------------------------------------------------------- the tables

// Kiln's default is not torch's: the two values as Python would print them.
struct Difference {
  const char* kiln;   // Kiln's option
  const char* torch;  // the fixture's "Name.argument"
  const char* kiln_value;
  const char* torch_value;
  const char* reason;
};
const Difference kDiffers[] = {
    {"PairDataLoaderOptions.batch_size", "DataLoader.batch_size", "32", "1",
     "PairDataLoader (data/pair_dataloader.h; its options also go by the old name "
     "DataLoaderOptions) is Kiln's sequence-to-sequence training loader (padding, length "
     "buckets, a seeded shuffle), not torch.utils.data.DataLoader: that is data::DataLoader, "
     "whose defaults are torch's (batch_size 1, no shuffle)"},
    {"PairDataLoaderOptions.shuffle", "DataLoader.shuffle", "True", "None",
     "as batch_size: a training loader shuffles, by (seed, epoch), so that a resumed run "
     "sees the same batches"},
    {"nn::Softmax(dim)", "Softmax.dim", "required", "None",
     "torch's dim=None picks a dim from the input's rank with a deprecation warning; Kiln "
     "asks for the dim"},
    {"nn::LogSoftmax(dim)", "LogSoftmax.dim", "required", "None", "as Softmax"},
};

// torch arguments Kiln does not have.
struct Absent {
  const char* torch;
  const char* reason;
};
constexpr const char* kNoFactoryKwargs =
    "no factory arguments: a module is made in float32 on the CPU (torch's defaults) and moved "
    "or converted with .to()";
constexpr const char* kDeprecatedReduce =
    "deprecated in torch for reduction; Kiln has only reduction";
constexpr const char* kNoInplace = "no in-place variant: the module returns a new tensor (torch's default)";
constexpr const char* kNoForeach =
    "an implementation choice in torch (for-each, fused, capturable kernels); Kiln chooses its "
    "kernels itself (Adam's fused one where the layouts allow)";
constexpr const char* kNoGenerator =
    "the init functions draw from the default generator (torch's None); seed it with manual_seed";
constexpr const char* kDdpNone =
    "not in Kiln's DistributedDataParallel (MPI processes, one device each; gradients in "
    "their own buffers; buffers broadcast at construction only): see framework/nn/data_parallel.h";
constexpr const char* kNoWorkers =
    "Kiln's DataLoader loads in the calling thread (torch's num_workers=0), so the worker "
    "and memory-pinning options have no counterpart";
const Absent kAbsent[] = {
    // optimizers
    {"SGD.foreach", kNoForeach},
    {"SGD.fused", kNoForeach},
    {"SGD.differentiable", "Kiln's optimizer steps are not differentiable (torch's default False)"},
    {"Adam.foreach", kNoForeach},
    {"Adam.fused", kNoForeach},
    {"Adam.capturable", kNoForeach},
    {"Adam.differentiable", "as SGD.differentiable"},
    {"Adam.decoupled_weight_decay", "Kiln has the AdamW class for decoupled decay (Adam's is L2, torch's default)"},
    {"AdamW.foreach", kNoForeach},
    {"AdamW.fused", kNoForeach},
    {"AdamW.capturable", kNoForeach},
    {"AdamW.differentiable", "as SGD.differentiable"},
    // schedulers, clipping
    {"StepLR.last_epoch", "a schedule starts at step 0 (torch's last_epoch=-1); set_last_step resumes one"},
    {"LambdaLR.last_epoch", "as StepLR.last_epoch"},
    {"MultiStepLR.last_epoch", "as StepLR.last_epoch"},
    {"ExponentialLR.last_epoch", "as StepLR.last_epoch"},
    {"ConstantLR.last_epoch", "as StepLR.last_epoch"},
    {"LinearLR.last_epoch", "as StepLR.last_epoch"},
    {"PolynomialLR.last_epoch", "as StepLR.last_epoch"},
    {"CosineAnnealingLR.last_epoch", "as StepLR.last_epoch"},
    {"SequentialLR.last_epoch", "as StepLR.last_epoch"},
    {"CosineAnnealingWarmRestarts.last_epoch", "as StepLR.last_epoch"},
    {"clip_grad_norm_.error_if_nonfinite",
     "no option: a non-finite norm is returned, never an error (torch's default False)"},
    {"clip_grad_norm_.foreach", kNoForeach},
    {"clip_grad_value_.foreach", kNoForeach},
    // modules
    {"Linear.device", kNoFactoryKwargs},
    {"Linear.dtype", kNoFactoryKwargs},
    {"LayerNorm.device", kNoFactoryKwargs},
    {"LayerNorm.dtype", kNoFactoryKwargs},
    {"Embedding.device", kNoFactoryKwargs},
    {"Embedding.dtype", kNoFactoryKwargs},
    {"MultiheadAttention.device", kNoFactoryKwargs},
    {"MultiheadAttention.dtype", kNoFactoryKwargs},
    {"TransformerEncoderLayer.device", kNoFactoryKwargs},
    {"TransformerEncoderLayer.dtype", kNoFactoryKwargs},
    {"TransformerDecoderLayer.device", kNoFactoryKwargs},
    {"TransformerDecoderLayer.dtype", kNoFactoryKwargs},
    {"Transformer.device", kNoFactoryKwargs},
    {"Transformer.dtype", kNoFactoryKwargs},
    {"Dropout.inplace", kNoInplace},
    {"ReLU.inplace", kNoInplace},
    {"SiLU.inplace", kNoInplace},
    {"Embedding.max_norm", "no renormalisation of looked-up rows (torch's default None)"},
    {"Embedding.norm_type", "only used with max_norm"},
    {"Embedding.scale_grad_by_freq", "gradients are not scaled by frequency (torch's default False)"},
    {"Embedding.sparse", "Kiln has no sparse gradients (torch's default False: dense)"},
    {"Embedding._weight", "torch's private argument for from_pretrained; assign weight instead"},
    {"Embedding._freeze", "torch's private argument for from_pretrained; requires_grad_(false) instead"},
    // losses
    {"CrossEntropyLoss.size_average", kDeprecatedReduce},
    {"CrossEntropyLoss.reduce", kDeprecatedReduce},
    {"NLLLoss.size_average", kDeprecatedReduce},
    {"NLLLoss.reduce", kDeprecatedReduce},
    {"MSELoss.size_average", kDeprecatedReduce},
    {"MSELoss.reduce", kDeprecatedReduce},
    {"L1Loss.size_average", kDeprecatedReduce},
    {"L1Loss.reduce", kDeprecatedReduce},
    {"SmoothL1Loss.size_average", kDeprecatedReduce},
    {"SmoothL1Loss.reduce", kDeprecatedReduce},
    {"BCEWithLogitsLoss.size_average", kDeprecatedReduce},
    {"BCEWithLogitsLoss.reduce", kDeprecatedReduce},
    {"KLDivLoss.size_average", kDeprecatedReduce},
    {"KLDivLoss.reduce", kDeprecatedReduce},
    {"cross_entropy.size_average", kDeprecatedReduce},
    {"cross_entropy.reduce", kDeprecatedReduce},
    {"nll_loss.size_average", kDeprecatedReduce},
    {"nll_loss.reduce", kDeprecatedReduce},
    {"mse_loss.size_average", kDeprecatedReduce},
    {"mse_loss.reduce", kDeprecatedReduce},
    {"l1_loss.size_average", kDeprecatedReduce},
    {"l1_loss.reduce", kDeprecatedReduce},
    {"smooth_l1_loss.size_average", kDeprecatedReduce},
    {"smooth_l1_loss.reduce", kDeprecatedReduce},
    {"binary_cross_entropy_with_logits.size_average", kDeprecatedReduce},
    {"binary_cross_entropy_with_logits.reduce", kDeprecatedReduce},
    {"kl_div.size_average", kDeprecatedReduce},
    {"kl_div.reduce", kDeprecatedReduce},
    {"mse_loss.weight", "no element weights in Kiln's mse_loss (torch's default None: unweighted)"},
    {"l1_loss.weight", "no element weights in Kiln's l1_loss (torch's default None: unweighted)"},
    // init
    {"uniform_.generator", kNoGenerator},
    {"normal_.generator", kNoGenerator},
    {"xavier_uniform_.generator", kNoGenerator},
    {"xavier_normal_.generator", kNoGenerator},
    {"kaiming_uniform_.generator", kNoGenerator},
    {"kaiming_normal_.generator", kNoGenerator},
    // the Transformer family
    {"TransformerEncoder.enable_nested_tensor",
     "torch's nested-tensor fast path for padded inference; Kiln has no nested tensors"},
    {"TransformerEncoder.mask_check", "only used by the nested-tensor path"},
    // data
    {"DataLoader.batch_sampler", "batches come from batch_size and shuffle, or from a DistributedSampler"},
    {"DataLoader.num_workers", kNoWorkers},
    {"DataLoader.worker_init_fn", kNoWorkers},
    {"DataLoader.multiprocessing_context", kNoWorkers},
    {"DataLoader.prefetch_factor", kNoWorkers},
    {"DataLoader.persistent_workers", kNoWorkers},
    {"DataLoader.timeout", kNoWorkers},
    {"DataLoader.in_order", kNoWorkers},
    {"DataLoader.pin_memory", kNoWorkers},
    {"DataLoader.pin_memory_device", kNoWorkers},
    {"DataLoader.collate_fn", "batches are collated by Dataset::get_batch (stacking, torch's default); override it"},
    // DistributedDataParallel
    {"DistributedDataParallel.device_ids", kDdpNone},
    {"DistributedDataParallel.output_device", kDdpNone},
    {"DistributedDataParallel.dim", kDdpNone},
    {"DistributedDataParallel.broadcast_buffers", kDdpNone},
    {"DistributedDataParallel.init_sync", kDdpNone},
    {"DistributedDataParallel.process_group", kDdpNone},
    {"DistributedDataParallel.check_reduction", kDdpNone},
    {"DistributedDataParallel.gradient_as_bucket_view", kDdpNone},
    {"DistributedDataParallel.static_graph", kDdpNone},
    {"DistributedDataParallel.delay_all_reduce_named_params", kDdpNone},
    {"DistributedDataParallel.param_to_hook_all_reduce", kDdpNone},
    {"DistributedDataParallel.mixed_precision", kDdpNone},
    {"DistributedDataParallel.device_mesh", kDdpNone},
    {"DistributedDataParallel.skip_all_reduce_unused_params", kDdpNone},
    {"DistributedDataParallel.bucket_cap_mb_list", kDdpNone},
    {"DistributedDataParallel.batched_grad_copy", kDdpNone},
    {"DistributedDataParallel.forward_sync_buffers", kDdpNone},
    {"DistributedDataParallel.lazy_bucket_allocation", kDdpNone},
    // activation checkpointing
    {"checkpoint.function", "torch's None gives its curried (decorator) form; Kiln's checkpoint takes the function"},
    {"checkpoint.use_reentrant", "Kiln's checkpoint is the non-reentrant one (torch's use_reentrant=False)"},
    {"checkpoint_sequential.use_reentrant", "as checkpoint.use_reentrant"},
    {"checkpoint.context_fn", "no context managers around the two runs"},
    {"checkpoint.determinism_check",
     "Kiln always checks the second run's saved tensors (their number and shapes), torch's 'default'"},
    {"checkpoint.debug", "no debug trace"},
    {"checkpoint.early_stop", "the second run goes to fn's end"},
    {"checkpoint.respect_saved_tensors_hooks",
     "no such switch: Kiln's checkpoint is itself built on saved-tensor hooks, and checkpoints nest"},
};

// Kiln's options that torch does not have (or has with no default).
struct KilnOnly {
  const char* kiln;
  const char* kiln_value;
  const char* reason;
};
const KilnOnly kKilnOnly[] = {
    {"WarmupInverseSqrtLR.factor", "1", "Kiln's schedule (Attention Is All You Need, 5.3); torch has none"},
    {"WarmupInverseSqrtLR.indexing", "'LambdaLR'",
     "the step numbering of the notebooks' LambdaLR (WarmupStepIndexing); torch has none"},
    {"CosineWarmupLR.min_ratio", "0", "Kiln's warm-up then cosine schedule; torch has none"},
    {"TransformerLayerOptions.d_model", "512",
     "torch's layers require d_model and nhead; Kiln's shared layer options default them to "
     "nn.Transformer's 512 and 8"},
    {"TransformerLayerOptions.nhead", "8", "as d_model"},
    {"PairDataLoaderOptions.seed", "0", "the seed of the shuffle (as DistributedSampler's seed 0)"},
    {"PairDataLoaderOptions.bucket_pool", "0", "length bucketing, off by default"},
    {"PairDataLoaderOptions.max_tokens", "0", "batches by a token budget (fairseq's --max-tokens); off: batch_size"},
    {"PairDataLoaderOptions.pad_id", "0", "the id sequences are padded with"},
    {"PairDataLoaderOptions.resample", "None",
     "each epoch's examples of one's own (subword regularisation); off: the loader's examples"},
    {"CheckpointOptions.recompute_outputs", "False", "Kiln's own: outputs kept as recipes too; off by default"},
};

// ---------------------------------------------------------------- values

// A default as the fixture writes it (Python's repr) or as Kiln's side reads it.
struct Py {
  enum Kind { Number, Bool, None, Str, Tuple, Function, Required, Text } kind = None;
  double number = 0;
  bool flag = false;
  std::string text;            // Str, Function (its name), Text (a description)
  std::vector<double> items;   // Tuple
};

Py num(double v) { return {Py::Number, v, false, "", {}}; }
Py flag(bool b) { return {Py::Bool, 0, b, "", {}}; }
Py none() { return {}; }
Py str(std::string s) { return {Py::Str, 0, false, std::move(s), {}}; }
Py pair(double a, double b) { return {Py::Tuple, 0, false, "", {a, b}}; }
Py function(std::string name) { return {Py::Function, 0, false, std::move(name), {}}; }
Py required() { return {Py::Required, 0, false, "", {}}; }
Py text(std::string s) { return {Py::Text, 0, false, std::move(s), {}}; }
template <class T>
Py none_or(const std::optional<T>& v) { return v ? num(static_cast<double>(*v)) : none(); }

std::string number_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Python's repr, more or less (numbers in their shortest form: 1e-05, 0.001, 512).
std::string repr(const Py& v) {
  switch (v.kind) {
    case Py::Number: return number_text(v.number);
    case Py::Bool: return v.flag ? "True" : "False";
    case Py::None: return "None";
    case Py::Str: return "'" + v.text + "'";
    case Py::Tuple: {
      std::string s = "(";
      for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + number_text(v.items[i]);
      return s + ")";
    }
    case Py::Function: return "<function " + v.text + ">";
    case Py::Required: return "required";
    case Py::Text: return v.text;
  }
  return "?";
}

bool same(const Py& a, const Py& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Py::Number: return a.number == b.number;
    case Py::Bool: return a.flag == b.flag;
    case Py::None: case Py::Required: return true;
    case Py::Str: case Py::Function: case Py::Text: return a.text == b.text;
    case Py::Tuple: return a.items == b.items;
  }
  return false;
}

// One default of the fixture file: Python's repr of numbers, True/False/None, quoted
// strings, tuples of numbers and "<function name>".
std::optional<Py> parse(const std::string& s) {
  if (s == "True" || s == "False") return flag(s == "True");
  if (s == "None") return none();
  if (s.size() >= 2 && (s[0] == '\'' || s[0] == '"') && s.back() == s[0]) return str(s.substr(1, s.size() - 2));
  if (s.rfind("<function ", 0) == 0 && s.back() == '>') return function(s.substr(10, s.size() - 11));
  auto number = [](const std::string& t) -> std::optional<double> {
    if (t.empty()) return std::nullopt;
    char* end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) return std::nullopt;
    return v;
  };
  if (s.size() >= 2 && s[0] == '(' && s.back() == ')') {
    Py t{Py::Tuple, 0, false, "", {}};
    std::string inner = s.substr(1, s.size() - 2);
    size_t start = 0;
    while (start <= inner.size()) {
      size_t comma = inner.find(',', start);
      std::string item = inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      while (!item.empty() && item.front() == ' ') item.erase(0, 1);
      if (item.empty() && comma == std::string::npos) break;  // "(1,)"
      auto v = number(item);
      if (!v) return std::nullopt;
      t.items.push_back(*v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return t;
  }
  if (auto v = number(s)) return num(*v);
  return std::nullopt;
}

std::string reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::BatchMean: return "batchmean";
  }
  return "?";
}

}  // namespace

// The number of fields of an aggregate (its options), so that an option added to a
// struct without a line here fails the test. (Counts the initializers it accepts; outside
// the anonymous namespace, as AnyField's conversion is declared, never defined.)
namespace defaults_field_counting {
struct AnyField {
  template <class T>
  operator T() const;
};
template <class T, class... A>
constexpr size_t count() {
  if constexpr (requires { T{A{}..., AnyField{}}; }) return count<T, A..., AnyField>();
  else return sizeof...(A);
}
}  // namespace defaults_field_counting

namespace {

template <class T>
constexpr size_t field_count() {
  return defaults_field_counting::count<T>();
}

// ---------------------------------------------------------------- the audit

class Audit {
 public:
  Audit() {
    const char* dir = std::getenv("KILN_FIXTURES");
    path_ = std::string(dir ? dir : "tests/fixtures") + "/torch_defaults.txt";
    std::ifstream in(path_);
    REQUIRE_MESSAGE(in.good(), "cannot open " << path_ << " (tests/fixtures/make_defaults_fixtures.py writes it)");
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.rfind("# torch ", 0) == 0 && torch_version_.empty()) torch_version_ = line.substr(8);
      if (line.empty() || line[0] == '#') continue;
      size_t space = line.find(' ');
      INFO(path_ << " line " << line_no << ": " << line);
      REQUIRE(space != std::string::npos);
      std::string key = line.substr(0, space);
      std::optional<Py> v = parse(line.substr(space + 1));
      REQUIRE_MESSAGE(v.has_value(), "cannot read the value");
      REQUIRE_MESSAGE(key.find('.') != std::string::npos, "no 'Name.argument'");
      REQUIRE_MESSAGE(fixture_.emplace(key, *v).second, key << " appears twice");
    }
    REQUIRE_MESSAGE(!torch_version_.empty(), path_ << " lacks its '# torch <version>' line");
    REQUIRE(!fixture_.empty());
  }

  const std::string& torch_version() const { return torch_version_; }
  size_t fixture_size() const { return fixture_.size(); }
  size_t compared() const { return compared_; }

  // torch's default for `key` (REQUIREs that the fixture has it).
  const Py& torch(const std::string& key) const {
    auto it = fixture_.find(key);
    REQUIRE_MESSAGE(it != fixture_.end(), key << " is not in " << path_);
    return it->second;
  }

  // Kiln's default for its option `kiln` against torch's argument `torch_key`.
  // torch_none_means: what torch does with its default None where Kiln spells that value
  // out (DataLoader's shuffle=None is no shuffle).
  void check(const std::string& kiln, const std::string& torch_key, const Py& value,
             std::optional<Py> torch_none_means = std::nullopt) {
    INFO("Kiln's " << kiln << " = " << repr(value) << ", against torch's " << torch_key);
    for (const Difference& d : kDiffers) {
      if (kiln != d.kiln) continue;
      used_.insert(std::string("differs:") + d.kiln);
      CHECK_MESSAGE(torch_key == d.torch, "kDiffers names " << std::string(d.torch));
      CHECK_MESSAGE(repr(value) == d.kiln_value, "kDiffers says Kiln's default is " << std::string(d.kiln_value));
      auto it = fixture_.find(torch_key);
      if (it == fixture_.end()) {
        FAIL_CHECK("the fixture has no " << torch_key << ": the kDiffers entry is stale");
        return;
      }
      covered_.insert(torch_key);
      CHECK_MESSAGE(repr(it->second) == d.torch_value, "kDiffers says torch's default is "
                                                           << std::string(d.torch_value) << ", the fixture "
                                                           << repr(it->second));
      CHECK_MESSAGE(!same(resolved(it->second, torch_none_means), value),
                    "torch's default is the same now (" << repr(it->second) << "): drop the kDiffers entry");
      ++compared_;
      return;
    }
    auto it = fixture_.find(torch_key);
    if (it == fixture_.end()) {
      FAIL_CHECK("the fixture has no " << torch_key << ": rerun make_defaults_fixtures.py, or list the option "
                                       "in kKilnOnly with its reason");
      return;
    }
    covered_.insert(torch_key);
    ++compared_;
    const Py want = resolved(it->second, torch_none_means);
    CHECK_MESSAGE(same(want, value), "torch's default is " << repr(it->second)
                                         << (torch_none_means ? " (None meaning " + repr(*torch_none_means) + ")" : "")
                                         << ": change Kiln's, or list it in kDiffers with the reason");
  }

  // A default argument of a function, by what the function does: same_as(v) is true when
  // a call without the argument does what a call with v does.
  void check_by_effect(const std::string& kiln, const std::string& torch_key,
                       const std::function<bool(const Py&)>& same_as,
                       std::optional<Py> torch_none_means = std::nullopt) {
    auto it = fixture_.find(torch_key);
    if (it == fixture_.end()) {
      check(kiln, torch_key, text("(not compared)"));
      return;
    }
    const Py want = resolved(it->second, torch_none_means);
    bool ok = false;
    std::string err = error_of([&] { ok = same_as(want); });
    check(kiln, torch_key, ok ? want : text("not " + repr(want) + (err.empty() ? "" : " (" + err + ")")),
          torch_none_means);
  }

  // Kiln's own option, listed in kKilnOnly.
  void kiln_only(const std::string& kiln, const Py& value) {
    INFO("Kiln's own " << kiln << " = " << repr(value));
    for (const KilnOnly& k : kKilnOnly) {
      if (kiln != k.kiln) continue;
      used_.insert(std::string("kiln:") + k.kiln);
      CHECK_MESSAGE(repr(value) == k.kiln_value, "kKilnOnly says " << std::string(k.kiln_value));
      ++compared_;
      return;
    }
    FAIL_CHECK("not in kKilnOnly: give torch's counterpart, or list it with its reason");
  }

  // After every check: each fixture entry compared or listed in kAbsent, each table entry used.
  void finish() {
    for (const Absent& a : kAbsent) {
      INFO("kAbsent: " << std::string(a.torch));
      CHECK_MESSAGE(fixture_.count(a.torch) == 1, "not in the fixture: the entry is stale");
      CHECK_MESSAGE(covered_.count(a.torch) == 0, "compared with a Kiln option as well: drop the entry");
      CHECK_MESSAGE(std::string(a.reason).size() > 0, "no reason");
      covered_.insert(a.torch);
    }
    for (const auto& entry : fixture_) {
      CHECK_MESSAGE(covered_.count(entry.first) == 1, "torch's " << entry.first << " = " << repr(entry.second)
                                                                 << " is neither checked nor listed in kAbsent");
    }
    for (const Difference& d : kDiffers) {
      CHECK_MESSAGE(used_.count(std::string("differs:") + d.kiln) == 1, "kDiffers entry never checked: " << std::string(d.kiln));
    }
    for (const KilnOnly& k : kKilnOnly) {
      CHECK_MESSAGE(used_.count(std::string("kiln:") + k.kiln) == 1, "kKilnOnly entry never checked: " << std::string(k.kiln));
    }
  }

 private:
  static Py resolved(const Py& torch_value, const std::optional<Py>& none_means) {
    return torch_value.kind == Py::None && none_means ? *none_means : torch_value;
  }

  std::string path_, torch_version_;
  std::map<std::string, Py> fixture_;
  std::set<std::string> covered_, used_;
  size_t compared_ = 0;
};

// ---------------------------------------------------------------- the areas

std::vector<Tensor> one_param() { return {zeros({2}).requires_grad_()}; }

// An optimizer's group options must be exactly `names`: a new option needs its line here.
void check_option_names(const optim::Optimizer& opt, std::set<std::string> names) {
  std::set<std::string> got;
  for (const auto& [k, v] : opt.param_groups()[0].options) got.insert(k);
  CHECK(got == names);
}

void optimizers(Audit& a) {
  static_assert(field_count<optim::SGDOptions>() == 6, "SGDOptions has a new option: audit it below");
  static_assert(field_count<optim::AdamOptions>() == 7, "AdamOptions has a new option: audit it below");
  static_assert(field_count<optim::AdamWOptions>() == 7, "AdamWOptions has a new option: audit it below");
  {
    optim::SGD sgd(one_param(), {});
    const auto& o = sgd.param_groups()[0].options;
    check_option_names(sgd, {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"});
    for (const char* k : {"lr", "momentum", "dampening", "weight_decay"}) a.check(std::string("SGD ") + k, std::string("SGD.") + k, num(o.at(k)));
    a.check("SGD nesterov", "SGD.nesterov", flag(o.at("nesterov") != 0));
    a.check("SGD maximize", "SGD.maximize", flag(o.at("maximize") != 0));
  }
  // Adam and AdamW built with {}: every option of the group.
  auto adam_like = [&](const optim::Optimizer& opt, const std::string& name) {
    const auto& o = opt.param_groups()[0].options;
    check_option_names(opt, {"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize"});
    for (const char* k : {"lr", "eps", "weight_decay"}) a.check(name + " " + k, name + "." + k, num(o.at(k)));
    a.check(name + " beta1, beta2", name + ".betas", pair(o.at("beta1"), o.at("beta2")));
    a.check(name + " amsgrad", name + ".amsgrad", flag(o.at("amsgrad") != 0));
    a.check(name + " maximize", name + ".maximize", flag(o.at("maximize") != 0));
  };
  adam_like(optim::Adam(one_param(), {}), "Adam");
  adam_like(optim::AdamW(one_param(), {}), "AdamW");
}

void schedulers(Audit& a) {
  optim::SGD sgd(one_param(), {.lr = 1.0});
  {
    optim::StepLR s(sgd, 1);
    a.check("StepLR gamma (its lr after one step of size 1, base 1)", "StepLR.gamma", num(s.lr_at(1, 1.0)));
  }
  {
    optim::MultiStepLR s(sgd, {1});
    a.check("MultiStepLR gamma (its lr after milestone 1, base 1)", "MultiStepLR.gamma", num(s.lr_at(1, 1.0)));
  }
  // The first step at which a schedule's lr (base 1) is `v`.
  auto first_step_at = [](const optim::LRScheduler& s, double v) {
    int64_t step = 0;
    while (step < 1000 && s.lr_at(step, 1.0) != v) ++step;
    return static_cast<double>(step);
  };
  {
    optim::ConstantLR s(sgd);
    a.check("ConstantLR factor (its lr at step 0, base 1)", "ConstantLR.factor", num(s.lr_at(0, 1.0)));
    a.check("ConstantLR total_iters (the first step at base)", "ConstantLR.total_iters", num(first_step_at(s, 1.0)));
  }
  {
    optim::LinearLR s(sgd);
    const double end = s.lr_at(1000, 1.0);
    a.check("LinearLR start_factor (its lr at step 0, base 1)", "LinearLR.start_factor", num(s.lr_at(0, 1.0)));
    a.check("LinearLR end_factor (its lr at step 1000)", "LinearLR.end_factor", num(end));
    a.check("LinearLR total_iters (the first step at the end)", "LinearLR.total_iters", num(first_step_at(s, end)));
  }
  {
    optim::PolynomialLR s(sgd);
    const double total = first_step_at(s, 0.0);
    a.check("PolynomialLR total_iters (the first step at 0)", "PolynomialLR.total_iters", num(total));
    // lr at step 1 is (1 - 1 / total)^power.
    a.check("PolynomialLR power (from its lr at step 1)", "PolynomialLR.power",
            num(std::log(s.lr_at(1, 1.0)) / std::log(1.0 - 1.0 / total)));
  }
  {
    // With T_0 = 1 the second cycle, T_mult long, starts at step 1, so the lr is back at
    // base (1) at step 1 + T_mult; half way through a cycle it is (1 + eta_min) / 2.
    optim::CosineAnnealingWarmRestarts s(sgd, 1);
    int64_t next = 2;
    while (next < 100 && s.lr_at(next, 1.0) != 1.0) ++next;
    a.check("CosineAnnealingWarmRestarts T_mult (the second cycle's length)", "CosineAnnealingWarmRestarts.T_mult",
            num(static_cast<double>(next - 1)));
    optim::CosineAnnealingWarmRestarts two(sgd, 2);
    a.check("CosineAnnealingWarmRestarts eta_min", "CosineAnnealingWarmRestarts.eta_min",
            num(2.0 * two.lr_at(1, 1.0) - 1.0));
  }
  {
    optim::CosineAnnealingLR s(sgd, 1);
    a.check("CosineAnnealingLR eta_min (its lr at T_max)", "CosineAnnealingLR.eta_min", num(s.lr_at(1, 1.0)));
  }
  {
    using O = optim::ReduceLROnPlateauOptions;
    const O o = optim::ReduceLROnPlateau(sgd).options();
    const std::string p = "ReduceLROnPlateau.";
    a.check(p + "mode", p + "mode", str(o.mode == O::Mode::Min ? "min" : "max"));
    a.check(p + "factor", p + "factor", num(o.factor));
    a.check(p + "patience", p + "patience", num(static_cast<double>(o.patience)));
    a.check(p + "threshold", p + "threshold", num(o.threshold));
    a.check(p + "threshold_mode", p + "threshold_mode", str(o.threshold_mode == O::ThresholdMode::Rel ? "rel" : "abs"));
    a.check(p + "cooldown", p + "cooldown", num(static_cast<double>(o.cooldown)));
    REQUIRE(o.min_lr.size() == 1);  // one for every group, as torch's single number
    a.check(p + "min_lr", p + "min_lr", num(o.min_lr[0]));
    a.check(p + "eps", p + "eps", num(o.eps));
  }
  {
    // Kiln's own: lr = factor · d^-0.5 · min(s^-0.5, s · warmup^-1.5); d = 4, warmup 4.
    optim::WarmupInverseSqrtLR s(sgd, 4, 4);
    const double at1 = 0.5 * 0.125;  // s = 1
    a.kiln_only("WarmupInverseSqrtLR.factor", num(s.lr_at(0, 1.0) / at1));
    // LambdaLR indexing reads step 0 as 1 (steps 0 and 1 alike); Paper's step 0 is s = 1, step 1 s = 2.
    a.kiln_only("WarmupInverseSqrtLR.indexing", str(s.lr_at(0, 1.0) == s.lr_at(1, 1.0) ? "LambdaLR" : "Paper"));
  }
  {
    optim::CosineWarmupLR s(sgd, 1, 3);
    a.kiln_only("CosineWarmupLR.min_ratio", num(s.lr_at(3, 1.0)));  // base · min_ratio at total_steps
  }
}

void clipping(Audit& a) {
  // Gradients (3, 4): L2 norm 5, infinity norm 4.
  Tensor p = zeros({2}).requires_grad_();
  p.set_grad(from_vector<float>({3, 4}, {2}));
  const double norm = optim::clip_grad_norm_({p}, 1e9);
  const double inf = std::numeric_limits<double>::infinity();
  a.check("clip_grad_norm_(params, max_norm): the norm of gradients (3, 4)", "clip_grad_norm_.norm_type",
          norm == 5 ? num(2.0) : norm == 4 ? num(inf) : text("a norm of " + number_text(norm)));
}

void modules(Audit& a) {
  a.check("nn::Linear(in, out).bias", "Linear.bias", flag(nn::Linear(2, 3).bias.defined()));
  {
    nn::LayerNorm ln(4);
    a.check("nn::LayerNorm(n).eps", "LayerNorm.eps", num(ln.eps));
    a.check("nn::LayerNorm(n).elementwise_affine", "LayerNorm.elementwise_affine", flag(ln.elementwise_affine));
    // No option: a bias whenever elementwise_affine, as torch's default bias=True.
    a.check("nn::LayerNorm(n).bias (a tensor, no option)", "LayerNorm.bias", flag(ln.bias.defined()));
  }
  a.check("nn::Dropout().p", "Dropout.p", num(nn::Dropout().p));
  a.check("nn::Embedding(n, d).padding_idx", "Embedding.padding_idx", none_or(nn::Embedding(10, 4).padding_idx));
  // Softmax and LogSoftmax take their dim (kDiffers); GELU's and Softplus's fields.
  static_assert(!std::is_default_constructible_v<nn::Softmax> && !std::is_default_constructible_v<nn::LogSoftmax>);
  a.check("nn::Softmax(dim)", "Softmax.dim", required());
  a.check("nn::LogSoftmax(dim)", "LogSoftmax.dim", required());
  a.check("nn::GELU().approximate", "GELU.approximate", str(nn::GELU().approximate));
  a.check("nn::Softplus().beta", "Softplus.beta", num(nn::Softplus().beta));
  a.check("nn::Softplus().threshold", "Softplus.threshold", num(nn::Softplus().threshold));
  // ReLU, SiLU, Tanh, Sigmoid and Identity have no options (ReLU and SiLU's inplace: kAbsent).
  static_assert(std::is_default_constructible_v<nn::ReLU> && std::is_default_constructible_v<nn::SiLU> &&
                std::is_default_constructible_v<nn::Tanh> && std::is_default_constructible_v<nn::Sigmoid> &&
                std::is_default_constructible_v<nn::Identity>);
}

void loss_modules(Audit& a) {
  auto weight = [](const Tensor& w) { return w.defined() ? text("a weight tensor") : none(); };
  {
    nn::CrossEntropyLoss l;
    a.check("nn::CrossEntropyLoss().weight", "CrossEntropyLoss.weight", weight(l.weight));
    a.check("nn::CrossEntropyLoss().ignore_index", "CrossEntropyLoss.ignore_index", num(l.ignore_index));
    a.check("nn::CrossEntropyLoss().label_smoothing", "CrossEntropyLoss.label_smoothing", num(l.label_smoothing));
    a.check("nn::CrossEntropyLoss().reduction", "CrossEntropyLoss.reduction", str(reduction_name(l.reduction)));
  }
  {
    nn::NLLLoss l;
    a.check("nn::NLLLoss().weight", "NLLLoss.weight", weight(l.weight));
    a.check("nn::NLLLoss().ignore_index", "NLLLoss.ignore_index", num(l.ignore_index));
    a.check("nn::NLLLoss().reduction", "NLLLoss.reduction", str(reduction_name(l.reduction)));
  }
  a.check("nn::MSELoss().reduction", "MSELoss.reduction", str(reduction_name(nn::MSELoss().reduction)));
  a.check("nn::L1Loss().reduction", "L1Loss.reduction", str(reduction_name(nn::L1Loss().reduction)));
  {
    nn::SmoothL1Loss l;
    a.check("nn::SmoothL1Loss().reduction", "SmoothL1Loss.reduction", str(reduction_name(l.reduction)));
    a.check("nn::SmoothL1Loss().beta", "SmoothL1Loss.beta", num(l.beta));
  }
  {
    nn::BCEWithLogitsLoss l;
    a.check("nn::BCEWithLogitsLoss().weight", "BCEWithLogitsLoss.weight", weight(l.weight));
    a.check("nn::BCEWithLogitsLoss().reduction", "BCEWithLogitsLoss.reduction", str(reduction_name(l.reduction)));
    a.check("nn::BCEWithLogitsLoss().pos_weight", "BCEWithLogitsLoss.pos_weight", weight(l.pos_weight));
  }
  {
    nn::KLDivLoss l;
    a.check("nn::KLDivLoss().reduction", "KLDivLoss.reduction", str(reduction_name(l.reduction)));
    a.check("nn::KLDivLoss().log_target", "KLDivLoss.log_target", flag(l.log_target));
  }
}

// The loss functions' default arguments, by effect: f(x) against f(x, torch's value), the
// arguments before it given torch's values. The inputs make every argument matter (a
// target at -100, differences on both sides of beta, negative log-targets).
void loss_functions(Audit& a) {
  const Tensor logits = from_vector<float>({0.5f, -1.f, 2.f, 0.f, 1.f, 3.f, -2.f, 0.5f, 0.f, 1.f, 1.f, -1.f}, {3, 4});
  const Tensor targets = from_vector<int64_t>({1, -100, 3}, {3});
  const Tensor x = from_vector<float>({0.1f, -2.f, 3.f, 0.7f}, {4});
  const Tensor y = from_vector<float>({0.4f, 1.f, -0.5f, 0.6f}, {4});
  const Tensor probs = from_vector<float>({0.2f, 0.9f, 0.f, 1.f}, {4});
  auto red = [](const Py& v) { return reduction_from_string(v.text); };
  auto idx = [](const Py& v) { return static_cast<int64_t>(v.number); };
  const Py& ce_ignore = a.torch("cross_entropy.ignore_index");
  const Py& ce_smooth = a.torch("cross_entropy.label_smoothing");
  a.check("cross_entropy(logits, targets): the overload without weight", "cross_entropy.weight", none());
  a.check_by_effect("cross_entropy(logits, targets) ignore_index", "cross_entropy.ignore_index", [&](const Py& v) {
    return equal(cross_entropy(logits, targets), cross_entropy(logits, targets, idx(v)));
  });
  a.check_by_effect("cross_entropy(logits, targets) label_smoothing", "cross_entropy.label_smoothing",
                    [&](const Py& v) {
                      return equal(cross_entropy(logits, targets, idx(ce_ignore)),
                                   cross_entropy(logits, targets, idx(ce_ignore), v.number));
                    });
  a.check_by_effect("cross_entropy(logits, targets) reduction", "cross_entropy.reduction", [&](const Py& v) {
    return equal(cross_entropy(logits, targets, idx(ce_ignore), ce_smooth.number),
                 cross_entropy(logits, targets, idx(ce_ignore), ce_smooth.number, red(v)));
  });
  const Tensor lp = log_softmax(logits, 1);
  a.check("nll_loss(log_probs, targets): the overload without weight", "nll_loss.weight", none());
  a.check_by_effect("nll_loss(log_probs, targets) ignore_index", "nll_loss.ignore_index", [&](const Py& v) {
    return equal(nll_loss(lp, targets), nll_loss(lp, targets, idx(v)));
  });
  a.check_by_effect("nll_loss(log_probs, targets) reduction", "nll_loss.reduction", [&](const Py& v) {
    const int64_t ignore = idx(a.torch("nll_loss.ignore_index"));
    return equal(nll_loss(lp, targets, ignore), nll_loss(lp, targets, ignore, red(v)));
  });
  a.check_by_effect("mse_loss(input, target) reduction", "mse_loss.reduction",
                    [&](const Py& v) { return equal(mse_loss(x, y), mse_loss(x, y, red(v))); });
  a.check_by_effect("l1_loss(input, target) reduction", "l1_loss.reduction",
                    [&](const Py& v) { return equal(l1_loss(x, y), l1_loss(x, y, red(v))); });
  a.check_by_effect("smooth_l1_loss(input, target) reduction", "smooth_l1_loss.reduction",
                    [&](const Py& v) { return equal(smooth_l1_loss(x, y), smooth_l1_loss(x, y, red(v))); });
  a.check_by_effect("smooth_l1_loss(input, target) beta", "smooth_l1_loss.beta", [&](const Py& v) {
    const Reduction r = red(a.torch("smooth_l1_loss.reduction"));
    return equal(smooth_l1_loss(x, y, r), smooth_l1_loss(x, y, r, v.number));
  });
  a.check("binary_cross_entropy_with_logits(input, target): weight Tensor()",
          "binary_cross_entropy_with_logits.weight", none());
  a.check_by_effect("binary_cross_entropy_with_logits(input, target) reduction",
                    "binary_cross_entropy_with_logits.reduction", [&](const Py& v) {
                      return equal(binary_cross_entropy_with_logits(x, probs),
                                   binary_cross_entropy_with_logits(x, probs, Tensor(), red(v)));
                    });
  a.check("binary_cross_entropy_with_logits(input, target): pos_weight Tensor()",
          "binary_cross_entropy_with_logits.pos_weight", none());
  const Tensor log_q = log_softmax(x, 0);
  a.check_by_effect("kl_div(input, target) reduction", "kl_div.reduction",
                    [&](const Py& v) { return equal(kl_div(log_q, probs), kl_div(log_q, probs, red(v))); });
  a.check_by_effect("kl_div(input, target) log_target", "kl_div.log_target", [&](const Py& v) {
    const Reduction r = red(a.torch("kl_div.reduction"));
    const Tensor t = from_vector<float>({0.3f, 0.1f, 0.4f, 0.2f}, {4});  // finite read either way
    return equal(kl_div(log_q, t, r), kl_div(log_q, t, r, v.flag));
  });
}

// nn::init by effect: the same seed, the default call against one with torch's value.
void init(Audit& a) {
  auto drawn = [](const std::function<void(Tensor)>& f) {
    manual_seed(1234);
    Tensor t = empty({16, 8});
    f(t);
    return t;
  };
  auto same_draws = [&](const std::function<void(Tensor)>& f, const std::function<void(Tensor)>& g) {
    return equal(drawn(f), drawn(g));
  };
  namespace I = nn::init;
  a.check_by_effect("nn::init::uniform_(t) a", "uniform_.a", [&](const Py& v) {
    return same_draws([](Tensor t) { I::uniform_(t); }, [&](Tensor t) { I::uniform_(t, v.number); });
  });
  a.check_by_effect("nn::init::uniform_(t) b", "uniform_.b", [&](const Py& v) {
    const double lo = a.torch("uniform_.a").number;
    return same_draws([&](Tensor t) { I::uniform_(t, lo); }, [&](Tensor t) { I::uniform_(t, lo, v.number); });
  });
  a.check_by_effect("nn::init::normal_(t) mean", "normal_.mean", [&](const Py& v) {
    return same_draws([](Tensor t) { I::normal_(t); }, [&](Tensor t) { I::normal_(t, v.number); });
  });
  a.check_by_effect("nn::init::normal_(t) std", "normal_.std", [&](const Py& v) {
    const double mean = a.torch("normal_.mean").number;
    return same_draws([&](Tensor t) { I::normal_(t, mean); }, [&](Tensor t) { I::normal_(t, mean, v.number); });
  });
  a.check_by_effect("nn::init::xavier_uniform_(t) gain", "xavier_uniform_.gain", [&](const Py& v) {
    return same_draws([](Tensor t) { I::xavier_uniform_(t); }, [&](Tensor t) { I::xavier_uniform_(t, v.number); });
  });
  a.check_by_effect("nn::init::xavier_normal_(t) gain", "xavier_normal_.gain", [&](const Py& v) {
    return same_draws([](Tensor t) { I::xavier_normal_(t); }, [&](Tensor t) { I::xavier_normal_(t, v.number); });
  });
  // kaiming_uniform_ and kaiming_normal_: a, then mode, then nonlinearity, each with the
  // ones before it given torch's values. A (16, 8) tensor: fan_in 8, fan_out 16.
  auto kaiming = [&](const std::string& fn, auto f0, auto f1, auto f2, auto f3) {
    a.check_by_effect("nn::init::" + fn + "(t) a", fn + ".a", [&](const Py& v) {
      return same_draws([&](Tensor t) { f0(t); }, [&](Tensor t) { f1(t, v.number); });
    });
    const double neg = a.torch(fn + ".a").number;
    a.check_by_effect("nn::init::" + fn + "(t) mode", fn + ".mode", [&](const Py& v) {
      return same_draws([&](Tensor t) { f1(t, neg); }, [&](Tensor t) { f2(t, neg, v.text); });
    });
    const std::string mode = a.torch(fn + ".mode").text;
    a.check_by_effect("nn::init::" + fn + "(t) nonlinearity", fn + ".nonlinearity", [&](const Py& v) {
      return same_draws([&](Tensor t) { f2(t, neg, mode); }, [&](Tensor t) { f3(t, neg, mode, v.text); });
    });
  };
#define KILN_INIT_CALLS(f)                                                                        \
  [](Tensor t) { I::f(t); }, [](Tensor t, double n) { I::f(t, n); },                             \
      [](Tensor t, double n, const std::string& m) { I::f(t, n, m); },                           \
      [](Tensor t, double n, const std::string& m, const std::string& nl) { I::f(t, n, m, nl); }
  kaiming("kaiming_uniform_", KILN_INIT_CALLS(kaiming_uniform_));
  kaiming("kaiming_normal_", KILN_INIT_CALLS(kaiming_normal_));
#undef KILN_INIT_CALLS
  // torch: `param=None` is a negative slope of 0.01 for leaky_relu (the only use of param
  // with a default); Kiln writes the 0.01.
  a.check_by_effect(
      "nn::init::calculate_gain(\"leaky_relu\") param", "calculate_gain.param",
      [&](const Py& v) { return I::calculate_gain("leaky_relu") == I::calculate_gain("leaky_relu", v.number); },
      num(0.01));
}

void transformer_family(Audit& a) {
  namespace tr = kiln::transformer;
  static_assert(field_count<tr::MultiheadAttentionOptions>() == 7, "a new option: audit it below");
  static_assert(field_count<tr::TransformerLayerOptions>() == 8, "a new option: audit it below");
  static_assert(field_count<tr::TransformerOptions>() == 12, "a new option: audit it below");
  {
    const tr::MultiheadAttentionOptions o;
    a.check("MultiheadAttentionOptions.dropout", "MultiheadAttention.dropout", num(o.dropout));
    a.check("MultiheadAttentionOptions.bias", "MultiheadAttention.bias", flag(o.bias));
    a.check("MultiheadAttentionOptions.add_bias_kv", "MultiheadAttention.add_bias_kv", flag(o.add_bias_kv));
    a.check("MultiheadAttentionOptions.add_zero_attn", "MultiheadAttention.add_zero_attn", flag(o.add_zero_attn));
    // -1 is Kiln's None: embed_dim.
    a.check("MultiheadAttentionOptions.kdim (-1: None)", "MultiheadAttention.kdim", o.kdim == -1 ? none() : num(o.kdim));
    a.check("MultiheadAttentionOptions.vdim (-1: None)", "MultiheadAttention.vdim", o.vdim == -1 ? none() : num(o.vdim));
    a.check("MultiheadAttentionOptions.batch_first", "MultiheadAttention.batch_first", flag(o.batch_first));
  }
  // The layers' shared options, for both layers; torch's activation default is F.relu,
  // Kiln's the name "relu" (torch takes either).
  const tr::TransformerLayerOptions lo;
  const tr::TransformerLayerOptions small{.d_model = 8, .nhead = 2, .dim_feedforward = 16};
  auto layer = std::make_shared<tr::TransformerEncoderLayer>(small);
  auto dlayer = std::make_shared<tr::TransformerDecoderLayer>(small);
  // No bias option: every projection and norm has its bias (torch's default bias=True).
  const bool enc_bias = layer->linear1->bias.defined() && layer->linear2->bias.defined() &&
                        layer->self_attn->in_proj_bias.defined() && layer->norm1->bias.defined();
  const bool dec_bias = dlayer->linear1->bias.defined() && dlayer->multihead_attn->in_proj_bias.defined() &&
                        dlayer->self_attn->out_proj->bias.defined() && dlayer->norm3->bias.defined();
  for (const auto& [name, bias] : {std::pair{std::string("TransformerEncoderLayer"), enc_bias},
                                   std::pair{std::string("TransformerDecoderLayer"), dec_bias}}) {
    a.check("TransformerLayerOptions.dim_feedforward", name + ".dim_feedforward", num(lo.dim_feedforward));
    a.check("TransformerLayerOptions.dropout", name + ".dropout", num(lo.dropout));
    a.check("TransformerLayerOptions.activation", name + ".activation", function(lo.activation));
    a.check("TransformerLayerOptions.layer_norm_eps", name + ".layer_norm_eps", num(lo.layer_norm_eps));
    a.check("TransformerLayerOptions.batch_first", name + ".batch_first", flag(lo.batch_first));
    a.check("TransformerLayerOptions.norm_first", name + ".norm_first", flag(lo.norm_first));
    a.check(name + "(options): biases (no option)", name + ".bias", flag(bias));
  }
  a.kiln_only("TransformerLayerOptions.d_model", num(lo.d_model));
  a.kiln_only("TransformerLayerOptions.nhead", num(lo.nhead));
  {
    const tr::TransformerOptions o;
    for (const auto& [k, v] : std::vector<std::pair<std::string, double>>{
             {"d_model", o.d_model}, {"nhead", o.nhead}, {"num_encoder_layers", o.num_encoder_layers},
             {"num_decoder_layers", o.num_decoder_layers}, {"dim_feedforward", o.dim_feedforward},
             {"dropout", o.dropout}, {"layer_norm_eps", o.layer_norm_eps}}) {
      a.check("TransformerOptions." + k, "Transformer." + k, num(v));
    }
    a.check("TransformerOptions.activation", "Transformer.activation", function(o.activation));
    a.check("TransformerOptions.custom_encoder", "Transformer.custom_encoder", o.custom_encoder ? text("set") : none());
    a.check("TransformerOptions.custom_decoder", "Transformer.custom_decoder", o.custom_decoder ? text("set") : none());
    a.check("TransformerOptions.batch_first", "Transformer.batch_first", flag(o.batch_first));
    a.check("TransformerOptions.norm_first", "Transformer.norm_first", flag(o.norm_first));
    tr::TransformerOptions so;
    so.d_model = 8;
    so.nhead = 2;
    so.num_encoder_layers = so.num_decoder_layers = 1;
    so.dim_feedforward = 16;
    tr::Transformer t(so);
    const auto& e0 = (*t.encoder->layers)[0];
    const auto& d0 = (*t.decoder->layers)[0];
    a.check("Transformer(options): biases (no option)", "Transformer.bias",
            flag(e0->linear1->bias.defined() && e0->self_attn->in_proj_bias.defined() &&
                 d0->multihead_attn->in_proj_bias.defined() && d0->linear2->bias.defined()));
  }
  a.check("TransformerEncoder(layer, n).norm", "TransformerEncoder.norm",
          tr::TransformerEncoder(layer, 1).norm ? text("a norm") : none());
  a.check("TransformerDecoder(layer, n).norm", "TransformerDecoder.norm",
          tr::TransformerDecoder(dlayer, 1).norm ? text("a norm") : none());
  // Kiln's constructors from options: final_norm false, torch's norm=None.
  a.check("TransformerEncoder(options, n).final_norm", "TransformerEncoder.norm",
          tr::TransformerEncoder(small, 1).norm ? text("a norm") : none());
  a.check("TransformerDecoder(options, n).final_norm", "TransformerDecoder.norm",
          tr::TransformerDecoder(small, 1).norm ? text("a norm") : none());
}

void data_loaders(Audit& a) {
  static_assert(field_count<data::PairDataLoaderOptions>() == 9, "a new option: audit it below");
  static_assert(field_count<data::DistributedSamplerOptions>() == 5, "a new option: audit it below");
  // data::DataLoader is torch.utils.data.DataLoader: its defaults by what it does.
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(5.0)});
  {
    data::DataLoader loader(ds);
    const data::Sample first = *loader.begin();
    a.check("data::DataLoader(ds) batch_size (its first batch's size)", "DataLoader.batch_size",
            num(static_cast<double>(first[0].size(0))));
    bool in_order = true;
    for (int epoch = 0; epoch < 3; ++epoch) {
      int64_t i = 0;
      for (const auto& batch : loader.next_epoch_indices())
        for (int64_t j : batch) in_order = in_order && j == i++;
    }
    // torch: shuffle=None is no shuffle.
    a.check("data::DataLoader(ds) shuffle (three epochs in order)", "DataLoader.shuffle", flag(!in_order),
            flag(false));
    a.check("data::DataLoader(ds, 2) drop_last (batches of 5 samples)", "DataLoader.drop_last",
            flag(data::DataLoader(ds, 2).size() == 2));
    a.check("data::DataLoader(ds): the constructor without a sampler", "DataLoader.sampler", none());
  }
  a.check_by_effect("data::DataLoader(ds, 1, true) generator (nullptr)", "DataLoader.generator", [&](const Py& v) {
    // torch's None: the default generator.
    if (v.kind != Py::None) return false;
    manual_seed(77);
    auto by_default = data::DataLoader(ds, 1, true).next_epoch_indices();
    manual_seed(77);
    return by_default == data::DataLoader(ds, 1, true, false, &default_generator()).next_epoch_indices();
  });
  {
    // PairDataLoader's options, against torch's DataLoader where it has the argument.
    const data::PairDataLoaderOptions o;
    a.check("PairDataLoaderOptions.batch_size", "DataLoader.batch_size", num(o.batch_size));
    a.check("PairDataLoaderOptions.shuffle", "DataLoader.shuffle", flag(o.shuffle), flag(false));
    a.check("PairDataLoaderOptions.drop_last", "DataLoader.drop_last", flag(o.drop_last));
    a.check("PairDataLoaderOptions.sampler", "DataLoader.sampler", o.sampler ? text("set") : none());
    a.kiln_only("PairDataLoaderOptions.seed", num(static_cast<double>(o.seed)));
    a.kiln_only("PairDataLoaderOptions.bucket_pool", num(o.bucket_pool));
    a.kiln_only("PairDataLoaderOptions.pad_id", num(o.pad_id));
    a.kiln_only("PairDataLoaderOptions.max_tokens", num(o.max_tokens));
    a.kiln_only("PairDataLoaderOptions.resample", o.resample ? text("set") : none());
  }
  {
    const data::DistributedSamplerOptions o;
    a.check("DistributedSamplerOptions.num_replicas", "DistributedSampler.num_replicas", none_or(o.num_replicas));
    a.check("DistributedSamplerOptions.rank", "DistributedSampler.rank", none_or(o.rank));
    a.check("DistributedSamplerOptions.shuffle", "DistributedSampler.shuffle", flag(o.shuffle));
    a.check("DistributedSamplerOptions.seed", "DistributedSampler.seed", num(static_cast<double>(o.seed)));
    a.check("DistributedSamplerOptions.drop_last", "DistributedSampler.drop_last", flag(o.drop_last));
  }
}

void parallel_and_checkpoint(Audit& a) {
  static_assert(field_count<nn::parallel::DistributedDataParallelOptions>() == 2, "a new option: audit it below");
  static_assert(field_count<utils::CheckpointOptions>() == 2, "a new option: audit it below");
  const nn::parallel::DistributedDataParallelOptions d;
  // torch: bucket_cap_mb=None is 25 MiB (its documented default).
  a.check("DistributedDataParallelOptions.bucket_cap_mb", "DistributedDataParallel.bucket_cap_mb",
          num(d.bucket_cap_mb), num(25));
  a.check("DistributedDataParallelOptions.find_unused_parameters", "DistributedDataParallel.find_unused_parameters",
          flag(d.find_unused_parameters));
  const utils::CheckpointOptions c;
  a.check("CheckpointOptions.preserve_rng_state", "checkpoint.preserve_rng_state", flag(c.preserve_rng_state));
  a.kiln_only("CheckpointOptions.recompute_outputs", flag(c.recompute_outputs));
}

}  // namespace

TEST_CASE("defaults: every option against PyTorch's (tests/fixtures/torch_defaults.txt)") {
  Audit a;
  optimizers(a);
  schedulers(a);
  clipping(a);
  modules(a);
  loss_modules(a);
  loss_functions(a);
  init(a);
  transformer_family(a);
  data_loaders(a);
  parallel_and_checkpoint(a);
  a.finish();
  MESSAGE("torch " << a.torch_version() << ": " << a.fixture_size() << " torch defaults; " << a.compared()
                   << " Kiln options compared (" << std::size(kDiffers) << " differ, " << std::size(kKilnOnly)
                   << " Kiln's own), " << std::size(kAbsent) << " torch arguments Kiln does not have");
}

TEST_CASE("defaults: AdamW's are torch's, and an AdamOptions given to it means what it says") {
  auto wd = [](const optim::Optimizer& o) { return o.param_groups()[0].options.at("weight_decay"); };
  CHECK(wd(optim::AdamW(one_param(), {.lr = 1e-4})) == 0.01);
  CHECK(wd(optim::AdamW(one_param(), {})) == 0.01);
  CHECK(wd(optim::AdamW(one_param(), optim::AdamWOptions{})) == 0.01);
  CHECK(wd(optim::AdamW(one_param(), optim::adamw_defaults())) == 0.01);
  CHECK(wd(optim::AdamW(one_param(), optim::AdamOptions{})) == 0.0);  // Adam's options: Adam's weight decay
  CHECK(wd(optim::AdamW(one_param(), optim::AdamOptions{.weight_decay = 0.2})) == 0.2);
  CHECK(wd(optim::Adam(one_param(), {})) == 0.0);
  CHECK(wd(optim::AdamW({optim::ParamGroup(one_param())}, {.lr = 1e-4})) == 0.01);
}
