// Copies with casts: within a GPU (any strides, any dtypes), and between the CPU and a
// GPU. The bytes cross the bus in the source's dtype and contiguous order; casting and
// scattering into strides happen on the device side (or, for a strided CPU destination,
// by the CPU backend after the transfer).
//   src (…) -> dst (…), same shape.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// v as D; to bool: nonzero. bfloat16 converts through float both ways, rounded to
// nearest even as on the CPU (core/bfloat16.h).
template <class D, class S>
__device__ D convert_value(S v) {
  if constexpr (std::is_same_v<S, bfloat16>) {
    return convert_value<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else {
    return static_cast<D>(v);
  }
}

// dst (…) = cast(src (…)).
template <class S, class D>
__global__ void copy_kernel(Strided<2> L, D* dst, const S* src, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    L.offsets(i, off);
    dst[off[0]] = convert_value<D>(src[off[1]]);
  }
}

// dst (n) = cast(src (n)), both contiguous and aligned to Pack4: four elements a thread
// (a float32 -> bfloat16 cast moved 1.3 TB/s one element a thread); the n % 4 elements
// past the last pack by the first threads.
template <class S, class D>
__global__ void copy_contiguous_kernel(D* dst, const S* src, int64_t n) {
  const int64_t packs = n / 4;
  KILN_GRID_STRIDE_LOOP(i, packs) {
    const Pack4<S> a = reinterpret_cast<const Pack4<S>*>(src)[i];
    Pack4<D> b;
#pragma unroll
    for (int j = 0; j < 4; ++j) b.v[j] = convert_value<D>(a.v[j]);
    reinterpret_cast<Pack4<D>*>(dst)[i] = b;
  }
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n - 4 * packs) dst[4 * packs + t] = convert_value<D>(src[4 * packs + t]);
}

// dst (…) = cast(src (…)) four elements at a time where both operands' innermost dim is
// contiguous and a multiple of four long and every other stride a multiple of four (a
// bias broadcast over rows, heads gathered from a projection): P is the layout of the
// packs (the innermost size divided by four, its stride four elements), `packs` of them.
template <class S, class D>
__global__ void copy_packs_kernel(Strided<2> P, D* dst, const S* src, int64_t packs) {
  KILN_GRID_STRIDE_LOOP(i, packs) {
    int64_t off[2];
    P.offsets(i, off);
    const Pack4<S> a = *reinterpret_cast<const Pack4<S>*>(src + off[1]);
    Pack4<D> b;
#pragma unroll
    for (int j = 0; j < 4; ++j) b.v[j] = convert_value<D>(a.v[j]);
    *reinterpret_cast<Pack4<D>*>(dst + off[0]) = b;
  }
}

// L's layout in packs of four elements, when copy_packs_kernel can take it (see there).
bool packs_layout(const Strided<2>& L, Strided<2>& P) {
  const int last = L.ndim - 1;
  if (L.strides[0][last] != 1 || L.strides[1][last] != 1 || L.sizes[last] % 4 != 0) return false;
  for (int d = 0; d < last; ++d)
    if (L.strides[0][d] % 4 != 0 || L.strides[1][d] % 4 != 0) return false;
  P = L;
  P.sizes[last] /= 4;
  P.strides[0][last] = P.strides[1][last] = 4;
  if (P.fits31) P.div[last] = FastDiv(static_cast<uint32_t>(P.sizes[last]));
  return true;
}

