// [cuda] whole training steps: the same model, batch and seed on the CPU and on the GPU give
// the same loss and the same weights after SGD and Adam steps, in FP32 and in FP16 with the
// loss scaler (device-resident scale and found-inf flag).
#include <algorithm>
#include <cmath>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/random.h"
#include "models/models.h"
#include "tests/adam_bound.h"

using engine::DType;
using engine::Tensor;

namespace {

// The Adam runs' settings, read by the run and by the bound on its weights alike.
constexpr double kAdamLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999;
constexpr int kSteps = 2;

struct Run {
  double loss = 0, grad_norm = 0;
  std::vector<double> initial, weights;  // the FP32 masters before the first step and after the last
};

// kSteps steps of simplecnn on a fixed random batch; dropout masks match across devices. With
// clip > 0 the gradients are clipped to that global norm (the norm of the last step kept).
Run train_steps(engine::Device device, DType dt, bool adam, bool scaled, double clip = 0) {
  engine::manual_seed(5);
  auto model = models::simplecnn();
  model->set_compute_dtype(dt);
  model->to(device);
  Run r;
  for (auto& p : model->parameters())
    for (double v : p->master.to_vector()) r.initial.push_back(v);
  std::unique_ptr<engine::Optimizer> opt;
  if (adam) opt = std::make_unique<engine::Adam>(model->parameters(), kAdamLr, kBeta1, kBeta2);
  else opt = std::make_unique<engine::SGD>(model->parameters(), 0.05, 0.9);
  engine::LossScalerConfig cfg;
  cfg.enabled = scaled;
  engine::LossScaler scaler(cfg);
  engine::manual_seed(6);
  Tensor x = engine::cast(engine::uniform({8, 32, 32, 3}, -1, 1, DType::F32), dt).to(device);
  std::vector<int32_t> labels = {0, 1, 2, 3, 4, 5, 6, 7};
  Tensor y = Tensor::from_ints(labels, {8}).to(device);
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    engine::Tape tape;
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      engine::AutocastScope autocast(dt);
      loss = engine::cross_entropy((*model)(x), y);
      tape.backward(scaler.scale(loss));
    }
    if (clip > 0) scaler.clip_grad_norm(*opt, clip);
    scaler.step(*opt);
    scaler.update();
    if (s == 0) r.loss = loss.item();
  }
  for (auto& p : model->parameters())
    for (double v : p->master.to_vector()) r.weights.push_back(v);
  if (clip > 0) r.grad_norm = scaler.last_grad_norm();
  return r;
}

// Largest |a - b| relative to the largest |a|: cuDNN/cuBLASLt sum in other orders than the
// CPU GEMM, so results agree to accumulated rounding, not bit for bit.
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(a[i]));
  }
  return diff / scale;
}

}  // namespace

// The weights after the Adam steps: each within what rounding can flip (tests/adam_bound.h, for
// 2 steps at lr 1e-3: 4.0e-3), and together within kMaxRatio of the CPU's moves, which a
// learning rate 5% off on one side exceeds (FP32: max_ratio 1e-3). Measured on the CPU
// (tests/test_optim.cpp): FP32 against FP64 2e-7, FP16 against FP32 0.004, FP16 against BF16
// 0.015, FP16 against FP16 with lr 5% off 0.056.
static void check_adam_weights(const Run& cpu, const Run& gpu, double max_ratio) {
  REQUIRE(cpu.weights.size() == gpu.weights.size());
  REQUIRE(cpu.initial == gpu.initial);  // the same start, or neither bound means anything
  const double reach = 2 * kAdamLr * adam_bound::reach(kSteps, kBeta1, kBeta2);
  const adam_bound::Agreement g = adam_bound::agreement(cpu.initial, cpu.weights, gpu.weights, kAdamLr);
  double scale = 0;
  for (size_t i = 0; i < cpu.weights.size(); ++i)
    scale = std::max({scale, std::fabs(cpu.initial[i]), std::fabs(cpu.weights[i]), std::fabs(gpu.weights[i])});
  INFO("worst weight difference " << g.worst << " (Adam's reach " << reach << "); " << g.flipped << " of "
       << cpu.weights.size() << " apart by over lr/2; sum |gpu - cpu| / sum |cpu - start| = " << g.ratio);
  // Beyond the reach only FP32 rounding: a few ulps of each step, and the masters' 2^-24 of |w|
  // per step and device.
  CHECK(g.worst <= reach * (1 + 1e-6) + 2 * kSteps * std::ldexp(scale, -24));
  CHECK(g.ratio <= max_ratio);
}

