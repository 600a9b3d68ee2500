// Implicit-GEMM convolution on the CPU (FP32 arithmetic, storage FP32/FP16/BF16): the GEMM's
// A operand is read straight from a zero-padded copy of the input, never from an im2col matrix.
// Implemented in conv_implicit.cpp; conv.h picks it for the shapes below and keeps the
// im2col + GEMM path for the rest (and as the reference the tests compare against).
#pragma once

#include <cstdint>

#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// Which convolutions each implicit kernel takes: one group, not pointwise (1x1 already skips
// im2col), weights small enough to stay in L2 (up to 640 KiB: 128 -> 128 channels 3x3), and
// the channels the micro-kernel keeps in vector lanes a whole number of SIMD vectors: the
// output channels forward and for the filter gradient, the input channels for the data
// gradient, which is itself a forward convolution of gy (stride 1, square filters only).
bool implicit_forward_fits(const ConvShape& sh);
bool implicit_backward_data_fits(const ConvShape& sh);
bool implicit_backward_filter_fits(const ConvShape& sh);

// The same contracts as conv2d_forward / conv2d_backward_data / conv2d_backward_filter in
// conv.h (bias and gbias may be null), for the shapes the *_fits functions accept. The filter
// gradient sums fixed blocks of images in a fixed order: the same bits for any thread count.
template <class T> void conv2d_forward_implicit(const ConvShape& sh, const T* x, const T* w, const T* bias, T* y);
template <class T> void conv2d_backward_data_implicit(const ConvShape& sh, const T* gy, const T* w, T* gx);
template <class T>
void conv2d_backward_filter_implicit(const ConvShape& sh, const T* x, const T* gy, T* gw, T* gbias);

#define KERNELS_CONV_IMPLICIT_EXTERN(T)                                                                           \
  extern template void conv2d_forward_implicit<T>(const ConvShape&, const T*, const T*, const T*, T*);           \
  extern template void conv2d_backward_data_implicit<T>(const ConvShape&, const T*, const T*, T*);               \
  extern template void conv2d_backward_filter_implicit<T>(const ConvShape&, const T*, const T*, T*, T*);
KERNELS_CONV_IMPLICIT_EXTERN(float)
KERNELS_CONV_IMPLICIT_EXTERN(half)
KERNELS_CONV_IMPLICIT_EXTERN(bfloat16)
#undef KERNELS_CONV_IMPLICIT_EXTERN

}  // namespace kernels::cpu
