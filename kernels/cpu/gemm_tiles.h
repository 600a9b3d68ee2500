// The tile GEMM, written once over a tile type (amx::EmulatedTiles, amx::HardwareTiles or
// amx::Avx512Bf16Tiles): the block loop on packed operands (tile_gemm_blocks), the packers that
// make those operands, and gemm()'s contract on top (tile_gemm). Operands are zero-padded to
// multiples of 32 (padding adds zero products, so tails need no code of their own); each 32 x 32
// block of C is four accumulator tiles, fed per 32 K values by two A tiles (16 rows x 32 BF16,
// straight from the packed rows) and two B tiles (16 pairs of K x 16 columns, VNNI layout).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/numeric.h"

namespace kernels::cpu::amx {
// Internal linkage: this header is also compiled under the AMX and AVX-512 target pragmas
// (gemm_amx_hw.cpp, tiles_avx512_bf16.cpp), and no copy of its code compiled there may be
// the one a generic caller links to.
namespace {

// The four C tiles of a 32 x 32 block as one row-major 32 x 32 FP32 array (row pitch 32): tile
// i holds rows 16 * (i / 2) and columns 16 * (i % 2) of the block.
template <class Tiles> void store_block(Tiles& t, float* block) {
  t.template store<0>(block, 128);
  t.template store<1>(block + 16, 128);
  t.template store<2>(block + 512, 128);
  t.template store<3>(block + 528, 128);
}
template <class Tiles> void load_block(Tiles& t, const float* block) {
  t.template load<0>(block, 128);
  t.template load<1>(block + 16, 128);
  t.template load<2>(block + 512, 128);
  t.template load<3>(block + 528, 128);
}
template <class Tiles> void zero_block(Tiles& t) {
  t.template zero<0>();
  t.template zero<1>();
  t.template zero<2>();
  t.template zero<3>();
}
// Two A tiles (a and a + 16 rows of a_stride bytes), two B tiles (b0, b1; b_stride bytes a pair
// row) into the four accumulators.
template <class Tiles>
void block_step(Tiles& t, const bfloat16* a0, const bfloat16* a1, int64_t a_stride, const bfloat16* b0,
                const bfloat16* b1, int64_t b_stride) {
  t.template load<4>(a0, a_stride);
  t.template load<6>(b0, b_stride);
  t.template dpbf16ps<0, 4, 6>();
  t.template load<7>(b1, b_stride);
  t.template dpbf16ps<1, 4, 7>();
  t.template load<5>(a1, a_stride);
  t.template dpbf16ps<2, 5, 6>();
  t.template dpbf16ps<3, 5, 7>();
}

// Where the block loop finds a panel of B: VNNI block j (16 columns) of the panel at
// base + j * pitch, its pair rows starting at the panel's first K value.
struct BPanel {
  const bfloat16* base;
  int64_t pitch;
};

// C = A * B over 32 x 32 blocks, in parallel: A is Mp rows of Kp BF16 (row pitch lda elements);
// B comes in panels of columns [n0, n0 + nc) and K values [k0, k0 + kc), from
// panel_b(n0, nc, k0, kc), which every thread of the team calls (it may fill a shared buffer
// with an orphaned `omp for`; the block loop's barrier keeps the previous panel in use until all
// are done with it). Mp, Np and Kp are multiples of 32. Each finished block goes to
// store(i0, j0, block) (store_block's layout) on the thread that computed it. Panels hold at
// most kPanelBytes of B, so every row block reuses one from L2 (rows run in order, so
// consecutive blocks share A); across K chunks each block's sums wait in FP32 in scratch slot 8.
constexpr int64_t kPanelBytes = int64_t(1) << 19, kPanelMaxK = 1024;
inline int64_t panel_k(int64_t Kp) { return std::min(Kp, kPanelMaxK); }
inline int64_t panel_n(int64_t Np, int64_t Kp) {
  return std::clamp<int64_t>(kPanelBytes / (2 * panel_k(Kp)) / 32 * 32, 32, Np);
}

template <class Tiles, class PanelB, class Store>
void tile_gemm_panels(int64_t Mp, int64_t Np, int64_t Kp, const bfloat16* a, int64_t lda, PanelB&& panel_b,
                      Store&& store) {
  const int64_t kc = panel_k(Kp), nc = panel_n(Np, Kp), blocks_m = Mp / 32;
  float* partial = Kp > kc ? scratch<float>(8, Mp * nc) : nullptr;
#pragma omp parallel if (blocks_m * Np / 32 > 1)
  {
    Tiles t;  // a tile configuration per thread
    t.configure(gemm_tile_config());
    alignas(64) float block[32 * 32];
    for (int64_t n0 = 0; n0 < Np; n0 += nc) {
      const int64_t ncols = std::min(nc, Np - n0), blocks_n = ncols / 32, blocks = blocks_m * blocks_n;
      for (int64_t k0 = 0; k0 < Kp; k0 += kc) {
        const int64_t k1 = std::min(Kp, k0 + kc);
        const bool first = k0 == 0, last = k1 == Kp;
        const BPanel bp = panel_b(n0, ncols, k0, k1 - k0);
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk / blocks_n * 32, jn = blk % blocks_n * 32;
          float* part = partial ? partial + blk * 1024 : nullptr;
          if (first) zero_block(t);
          else load_block(t, part);
          const bfloat16* a0 = a + i0 * lda;
          const bfloat16* b0 = bp.base + (jn / 16) * bp.pitch;
          for (int64_t k = k0; k < k1; k += 32)
            block_step(t, a0 + k, a0 + 16 * lda + k, 2 * lda, b0 + (k - k0) * 16, b0 + bp.pitch + (k - k0) * 16,
                       kTileBytes);
          if (last) {
            store_block(t, block);
            store(i0, n0 + jn, static_cast<const float*>(block));
          } else {
            store_block(t, part);
          }
        }  // the implied barrier: the next K chunk loads these sums, the next panel may be refilled
      }
    }
    t.release();
  }
}

// The same with all of B packed beforehand: Np / 16 VNNI blocks of Kp / 2 pair rows x 16
// columns (block pitch Kp * 16).
template <class Tiles, class Store>
void tile_gemm_blocks(int64_t Mp, int64_t Np, int64_t Kp, const bfloat16* a, int64_t lda, const bfloat16* b,
                      Store&& store) {
  tile_gemm_panels<Tiles>(
      Mp, Np, Kp, a, lda,
      [&](int64_t n0, int64_t, int64_t k0, int64_t) { return BPanel{b + (n0 / 16) * Kp * 16 + k0 * 16, Kp * 16}; },
      store);
}

// ---- packers ---------------------------------------------------------------------------------
// A: rows x cols of src (element (i, k) at src[i * ld + k], or at src[k * ld + i] when
// `transposed`) into Mp rows of Kp, zero beyond.
inline void pack_a(bool transposed, int64_t rows, int64_t cols, const bfloat16* src, int64_t ld, int64_t Mp,
                   int64_t Kp, bfloat16* dst) {
  const bfloat16 zero = bfloat16::from_bits(0);
#pragma omp parallel for if (Mp * Kp > (1 << 16))
  for (int64_t i = 0; i < Mp; ++i) {
    bfloat16* d = dst + i * Kp;
    int64_t k = 0;
    if (i < rows) {
      if (!transposed) {
        std::memcpy(d, src + i * ld, sizeof(bfloat16) * cols);
        k = cols;
      } else {
        for (; k < cols; ++k) d[k] = src[k * ld + i];
      }
    }
    std::fill(d + k, d + Kp, zero);
  }
}

// B in VNNI blocks from K x N data (element (k, n) at src[k * ld + n]): pair row k / 2 of block
// n / 16 interleaves rows k and k + 1 of src.
inline void pack_b_from_rows(int64_t K, int64_t N, const bfloat16* src, int64_t ld, int64_t Np, int64_t Kp,
                             bfloat16* dst) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
#pragma omp parallel for collapse(2) if (Np * Kp > (1 << 16))
  for (int64_t jb = 0; jb < Np / 16; ++jb)
    for (int64_t kk = 0; kk < Kp / 2; ++kk) {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst) + jb * Kp * 16 + kk * 32;
      const int64_t k = 2 * kk, n0 = jb * 16;
      if (k + 1 < K && n0 + 16 <= N) {  // whole: two rows of 16 interleaved
        const uint16_t *r0 = s + k * ld + n0, *r1 = r0 + ld;
        for (int64_t c = 0; c < 16; ++c) {
          d[2 * c] = r0[c];
          d[2 * c + 1] = r1[c];
        }
        continue;
      }
      for (int64_t c = 0; c < 16; ++c) {
        const int64_t n = n0 + c;
        d[2 * c] = n < N && k < K ? s[k * ld + n] : 0;
        d[2 * c + 1] = n < N && k + 1 < K ? s[(k + 1) * ld + n] : 0;
      }
    }
}

