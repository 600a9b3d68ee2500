// Optimizer steps: on the CPU the found-inf check, then one fused pass per parameter (unscale,
// update master and state, write the compute copy); on a CUDA device the same as two
// multi-tensor launches through engine/cuda/backend.h.
#include "engine/optim.h"

#include <cmath>

#include "engine/cuda/backend.h"
#include "engine/ops_internal.h"
#include "kernels/cpu/optim.h"

namespace engine {

namespace kc = kernels::cpu;

struct Optimizer::DeviceState {
  std::unique_ptr<cuda::OptimizerPlan> plan;
  Tensor step;  // i64[1] on the device: applied steps (skipped ones do not count)
  Tensor inv_scale, found_inf;  // step()'s own scalars when no loss scaler drives it
};

bool Optimizer::on_cuda() const { return !params_.empty() && params_[0]->master.device().is_cuda(); }

int64_t Optimizer::steps() const {
  if (dev_ && dev_->step.defined()) return static_cast<int64_t>(dev_->step.item());
  return steps_;
}

void Optimizer::sync_steps_to_device() {
  if (dev_ && dev_->step.defined()) dev_->step.copy_from(Tensor::full({1}, static_cast<double>(steps_), DType::I64));
}



Optimizer::Optimizer(std::vector<ParamPtr> params, double lr_)
    : lr(lr_), params_(std::move(params)), options_(params_.size()) {
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

void Optimizer::set_param_group(const std::vector<ParamPtr>& params, double lr_scale, double weight_decay) {
  ENGINE_CHECK(steps_ == 0 && !dev_, "optimizer: set parameter groups before the first step");
  ENGINE_CHECK(lr_scale > 0 && std::isfinite(lr_scale) && std::isfinite(weight_decay),
               "optimizer: a group's lr scale must be positive and its weight decay finite, got " << lr_scale << ", "
                                                                                                << weight_decay);
  for (const ParamPtr& p : params) {
    size_t i = 0;
    while (i < params_.size() && params_[i] != p) ++i;
    ENGINE_CHECK(i < params_.size(), "optimizer: parameter group names '" << (p ? p->name : "null")
                                                                          << "', which this optimizer does not hold");
    options_[i] = kernels::GroupOptions{lr_scale, weight_decay};
  }
}

const char* state_format_name(StateFormat f) {
  switch (f) {
    case StateFormat::F32: return "fp32";
    case StateFormat::BF16: return "bf16";
    case StateFormat::Int8: return "int8";
  }
  return "?";
}

StateFormat parse_state_format(const std::string& s) {
  for (StateFormat f : {StateFormat::F32, StateFormat::BF16, StateFormat::Int8})
    if (s == state_format_name(f)) return f;
  ENGINE_FAIL("optimizer state format must be fp32, bf16 or int8, got '" << s << "'");
}

void Optimizer::set_state_format(StateFormat f) {
  ENGINE_CHECK(steps_ == 0 && !dev_, "optimizer: set the state format before the first step");
  if (f != StateFormat::F32) {
    for (auto& p : params_)
      ENGINE_CHECK(p->master.dtype() == DType::F32,
                   "optimizer: " << state_format_name(f) << " state needs f32 masters, '" << p->name << "' is "
                                 << p->master.desc());
  }
  format_ = f;
}

Tensor Optimizer::state_like(const Parameter& p) const {
  Tensor t;
  switch (format_) {
    case StateFormat::F32:
      t = Tensor::empty(p.master.shape(), p.master.dtype(), p.master.device(), MemKind::OptimizerState);
      break;
    case StateFormat::BF16:
      t = Tensor::empty(p.master.shape(), DType::BF16, p.master.device(), MemKind::OptimizerState);
      break;
    case StateFormat::Int8:
      t = Tensor::empty({p.master.numel()}, DType::U8, p.master.device(), MemKind::OptimizerState);
      break;
  }
  t.zero();  // zero codes decode to 0 whatever the absmax
  return t;
}

Tensor Optimizer::absmax_like(const Parameter& p) const {
  const int64_t blocks = (p.master.numel() + kernels::kQuantBlock - 1) / kernels::kQuantBlock;
  Tensor t = Tensor::empty({blocks}, DType::F32, p.master.device(), MemKind::OptimizerState);
  t.zero();
  return t;
}

bool Optimizer::grads_finite() const {
  const KernelTimer timer("optimizer finite check");
  for (auto& p : params_) {
    Tensor g = p->grad();
    if (!g.defined()) continue;
    ENGINE_CHECK(g.device().is_cpu(), "grads_finite: CUDA gradients are checked by check_finite_device");
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
    ENGINE_CHECK(g.device().is_cpu(), "grad_sq_norm is the CPU path; CUDA parameters use grad_sq_norm_device");
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
  ENGINE_CHECK(!on_cuda(), "optimizer: apply() is the CPU path; CUDA parameters step through step() or the loss "
                           "scaler (one fused launch)");
  for (size_t i : stepped_parameters()) update(i, *params_[i], params_[i]->grad(), inv_scale);
  ++steps_;
}

StepResult Optimizer::step(double inv_scale) {
  if (on_cuda()) {
    // Standalone use (no loss scaler): 1/scale and the flag in device scalars kept across
    // steps, set by a fill kernel and a memset on the stream: nothing waits.
    const Device d = params_[0]->master.device();
    if (!dev_) dev_ = std::make_shared<DeviceState>();
    if (!dev_->inv_scale.defined()) {
      dev_->inv_scale = Tensor::empty({1}, DType::F32, d, MemKind::OptimizerState);
      dev_->found_inf = Tensor::empty({1}, DType::I32, d, MemKind::OptimizerState);
    }
    dev_->inv_scale.fill(inv_scale);
    dev_->found_inf.zero();
    check_finite_device(dev_->found_inf.data<int32_t>());
    apply_device(dev_->inv_scale.data<float>(), dev_->found_inf.data<int32_t>());
    return StepResult::Queued;
  }
  last_skipped_ = !grads_finite();
  if (last_skipped_) return StepResult::Skipped;
  apply(inv_scale);
  return StepResult::Applied;
}

bool Optimizer::last_step_skipped() const {
  if (on_cuda() && dev_ && dev_->found_inf.defined()) return dev_->found_inf.item() != 0;
  return last_skipped_;
}

// The parameters a step updates: the trainable ones with a gradient (one the forward pass used).
std::vector<size_t> Optimizer::stepped_parameters() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i]->trainable && params_[i]->grad().defined()) {
      // The fused steps index gradient, master and state alike: a mismatched gradient would
      // write past the master's buffers.
      ENGINE_CHECK(params_[i]->grad().numel() == params_[i]->master.numel(),
                   "optimizer: gradient " << params_[i]->grad().desc() << " of '" << params_[i]->name
                                          << "' does not match its master " << params_[i]->master.desc());
      out.push_back(i);
    }
  return out;
}

