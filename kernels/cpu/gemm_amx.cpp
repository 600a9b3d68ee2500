// The emulated instantiation of the tile GEMM (gemm_amx.h), for every machine.
#include "kernels/cpu/gemm_amx.h"

#include "kernels/cpu/gemm_tiles.h"

namespace kernels::cpu {

template <class Out>
void gemm_bf16_tiles_emulated(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A,
                              int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  amx::tile_gemm<amx::EmulatedTiles, Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template void gemm_bf16_tiles_emulated<float>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                                              int64_t, const bfloat16*, int64_t, double, float*, int64_t);
template void gemm_bf16_tiles_emulated<bfloat16>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                                                 int64_t, const bfloat16*, int64_t, double, bfloat16*, int64_t);

}  // namespace kernels::cpu
