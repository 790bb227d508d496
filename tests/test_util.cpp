#include "test_util.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln::testing {

std::string fixture_path(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + name;
}

std::map<std::string, Tensor> load_fixtures(const std::string& file) {
  const std::string path = fixture_path(file);
  std::ifstream in(path);
  KILN_CHECK(in.good(), "load_fixtures", "cannot open ", path);
  std::map<std::string, Tensor> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, dtype;
    int64_t ndim = 0;
    ls >> name >> dtype >> ndim;
    Shape shape(ndim);
    for (auto& d : shape) ls >> d;
    std::vector<double> vals(shape_numel(shape));
    for (auto& v : vals) {
      std::string tok;
      ls >> tok;
      v = std::strtod(tok.c_str(), nullptr);  // accepts nan, inf, -inf
    }
    KILN_CHECK(!ls.fail(), "load_fixtures", "malformed line for '", name, "' in ", path);
    DType t = dtype == "float32"  ? kFloat32
              : dtype == "float64"  ? kFloat64
              : dtype == "int64"    ? kInt64
              : dtype == "bfloat16" ? kBFloat16  // written as float32 values, which hold them exactly
                                    : kBool;
    out[name] = from_vector<double>(vals, shape, TensorOptions(t));
  }
  return out;
}

const std::map<std::string, Tensor>& FixtureFile::all() const {
  if (!loaded_) {
    tensors_ = load_fixtures(file_);
    loaded_ = true;
  }
  return tensors_;
}

Tensor FixtureFile::get(const std::string& name) const {
  auto it = all().find(name);
  if (it == all().end()) {
    FAIL("fixture '" << name << "' missing from " << file_ << "; rerun " << script_);
    return Tensor();
  }
  return it->second;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

Tensor leaf64(const Shape& shape, uint64_t seed, double scale) {
  Generator g(seed);
  Tensor t = randn(shape, TensorOptions(kFloat64), &g);
  if (scale != 1.0) t.mul_(scale);
  return t.requires_grad_();
}

Tensor noncontiguous_leaf64(const Shape& shape, uint64_t seed) {
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Generator g(seed);
  Tensor t = randn(swapped, TensorOptions(kFloat64), &g).transpose(-1, -2);
  return t.requires_grad_();
}

namespace {

std::string repr17(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

namespace {

// got's elements against want's (the same count): NaN must meet NaN, infinities and
// integers (and bools) must be equal, the rest within atol + rtol |want|. Returns how many
// differ, and sets `first` to the first of them ("element i: got <versus> want").
int64_t count_mismatches(const std::vector<double>& g, const std::vector<double>& w, bool floating, Tol tol,
                         const std::string& versus, std::string& first) {
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i])) ok = std::isnan(g[i]);
    else if (std::isinf(w[i]) || !floating) ok = g[i] == w[i];
    else ok = std::isfinite(g[i]) && std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]);
    if (!ok && bad++ == 0) first = "element " + std::to_string(i) + ": " + repr17(g[i]) + versus + repr17(w[i]);
  }
  return bad;
}

}  // namespace

void check_matches(const std::string& what, const Tensor& got, const Tensor& ref, Tol tol) {
  REQUIRE_MESSAGE(got.defined(), what << ": result is undefined");
  REQUIRE_MESSAGE(ref.defined(), what << ": reference is undefined");
  CHECK_MESSAGE(got.dtype() == ref.dtype(), what << ": dtype " << std::string(dtype_name(got.dtype()))
                                                 << ", torch gives " << std::string(dtype_name(ref.dtype())));
  if (got.shape() != ref.shape()) {
    FAIL_CHECK(what << ": shape " << shape_str(got.shape()) << ", torch gives " << shape_str(ref.shape()));
    return;
  }
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  std::string first;
  const int64_t bad = count_mismatches(g, r, is_floating(ref.dtype()), tol, " vs torch ", first);
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << g.size() << " elements differ; first " << first);
}

std::optional<Device> cuda_test_device() {
  if (std::getenv("KILN_TEST_CUDA_ON_CPU")) return kCPU;
  if (cuda::is_available()) return Device(DeviceType::CUDA, 0);
  return std::nullopt;
}

void check_same_as_cpu(const std::string& what, const Tensor& got, const Tensor& want, double rtol) {
  REQUIRE_MESSAGE(got.defined() == want.defined(), what << ": defined on one device only");
  if (!want.defined()) return;
  REQUIRE_MESSAGE(got.dtype() == want.dtype(), what << ": dtype " << std::string(dtype_name(got.dtype())) << " vs "
                                                    << std::string(dtype_name(want.dtype())) << " on the CPU");
  REQUIRE_MESSAGE(got.shape() == want.shape(),
                  what << ": shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape()) << " on the CPU");
  if (rtol == 0) rtol = want.dtype() == kFloat64 ? 1e-12 : 1e-5;
  // |got - want| <= rtol (1 + |want|)
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  std::string first;
  const int64_t bad = count_mismatches(g, w, is_floating(want.dtype()), Tol{rtol, rtol}, " vs ", first);
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << g.size() << " elements differ from the CPU's; first "
                               << first);
}

Tensor quantized_activation_bound(const Tensor& x, const Tensor& w_hat) {
  const int64_t M = x.size(0), K = x.size(1);
  const Tensor d = div(amax(abs(x.reshape({M, K / 32, 32})), {2}, true), 127.0);  // (M, K/32, 1)
  const Tensor per_k = mul(d.expand({M, K / 32, 32}).reshape({M, K}), 0.5 + 127.0 / 2048);
  return add(matmul(per_k, abs(w_hat).t()), mul(matmul(abs(x), abs(w_hat).t()), 1e-5));
}

void check_within(const std::string& what, const Tensor& got, const Tensor& want, const Tensor& bound) {
  const Tensor excess = sub(abs(sub(got, want)), bound);
  CHECK_MESSAGE(amax(excess).item() <= 0.0, what, ": exceeds the bound by ", amax(excess).item());
}

ScratchDir::ScratchDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path = std::filesystem::temp_directory_path() /
         ("kiln_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::vector<std::string> ScratchDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string pretrained_dir(const std::string& name) {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root = cache && *cache ? std::filesystem::path(cache)
                                                     : std::filesystem::path(home ? home : "/") / ".cache/kiln/models";
  const std::filesystem::path dir = root / name;
  if (std::filesystem::exists(dir / ".complete")) return dir.string();
  const char* require = std::getenv("KILN_REQUIRE_MODELS");
  if (require && std::string(require) == "1")
    FAIL("the pretrained model ", dir.string(), " is missing: run scripts/fetch_models.sh");
  MESSAGE("skipped: the pretrained model ", dir.string(), " is missing (scripts/fetch_models.sh fetches it)");
  return "";
}

std::string unescape_fixture_text(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    if (e == 'x' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoul(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
      continue;
    }
    if (e == 'u' && i + 1 < s.size() && s[i + 1] == '{') {
      const size_t close = s.find('}', i);
      REQUIRE(close != std::string::npos);
      text::append_utf8(out, static_cast<char32_t>(std::stoul(s.substr(i + 2, close - i - 2), nullptr, 16)));
      i = close;
      continue;
    }
    out += e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e == 's' ? ' ' : e;
  }
  return out;
}

}  // namespace kiln::testing
