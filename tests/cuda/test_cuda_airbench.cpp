// [cuda] the airbench94 recipe's pieces on the GPU against the CPU: the batch builder (zero and
// reflection padding, random and alternating flips, fixed views: bit for bit), the weight
// average, parameter groups and frozen parameters in the fused optimizer step, and a whole
// airbench94 training step (whitening convolution, odd max-pools, GELU, batch-norm without a
// learned scale, max-pool 3, summed loss).
#include <cmath>
#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "models/models.h"

using engine::DType;
using engine::Tensor;
using kernels::AugmentConfig;
using kernels::FlipMode;
using Vec = std::vector<double>;

namespace {

const engine::Device kGpu = engine::Device::cuda(0);

Tensor random_images(int64_t n, uint64_t seed) {
  engine::manual_seed(seed);
  const Vec r = engine::uniform({n * 32 * 32 * 3}, 0, 255.99, DType::F64).to_vector();
  Tensor t = Tensor::empty({n, 32, 32, 3}, DType::U8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(r[static_cast<size_t>(i)]);
  return t;
}

Vec batch_on(engine::Device d, const Tensor& images, const Tensor& labels, const Tensor& idx, const AugmentConfig& cfg,
             uint64_t epoch, DType dt, Vec* labels_out) {
  const int64_t b = idx.dim(0);
  Tensor x = Tensor::empty({b, 32, 32, 3}, dt, d), y = Tensor::empty({b}, DType::I32, d);
  if (d.is_cuda()) x.fill(std::nan(""));  // an element the kernel forgets stays NaN
  const bool cpu = d.is_cpu();
  engine::make_batch(cpu ? images : images.to(d), cpu ? labels : labels.to(d), cpu ? idx : idx.to(d), true, cfg, 21,
                     epoch, x, y);
  if (labels_out) *labels_out = y.to_vector();
  return x.to_vector();
}

}  // namespace

TEST_CASE("make_batch on the GPU equals the CPU bit for bit: padding, flips, fixed views", "[cuda]") {
  const Tensor images = random_images(40, 3);
  std::vector<int32_t> lab(40), order(24);
  for (int i = 0; i < 40; ++i) lab[static_cast<size_t>(i)] = i % 10;
  for (int i = 0; i < 24; ++i) order[static_cast<size_t>(i)] = (i * 7 + 3) % 40;
  const Tensor labels = Tensor::from_ints(lab, {40}), idx = Tensor::from_ints(order, {24});
  AugmentConfig base = models::input_normalisation("airbench94");
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (bool reflect : {false, true})
      for (int pad : {0, 2, 4})
        for (FlipMode flip : {FlipMode::None, FlipMode::Random, FlipMode::Alternating})
          for (uint64_t epoch : {0u, 1u}) {
            AugmentConfig cfg = base;
            cfg.pad = pad, cfg.reflect = reflect, cfg.flip = flip;
            INFO(engine::dtype_name(dt) << " reflect " << reflect << " pad " << pad << " flip " << int(flip)
                                        << " epoch " << epoch);
            Vec ly_cpu, ly_gpu;
            const Vec cpu = batch_on(engine::Device::cpu(), images, labels, idx, cfg, epoch, dt, &ly_cpu);
            const Vec gpu = batch_on(kGpu, images, labels, idx, cfg, epoch, dt, &ly_gpu);
            REQUIRE(cpu == gpu);
            REQUIRE(ly_cpu == ly_gpu);
          }
  // The test-time views: fixed offsets, mirrored or not.
  for (int off : {0, 1, 2})
    for (bool flip : {false, true}) {
      AugmentConfig cfg = base;
      cfg.pad = 1, cfg.reflect = true, cfg.fixed = true, cfg.view = {off, off, flip};
      INFO("fixed view " << off << " flip " << flip);
      REQUIRE(batch_on(engine::Device::cpu(), images, labels, idx, cfg, 0, DType::F32, nullptr) ==
              batch_on(kGpu, images, labels, idx, cfg, 0, DType::F32, nullptr));
    }
}

TEST_CASE("the weight average on the GPU follows the CPU's", "[cuda]") {
  auto make = [] {
    engine::manual_seed(4);
    auto net = std::make_shared<engine::Sequential>();
    net->add(std::make_shared<engine::Conv2d>(3, 8, 3, 1, 1, false)).add(std::make_shared<engine::BatchNorm2d>(8));
    net->set_compute_dtype(DType::F16);
    return net;
  };
  auto cpu = make(), gpu = make();
  gpu->to(kGpu);
  engine::WeightAverage avg_cpu(*cpu), avg_gpu(*gpu);
  engine::manual_seed(5);
  const Tensor w1 = engine::uniform({8, 3, 3, 3}, -1, 1, DType::F32);
  for (auto* net : {cpu.get(), gpu.get()}) {
    auto& conv = *static_cast<engine::Conv2d*>(net->named_modules()[1].second);
    conv.weight->master.copy_from(net == gpu.get() ? w1.to(kGpu) : w1);
  }
  avg_cpu.update(*cpu, 0.6);
  avg_gpu.update(*gpu, 0.6);
  for (size_t i = 0; i < cpu->parameters().size(); ++i) {
    const Vec c = cpu->parameters()[i]->master.to_vector(), g = gpu->parameters()[i]->master.to_vector();
    const Vec cv = cpu->parameters()[i]->value.to_vector(), gv = gpu->parameters()[i]->value.to_vector();
    for (size_t j = 0; j < c.size(); ++j) {
      // One FP32 multiply-add, fused or not: within an ulp of |avg| + |w| (2^-23 relative).
      CHECK(std::fabs(c[j] - g[j]) <= std::ldexp(std::fabs(c[j]) + 1.0, -22));
      // The FP16 copy: one rounding (at least FP16's smallest subnormal, 2^-24).
      CHECK(std::fabs(cv[j] - gv[j]) <= std::max(std::ldexp(std::fabs(cv[j]), -10), std::ldexp(1.0, -24)));
    }
  }
}

TEST_CASE("parameter groups and frozen parameters in the fused GPU step match the CPU", "[cuda]") {
  auto run = [](engine::Device d) {
    engine::manual_seed(6);
    auto net = std::make_shared<engine::Sequential>();
    auto conv = std::make_shared<engine::Conv2d>(3, 8, 3, 1, 1, true);
    auto bn = std::make_shared<engine::BatchNorm2d>(8, 0.4, 1e-12, false);
    net->add(conv).add(bn).add(std::make_shared<engine::GELU>());
    net->set_compute_dtype(DType::F16);
    net->to(d);
    engine::SGD opt(net->parameters(), 0.05, 0.85, 0.5, true);
    opt.set_param_group({bn->beta}, 64.0, 0.5 / 64);
    engine::LossScalerConfig cfg;
    cfg.init_scale = 256;
    engine::LossScaler scaler(cfg);
    engine::manual_seed(7);
    Tensor x = engine::cast(engine::uniform({4, 6, 6, 3}, -1, 1, DType::F32), DType::F16);
    if (d.is_cuda()) x = x.to(d);
    for (int s = 0; s < 4; ++s) {
      conv->bias->set_trainable(s < 2);  // frozen after two steps, as the whitening bias
      opt.zero_grad();
      engine::Tape tape;
      {
        engine::TapeScope scope(tape);
        engine::AutocastScope autocast(DType::F16);
        tape.backward(scaler.scale(engine::sum(engine::cast((*net)(x), DType::F32))));
      }
      scaler.step(opt);
      scaler.update();
    }
    std::vector<Vec> out;
    for (auto& p : net->parameters()) out.push_back(p->master.to_vector());
    return out;
  };
  const std::vector<Vec> cpu = run(engine::Device::cpu()), gpu = run(kGpu);
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("parameter " << i);
    double scale = 1e-30, worst = 0;
    for (size_t j = 0; j < cpu[i].size(); ++j) {
      scale = std::max(scale, std::fabs(cpu[i][j]));
      worst = std::max(worst, std::fabs(cpu[i][j] - gpu[i][j]));
    }
    CHECK(worst <= 5e-3 * scale);  // FP16 activations summed in other orders (as the simplecnn steps)
  }
  // The frozen scale (parameter 2, the batch-norm's gamma) stays 1 on both, bit for bit.
  CHECK(gpu[2] == Vec(8, 1.0));
}

