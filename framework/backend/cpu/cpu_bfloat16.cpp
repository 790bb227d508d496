// The only CPU kernels that see bfloat16: copy (with the conversions to and from every
// dtype) and fill. Every other kernel gets float32 copies of bfloat16 tensors from the
// staging backend (backend/bfloat16_staged.cpp). (…) -> (…)
#include <cstring>
#include <type_traits>

#include "backend/cpu/bfloat16_convert.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/strided_loop.h"

namespace kiln::cpu {
namespace {

// Element types as stored: bfloat16 as its bits.
template <class T> using Stored = std::conditional_t<std::is_same_v<T, bfloat16>, uint16_t, T>;

// A value of S as D, through float where one side is bfloat16 (as torch converts).
template <class S, class D>
Stored<D> convert(Stored<S> v) {
  if constexpr (std::is_same_v<S, bfloat16>) {
    const float f = float_from_bf16_bits(v);
    if constexpr (std::is_same_v<D, bfloat16>) return v;
    else if constexpr (std::is_same_v<D, bool>) return f != 0.0f;
    else return convert_float<D>(f);  // NaN and out-of-range values to int64 are defined there
  } else {
    static_assert(std::is_same_v<D, bfloat16>);
    if constexpr (std::is_same_v<S, bool>) return v ? uint16_t{0x3F80} : uint16_t{0};  // 1.0, 0.0
    else return bf16_bits_from_float(static_cast<float>(v));  // a double rounds twice, as in torch
  }
}

template <class S, class D>
KILN_MULTIVERSION void convert_run(Stored<D>* o, const Stored<S>* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = convert<S, D>(a[i]);
}

// dst[i] = src[i] converted, over any strides.
template <class S, class D>
void convert_copy(const Tensor& src, const Tensor& dst) {
  using SS = Stored<S>;
  using DS = Stored<D>;
  for_each_strided<2>({&dst, &src}, [](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
    if (s[0] == sizeof(DS) && s[1] == sizeof(SS)) {
      DS* o = reinterpret_cast<DS*>(p[0]);
      const SS* a = reinterpret_cast<const SS*>(p[1]);
      if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bfloat16>) float_to_bf16(a, o, n);
      else if constexpr (std::is_same_v<S, bfloat16> && std::is_same_v<D, float>) bf16_to_float(a, o, n);
      else if constexpr (std::is_same_v<S, D>) std::memcpy(o, a, static_cast<size_t>(n) * sizeof(DS));
      else convert_run<S, D>(o, a, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      SS v;
      std::memcpy(&v, p[1] + i * s[1], sizeof v);
      const DS r = convert<S, D>(v);
      std::memcpy(p[0] + i * s[0], &r, sizeof r);
    }
  });
}

}  // namespace

void copy_bfloat16(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == kBFloat16 && dst.dtype() == kBFloat16) return convert_copy<bfloat16, bfloat16>(src, dst);
  if (dst.dtype() == kBFloat16) {
    return visit_dtype(src.dtype(), [&](auto tag) { convert_copy<typename decltype(tag)::type, bfloat16>(src, dst); });
  }
  visit_dtype(dst.dtype(), [&](auto tag) { convert_copy<bfloat16, typename decltype(tag)::type>(src, dst); });
}

void fill_bfloat16(const Tensor& dst, double value) {
  const uint16_t v = bf16_bits_from_float(static_cast<float>(value));
  for_each_strided<1>({&dst}, [v](std::array<char*, 1> p, const std::array<int64_t, 1>& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &v, sizeof v);
  });
}

}  // namespace kiln::cpu
