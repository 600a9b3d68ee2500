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
  int64_t k, r, s;     // filters KRSC, [K, R, S, C / groups]
  int64_t stride = 1, pad = 0;
  // Grouped convolution: input and output channels split into `groups` equal parts, output
  // group g seeing input group g only. groups = c = k is depthwise (one filter per channel).
  int64_t groups = 1;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - s) / stride + 1; }
  int64_t group_c() const { return c / groups; }
  int64_t group_k() const { return k / groups; }
  int64_t patch() const { return r * s * group_c(); }  // one im2col row (of one group)
  bool pointwise() const { return r == 1 && s == 1 && stride == 1 && pad == 0 && groups == 1; }
  bool depthwise() const { return groups > 1 && groups == c && groups == k; }
};

// Max pooling over NHWC: square window `kernel`, square stride, zero-free padding `pad`.
// Max-pool saves each maximum's place in its window, r * kernel + q, in one byte.
constexpr int64_t kMaxPoolKernel = 16;

struct PoolShape {
  int64_t n, h, w, c;  // input NHWC
  int64_t kernel, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - kernel) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - kernel) / stride + 1; }
};

// What a linear layer may fuse after its GEMM.
enum class Epilogue { None, Relu, Gelu };

}  // namespace kernels
