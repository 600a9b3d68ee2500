// Module bookkeeping (parameters, modes, compute copies) and the layers' forward passes.
#include "engine/nn.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/autocast.h"
#include "engine/ops_internal.h"
#include "engine/random.h"

namespace engine {

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, ParamPtr>>& out) const {
  for (const auto& p : params_) out.emplace_back(prefix + p->name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, ParamPtr>> Module::named_parameters() const {
  std::vector<std::pair<std::string, ParamPtr>> out;
  collect("", out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  for (const auto& [name, child] : children_)
    for (const auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& [path, m] : named_modules()) {
    std::vector<std::pair<std::string, Tensor*>> own;
    m->own_buffers(own);
    for (auto& [name, t] : own) out.emplace_back(path.empty() ? name : path + "." + name, t);
  }
  return out;
}

std::vector<ParamPtr> Module::parameters() const {
  std::vector<ParamPtr> out;
  for (auto& np : named_parameters()) out.push_back(np.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p->master.numel();
  return n;
}

void Module::set_fp32_region() {
  for (auto& p : parameters())
    ENGINE_CHECK(p->value.same_storage(p->master), "set_fp32_region: call it before set_compute_dtype");
  fp32_region_ = true;
  for (auto& p : parameters()) p->follows_compute_dtype = false;
}

Tensor Module::forward_relu(const Tensor&) {
  ENGINE_FAIL(describe() << " has no fused form with a following ReLU (fuses_relu() is false)");
}

Tensor Module::forward_watched(const Tensor& x) {
  NumericsHooks* hooks = numerics_hooks();
  const std::string* name = nullptr;
  if (hooks) {
    auto it = hooks->names.find(this);
    if (it != hooks->names.end()) name = &it->second;
  }
  CurrentLayerScope layer(name ? name : current_layer());  // ops recorded inside name this layer
  const bool region = fp32_region_ && autocast_enabled() && autocast_dtype() != DType::F32;
  const DType outer = autocast_dtype();
  Tensor y;
  if (region) {
    AutocastScope off(DType::F32, false);
    y = forward(is_floating(x.dtype()) && x.dtype() != DType::F32 ? cast(x, DType::F32) : x);
  } else {
    y = forward(x);
  }
  if (name && hooks->on_layer_output) hooks->on_layer_output(*this, *name, y);
  if (region && is_floating(y.dtype()) && y.dtype() != outer) y = cast(y, outer);  // the region's exit
  return y;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

ParamPtr Module::add_parameter(const std::string& name, Tensor init, bool follows_compute_dtype) {
  auto p = std::make_shared<Parameter>();
  p->name = name;
  p->master = Tensor::empty(init.shape(), init.dtype(), init.device(), MemKind::Weights);
  p->master.copy_from(init);
  p->master.set_requires_grad(true);
  p->value = p->master;
  p->follows_compute_dtype = follows_compute_dtype;
  params_.push_back(p);
  return p;
}

void Parameter::set_trainable(bool on) {
  trainable = on;
  value.set_requires_grad(on);
  // The master takes the gradient itself only when it is the value (no compute copy).
  master.set_requires_grad(on && value.same_storage(master));
}

void Module::add_module(const std::string& name, std::shared_ptr<Module> m) {
  ENGINE_CHECK(m != nullptr, "add_module: null module '" << name << "'");
  children_.emplace_back(name, std::move(m));
}

void Module::set_compute_dtype(DType dtype) {
  ENGINE_CHECK(is_floating(dtype), "set_compute_dtype: " << dtype_name(dtype) << " is not a floating dtype");
  for (auto& p : parameters()) {
    if (!p->follows_compute_dtype || p->master.dtype() == dtype) {
      p->value = p->master;
      p->master.set_requires_grad(p->trainable);
      continue;
    }
    p->master.set_requires_grad(false);  // the gradient now arrives on the compute copy
    MemKindScope kind(MemKind::Weights);
    NoGradScope no_grad;
    p->value = Tensor::empty(p->master.shape(), dtype, p->master.device(), MemKind::Weights);
    p->value.copy_from(cast(p->master, dtype));
    p->value.set_requires_grad(p->trainable);
  }
}

void Module::refresh_compute_copies() {
  NoGradScope no_grad;
  for (auto& p : parameters())
    if (!p->value.same_storage(p->master)) p->value.copy_from(cast(p->master, p->value.dtype()));
}

void Module::drop_masters_for_inference() {
  for (auto& p : parameters()) {
    p->value.set_requires_grad(false);
    p->master = p->value;
  }
}

void Module::save_state(StateDict& out) const {
  for (const auto& [name, p] : named_parameters()) out.put("param/" + name, p->master);
  save_extra("", out);
}

void Module::load_state(const StateDict& in) {
  for (const auto& [name, p] : named_parameters()) load_into(p->master, in, "param/" + name);
  refresh_compute_copies();
  load_extra("", in);
}

void Module::save_extra(const std::string& prefix, StateDict& out) const {
  for (const auto& [name, c] : children_) c->save_extra(prefix + name + ".", out);
}

void Module::load_extra(const std::string& prefix, const StateDict& in) {
  for (const auto& [name, c] : children_) c->load_extra(prefix + name + ".", in);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p->value.zero_grad();
}

void Module::to(Device d) {
  for (auto& p : params_) {
    if (p->master.device() == d) continue;
    const bool separate = !p->value.same_storage(p->master);
    Tensor m = p->master.to(d);
    m.set_requires_grad(p->master.requires_grad());
    Tensor v = separate ? p->value.to(d) : m;
    if (separate) v.set_requires_grad(p->trainable);
    p->master = m;
    p->value = v;
  }
  for (auto& c : children_) c.second->to(d);
}

namespace {
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return uniform(shape, -bound, bound, DType::F32);
}
}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride_, int64_t pad_, bool with_bias, int64_t groups_)
    : stride(stride_), pad(pad_), groups(groups_) {
  ENGINE_CHECK(in > 0 && out > 0 && kernel > 0, "Conv2d: bad sizes in=" << in << " out=" << out << " kernel=" << kernel);
  ENGINE_CHECK(groups >= 1 && in % groups == 0 && out % groups == 0,
               "Conv2d: " << groups << " groups do not divide " << in << " input and " << out << " output channels");
  const int64_t fan_in = in / groups * kernel * kernel;  // PyTorch's: one group's inputs
  weight = add_parameter("weight", fan_in_uniform({out, kernel, kernel, in / groups}, fan_in));
  if (with_bias) bias = add_parameter("bias", fan_in_uniform({out}, fan_in));
}

bool Conv2d::fold_affine(const std::vector<double>& scale, const std::vector<double>& shift, DType compute) {
  const Shape& ws = weight->master.shape();  // [out, k, k, in]
  const int64_t out = ws[0], per_out = shape_numel(ws) / out;
  ENGINE_CHECK(static_cast<int64_t>(scale.size()) == out && static_cast<int64_t>(shift.size()) == out,
               "Conv2d::fold_affine: " << scale.size() << " scales for " << out << " output channels");
  std::vector<double> w = weight->master.to_vector();
  std::vector<double> b = bias ? bias->master.to_vector() : std::vector<double>(static_cast<size_t>(out), 0.0);
  double largest = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t j = 0; j < per_out; ++j) largest = std::max(largest, std::fabs(w[o * per_out + j] *= scale[o]));
    largest = std::max(largest, std::fabs(b[o] = b[o] * scale[o] + shift[o]));
  }
  if (!(largest <= 0.5 * dtype_max_finite(compute))) return false;  // would overflow (or NaN): unchanged
  NoGradScope no_grad;
  weight->master.copy_from(Tensor::from_vector(w, ws, weight->master.dtype()));  // one rounding
  if (!bias) {  // a bias laid out as the weight is: same device, same kind of compute copy
    bias = add_parameter("bias", Tensor::zeros({out}, weight->master.dtype(), weight->master.device()));
    bias->master.set_requires_grad(weight->master.requires_grad());
    if (!weight->value.same_storage(weight->master)) {
      bias->value = Tensor::empty({out}, weight->value.dtype(), weight->value.device(), MemKind::Weights);
      bias->value.set_requires_grad(weight->value.requires_grad());
    }
  }
  bias->master.copy_from(Tensor::from_vector(b, {out}, bias->master.dtype()));
  refresh_compute_copies();
  return true;
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight->value, bias ? bias->value : Tensor(), stride, pad, groups);
}
Tensor Conv2d::forward_relu(const Tensor& x) {
  return conv2d_relu(x, weight->value, bias ? bias->value : Tensor(), stride, pad, groups);
}

