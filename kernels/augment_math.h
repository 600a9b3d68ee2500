// Per-image augmentation shared by the CPU and CUDA batch kernels: a random crop offset from a
// zero- or reflection-padded image and a horizontal flip (random, or alternating by epoch), a
// pure function of (seed, epoch, image index), so both devices build identical batches and a
// resumed run replays the same ones; and where each output pixel reads its source pixel.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/philox.h"

namespace kernels {

// Philox stream ids reserved for data augmentation (dropout layers use their own seeds).
constexpr uint64_t kAugmentStreamBase = 0xA06D000000000000ull;

struct AugmentDraw {
  int dy, dx;  // crop offset in [0, 2*pad]
  bool flip;
};

// The flip of an image.
//   Random:      a fresh coin per (seed, epoch, image);
//   Alternating: airbench's: a coin per (seed, image) drawn once (epoch 0's), then every odd
//                epoch flips all images, so each sees both orientations in turn, evenly.
enum class FlipMode : int { None = 0, Random = 1, Alternating = 2 };

struct AugmentConfig {
  int pad = 0;              // random crop from the image padded by `pad` (0: no crop)
  bool reflect = false;     // the padding mirrors the image about its edge pixels (PyTorch's
                            // 'reflect': index -1 reads 1), else zeros
  FlipMode flip = FlipMode::None;
  // Every image takes this one view (test-time augmentation's translated and mirrored copies)
  // instead of a random draw; dy, dx in [0, 2*pad].
  bool fixed = false;
  AugmentDraw view = {0, 0, false};
  float scale[3] = {2.0f / 255.0f, 2.0f / 255.0f, 2.0f / 255.0f};  // out = pixel * scale + shift:
  float shift[3] = {-1.0f, -1.0f, -1.0f};                           // [0,255] -> [-1,1] by default
};

// The raw draw: a crop offset in [0, 2*pad] per axis and a coin, from 32 bits of Philox.
ENGINE_HD AugmentDraw augment_draw(uint64_t seed, uint64_t epoch, uint64_t image, int pad) {
  const uint32_t u = philox_u32(seed, kAugmentStreamBase + epoch, image);
  const uint32_t span = static_cast<uint32_t>(2 * pad + 1);
  AugmentDraw d;
  d.dy = static_cast<int>((u & 0xFFFu) % span);
  d.dx = static_cast<int>(((u >> 12) & 0xFFFu) % span);
  d.flip = ((u >> 24) & 1u) != 0;
  return d;
}

// What image `image` of `epoch` gets under cfg: no augmentation is the centred crop (dy = dx =
// pad, that is the image itself) unflipped.
ENGINE_HD AugmentDraw augment_view(bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch,
                                   uint64_t image) {
  if (!augment) return AugmentDraw{cfg.pad, cfg.pad, false};
  if (cfg.fixed) return cfg.view;
  AugmentDraw d = augment_draw(seed, epoch, image, cfg.pad);
  if (cfg.pad == 0) d.dy = d.dx = 0;
  if (cfg.flip == FlipMode::None) d.flip = false;
  // Alternating: epoch 0's coin for every epoch, negated on odd epochs.
  if (cfg.flip == FlipMode::Alternating) d.flip = augment_draw(seed, 0, image, cfg.pad).flip != ((epoch & 1u) != 0);
  return d;
}

// A coordinate of the padded image mapped into [0, n): reflection about the edge pixels, one
// bounce (pad < n, checked by make_batch); -1 when it falls in zero padding.
ENGINE_HD int padded_source(int i, int n, bool reflect) {
  if (i >= 0 && i < n) return i;
  if (!reflect) return -1;
  return i < 0 ? -i : 2 * (n - 1) - i;
}

// Output pixel (y, x) of an h x w image under view d: crop the padded image at (dy, dx), then
// flip the crop (column x reads the crop's column w-1-x). False when it reads zero padding.
ENGINE_HD bool augment_source(const AugmentDraw& d, const AugmentConfig& cfg, int h, int w, int y, int x, int* sy,
                              int* sx) {
  *sy = padded_source(y + d.dy - cfg.pad, h, cfg.reflect);
  *sx = padded_source((d.flip ? w - 1 - x : x) + d.dx - cfg.pad, w, cfg.reflect);
  return *sy >= 0 && *sx >= 0;
}

// out = pixel * scale + shift as one fused multiply-add on both devices (nvcc would fuse it
// anyway, the CPU compiler only where it chose to), so both batch kernels agree to the bit.
ENGINE_HD float normalise_pixel(float pixel, float scale, float shift) { return fmaf(pixel, scale, shift); }

}  // namespace kernels
