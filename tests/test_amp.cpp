// Mixed precision, each mechanism shown doing its job: the FP16 range, loss scaling that
// rescues underflowing gradients, the scaler's state machine (PyTorch's update vectors),
// skipped steps on overflow, clipping of unscaled gradients, autocast and FP32 regions.
#include <cmath>
#include <limits>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/random.h"
#include "tests/learn_util.h"

using Catch::Contains;
using engine::DType;
using engine::LossScaler;
using engine::LossScalerConfig;
using engine::Tensor;

namespace {

// A one-parameter "model" whose gradient the test sets by hand.
struct Manual {
  std::shared_ptr<engine::Parameter> p = std::make_shared<engine::Parameter>();
  Manual() {
    p->name = "w";
    p->master = Tensor::from_vector({1.0, 2.0}, {2}, DType::F32);
    p->master.set_requires_grad(true);
    p->value = p->master;
  }
  void set_grad(double a, double b) { p->value.set_grad(Tensor::from_vector({a, b}, {2}, DType::F32)); }
};

// One scaler step with a clean or an overflowed gradient; returns the scale after update().
double scaler_step(LossScaler& scaler, engine::Optimizer& opt, Manual& m, bool overflow) {
  m.set_grad(overflow ? std::numeric_limits<double>::infinity() : 0.5, 0.25);
  scaler.step(opt);
  scaler.update();
  return scaler.current_scale();
}

}  // namespace

TEST_CASE("the FP16 range: tiny values flush to zero, large ones overflow", "[amp][fp16]") {
  using engine::half;
  CHECK(static_cast<float>(half(2e-8f)) == 0.0f);                       // below half the smallest subnormal
  CHECK(static_cast<float>(half(6e-8f)) == kernels::kHalfMinSubnormal);  // 2^-24 ~ 5.96e-8 survives
  CHECK(static_cast<float>(half(65504.f)) == 65504.f);
  CHECK(std::isinf(static_cast<float>(half(65520.f))));
  CHECK(static_cast<float>(half(1e-4f)) != 0.0f);
}

TEST_CASE("a realistic small gradient underflows in FP16 without scaling and survives with it", "[amp][fp16]") {
  // A linear layer's weight gradient is sum_n gy[n,o] * x[n,i]: activations ~1e-3 times
  // upstream gradients ~1e-6, summed over 4 rows, stay below 1e-8 - under half of FP16's
  // smallest subnormal (2^-24 ~ 6e-8), so the FP16 result rounds to zero.
  engine::manual_seed(31);
  Tensor x64 = engine::uniform({4, 8}, 0.5e-3, 1.5e-3, DType::F64);
  Tensor gy64 = engine::uniform({4, 3}, 0.5e-6, 1.5e-6, DType::F64);
  Tensor w64 = engine::uniform({3, 8}, -1, 1, DType::F64);
  auto weight_grad = [&](DType dt, double loss_scale) {
    Tensor x = engine::cast(x64, dt), w = engine::cast(w64, dt);
    w.set_requires_grad(true);
    engine::Tape tape;
    Tensor y;
    {
      engine::TapeScope scope(tape);
      y = engine::linear(x, w, Tensor());
    }
    tape.backward(y, engine::cast(engine::scale(gy64, loss_scale), dt));  // what backward of (loss * scale) sends
    std::vector<double> g = w.grad().to_vector();
    for (double& v : g) v /= loss_scale;  // unscale in FP32/FP64 arithmetic
    return g;
  };
  const auto exact = weight_grad(DType::F64, 1.0);
  const auto fp16_unscaled = weight_grad(DType::F16, 1.0);
  const auto fp16_scaled = weight_grad(DType::F16, 65536.0);
  int lost = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    lost += fp16_unscaled[i] == 0.0;
    // Scaled: the FP16 inputs' rounding (2^-11 relative each) dominates; 1% is ample.
    CHECK(fp16_scaled[i] == Approx(exact[i]).epsilon(0.01));
  }
  // Without scaling every gradient element is gone.
  CHECK(lost == static_cast<int>(exact.size()));
}

