// The training step (models/train_step.h): PyTorch's AMP loop, split at the micro-batch.
#include "models/train_step.h"

#include "engine/autocast.h"
#include "engine/ops.h"
#include "engine/tape.h"

namespace models {

using engine::Tensor;

Tensor forward_backward(engine::Module& model, engine::LossScaler& scaler, const Tensor& x, const Tensor& y,
                        engine::DType compute, double label_smoothing, const Tensor& share,
                        engine::dist::GradReducer* reducer) {
  engine::Tape tape;
  if (reducer) reducer->attach(tape);
  Tensor loss;
  {
    engine::TapeScope record(tape);
    engine::AutocastScope autocast(compute);                     // conv/linear in FP16/BF16
    loss = engine::cross_entropy(model(x), y, label_smoothing);  // the loss in FP32
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

}  // namespace models
