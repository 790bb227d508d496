#include "train/checkpoint_manager.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"

namespace kiln::train {
namespace fs = std::filesystem;
namespace {

// The manager's own entries in each checkpoint's metadata (io adds "user." in the file).
const std::string kReserved = "checkpoint_manager.";
const std::string kStepKey = kReserved + "step";
const std::string kMetricKey = kReserved + "metric";
constexpr const char* kSuffix = ".safetensors";

std::string metric_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // 17 digits: read back bit for bit
  return buf;
}

// The metric a best file was saved with, from its header alone (a checkpoint can be
// gigabytes). NaN when the file records none or cannot be read: the next metric replaces it.
double recorded_metric(const std::string& path) {
  try {
    io::Metadata meta = io::load_safetensors_metadata(path);
    auto it = meta.find("user." + kMetricKey);  // io::save_checkpoint's prefix of user entries
    if (it == meta.end()) return NAN;
    // The whole text, or NaN: a prefix read leniently ("abc" as 0) would be a best
    // metric no later save could beat.
    double v = NAN;
    return io::parse_whole(it->second, &v) && std::isfinite(v) ? v : NAN;
  } catch (const Error&) {
    return NAN;
  }
}

// A plain file name: not empty, no directory part.
void check_name(const std::string& what, const std::string& name, bool may_be_empty) {
  KILN_CHECK(may_be_empty || !name.empty(), "CheckpointManager", what, " must not be empty");
  KILN_CHECK(name.find('/') == std::string::npos && name != "." && name != "..", "CheckpointManager", what,
             " must be a file name without a directory, got '", name, "'");
}

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, CheckpointManagerOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  KILN_CHECK(!directory_.empty(), "CheckpointManager", "the directory must not be empty");
  KILN_CHECK(options_.keep_last >= 1, "CheckpointManager", "keep_last must be at least 1, got ", options_.keep_last,
             " (directory '", directory_, "')");
  check_name("prefix", options_.prefix, false);
  check_name("best_name", options_.best_name, true);
  check_name("latest_alias", options_.latest_alias, true);
  KILN_CHECK(options_.latest_alias.empty() || options_.latest_alias != options_.best_name, "CheckpointManager",
             "best_name and latest_alias must differ, both are '", options_.best_name, "'");
  for (const std::string* name : {&options_.best_name, &options_.latest_alias})
    KILN_CHECK(step_of(*name) < 0, "CheckpointManager", "'", *name, "' has the name pattern of the step checkpoints (",
               options_.prefix, "-<step>", kSuffix, ")");

  std::error_code ec;
  KILN_CHECK(!fs::exists(directory_, ec) || fs::is_directory(directory_, ec), "CheckpointManager", "'", directory_,
             "' is not a directory");
  fs::create_directories(directory_, ec);
  KILN_CHECK(!ec, "CheckpointManager", "cannot create the directory '", directory_, "': ", ec.message());
  KILN_CHECK(::access(directory_.c_str(), W_OK | X_OK) == 0, "CheckpointManager", "the directory '", directory_,
             "' is not writable: ", std::strerror(errno));

  remove_stale_temporaries();
  const std::string b = best();
  if (!b.empty()) best_metric_ = recorded_metric(b);
}

std::string CheckpointManager::path_for(int64_t step) const {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%09lld", static_cast<long long>(step));
  return (fs::path(directory_) / (options_.prefix + "-" + digits + kSuffix)).string();
}

int64_t CheckpointManager::step_of(const std::string& name) const {
  const std::string head = options_.prefix + "-";
  if (name.size() <= head.size() + std::strlen(kSuffix) || !name.starts_with(head) || !name.ends_with(kSuffix))
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - std::strlen(kSuffix));
  int64_t step = 0;
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos || !io::parse_whole(digits, &step))
    return -1;
  // Only the exact spelling save() writes ("ckpt-5.safetensors" is somebody else's).
  return fs::path(path_for(step)).filename() == name ? step : -1;
}

bool CheckpointManager::owns(const std::string& name) const {
  return step_of(name) >= 0 || (!options_.best_name.empty() && name == options_.best_name) ||
         (!options_.latest_alias.empty() && name == options_.latest_alias);
}

void CheckpointManager::remove_stale_temporaries() const {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory_, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || !e.is_regular_file(ec)) continue;
    const std::string target = name.substr(0, at);
    if (io::is_orphaned_atomic_temp_of(name, target) && owns(target)) remove_file(e.path().string(), "");
  }
  KILN_CHECK(!ec, "CheckpointManager", "cannot list the directory '", directory_, "': ", ec.message());
}

