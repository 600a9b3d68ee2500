// The BF16 tile convolution (conv_tiles.h) on the emulated AMX tiles, on every machine: each
// pass against the double reference, the cases of tests/conv_tiles_cases.h; the dispatch rules.
// The hardware units: tests/amx/test_tiles_hw.cpp.
#include "conv_tiles_cases.h"

namespace kc = kernels::cpu;

TEST_CASE("tile convolution on emulated AMX tiles: forward, data and filter gradients against the double reference",
          "[amx][conv]") {
  for (const kernels::ConvShape& s : conv_tiles_cases::shapes()) conv_tiles_cases::check_all_passes(kc::TileUnit::Emulated, s);
}

TEST_CASE("tile convolution: which shapes the engine sends to the tiles", "[amx][conv]") {
  using conv_tiles_cases::shape;
  CHECK(kc::tile_forward_fits(shape(64, 32, 32, 64, 64, 3, 1, 1)));
  CHECK(kc::tile_backward_data_fits_engine(shape(64, 32, 32, 64, 64, 3, 1, 1)));
  CHECK(kc::tile_forward_fits(shape(64, 8, 8, 256, 256, 3, 1, 1)));        // 64 of 96 pixels real
  CHECK_FALSE(kc::tile_forward_fits(shape(64, 4, 4, 512, 512, 3, 1, 1)));  // 16 of 32
  CHECK_FALSE(kc::tile_forward_fits(shape(64, 32, 32, 64, 128, 1, 2, 0)));  // stride 2: 256 of 512
  CHECK_FALSE(kc::tile_backward_data_fits_engine(shape(64, 32, 32, 64, 128, 3, 2, 1)));  // stride 2
  CHECK_FALSE(kc::tile_forward_fits(shape(64, 32, 32, 3, 64, 3, 1, 1)));  // the stem: 32 / 3 of the work
  CHECK_FALSE(kc::tile_forward_fits(shape(64, 32, 32, 16, 64, 3, 1, 1))); // 2x
  CHECK(kc::tile_forward_fits(shape(64, 32, 32, 24, 64, 3, 1, 1)));       // 1.33x
  kernels::ConvShape grouped = shape(2, 8, 8, 64, 64, 3, 1, 1);
  grouped.groups = 2;
  CHECK_FALSE(kc::tile_forward_fits(grouped));
}