std::string Conv2d::describe() const {
  std::ostringstream os;
  const Shape& s = weight->master.shape();
  os << "Conv2d(" << s[3] * groups << "->" << s[0] << ", " << s[1] << "x" << s[2] << ", stride " << stride << ", pad "
     << pad << (groups == s[0] && groups > 1 ? ", depthwise" : groups > 1 ? ", groups " + std::to_string(groups) : "")
     << (bias ? "" : ", no bias") << ")";
  return os.str();
}

void dirac_init(Conv2d& conv) {
  const Shape& ws = conv.weight->master.shape();  // [out, r, s, in]
  const int64_t out = ws[0], r = ws[1], s = ws[2], in = ws[3];
  ENGINE_CHECK(conv.groups == 1 && r % 2 == 1 && s % 2 == 1,
               "dirac_init: needs an ungrouped convolution with an odd kernel, got " << conv.describe());
  std::vector<double> w = conv.weight->master.to_vector();
  for (int64_t k = 0; k < std::min(in, out); ++k) {
    double* f = w.data() + k * r * s * in;
    std::fill(f, f + r * s * in, 0.0);
    f[((r / 2) * s + s / 2) * in + k] = 1.0;
  }
  NoGradScope no_grad;
  conv.weight->master.copy_from(Tensor::from_vector(w, ws, conv.weight->master.dtype()));
  if (!conv.weight->value.same_storage(conv.weight->master)) conv.weight->value.copy_from(cast(conv.weight->master, conv.weight->value.dtype()));
}

