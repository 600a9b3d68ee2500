// The INT8 product on AMX tiles (TDPBUSD), written once over a tile type: amx::EmulatedTiles
// (amx_tiles.h, any CPU: int8_amx.cpp) or the hardware (int8_amx_hw.cpp). Blocks of 32 rows x
// 32 outputs: C tiles 0-3 (16 x 16 int32), A tiles 4-5 (16 rows x 64 bytes of K), B tiles 6-7
// (16 quads x 16 outputs, straight from PackedWeights' tile padding); the epilogue (`store`) on
// the sums of each block row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/error.h"

namespace kernels::cpu::int8::detail {

// a: rows `lda` = 4 * k4 bytes apart, readable up to `rows` rounded up to 32 (zero rows).
template <class Tiles, class Store>
void tile_gemm_rows(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep,
                    void* out, int64_t ldo, int64_t row0, Store store) {
  ENGINE_CHECK(w.tiles && w.k4 % 16 == 0 && w.n_padded % 32 == 0 && lda == 4 * w.k4,
               "the INT8 tile product needs weights packed for tiles and rows of 4 x k4 bytes");
  Tiles t;
  t.configure(amx::gemm_tile_config());  // every tile 16 rows x 64 bytes
  alignas(64) int32_t sums[32][32];
  const int64_t b_stride = w.n_padded * 4;
  const size_t elem = ep ? 1 : sizeof(int32_t);
  for (int64_t j0 = 0; j0 < w.n; j0 += 32) {
    const int64_t nc = std::min<int64_t>(32, w.n - j0);
    for (int64_t r0 = 0; r0 < rows; r0 += 32) {
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      for (int64_t kb = 0; kb < w.k4 / 16; ++kb) {
        const uint8_t* a0 = a + r0 * lda + kb * 64;
        const int8_t* b = w.data.data() + kb * 16 * b_stride + j0 * 4;
        t.template load<4>(a0, lda);
        t.template load<5>(a0 + 16 * lda, lda);
        t.template load<6>(b, b_stride);
        t.template load<7>(b + 64, b_stride);
        t.template dpbusd<0, 4, 6>();
        t.template dpbusd<1, 4, 7>();
        t.template dpbusd<2, 5, 6>();
        t.template dpbusd<3, 5, 7>();
      }
      t.template store<0>(&sums[0][0], 128);
      t.template store<1>(&sums[0][16], 128);
      t.template store<2>(&sums[16][0], 128);
      t.template store<3>(&sums[16][16], 128);
      for (int64_t r = 0; r < std::min<int64_t>(32, rows - r0); ++r) {
        void* out_row = static_cast<uint8_t*>(out) + (r0 + r) * ldo * elem;
        if (!ep) {
          std::memcpy(static_cast<int32_t*>(out_row) + j0, sums[r], static_cast<size_t>(nc) * sizeof(int32_t));
          continue;
        }
        const uint8_t* res_row = ep->residual ? static_cast<const uint8_t*>(ep->residual) + (row0 + r0 + r) * ldo : nullptr;
        store(sums[r], j0, nc, *ep, out_row, res_row);
      }
    }
  }
  t.release();
}

}  // namespace kernels::cpu::int8::detail