void CheckpointManager::remove_file(const std::string& path, const std::string& saved) const {
  std::error_code ec;
  fs::remove(path, ec);
  KILN_CHECK(!ec, "CheckpointManager", saved.empty() ? "" : "saved '" + saved + "' but ", "cannot remove '", path,
             "': ", ec.message());
}

void CheckpointManager::clear() {
  std::vector<std::string> doomed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory_, ec))
    if (owns(e.path().filename().string()) && !e.is_directory(ec)) doomed.push_back(e.path().string());
  KILN_CHECK(!ec, "CheckpointManager", "cannot list the directory '", directory_, "': ", ec.message());
  for (const std::string& path : doomed) remove_file(path, "");
  best_metric_ = NAN;
}

std::vector<CheckpointInfo> CheckpointManager::checkpoints() const {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(directory_, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_regular_file(ec)) out.push_back({step, e.path().string()});
  }
  KILN_CHECK(!ec, "CheckpointManager", "cannot list the directory '", directory_, "': ", ec.message());
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

std::string CheckpointManager::latest() const {
  std::vector<CheckpointInfo> all = checkpoints();
  return all.empty() ? "" : all.back().path;
}

int64_t CheckpointManager::latest_step() const {
  std::vector<CheckpointInfo> all = checkpoints();
  return all.empty() ? -1 : all.back().step;
}

std::string CheckpointManager::best() const {
  if (options_.best_name.empty()) return "";
  fs::path p = fs::path(directory_) / options_.best_name;
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

namespace {

// `to` becomes the same file as `from`, atomically: a hard link (no second copy on disk)
// under a temporary name, renamed over `to`; a copy where the file system has no links.
void replace_with(const std::string& from, const std::string& to) {
  const std::string tmp = io::atomic_temp_path(to);
  std::error_code ec;
  fs::create_hard_link(from, tmp, ec);
  if (ec) {
    ec.clear();
    fs::copy_file(from, tmp, ec);
    KILN_CHECK(!ec, "CheckpointManager", "cannot copy '", from, "' to '", tmp, "': ", ec.message());
  }
  fs::rename(tmp, to, ec);
  std::error_code ignored;
  // Also after a successful rename: renaming a link over another link of the same file
  // does nothing and leaves the temporary name (POSIX rename).
  fs::remove(tmp, ignored);
  KILN_CHECK(!ec, "CheckpointManager", "cannot rename '", tmp, "' to '", to, "': ", ec.message());
}

}  // namespace

CheckpointManager::SaveResult CheckpointManager::save(int64_t step, const io::CheckpointParts& parts,
                                                      const io::Metadata& metadata, double metric) {
  KILN_CHECK(step >= 0, "CheckpointManager", "save: the step must be non-negative, got ", step);
  for (const auto& [key, value] : metadata)
    KILN_CHECK(!key.starts_with(kReserved), "CheckpointManager", "save: the metadata key '", key,
               "' is reserved (keys starting '", kReserved, "' are the manager's)");
  io::Metadata meta = metadata;
  meta[kStepKey] = std::to_string(step);
  meta[kMetricKey] = metric_text(metric);
  SaveResult result;
  result.path = path_for(step);
  io::save_checkpoint(result.path, parts, meta);

  const bool better = std::isfinite(metric) &&
                      (std::isnan(best_metric_) || (options_.lower_is_better ? metric < best_metric_ : metric > best_metric_));
  if (better && !options_.best_name.empty()) {
    replace_with(result.path, (fs::path(directory_) / options_.best_name).string());
    best_metric_ = metric;
    result.best = true;
  }
  if (!options_.latest_alias.empty()) replace_with(result.path, (fs::path(directory_) / options_.latest_alias).string());

  // Later steps are an abandoned future; of the rest, keep the newest keep_last.
  std::vector<CheckpointInfo> all = checkpoints();
  int64_t kept = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const bool keep = it->step <= step && kept < options_.keep_last;
    if (keep) ++kept;
    else remove_file(it->path, result.path);
  }
  return result;
}

io::Metadata CheckpointManager::resume(const io::CheckpointParts& parts) const {
  const std::string path = latest();
  KILN_CHECK(!path.empty(), "CheckpointManager", "nothing to resume: no ", options_.prefix, "-<step>", kSuffix,
             " in '", directory_, "'");
  io::Metadata meta = io::load_checkpoint(path, parts);
  std::erase_if(meta, [](const auto& entry) { return entry.first.starts_with(kReserved); });
  return meta;
}

}  // namespace kiln::train
