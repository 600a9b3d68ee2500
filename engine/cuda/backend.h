// The device side of the optimizer and the loss scaler, behind a small interface, so that
// engine/optim.cpp and engine/amp.cpp read as the algorithm. Free of CUDA headers: a CUDA
// build compiles engine/cuda/backend.cpp (multi-tensor launches, one-thread scaler
// kernels); a CPU-only build compiles engine/cuda/backend_none.cpp, whose functions throw.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "kernels/optim_math.h"
#include "kernels/scaler_math.h"

namespace engine::cuda {

// One parameter as the fused step sees it: its gradient, FP32 master, up to two FP32 state
// buffers (SGD momentum; Adam m and v) and its compute copy (undefined when the master is
// the value itself).
struct ParamRefs {
  Tensor grad, copy;
  float* master = nullptr;
  double lr_scale = 1.0, weight_decay = -1.0;  // its parameter group's (kernels/optim_math.h)
  float* state1 = nullptr;  // FP32 state
  float* state2 = nullptr;
  // Compact state (--optimizer-state bf16 | int8): BF16 values in qstate, or int8 codes in
  // qstate with one FP32 absmax per 256 values; state1/state2 are then null.
  kernels::StateFormat state_format = kernels::StateFormat::F32;
  void* qstate1 = nullptr;
  void* qstate2 = nullptr;
  float* absmax1 = nullptr;
  float* absmax2 = nullptr;
};

// The multi-tensor launch plan over the stepped parameters, uploaded once and rebuilt only
// when a pointer changes. Every call queues work on the engine stream: nothing waits.
class OptimizerPlan {
 public:
  virtual ~OptimizerPlan() = default;
  virtual void set_params(const std::vector<ParamRefs>& params) = 0;
  virtual void check_finite(int* found_inf) = 0;                       // sets the flag, never clears it
  virtual void grad_sq_norm(const float* inv_scale, double* sq_sum) = 0;  // for clipping
  // The update, skipped on the device when *found_inf is set; *step counts applied steps
  // (SGD's first step, Adam's bias corrections read it) and is advanced after.
  virtual void sgd_step(const kernels::SgdConfig& c, const float* inv_scale, const int* found_inf,
                        int64_t* step) = 0;
  virtual void adam_step(const kernels::AdamConfig& c, const float* inv_scale, const int* found_inf,
                         int64_t* step) = 0;
};
std::unique_ptr<OptimizerPlan> make_optimizer_plan();

// The loss scaler's kernels: y = x * (*scale) for f32 tensors; 1/scale and the flag reset
// before a step; the clipped 1/scale from the squared norm; the shared update rule after.
void scale_by_device_scalar(const Tensor& x, const Tensor& scale, Tensor& y);
void scaler_prepare(const Tensor& scale, Tensor& inv_scale, Tensor& found_inf);
void clip_scale(const Tensor& sq_sum, double max_norm, const Tensor& inv_scale, const Tensor& found_inf, Tensor& norm,
                Tensor& clipped_inv_scale);
void scaler_update(Tensor& scale, Tensor& tracker, Tensor& skipped, Tensor& consecutive, const Tensor& found_inf,
                   const kernels::ScalerRule& rule);

// A device int64 watched from the host without waiting (kernels::cuda::HostMirror).
class CounterMirror {
 public:
  virtual ~CounterMirror() = default;
  virtual void post(const Tensor& counter) = 0;  // queue a copy of counter[0]
  virtual bool poll(int64_t* value) = 0;         // the last copy, once it has landed
  virtual bool posted() const = 0;
};
std::unique_ptr<CounterMirror> make_counter_mirror();

}  // namespace engine::cuda
