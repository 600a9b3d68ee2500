// CUDA element-wise kernels and small reductions over raw device pointers: the GPU twins of
// kernels/cpu/elementwise.h (same formulas from kernels/element_math.h, math in acc_t<T>,
// one rounding on store). T is float, double, kernels::half or kernels::bfloat16.
// Every function queues work on `stream` and returns without synchronising; n == 0 is a
// no-op. Outputs may alias inputs exactly (y == x), never partially.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/numeric.h"

namespace kernels::cuda {

template <class T> void relu_forward(const T* x, T* y, int64_t n, cudaStream_t stream);
template <class T> void relu_backward(const T* x, const T* gy, T* gx, int64_t n, cudaStream_t stream);
// Any unary op of kernels/element_math.h (built for each one in ENGINE_UNARY_OPS).
template <class Op, class T> void unary_forward(const T* x, T* y, int64_t n, cudaStream_t stream);
template <class Op, class T> void unary_backward(const T* x, const T* gy, T* gx, int64_t n, cudaStream_t stream);
template <class T> void add(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);  // y = a + b
template <class T> void scale(const T* x, double s, T* y, int64_t n, cudaStream_t stream);  // y = s * x
// In place, both: avg += weight * (w - avg); w = avg (kernels/optim_math.h average_step).
template <class T> void weight_average(T* avg, T* w, double weight, int64_t n, cudaStream_t stream);
// y = convert<To>(x): every pair of {float, double, half, bfloat16}, one correct rounding
// (double -> half/bf16 directly, without going through float).
template <class From, class To> void cast(const From* x, To* y, int64_t n, cudaStream_t stream);
// Inverted dropout, y = keep(first + i) ? x / (1 - p) : 0 with keep(k) = kernels::dropout_keep(seed,
// rng_stream, k, p): bit-identical masks to the CPU. The same call serves backward (x = gy).
template <class T>
void dropout(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t rng_stream, uint64_t first,
             cudaStream_t stream);
template <class T> void fill(T* y, double value, int64_t n, cudaStream_t stream);  // value rounded once to T
// y[i] = *value rounded once to T, the value read from device memory (sum's backward): no wait.
template <class T> void fill_from_device(T* y, const acc_t<T>* value, int64_t n, cudaStream_t stream);
void zero(void* p, size_t bytes, cudaStream_t stream);                              // cudaMemsetAsync 0
// Sets *found_inf = 1 (device int) when any element is inf or NaN; never clears it, so one
// flag can collect the verdict over many tensors. No host synchronisation.
template <class T> void all_finite(const T* x, int64_t n, int* found_inf, cudaStream_t stream);
// *out (device) = sum of all elements in acc_t<T>; deterministic (fixed reduction tree).
template <class T> void sum(const T* x, int64_t n, acc_t<T>* out, cudaStream_t stream);
// y[r, c] += bias[c] for a row-major [rows, cols] y (the bias of NHWC convolutions).
template <class T> void add_row_bias(int64_t rows, int64_t cols, const T* bias, T* y, cudaStream_t stream);
// out[c] = sum over r of x[r, c], summed in acc_t<T>, rounded once; deterministic.
// (bias gradients; out is overwritten).
template <class T> void column_sum(int64_t rows, int64_t cols, const T* x, T* out, cudaStream_t stream);

}  // namespace kernels::cuda
