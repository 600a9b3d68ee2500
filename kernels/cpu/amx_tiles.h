// Intel AMX tiles for the BF16 matrix kernels: the LDTILECFG block and a portable emulation of
// the tile instructions with the same data layout and arithmetic, so the packing, tiling and
// tail logic runs and is tested on every machine (the instructions themselves, behind the same
// interface: amx_hw_tiles.h). Facts: ../shared/CPU-MATRIX-UNITS.md and Intel's SDM (TDPBF16PS).
#pragma once

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/error.h"
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

// DAZ on inputs and FTZ on results, as the tile instructions do whatever MXCSR says: a
// subnormal input is a zero of the same sign.
inline float daz(float x) { return std::fabs(x) < FLT_MIN ? std::copysign(0.f, x) : x; }

// One FP32 FMA c + a * b with DAZ and FTZ, round to nearest even. x86 judges tininess after
// rounding with an unbounded exponent (SDM Vol. 1, 4.9.1.5): a result whose 24-bit rounding
// stays below FLT_MIN, i.e. whose exact value is below FLT_MIN - 2^-151, becomes a zero. The
// double FMA decides that (its one rounding is far finer than 2^-151 there); fmaf gives the value.
inline float fma_daz_ftz(float a, float b, float c) {
  a = daz(a), b = daz(b), c = daz(c);
  const float r = std::fmaf(a, b, c);
  const double exact = std::fma(double(a), double(b), double(c));
  return std::fabs(exact) < 0x1.ffffffp-127 ? std::copysign(0.f, r) : r;
}
inline float add_daz_ftz(float a, float b) { return fma_daz_ftz(a, 1.f, b); }

// Tiles 0-3: C (16 rows x 16 FP32); 4, 5: A (16 rows x 32 BF16); 6, 7: B (16 pair rows x 16
// columns): the configuration of the tile GEMM (gemm_tiles.h).
inline TileConfig gemm_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = kTileBytes;
  }
  return c;
}
inline int64_t round_up32(int64_t v) { return (v + 31) / 32 * 32; }

