// The loss scaler's device side: 1/scale and the found-inf flag before a step, the update rule
// after it (kernels/scaler_math.h, the same function the CPU path calls), and the loss times
// the scale where it lies in device memory. One-thread kernels: no host wait anywhere.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scaler_math.h"

namespace kernels::cuda {

// Before a step: *inv_scale = float(1 / double(*scale)); *found_inf = 0.
void scaler_prepare(const float* scale, float* inv_scale, int* found_inf, cudaStream_t stream);

// After a step: scaler_update_rule on the device's counters, with *found_inf from the step.
void scaler_update(float* scale, int* growth_tracker, long long* skipped, long long* consecutive, const int* found_inf,
                   const ScalerRule& rule, cudaStream_t stream);

// y[i] = x[i] * *s for n floats: multiplies by the loss scale where it lies in device memory.
void scale_by_device_scalar(const float* x, const float* s, float* y, int64_t n, cudaStream_t stream);

}  // namespace kernels::cuda
