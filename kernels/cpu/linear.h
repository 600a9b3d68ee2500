// CPU reference linear layer, the twin of kernels/cuda/linear.h: x [rows, in], w [out, in] as in
// PyTorch, bias [out]. A linear layer is a 1x1 convolution over a 1x1 image, so these are the
// convolution kernels (FP32 accumulation, one rounding) under the linear op's names.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv.h"
#include "kernels/error.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

inline ConvShape linear_as_conv(int64_t rows, int64_t in, int64_t out) { return ConvShape{rows, 1, 1, in, out, 1, 1, 1, 0}; }

// y[rows, out] = x * w^T + bias (bias may be null), then ReLU when ep is Epilogue::Relu (the
// CPU fuses no other activation, and keeps no pre-activation copy).
template <class T>
void linear_forward(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* bias, T* y, Epilogue ep,
                    Stream = nullptr, T* pre_activation = nullptr) {
  ENGINE_CHECK((ep == Epilogue::None || ep == Epilogue::Relu) && pre_activation == nullptr,
               "linear_forward: the CPU kernel fuses ReLU only, with no pre-activation copy");
  conv2d_forward(linear_as_conv(rows, in, out), x, w, bias, y, nullptr, ep);
}
// gx[rows, in] = gy * w.
template <class T>
void linear_backward_data(int64_t rows, int64_t in, int64_t out, const T* gy, const T* w, T* gx, Stream = nullptr) {
  conv2d_backward_data(linear_as_conv(rows, in, out), gy, w, gx);
}
// gw[out, in] = gy^T * x; gbias[out] = column sums of gy (when non-null).
template <class T>
void linear_backward_weight(int64_t rows, int64_t in, int64_t out, const T* x, const T* gy, T* gw, T* gbias,
                            Stream = nullptr) {
  conv2d_backward_filter(linear_as_conv(rows, in, out), x, gy, gw, gbias);
}

}  // namespace kernels::cpu
