// What the CPU and CUDA kernels of an op share in their one signature: the shape structs and
// the stream (a CUDA stream on the GPU; the CPU kernels take it too, and ignore it).
#pragma once

#include <cstdint>

// Declared exactly as cuda_runtime.h does, so CPU code needs no CUDA header.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace kernels {

using Stream = cudaStream_t;

// 2-D convolution: activations NHWC, filters KRSC (k outputs, r x s taps, c inputs).
struct ConvShape {
  int64_t n, h, w, c;  // input NHWC
  int64_t k, r, s;     // filters KRSC
  int64_t stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - s) / stride + 1; }
  int64_t patch() const { return r * s * c; }  // one im2col row
  bool pointwise() const { return r == 1 && s == 1 && stride == 1 && pad == 0; }
};

// Max pooling over NHWC: square window `kernel`, square stride, zero-free padding `pad`.
struct PoolShape {
  int64_t n, h, w, c;  // input NHWC
  int64_t kernel, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - kernel) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - kernel) / stride + 1; }
};

// What a linear layer may fuse after its GEMM.
enum class Epilogue { None, Relu, Gelu };

}  // namespace kernels