std::string Scale::describe() const {
  std::ostringstream os;
  os << "Scale(" << factor << ")";
  return os.str();
}

Linear::Linear(int64_t in, int64_t out, bool with_bias) {
  ENGINE_CHECK(in > 0 && out > 0, "Linear: bad sizes in=" << in << " out=" << out);
  weight = add_parameter("weight", fan_in_uniform({out, in}, in));
  if (with_bias) bias = add_parameter("bias", fan_in_uniform({out}, in));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight->value, bias ? bias->value : Tensor()); }
Tensor Linear::forward_relu(const Tensor& x) { return linear_relu(x, weight->value, bias ? bias->value : Tensor()); }

std::string Linear::describe() const {
  const Shape& s = weight->master.shape();
  return "Linear(" + std::to_string(s[1]) + "->" + std::to_string(s[0]) + (bias ? ")" : ", no bias)");
}

BatchNorm2d::BatchNorm2d(int64_t channels, double momentum_, double eps_, bool learn_scale)
    : momentum(momentum_), eps(eps_) {
  ENGINE_CHECK(channels > 0, "BatchNorm2d: bad channel count " << channels);
  gamma = add_parameter("weight", Tensor::full({channels}, 1.0, DType::F32), false);
  if (!learn_scale) gamma->set_trainable(false);
  beta = add_parameter("bias", Tensor::zeros({channels}, DType::F32), false);
  running_mean = Tensor::empty({channels}, DType::F32, Device::cpu(), MemKind::Weights);
  running_mean.zero();
  running_var = Tensor::empty({channels}, DType::F32, Device::cpu(), MemKind::Weights);
  running_var.fill(1.0);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  return batch_norm(x, gamma->value, beta->value, running_mean, running_var, training_, momentum, eps);
}

std::string BatchNorm2d::describe() const { return "BatchNorm2d(" + std::to_string(running_mean.numel()) + ")"; }

void BatchNorm2d::to(Device d) {
  Module::to(d);
  if (running_mean.device() != d) {
    running_mean = running_mean.to(d);
    running_var = running_var.to(d);
  }
}

void BatchNorm2d::save_extra(const std::string& prefix, StateDict& out) const {
  out.put("buffer/" + prefix + "running_mean", running_mean);
  out.put("buffer/" + prefix + "running_var", running_var);
}

void BatchNorm2d::load_extra(const std::string& prefix, const StateDict& in) {
  load_into(running_mean, in, "buffer/" + prefix + "running_mean");
  load_into(running_var, in, "buffer/" + prefix + "running_var");
}

std::string MaxPool2d::describe() const {
  return "MaxPool2d(" + std::to_string(kernel) + ", stride " + std::to_string(stride) + ")";
}

Dropout::Dropout(double p_) : p(p_), seed(next_seed()) {
  ENGINE_CHECK(p >= 0.0 && p < 1.0, "Dropout: probability " << p << " is outside [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  if (!training_ || p == 0.0) return x;
  const uint64_t per_sample = static_cast<uint64_t>(x.numel() / std::max<int64_t>(1, x.dim(0)));
  return dropout(x, p, seed, calls++, static_cast<uint64_t>(batch_offset()) * per_sample);
}

void Dropout::save_extra(const std::string& prefix, StateDict& out) const {
  out.meta["dropout/" + prefix + "seed"] = std::to_string(seed);
  out.set_int("dropout/" + prefix + "calls", static_cast<int64_t>(calls));
}

void Dropout::load_extra(const std::string& prefix, const StateDict& in) {
  seed = std::stoull(in.get("dropout/" + prefix + "seed"));
  calls = static_cast<uint64_t>(in.get_int("dropout/" + prefix + "calls"));
}

std::string Dropout::describe() const {
  std::ostringstream os;
  os << "Dropout(" << p << ")";
  return os.str();
}

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  add_module(std::to_string(children_.size()), std::move(m));
  return *this;
}