// visit_dtype, plus bfloat16: the copy kernel is the one that converts it.
template <class F>
void visit_copy_type(DType t, F&& f) {
  if (t == kBFloat16) return f(TypeTag<bfloat16>{});
  visit_dtype(t, std::forward<F>(f));
}

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Both on the same GPU, whose device is current.
void device_copy(const Tensor& src, const Tensor& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t s = stream_of(dst);
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes(dst), cudaMemcpyDeviceToDevice, s), "copy");
    return;
  }
  Strided<2> L = make_strided<2>("copy", {&dst, &src});
  const bool dense = L.ndim == 1 && L.strides[0][0] == 1 && L.strides[1][0] == 1;
  Strided<2> P;
  const bool packs = !dense && packs_layout(L, P);
  visit_copy_type(src.dtype(), [&](auto st) {
    using S = typename decltype(st)::type;
    visit_copy_type(dst.dtype(), [&](auto dt) {
      using D = typename decltype(dt)::type;
      auto* d = static_cast<D*>(dst.data_ptr());
      const auto* p = static_cast<const S*>(src.data_ptr());
      const bool aligned = pack_aligned<S>(p) && pack_aligned<D>(d);
      if (dense && aligned)
        copy_contiguous_kernel<S, D><<<grid_for(std::max<int64_t>(n / 4, 1)), kThreads, 0, s>>>(d, p, n);
      else if (packs && aligned)
        copy_packs_kernel<S, D><<<grid_for(n / 4), kThreads, 0, s>>>(P, d, p, n / 4);
      else
        copy_kernel<S, D><<<grid_for(n), kThreads, 0, s>>>(L, d, p, n);
    });
  });
  KILN_CUDA_LAUNCH_CHECK("copy");
}

// t itself when contiguous, else a contiguous CPU copy of it.
Tensor contiguous_on_cpu(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
  cpu::cpu_backend().copy(t, c);
  return c;
}

// CPU -> GPU. From pageable memory cudaMemcpyAsync returns once the bytes are staged,
// so the host buffer may be reused as soon as this returns.
void host_to_device(const Tensor& src, const Tensor& dst) {
  DeviceGuard guard(dst);
  cudaStream_t s = stream_of(dst);
  Tensor h = contiguous_on_cpu(src);
  if (dst.is_contiguous() && dst.dtype() == h.dtype()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), h.data_ptr(), nbytes(h), cudaMemcpyHostToDevice, s), "copy");
    return;
  }
  // Through a contiguous device buffer in the source dtype; the cast runs on the GPU.
  Tensor staged = Tensor::empty(src.shape(), TensorOptions(src.dtype()).device(dst.device()));
  KILN_CUDA_CHECK(cudaMemcpyAsync(staged.data_ptr(), h.data_ptr(), nbytes(h), cudaMemcpyHostToDevice, s), "copy");
  device_copy(staged, dst);
}

// GPU -> CPU; waits for the device, so the values are there when this returns.
void device_to_host(const Tensor& src, const Tensor& dst) {
  DeviceGuard guard(src);
  cudaStream_t s = stream_of(src);
  Tensor d = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {  // cast and gather on the GPU
    d = Tensor::empty(src.shape(), TensorOptions(dst.dtype()).device(src.device()));
    device_copy(src, d);
  }
  Tensor h = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), TensorOptions(dst.dtype()));
  KILN_CUDA_CHECK(cudaMemcpyAsync(h.data_ptr(), d.data_ptr(), nbytes(d), cudaMemcpyDeviceToHost, s), "copy");
  synchronize_stream(src.device().index, "copy");
  if (!dst.is_contiguous()) cpu::cpu_backend().copy(h, dst);
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  const bool from_gpu = src.device().is_cuda(), to_gpu = dst.device().is_cuda();
  if (from_gpu && to_gpu) {
    if (src.device() == dst.device()) {
      DeviceGuard guard(dst);
      device_copy(src, dst);
      return;
    }
    // Between two GPUs: through the host (simple, and rare in Kiln's use).
    Tensor h = Tensor::empty(src.shape(), TensorOptions(src.dtype()));
    device_to_host(src, h);
    host_to_device(h, dst);
    return;
  }
  if (to_gpu) return host_to_device(src, dst);
  if (from_gpu) return device_to_host(src, dst);
  cpu::cpu_backend().copy(src, dst);
}

}  // namespace kiln::cuda
