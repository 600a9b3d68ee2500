// Helpers shared by the op files: the device gate and the accumulation dtype.
#pragma once

#include "engine/ops.h"

namespace engine {

// FP32 for FP16/BF16/FP32 data, FP64 for FP64 (gradient checks).
inline DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// The CPU reference is the only backend wired into the ops so far.
inline void require_cpu(const char* op, const Tensor& t) {
  ENGINE_CHECK(t.device().is_cpu(), op << ": " << t.desc() << " is on " << t.device().str()
                                       << ", and this op has no CUDA implementation in this build yet");
}

inline Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

}  // namespace engine