// B in VNNI blocks from N x K data (element (k, n) at src[n * ld + k]): a pair (k, k + 1) of
// column n is already adjacent in src, so each pair row is 16 four-byte copies.
inline void pack_b_from_columns(int64_t K, int64_t N, const bfloat16* src, int64_t ld, int64_t Np, int64_t Kp,
                                bfloat16* dst) {
  const bfloat16 zero = bfloat16::from_bits(0);
#pragma omp parallel for collapse(2) if (Np * Kp > (1 << 16))
  for (int64_t jb = 0; jb < Np / 16; ++jb)
    for (int64_t kk = 0; kk < Kp / 2; ++kk) {
      bfloat16* d = dst + jb * Kp * 16 + kk * 32;
      const int64_t k = 2 * kk;
      for (int64_t c = 0; c < 16; ++c) {
        const int64_t n = jb * 16 + c;
        const bfloat16* s = src + n * ld + k;
        d[2 * c] = n < N && k < K ? s[0] : zero;
        d[2 * c + 1] = n < N && k + 1 < K ? s[1] : zero;
      }
    }
}

// ---- gemm()'s contract ------------------------------------------------------------------------
template <class Tiles, class Out>
void tile_gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A, int64_t lda,
               const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t Mp = round_up32(M), Np = round_up32(N);
  const bool use_ab = alpha != 0.0 && K > 0;
  // alpha == 0 or K == 0: A and B are not read; the packed operands are one zero K block.
  const int64_t Kp = use_ab ? round_up32(K) : 32;
  bfloat16* ap = scratch<bfloat16>(6, Mp * Kp);  // slots the convolutions calling this leave free
  bfloat16* bp = scratch<bfloat16>(7, Np * Kp);
  if (use_ab) {
    pack_a(ta == Trans::T, M, K, A, lda, Mp, Kp, ap);
    if (tb == Trans::N) pack_b_from_rows(K, N, B, ldb, Np, Kp, bp);
    else pack_b_from_columns(K, N, B, ldb, Np, Kp, bp);
  } else {
    std::fill(ap, ap + Mp * Kp, bfloat16::from_bits(0));
    std::fill(bp, bp + Np * Kp, bfloat16::from_bits(0));
  }
  // With no products the sums are +0; a +0 factor keeps them so (a negative alpha would make -0).
  const float fa = use_ab ? static_cast<float>(alpha) : 0.f, fb = static_cast<float>(beta);
  tile_gemm_blocks<Tiles>(Mp, Np, Kp, ap, Kp, bp, [&](int64_t i0, int64_t j0, const float* block) {
    const int64_t cn = std::min<int64_t>(32, N - j0);
    for (int64_t r = 0; r < 32 && i0 + r < M; ++r) {
      Out* out = C + (i0 + r) * ldc + j0;
      const float* sum = block + r * 32;
      if (beta == 0.0) {
        for (int64_t c = 0; c < cn; ++c) out[c] = store_simd<Out>(fa * sum[c]);
      } else {  // an explicit FMA: every instantiation rounds the same, whatever contraction does
        for (int64_t c = 0; c < cn; ++c) out[c] = store_simd<Out>(std::fma(fb, load_simd(out[c]), fa * sum[c]));
      }
    }
  });
}

}  // namespace
}  // namespace kernels::cpu::amx