TEST_CASE("scaler update vector: growth 2, backoff 0.25, interval 2 gives 4, 4, 8, then 2 after an inf step",
          "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 0.1);
  LossScalerConfig cfg;
  cfg.init_scale = 4.0;
  cfg.growth_factor = 2.0;
  cfg.backoff_factor = 0.25;
  cfg.growth_interval = 2;
  LossScaler scaler(cfg);
  CHECK(scaler.current_scale() == 4.0);
  CHECK(scaler_step(scaler, opt, m, false) == 4.0);
  CHECK(scaler_step(scaler, opt, m, false) == 8.0);
  CHECK(scaler_step(scaler, opt, m, true) == 2.0);
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("scaler: init 128, three clean growth steps and one skip give 128 * 2^3 * 0.5", "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 0.1);
  LossScalerConfig cfg;
  cfg.init_scale = 128.0;
  cfg.growth_interval = 1;
  LossScaler scaler(cfg);
  for (int i = 0; i < 3; ++i) scaler_step(scaler, opt, m, false);
  CHECK(scaler_step(scaler, opt, m, true) == 128.0 * 8 * 0.5);
}

TEST_CASE("a skipped step leaves weights and optimizer state untouched", "[amp][scaler]") {
  Manual m;
  engine::Adam opt({m.p}, 0.1);
  LossScaler scaler;
  scaler_step(scaler, opt, m, false);
  const auto w = m.p->master.to_vector();
  const auto m1 = opt.exp_avg[0].to_vector(), v1 = opt.exp_avg_sq[0].to_vector();
  const int64_t steps = opt.steps();
  m.set_grad(std::nan(""), 1.0);  // one NaN anywhere skips the whole update
  CHECK(scaler.step(opt) == engine::StepResult::Skipped);
  scaler.update();
  CHECK(m.p->master.to_vector() == w);
  CHECK(opt.exp_avg[0].to_vector() == m1);
  CHECK(opt.exp_avg_sq[0].to_vector() == v1);
  CHECK(opt.steps() == steps);
  CHECK(scaler.current_scale() == 32768.0);
}

TEST_CASE("scaler misuse is a clear error, min scale floors backoff, repeated skips can abort", "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 0.1);
  {
    LossScaler scaler;
    m.set_grad(1, 1);
    scaler.unscale(opt);
    CHECK_THROWS_WITH(scaler.unscale(opt), Contains("already been called"));
    scaler.step(opt);
    CHECK_THROWS_WITH(scaler.unscale(opt), Contains("after step()"));
    CHECK_THROWS_WITH(scaler.step(opt), Contains("already been called"));
    scaler.update();
    CHECK_THROWS_WITH(scaler.update(), Contains("without step()"));
  }
  {
    LossScalerConfig cfg;
    cfg.init_scale = 8.0;
    cfg.min_scale = 2.0;
    LossScaler scaler(cfg);
    for (int i = 0; i < 5; ++i) scaler_step(scaler, opt, m, true);
    CHECK(scaler.current_scale() == 2.0);
  }
  {
    LossScalerConfig cfg;
    cfg.max_consecutive_skips = 3;
    LossScaler scaler(cfg);
    scaler_step(scaler, opt, m, true);
    scaler_step(scaler, opt, m, true);
    m.set_grad(std::numeric_limits<double>::infinity(), 0);
    CHECK_THROWS_WITH(scaler.step(opt), Contains("3 consecutive steps skipped"));
  }
  CHECK_THROWS_WITH(LossScaler([] { LossScalerConfig c; c.backoff_factor = 1.5; return c; }()),
                    Contains("backoff factor"));
}

TEST_CASE("the scale grows only to a finite value, and a disabled scaler is a no-op", "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 0.1);
  LossScalerConfig cfg;
  cfg.init_scale = 2e38;  // near FLT_MAX: doubling would overflow FP32
  cfg.growth_interval = 1;
  LossScaler scaler(cfg);
  CHECK(scaler_step(scaler, opt, m, false) == 2e38);
  LossScalerConfig off;
  off.enabled = false;
  LossScaler none(off);
  Tensor loss = Tensor::full({1}, 3.0, DType::F32);
  CHECK(none.scale(loss).item() == 3.0);
  CHECK(scaler_step(none, opt, m, false) == 1.0);
}

TEST_CASE("gradient clipping works on the unscaled gradients", "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 1.0);
  LossScalerConfig cfg;
  cfg.init_scale = 1024.0;
  LossScaler scaler(cfg);
  m.set_grad(3.0 * 1024, 4.0 * 1024);  // unscaled gradient (3, 4): norm 5
  CHECK(std::isnan(scaler.last_grad_norm()));  // nothing computed yet
  scaler.unscale(opt);
  CHECK(scaler.clip_grad_norm(opt, 1.0) == Approx(5.0));
  CHECK(scaler.last_grad_norm() == Approx(5.0));
  CHECK(scaler.step(opt) == engine::StepResult::Applied);
  scaler.update();
  // w - lr * g * (1 / 5): (1, 2) - (0.6, 0.8)
  const auto w = m.p->master.to_vector();
  CHECK(w[0] == Approx(0.4).epsilon(1e-5));
  CHECK(w[1] == Approx(1.2).epsilon(1e-5));
}

TEST_CASE("scaler state survives a save and load", "[amp][scaler]") {
  Manual m;
  engine::SGD opt({m.p}, 0.1);
  LossScalerConfig cfg;
  cfg.growth_interval = 3;
  LossScaler a(cfg), b(cfg);
  scaler_step(a, opt, m, true);
  scaler_step(a, opt, m, false);
  b.load_state(a.state());
  CHECK(b.current_scale() == a.current_scale());
  CHECK(b.growth_tracker() == 1);
  CHECK(b.skipped_steps() == 1);
  CHECK_THROWS_WITH(b.load_state({-1.0, 0, 0, 0}), Contains("bad saved state"));
}

namespace {

// Trains tiny_cnn on blobs with Adam and a loss scaler; `inject_inf_at` poisons one
// gradient at that step, `skip_at` makes a scaler-less run simply skip that step.
struct RunResult { std::vector<double> weights; int64_t skipped; double final_scale; double accuracy; std::vector<double> scales; };

RunResult run(DType compute, bool use_scaler, LossScalerConfig cfg, int steps, int inject_inf_at = -1, int skip_at = -1) {
  engine::manual_seed(41);
  const testing::Problem data = testing::blobs(128);
  auto net = testing::tiny_cnn();
  net->set_compute_dtype(compute);
  engine::Adam opt(net->parameters(), 0.01);
  LossScaler scaler(use_scaler ? cfg : [] { LossScalerConfig c; c.enabled = false; return c; }());
  Tensor x = engine::cast(data.x, compute);
  RunResult r{};
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    engine::Tape tape;
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      loss = scaler.scale(engine::cross_entropy((*net)(x), data.labels));
    }
    tape.backward(loss);
    if (s == skip_at) continue;
    if (s == inject_inf_at) {
      Tensor g = net->parameters()[0]->grad();
      g.copy_from(engine::cast(Tensor::full(g.shape(), std::numeric_limits<double>::infinity(), DType::F32), g.dtype()));
    }
    scaler.step(opt);
    scaler.update();
    r.scales.push_back(scaler.current_scale());
  }
  for (auto& p : net->parameters())
    for (double v : p->master.to_vector()) r.weights.push_back(v);
  r.skipped = scaler.skipped_steps();
  r.final_scale = scaler.current_scale();
  net->eval();
  r.accuracy = testing::accuracy((*net)(x), data.labels);
  return r;
}

}  // namespace

