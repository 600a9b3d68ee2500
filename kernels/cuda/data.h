// CUDA twin of kernels/cpu/augment.h: builds a batch from the device-resident uint8 data set
// (gather by index, crop/flip from the shared Philox draws, normalise, write in T), and the
// loss scaler's device-side bookkeeping, so a training step never waits for the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/augment_math.h"

namespace kernels::cuda {

template <class T>
void make_batch(const uint8_t* images, const int32_t* labels, const int32_t* indices, int64_t batch, int h, int w,
                int c, bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch, T* out,
                int32_t* labels_out, cudaStream_t stream);

// Before a step: *inv_scale = float(1 / double(*scale)); *found_inf = 0.
void scaler_prepare(const float* scale, float* inv_scale, int* found_inf, cudaStream_t stream);

// GradScaler's update, on the device: on overflow scale *= backoff (not below min_scale),
// tracker = 0, ++skipped, ++consecutive; else consecutive = 0 and after `interval` clean
// steps scale *= growth when the result is finite.
struct ScalerParams {
  float growth = 2.f, backoff = 0.5f, min_scale = 0.f;
  int interval = 2000;
  bool dynamic = true;
};
void scaler_update(float* scale, int* growth_tracker, long long* skipped, long long* consecutive, const int* found_inf,
                   const ScalerParams& p, cudaStream_t stream);

// y[i] = x[i] * *s for n floats: multiplies by the loss scale where it lies in device memory.
void scale_by_device_scalar(const float* x, const float* s, float* y, int64_t n, cudaStream_t stream);

// *value = NaN when *flag is non-zero: makes an error found on the device (a label out of
// range) visible in the loss without the host having to wait for it.
void nan_if_flagged(float* value, const int* flag, cudaStream_t stream);

}  // namespace kernels::cuda
