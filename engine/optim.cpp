// Optimizer steps on the CPU reference path: the found-inf check, then one fused pass per
// parameter (unscale, update master and state, write the compute copy).
#include "engine/optim.h"

#include <cmath>

#include "engine/ops_internal.h"
#include "kernels/cpu/optim.h"

namespace engine {

namespace kc = kernels::cpu;

Optimizer::Optimizer(std::vector<ParamPtr> params, double lr_) : lr(lr_), params_(std::move(params)) {
  ENGINE_CHECK(lr_ > 0 && std::isfinite(lr_), "optimizer: learning rate " << lr_ << " must be positive");
  for (auto& p : params_) {
    ENGINE_CHECK(p && p->master.defined(), "optimizer: undefined parameter");
    ENGINE_CHECK(p->master.dtype() == DType::F32 || p->master.dtype() == DType::F64,
                 "optimizer: master of '" << p->name << "' must be f32 (or f64), got " << p->master.desc());
  }
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p->value.zero_grad();
}

Tensor Optimizer::state_like(const Parameter& p) const {
  Tensor t = Tensor::empty(p.master.shape(), p.master.dtype(), p.master.device(), MemKind::OptimizerState);
  t.zero();
  return t;
}

bool Optimizer::grads_finite() const {
  for (auto& p : params_) {
    Tensor g = p->grad();
    if (!g.defined()) continue;
    require_cpu("optimizer step", g);
    bool finite = true;
    ENGINE_DISPATCH_FLOAT(g.dtype(), "optimizer step", G, finite = kc::all_finite(g.data<G>(), g.numel()));
    if (!finite) return false;
  }
  return true;
}

double Optimizer::grad_sq_norm(double inv_scale) const {
  double total = 0;
  for (auto& p : params_) {
    Tensor g = p->grad();
    if (!g.defined()) continue;
    require_cpu("grad norm", g);
    ENGINE_DISPATCH_FLOAT(g.dtype(), "grad norm", G, {
      const G* d = g.data<G>();
      double sq = 0;
      for (int64_t i = 0; i < g.numel(); ++i) {
        const double v = kernels::convert<double>(d[i]) * inv_scale;
        sq += v * v;
      }
      total += sq;
    });
  }
  return total;
}

void Optimizer::apply(double inv_scale) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i]->grad();
    if (g.defined()) update(i, *params_[i], g, inv_scale);
  }
  ++steps_;
}

bool Optimizer::step(double inv_scale) {
  if (!grads_finite()) return false;
  apply(inv_scale);
  return true;
}

void Optimizer::save_state(StateDict& out) const { out.set_int("optim/steps", steps_); }

void Optimizer::load_state(const StateDict& in) {
  ENGINE_CHECK(in.meta.count("optim/steps"), "checkpoint has no optimizer state");
  steps_ = in.get_int("optim/steps");
}

namespace {
// Saves the defined tensors of a per-parameter state list as optim/<i>/<what>.
void save_list(StateDict& out, const std::vector<Tensor>& list, const char* what) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].defined()) out.put("optim/" + std::to_string(i) + "/" + what, list[i]);
}
// Loads what the checkpoint has; state the checkpoint lacks stays undefined (not yet created).
void load_list(const StateDict& in, std::vector<Tensor>& list, const char* what, const std::vector<ParamPtr>& params,
               MemKind kind) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "optim/" + std::to_string(i) + "/" + what;
    if (!in.tensors.count(name)) {
      list[i] = Tensor();
      continue;
    }
    const Tensor& master = params[i]->master;
    list[i] = Tensor::empty(master.shape(), master.dtype(), master.device(), kind);
    load_into(list[i], in, name);
  }
}
}  // namespace

