// Helpers shared by the op files: device dispatch, the accumulation dtype, and the CUDA
// stream. Each op reads: ENGINE_ON_CUDA(t, <CUDA kernel call>) <CPU kernel call>;
#pragma once

#include "engine/ops.h"

#ifdef ENGINE_WITH_CUDA
#include "kernels/cuda/context.h"
#endif

namespace engine {

// FP32 for FP16/BF16/FP32 data, FP64 for FP64 (gradient checks).
inline DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

inline Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

#ifdef ENGINE_WITH_CUDA
inline cudaStream_t cuda_stream() { return kernels::cuda::default_stream(); }
#endif

}  // namespace engine

// Runs the CUDA body for tensors on a CUDA device (an error in a build without CUDA), and
// the statement that follows for CPU tensors.
#ifdef ENGINE_WITH_CUDA
#define ENGINE_ON_CUDA(t, ...)   \
  if ((t).device().is_cuda()) {  \
    __VA_ARGS__;                 \
  } else
#else
#define ENGINE_ON_CUDA(t, ...)                                                                  \
  if ((t).device().is_cuda()) {                                                                 \
    ENGINE_FAIL((t).desc() << " is on a CUDA device, but this build has no CUDA backend");      \
  } else
#endif

// The CUDA kernels are built for the training dtypes; FP64 (gradient checks) is CPU-only.
#define ENGINE_DISPATCH_CUDA(dtype, opname, T, ...)                                      \
  switch (dtype) {                                                                       \
    case ::engine::DType::F32: { using T = float; __VA_ARGS__; break; }                  \
    case ::engine::DType::F16: { using T = ::engine::half; __VA_ARGS__; break; }         \
    case ::engine::DType::BF16: { using T = ::engine::bfloat16; __VA_ARGS__; break; }    \
    default:                                                                             \
      ENGINE_FAIL(opname << ": " << ::engine::dtype_name(dtype)                          \
                         << " is not supported on CUDA (f32, f16, bf16 are; f64 runs on the CPU)"); \
  }