TEST_CASE("an injected inf at step k: the scaled run matches an unscaled run that skipped step k, bit for bit",
          "[amp][scaler]") {
  // In FP32, multiplying by a power of two is exact, so scaling and unscaling change no
  // bit of any gradient: the only difference can come from the skipped step itself.
  LossScalerConfig cfg;
  const RunResult scaled = run(DType::F32, true, cfg, 12, /*inject_inf_at=*/5);
  const RunResult control = run(DType::F32, false, cfg, 12, -1, /*skip_at=*/5);
  CHECK(scaled.skipped == 1);
  CHECK(scaled.final_scale == 32768.0);
  CHECK(scaled.weights == control.weights);
}

TEST_CASE("overflowing gradients: steps are skipped, the scale backs off, grows again, and training converges",
          "[amp][scaler][fp16]") {
  LossScalerConfig cfg;
  cfg.init_scale = 1099511627776.0;  // 2^40: the FP16 loss gradient overflows at first
  cfg.growth_interval = 10;
  const RunResult r = run(DType::F16, true, cfg, 90);
  CHECK(r.skipped >= 1);
  CHECK(r.final_scale < cfg.init_scale);
  bool grew = false;
  for (size_t i = 1; i < r.scales.size(); ++i) grew = grew || r.scales[i] == 2 * r.scales[i - 1];
  CHECK(grew);
  CHECK(r.accuracy >= 0.99);
}