namespace {
// Runs body with G = gradient type, P = master type, W = compute-copy type, and
// `copy` = the compute copy's pointer (null when value is the master itself).
template <class Body> void dispatch_update(Parameter& p, const Tensor& g, Body body) {
  const bool has_copy = !p.value.same_storage(p.master);
  ENGINE_DISPATCH_FLOAT(g.dtype(), "optimizer step", G, {
    if (p.master.dtype() == DType::F64) {
      ENGINE_DISPATCH_FLOAT(p.value.dtype(), "optimizer step", W,
                            body(g.data<G>(), p.master.data<double>(), has_copy ? p.value.data<W>() : nullptr));
    } else {
      ENGINE_DISPATCH_FLOAT(p.value.dtype(), "optimizer step", W,
                            body(g.data<G>(), p.master.data<float>(), has_copy ? p.value.data<W>() : nullptr));
    }
  });
}
}  // namespace

SGD::SGD(std::vector<ParamPtr> params, double lr_, double momentum_, double weight_decay_, bool nesterov_,
         double dampening_)
    : Optimizer(std::move(params), lr_), momentum(momentum_), weight_decay(weight_decay_), dampening(dampening_),
      nesterov(nesterov_), momentum_buffers(params_.size()) {
  ENGINE_CHECK(momentum >= 0 && weight_decay >= 0, "SGD: momentum and weight decay must be >= 0");
  ENGINE_CHECK(!nesterov || (momentum > 0 && dampening == 0), "SGD: Nesterov needs momentum > 0 and no dampening");
}

void SGD::save_state(StateDict& out) const {
  Optimizer::save_state(out);
  save_list(out, momentum_buffers, "momentum");
}

void SGD::load_state(const StateDict& in) {
  Optimizer::load_state(in);
  load_list(in, momentum_buffers, "momentum", params_, MemKind::OptimizerState);
}

void SGD::update(size_t i, Parameter& p, const Tensor& g, double inv_scale) {
  kernels::SgdConfig c;
  c.lr = lr;
  c.momentum = momentum;
  c.dampening = dampening;
  c.weight_decay = weight_decay;
  c.nesterov = nesterov;
  const bool first = momentum > 0 && !momentum_buffers[i].defined();
  if (first) momentum_buffers[i] = state_like(p);
  Tensor& buf = momentum_buffers[i];
  dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
    using P = std::remove_pointer_t<decltype(master)>;
    kc::sgd_step(g.numel(), grad, static_cast<P>(inv_scale), master, buf.defined() ? buf.data<P>() : nullptr, copy,
                 first, c);
  });
}

Adam::Adam(std::vector<ParamPtr> params, double lr_, double beta1_, double beta2_, double eps_, double weight_decay_,
           bool decoupled_)
    : Optimizer(std::move(params), lr_), beta1(beta1_), beta2(beta2_), eps(eps_), weight_decay(weight_decay_),
      decoupled(decoupled_), exp_avg(params_.size()), exp_avg_sq(params_.size()) {
  ENGINE_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "Adam: betas must be in [0, 1)");
  ENGINE_CHECK(eps > 0 && weight_decay >= 0, "Adam: eps must be > 0 and weight decay >= 0");
}

void Adam::save_state(StateDict& out) const {
  Optimizer::save_state(out);
  save_list(out, exp_avg, "exp_avg");
  save_list(out, exp_avg_sq, "exp_avg_sq");
}

void Adam::load_state(const StateDict& in) {
  Optimizer::load_state(in);
  load_list(in, exp_avg, "exp_avg", params_, MemKind::OptimizerState);
  load_list(in, exp_avg_sq, "exp_avg_sq", params_, MemKind::OptimizerState);
}

void Adam::update(size_t i, Parameter& p, const Tensor& g, double inv_scale) {
  if (!exp_avg[i].defined()) {
    exp_avg[i] = state_like(p);
    exp_avg_sq[i] = state_like(p);
  }
  kernels::AdamConfig c;
  c.lr = lr;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  c.weight_decay = weight_decay;
  c.decoupled = decoupled;
  const double t = static_cast<double>(steps_ + 1);
  c.bias_correction1 = 1.0 - std::pow(beta1, t);
  c.bias_correction2 = 1.0 - std::pow(beta2, t);
  dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
    using P = std::remove_pointer_t<decltype(master)>;
    kc::adam_step(g.numel(), grad, static_cast<P>(inv_scale), master, exp_avg[i].data<P>(), exp_avg_sq[i].data<P>(),
                  copy, c);
  });
}

}  // namespace engine
