// What the hardware tile units (AMX and AVX512-BF16 CPUs, both with AVX-512) do around the tiles:
// the store (VCVTNE2PS2BF16) and the 32 x 32 transposes the filter gradient needs. The same bits
// as EmulatedTiles' portable twins. Include only where the avx512bf16 target is on.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace kernels::cpu::amx {
// Internal linkage: this header is also compiled under the AMX and AVX-512 target pragmas
// (gemm_amx_hw.cpp, tiles_avx512_bf16.cpp), and no copy of its code compiled there may be
// the one a generic caller links to.
namespace {

inline void round_row_avx512_bf16(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu) {
  const __mmask16 lo = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
  const __mmask16 hi = n >= 32 ? __mmask16(0xffff) : n > 16 ? __mmask16((1u << (n - 16)) - 1u) : __mmask16(0);
  __m512 a = _mm512_maskz_loadu_ps(lo, sum), b = _mm512_maskz_loadu_ps(hi, sum + 16);
  if (bias) {
    a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(lo, bias));
    b = _mm512_add_ps(b, _mm512_maskz_loadu_ps(hi, bias + 16));
  }
  if (relu) {  // MAXPS returns its second operand for a NaN or two zeros: x > 0 ? x : +0
    // (the masked form: GCC 12's _mm512_max_ps trips -Wmaybe-uninitialized in its own header)
    const __m512 zero = _mm512_setzero_ps();
    a = _mm512_mask_max_ps(a, __mmask16(0xffff), a, zero);
    b = _mm512_mask_max_ps(b, __mmask16(0xffff), b, zero);
  }
  const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in the low 16 words
  _mm512_mask_storeu_epi16(out, (__mmask32(hi) << 16) | lo, packed);
}

// dst[j][i] = src[i][j] for 32 x 32 16-bit values (row strides in elements): five rounds of
// two-register permutes, each swapping the off-diagonal halves of ever smaller blocks.
inline void transpose32_avx512(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  __m512i r[32];
  for (int i = 0; i < 32; ++i) r[i] = _mm512_loadu_si512(src + i * src_stride);
  for (int b = 16; b >= 1; b /= 2) {
    alignas(64) uint16_t lo_idx[32], hi_idx[32];
    for (int j = 0; j < 32; ++j) {
      lo_idx[j] = static_cast<uint16_t>((j & b) ? 32 + j - b : j);  // row i: its own low half, then row i + b's
      hi_idx[j] = static_cast<uint16_t>((j & b) ? 32 + j : j + b);  // row i + b: row i's high half, then its own
    }
    const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
    for (int i = 0; i < 32; ++i)
      if (!(i & b)) {
        const __m512i x = r[i], y = r[i + b];
        r[i] = _mm512_permutex2var_epi16(x, lo, y);
        r[i + b] = _mm512_permutex2var_epi16(x, hi, y);
      }
  }
  for (int i = 0; i < 32; ++i) _mm512_storeu_si512(dst + i * dst_stride, r[i]);
}

}  // namespace
}  // namespace kernels::cpu::amx
