// Batch construction on the GPU (see augment.h).
#include "kernels/cuda/augment.h"

#include <cmath>

#include "kernels/convert.h"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

// One thread per output element; each recomputes its image's draw (10 Philox rounds: far
// cheaper than a second launch or a shared-memory round trip).
template <class T>
__global__ void make_batch_kernel(const uint8_t* images, const int32_t* labels, const int32_t* indices, int64_t batch,
                                  int h, int w, int c, bool augment, AugmentConfig cfg, uint64_t seed, uint64_t epoch,
                                  T* out, int32_t* labels_out) {
  const int64_t per_image = static_cast<int64_t>(h) * w * c;
  const int64_t total = batch * per_image;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t b = i / per_image;
    const int64_t r = i - b * per_image;
    const int ch = static_cast<int>(r % c);
    const int x = static_cast<int>((r / c) % w);
    const int y = static_cast<int>(r / (static_cast<int64_t>(c) * w));
    const int64_t img = indices[b];
    if (r == 0) labels_out[b] = labels[img];
    const AugmentDraw d = augment_view(augment, cfg, seed, epoch, static_cast<uint64_t>(img));
    int sy, sx;
    const bool inside = augment_source(d, cfg, h, w, y, x, &sy, &sx);  // crop, then flip the crop
    const float pixel = inside ? static_cast<float>(images[img * per_image + (static_cast<int64_t>(sy) * w + sx) * c + ch])
                               : 0.0f;
    out[i] = convert<T>(normalise_pixel(pixel, cfg.scale[ch], cfg.shift[ch]));
  }
}

}  // namespace

template <class T>
void make_batch(const uint8_t* images, const int32_t* labels, const int32_t* indices, int64_t batch, int h, int w,
                int c, bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch, T* out,
                int32_t* labels_out, cudaStream_t stream) {
  const int64_t total = batch * h * w * c;
  if (total == 0) return;
  make_batch_kernel<T><<<detail::grid_for(total), detail::kBlock, 0, stream>>>(
      images, labels, indices, batch, h, w, c, augment, cfg, seed, epoch, out, labels_out);
  CHECK_LAUNCH();
}

template void make_batch<float>(const uint8_t*, const int32_t*, const int32_t*, int64_t, int, int, int, bool,
                                const AugmentConfig&, uint64_t, uint64_t, float*, int32_t*, cudaStream_t);
template void make_batch<half>(const uint8_t*, const int32_t*, const int32_t*, int64_t, int, int, int, bool,
                               const AugmentConfig&, uint64_t, uint64_t, half*, int32_t*, cudaStream_t);
template void make_batch<bfloat16>(const uint8_t*, const int32_t*, const int32_t*, int64_t, int, int, int, bool,
                                   const AugmentConfig&, uint64_t, uint64_t, bfloat16*, int32_t*, cudaStream_t);

}  // namespace kernels::cuda
