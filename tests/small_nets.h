// Small conv nets on 8x8 images and their FP64 form, shared by the accumulation and the
// data-parallel tests: large enough to have every kind of parameter, small enough to run often.
#pragma once

#include <memory>
#include <vector>

#include "engine/nn.h"
#include "engine/random.h"
#include "kernels/philox.h"

namespace small_nets {

// conv 3->8 (3x3, pad 1) [BN] ReLU maxpool2 flatten [dropout 0.25] linear 128->10.
inline std::shared_ptr<engine::Sequential> conv_net(bool batch_norm, bool dropout, uint64_t seed = 7) {
  engine::manual_seed(seed);  // the same initial weights for every run that asks for them
  auto net = std::make_shared<engine::Sequential>();
  net->add(std::make_shared<engine::Conv2d>(3, 8, 3, 1, 1));
  if (batch_norm) net->add(std::make_shared<engine::BatchNorm2d>(8));
  net->add(std::make_shared<engine::ReLU>()).add(std::make_shared<engine::MaxPool2d>(2));
  net->add(std::make_shared<engine::Flatten>());
  if (dropout) net->add(std::make_shared<engine::Dropout>(0.25));
  net->add(std::make_shared<engine::Linear>(8 * 4 * 4, 10));
  return net;
}

// FP64 masters, values and batch-norm statistics: summation order is then the only difference
// between two ways of computing the same step.
inline void to_f64(engine::Module& m) {
  using engine::DType;
  using engine::Tensor;
  for (auto& p : m.parameters()) {
    Tensor d = Tensor::from_vector(p->master.to_vector(), p->master.shape(), DType::F64);
    d.set_requires_grad(true);
    p->master = d;
    p->value = d;
  }
  for (auto& [path, mod] : m.named_modules())
    if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(mod)) {
      bn->running_mean = Tensor::from_vector(bn->running_mean.to_vector(), bn->running_mean.shape(), DType::F64);
      bn->running_var = Tensor::from_vector(bn->running_var.to_vector(), bn->running_var.shape(), DType::F64);
    }
}

struct Batch { engine::Tensor x, y; };
// Batch `step` of n images [n, 8, 8, 3] in `dtype` with labels, the same in every process.
inline Batch batch(int step, int64_t n, engine::DType dtype) {
  std::vector<double> v(static_cast<size_t>(n * 8 * 8 * 3));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2 * kernels::philox_uniform(11, static_cast<uint64_t>(step), i) - 1;
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>((i * 7 + step) % 10);
  return {engine::Tensor::from_vector(v, {n, 8, 8, 3}, dtype), engine::Tensor::from_ints(labels, {n})};
}

inline std::vector<double> masters(const engine::Module& m) {
  std::vector<double> out;
  for (const auto& p : m.parameters()) {
    const auto v = p->master.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline std::vector<double> grads(const engine::Module& m) {
  std::vector<double> out;
  for (const auto& p : m.parameters()) {
    const auto v = p->grad().to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace small_nets
