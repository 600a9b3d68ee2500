// The AMX tile instructions behind EmulatedTiles' interface (amx_tiles.h). Their intrinsics
// need the amx-tile/amx-bf16 target (and avx512bf16 for the store): include this only where that target is on, after every
// other header (kernels/cpu/gemm_amx_hw.cpp does), so no shared inline code is compiled for it.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/avx512_tile_helpers.h"

namespace kernels::cpu::amx {
// Internal linkage: this header is also compiled under the AMX and AVX-512 target pragmas
// (gemm_amx_hw.cpp, tiles_avx512_bf16.cpp), and no copy of its code compiled there may be
// the one a generic caller links to.
namespace {

// The intrinsics paste the tile number into the instruction's text, so each tile and each
// (C, A, B) the GEMM uses gets its own specialisation, spelled out. GCC's tile intrinsics tell
// the compiler of no memory they read or write (ldtilecfg names 8 of its 64 bytes), so a
// compiler barrier goes before each load and after each store.
inline void compiler_barrier() { asm volatile("" ::: "memory"); }

class HardwareTiles {
 public:
  void configure(const TileConfig& cfg) {
    compiler_barrier();
    _tile_loadconfig(&cfg);
  }
  template <int T> void zero();
  template <int T> void load(const void* base, int64_t stride);
  template <int T> void store(void* base, int64_t stride) const;
  template <int C, int A, int B> void dpbf16ps();
  void release() { _tile_release(); }
  static void round_row(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu = false) {
    round_row_avx512_bf16(sum, bias, out, n, relu);
  }
  static void transpose32(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
    transpose32_avx512(src, src_stride, dst, dst_stride);
  }
};
#define KERNELS_AMX_TILE(N)                                                                               \
  template <> inline void HardwareTiles::zero<N>() { _tile_zero(N); }                                     \
  template <> inline void HardwareTiles::load<N>(const void* base, int64_t stride) {                      \
    compiler_barrier();                                                                                   \
    _tile_loadd(N, base, stride);                                                                         \
  }                                                                                                       \
  template <> inline void HardwareTiles::store<N>(void* base, int64_t stride) const {                     \
    _tile_stored(N, base, stride);                                                                        \
    compiler_barrier();                                                                                   \
  }
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

}  // namespace
}  // namespace kernels::cpu::amx
