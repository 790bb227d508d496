#pragma once
// The reference backend: the required core of Backend (copy, fill, arange, unary,
// binary, where, reduce, matmul, the random fills, gather, scatter, index_add) in plain
// loops over host memory, one element at a time, and nothing else. Every fused kernel
// runs as the base class composes it (composed_kernels.cpp); cumsum, sort, topk and
// multinomial take the base's host staging. It is the proof that the core suffices and
// the pattern for a new device: KILN_CPU_BACKEND=reference (or
// register_backend(DeviceType::CPU, &reference_backend())) runs every CPU op through it.
// Its random fills draw the CPU backend's streams, so the same seeds give the same
// numbers.
#include "../backend.h"

namespace kiln {

class ReferenceBackend final : public Backend {
 public:
  Device device() const override { return kCPU; }
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) override;
  void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out,
              const Tensor* indices) override;
  using Backend::matmul;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) override;
  void uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) override;
  void normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) override;
  void bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) override;
  void randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) override;
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override;
  void index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha) override;
};

ReferenceBackend& reference_backend();

}  // namespace kiln
