// Mixed precision: the FP32-region module and the dynamic loss scaler with PyTorch
// GradScaler semantics (the autocast policy itself is in engine/autocast.h).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "engine/autocast.h"
#include "engine/nn.h"
#include "engine/optim.h"
#include "kernels/scaler_math.h"

namespace engine {

// Runs `inner` entirely in FP32 inside an FP16/BF16 model: its input is cast to FP32,
// autocast is off inside, and its parameters keep FP32 values (no compute copies).
class ForceFp32 : public Module {
 public:
  explicit ForceFp32(std::shared_ptr<Module> inner);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  std::shared_ptr<Module> inner;
};

// ---- dynamic loss scaling ---------------------------------------------------------------
struct LossScalerConfig {
  bool enabled = true;           // false: scale 1, never skips for overflow reasons (BF16, FP32)
  bool dynamic = true;           // false: a static scale of init_scale
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0.0;             // the scale never backs off below this (0: no floor)
  int64_t max_consecutive_skips = 0;  // throw after this many skipped steps in a row (0: never)
};

// Usage per step (GradScaler's protocol):
//   loss_scaled = scaler.scale(loss); tape.backward(loss_scaled);
//   [scaler.unscale(opt); clip by norm ...]  scaler.step(opt); scaler.update();
// Gradients are never rewritten: unscale() only computes 1/scale and the found-inf flag,
// and the fused optimizer step multiplies each gradient by 1/scale as it reads it.
class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});

  Tensor scale(const Tensor& loss) const;  // loss * scale, recorded (backward seeds `scale`)

  // Computes inv_scale = float(1 / double(scale)) and checks every gradient for inf/NaN.
  // A second call before update(), or a call after step(), is an error.
  void unscale(Optimizer& opt);
  // Global L2 norm of the unscaled gradients (after unscale); scales the coming update
  // so the norm is at most max_norm. Returns the norm before clipping (inf when found_inf).
  // On a CUDA device the norm stays in device memory (no host wait) and this returns NaN;
  // last_grad_norm() reads it.
  double clip_grad_norm(Optimizer& opt, double max_norm);
  // The norm the last clip_grad_norm computed (NaN before any); on CUDA a host wait.
  double last_grad_norm() const;
  // Unscales if not yet done; skips the whole update when any gradient overflowed,
  // otherwise applies it with 1/scale. On the CPU returns Applied or Skipped; on a CUDA device
  // Queued: the device skips it itself, and found_inf() tells which (a host wait).
  StepResult step(Optimizer& opt);
  // Backoff on overflow (reset the clean-step tracker), growth after growth_interval clean
  // steps (never to inf); skips are counted here, on both backends. Must follow step().
  void update();

  // On a CUDA device the state lives in device memory and these read it (a host wait):
  // call them to log, not inside the step. There update() checks max_consecutive_skips
  // against a copy of the counter that the device sends back asynchronously (no wait), so
  // the abort comes as late as the GPU runs behind the host, plus a step or two; skipped steps
  // change nothing meanwhile.
  double current_scale() const;
  bool found_inf() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;
  int64_t consecutive_skips() const;
  const LossScalerConfig& config() const { return config_; }

  // For checkpoints: everything update() depends on.
  struct State { double scale; int64_t growth_tracker, skipped_steps, consecutive_skips; };
  State state() const;
  void load_state(const State& s);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct DeviceState;  // scale, 1/scale, found-inf flag and counters in device memory
  void ensure_device(Device d) const;
  bool on_device() const { return dev_ != nullptr; }
  void check_skip_limit(int64_t consecutive) const;  // throws at max_consecutive_skips
  kernels::ScalerRule rule() const;                   // the config as the shared update rule reads it

  mutable std::shared_ptr<DeviceState> dev_;
  LossScalerConfig config_;
  double scale_;
  double inv_scale_ = 1.0;
  double clip_coef_ = 1.0;
  double last_norm_ = std::numeric_limits<double>::quiet_NaN();
  bool clipped_on_device_ = false;  // this step's update uses the device's clipped 1/scale
  bool found_inf_ = false;
  int64_t growth_tracker_ = 0, skipped_steps_ = 0, consecutive_skips_ = 0;
  Stage stage_ = Stage::Ready;
};

}  // namespace engine
