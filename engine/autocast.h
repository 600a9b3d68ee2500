// The autocast policy: which ops run in the compute dtype (FP16/BF16), which in FP32,
// and the scope that switches it on, like torch.autocast.
#pragma once

#include <string>

#include "engine/tensor.h"

namespace engine {

// ---- autocast ---------------------------------------------------------------------------
// The policy in one place, and what autocast_input does with each op's inputs: convolutions
// and matrix products run in the compute dtype (FP16/BF16 inputs cast to it, FP32 accumulation
// inside the kernel); the loss and reductions get FP32 inputs (FP16/BF16 widened); the rest keep
// their input's dtype (batch-norm's statistics and parameters are FP32 inside its kernels).
enum class Precision { ComputeDtype, Fp32, KeepInput };
Precision op_precision(const std::string& op);

// While an AutocastScope(dtype) is open, ComputeDtype ops cast inputs of another floating
// dtype to `dtype`, Fp32 ops widen FP16/BF16 inputs to FP32 (recorded on the tape, so
// gradients flow back in the input's dtype).
// AutocastScope(dtype, false) turns that off inside, like torch.autocast(enabled=False).
class AutocastScope {
 public:
  explicit AutocastScope(DType dtype, bool enabled = true);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool saved_enabled_;
  DType saved_dtype_;
};
bool autocast_enabled();
DType autocast_dtype();
// Input `t` of `op` as the policy wants it while autocast is on (see above); else `t` itself.
Tensor autocast_input(const char* op, const Tensor& t);

}  // namespace engine
