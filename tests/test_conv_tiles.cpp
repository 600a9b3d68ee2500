// The BF16 tile convolution (conv_tiles.h) on the emulated AMX tiles, on every machine: each
// pass against the double reference, the cases of tests/conv_tiles_cases.h; the dispatch rules.
// The hardware units: tests/amx/test_tiles_hw.cpp.
#include "conv_tiles_cases.h"

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
