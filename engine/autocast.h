// The autocast policy: which ops run in the compute dtype (FP16/BF16), which in FP32,
// and the scope that switches it on, like torch.autocast.
#pragma once

#include <string>

#include "engine/tensor.h"

namespace engine {

// ---- autocast ---------------------------------------------------------------------------
// The policy in one place. Convolutions and matrix products run in the compute dtype
// (FP16/BF16 inputs, FP32 accumulation inside the kernel); softmax, losses, reductions and
// batch-norm statistics and parameters are computed in FP32 whatever their input; the
// remaining element-wise ops keep their input's dtype.
enum class Precision { ComputeDtype, Fp32, KeepInput };
Precision op_precision(const std::string& op);

// While an AutocastScope(dtype) is open, ComputeDtype ops cast inputs of another floating
// dtype to `dtype` (recorded on the tape, so gradients flow back in the input's dtype).
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
// Input `t` of `op` as the policy wants it: cast to the autocast dtype when autocast is on,
// the op is a ComputeDtype op, and `t` is floating and of another dtype; else `t` itself.
Tensor autocast_input(const char* op, const Tensor& t);

}  // namespace engine
