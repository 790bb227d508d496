#pragma once
// Helpers shared by the test files.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln.h"

// Built with AddressSanitizer (scripts/test.sh's clang++ tree). A test that repeats one
// computation over many real inputs may take a few of them there: the sanitizers check
// code paths, which a few inputs already take, at several times the cost each.
#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_SANITIZED 1
#endif
#endif

namespace kiln::testing {

#ifdef KILN_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// Reference tensors written by a script beside them (tests/fixtures/*.py), one per
// line: "name dtype ndim d0 d1 … v0 v1 …". The folder comes from $KILN_FIXTURES.
// $KILN_FIXTURES/<name> (tests/fixtures/<name> when unset): a fixture file or folder.
std::string fixture_path(const std::string& name);
std::map<std::string, Tensor> load_fixtures(const std::string& file);

// One fixture file, read on first use. get() of a name the file lacks fails the test
// with the file and the script that writes it ("rerun make_x_fixtures.py").
class FixtureFile {
 public:
  FixtureFile(std::string file, std::string script) : file_(std::move(file)), script_(std::move(script)) {}
  Tensor get(const std::string& name) const;
  const std::map<std::string, Tensor>& all() const;

 private:
  std::string file_, script_;
  mutable std::map<std::string, Tensor> tensors_;
  mutable bool loaded_ = false;
};

// A fresh, empty directory under the system's temporary directory
// (kiln_test_<tag>_<pid>_<n>), removed with everything in it at scope end.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // The names in it, sorted.
  std::vector<std::string> entries() const;
};

// Restores the thread count (set_num_threads) a test found, at scope end.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// Whether x and y hold the same float bits, element for element.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y);

// A float64 leaf requiring grad with values from randn (seeded), for gradient checks.
Tensor leaf64(const Shape& shape, uint64_t seed, double scale = 1.0);

// A float64 leaf requiring grad with the given shape whose strides are not contiguous
// (the transpose of a contiguous tensor, so shape must be 2-D or more).
Tensor noncontiguous_leaf64(const Shape& shape, uint64_t seed);

// |got - ref| <= atol + rtol * |ref|
struct Tol {
  double rtol, atol;
};

// got must equal ref (from PyTorch) in dtype, shape and value: exactly for int64/bool
// and infinities, within `tol` for finite floats; a NaN must meet a NaN. One doctest
// check, whose message names `what` and the first element that differs.
void check_matches(const std::string& what, const Tensor& got, const Tensor& ref, Tol tol);

// A line of a fixture file written by a script beside it, unescaped: \\ \n \r \t, \s for a
// space (so that a field never holds a real one), \xHH for a byte (invalid UTF-8 too) and
// \u{HEX} for any code point (a surrogate as its 3 bytes).
std::string unescape_fixture_text(const std::string& s);

// The device the GPU checks run on: CUDA's first GPU, or the CPU standing in for it
// where KILN_TEST_CUDA_ON_CPU=1 (to check the checks where no GPU exists); none where
// neither is.
std::optional<Device> cuda_test_device();
// got (computed on the GPU) against want (on the CPU): same dtype and shape; integers and
// bools exactly, floats within |got - want| <= rtol (1 + |want|) (rtol 1e-12 for float64
// and 1e-5 otherwise unless given), NaN where want has NaN, infinities exactly.
void check_same_as_cpu(const std::string& what, const Tensor& got, const Tensor& want, double rtol = 0);

// The bound on |x̂ @ ŵᵀ - x @ ŵᵀ| that quantized_linear's 8-bit activations keep: each
// x̂_k within (0.5 + 127 · 2^-11) · d_b of x_k (half a step, and d rounded to float16),
// d_b = max|x| / 127 over its block of 32; summed against |ŵ|; plus float32 summation
// slack. x (M, K), w_hat (N, K) -> (M, N).
Tensor quantized_activation_bound(const Tensor& x, const Tensor& w_hat);
// |got - want| <= bound everywhere.
void check_within(const std::string& what, const Tensor& got, const Tensor& want, const Tensor& bound);

// The folder of a pretrained model that scripts/fetch_models.sh unpacks
// ($KILN_MODEL_CACHE, else ~/.cache/kiln/models, then `name`), or "" when it is not
// there: the calling test then skips with a message saying how to fetch it, or fails
// where $KILN_REQUIRE_MODELS is 1 (the README's test command fetches them first).
std::string pretrained_dir(const std::string& name);

// The message of the kiln::Error that f throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs `expr`, requires a kiln::Error, and checks that its message contains each of the
// given substrings. CHECK_ERROR_STARTS also requires the message to start with `op`
// ("[gather]"). One doctest check each, whose message shows the expression and the error.
#define CHECK_ERROR(expr, ...)                                                                  \
  do {                                                                                          \
    std::string msg_ = ::kiln::testing::error_of([&] { (void)(expr); });                        \
    INFO("expression: " #expr);                                                                 \
    INFO("message: " << msg_);                                                                  \
    CHECK_MESSAGE(!msg_.empty(), "no kiln::Error thrown");                                      \
    for (const char* part_ : {__VA_ARGS__})                                                     \
      CHECK_MESSAGE(msg_.find(part_) != std::string::npos, "message lacks '" << part_ << "'"); \
  } while (0)
#define CHECK_ERROR_STARTS(op, expr, ...)                                                       \
  do {                                                                                          \
    std::string msg_ = ::kiln::testing::error_of([&] { (void)(expr); });                        \
    INFO("expression: " #expr);                                                                 \
    INFO("message: " << msg_);                                                                  \
    CHECK_MESSAGE(msg_.rfind(op, 0) == 0, "message does not start with " << op);               \
    for (const char* part_ : {__VA_ARGS__})                                                     \
      CHECK_MESSAGE(msg_.find(part_) != std::string::npos, "message lacks '" << part_ << "'"); \
  } while (0)

}  // namespace kiln::testing