// The tile registers in memory, each instruction written out as Intel's SDM defines it.
class EmulatedTiles {
 public:
  void configure(const TileConfig& cfg) {
    ENGINE_CHECK(cfg.palette == 1 && cfg.start_row == 0, "LDTILECFG: palette 1 and start row 0 expected");
    for (int t = 0; t < kTiles; ++t)
      ENGINE_CHECK(cfg.rows[t] <= kTileRows && cfg.colsb[t] <= kTileBytes && (cfg.rows[t] == 0) == (cfg.colsb[t] == 0),
                   "LDTILECFG: tile " << t << " has " << int(cfg.rows[t]) << " rows of " << cfg.colsb[t] << " bytes");
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
  // TDPBF16PS C, A, B as the SDM's Operation section has it: for each row m, two FP32 lanes per
  // column n, started at zero, take the even and the odd product of each pair k of A[m] with
  // B row k's pair n (one FMA each); then C[m][n] += (even lane + odd lane). The shape rules
  // the hardware enforces with #UD are checked.
  template <int C, int A, int B> void dpbf16ps() {
    static_assert(C != A && C != B && A != B, "TDPBF16PS: the three tiles must differ");
    ENGINE_CHECK(cfg_.rows[C] == cfg_.rows[A] && cfg_.colsb[A] / 4 == cfg_.rows[B] && cfg_.colsb[B] == cfg_.colsb[C],
                 "TDPBF16PS: tile shapes do not fit (the hardware raises #UD)");
    for (int m = 0; m < cfg_.rows[C]; ++m) {
      float lanes[32] = {}, row[16];
      const uint16_t* a = reinterpret_cast<const uint16_t*>(t_[A][m]);
      for (int k = 0; k < cfg_.colsb[A] / 4; ++k) {
        const uint16_t* b = reinterpret_cast<const uint16_t*>(t_[B][k]);
        for (int n = 0; n < cfg_.colsb[C] / 4; ++n) {
          lanes[2 * n] = fma_daz_ftz(bf16_bits_to_float(a[2 * k]), bf16_bits_to_float(b[2 * n]), lanes[2 * n]);
          lanes[2 * n + 1] =
              fma_daz_ftz(bf16_bits_to_float(a[2 * k + 1]), bf16_bits_to_float(b[2 * n + 1]), lanes[2 * n + 1]);
        }
      }
      std::memcpy(row, t_[C][m], sizeof row);
      for (int n = 0; n < cfg_.colsb[C] / 4; ++n)
        row[n] = add_daz_ftz(row[n], add_daz_ftz(lanes[2 * n], lanes[2 * n + 1]));
      std::memset(t_[C][m], 0, kTileBytes);  // write_row_and_zero: the bytes past colsb are zero
      std::memcpy(t_[C][m], row, cfg_.colsb[C]);
    }
    for (int m = cfg_.rows[C]; m < kTileRows; ++m) std::memset(t_[C][m], 0, kTileBytes);  // zero_upper_rows
  }
  // TDPBUSD C, A, B: C[m][n] (int32) += the four products of A[m]'s byte quad k (unsigned) with
  // B row k's quad n (signed), for every k; int32 arithmetic wraps, as the SDM's has it.
  template <int C, int A, int B> void dpbusd() {
    static_assert(C != A && C != B && A != B, "TDPBUSD: the three tiles must differ");
    ENGINE_CHECK(cfg_.rows[C] == cfg_.rows[A] && cfg_.colsb[A] / 4 == cfg_.rows[B] && cfg_.colsb[B] == cfg_.colsb[C],
                 "TDPBUSD: tile shapes do not fit (the hardware raises #UD)");
    for (int m = 0; m < cfg_.rows[C]; ++m) {
      uint32_t row[16];
      std::memcpy(row, t_[C][m], sizeof row);
      for (int k = 0; k < cfg_.colsb[A] / 4; ++k)
        for (int n = 0; n < cfg_.colsb[C] / 4; ++n) {
          int32_t dot = 0;
          for (int i = 0; i < 4; ++i)
            dot += int32_t{t_[A][m][4 * k + i]} * int32_t{static_cast<int8_t>(t_[B][k][4 * n + i])};
          row[n] += static_cast<uint32_t>(dot);
        }
      std::memset(t_[C][m], 0, kTileBytes);
      std::memcpy(t_[C][m], row, cfg_.colsb[C]);
    }
    for (int m = cfg_.rows[C]; m < kTileRows; ++m) std::memset(t_[C][m], 0, kTileBytes);
  }
  void release() {}
  // The tile kernels' store: n <= 32 FP32 sums plus bias (may be null), then ReLU when asked
  // (x > 0 ? x : +0, as kernels/element_math.h: a NaN gives 0), rounded to BF16 as
  // VCVTNE2PS2BF16 does on the hardware units (float_to_bf16_bits_ftz).
  static void round_row(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu = false) {
    uint16_t* o = reinterpret_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) {
      const float v = bias ? sum[i] + bias[i] : sum[i];
      o[i] = float_to_bf16_bits_ftz(relu ? (v > 0.f ? v : 0.f) : v);
    }
  }
  // dst[j][i] = src[i][j] for 32 x 32 16-bit values (row strides in elements).
  static void transpose32(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
    for (int j = 0; j < 32; ++j)
      for (int i = 0; i < 32; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
  }

 private:
  TileConfig cfg_;
  alignas(64) uint8_t t_[kTiles][kTileRows][kTileBytes] = {};
};


// GFLOP/s of dpbf16ps on resident operands (every tile zero) for about `seconds`: the unit's
// peak on the calling thread, for the benchmarks to compare their rates with.
template <class Tiles> double resident_tile_gflops(double seconds) {
  Tiles t;
  t.configure(gemm_tile_config());
  alignas(64) static const uint8_t zeros[kTileRows * kTileBytes] = {};
  t.template load<4>(zeros, kTileBytes);
  t.template load<5>(zeros, kTileBytes);
  t.template load<6>(zeros, kTileBytes);
  t.template load<7>(zeros, kTileBytes);
  int64_t rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 256; ++i) {
      t.template dpbf16ps<0, 4, 6>();
      t.template dpbf16ps<1, 4, 7>();
      t.template dpbf16ps<2, 5, 6>();
      t.template dpbf16ps<3, 5, 7>();
    }
    rounds += 256;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < seconds);
  alignas(64) float sink[kTileRows * 16];
  t.template store<0>(sink, 64);  // the work is used
  t.release();
  volatile float keep = sink[0];
  (void)keep;
  return rounds * 4.0 * 2 * kTileRows * 16 * 32 / elapsed * 1e-9;
}

// B for TDPBF16PS ("VNNI layout"): element (k, n) of a K x 16 block sits in row k / 2 (32 BF16
// values, 64 bytes), at pair n, half k % 2: its index within the block.
inline int64_t vnni_index(int64_t k, int64_t n) { return (k / 2) * 32 + n * 2 + (k % 2); }

}  // namespace kernels::cpu::amx
