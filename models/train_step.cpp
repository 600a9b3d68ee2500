// The training step (models/train_step.h): PyTorch's AMP loop, split at the micro-batch.
#include "models/train_step.h"

#include "engine/autocast.h"
#include "engine/ops.h"
#include "engine/tape.h"

#include <algorithm>
#include <cmath>

namespace models {

using engine::Tensor;

Tensor forward_backward(engine::Module& model, engine::LossScaler& scaler, const Tensor& x, const Tensor& y,
                        engine::DType compute, double label_smoothing, const Tensor& share,
                        engine::dist::GradReducer* reducer, engine::Reduction reduction) {
  engine::Tape tape;
  if (reducer) reducer->attach(tape);
  Tensor loss;
  {
    engine::TapeScope record(tape);
    engine::AutocastScope autocast(compute);                     // conv/linear in FP16/BF16
    loss = engine::cross_entropy(model(x), y, label_smoothing, reduction);  // the loss in FP32
    tape.backward(scaler.scale(loss), share);                    // from loss * scale * share
  }
  if (reducer) reducer->finish();  // the summed gradients, on every rank
  return loss;
}

void optimizer_step(engine::Optimizer& opt, engine::LossScaler& scaler, double clip_grad_norm) {
  if (clip_grad_norm > 0) scaler.clip_grad_norm(opt, clip_grad_norm);  // unscales first
  scaler.step(opt);  // unscale + found-inf check + fused update; skipped on inf/NaN
  scaler.update();   // back off on overflow, grow after a run of clean steps
}

Tensor train_step(engine::Module& model, engine::Optimizer& opt, engine::LossScaler& scaler, const Tensor& x,
                  const Tensor& y, engine::DType compute, double label_smoothing, double clip_grad_norm,
                  const Tensor& share, engine::dist::GradReducer* reducer) {
  opt.zero_grad();
  Tensor loss = forward_backward(model, scaler, x, y, compute, label_smoothing, share, reducer);
  optimizer_step(opt, scaler, clip_grad_norm);
  return loss;
}

double lr_factor(const std::string& schedule, int64_t step, int64_t total, double warmup, double start, double end) {
  const double s = static_cast<double>(step), n = static_cast<double>(std::max<int64_t>(1, total));
  if (schedule == "triangle") {
    const double peak = std::floor(warmup * n);
    if (s < peak) return start + (1.0 - start) * s / peak;
    return 1.0 + (end - 1.0) * (s - peak) / std::max(1.0, n - peak);
  }
  if (schedule == "onecycle") {
    const double f = s / n;
    if (f < warmup) return f / warmup;
    return std::max(0.0, (1.0 - f) / (1.0 - warmup));
  }
  return 1.0;
}

double ema_decay(double rate, int64_t every, int64_t step, int64_t total) {
  const double f = static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, total));
  return std::pow(rate, static_cast<double>(every)) * f * f * f;
}

}  // namespace models
