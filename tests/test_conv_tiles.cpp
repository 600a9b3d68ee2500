// The BF16 tile convolution (conv_tiles.h) on the emulated AMX tiles, on every machine: each
// pass against the double reference, the cases of tests/conv_tiles_cases.h; the dispatch rules.
// The hardware units: tests/amx/test_tiles_hw.cpp.
#include "conv_tiles_cases.h"

#include <cstring>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kc = kernels::cpu;

TEST_CASE("tile convolution on emulated AMX tiles: forward, data and filter gradients against the double reference",
          "[amx][conv]") {
  for (const kernels::ConvShape& s : conv_tiles_cases::shapes())
    for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
      conv_tiles_cases::check_all_passes(kc::TileUnit::Emulated, s, route);
}

TEST_CASE("tile convolution on emulated AMX tiles: one image a chunk gives results within the same bound",
          "[amx][conv]") {
  const conv_tiles_cases::ChunkBytes one_image(1);  // the sums carried from chunk to chunk
  for (const kernels::ConvShape& s : conv_tiles_cases::shapes())
    if (s.n > 1)
      for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
        conv_tiles_cases::check_all_passes(kc::TileUnit::Emulated, s, route);
}

TEST_CASE("tile convolution: which route each shape takes", "[amx][conv]") {
  using conv_tiles_cases::shape;
  using kc::TileRoute;
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 64, 64, 3, 1, 1)) == TileRoute::Flat);
  CHECK(kc::tile_backward_data_route(shape(64, 32, 32, 64, 64, 3, 1, 1)) == TileRoute::Flat);
  CHECK(kc::tile_backward_filter_route(shape(64, 32, 32, 64, 64, 3, 1, 1)) == TileRoute::Flat);
  CHECK(kc::tile_forward_route(shape(64, 8, 8, 256, 256, 3, 1, 1)) == TileRoute::Flat);       // 64 of 96 pixels real
  CHECK(kc::tile_forward_route(shape(64, 4, 4, 512, 512, 3, 1, 1)) == TileRoute::Columns);    // 16 of 32
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 64, 128, 1, 2, 0)) == TileRoute::Columns);   // stride 2: 256 of 512
  CHECK(kc::tile_backward_data_route(shape(64, 32, 32, 64, 128, 3, 2, 1)) == TileRoute::Columns);
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 3, 64, 3, 1, 1)) == TileRoute::Columns);     // the stem: 32 / 3
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 16, 64, 3, 1, 1)) == TileRoute::Flat);       // 2x
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 15, 64, 3, 1, 1)) == TileRoute::Columns);    // 2.13x
  CHECK(kc::tile_forward_route(shape(64, 32, 32, 24, 64, 3, 1, 1)) == TileRoute::Flat);       // 1.33x
}

TEST_CASE("tile convolution on emulated AMX tiles: the column route in K chunks and column panels", "[amx][conv]") {
  // 2 x 24 x 24 pixels (1152: two K chunks of the filter gradient's 1024) and a patch of 576
  // (Np 576: two panels of 512 KiB), so the panel fill, its barrier, the pixel cursor resuming
  // mid-batch and the sums carried between K chunks all run; every pass against the reference.
  conv_tiles_cases::check_all_passes(kc::TileUnit::Emulated, conv_tiles_cases::shape(2, 24, 24, 64, 32, 3, 1, 1),
                                     kc::TileRoute::Columns);
}

TEST_CASE("tile convolution on emulated AMX tiles: the filter gradient has the same bits for 1 and 2 threads",
          "[amx][conv]") {
#if defined(_OPENMP)
  using conv_tiles_cases::shape;
  for (const kernels::ConvShape& s : {shape(3, 9, 9, 40, 36, 3, 1, 1), shape(2, 24, 24, 64, 32, 3, 1, 1)})
    for (kc::TileRoute route : {kc::TileRoute::Flat, kc::TileRoute::Columns})
      for (int64_t chunk_bytes : {int64_t(1), kc::amx::tile_chunk_bytes}) {
        INFO(conv_tiles_cases::describe(s) << ", " << kc::tile_route_name(route) << " route, chunk bytes " << chunk_bytes);
        const conv_tiles_cases::ChunkBytes chunks(chunk_bytes);
        const auto x = conv_tiles_cases::random_bf16(s.n * s.h * s.w * s.c, 17);
        const auto gy = conv_tiles_cases::random_bf16(s.n * s.out_h() * s.out_w() * s.k, 18);
        std::vector<kernels::bfloat16> gw1(s.k * 9 * s.c), gw2(gw1.size()), gb1(s.k), gb2(s.k);
        const int before = omp_get_max_threads();
        omp_set_num_threads(1);
        kc::conv2d_backward_filter_bf16_tiles(kc::TileUnit::Emulated, s, x.data(), gy.data(), gw1.data(), gb1.data(),
                                              route);
        omp_set_num_threads(2);
        kc::conv2d_backward_filter_bf16_tiles(kc::TileUnit::Emulated, s, x.data(), gy.data(), gw2.data(), gb2.data(),
                                              route);
        omp_set_num_threads(before);
        REQUIRE(std::memcmp(gw1.data(), gw2.data(), gw1.size() * sizeof gw1[0]) == 0);
        REQUIRE(std::memcmp(gb1.data(), gb2.data(), gb1.size() * sizeof gb1[0]) == 0);
      }
#else
  WARN("built without OpenMP: one thread only, nothing to compare");
#endif
}