int Sequential::fold_batch_norm(DType compute) {
  ENGINE_CHECK(!training_, "fold_batch_norm is for inference: call eval() first (training mode uses batch statistics)");
  int folded = 0;
  for (size_t i = 0; i + 1 < children_.size(); ++i) {
    auto* conv = dynamic_cast<Conv2d*>(children_[i].second.get());
    auto* bn = dynamic_cast<BatchNorm2d*>(children_[i + 1].second.get());
    if (!conv || !bn || bn->running_mean.numel() != conv->weight->master.dim(0)) continue;
    const std::vector<double> gamma = bn->gamma->master.to_vector(), beta = bn->beta->master.to_vector(),
                              mean = bn->running_mean.to_vector(), var = bn->running_var.to_vector();
    std::vector<double> scale(gamma.size()), shift(gamma.size());
    for (size_t o = 0; o < gamma.size(); ++o) {
      scale[o] = gamma[o] / std::sqrt(var[o] + bn->eps);
      shift[o] = beta[o] - mean[o] * scale[o];
    }
    if (!conv->fold_affine(scale, shift, compute)) continue;
    children_[i + 1].second = std::make_shared<Identity>();
    ++folded;
  }
  return folded;
}

int fold_batch_norm(Module& root, DType compute) {
  // The Sequentials first: folding frees batch-norms, whose pointers the walk also lists.
  std::vector<Sequential*> seqs;
  for (const auto& [path, m] : root.named_modules())
    if (auto* seq = dynamic_cast<Sequential*>(m)) seqs.push_back(seq);
  int folded = 0;
  for (Sequential* seq : seqs) folded += seq->fold_batch_norm(compute);
  return folded;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < children_.size(); ++i) {
    Module& m = *children_[i].second;
    // A module that fuses a following ReLU (Conv2d, Linear) runs with it as one op, except
    // where numerics hooks or FP32 regions must see each module on its own.
    Module* next = i + 1 < children_.size() ? children_[i + 1].second.get() : nullptr;
    if (next && next->is_relu() && m.fuses_relu() && !numerics_hooks() && !m.fp32_region() && !next->fp32_region()) {
      h = m.forward_relu(h);
      ++i;
      continue;
    }
    h = m(h);
  }
  return h;
}

std::string Sequential::describe() const {
  std::string s = "Sequential(\n";
  for (const auto& [name, c] : children_) s += "  (" + name + "): " + c->describe() + "\n";
  return s + ")";
}

// ---- the weight average ----------------------------------------------------------------------

std::vector<Tensor*> WeightAverage::targets(Module& model) const {
  std::vector<Tensor*> out;
  for (auto& [name, p] : model.named_parameters()) out.push_back(&p->master);
  for (auto& [name, t] : model.named_buffers()) out.push_back(t);
  ENGINE_CHECK(out.size() == avg_.size(), "WeightAverage: the model has " << out.size() << " tensors, the average "
                                                                          << avg_.size());
  return out;
}

WeightAverage::WeightAverage(Module& model) {
  MemKindScope kind(MemKind::Weights);
  NoGradScope no_grad;
  auto keep = [&](const std::string& name, const Tensor& t) {
    ENGINE_CHECK(t.dtype() == DType::F32, "WeightAverage: '" << name << "' is " << t.desc() << ", not f32");
    Tensor copy = Tensor::empty(t.shape(), DType::F32, t.device(), MemKind::Weights);
    copy.copy_from(t);
    avg_.emplace_back(name, copy);
  };
  for (auto& [name, p] : model.named_parameters()) keep("param/" + name, p->master);
  for (auto& [name, t] : model.named_buffers()) keep("buffer/" + name, *t);
}

void WeightAverage::update(Module& model, double decay) {
  ENGINE_CHECK(decay >= 0 && decay <= 1, "WeightAverage: decay " << decay << " outside [0, 1]");
  const std::vector<Tensor*> ts = targets(model);
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor& a = avg_[i].second;
    Tensor& w = *ts[i];
    ENGINE_CHECK(a.shape() == w.shape() && a.device() == w.device(),
                 "WeightAverage: '" << avg_[i].first << "' is now " << w.desc() << ", its average " << a.desc());
    ENGINE_KERNEL("weight average", w.device(), DType::F32, T,
                  K::weight_average(a.data<T>(), w.data<T>(), 1.0 - decay, w.numel(), stream));
  }
  model.refresh_compute_copies();
}

void WeightAverage::save_state(StateDict& out) const {
  for (const auto& [name, a] : avg_) out.put("average/" + name, a);
}

void WeightAverage::load_state(const StateDict& in) {
  for (auto& [name, a] : avg_) load_into(a, in, "average/" + name);
}

}  // namespace engine
