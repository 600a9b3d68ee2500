// Helpers shared by the op files: the one kernel dispatch, the accumulation dtype, and the
// checks every op makes. An op reads:
//   const Device dev = op_device("relu", {&x});
//   ENGINE_KERNEL("relu", dev, x.dtype(), T, K::relu_forward(x.data<T>(), y.data<T>(), n, stream));
// and that one line runs kernels::cpu::relu_forward or kernels::cuda::relu_forward: the two
// backends' kernels of an op share one signature (kernels/shapes.h), the stream last.
#pragma once

#include <initializer_list>

#include "engine/ops.h"
#include "engine/profile.h"
#include "kernels/cpu/augment.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/range_stats.h"
#include "kernels/shapes.h"

#ifdef ENGINE_WITH_CUDA  // the CUDA twins, same names and signatures
#include "kernels/cuda/augment.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/range_stats.h"
#endif

namespace engine {

// FP32 for FP16/BF16/FP32 data, FP64 for FP64 (gradient checks).
inline DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

inline Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

// The device an op runs on: that of its (defined) tensors, which must all agree.
inline Device op_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    ENGINE_CHECK(t->device() == first->device(),
                 op << ": tensors on different devices, " << first->desc() << " and " << t->desc());
  }
  ENGINE_CHECK(first, op << ": no tensor to run on");
  return first->device();
}

#ifdef ENGINE_WITH_CUDA
inline kernels::Stream cuda_stream() { return kernels::cuda::default_stream(); }
#endif

}  // namespace engine

// ENGINE_KERNEL(opname, device, dtype, T, call): runs `call` once, on the device's backend,
// with T bound to dtype's C++ type, K to that backend's kernel namespace (kernels::cpu or
// kernels::cuda) and `stream` to its stream (the engine's CUDA stream; null on the CPU).
// On the CPU the call is timed under opname when kernel profiling is on (engine/profile.h).
// The CUDA kernels are built for the training dtypes; FP64 (gradient checks) is CPU-only,
// except in ENGINE_KERNEL_ANY_FLOAT, for kernels the GPU also has in FP64 (casts).
#define ENGINE_CASE_(D, CT, T, ...) \
  case ::engine::DType::D: { using T = CT; __VA_ARGS__; break; }
// Passed by name (f64_case) and expanded inside, so the body's commas stay in one argument.
#define ENGINE_CASE_F64_(T, ...) ENGINE_CASE_(F64, double, T, __VA_ARGS__)
#define ENGINE_NO_CASE_(T, ...)
#ifdef ENGINE_WITH_CUDA
#define ENGINE_KERNEL_CUDA_(opname, dtype, T, f64_case, ...)                                            \
  {                                                                                                     \
    namespace K = ::kernels::cuda;                                                                      \
    [[maybe_unused]] const ::kernels::Stream stream = ::engine::cuda_stream();                          \
    switch (dtype) {                                                                                    \
      ENGINE_CASE_(F32, float, T, __VA_ARGS__)                                                          \
      ENGINE_CASE_(F16, ::engine::half, T, __VA_ARGS__)                                                 \
      ENGINE_CASE_(BF16, ::engine::bfloat16, T, __VA_ARGS__)                                            \
      f64_case(T, __VA_ARGS__)                                                                          \
      default:                                                                                          \
        ENGINE_FAIL(opname << ": " << ::engine::dtype_name(dtype)                                       \
                           << " is not supported on CUDA (f32, f16, bf16 are; f64 runs on the CPU)");   \
    }                                                                                                   \
  }
#else
#define ENGINE_KERNEL_CUDA_(opname, dtype, T, f64_case, ...) \
  ENGINE_FAIL(opname << ": the tensors are on a CUDA device, but this build has no CUDA backend");
#endif

#define ENGINE_KERNEL_ON_(opname, device, dtype, T, f64_case, ...)      \
  do {                                                                \
    if ((device).is_cuda()) {                                         \
      ENGINE_KERNEL_CUDA_(opname, dtype, T, f64_case, __VA_ARGS__)    \
    } else {                                                          \
      namespace K = ::kernels::cpu;                                   \
      [[maybe_unused]] const ::kernels::Stream stream = nullptr;      \
      const ::engine::KernelTimer kernel_timer_(opname);              \
      ENGINE_DISPATCH_FLOAT(dtype, opname, T, __VA_ARGS__);           \
    }                                                                 \
  } while (0)

// The CPU branch alone, for what only the CPU kernels offer (the fused ReLU stores).
#define ENGINE_CPU_KERNEL(opname, dtype, T, ...)                  \
  do {                                                           \
    namespace K = ::kernels::cpu;                                \
    [[maybe_unused]] const ::kernels::Stream stream = nullptr;   \
    const ::engine::KernelTimer kernel_timer_(opname);           \
    ENGINE_DISPATCH_FLOAT(dtype, opname, T, __VA_ARGS__);        \
  } while (0)

#define ENGINE_KERNEL(opname, device, dtype, T, ...) \
  ENGINE_KERNEL_ON_(opname, device, dtype, T, ENGINE_NO_CASE_, __VA_ARGS__)
#define ENGINE_KERNEL_ANY_FLOAT(opname, device, dtype, T, ...) \
  ENGINE_KERNEL_ON_(opname, device, dtype, T, ENGINE_CASE_F64_, __VA_ARGS__)
