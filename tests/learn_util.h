// Small synthetic problems and a full-batch training loop shared by the learning tests.
#pragma once

#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/random.h"

namespace testing {

using engine::DType;
using engine::Tensor;

struct Problem { Tensor x; Tensor labels; };

// Four interleaved classes on concentric rings with angular sectors: not linearly separable.
inline Problem rings(int64_t n) {
  std::vector<double> xs;
  std::vector<int32_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t cls = static_cast<int32_t>(i % 4);
    const double radius = (cls / 2 == 0 ? 0.5 : 1.5) + 0.2 * (engine::uniform01() - 0.5);
    const double angle = (cls % 2 == 0 ? 0.0 : 3.14159) + 2.5 * (engine::uniform01() - 0.5);
    xs.push_back(radius * std::cos(angle));
    xs.push_back(radius * std::sin(angle));
    ys.push_back(cls);
  }
  return {Tensor::from_vector(xs, {n, 2}, DType::F32), Tensor::from_ints(ys, {n})};
}

// 8x8x3 images: class = which quadrant holds a bright blob, and in which colour channel
// (0..3 quadrant for channel 0, 4..7 for channel 1), on a noisy background.
inline Problem blobs(int64_t n) {
  std::vector<double> xs(static_cast<size_t>(n * 8 * 8 * 3));
  std::vector<int32_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t cls = static_cast<int32_t>(i % 8);
    const int64_t qy = (cls % 4) / 2 * 4, qx = (cls % 2) * 4, ch = cls / 4;
    for (int64_t p = 0; p < 8 * 8 * 3; ++p) xs[i * 192 + p] = 0.3 * (engine::uniform01() - 0.5);
    for (int64_t y = 1; y < 3; ++y)
      for (int64_t x = 1; x < 3; ++x) xs[i * 192 + ((qy + y) * 8 + qx + x) * 3 + ch] += 1.0;
    ys.push_back(cls);
  }
  return {Tensor::from_vector(xs, {n, 8, 8, 3}, DType::F32), Tensor::from_ints(ys, {n})};
}

inline double accuracy(const Tensor& logits, const Tensor& labels) {
  const auto z = logits.to_vector();
  const int64_t n = logits.dim(0), k = logits.dim(1);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (z[i * k + j] > z[i * k + best]) best = j;
    correct += best == labels.data<int32_t>()[i];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// Full-batch training; returns the final training accuracy (in eval mode).
inline double train(engine::Module& net, engine::Optimizer& opt, const Problem& data, DType compute, int steps) {
  Tensor x = engine::cast(data.x, compute);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    engine::Tape tape;
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      loss = engine::cross_entropy(net(x), data.labels);
    }
    tape.backward(loss);
    REQUIRE(opt.step() == engine::StepResult::Applied);
  }
  net.eval();
  const double acc = accuracy(net(x), data.labels);
  net.train();
  return acc;
}

// conv-bn-relu-pool-conv-relu-gap-dropout-linear: 8 classes of 8x8x3 images.
inline std::shared_ptr<engine::Sequential> tiny_cnn() {
  auto net = std::make_shared<engine::Sequential>();
  net->add(std::make_shared<engine::Conv2d>(3, 8, 3, 1, 1)).add(std::make_shared<engine::BatchNorm2d>(8))
      .add(std::make_shared<engine::ReLU>()).add(std::make_shared<engine::MaxPool2d>(2))
      .add(std::make_shared<engine::Conv2d>(8, 16, 3, 1, 1)).add(std::make_shared<engine::ReLU>())
      .add(std::make_shared<engine::GlobalAvgPool>()).add(std::make_shared<engine::Dropout>(0.1))
      .add(std::make_shared<engine::Linear>(16, 8));
  return net;
}

}  // namespace testing
