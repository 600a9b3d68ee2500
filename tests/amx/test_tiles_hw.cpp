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
#include "kernels/philox.h"

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

TEST_CASE("tile convolution on AMX: every pass and route has the emulation's bits", "[tiles_hw]") {
  // The AMX unit sums as the SDM says (tests/amx/test_amx_hw.cpp), and the stores round alike
  // (VCVTNE2PS2BF16 and float_to_bf16_bits_ftz), so the whole convolution matches bit for bit.
  // (The AVX512-BF16 unit sums in another order: held to the bound only.)
  if (kc::cpu_isa() != kc::CpuIsa::Amx || !kc::amx_kernels_built()) {
    WARN("AMX not in use here: only the AVX512-BF16 unit is checked, against the bound");
    return;
  }
  using conv_tiles_cases::random_bf16;
  for (const kernels::ConvShape& s : conv_tiles_cases::shapes())
    for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns}) {
      INFO(kc::tile_route_name(route) << " route: " << conv_tiles_cases::describe(s));
      const int64_t nx = s.n * s.h * s.w * s.c, nw = s.k * s.r * s.s * s.c, ny = s.n * s.out_h() * s.out_w() * s.k;
      const auto x = random_bf16(nx, 61), w = random_bf16(nw, 62), bias = random_bf16(s.k, 63), gy = random_bf16(ny, 64);
      auto same = [](const std::vector<kernels::bfloat16>& a, const std::vector<kernels::bfloat16>& b) {
        return std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0;
      };
      std::vector<kernels::bfloat16> y1(ny), y2(ny);
      kc::conv2d_forward_bf16_tiles(kc::TileUnit::Amx, s, x.data(), w.data(), bias.data(), y1.data(), route);
      kc::conv2d_forward_bf16_tiles(kc::TileUnit::Emulated, s, x.data(), w.data(), bias.data(), y2.data(), route);
      CHECK(same(y1, y2));
      if (route != kc::TileRoute::Flat || kc::amx::tile_backward_data_fits(s)) {
        std::vector<kernels::bfloat16> g1(nx), g2(nx);
        kc::conv2d_backward_data_bf16_tiles(kc::TileUnit::Amx, s, gy.data(), w.data(), g1.data(), route);
        kc::conv2d_backward_data_bf16_tiles(kc::TileUnit::Emulated, s, gy.data(), w.data(), g2.data(), route);
        CHECK(same(g1, g2));
      }
      std::vector<kernels::bfloat16> w1(nw), w2(nw), b1(s.k), b2(s.k);
      kc::conv2d_backward_filter_bf16_tiles(kc::TileUnit::Amx, s, x.data(), gy.data(), w1.data(), b1.data(), route);
      kc::conv2d_backward_filter_bf16_tiles(kc::TileUnit::Emulated, s, x.data(), gy.data(), w2.data(), b2.data(), route);
      CHECK(same(w1, w2));
      CHECK(same(b1, b2));
    }
}

TEST_CASE("the hardware units' store and transpose give the portable twins' bits", "[tiles_hw]") {
  // round_row (VCVTNE2PS2BF16, masked to n values) and transpose32 (AVX-512 permutes) against
  // EmulatedTiles' loops, on values that include FP32 denormals, NaNs, ties and overflow.
  std::vector<float> sum(32), bias(32);
  for (int i = 0; i < 32; ++i) {
    sum[i] = float(8 * kernels::philox_uniform(71, 0, i) - 4);
    bias[i] = float(kernels::philox_uniform(72, 0, i) - 0.5);
  }
  const uint32_t specials[] = {0x00000001u, 0x807fffffu, 0x7fc00001u, 0xff800000u, 0x7f7fffffu, 0x3f808000u,
                               0x3f818000u, 0x00800000u};
  for (int i = 0; i < 8; ++i) std::memcpy(&sum[3 * i], &specials[i], 4);
  for (int64_t n : {int64_t(32), int64_t(17), int64_t(16), int64_t(5), int64_t(0)})
    for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())})
      for (bool relu : {false, true}) {
        INFO("n " << n << (b ? " with bias" : "") << (relu ? ", ReLU" : ""));
        std::vector<kernels::bfloat16> hw(33, kernels::bfloat16::from_bits(0x1234)), emu = hw;
        kc::amx::EmulatedTiles::round_row(sum.data(), b, emu.data(), n, relu);
        const kc::TileUnit unit = kc::cpu_isa() == kc::CpuIsa::Amx ? kc::TileUnit::Amx : kc::TileUnit::Avx512Bf16;
        kc::tile_round_row(unit, sum.data(), b, hw.data(), n, relu);
        CHECK(std::memcmp(hw.data(), emu.data(), sizeof(uint16_t) * 33) == 0);  // nothing past n written
      }
  std::vector<uint16_t> src(32 * 40), t_hw(32 * 36, 7), t_emu(32 * 36, 7);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  kc::amx::EmulatedTiles::transpose32(src.data(), 40, t_emu.data(), 36);
  kc::tile_transpose32(kc::cpu_isa() == kc::CpuIsa::Amx ? kc::TileUnit::Amx : kc::TileUnit::Avx512Bf16, src.data(), 40,
                       t_hw.data(), 36);
  CHECK(t_hw == t_emu);
  CHECK(t_emu[5 * 36 + 9] == src[9 * 40 + 5]);
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
