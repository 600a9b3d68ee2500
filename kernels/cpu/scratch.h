// Grow-only per-thread scratch buffers for the CPU kernels' temporaries (column matrices,
// widened copies, FP32 sums): reused from call to call, never initialised, so after the first
// steps a training step neither allocates nor page-faults for them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>

namespace kernels::cpu {

// Buffers one kernel call may hold at once; calls into these kernels never nest.
constexpr int kScratchSlots = 6;

namespace detail {
struct ScratchSlots {
  void* p[kScratchSlots] = {};
  size_t bytes[kScratchSlots] = {};
  ~ScratchSlots() {
    for (void* q : p) std::free(q);
  }
};
inline ScratchSlots& scratch_slots() {
  thread_local ScratchSlots s;
  return s;
}
}  // namespace detail

// n elements of uninitialised A in slot `slot` of this thread (64-byte aligned). The memory
// stays valid until the same slot is asked for again.
template <class A> A* scratch(int slot, int64_t n) {
  detail::ScratchSlots& s = detail::scratch_slots();
  const size_t need = (static_cast<size_t>(n > 0 ? n : 1) * sizeof(A) + 63) / 64 * 64;
  if (need > s.bytes[slot]) {
    std::free(s.p[slot]);
    s.p[slot] = std::aligned_alloc(64, need);
    if (!s.p[slot]) {
      s.bytes[slot] = 0;
      throw std::bad_alloc();
    }
    s.bytes[slot] = need;
  }
  return static_cast<A*>(s.p[slot]);
}

}  // namespace kernels::cpu