TEST_CASE("simplecnn training steps on CUDA match the CPU", "[cuda]") {
  struct Case { DType dt; bool adam, scaled; double tol; };
  // FP32: both sides accumulate in FP32 (TF32 off): SGD weights agree to about 1e-7 of the
  // largest. FP16/BF16: activations are rounded at nearly the same points (the GPU rounds a
  // biased convolution twice, cuDNN's output and then the bias add, as PyTorch's cuDNN path
  // does; the CPU once), and a one-ulp difference can propagate, so the bound is a few ulps.
  for (Case c : {Case{DType::F32, false, false, 1e-5}, Case{DType::F32, true, false, 1e-5},
                 Case{DType::F16, true, true, 5e-3}, Case{DType::F16, false, true, 5e-3},
                 Case{DType::BF16, false, false, 2e-2}}) {
    INFO("dtype " << engine::dtype_name(c.dt) << (c.adam ? " adam" : " sgd") << (c.scaled ? " scaled" : ""));
    const Run cpu = train_steps(engine::Device::cpu(), c.dt, c.adam, c.scaled);
    const Run gpu = train_steps(engine::Device::cuda(0), c.dt, c.adam, c.scaled);
    CHECK(std::isfinite(gpu.loss));
    CHECK(gpu.loss == Approx(cpu.loss).epsilon(c.tol));
    // FP32 rounds 2^13 times finer than FP16: its own bound (the CPU's FP32 against FP64: 2e-7)
    // leaves room for some 260 flipped weights (0 on the CPU) and still catches a learning rate
    // 0.2% off, or a wrong beta2 (0.3% at step 2).
    if (c.adam) check_adam_weights(cpu, gpu, c.dt == DType::F32 ? 1e-3 : adam_bound::kMaxRatio);
    else CHECK(max_rel_diff(cpu.weights, gpu.weights) <= c.tol);
  }
}

TEST_CASE("gradient clipping on the device matches the CPU", "[cuda]") {
  // The norm and the clipped 1/scale are computed on the device (no host wait); the SGD
  // weights must match a CPU run that clips the same way, in FP32 and in FP16 with the scaler.
  for (DType dt : {DType::F32, DType::F16}) {
    const bool scaled = dt == DType::F16;
    INFO("dtype " << engine::dtype_name(dt));
    const Run plain = train_steps(engine::Device::cpu(), dt, false, scaled);
    const Run cpu = train_steps(engine::Device::cpu(), dt, false, scaled, 0.05);
    const Run gpu = train_steps(engine::Device::cuda(0), dt, false, scaled, 0.05);
    const double tol = dt == DType::F32 ? 1e-5 : 5e-3;
    REQUIRE(std::isfinite(gpu.grad_norm));
    CHECK(gpu.grad_norm == Approx(cpu.grad_norm).epsilon(tol));
    CHECK(cpu.grad_norm > 0.05);                               // the bound really clips here
    CHECK(max_rel_diff(plain.weights, cpu.weights) > 2 * tol);  // ... and changed the weights (0.07 on the CPU)
    CHECK(max_rel_diff(cpu.weights, gpu.weights) <= tol);
  }
}

TEST_CASE("the device loss scaler skips an overflowed step and backs off without host reads", "[cuda]") {
  engine::manual_seed(7);
  auto model = models::simplecnn();
  model->set_compute_dtype(DType::F16);
  model->to(engine::Device::cuda(0));
  engine::Adam opt(model->parameters(), 1e-3);
  engine::LossScalerConfig cfg;
  cfg.init_scale = 1099511627776.0;  // 2^40: the FP16 gradients overflow
  engine::LossScaler scaler(cfg);
  Tensor x = engine::cast(engine::uniform({4, 32, 32, 3}, -1, 1, DType::F32), DType::F16).to(engine::Device::cuda(0));
  Tensor y = Tensor::from_ints({1, 2, 3, 4}, {4}).to(engine::Device::cuda(0));
  const auto before = model->parameters()[0]->master.to_vector();
  opt.zero_grad();
  engine::Tape tape;
  {
    engine::TapeScope scope(tape);
    engine::AutocastScope autocast(DType::F16);
    tape.backward(scaler.scale(engine::cross_entropy((*model)(x), y)));
  }
  scaler.step(opt);
  scaler.update();
  CHECK(scaler.found_inf());
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.current_scale() == 549755813888.0);  // 2^39
  CHECK(opt.steps() == 0);
  CHECK(model->parameters()[0]->master.to_vector() == before);
}