TEST_CASE("a scaled FP16 run reaches the accuracy of the FP32 run from the same seed", "[amp][fp16]") {
  LossScalerConfig cfg;
  const RunResult fp32 = run(DType::F32, false, cfg, 80);
  const RunResult fp16 = run(DType::F16, true, cfg, 80);
  CHECK(fp32.accuracy >= 0.99);
  CHECK(fp16.accuracy >= 0.99);
  CHECK(fp16.skipped == 0);  // 65536 is a safe scale for this model
}

TEST_CASE("autocast casts conv/linear inputs to the compute dtype, ForceFp32 keeps a region in FP32", "[amp][autocast]") {
  CHECK(engine::op_precision("conv2d") == engine::Precision::ComputeDtype);
  CHECK(engine::op_precision("cross_entropy") == engine::Precision::Fp32);
  CHECK(engine::op_precision("relu") == engine::Precision::KeepInput);
  engine::manual_seed(51);
  Tensor x = engine::uniform({2, 4, 4, 3}, -1, 1, DType::F32);
  Tensor w16 = engine::cast(engine::uniform({5, 3, 3, 3}, -1, 1, DType::F32), DType::F16);
  CHECK_THROWS_WITH(engine::conv2d(x, w16, Tensor()), Contains("dtype mismatch"));
  {
    engine::AutocastScope autocast(DType::F16);
    CHECK(engine::conv2d(x, w16, Tensor()).dtype() == DType::F16);
    CHECK(engine::relu(x).dtype() == DType::F32);  // element-wise ops keep their input dtype
    engine::AutocastScope off(DType::F16, false);
    CHECK_THROWS_WITH(engine::conv2d(x, w16, Tensor()), Contains("dtype mismatch"));
  }
  engine::Sequential net;
  auto head = std::make_shared<engine::Linear>(4 * 4 * 5, 3);
  net.add(std::make_shared<engine::Conv2d>(3, 5, 3, 1, 1)).add(std::make_shared<engine::Flatten>())
      .add(std::make_shared<engine::ForceFp32>(head));
  net.set_compute_dtype(DType::F16);
  CHECK(net.parameters()[0]->value.dtype() == DType::F16);
  CHECK(head->weight->value.dtype() == DType::F32);
  engine::AutocastScope autocast(DType::F16);
  engine::Tape tape;
  Tensor loss;
  {
    engine::TapeScope scope(tape);
    Tensor logits = net(engine::cast(x, DType::F16));
    CHECK(logits.dtype() == DType::F32);
    loss = engine::cross_entropy(logits, Tensor::from_ints({0, 2}, {2}));
  }
  tape.backward(loss);
  CHECK(head->weight->grad().dtype() == DType::F32);
  CHECK(net.parameters()[0]->grad().dtype() == DType::F16);
}

TEST_CASE("the autocast policy drives each op's inputs: compute dtype, widened to FP32, or kept", "[amp][autocast]") {
  const Tensor h = Tensor::full({2, 3}, 1.0, DType::F16), d = Tensor::full({2, 3}, 1.0, DType::F64);
  CHECK(engine::autocast_input("cross_entropy", h).dtype() == DType::F16);  // autocast off: untouched
  engine::AutocastScope autocast(DType::F16);
  CHECK(engine::autocast_input("linear", Tensor::full({2}, 1.0, DType::F32)).dtype() == DType::F16);
  CHECK(engine::autocast_input("cross_entropy", h).dtype() == DType::F32);  // losses in FP32
  CHECK(engine::autocast_input("sum", h).dtype() == DType::F32);
  CHECK(engine::autocast_input("cross_entropy", d).dtype() == DType::F64);  // widened, never narrowed
  CHECK(engine::autocast_input("batch_norm", h).dtype() == DType::F16);     // data keeps its dtype
  CHECK(engine::autocast_input("relu", h).dtype() == DType::F16);
  // The FP16 logits' gradient comes back in FP16 through the recorded cast.
  Tensor logits = Tensor::full({2, 3}, 0.5, DType::F16);
  logits.set_requires_grad(true);
  engine::Tape tape;
  Tensor loss;
  {
    engine::TapeScope scope(tape);
    loss = engine::cross_entropy(logits, Tensor::from_ints({0, 2}, {2}));
  }
  CHECK(loss.dtype() == DType::F32);
  tape.backward(loss);
  CHECK(logits.grad().dtype() == DType::F16);
}
