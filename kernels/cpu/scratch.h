// Grow-only per-thread scratch buffers for the CPU kernels' temporaries (column matrices,
// widened copies, FP32 sums): reused from call to call, never initialised, so after the first
// steps a training step neither allocates nor page-faults for them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "kernels/numeric.h"

namespace kernels::cpu {

// Buffers one kernel call may hold at once; calls into these kernels never nest, except that
// the convolutions (slots 0-5) call the matrix products: the tile GEMM packs into 6 and 7, and
// its block loop keeps sums between K chunks in 8.
constexpr int kScratchSlots = 9;

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

// FP16 arrays to and from FP32, eight values per F16C instruction where the host has it (the
// same bits as the scalar conversions: F16C both ways), else the branch-free loop.
inline void widen_half(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(KERNELS_HOST_F16C)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = load_simd(src[i]);
}
inline void narrow_half(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
#if defined(KERNELS_HOST_F16C)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = store_simd<half>(src[i]);
}

// A storage type to or from its accumulator (or a plain copy), on the calling thread.
template <class From, class To> void convert_run(const From* src, To* dst, int64_t n) {
  if constexpr (std::is_same_v<From, To>) std::memcpy(dst, src, sizeof(To) * static_cast<size_t>(n));
  else if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) widen_half(src, dst, n);
  else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) narrow_half(src, dst, n);
  else if constexpr (std::is_same_v<To, float>) for (int64_t i = 0; i < n; ++i) dst[i] = load_simd(src[i]);
  else for (int64_t i = 0; i < n; ++i) dst[i] = store_simd<To>(src[i]);
}

// The same in parallel blocks of whole cache lines.
template <class From, class To> void convert_array(const From* src, To* dst, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
#pragma omp parallel for if (n > 4 * kBlock)
  for (int64_t b = 0; b < n; b += kBlock) convert_run(src + b, dst + b, n - b < kBlock ? n - b : kBlock);
}

}  // namespace kernels::cpu