void Optimizer::check_finite_device(int* found_inf) { device_plan().check_finite(found_inf); }

void Optimizer::apply_device(const float* inv_scale, const int* found_inf) {
  cuda::OptimizerPlan& plan = device_plan();
  device_update(plan, inv_scale, found_inf, dev_->step.data<int64_t>());
}

void Optimizer::grad_sq_norm_device(const float* inv_scale, double* sq_sum) {
  device_plan().grad_sq_norm(inv_scale, sq_sum);
}

// The multi-tensor plan over the parameters with a gradient, for one launch. Gradients and
// state keep their addresses across steps (zero_grad clears in place), so the plan is uploaded
// once and rebuilt only if some pointer, or the set of stepped parameters, changed.
cuda::OptimizerPlan& Optimizer::device_plan() {
  ENGINE_CHECK(on_cuda(), "optimizer: the device step needs parameters on a CUDA device");
  const Device d = params_[0]->master.device();
  if (!dev_) dev_ = std::make_shared<DeviceState>();
  if (!dev_->plan) dev_->plan = cuda::make_optimizer_plan();
  if (!dev_->step.defined()) {
    dev_->step = Tensor::empty({1}, DType::I64, d, MemKind::OptimizerState);
    sync_steps_to_device();
  }
  ensure_state();
  std::vector<cuda::ParamRefs> refs;
  for (size_t i : stepped_parameters()) {
    Parameter& p = *params_[i];
    ENGINE_CHECK(p.master.dtype() == DType::F32 && p.master.device() == d,
                 "optimizer: CUDA parameters need f32 masters on " << d.str() << ", '" << p.name << "' is "
                                                                   << p.master.desc());
    cuda::ParamRefs r;
    r.grad = p.grad();
    r.master = p.master.data<float>();
    r.lr_scale = options_[i].lr_scale;
    r.weight_decay = options_[i].weight_decay;
    state_refs(i, r);
    if (!p.value.same_storage(p.master)) r.copy = p.value;
    refs.push_back(r);
  }
  dev_->plan->set_params(refs);
  return *dev_->plan;
}

void Optimizer::save_state(StateDict& out) const {
  out.set_int("optim/steps", steps());
  out.meta["optim/state_format"] = state_format_name(format_);
}

