// The loss scaler's one-thread kernels and the scaled loss (see scaler.h).
#include "kernels/cuda/scaler.h"

#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

namespace {

__global__ void scaler_prepare_kernel(const float* scale, float* inv_scale, int* found_inf) {
  *inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale));
  *found_inf = 0;
}

__global__ void scaler_update_kernel(float* scale, int* tracker, long long* skipped, long long* consecutive,
                                     const int* found_inf, ScalerRule rule) {
  ScalerCounters<float> st{*scale, *tracker, *skipped, *consecutive};
  scaler_update_rule(st, *found_inf != 0, rule);
  *scale = st.scale;
  *tracker = static_cast<int>(st.tracker);
  *skipped = st.skipped;
  *consecutive = st.consecutive;
}

__global__ void scale_by_device_scalar_kernel(const float* x, const float* s, float* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = x[i] * *s;
}

}  // namespace

void scaler_prepare(const float* scale, float* inv_scale, int* found_inf, cudaStream_t stream) {
  scaler_prepare_kernel<<<1, 1, 0, stream>>>(scale, inv_scale, found_inf);
  CHECK_LAUNCH();
}

void scaler_update(float* scale, int* growth_tracker, long long* skipped, long long* consecutive, const int* found_inf,
                   const ScalerRule& rule, cudaStream_t stream) {
  scaler_update_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, skipped, consecutive, found_inf, rule);
  CHECK_LAUNCH();
}

void scale_by_device_scalar(const float* x, const float* s, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_by_device_scalar_kernel<<<detail::grid_for(n), detail::kBlock, 0, stream>>>(x, s, y, n);
  CHECK_LAUNCH();
}

}  // namespace kernels::cuda
