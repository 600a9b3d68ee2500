// Per-element optimizer updates shared by the CPU reference and the CUDA fused step.
// All arithmetic is in the master type P (FP32, or FP64 for checks): Adam's eps = 1e-8
// and lr * update ~ 1e-7 relative both vanish in FP16, which is why masters exist.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

// How the optimizer's state (momentum, Adam's moments) is stored (--optimizer-state): FP32, as
// PyTorch; BF16, half the bytes with 8 bits of precision; or Int8, block-wise quantised codes
// with one FP32 absmax per 256 values (kernels/quant_math.h), about a quarter of FP32's bytes.
// The update itself runs in FP32 whatever the storage, and the FP32 masters stay. One type for
// the engine's optimizer and both backends' plans.
enum class StateFormat : uint8_t { F32 = 0, BF16 = 1, Int8 = 2 };

// One parameter's group options (PyTorch's param_groups, reduced to what differs between the
// groups here): its learning rate is the optimizer's times lr_scale, so a schedule that sets
// the optimizer's moves every group alike (as LambdaLR scales each group's initial lr); its
// weight decay is its own, or the optimizer's when negative.
struct GroupOptions {
  double lr_scale = 1.0;
  double weight_decay = -1.0;
};
template <class Config> ENGINE_HD Config for_group(Config c, double lr_scale, double weight_decay) {
  c.lr *= lr_scale;
  if (weight_decay >= 0) c.weight_decay = weight_decay;
  return c;
}

struct SgdConfig {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// PyTorch's SGD: d = g + wd*w; buf = first ? d : momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; w -= lr*d.
template <class P> ENGINE_HD void sgd_update(P& w, P g, P* buf, bool first_step, const SgdConfig& c) {
  P d = g + P(c.weight_decay) * w;
  if (c.momentum != 0) {
    const P b = first_step ? d : P(c.momentum) * *buf + (P(1) - P(c.dampening)) * d;
    *buf = b;
    d = c.nesterov ? d + P(c.momentum) * b : b;
  }
  w -= P(c.lr) * d;
}

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;              // AdamW: decay the weight directly, not through g
  double bias_correction1 = 1.0;       // 1 - beta1^t, computed once per step on the host
  double bias_correction2 = 1.0;       // 1 - beta2^t
};

// AdamConfig's values in P, each rounded once (1 - beta in double, then rounded: 1 - float(0.999)
// would be off by 1.3e-5 relative): what the update reads per element, taken once per tensor.
template <class P> struct AdamCoefficients {
  P lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, bias_correction1, bias_correction2;
  bool decoupled;
  ENGINE_HD explicit AdamCoefficients(const AdamConfig& c)
      : lr(P(c.lr)), beta1(P(c.beta1)), one_minus_beta1(P(1.0 - c.beta1)), beta2(P(c.beta2)),
        one_minus_beta2(P(1.0 - c.beta2)), eps(P(c.eps)), weight_decay(P(c.weight_decay)),
        bias_correction1(P(c.bias_correction1)), bias_correction2(P(c.bias_correction2)), decoupled(c.decoupled) {}
};

// Adam (L2 decay folded into g) and AdamW (decoupled decay), PyTorch's formulation:
// w -= lr * (m / bc1) / (sqrt(v / bc2) + eps).
template <bool kDecoupled, class P> ENGINE_HD void adam_update_as(P& w, P g, P& m, P& v, const AdamCoefficients<P>& k) {
  if constexpr (kDecoupled) w *= P(1) - k.lr * k.weight_decay;
  else g += k.weight_decay * w;
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  const P denom = sqrt_of(v / k.bias_correction2) + k.eps;
  w -= k.lr * (m / k.bias_correction1) / denom;
}
template <class P> ENGINE_HD void adam_update(P& w, P g, P& m, P& v, const AdamCoefficients<P>& k) {
  if (k.decoupled) adam_update_as<true>(w, g, m, v, k);
  else adam_update_as<false>(w, g, m, v, k);
}
template <class P> ENGINE_HD void adam_update(P& w, P g, P& m, P& v, const AdamConfig& c) {
  adam_update<P>(w, g, m, v, AdamCoefficients<P>(c));
}

// A weight average's step (engine/optim.h WeightAverage): the average moves `weight` of the way
// to the weight, then the weight takes the average (airbench's lookahead).
template <class P> ENGINE_HD void average_step(P& avg, P& w, P weight) {
  avg += weight * (w - avg);
  w = avg;
}

}  // namespace kernels