TEST_CASE("an airbench94 training step on the GPU matches the CPU (FP32, summed loss)", "[cuda]") {
  auto run = [](engine::Device d) {
    engine::manual_seed(8);
    auto net = models::airbench94();
    net->to(d);
    engine::SGD opt(net->parameters(), 1e-3, 0.85, 1.0, true);
    engine::manual_seed(9);
    Tensor x = engine::uniform({8, 32, 32, 3}, -2, 2, DType::F32);
    Tensor y = Tensor::from_ints({0, 1, 2, 3, 4, 5, 6, 7}, {8});
    if (d.is_cuda()) x = x.to(d), y = y.to(d);
    double loss = 0;
    for (int s = 0; s < 2; ++s) {
      opt.zero_grad();
      engine::Tape tape;
      engine::TapeScope scope(tape);
      const Tensor l = engine::cross_entropy((*net)(x), y, 0.2, engine::Reduction::Sum);
      if (s == 0) loss = l.item();
      tape.backward(l);
      opt.step();
    }
    Vec w;
    for (auto& p : net->parameters())
      for (double v : p->master.to_vector()) w.push_back(v);
    return std::make_pair(loss, w);
  };
  const auto cpu = run(engine::Device::cpu()), gpu = run(kGpu);
  CHECK(gpu.first == Approx(cpu.first).epsilon(1e-5));
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < cpu.second.size(); ++i) {
    scale = std::max(scale, std::fabs(cpu.second[i]));
    worst = std::max(worst, std::fabs(cpu.second[i] - gpu.second[i]));
  }
  // FP32 sums of up to 2,304 terms per output, in other orders on both sides, over two steps
  // of a 7-convolution net: 1e-4 of the largest weight (a wrong kernel is off by O(1)).
  INFO("worst weight difference " << worst << " of " << scale);
  CHECK(worst <= 1e-4 * scale);
}
