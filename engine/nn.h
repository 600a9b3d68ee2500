// Modules: named parameters (an FP32 master and the compute copy forward reads),
// train/eval mode, the layers a CIFAR-10 CNN needs, and Sequential.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/numerics.h"
#include "engine/ops.h"

namespace engine {

// The optimizer updates `master` (FP32; FP64 in gradient checks). Forward reads `value`:
// in FP32 mode the same tensor, in FP16/BF16 mode a compute copy that the optimizer
// rewrites after each update, so forward never casts a weight per use. The gradient
// arrives on `value`, in its dtype.
struct Parameter {
  std::string name;  // local ("weight"); Module::named_parameters() gives the full path
  Tensor master;
  Tensor value;
  bool follows_compute_dtype = true;  // false for batch-norm parameters: they stay FP32
  // A frozen parameter (PyTorch's requires_grad = False) gets no new gradient and no optimizer
  // steps it (Optimizer::stepped_parameters), so no weight decay or momentum moves it; it may
  // be thawed again later (a layer trained for the first epochs only). A gradient it kept stays
  // allocated (a data-parallel reducer's bucket view must), zeroed by zero_grad, unused.
  bool trainable = true;
  void set_trainable(bool on);
  Tensor grad() const { return value.grad(); }
};
using ParamPtr = std::shared_ptr<Parameter>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual std::string describe() const = 0;
  // Containers call their children through this, so numerics hooks (engine/numerics.h) and
  // FP32 regions see every layer; when neither is on it is forward(x) after one test.
  Tensor operator()(const Tensor& x) { return fp32_region_ || numerics_hooks() ? forward_watched(x) : forward(x); }

  // Fusion, by what a module declares (Sequential asks): one whose forward a following ReLU can
  // join in one op says so, and forward_relu(x) is relu(forward(x)) as that op; a plain ReLU
  // says it is one. Conv2d, Linear and ReLU are final, so no subclass inherits a declaration its
  // own forward would break.
  virtual bool fuses_relu() const { return false; }
  virtual Tensor forward_relu(const Tensor& x);  // an error unless fuses_relu()
  virtual bool is_relu() const { return false; }

  // Runs this module in FP32 inside an FP16/BF16 model, as PyTorch's autocast(enabled=False)
  // around it: its parameters keep FP32 compute copies, its input is cast to FP32 on entry and
  // its output back to the autocast dtype on exit (so the rest of the model runs as before; an
  // output beyond FP16's range still overflows at that exit). Before set_compute_dtype; for good.
  void set_fp32_region();
  bool fp32_region() const { return fp32_region_; }

  // Every parameter of this module and its children; named ones are keyed like "0.weight".
  std::vector<ParamPtr> parameters() const;
  std::vector<std::pair<std::string, ParamPtr>> named_parameters() const;
  int64_t num_parameters() const;
  // The floating buffers (batch-norm running statistics) of this module and its children,
  // keyed like named_parameters(): what a weight average follows besides the parameters.
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  // This module ("") and every descendant, keyed by the same paths ("0", "0.1").
  std::vector<std::pair<std::string, Module*>> named_modules();
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  // Gives parameters that follow the compute dtype a compute copy of that dtype (or makes
  // the master itself the value when the dtype is the master's).
  void set_compute_dtype(DType dtype);
  void zero_grad();
  // Rewrites every compute copy from its master (after loading masters).
  void refresh_compute_copies();
  // Inference only: each parameter keeps its compute copy as its one copy and the FP32 master
  // is freed, so FP16/BF16 weights take half the bytes. Nothing can train it afterwards.
  void drop_masters_for_inference();
  // Moves parameters and buffers to a device.
  virtual void to(Device d);

  // Checkpoint support: masters as "param/<name>", plus each module's extra state
  // (batch-norm running statistics, dropout seeds and call counters).
  void save_state(StateDict& out) const;
  void load_state(const StateDict& in);
  virtual void save_extra(const std::string& prefix, StateDict& out) const;
  virtual void load_extra(const std::string& prefix, const StateDict& in);

 protected:
  // This module's own floating buffers, local names ("running_mean").
  virtual void own_buffers(std::vector<std::pair<std::string, Tensor*>>& out) { (void)out; }
  ParamPtr add_parameter(const std::string& name, Tensor init, bool follows_compute_dtype = true);
  void add_module(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, ParamPtr>>& out) const;

  std::vector<ParamPtr> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool fp32_region_ = false;

 private:
  Tensor forward_watched(const Tensor& x);
};

class Sequential;
// Sequential::fold_batch_norm on every Sequential in the tree; the total folded.
int fold_batch_norm(Module& root, DType compute);

