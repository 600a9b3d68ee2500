// One training step, as PyTorch's AMP loop, and its gradient-accumulation form: the pieces the
// trainer drives and the tests call directly.
#pragma once

#include "engine/amp.h"
#include "engine/distributed.h"
#include "engine/nn.h"
#include "engine/optim.h"

#include <cstdint>
#include <string>

namespace models {

// One micro-batch: forward under autocast (conv/linear in `compute`, the loss in FP32) and
// backward from loss * scale * share, where `share` (a 1-element FP32 tensor, or undefined for
// 1) is this micro-batch's fraction of the images the optimizer step averages over. Gradients
// add up in each parameter's compute copy until the optimizer step. With a reducer (data-
// parallel, the step's last micro-batch only) the summed gradients are on every rank after it.
// Returns the micro-batch's mean loss (on the device: reading it is a host wait).
engine::Tensor forward_backward(engine::Module& model, engine::LossScaler& scaler, const engine::Tensor& x,
                                const engine::Tensor& y, engine::DType compute, double label_smoothing,
                                const engine::Tensor& share = engine::Tensor(),
                                engine::dist::GradReducer* reducer = nullptr,
                                engine::Reduction reduction = engine::Reduction::Mean);

// After the step's last micro-batch: unscale (and clip when clip_grad_norm > 0), the fused
// update or, when any gradient holds inf/NaN, nothing at all; then the scale's backoff/growth.
// Once per optimizer step however many micro-batches it took.
void optimizer_step(engine::Optimizer& opt, engine::LossScaler& scaler, double clip_grad_norm);

// The classic loop in one call (one micro-batch):
//   optimizer.zero_grad()
//   with autocast(): loss = criterion(model(x), y)
//   scaler.scale(loss).backward()
//   scaler.unscale_(optimizer); clip_grad_norm_(...)       (when clipping)
//   scaler.step(optimizer); scaler.update()
engine::Tensor train_step(engine::Module& model, engine::Optimizer& opt, engine::LossScaler& scaler,
                          const engine::Tensor& x, const engine::Tensor& y, engine::DType compute,
                          double label_smoothing, double clip_grad_norm, const engine::Tensor& share = engine::Tensor(),
                          engine::dist::GradReducer* reducer = nullptr);

// The learning-rate factor at optimizer step `step` of `total` (0-based, the step about to be
// taken), what multiplies --lr:
//   constant: 1;
//   onecycle: linear from 0 to 1 over the first `warmup` of the steps, then linear to 0;
//   triangle: airbench's piecewise-linear through (0, start), (floor(warmup x total), 1) and
//             (total, end).
double lr_factor(const std::string& schedule, int64_t step, int64_t total, double warmup, double start, double end);

// The weight average's decay after step `step` of `total`: rate^every x (step / total)^3
// (airbench's lookahead: almost no averaging early, more and more towards the end).
double ema_decay(double rate, int64_t every, int64_t step, int64_t total);

}  // namespace models