void Optimizer::load_state(const StateDict& in) {
  ENGINE_CHECK(in.meta.count("optim/steps"), "checkpoint has no optimizer state");
  const std::string saved = in.meta.count("optim/state_format") ? in.get("optim/state_format") : "fp32";
  ENGINE_CHECK(saved == state_format_name(format_), "the checkpoint's optimizer state is " << saved << ", not "
                                                        << state_format_name(format_) << " (--optimizer-state)");
  steps_ = in.get_int("optim/steps");
  sync_steps_to_device();
}

void Optimizer::save_list(StateDict& out, const std::vector<Tensor>& list, const char* what) const {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].defined()) out.put("optim/" + std::to_string(i) + "/" + what, list[i]);
}

// Loads what the checkpoint has; state the checkpoint lacks stays undefined (not yet created).
void Optimizer::load_list(const StateDict& in, std::vector<Tensor>& list, const char* what, bool absmax) const {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "optim/" + std::to_string(i) + "/" + what;
    if (!in.tensors.count(name)) {
      list[i] = Tensor();
      continue;
    }
    list[i] = absmax ? absmax_like(*params_[i]) : state_like(*params_[i]);
    load_into(list[i], in, name);
  }
}

namespace {
// The compact-state codec of a state tensor (BF16 values, or Int8 codes with their absmax).
template <class Body> void with_codec(StateFormat f, bool is_signed, Tensor& state, Tensor& absmax, Body body) {
  if (f == StateFormat::BF16) {
    body(kc::Bf16State{state.data<bfloat16>()});
  } else if (is_signed) {
    body(kc::Int8SignedState{state.data<uint8_t>(), absmax.data<float>()});
  } else {
    body(kc::Int8UnsignedState{state.data<uint8_t>(), absmax.data<float>()});
  }
}
}  // namespace

namespace {
// Runs body with G = gradient type, P = master type, W = compute-copy type, and
// `copy` = the compute copy's pointer (null when value is the master itself).
template <class Body> void dispatch_update(Parameter& p, const Tensor& g, Body body) {
  const KernelTimer timer("optimizer step");
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
      nesterov(nesterov_), momentum_buffers(params_.size()), momentum_absmax(params_.size()) {
  ENGINE_CHECK(momentum >= 0 && weight_decay >= 0, "SGD: momentum and weight decay must be >= 0");
  ENGINE_CHECK(!nesterov || (momentum > 0 && dampening == 0), "SGD: Nesterov needs momentum > 0 and no dampening");
}

void SGD::save_state(StateDict& out) const {
  Optimizer::save_state(out);
  save_list(out, momentum_buffers, "momentum");
  if (format_ == StateFormat::Int8) save_list(out, momentum_absmax, "momentum_absmax");
}

void SGD::load_state(const StateDict& in) {
  Optimizer::load_state(in);
  load_list(in, momentum_buffers, "momentum", false);
  if (format_ == StateFormat::Int8) load_list(in, momentum_absmax, "momentum_absmax", true);
}

kernels::SgdConfig SGD::config() const {
  kernels::SgdConfig c;
  c.lr = lr;
  c.momentum = momentum;
  c.dampening = dampening;
  c.weight_decay = weight_decay;
  c.nesterov = nesterov;
  return c;
}

void SGD::update(size_t i, Parameter& p, const Tensor& g, double inv_scale) {
  const kernels::SgdConfig c = kernels::for_group(config(), options_[i].lr_scale, options_[i].weight_decay);
  const bool first = momentum > 0 && !momentum_buffers[i].defined();
  if (first) {
    momentum_buffers[i] = state_like(p);
    if (format_ == StateFormat::Int8) momentum_absmax[i] = absmax_like(p);
  }
  Tensor& buf = momentum_buffers[i];
  if (format_ != StateFormat::F32 && buf.defined()) {
    dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
      using P = std::remove_pointer_t<decltype(master)>;
      if constexpr (std::is_same_v<P, float>)
        with_codec(format_, true, buf, momentum_absmax[i], [&](auto codec) {
          kc::sgd_step_blocks(g.numel(), grad, static_cast<float>(inv_scale), master, codec, copy, first, c);
        });
    });
    return;
  }
  dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
    using P = std::remove_pointer_t<decltype(master)>;
    kc::sgd_step(g.numel(), grad, static_cast<P>(inv_scale), master, buf.defined() ? buf.data<P>() : nullptr, copy,
                 first, c);
  });
}

void SGD::ensure_state() {
  if (momentum == 0) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers[i].defined()) continue;
    momentum_buffers[i] = state_like(*params_[i]);
    if (format_ == StateFormat::Int8) momentum_absmax[i] = absmax_like(*params_[i]);
  }
}

void SGD::state_refs(size_t i, cuda::ParamRefs& r) {
  if (momentum == 0) return;
  if (format_ == StateFormat::F32) {
    r.state1 = momentum_buffers[i].data<float>();
    return;
  }
  r.state_format = format_;
  r.qstate1 = momentum_buffers[i].raw();
  if (format_ == StateFormat::Int8) r.absmax1 = momentum_absmax[i].data<float>();
}

