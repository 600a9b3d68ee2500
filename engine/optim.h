// Optimizers over Parameters: SGD (momentum, Nesterov, weight decay), Adam and AdamW.
// State is FP32 (like the masters); each step is one fused pass per parameter.
#pragma once

#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/nn.h"
#include "kernels/optim_math.h"

namespace engine {

namespace cuda {
class OptimizerPlan;
struct ParamRefs;
}

// How the optimizer's state is stored (--optimizer-state): kernels/optim_math.h.
using StateFormat = kernels::StateFormat;
const char* state_format_name(StateFormat f);        // "fp32", "bf16", "int8"
StateFormat parse_state_format(const std::string& s);  // the names above; an error otherwise

// What a step did. On the CPU the host knows at once. On a CUDA device the update is only
// queued: the device skips it when the found-inf flag is set, and the host learns which by
// reading the flag (Optimizer::last_step_skipped, LossScaler::found_inf), a wait it chooses.
enum class StepResult { Applied, Skipped, Queued };

class Optimizer {
 public:
  struct DeviceState;  // the multi-tensor plan and the device step counter (CUDA)
  Optimizer(std::vector<ParamPtr> params, double lr);
  virtual ~Optimizer() = default;

  // One update from the gradients on each parameter's value, each multiplied by inv_scale
  // (1/loss scale) in FP32 first. When any gradient holds inf or NaN nothing changes -
  // weights, state, step count - and it returns Skipped (Queued on CUDA, without a host
  // wait). Parameters with no gradient (unused in the forward pass) are left alone on both
  // backends, as in PyTorch: no weight decay, no momentum, no Adam moments move them.
  StepResult step(double inv_scale = 1.0);
  // Whether the last standalone step() skipped for inf/NaN; on CUDA it reads the device flag
  // (a wait). Steps driven by a LossScaler report through LossScaler::found_inf().
  bool last_step_skipped() const;
  // The parts of step(), for the loss scaler: the found-inf check, the update itself (no
  // check), and the squared L2 norm of all gradients times inv_scale (for clipping).
  bool grads_finite() const;
  void apply(double inv_scale);
  double grad_sq_norm(double inv_scale) const;
  // The same two passes for parameters on a CUDA device, each one multi-tensor launch that
  // reads 1/scale and the found-inf flag from device memory: the host never waits. The
  // update is skipped on the device when *found_inf is set.
  void check_finite_device(int* found_inf);
  void apply_device(const float* inv_scale, const int* found_inf);
  // *sq_sum (device FP64) = grad_sq_norm(*inv_scale), for clipping on the device.
  void grad_sq_norm_device(const float* inv_scale, double* sq_sum);
  bool on_cuda() const;
  // Before the first step (the state does not exist yet); BF16 and Int8 need FP32 masters.
  void set_state_format(StateFormat f);
  StateFormat state_format() const { return format_; }
  void zero_grad();
  // Parameter groups: these parameters (each one of this optimizer's) take lr * lr_scale and
  // their own weight decay (negative: the optimizer's). Before the first step.
  void set_param_group(const std::vector<ParamPtr>& params, double lr_scale, double weight_decay);
  const kernels::GroupOptions& group_options(size_t i) const { return options_[i]; }
  int64_t steps() const;  // applied (not skipped) steps; on CUDA read from the device
  const std::vector<ParamPtr>& params() const { return params_; }
  // Indices of the parameters a step updates now: the trainable ones holding a gradient.
  std::vector<size_t> stepped_parameters() const;
  // Checkpoint support: the step count and every state tensor ("optim/<i>/<what>").
  virtual void save_state(StateDict& out) const;
  virtual void load_state(const StateDict& in);

  double lr;

 protected:
  // Updates parameter i; `g` is its gradient, already checked finite.
  virtual void update(size_t i, Parameter& p, const Tensor& g, double inv_scale) = 0;
  // Zeroed state for p in this optimizer's format, counted as optimizer state: like the master
  // (FP32), its shape in BF16, or one code byte per element (Int8) with absmax_like beside it.
  Tensor state_like(const Parameter& p) const;
  Tensor absmax_like(const Parameter& p) const;  // Int8: FP32 [ceil(n / 256)]
  // Checkpoint helpers: the list as optim/<i>/<what>; loading makes each tensor as `make` does.
  void save_list(StateDict& out, const std::vector<Tensor>& list, const char* what) const;
  void load_list(const StateDict& in, std::vector<Tensor>& list, const char* what, bool absmax) const;
  // CUDA: creates every state tensor and gradient up front (the launch plan holds pointers).
  virtual void ensure_state() = 0;
  // CUDA: per parameter, the state the multi-tensor kernels update (FP32 or compact).
  virtual void state_refs(size_t i, cuda::ParamRefs& r) = 0;
  // CUDA: this optimizer's fused update through the multi-tensor plan (engine/cuda/backend.h).
  virtual void device_update(cuda::OptimizerPlan& plan, const float* inv_scale, const int* found_inf,
                             int64_t* step) = 0;
  void sync_steps_to_device();
  cuda::OptimizerPlan& device_plan();  // the plan over the stepped parameters, up to date

  std::vector<ParamPtr> params_;
  std::vector<kernels::GroupOptions> options_;  // one per parameter
  StateFormat format_ = StateFormat::F32;
  int64_t steps_ = 0;
  bool last_skipped_ = false;
  std::shared_ptr<DeviceState> dev_;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamPtr> params, double lr, double momentum = 0.0, double weight_decay = 0.0,
      bool nesterov = false, double dampening = 0.0);
  double momentum, weight_decay, dampening;
  bool nesterov;
  std::vector<Tensor> momentum_buffers;  // undefined until the first step (or without momentum)
  std::vector<Tensor> momentum_absmax;   // Int8 state: one FP32 scale per 256 values
  void save_state(StateDict& out) const override;
  void load_state(const StateDict& in) override;
  kernels::SgdConfig config() const;

 protected:
  void update(size_t i, Parameter& p, const Tensor& g, double inv_scale) override;
  void ensure_state() override;
  void state_refs(size_t i, cuda::ParamRefs& r) override;
  void device_update(cuda::OptimizerPlan& plan, const float* inv_scale, const int* found_inf,
                     int64_t* step) override;
};

// decoupled = false: Adam with L2 weight decay; true: AdamW.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamPtr> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
       double weight_decay = 0.0, bool decoupled = false);
  double beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::vector<Tensor> exp_avg, exp_avg_sq;
  std::vector<Tensor> exp_avg_absmax, exp_avg_sq_absmax;  // Int8 state: one FP32 scale per 256 values
  void save_state(StateDict& out) const override;
  void load_state(const StateDict& in) override;
  kernels::AdamConfig config() const;  // bias corrections for the next step, from the host count

 protected:
  void update(size_t i, Parameter& p, const Tensor& g, double inv_scale) override;
  void ensure_state() override;
  void state_refs(size_t i, cuda::ParamRefs& r) override;
  void device_update(cuda::OptimizerPlan& plan, const float* inv_scale, const int* found_inf,
                     int64_t* step) override;
};

}  // namespace engine
