// Intel AMX tiles for the BF16 matrix kernels: the LDTILECFG block, a portable emulation of the
// tile instructions with the same data layout and arithmetic (so the packing, tiling and tail
// logic runs and is tested on every machine), and the hardware instructions behind the same
// interface. Facts: ../shared/CPU-MATRIX-UNITS.md and Intel's SDM (TDPBF16PS).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/numeric.h"

namespace kernels::cpu::amx {

constexpr int kTileRows = 16;   // rows per tile
constexpr int kTileBytes = 64;  // bytes per tile row
constexpr int kTiles = 8;

// The 64-byte operand of LDTILECFG: palette 1, then bytes per row and rows for each tile.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// DAZ on inputs and FTZ on results, as TDPBF16PS does whatever MXCSR says: a subnormal is a
// zero of the same sign. (Tininess is judged on the rounded result here; if the hardware
// judges it before rounding, the two can differ only for results that round up to FLT_MIN.)
inline float flush_subnormal(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.f, x) : x; }

// One step of TDPBF16PS for one lane: c + a * b as one FP32 FMA (the product of two BF16
// values is exact in FP32, so an FMA and a multiply-then-add round the same way unless the
// product underflows), inputs and result flushed.
inline float bf16_fma_daz_ftz(uint16_t a, uint16_t b, float c) {
  return flush_subnormal(std::fma(flush_subnormal(bf16_bits_to_float(a)), flush_subnormal(bf16_bits_to_float(b)),
                                  flush_subnormal(c)));
}

// The tile registers in memory, each instruction written out as Intel's SDM gives it.
class EmulatedTiles {
 public:
  void configure(const TileConfig& cfg) {
    cfg_ = cfg;
    std::memset(t_, 0, sizeof t_);
  }
  template <int T> void zero() { std::memset(t_[T], 0, sizeof t_[T]); }
  // TILELOADD: rows[T] rows of colsb[T] bytes from base + r * stride; the rest of the tile is zero.
  template <int T> void load(const void* base, int64_t stride) {
    zero<T>();
    for (int r = 0; r < cfg_.rows[T]; ++r)
      std::memcpy(t_[T][r], static_cast<const uint8_t*>(base) + r * stride, cfg_.colsb[T]);
  }
  template <int T> void store(void* base, int64_t stride) const {
    for (int r = 0; r < cfg_.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, t_[T][r], cfg_.colsb[T]);
  }
  // TDPBF16PS C, A, B: for each row m of C and each pair k of A's row, the even then the odd
  // BF16 product of A[m] pair k with B row k's pair in column n, added into C[m][n].
  template <int C, int A, int B> void dpbf16ps() {
    for (int m = 0; m < cfg_.rows[C]; ++m) {
      float acc[16];
      std::memcpy(acc, t_[C][m], sizeof acc);
      const uint16_t* a = reinterpret_cast<const uint16_t*>(t_[A][m]);
      for (int k = 0; k < cfg_.colsb[A] / 4; ++k) {
        const uint16_t* b = reinterpret_cast<const uint16_t*>(t_[B][k]);
        for (int n = 0; n < cfg_.colsb[C] / 4; ++n) {
          acc[n] = bf16_fma_daz_ftz(a[2 * k], b[2 * n], acc[n]);
          acc[n] = bf16_fma_daz_ftz(a[2 * k + 1], b[2 * n + 1], acc[n]);
        }
      }
      std::memcpy(t_[C][m], acc, sizeof acc);
    }
  }
  void release() {}

 private:
  TileConfig cfg_;
  alignas(64) uint8_t t_[kTiles][kTileRows][kTileBytes] = {};
};

// The instructions themselves. Their intrinsics need the amx-tile/amx-bf16 target, so only the
// file that includes this after `#pragma GCC target("amx-tile,amx-bf16")` defines
// KERNELS_AMX_HARDWARE and may use it (kernels/cpu/gemm_amx_hw.cpp).
// The intrinsics paste the tile number into the instruction's text, so each tile and each
// (C, A, B) the GEMM uses gets its own specialisation, spelled out.
#if defined(KERNELS_AMX_HARDWARE)
class HardwareTiles {
 public:
  void configure(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
  template <int T> void zero();
  template <int T> void load(const void* base, int64_t stride);
  template <int T> void store(void* base, int64_t stride) const;
  template <int C, int A, int B> void dpbf16ps();
  void release() { _tile_release(); }
};
#define KERNELS_AMX_TILE(N)                                                                               \
  template <> inline void HardwareTiles::zero<N>() { _tile_zero(N); }                                     \
  template <> inline void HardwareTiles::load<N>(const void* base, int64_t stride) { _tile_loadd(N, base, stride); } \
  template <> inline void HardwareTiles::store<N>(void* base, int64_t stride) const { _tile_stored(N, base, stride); }
KERNELS_AMX_TILE(0)
KERNELS_AMX_TILE(1)
KERNELS_AMX_TILE(2)
KERNELS_AMX_TILE(3)
KERNELS_AMX_TILE(4)
KERNELS_AMX_TILE(5)
KERNELS_AMX_TILE(6)
KERNELS_AMX_TILE(7)
#undef KERNELS_AMX_TILE
template <> inline void HardwareTiles::dpbf16ps<0, 4, 6>() { _tile_dpbf16ps(0, 4, 6); }
template <> inline void HardwareTiles::dpbf16ps<1, 4, 7>() { _tile_dpbf16ps(1, 4, 7); }
template <> inline void HardwareTiles::dpbf16ps<2, 5, 6>() { _tile_dpbf16ps(2, 5, 6); }
template <> inline void HardwareTiles::dpbf16ps<3, 5, 7>() { _tile_dpbf16ps(3, 5, 7); }
#endif

// B for TDPBF16PS ("VNNI layout"): element (k, n) of a K x 16 block sits in row k / 2 (32 BF16
// values, 64 bytes), at pair n, half k % 2: its index within the block.
inline int64_t vnni_index(int64_t k, int64_t n) { return (k / 2) * 32 + n * 2 + (k % 2); }

}  // namespace kernels::cpu::amx
