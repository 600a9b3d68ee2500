// CUDA fused optimizer steps, the twins of kernels/cpu/optim.h, over all parameters in one
// launch. Per element: read the gradient in its storage type, widen to FP32, multiply by
// *inv_scale (device), update the FP32 master and state with kernels::sgd_update /
// kernels::adam_update, and write the compute copy (FP16/BF16/FP32/FP64) when there is one.
// When *found_inf (device int) is non-zero every thread returns at once: the step is skipped
// as a whole without the host ever looking at the flag.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/context.h"
#include "kernels/optim_math.h"

namespace kernels::cuda {

enum class ElemType : uint8_t { None, F32, F64, F16, BF16 };
const char* elem_type_name(ElemType t);

// One parameter: n elements; grad in grad_type; FP32 master; state1 (SGD momentum buffer, or
// Adam's m), state2 (Adam's v), null where unused; copy in copy_type, or null/None when the
// master itself is the parameter's value.
// A slot's state (kernels/optim_math.h StateFormat) is FP32 in state1/state2, or compact in
// qstate1/qstate2 (BF16 values; int8 codes with one FP32 absmax per kQuantBlock values in
// absmax1/absmax2).
struct ParamSlot {
  const void* grad = nullptr;
  double lr_scale = 1.0, weight_decay = -1.0;  // the parameter group's (kernels/optim_math.h for_group)
  ElemType grad_type = ElemType::F32;
  float* master = nullptr;
  float* state1 = nullptr;
  float* state2 = nullptr;
  StateFormat state_format = StateFormat::F32;
  void* qstate1 = nullptr;  // SGD's momentum or Adam's m, compact (signed codes)
  void* qstate2 = nullptr;  // Adam's v, compact (unsigned codes)
  float* absmax1 = nullptr;
  float* absmax2 = nullptr;
  void* copy = nullptr;
  ElemType copy_type = ElemType::None;
  int64_t n = 0;
};

// The parameter list uploaded once to device memory (slots + a table of fixed-size chunks,
// one thread block each), so every later step is a single launch with no host-to-device
// copy. Rebuild it when any pointer changes (the engine keeps gradients and state alive
// across steps, so that is only when the parameter set changes).
class MultiTensorPlan {
 public:
  // Elements per thread block (32 per thread); a multiple of kQuantBlock, so compact state's
  // blocks never straddle two thread blocks.
  static constexpr int64_t kChunk = 8192;
  MultiTensorPlan(const std::vector<ParamSlot>& slots, cudaStream_t stream);
  ~MultiTensorPlan();
  MultiTensorPlan(const MultiTensorPlan&) = delete;
  MultiTensorPlan& operator=(const MultiTensorPlan&) = delete;

  const std::vector<ParamSlot>& slots() const { return host_slots_; }
  int64_t chunks() const { return chunks_; }
  int64_t elements() const { return elements_; }
  const void* device_slots() const { return d_slots_; }
  const void* device_chunks() const { return d_chunks_; }
  double* device_partials() const { return d_partials_; }  // one FP64 per chunk (the norm's partial sums)

 private:
  std::vector<ParamSlot> host_slots_;
  void* d_slots_ = nullptr;
  void* d_chunks_ = nullptr;
  double* d_partials_ = nullptr;
  size_t slots_bytes_ = 0, chunks_bytes_ = 0;
  int64_t chunks_ = 0, elements_ = 0;
};

// Sets *found_inf = 1 when any gradient of the plan holds inf/NaN (never clears it).
void multi_all_finite(const MultiTensorPlan& plan, int* found_inf, cudaStream_t stream);

// Gradient clipping by global norm, without the host: *sq_sum (device) = the sum over every
// gradient of (double(g) * *inv_scale)^2, as the CPU's Optimizer::grad_sq_norm, summed per
// chunk and then over the chunks in order (deterministic). Then clip_scale writes
// *norm = sqrt(*sq_sum) (inf when *found_inf is set, as on the CPU) and *clipped_inv_scale =
// float(*inv_scale * min(1, max_norm / (norm + 1e-6))), which the fused step then uses as its
// 1/scale.
void multi_grad_sq_norm(const MultiTensorPlan& plan, const float* inv_scale, double* sq_sum, cudaStream_t stream);
void clip_scale(const double* sq_sum, double max_norm, const float* inv_scale, const int* found_inf, double* norm,
                float* clipped_inv_scale, cudaStream_t stream);

// The device-side step state. Each pointer may be null:
//   inv_scale: null -> 1;  found_inf: null -> never skip;
//   step (int64, the number of *applied* steps so far): null -> the host values below are
//   used (first_step for SGD, cfg.bias_correction1/2 for Adam); non-null -> SGD's first step
//   is *step == 0 and Adam's bias corrections are 1 - beta^(*step + 1), computed on device.
struct StepScalars {
  const float* inv_scale = nullptr;
  const int* found_inf = nullptr;
  const int64_t* step = nullptr;
  bool first_step = false;  // SGD, when step == nullptr
};

void multi_sgd_step(const MultiTensorPlan& plan, const SgdConfig& cfg, const StepScalars& sc, cudaStream_t stream);
void multi_adam_step(const MultiTensorPlan& plan, const AdamConfig& cfg, const StepScalars& sc, cudaStream_t stream);
// ++*step unless *found_inf (null: always): queue it after the update.
void advance_step(int64_t* step, const int* found_inf, cudaStream_t stream);

}  // namespace kernels::cuda