// PyTorch's default initialisation for both: weights and biases uniform in +-1/sqrt(fan_in).
class Conv2d final : public Module {
 public:
  // groups > 1: grouped convolution (groups = in = out: depthwise), weight [out, k, k, in / groups].
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t pad = 0, bool bias = true,
         int64_t groups = 1);
  Tensor forward(const Tensor& x) override;
  bool fuses_relu() const override { return true; }
  Tensor forward_relu(const Tensor& x) override;  // conv2d_relu: the ReLU in the kernels' store
  std::string describe() const override;
  // Inference: folds a per-output-channel affine map that follows (y * scale + shift) into the
  // weights and bias (adding a bias if there is none), in FP64, rounded once. Returns false and
  // changes nothing when a folded value would exceed half of `compute`'s largest finite value.
  bool fold_affine(const std::vector<double>& scale, const std::vector<double>& shift, DType compute);
  ParamPtr weight, bias;  // weight KRSC [out, k, k, in / groups]
  int64_t stride, pad, groups = 1;
};

class Linear final : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x) override;
  bool fuses_relu() const override { return true; }
  Tensor forward_relu(const Tensor& x) override;  // linear_relu
  std::string describe() const override;
  ParamPtr weight, bias;  // weight [out, in]
};

class BatchNorm2d : public Module {
 public:
  // learn_scale = false: the scale (gamma, "weight") stays 1, frozen; only the shift learns.
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5, bool learn_scale = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  void to(Device d) override;
  void save_extra(const std::string& prefix, StateDict& out) const override;
  void load_extra(const std::string& prefix, const StateDict& in) override;
  ParamPtr gamma, beta;
  Tensor running_mean, running_var;  // buffers, FP32
  double momentum, eps;

 protected:
  void own_buffers(std::vector<std::pair<std::string, Tensor*>>& out) override {
    out.emplace_back("running_mean", &running_mean);
    out.emplace_back("running_var", &running_var);
  }
};

// A running average of a model's weights (airbench's "lookahead"): FP32 copies of every
// parameter's master and of the floating buffers (batch-norm statistics), on the model's
// device. update(model, decay) moves each copy (1 - decay) of the way toward the model's value
// and then sets the model to the average (masters, then compute copies), one in-place pass per
// tensor; decay 1 only puts the average into the model. Checkpoints carry the average, so a
// resumed run continues it bit for bit.
class WeightAverage {
 public:
  explicit WeightAverage(Module& model);  // starts as the model's values
  void update(Module& model, double decay);
  void save_state(StateDict& out) const;  // "average/<name>"
  void load_state(const StateDict& in);

 private:
  std::vector<std::pair<std::string, Tensor>> avg_;  // parameters (by path), then buffers
  std::vector<Tensor*> targets(Module& model) const;  // the model's tensors, in avg_'s order
};

// Every input channel passed through unchanged by the first `in` filters (PyTorch's
// nn.init.dirac_ on weight[:in]): filter k < min(in, out) is 1 at its centre tap for channel k
// and 0 elsewhere; the other filters (and the bias) keep what they had. Odd kernels, no groups.
void dirac_init(Conv2d& conv);

// x * factor (airbench's logit scale, 1/9).
class Scale : public Module {
 public:
  explicit Scale(double factor) : factor(factor) {}
  Tensor forward(const Tensor& x) override { return scale(x, factor); }
  std::string describe() const override;
  double factor;
};

class ReLU final : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  bool is_relu() const override { return true; }
  std::string describe() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
  std::string describe() const override { return "GELU"; }
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string describe() const override { return "SiLU"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string describe() const override { return "Sigmoid"; }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = -1, int64_t pad = 0)
      : kernel(kernel), stride(stride < 0 ? kernel : stride), pad(pad) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel, stride, pad); }
  std::string describe() const override;
  int64_t kernel, stride, pad;
};

class GlobalAvgPool : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool(x); }
  std::string describe() const override { return "GlobalAvgPool"; }
};

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x); }
  std::string describe() const override { return "Flatten"; }
};

// Identity in eval mode. Each training call uses the next stream of its own seed, so masks
// differ per step yet replay exactly from (seed, calls).
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  void save_extra(const std::string& prefix, StateDict& out) const override;
  void load_extra(const std::string& prefix, const StateDict& in) override;
  double p;
  uint64_t seed;
  uint64_t calls = 0;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string describe() const override { return "Identity"; }
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);
  // Inference: each of its own Conv2d children directly followed by an eval-mode BatchNorm2d
  // becomes one Conv2d with weight w * s and bias (b - mean) * s + beta, s = gamma /
  // sqrt(var + eps), computed in FP64 and rounded once; the batch-norm becomes an Identity. A
  // pair whose folded weights would not fit `compute` (beyond half its largest finite value)
  // stays unfolded. Returns the number of pairs folded. The model keeps working in training
  // mode only after reloading its weights.
  int fold_batch_norm(DType compute);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  size_t size() const { return children_.size(); }
};

}  // namespace engine
