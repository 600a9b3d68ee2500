// BF16 matrix products on AMX tiles, FP32 accumulation: C = alpha * op(A) * op(B) + beta * C with
// gemm()'s conventions (gemm.h). One driver (gemm_tiles.h) runs on the hardware's tile
// instructions or on their portable emulation (amx_tiles.h), written to give the same bits
// (not yet compared on an AMX CPU: tests/amx/ reports it).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/numeric.h"

namespace kernels::cpu {

// On the emulated tiles: every machine, slowly (the tests, and the reference for the hardware).
template <class Out>
void gemm_bf16_tiles_emulated(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A,
                              int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc);
// On the AMX unit: only where cpu_isa() is CpuIsa::Amx (it checks, and throws otherwise).
template <class Out>
void gemm_bf16_tiles_amx(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A,
                         int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc);
// Whether this build has the hardware path at all (an x86-64 compiler with AMX intrinsics).
bool amx_kernels_built();

}  // namespace kernels::cpu
