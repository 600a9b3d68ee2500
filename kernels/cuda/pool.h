// CUDA pooling over NHWC tensors, the twins of kernels/cpu/pool.h: max-pool saving the argmax
// in one byte (its place in the window, r * kernel + q; first maximum in scan order wins, a NaN
// wins and stays), its backward, and global average pooling. T: float, double, half, bfloat16.
#pragma once

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/shapes.h"

namespace kernels::cuda {


template <class T> void max_pool2d_forward(const PoolShape& d, const T* x, T* y, uint8_t* argmax, cudaStream_t stream);
// gx is overwritten, as on the CPU (the contract of both backends): each input element
// gathers the gradients of the windows whose argmax it is, in the CPU's order and with its
// per-addition rounding to T, so the result is bit-identical to the CPU reference.
template <class T>
void max_pool2d_backward(const PoolShape& d, const T* gy, const uint8_t* argmax, T* gx, cudaStream_t stream);
// y[n, c] = mean over hw of x[n, hw, c] (sum in acc_t<T>, in order, then one division).
template <class T> void global_avg_pool_forward(int64_t n, int64_t hw, int64_t c, const T* x, T* y, cudaStream_t stream);
// Channel gate, the twins of kernels/cpu/pool.h: y = x * g[n, c]; gg[n, c] = sum_p gy * x.
template <class T>
void channel_gate_forward(int64_t n, int64_t hw, int64_t c, const T* x, const T* g, T* y, cudaStream_t stream);
template <class T>
void channel_gate_backward_gate(int64_t n, int64_t hw, int64_t c, const T* x, const T* gy, T* gg,
                                cudaStream_t stream);
template <class T>
void global_avg_pool_backward(int64_t n, int64_t hw, int64_t c, const T* gy, T* gx, cudaStream_t stream);

}  // namespace kernels::cuda
