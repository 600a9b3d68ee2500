// Cross-entropy kernels: one warp per row for the softmax (k is 10 to ~1000 for image
// classification: 32 lanes stride over it), then one block sums the per-row losses.
#include "kernels/cuda/cross_entropy.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/loss_math.h"

namespace kernels::cuda {

using detail::kBlock;

namespace {

template <class T, class A>
__global__ void __launch_bounds__(kBlock) ce_rows_kernel(int64_t rows, int64_t k, const T* z, const int32_t* labels,
                                                          A smoothing, A* probs, A* row_loss, int* row_bad) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = warp; r < rows; r += nwarps) {  // r is the same for all lanes of a warp
    const T* zr = z + r * k;
    A mx = -INFINITY;
    for (int64_t j = lane; j < k; j += 32) {
      const A v = A(zr[j]);
      mx = v > mx ? v : mx;
    }
    mx = detail::warp_max(mx);
    A sum = 0;
    for (int64_t j = lane; j < k; j += 32) sum += exp(A(zr[j]) - mx);
    sum = detail::warp_sum(sum);
    // Relative to the max, as on the CPU: mx + log(sum) would round at the logits' magnitude.
    const A log_sum = log(sum);
    A neg = 0;
    for (int64_t j = lane; j < k; j += 32) {
      const A logp = (A(zr[j]) - mx) - log_sum;
      probs[r * k + j] = exp(logp);
      neg -= logp;
    }
    neg = detail::warp_sum(neg);
    if (lane == 0) {
      const int32_t y = labels[r];
      const bool ok = ce_label_ok(y, k);
      row_bad[r] = ok ? 0 : 1;
      row_loss[r] = ok ? ce_row_loss(log_sum, A(zr[y]) - mx, neg / A(k), smoothing) : A(0);
    }
  }
}

template <class A>
__global__ void __launch_bounds__(kBlock)
    ce_total_kernel(int64_t rows, const A* row_loss, const int* row_bad, A* loss, int* bad_labels) {
  __shared__ A scratch[32];
  __shared__ int iscratch[32];
  A s = 0;
  int b = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += row_loss[r];
    b += row_bad[r];
  }
  s = detail::block_sum(s, scratch);
  b = detail::block_sum(b, iscratch);
  if (threadIdx.x == 0) {
    // A bad label makes the loss NaN: the log shows it without the host waiting for a count.
    *loss = b ? A(NAN) : rows ? s / A(rows) : A(0);
    if (bad_labels) *bad_labels = b;
  }
}

template <class T, class A>
__global__ void __launch_bounds__(kBlock) ce_backward_kernel(int64_t rows, int64_t k, const A* probs,
                                                              const int32_t* labels, A smoothing, const A* g,
                                                              const int* bad_labels, T* glogits) {
  const A scale = (bad_labels && *bad_labels) ? A(NAN) : *g / A(rows);
  const int64_t total = rows * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t r = e / k, j = e % k;
    glogits[e] = from_acc<T>(ce_grad(probs[e], j, labels[r], k, smoothing, scale));
  }
}

}  // namespace

template <class T, class A>
void cross_entropy_forward(int64_t rows, int64_t k, const T* logits, const int32_t* labels, A smoothing, A* probs,
                           A* loss, int* bad_labels, cudaStream_t s) {
  ENGINE_CHECK(rows >= 0 && k > 0, "cross_entropy_forward: bad shape rows=" << rows << " k=" << k);
  Workspace row_loss(sizeof(A) * static_cast<size_t>(rows));
  Workspace row_bad(sizeof(int) * static_cast<size_t>(rows));
  if (rows > 0) {
    ce_rows_kernel<T, A><<<detail::grid_for(rows * 32), kBlock, 0, s>>>(rows, k, logits, labels, smoothing, probs,
                                                                         row_loss.as<A>(), row_bad.as<int>());
    CHECK_LAUNCH();
  }
  ce_total_kernel<A><<<1, kBlock, 0, s>>>(rows, row_loss.as<A>(), row_bad.as<int>(), loss, bad_labels);
  CHECK_LAUNCH();
}

template <class T, class A>
void cross_entropy_backward(int64_t rows, int64_t k, const A* probs, const int32_t* labels, A smoothing, const A* g,
                            const int* bad_labels, T* glogits, cudaStream_t s) {
  ENGINE_CHECK(rows >= 0 && k > 0, "cross_entropy_backward: bad shape rows=" << rows << " k=" << k);
  if (rows == 0) return;
  ce_backward_kernel<T, A><<<detail::grid_for(rows * k), kBlock, 0, s>>>(rows, k, probs, labels, smoothing, g,
                                                                           bad_labels, glogits);
  CHECK_LAUNCH();
}

#define ENGINE_CUDA_CE(T, A)                                                                                       \
  template void cross_entropy_forward<T, A>(int64_t, int64_t, const T*, const int32_t*, A, A*, A*, int*,           \
                                            cudaStream_t);                                                         \
  template void cross_entropy_backward<T, A>(int64_t, int64_t, const A*, const int32_t*, A, const A*, const int*, \
                                             T*, cudaStream_t);
ENGINE_CUDA_CE(float, float)
ENGINE_CUDA_CE(double, double)
ENGINE_CUDA_CE(kernels::half, float)
ENGINE_CUDA_CE(kernels::bfloat16, float)
#undef ENGINE_CUDA_CE

}  // namespace kernels::cuda