TEST_CASE("CUDA steps leave parameters without a gradient alone and never wait", "[cuda]") {
  // The CPU twin is "parameters without a gradient are not stepped" in tests/test_optim.cpp.
  const engine::Device gpu = engine::Device::cuda(0);
  auto make = [&](const std::vector<double>& w) {
    auto p = std::make_shared<engine::Parameter>();
    p->master = Tensor::from_vector(w, {static_cast<int64_t>(w.size())}, DType::F32).to(gpu);
    p->master.set_requires_grad(true);
    p->value = p->master;
    return p;
  };
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "sgd" : "adamw") << " with weight decay");
    auto used = make({0.5, -0.25, 0.75}), unused = make({0.125, -0.5});
    const auto unused0 = unused->master.to_vector(), used0 = used->master.to_vector();
    std::unique_ptr<engine::Optimizer> opt;
    if (which == 0) opt = std::make_unique<engine::SGD>(std::vector<engine::ParamPtr>{used, unused}, 0.1, 0.9, 0.5);
    else opt = std::make_unique<engine::Adam>(std::vector<engine::ParamPtr>{used, unused}, 0.1, 0.9, 0.999, 1e-8, 0.5, true);
    used->value.set_grad(Tensor::from_vector({1, -1, 0.5}, {3}, DType::F32).to(gpu));
    for (int s = 0; s < 3; ++s) CHECK(opt->step() == engine::StepResult::Queued);
    CHECK_FALSE(opt->last_step_skipped());
    CHECK(opt->steps() == 3);
    CHECK(unused->master.to_vector() == unused0);
    CHECK(used->master.to_vector() != used0);
    used->value.set_grad(Tensor::from_vector({1, std::nan(""), 0.5}, {3}, DType::F32).to(gpu));
    const auto before = used->master.to_vector();
    CHECK(opt->step() == engine::StepResult::Queued);
    CHECK(opt->last_step_skipped());
    CHECK(opt->steps() == 3);
    CHECK(used->master.to_vector() == before);
  }
}

TEST_CASE("the device loss scaler aborts after max_consecutive_skips without being read", "[cuda]") {
  // Every step overflows; nothing reads the scaler's counters, yet update() must throw within
  // two steps of the limit (it checks a copy of the counter that the device sent back).
  engine::manual_seed(8);
  auto model = models::simplecnn();
  model->set_compute_dtype(DType::F16);
  model->to(engine::Device::cuda(0));
  engine::Adam opt(model->parameters(), 1e-3);
  engine::LossScalerConfig cfg;
  cfg.init_scale = 1099511627776.0;  // 2^40
  cfg.backoff_factor = 0.999;        // stays huge: every step overflows
  cfg.max_consecutive_skips = 3;
  engine::LossScaler scaler(cfg);
  Tensor x = engine::cast(engine::uniform({4, 32, 32, 3}, -1, 1, DType::F32), DType::F16).to(engine::Device::cuda(0));
  Tensor y = Tensor::from_ints({1, 2, 3, 4}, {4}).to(engine::Device::cuda(0));
  int threw_at = 0;
  for (int s = 1; s <= 20 && !threw_at; ++s) {
    opt.zero_grad();
    engine::Tape tape;
    {
      engine::TapeScope scope(tape);
      engine::AutocastScope autocast(DType::F16);
      tape.backward(scaler.scale(engine::cross_entropy((*model)(x), y)));
    }
    CHECK(scaler.step(opt) == engine::StepResult::Queued);
    try {
      scaler.update();
    } catch (const engine::Error& e) {
      CHECK(std::string(e.what()).find("consecutive steps skipped") != std::string::npos);
      threw_at = s;
    }
    if (!threw_at) engine::Tensor::zeros({1}, DType::F32, engine::Device::cuda(0)).item();  // let copies land
  }
  CHECK(threw_at >= 4);  // the count reaches 3 at step 3; its copy is seen at a later update
  CHECK(threw_at <= 5);
  CHECK(opt.steps() == 0);
}

TEST_CASE("sum's backward on CUDA reads the gradient on the device", "[cuda]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(engine::dtype_name(dt));
    Tensor x = engine::cast(engine::uniform({5, 7}, -1, 1, DType::F32), dt).to(engine::Device::cuda(0));
    x.set_requires_grad(true);
    engine::Tape tape;
    Tensor s;
    {
      engine::TapeScope scope(tape);
      s = engine::sum(x);
    }
    tape.backward(engine::scale(s, 3.0));
    const std::vector<double> g = x.grad().to_vector();
    REQUIRE(g.size() == 35);
    for (double v : g) CHECK(v == 3.0);
  }
}

TEST_CASE("an op refuses tensors on different devices with one clear error", "[cuda]") {
  Tensor a = Tensor::full({4}, 1.0, DType::F32);
  Tensor b = Tensor::full({4}, 2.0, DType::F32).to(engine::Device::cuda(0));
  CHECK_THROWS_WITH(engine::add(a, b), Catch::Contains("device"));
  Tensor x = Tensor::full({2, 3}, 1.0, DType::F32).to(engine::Device::cuda(0));
  Tensor labels = Tensor::from_ints({0, 1}, {2});  // on the CPU
  CHECK_THROWS_WITH(engine::cross_entropy(x, labels), Catch::Contains("cpu"));
}
