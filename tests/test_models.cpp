// The model zoo: parameter counts against the published architectures, and the large models
// running forward and backward on the CPU (batch 2) in every dtype they train in.
#include <cmath>
#include <utility>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/random.h"
#include "models/models.h"
#include "models/train_step.h"

using engine::DType;
using engine::Tensor;

// torchvision's published totals (ImageNet head, 7x7 stem): ResNet-18 11,689,512, ResNet-50
// 25,557,032. Ours differ only by the 10-class head (512 or 2048 inputs: -1000 x (in + 1) +
// 10 x (in + 1)) and the CIFAR stem (a 3x3 conv, 3 * 64 * 9 = 1,728 weights, for the 7x7's
// 9,408).
TEST_CASE("ResNet parameter counts equal torchvision's with a 10-class head and a CIFAR stem", "[models]") {
  auto expected = [](int64_t published, int64_t features) {
    return published - 1000 * (features + 1) + 10 * (features + 1) - 9408 + 1728;
  };
  CHECK(models::make_model("resnet18")->num_parameters() == expected(11689512, 512));
  CHECK(models::make_model("resnet50")->num_parameters() == expected(25557032, 2048));
  CHECK(expected(25557032, 2048) == 23520842);  // "about 23.5M"
}

// torchvision's efficientnet_b0: 5,288,548 with the 1000-class head (1280 inputs). The CIFAR
// stem changes only the stride, not the weights.
TEST_CASE("EfficientNet-B0's parameter count equals torchvision's with a 10-class head", "[models]") {
  const int64_t expected = 5288548 - 1000 * 1281 + 10 * 1281;
  CHECK(expected == 4020358);  // "about 4.0M"
  CHECK(models::make_model("efficientnet_b0")->num_parameters() == expected);
}

TEST_CASE("ResNet-50 and EfficientNet-B0 train a step at batch 2 on the CPU in FP32 and FP16", "[models]") {
  const std::pair<const char*, DType> runs[] = {{"resnet50", DType::F32}, {"resnet50", DType::F16},
                                                {"efficientnet_b0", DType::F32}, {"efficientnet_b0", DType::F16}};
  for (const auto& [model, compute] : runs) {
    INFO(model << " " << engine::dtype_name(compute));
    engine::manual_seed(3);
    auto net = models::make_model(model);
    net->set_compute_dtype(compute);
    engine::SGD opt(net->parameters(), 0.01, 0.9);
    engine::LossScalerConfig sc;
    sc.enabled = compute == DType::F16;
    engine::LossScaler scaler(sc);
    const Tensor x = engine::uniform({2, 32, 32, 3}, -1, 1, compute);
    const Tensor y = Tensor::from_ints({3, 7}, {2});
    // FP16 starts at a loss scale of 65536, and these deep nets' scaled gradients overflow there:
    // the scaler skips and halves until a step applies (the point of dynamic scaling), within 10.
    Tensor loss;
    int steps = 0;
    do {
      loss = models::train_step(*net, opt, scaler, x, y, compute, 0.0, 0.0);
      ++steps;
    } while (scaler.found_inf() && steps < 10);
    INFO(steps << " steps, final scale " << scaler.current_scale());
    CHECK(opt.steps() == 1);
    if (compute != DType::F16) CHECK(steps == 1);
    const double l = loss.item();
    CHECK(std::isfinite(l));
    CHECK(l > 0.5);  // near ln(10) at initialisation, not a degenerate 0
    int64_t with_grad = 0, not_finite = 0;
    for (const auto& p : net->parameters()) {
      const Tensor g = p->grad();
      if (!g.defined()) continue;
      ++with_grad;
      for (double v : g.to_vector()) not_finite += !std::isfinite(v);
    }
    CHECK(not_finite == 0);
    CHECK(with_grad == static_cast<int64_t>(net->parameters().size()));  // every parameter reached
  }
}
