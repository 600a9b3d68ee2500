// Per-image augmentation draws shared by the CPU and CUDA batch kernels: a random crop
// offset and a horizontal flip, a pure function of (seed, epoch, image index), so both
// devices build identical batches and a resumed run replays the same ones.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace kernels {

// Philox stream ids reserved for data augmentation (dropout layers use their own seeds).
constexpr uint64_t kAugmentStreamBase = 0xA06D000000000000ull;

struct AugmentDraw {
  int dy, dx;  // crop offset in [0, 2*pad]
  bool flip;
};

ENGINE_HD AugmentDraw augment_draw(uint64_t seed, uint64_t epoch, uint64_t image, int pad) {
  const uint32_t u = philox_u32(seed, kAugmentStreamBase + epoch, image);
  const uint32_t span = static_cast<uint32_t>(2 * pad + 1);
  AugmentDraw d;
  d.dy = static_cast<int>((u & 0xFFFu) % span);
  d.dx = static_cast<int>(((u >> 12) & 0xFFFu) % span);
  d.flip = ((u >> 24) & 1u) != 0;
  return d;
}

struct AugmentConfig {
  int pad = 0;          // random crop from the image zero-padded by `pad` (0: no crop)
  bool flip = false;    // random horizontal flip
  float scale[3] = {2.0f / 255.0f, 2.0f / 255.0f, 2.0f / 255.0f};  // out = pixel * scale + shift:
  float shift[3] = {-1.0f, -1.0f, -1.0f};                           // [0,255] -> [-1,1] by default
};

}  // namespace kernels
