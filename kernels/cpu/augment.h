// CPU twin of the batch kernel: gathers images by index from the uint8 data set, applies the
// crop/flip views (kernels/augment_math.h), normalises, and writes the batch straight in the
// compute dtype T.
#pragma once

#include <cstdint>

#include "kernels/augment_math.h"
#include "kernels/convert.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// images: [N,H,W,C] uint8; indices: the batch's image indices; out: [B,H,W,C] in T;
// labels_out[b] = labels[indices[b]]. With augment == false the images pass unchanged.
template <class T>
void make_batch(const uint8_t* images, const int32_t* labels, const int32_t* indices, int64_t batch, int h, int w,
                int c, bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch, T* out,
                int32_t* labels_out, Stream = nullptr) {
#pragma omp parallel for if (batch > 8)
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t img = indices[b];
    labels_out[b] = labels[img];
    const AugmentDraw d = augment_view(augment, cfg, seed, epoch, static_cast<uint64_t>(img));
    const uint8_t* src = images + img * h * w * c;
    T* dst = out + b * h * w * c;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        int sy, sx;
        const bool inside = augment_source(d, cfg, h, w, y, x, &sy, &sx);
        for (int ch = 0; ch < c; ++ch) {
          const float pixel = inside ? static_cast<float>(src[(sy * w + sx) * c + ch]) : 0.0f;  // zero padding
          dst[(y * w + x) * c + ch] = convert<T>(normalise_pixel(pixel, cfg.scale[ch], cfg.shift[ch]));
        }
      }
    }
  }
}

}  // namespace kernels::cpu
