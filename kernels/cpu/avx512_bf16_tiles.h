// The tile interface of amx_tiles.h on AVX512-BF16 (VDPBF16PS), for CPUs with BF16 dot products
// in their vector units but no AMX (AMD Zen 4 and later, Intel Cooper Lake). The tile drivers
// (gemm_tiles.h, conv_tiles.h) run on it unchanged. Include only where the avx512bf16 target is
// on, after every other header (kernels/cpu/tiles_avx512_bf16.cpp does).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/avx512_tile_helpers.h"
#include "kernels/error.h"

namespace kernels::cpu::amx {
// Internal linkage: this header is also compiled under the AMX and AVX-512 target pragmas
// (gemm_amx_hw.cpp, tiles_avx512_bf16.cpp), and no copy of its code compiled there may be
// the one a generic caller links to.
namespace {

// A and B "tiles" (4-7) are only remembered, a pointer and a row stride: VDPBF16PS reads A's
// pairs as broadcast memory operands and B's rows as vectors, so nothing is copied. C tiles
// (0-3) are 16 rows of 16 FP32 in memory; each dpbf16ps holds one in 16 zmm registers while it
// runs 16 pair rows of B through it: 16 independent chains of 16 VDPBF16PS.
// Arithmetic: per column, the odd then the even product of each pair added to C, one rounding
// each, DAZ and FTZ (the SDM's Operation section): not the order TDPBF16PS sums in, so this
// path is held to the double reference's bound, not to the AMX emulation's bits.
class Avx512Bf16Tiles {
 public:
  void configure(const TileConfig& cfg) {
    for (int t = 0; t < kTiles; ++t)
      ENGINE_CHECK(cfg.rows[t] == kTileRows && cfg.colsb[t] == kTileBytes,
                   "the AVX512-BF16 tiles take full 16 x 64-byte tiles only (tile " << t << ")");
  }
  template <int T> void zero() {
    static_assert(T < 4, "only C tiles are zeroed");
    std::memset(c_[T], 0, sizeof c_[T]);
  }
  template <int T> void load(const void* base, int64_t stride) {
    if constexpr (T < 4) {
      for (int r = 0; r < kTileRows; ++r) std::memcpy(c_[T][r], static_cast<const uint8_t*>(base) + r * stride, 64);
    } else {
      src_[T - 4] = static_cast<const uint8_t*>(base);
      stride_[T - 4] = stride;
    }
  }
  template <int T> void store(void* base, int64_t stride) const {
    static_assert(T < 4, "only C tiles are stored");
    for (int r = 0; r < kTileRows; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, c_[T][r], 64);
  }
  template <int C, int A, int B> void dpbf16ps() {
    static_assert(C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7), "C in 0-3, A in 4-5, B in 6-7");
    const uint8_t* a = src_[A - 4];
    const uint8_t* b = src_[B - 4];
    const int64_t sa = stride_[A - 4], sb = stride_[B - 4];
    __m512 acc[kTileRows];
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_load_ps(c_[C][r]);
    for (int p = 0; p < kTileRows; ++p) {
      const __m512bh bv = (__m512bh)_mm512_loadu_si512(b + p * sb);
#pragma GCC unroll 16
      for (int r = 0; r < kTileRows; ++r) {
        int32_t pair;
        std::memcpy(&pair, a + r * sa + 4 * p, 4);
        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(pair), bv);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(c_[C][r], acc[r]);
  }
  void release() {}
  static void round_row(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu = false) {
    round_row_avx512_bf16(sum, bias, out, n, relu);
  }
  static void transpose32(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
    transpose32_avx512(src, src_stride, dst, dst_stride);
  }

 private:
  alignas(64) float c_[4][kTileRows][16] = {};
  const uint8_t* src_[4] = {};
  int64_t stride_[4] = {};
};

}  // namespace
}  // namespace kernels::cpu::amx
