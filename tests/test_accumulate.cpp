// Gradient accumulation (models/train_step.h): K micro-batches of B images, each backward seeded
// with its share of the K*B, equal one batch of K*B; an overflow in any micro-batch skips the
// whole step and backs the scale off once.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/optim.h"
#include "models/train_step.h"
#include "tests/small_nets.h"

using engine::DType;
using engine::Tensor;

namespace {

constexpr int64_t kMicro = 8, kSteps = 4, kAll = kMicro * kSteps;

struct Run {
  std::shared_ptr<engine::Sequential> net;
  std::unique_ptr<engine::Optimizer> opt;
  std::unique_ptr<engine::LossScaler> scaler;
  DType compute;
};

Run make_run(DType compute, bool batch_norm) {
  Run r;
  r.compute = compute;
  r.net = small_nets::conv_net(batch_norm, false);
  if (compute == DType::F64) small_nets::to_f64(*r.net);
  else r.net->set_compute_dtype(compute);
  r.opt = std::make_unique<engine::SGD>(r.net->parameters(), 0.1, 0.9);
  engine::LossScalerConfig sc;
  sc.enabled = compute == DType::F16;
  r.scaler = std::make_unique<engine::LossScaler>(sc);
  return r;
}

DType data_dtype(DType compute) { return compute == DType::F64 ? DType::F64 : DType::F32; }

// Backward of batch `s` as one batch of kAll, or as K = kAll / micro micro-batches; `poison`
// multiplies micro-batch `poisoned`'s seed (1e30 overflows FP16 gradients). No step.
void backward(Run& r, int s, int64_t micro, int poisoned = -1, double poison = 1.0) {
  const small_nets::Batch b = small_nets::batch(s, kAll, data_dtype(r.compute));
  r.opt->zero_grad();
  for (int64_t j = 0; j * micro < kAll; ++j) {
    const double share = static_cast<double>(micro) / kAll * (j == poisoned ? poison : 1.0);
    models::forward_backward(*r.net, *r.scaler, b.x.slice0(j * micro, (j + 1) * micro),
                             b.y.slice0(j * micro, (j + 1) * micro), r.compute, 0.0,
                             Tensor::full({1}, share, data_dtype(r.compute)));
  }
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

// FP64: the same products summed in another grouping (per micro-batch, then across them); each
// gradient element sums m <= 32 * 64 = 2048 terms, so the two differ by at most
// 2 (m - 1) 2^-53 sum|terms| < 5e-13 sum|terms|, and sum|terms| < 10 here. Three SGD steps
// (lr 0.1, momentum 0.9) carry at most 0.1 * 2.71 of that into a weight: 1e-11 bounds it with
// room. A missing share (gradients K times too large) is off by 1e-3 or more.
TEST_CASE("K micro-batches equal one batch of K times the images (FP64)", "[accumulate]") {
  {
    const bool bn = false;  // batch-norm: the next test
    Run one = make_run(DType::F64, bn), acc = make_run(DType::F64, bn);
    for (int s = 0; s < 3; ++s) {
      backward(one, s, kAll);
      backward(acc, s, kMicro);
      CHECK(max_abs_diff(small_nets::grads(*one.net), small_nets::grads(*acc.net)) <= 1e-11);
      models::optimizer_step(*one.opt, *one.scaler, 0.0);
      models::optimizer_step(*acc.opt, *acc.scaler, 0.0);
    }
    const auto w1 = small_nets::masters(*one.net), wk = small_nets::masters(*acc.net);
    CHECK(max_abs_diff(w1, wk) <= 1e-11);
    // The same run with each micro-batch seeded by 1 (no share) lands far away.
    Run wrong = make_run(DType::F64, bn);
    for (int s = 0; s < 3; ++s) {
      const small_nets::Batch b = small_nets::batch(s, kAll, DType::F64);
      wrong.opt->zero_grad();
      for (int64_t j = 0; j < kSteps; ++j)
        models::forward_backward(*wrong.net, *wrong.scaler, b.x.slice0(j * kMicro, (j + 1) * kMicro),
                                 b.y.slice0(j * kMicro, (j + 1) * kMicro), DType::F64, 0.0);
      models::optimizer_step(*wrong.opt, *wrong.scaler, 0.0);
    }
    CHECK(max_abs_diff(w1, small_nets::masters(*wrong.net)) > 1e-3);
  }
}

// Batch-norm normalises each micro-batch by its own statistics (as in PyTorch): accumulation
// is then not the large batch, and this shows by how much, so nobody mistakes one for the other.
TEST_CASE("with batch-norm, micro-batches use their own statistics and differ from the large batch", "[accumulate]") {
  Run one = make_run(DType::F64, true), acc = make_run(DType::F64, true);
  backward(one, 0, kAll);
  backward(acc, 0, kMicro);
  CHECK(max_abs_diff(small_nets::grads(*one.net), small_nets::grads(*acc.net)) > 1e-6);
}

// FP16 with the loss scaler: each micro-batch's gradient G_j is rounded to FP16 and added into
// the running FP16 sum, which rounds again; the large batch rounds its FP32 sum once. With
// u = 2^-11: |accumulated - large| <= u sum_j |G_j| + u sum_j |partial sums| + u |G|
// <= (2K + 1) u sum_j |G_j| (each partial sum is at most sum_j |G_j|), plus the FP32
// accumulation's own reordering (m <= 2048 terms: 2048 * 2^-24 of the largest gradient).
TEST_CASE("FP16 accumulation stays within the rounding of K partial gradients", "[accumulate]") {
  Run one = make_run(DType::F16, false), acc = make_run(DType::F16, false), parts = make_run(DType::F16, false);
  backward(one, 0, kAll);
  backward(acc, 0, kMicro);
  // sum_j |G_j|: each micro-batch's gradient on its own.
  std::vector<double> abs_sum;
  const small_nets::Batch b = small_nets::batch(0, kAll, DType::F32);
  for (int64_t j = 0; j < kSteps; ++j) {
    parts.opt->zero_grad();
    models::forward_backward(*parts.net, *parts.scaler, b.x.slice0(j * kMicro, (j + 1) * kMicro),
                             b.y.slice0(j * kMicro, (j + 1) * kMicro), DType::F16, 0.0,
                             Tensor::full({1}, double(kMicro) / kAll, DType::F32));
    const auto g = small_nets::grads(*parts.net);
    if (abs_sum.empty()) abs_sum.assign(g.size(), 0.0);
    for (size_t i = 0; i < g.size(); ++i) abs_sum[i] += std::fabs(g[i]);
  }
  const auto g1 = small_nets::grads(*one.net), gk = small_nets::grads(*acc.net);
  double largest = 0;
  for (double v : g1) largest = std::max(largest, std::fabs(v));
  const double u = std::ldexp(1.0, -11), floor = 2048 * std::ldexp(1.0, -24) * largest;
  double worst = 0;
  for (size_t i = 0; i < g1.size(); ++i)
    worst = std::max(worst, std::fabs(gk[i] - g1[i]) / ((2 * kSteps + 1) * u * abs_sum[i] + floor));
  INFO("largest share of the bound used: " << worst);
  CHECK(worst <= 1.0);
  CHECK(largest > 0);
}

TEST_CASE("an overflow in any micro-batch skips the whole step and halves the scale once", "[accumulate]") {
  for (int poisoned : {0, 2, 3}) {
    INFO("overflow in micro-batch " << poisoned);
    Run acc = make_run(DType::F16, false);
    backward(acc, 0, kMicro);
    models::optimizer_step(*acc.opt, *acc.scaler, 0.0);
    const auto before = small_nets::masters(*acc.net);
    const double scale = acc.scaler->current_scale();
    backward(acc, 1, kMicro, poisoned, 1e30);
    models::optimizer_step(*acc.opt, *acc.scaler, 0.0);
    CHECK(acc.scaler->skipped_steps() == 1);
    CHECK(acc.scaler->current_scale() == scale / 2);
    CHECK(small_nets::masters(*acc.net) == before);
    CHECK(acc.opt->steps() == 1);
    // The next clean step applies.
    backward(acc, 2, kMicro);
    models::optimizer_step(*acc.opt, *acc.scaler, 0.0);
    CHECK(acc.opt->steps() == 2);
    CHECK(small_nets::masters(*acc.net) != before);
  }
}
