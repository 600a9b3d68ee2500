// The FP32 region module and the loss scaler's state machine (autocast: engine/autocast.cpp).
#include "engine/amp.h"

#include "engine/ops_internal.h"
#include "kernels/scaler_math.h"

#include <cmath>
#include <limits>

#include "engine/cuda/backend.h"

namespace engine {

// ---- the FP32 region module -------------------------------------------------------------

ForceFp32::ForceFp32(std::shared_ptr<Module> inner_) : inner(std::move(inner_)) {
  ENGINE_CHECK(inner != nullptr, "ForceFp32: null module");
  for (auto& p : inner->parameters()) p->follows_compute_dtype = false;
  add_module("inner", inner);
}

Tensor ForceFp32::forward(const Tensor& x) {
  AutocastScope off(DType::F32, false);
  return (*inner)(cast(x, DType::F32));
}

std::string ForceFp32::describe() const { return "ForceFp32(" + inner->describe() + ")"; }

// ---- loss scaler ------------------------------------------------------------------------

LossScaler::LossScaler(LossScalerConfig config) : config_(config), scale_(config.enabled ? config.init_scale : 1.0) {
  if (!config_.enabled) return;
  ENGINE_CHECK(config_.init_scale > 0 && std::isfinite(config_.init_scale),
               "loss scaler: init scale " << config_.init_scale << " must be positive and finite");
  ENGINE_CHECK(config_.growth_factor > 1.0, "loss scaler: growth factor " << config_.growth_factor << " must be > 1");
  ENGINE_CHECK(config_.backoff_factor > 0.0 && config_.backoff_factor < 1.0,
               "loss scaler: backoff factor " << config_.backoff_factor << " must be in (0, 1)");
  ENGINE_CHECK(config_.growth_interval >= 1, "loss scaler: growth interval must be >= 1");
  ENGINE_CHECK(config_.min_scale >= 0 && config_.min_scale <= config_.init_scale,
               "loss scaler: min scale " << config_.min_scale << " must be in [0, init scale]");
}

struct LossScaler::DeviceState {
  Tensor scale, inv_scale, found_inf, tracker, skipped, consecutive;
  Tensor sq_sum, norm, clipped_inv_scale;  // gradient clipping (created on first use)
  std::unique_ptr<cuda::CounterMirror> consecutive_seen;  // the skip guard's view of `consecutive`
};

void LossScaler::ensure_device(Device d) const {
  if (dev_ || d.is_cpu()) return;
  auto st = std::make_shared<DeviceState>();
  MemKindScope kind(MemKind::OptimizerState);
  st->scale = Tensor::full({1}, scale_, DType::F32, d);
  st->inv_scale = Tensor::full({1}, 1.0, DType::F32, d);
  st->found_inf = Tensor::zeros({1}, DType::I32, d);
  st->tracker = Tensor::full({1}, static_cast<double>(growth_tracker_), DType::I32, d);
  st->skipped = Tensor::full({1}, static_cast<double>(skipped_steps_), DType::I64, d);
  st->consecutive = Tensor::full({1}, static_cast<double>(consecutive_skips_), DType::I64, d);
  dev_ = st;
}

double LossScaler::current_scale() const { return dev_ ? dev_->scale.item() : scale_; }
bool LossScaler::found_inf() const { return dev_ ? dev_->found_inf.item() != 0 : found_inf_; }
int64_t LossScaler::growth_tracker() const {
  return dev_ ? static_cast<int64_t>(dev_->tracker.item()) : growth_tracker_;
}
int64_t LossScaler::skipped_steps() const {
  return dev_ ? static_cast<int64_t>(dev_->skipped.item()) : skipped_steps_;
}
void LossScaler::check_skip_limit(int64_t consecutive) const {
  ENGINE_CHECK(config_.max_consecutive_skips == 0 || consecutive < config_.max_consecutive_skips,
               "loss scaler: " << consecutive << " consecutive steps skipped for inf/NaN gradients (scale " << current_scale()
                               << "); the loss or the data probably holds NaN");
}

int64_t LossScaler::consecutive_skips() const {
  const int64_t n = dev_ ? static_cast<int64_t>(dev_->consecutive.item()) : consecutive_skips_;
  check_skip_limit(n);
  return n;
}

Tensor LossScaler::scale(const Tensor& loss) const {
  if (!config_.enabled) return loss;
  if (loss.device().is_cpu()) return engine::scale(loss, scale_);
  // On the GPU the scale is read where it lies, forward and backward: no host wait.
  ensure_device(loss.device());
  ENGINE_CHECK(loss.dtype() == DType::F32, "loss scaler: the loss must be f32, got " << loss.desc());
  Tensor s = dev_->scale;
  Tensor y = like(loss);
  cuda::scale_by_device_scalar(loss, s, y);
  if (should_record({&loss})) {
    active_tape()->record("scale", {loss}, y, [s](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = like(gy);
      cuda::scale_by_device_scalar(gy, s, gx);
      return {gx};
    });
  }
  return y;
}

void LossScaler::unscale(Optimizer& opt) {
  ENGINE_CHECK(stage_ != Stage::Unscaled, "loss scaler: unscale() has already been called since the last update()");
  ENGINE_CHECK(stage_ != Stage::Stepped, "loss scaler: unscale() called after step(); call update() first");
  clip_coef_ = 1.0;
  clipped_on_device_ = false;
  stage_ = Stage::Unscaled;
  if (opt.on_cuda()) {
    ensure_device(opt.params()[0]->master.device());
    cuda::scaler_prepare(dev_->scale, dev_->inv_scale, dev_->found_inf);
    opt.check_finite_device(dev_->found_inf.data<int32_t>());
    return;
  }
  // 1/scale in FP64, then rounded to FP32 once: exact for the usual powers of two.
  inv_scale_ = static_cast<float>(1.0 / scale_);
  found_inf_ = !opt.grads_finite();
}

double LossScaler::clip_grad_norm(Optimizer& opt, double max_norm) {
  ENGINE_CHECK(max_norm > 0, "clip_grad_norm: max norm " << max_norm << " must be positive");
  if (stage_ == Stage::Ready) unscale(opt);
  ENGINE_CHECK(stage_ == Stage::Unscaled, "clip_grad_norm: call it between unscale() and step()");
  if (opt.on_cuda()) {
    // Two multi-tensor launches and a one-thread kernel: the norm and the clipped 1/scale stay
    // on the device and step() uses the latter. (An overflowed step is skipped by the found-inf
    // flag whatever the norm says.)
    const Device d = opt.params()[0]->master.device();
    if (!dev_->sq_sum.defined()) {
      MemKindScope kind(MemKind::OptimizerState);
      dev_->sq_sum = Tensor::zeros({1}, DType::F64, d);
      dev_->norm = Tensor::zeros({1}, DType::F64, d);
      dev_->clipped_inv_scale = Tensor::full({1}, 1.0, DType::F32, d);
    }
    opt.grad_sq_norm_device(dev_->inv_scale.data<float>(), dev_->sq_sum.data<double>());
    cuda::clip_scale(dev_->sq_sum, max_norm, dev_->inv_scale, dev_->found_inf, dev_->norm, dev_->clipped_inv_scale);
    clipped_on_device_ = true;
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (found_inf_) return last_norm_ = std::numeric_limits<double>::infinity();
  const double norm = std::sqrt(opt.grad_sq_norm(inv_scale_));
  last_norm_ = norm;
  if (!std::isfinite(norm)) {  // finite gradients whose squares overflow FP64 cannot happen; be safe
    found_inf_ = true;
    return norm;
  }
  const double coef = max_norm / (norm + 1e-6);
  clip_coef_ = coef < 1.0 ? coef : 1.0;
  return norm;
}

double LossScaler::last_grad_norm() const {
  if (dev_ && dev_->norm.defined()) return dev_->norm.item();
  return last_norm_;
}

StepResult LossScaler::step(Optimizer& opt) {
  ENGINE_CHECK(stage_ != Stage::Stepped, "loss scaler: step() has already been called since the last update()");
  if (stage_ == Stage::Ready) unscale(opt);
  stage_ = Stage::Stepped;
  if (dev_ && opt.on_cuda()) {
    // Queued: the kernels skip the update themselves when the flag is set; knowing which
    // would need a host wait (found_inf() tells).
    const Tensor& inv = clipped_on_device_ ? dev_->clipped_inv_scale : dev_->inv_scale;
    opt.apply_device(inv.data<float>(), dev_->found_inf.data<int32_t>());
    return StepResult::Queued;
  }
  if (found_inf_) {
    check_skip_limit(consecutive_skips_ + 1);  // update() counts it, by the shared rule
    return StepResult::Skipped;
  }
  opt.apply(inv_scale_ * clip_coef_);
  return StepResult::Applied;
}

void LossScaler::update() {
  ENGINE_CHECK(stage_ == Stage::Stepped, "loss scaler: update() called without step()");
  stage_ = Stage::Ready;
  if (dev_) {
    cuda::scaler_update(dev_->scale, dev_->tracker, dev_->skipped, dev_->consecutive, dev_->found_inf, rule());
    if (config_.max_consecutive_skips > 0) {
      // The count as of an earlier update, once its copy has landed; only then send this one's
      // (re-posting every step would move the event ahead of a GPU that runs behind the host,
      // and the guard would never see a landed copy).
      if (!dev_->consecutive_seen) dev_->consecutive_seen = cuda::make_counter_mirror();
      int64_t seen = 0;
      const bool landed = dev_->consecutive_seen->poll(&seen);
      if (landed) check_skip_limit(seen);
      if (landed || !dev_->consecutive_seen->posted()) dev_->consecutive_seen->post(dev_->consecutive);
    }
    return;
  }
  kernels::ScalerCounters<double> st{scale_, growth_tracker_, skipped_steps_, consecutive_skips_};
  kernels::scaler_update_rule(st, found_inf_, rule());
  scale_ = st.scale;
  growth_tracker_ = st.tracker;
  skipped_steps_ = st.skipped;
  consecutive_skips_ = st.consecutive;
}

kernels::ScalerRule LossScaler::rule() const {
  kernels::ScalerRule r;
  r.growth = config_.growth_factor;
  r.backoff = config_.backoff_factor;
  r.min_scale = config_.min_scale;
  r.interval = config_.growth_interval;
  r.dynamic = config_.enabled && config_.dynamic;
  return r;
}

LossScaler::State LossScaler::state() const {
  return {current_scale(), growth_tracker(), skipped_steps(), consecutive_skips()};
}

void LossScaler::load_state(const State& s) {
  ENGINE_CHECK(s.scale > 0 && std::isfinite(s.scale) && s.growth_tracker >= 0,
               "loss scaler: bad saved state (scale " << s.scale << ", tracker " << s.growth_tracker << ")");
  scale_ = s.scale;
  growth_tracker_ = s.growth_tracker;
  skipped_steps_ = s.skipped_steps;
  consecutive_skips_ = s.consecutive_skips;
  stage_ = Stage::Ready;
  if (dev_) {  // re-create the device copy from the loaded values
    const Device d = dev_->scale.device();
    dev_.reset();
    ensure_device(d);
  }
}

}  // namespace engine
