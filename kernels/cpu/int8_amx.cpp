// The INT8 tile product on the emulated tiles (int8_amx.h on amx::EmulatedTiles), with the
// scalar epilogue: runs on every CPU, so the tile packing, blocking and tails are tested where
// no AMX is (Int8Path::AmxEmulated).
#include "kernels/cpu/int8_amx.h"

namespace kernels::cpu::int8::detail {

void gemm_rows_amx_emulated(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep,
                            void* out, int64_t ldo, int64_t row0) {
  tile_gemm_rows<amx::EmulatedTiles>(
      a, rows, lda, w, ep, out, ldo, row0,
      [](const int32_t* sums, int64_t j0, int64_t count, const Requant& e, void* out_row, const uint8_t* res_row) {
        for (int64_t c = 0; c < count; ++c) {
          const int32_t q = requantize(sums[c], j0 + c, e, res_row);
          if (e.out_signed)
            static_cast<int8_t*>(out_row)[j0 + c] = static_cast<int8_t>(q);
          else
            static_cast<uint8_t*>(out_row)[j0 + c] = static_cast<uint8_t>(q);
        }
      });
}

}  // namespace kernels::cpu::int8::detail
