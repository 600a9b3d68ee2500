// The BF16 tile convolution on this CPU's hardware tile units (AVX512-BF16, and AMX where it is
// granted): each pass against the double reference (tests/conv_tiles_cases.h), and the filter
// gradient's bits the same for 1 and 2 threads. main exits 77 (skipped, with the reason) where
// the CPU has neither unit.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstring>
#include <vector>

#include "../conv_tiles_cases.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_amx.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kc = kernels::cpu;

static std::vector<kc::TileUnit> hardware_units() {
  std::vector<kc::TileUnit> units;
  const kc::CpuIsa isa = kc::cpu_isa();
  if (static_cast<int>(isa) >= static_cast<int>(kc::CpuIsa::Avx512Bf16) && kc::avx512_bf16_kernels_built())
    units.push_back(kc::TileUnit::Avx512Bf16);
  if (isa == kc::CpuIsa::Amx && kc::amx_kernels_built()) units.push_back(kc::TileUnit::Amx);
  return units;
}

int main(int argc, char** argv) {
  if (hardware_units().empty()) {
    std::printf("SKIPPED: the hardware tile tests need AVX512-BF16 or AMX in use: %s\n", kc::cpu_isa_report().c_str());
    return 77;
  }
  std::printf("%s\n", kc::cpu_isa_report().c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("tile convolution on the hardware units: every pass within the bound of the double reference", "[tiles_hw]") {
  for (kc::TileUnit unit : hardware_units())
    for (const kernels::ConvShape& s : conv_tiles_cases::shapes())
      for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
        conv_tiles_cases::check_all_passes(unit, s, route);
}

TEST_CASE("tile convolution on the hardware units: one image a chunk gives results within the same bound",
          "[tiles_hw]") {
  const conv_tiles_cases::ChunkBytes one_image(1);
  for (kc::TileUnit unit : hardware_units())
    for (const kernels::ConvShape& s : conv_tiles_cases::shapes())
      for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
        conv_tiles_cases::check_all_passes(unit, s, route);
}

TEST_CASE("tile convolution on the hardware units: the filter gradient has the same bits for 1 and 2 threads",
          "[tiles_hw]") {
#if defined(_OPENMP)
  const kernels::ConvShape s = conv_tiles_cases::shape(4, 9, 9, 40, 36, 3, 1, 1);
  const auto x = conv_tiles_cases::random_bf16(s.n * s.h * s.w * s.c, 7);
  const auto gy = conv_tiles_cases::random_bf16(s.n * s.out_h() * s.out_w() * s.k, 8);
  for (kc::TileUnit unit : hardware_units())
    for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
      for (int64_t chunk_bytes : {int64_t(1), kc::amx::tile_chunk_bytes}) {
        INFO(kc::tile_unit_name(unit) << ", " << kc::tile_route_name(route) << " route, chunk bytes " << chunk_bytes);
        const conv_tiles_cases::ChunkBytes chunks(chunk_bytes);
        std::vector<kernels::bfloat16> gw1(s.k * 9 * s.c), gw2(gw1.size()), gb1(s.k), gb2(s.k);
        const int before = omp_get_max_threads();
        omp_set_num_threads(1);
        kc::conv2d_backward_filter_bf16_tiles(unit, s, x.data(), gy.data(), gw1.data(), gb1.data(), route);
        omp_set_num_threads(2);
        kc::conv2d_backward_filter_bf16_tiles(unit, s, x.data(), gy.data(), gw2.data(), gb2.data(), route);
        omp_set_num_threads(before);
        REQUIRE(std::memcmp(gw1.data(), gw2.data(), gw1.size() * sizeof gw1[0]) == 0);
        REQUIRE(std::memcmp(gb1.data(), gb2.data(), gb1.size() * sizeof gb1[0]) == 0);
      }
#else
  WARN("built without OpenMP: one thread only, nothing to compare");
#endif
}
