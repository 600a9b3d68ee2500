// amp_demo: prints, with real numbers from the engine, why each piece of mixed precision
// exists - the FP16 range, loss scaling, the scaler's state machine, FP32 optimizer math and
// FP32 losses. Each demonstration is also a Catch2 test (tests/test_amp.cpp, test_optim.cpp,
// test_ops_ref.cpp).
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/amp.h"
#include "engine/random.h"
#include "engine/nn.h"

using engine::DType;
using engine::Tensor;

namespace {

void fp16_range() {
  std::puts("1. The FP16 range: 5.96e-8 (2^-24) .. 65504");
  for (float v : {2e-8f, 6e-8f, 1e-5f, 1.0f, 65504.0f, 65520.0f, 1e5f})
    std::printf("   %-10g -> FP16 %-12g  BF16 %g\n", v, static_cast<float>(engine::half(v)),
                static_cast<float>(engine::bfloat16(v)));
}

void loss_scaling() {
  std::puts("\n2. Loss scaling rescues gradients that underflow in FP16");
  // dL/dW of a linear layer = sum over the batch of upstream gradient x activation.
  engine::manual_seed(1);
  Tensor x = engine::uniform({4, 8}, 0.5e-3, 1.5e-3, DType::F64);
  Tensor gy = engine::uniform({4, 3}, 0.5e-6, 1.5e-6, DType::F64);
  Tensor w = engine::uniform({3, 8}, -1, 1, DType::F64);
  for (double scale : {1.0, 65536.0}) {
    for (DType dt : {DType::F64, DType::F16}) {
      Tensor xw = engine::cast(x, dt), ww = engine::cast(w, dt);
      ww.set_requires_grad(true);
      engine::Tape tape;
      Tensor y;
      {
        engine::TapeScope scope(tape);
        y = engine::linear(xw, ww, Tensor());
      }
      tape.backward(y, engine::cast(engine::scale(gy, scale), dt));
      const auto g = ww.grad().to_vector();
      int zeros = 0;
      for (double v : g) zeros += v == 0.0;
      std::printf("   %s, loss scale %-6g: dW[0] = %.4e (unscaled), %d of %zu gradient elements are zero\n",
                  engine::dtype_name(dt), scale, g[0] / scale, zeros, g.size());
    }
  }
}

void scaler_state_machine() {
  std::puts("\n3. The dynamic loss scaler (growth 2, backoff 0.25, interval 2; PyTorch's test vector)");
  auto p = std::make_shared<engine::Parameter>();
  p->master = Tensor::from_vector({1.0}, {1}, DType::F32);
  p->master.set_requires_grad(true);
  p->value = p->master;
  engine::SGD opt({p}, 0.1);
  engine::LossScalerConfig cfg;
  cfg.init_scale = 4;
  cfg.backoff_factor = 0.25;
  cfg.growth_interval = 2;
  engine::LossScaler scaler(cfg);
  for (bool overflow : {false, false, true, false}) {
    p->value.set_grad(Tensor::from_vector({overflow ? std::numeric_limits<double>::infinity() : 1.0}, {1}, DType::F32));
    const bool applied = scaler.step(opt) == engine::StepResult::Applied;  // CPU: known at once
    scaler.update();
    std::printf("   gradient %-4s -> step %-7s scale now %g\n", overflow ? "inf" : "ok", applied ? "applied" : "SKIPPED",
                scaler.current_scale());
  }
}

void fp32_optimizer_math() {
  std::puts("\n4. Why optimizer math and master weights are FP32");
  std::printf("   Adam's eps 1e-8 in FP16: %g;  1 + 1e-4 in FP16: %.8g (the update is lost)\n",
              static_cast<float>(engine::half(1e-8f)),
              static_cast<float>(engine::half(static_cast<float>(engine::half(1.0f)) + 1e-4f)));
}

void fp32_loss() {
  std::puts("\n5. Why softmax and the loss are FP32");
  Tensor logits = engine::cast(Tensor::from_vector({60000, -60000, 0, 0}, {2, 2}, DType::F32), DType::F16);
  std::printf("   exp(11.1) in FP16 is %g already; cross-entropy of FP16 logits +-60000 computed in FP32: %g\n",
              static_cast<float>(engine::half(std::exp(11.1f))),
              engine::cross_entropy(logits, Tensor::from_ints({0, 0}, {2})).item());
}

void batchnorm_fp32_statistics() {
  std::puts("\n6. Why batch-norm statistics are FP32");
  // Activations around +-1000 in FP16: their variance (~1e6) is far above 65504.
  std::vector<double> v;
  for (int i = 0; i < 64; ++i) v.push_back(i % 2 ? 1000.0 + i : -1000.0 - i);
  Tensor x = engine::cast(Tensor::from_vector(v, {64, 1}, DType::F32), DType::F16);
  Tensor gamma = Tensor::full({1}, 1.0, DType::F32), beta = Tensor::zeros({1}, DType::F32);
  Tensor rm = Tensor::zeros({1}, DType::F32), rv = Tensor::full({1}, 1.0, DType::F32);
  double mean = 0, var = 0;
  for (double e : v) mean += e / 64;
  for (double e : v) var += (e - mean) * (e - mean) / 64;
  const double y0 = engine::batch_norm(x, gamma, beta, rm, rv, true).to_vector()[0];
  std::printf("   batch variance %.4g (FP16 max 65504): normalised x[0] = %.4f, running variance %.4g - all finite\n",
              var, y0, rv.item());
}

// A small conv net on random data with an absurd initial scale: the first steps overflow,
// the scaler skips them and backs off, then training proceeds and the scale grows again.
void overflow_and_recovery() {
  std::puts("\n7. Overflow: skip the step, back off, carry on, grow again (init scale 2^28, interval 5)");
  engine::manual_seed(3);
  auto net = std::make_shared<engine::Sequential>();
  net->add(std::make_shared<engine::Conv2d>(3, 8, 3, 1, 1)).add(std::make_shared<engine::ReLU>())
      .add(std::make_shared<engine::GlobalAvgPool>()).add(std::make_shared<engine::Linear>(8, 4));
  net->set_compute_dtype(DType::F16);
  engine::Adam opt(net->parameters(), 0.01);
  engine::LossScalerConfig cfg;
  cfg.init_scale = 268435456.0;
  cfg.growth_interval = 5;
  engine::LossScaler scaler(cfg);
  Tensor x = engine::cast(engine::uniform({16, 8, 8, 3}, -1, 1, DType::F32), DType::F16);
  std::vector<int32_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 4);
  Tensor y = Tensor::from_ints(labels, {16});
  for (int step = 1; step <= 30; ++step) {
    opt.zero_grad();
    engine::Tape tape;
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      loss = engine::cross_entropy((*net)(x), y);
      tape.backward(scaler.scale(loss));
    }
    const bool applied = scaler.step(opt) == engine::StepResult::Applied;  // CPU: known at once
    scaler.update();
    if (step <= 14 || step % 4 == 0)
      std::printf("   step %2d  loss %.4f  %-7s  scale 2^%g\n", step, loss.item(), applied ? "applied" : "SKIPPED",
                  std::log2(scaler.current_scale()));
  }
}

}  // namespace

int main() {
  try {
    fp16_range();
    loss_scaling();
    scaler_state_machine();
    fp32_optimizer_math();
    fp32_loss();
    batchnorm_fp32_statistics();
    overflow_and_recovery();
    std::puts("\nAlso shown by the tests: an FP16 run with the scaler reaches the FP32 run's accuracy, and a run");
    std::puts("with an injected inf matches, bit for bit, an unscaled run that skipped that step (tests/test_amp.cpp).");
  } catch (const engine::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
