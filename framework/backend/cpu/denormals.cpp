#include "backend/cpu/denormals.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

std::atomic<bool> g_flush{false};

// The thread's floating-point control register and the bits that flush denormals in it.
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned long kFlushBits = 0x8040;  // MXCSR: FTZ (bit 15) | DAZ (bit 6)
bool supported() { return __builtin_cpu_supports("sse3"); }  // DAZ, as PyTorch asks of the CPU
unsigned long read_control() { return _mm_getcsr(); }
void write_control(unsigned long v) { _mm_setcsr(static_cast<unsigned>(v)); }
#elif defined(__aarch64__)
constexpr unsigned long kFlushBits = 1ul << 24;  // FPCR.FZ
bool supported() { return true; }
unsigned long read_control() {
  unsigned long v;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
  return v;
}
void write_control(unsigned long v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }
#else
constexpr unsigned long kFlushBits = 0;
bool supported() { return false; }
unsigned long read_control() { return 0; }
void write_control(unsigned long) {}
#endif

}  // namespace

bool set_flush_denormal(bool on) {
  if (!supported()) return false;
  const unsigned long c = read_control();
  write_control(on ? c | kFlushBits : c & ~kFlushBits);
  g_flush.store(on, std::memory_order_relaxed);
  return true;
}

bool flush_denormal() { return g_flush.load(std::memory_order_relaxed); }

namespace cpu {

DenormalScope::DenormalScope() {
  if (!g_flush.load(std::memory_order_relaxed)) return;
  saved_ = read_control();
  if ((saved_ & kFlushBits) == kFlushBits) return;
  write_control(saved_ | kFlushBits);
  changed_ = true;
}

// Only the flush bits go back: the exception flags the task raised stay raised.
DenormalScope::~DenormalScope() {
  if (changed_) write_control((read_control() & ~kFlushBits) | (saved_ & kFlushBits));
}

}  // namespace cpu
}  // namespace kiln