void SGD::device_update(cuda::OptimizerPlan& plan, const float* inv_scale, const int* found_inf, int64_t* step) {
  plan.sgd_step(config(), inv_scale, found_inf, step);  // the first applied step initialises momentum
}

Adam::Adam(std::vector<ParamPtr> params, double lr_, double beta1_, double beta2_, double eps_, double weight_decay_,
           bool decoupled_)
    : Optimizer(std::move(params), lr_), beta1(beta1_), beta2(beta2_), eps(eps_), weight_decay(weight_decay_),
      decoupled(decoupled_), exp_avg(params_.size()), exp_avg_sq(params_.size()), exp_avg_absmax(params_.size()),
      exp_avg_sq_absmax(params_.size()) {
  ENGINE_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "Adam: betas must be in [0, 1)");
  ENGINE_CHECK(eps > 0 && weight_decay >= 0, "Adam: eps must be > 0 and weight decay >= 0");
}

void Adam::save_state(StateDict& out) const {
  Optimizer::save_state(out);
  save_list(out, exp_avg, "exp_avg");
  save_list(out, exp_avg_sq, "exp_avg_sq");
  if (format_ == StateFormat::Int8) {
    save_list(out, exp_avg_absmax, "exp_avg_absmax");
    save_list(out, exp_avg_sq_absmax, "exp_avg_sq_absmax");
  }
}

void Adam::load_state(const StateDict& in) {
  Optimizer::load_state(in);
  load_list(in, exp_avg, "exp_avg", false);
  load_list(in, exp_avg_sq, "exp_avg_sq", false);
  if (format_ == StateFormat::Int8) {
    load_list(in, exp_avg_absmax, "exp_avg_absmax", true);
    load_list(in, exp_avg_sq_absmax, "exp_avg_sq_absmax", true);
  }
}

kernels::AdamConfig Adam::config() const {
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
  return c;
}

void Adam::update(size_t i, Parameter& p, const Tensor& g, double inv_scale) {
  if (!exp_avg[i].defined()) {
    exp_avg[i] = state_like(p);
    exp_avg_sq[i] = state_like(p);
    if (format_ == StateFormat::Int8) {
      exp_avg_absmax[i] = absmax_like(p);
      exp_avg_sq_absmax[i] = absmax_like(p);
    }
  }
  const kernels::AdamConfig c = kernels::for_group(config(), options_[i].lr_scale, options_[i].weight_decay);
  if (format_ != StateFormat::F32) {
    dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
      using P = std::remove_pointer_t<decltype(master)>;
      if constexpr (std::is_same_v<P, float>)
        with_codec(format_, true, exp_avg[i], exp_avg_absmax[i], [&](auto m) {
          with_codec(format_, false, exp_avg_sq[i], exp_avg_sq_absmax[i], [&](auto v) {
            kc::adam_step_blocks(g.numel(), grad, static_cast<float>(inv_scale), master, m, v, copy, c);
          });
        });
    });
    return;
  }
  dispatch_update(p, g, [&](auto* grad, auto* master, auto* copy) {
    using P = std::remove_pointer_t<decltype(master)>;
    kc::adam_step(g.numel(), grad, static_cast<P>(inv_scale), master, exp_avg[i].data<P>(), exp_avg_sq[i].data<P>(),
                  copy, c);
  });
}

void Adam::ensure_state() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (exp_avg[i].defined()) continue;
    exp_avg[i] = state_like(*params_[i]);
    exp_avg_sq[i] = state_like(*params_[i]);
    if (format_ == StateFormat::Int8) {
      exp_avg_absmax[i] = absmax_like(*params_[i]);
      exp_avg_sq_absmax[i] = absmax_like(*params_[i]);
    }
  }
}

void Adam::state_refs(size_t i, cuda::ParamRefs& r) {
  if (format_ == StateFormat::F32) {
    r.state1 = exp_avg[i].data<float>();
    r.state2 = exp_avg_sq[i].data<float>();
    return;
  }
  r.state_format = format_;
  r.qstate1 = exp_avg[i].raw();
  r.qstate2 = exp_avg_sq[i].raw();
  if (format_ == StateFormat::Int8) {
    r.absmax1 = exp_avg_absmax[i].data<float>();
    r.absmax2 = exp_avg_sq_absmax[i].data<float>();
  }
}

void Adam::device_update(cuda::OptimizerPlan& plan, const float* inv_scale, const int* found_inf, int64_t* step) {
  plan.adam_step(config(), inv_scale, found_inf, step);  // bias corrections from the device count
}

}  // namespace engine
