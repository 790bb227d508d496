#pragma once
// Flushing denormal (subnormal) floating-point numbers to zero on the CPU, as
// torch.set_flush_denormal. A float32 result below 2^-126 in magnitude (float64: 2^-1022)
// is normally kept as a subnormal, and on x86 an instruction that makes or reads one can
// take a microcode assist of a hundred cycles or more. Training meets them where a
// softmax saturates: the seed Transformer's first layers, at initialization, fed
// embeddings scaled by sqrt(d_model), hand their attention gradients rows of them, and
// the GEMMs that read those rows ran 5-6x slower (benchmarks/history/).

namespace kiln {

// on: every float32 and float64 result that would be subnormal is zero (x86 FTZ) and
// every subnormal operand is read as zero (DAZ; on AArch64 FPCR.FZ does both), on the
// calling thread and on Kiln's worker threads while they run Kiln's kernels (the threads'
// own setting is restored after each task, so other TBB work is left as it was).
// off: the calling thread keeps IEEE subnormals again, and Kiln's tasks stop setting the
// mode. Off is the default, as in PyTorch. Returns true where the CPU can flush (x86 with
// SSE3, AArch64); elsewhere false, changing nothing. The CUDA backend is not affected.
bool set_flush_denormal(bool on);

// Whether Kiln's tasks flush denormals: the last successful set_flush_denormal.
bool flush_denormal();

namespace cpu {

// While alive, the calling thread flushes denormals if set_flush_denormal(true) is in
// force; its own setting comes back at the end. Nothing is touched when it is off.
// Every task of parallel_for holds one.
class DenormalScope {
 public:
  DenormalScope();
  ~DenormalScope();
  DenormalScope(const DenormalScope&) = delete;
  DenormalScope& operator=(const DenormalScope&) = delete;

 private:
  unsigned long saved_ = 0;
  bool changed_ = false;
};

}  // namespace cpu
}  // namespace kiln
