// The INT8 tile product on the AMX hardware (int8_amx.h on the tile registers, TDPBUSD) with the
// AVX-512 epilogue: this file alone is compiled with the AMX-INT8 target, so the rest of the
// engine runs on CPUs without it. Called only after cpu_int8_path() found AMX-INT8 and Linux
// granted the tile data permission. Not yet run on an AMX machine: the emulated twin is what
// the tests have checked.
#include <algorithm>
#include <cstdint>
#include <cstring>

// Every header before the target pragma, so no inline code shared with the rest of the engine
// is first compiled here for AMX (as gemm_amx_hw.cpp does).
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")
#include "kernels/cpu/amx_hw_tiles.h"
#include "kernels/cpu/int8_amx.h"
#define KERNELS_AMX_INT8_HARDWARE 1
#endif

namespace kernels::cpu::int8::detail {

#if defined(KERNELS_AMX_INT8_HARDWARE)
namespace {

// The BF16 kernels' tile registers (amx_hw_tiles.h) plus TDPBUSD, one specialisation per
// (C, A, B) the product uses: the intrinsic takes tile numbers as constants.
class HardwareIntTiles : public amx::HardwareTiles {
 public:
  template <int C, int A, int B> void dpbusd();
};
template <> inline void HardwareIntTiles::dpbusd<0, 4, 6>() { _tile_dpbusd(0, 4, 6); }
template <> inline void HardwareIntTiles::dpbusd<1, 4, 7>() { _tile_dpbusd(1, 4, 7); }
template <> inline void HardwareIntTiles::dpbusd<2, 5, 6>() { _tile_dpbusd(2, 5, 6); }
template <> inline void HardwareIntTiles::dpbusd<3, 5, 7>() { _tile_dpbusd(3, 5, 7); }

}  // namespace

bool amx_int8_compiled() { return true; }

void gemm_rows_amx(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep, void* out,
                   int64_t ldo, int64_t row0) {
  tile_gemm_rows<HardwareIntTiles>(a, rows, lda, w, ep, out, ldo, row0, requantize_row_avx512);
}

#else

bool amx_int8_compiled() { return false; }
void gemm_rows_amx(const uint8_t*, int64_t, int64_t, const PackedWeights&, const Requant*, void*, int64_t, int64_t) {
  ENGINE_FAIL("the AMX-INT8 kernels were not compiled in (GCC 11 or later builds them)");
}

#endif

}  // namespace kernels::cpu::int8::detail
