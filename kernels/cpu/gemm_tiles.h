// The tile GEMM driver behind gemm_amx.h, written once over a tile type (amx::EmulatedTiles or
// amx::HardwareTiles). A and B are packed into zero-padded copies (M, N and K rounded up to 32:
// padding adds zero products, so tails need no code of their own); each 32 x 32 block of C is
// four accumulator tiles, fed per 32 K values by two A tiles (16 rows x 32 BF16, straight from
// the packed rows) and two B tiles (16 pairs of K x 16 columns, VNNI layout).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/numeric.h"

namespace kernels::cpu::amx {

template <class Tiles, class Out>
void tile_gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A, int64_t lda,
               const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t Mp = round_up32(M), Np = round_up32(N), Kp = round_up32(std::max<int64_t>(K, 1));
  // Packed A: Mp rows of Kp values; packed B: Np / 16 blocks of Kp / 2 rows of 16 pairs.
  bfloat16* ap = scratch<bfloat16>(6, Mp * Kp);  // slots the convolutions calling this leave free
  bfloat16* bp = scratch<bfloat16>(7, Np * Kp);
  const bfloat16 zero = bfloat16::from_bits(0);
  const bool use_ab = alpha != 0.0 && K > 0;
#pragma omp parallel for if (Mp * Kp > (1 << 16))
  for (int64_t i = 0; i < Mp; ++i)
    for (int64_t k = 0; k < Kp; ++k)
      ap[i * Kp + k] = (use_ab && i < M && k < K) ? (ta == Trans::N ? A[i * lda + k] : A[k * lda + i]) : zero;
#pragma omp parallel for if (Np * Kp > (1 << 16))
  for (int64_t j = 0; j < Np; ++j)
    for (int64_t k = 0; k < Kp; ++k)
      bp[(j / 16) * (Kp * 16) + vnni_index(k, j % 16)] =
          (use_ab && j < N && k < K) ? (tb == Trans::N ? B[k * ldb + j] : B[j * ldb + k]) : zero;

  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  const int64_t blocks_m = Mp / 32, blocks_n = Np / 32;
#pragma omp parallel if (blocks_m * blocks_n > 1)
  {
    Tiles t;  // a tile configuration per thread
    t.configure(gemm_tile_config());
    alignas(64) float cbuf[4][kTileRows * 16];
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks_m * blocks_n; ++blk) {
      const int64_t i0 = (blk / blocks_n) * 32, j0 = (blk % blocks_n) * 32;
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      const bfloat16* b0 = bp + (j0 / 16) * (Kp * 16);
      const bfloat16* b1 = b0 + Kp * 16;
      for (int64_t k0 = 0; k0 < Kp; k0 += 32) {
        t.template load<4>(ap + i0 * Kp + k0, 2 * Kp);
        t.template load<5>(ap + (i0 + 16) * Kp + k0, 2 * Kp);
        t.template load<6>(b0 + (k0 / 2) * 32, kTileBytes);
        t.template load<7>(b1 + (k0 / 2) * 32, kTileBytes);
        t.template dpbf16ps<0, 4, 6>();
        t.template dpbf16ps<1, 4, 7>();
        t.template dpbf16ps<2, 5, 6>();
        t.template dpbf16ps<3, 5, 7>();
      }
      t.template store<0>(cbuf[0], 64);
      t.template store<1>(cbuf[1], 64);
      t.template store<2>(cbuf[2], 64);
      t.template store<3>(cbuf[3], 64);
      // C tile q covers rows i0 + 16 * (q / 2), columns j0 + 16 * (q % 2).
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < 16; ++r) {
          const int64_t i = i0 + 16 * (q / 2) + r;
          if (i >= M) break;
          for (int c = 0; c < 16; ++c) {
            const int64_t j = j0 + 16 * (q % 2) + c;
            if (j >= N) break;
            const float ab = fa * cbuf[q][r * 16 + c];
            Out& out = C[i * ldc + j];
            // An explicit FMA: both instantiations round the same, whatever contraction does.
            out = from_acc<Out>(beta == 0.0 ? ab : std::fma(fb, static_cast<float>(out), ab));
          }
        }
    }
    t.release();
  }
}

}  // namespace kernels::cpu::amx
