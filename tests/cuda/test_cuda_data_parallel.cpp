// [cuda] the GPU side of data-parallel training: the sync-BN kernels against their CPU twins,
// and, with NCCL, a one-rank communicator driving the bucketed gradient all-reduce on its own
// stream (the calls, the events that order it) to the same weights as a plain step. The NCCL
// case is tagged [nccl]: its start-up can stall in a VM, so gpu_check.sh runs it apart, after
// the other [cuda] cases ("~[nccl]") and under its own short cap.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/distributed.h"
#include "engine/nn.h"
#include "engine/random.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "tests/cuda/cuda_test_util.h"

using engine::DType;
using engine::Tensor;
namespace kg = kernels::cuda;
namespace kc = kernels::cpu;
using namespace cuda_test;

namespace {
const engine::Device kGpu = engine::Device::cuda(0);
}

// Each kernel from the same inputs as its CPU twin. Sums over rows = 3000 values in FP32: the
// two backends add in different orders, so they agree within 2 * rows * 2^-24 of the sum of
// absolute terms (the recursive-summation bound for each order).
TEMPLATE_TEST_CASE("sync-BN kernels equal their CPU twins", "[cuda]", float, kernels::half) {
  using T = TestType;
  using P = float;
  const int64_t rows = 3000, c = 40;
  const P total = 2 * rows;  // as if another rank held as many rows
  const std::vector<T> x = random_vec<T>(static_cast<size_t>(rows * c), 3, -2.0, 3.0);
  const std::vector<T> gy = random_vec<T>(static_cast<size_t>(rows * c), 4);
  const std::vector<P> gamma = random_vec<P>(c, 5, 0.5, 1.5), beta = random_vec<P>(c, 6);
  DeviceBuffer<T> dx(x), dgy(gy), dy(static_cast<size_t>(rows * c)), dgx(static_cast<size_t>(rows * c));
  DeviceBuffer<P> dgamma(gamma), dbeta(beta), dsum(c), dsq(c), dmean(c), dinv(c), dsums(2 * c);
  const double sum_bound = 2.0 * rows * std::ldexp(1.0, -24);

  std::vector<P> sum(c), sq(c), mean(c), inv(c), sums(2 * c), rm(c, 0.f), rv(c, 1.f);
  // The other rank's share: pretend its sums equal ours (doubling = summing two equal halves).
  kc::batch_norm_sums<T, P>(rows, c, x.data(), nullptr, total, sum.data());
  for (auto& v : sum) v *= 2;
  kg::batch_norm_sums<T, P>(rows, c, dx.get(), nullptr, total, dsum.get(), stream());
  std::vector<P> got = dsum.download();
  for (auto& v : got) v *= 2;
  std::vector<double> abs_sum(c, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) abs_sum[ch] += 2 * std::fabs(to_d(x[r * c + ch]));
  for (int64_t ch = 0; ch < c; ++ch) CHECK(std::fabs(got[ch] - sum[ch]) <= sum_bound * abs_sum[ch]);
  dsum.upload(sum);  // both continue from the same global sums

  kc::batch_norm_sums<T, P>(rows, c, x.data(), sum.data(), total, sq.data());
  for (auto& v : sq) v *= 2;
  kg::batch_norm_sums<T, P>(rows, c, dx.get(), dsum.get(), total, dsq.get(), stream());
  got = dsq.download();
  for (int64_t ch = 0; ch < c; ++ch) CHECK(std::fabs(2 * got[ch] - sq[ch]) <= sum_bound * sq[ch]);
  dsq.upload(sq);

  std::vector<P> rm_gpu = rm, rv_gpu = rv;
  DeviceBuffer<P> drm(rm_gpu), drv(rv_gpu);
  std::vector<T> y(static_cast<size_t>(rows * c));
  kc::batch_norm_forward_from_sums<T, P>(rows, c, 2 * rows, x.data(), sum.data(), sq.data(), gamma.data(), beta.data(),
                                         1e-5f, 0.1f, rm.data(), rv.data(), mean.data(), inv.data(), y.data());
  kg::batch_norm_forward_from_sums<T, P>(rows, c, 2 * rows, dx.get(), dsum.get(), dsq.get(), dgamma.get(), dbeta.get(),
                                         1e-5f, 0.1f, drm.get(), drv.get(), dmean.get(), dinv.get(), dy.get(),
                                         stream());
  // The per-channel formulas are the same expressions on both (kernels/norm_math.h): equal up
  // to the GPU's division and sqrt rounding (a few units of 2^-24).
  expect_close(dmean.download(), to_d(mean), 4 * std::ldexp(1.0, -24), 0.0, "mean");
  expect_close(dinv.download(), to_d(inv), 4 * std::ldexp(1.0, -24), 0.0, "invstd");
  expect_close(drm.download(), to_d(rm), 4 * std::ldexp(1.0, -24), 1e-30, "running mean");
  expect_close(drv.download(), to_d(rv), 4 * std::ldexp(1.0, -24), 0.0, "running var");
  // y: one rounding to T of the same FP32 expression, after a, b each a few ulp apart.
  expect_close(dy.download(), to_d(y), 2 * unit_roundoff<T>() + 16 * std::ldexp(1.0, -24), 1e-6, "y");

  dmean.upload(mean);
  dinv.upload(inv);
  kc::batch_norm_backward_sums<T, P>(rows, c, x.data(), gy.data(), mean.data(), inv.data(), sums.data());
  kg::batch_norm_backward_sums<T, P>(rows, c, dx.get(), dgy.get(), dmean.get(), dinv.get(), dsums.get(), stream());
  got = dsums.download();
  for (int64_t ch = 0; ch < 2 * c; ++ch) {
    double abs_terms = 0;
    for (int64_t r = 0; r < rows; ++r) abs_terms += std::fabs(to_d(gy[r * c + ch % c])) * (ch < c ? 1.0 : 4.0);
    CHECK(std::fabs(got[ch] - sums[ch]) <= sum_bound * abs_terms);
  }
  dsums.upload(sums);
  std::vector<T> gx(static_cast<size_t>(rows * c));
  kc::batch_norm_backward_input<T, P>(rows, c, total, x.data(), gy.data(), gamma.data(), mean.data(), inv.data(),
                                      sums.data(), gx.data());
  kg::batch_norm_backward_input<T, P>(rows, c, total, dx.get(), dgy.get(), dgamma.get(), dmean.get(), dinv.get(),
                                      dsums.get(), dgx.get(), stream());
  expect_close(dgx.download(), to_d(gx), 2 * unit_roundoff<T>() + 16 * std::ldexp(1.0, -24), 1e-6, "gx");
}

#ifdef ENGINE_WITH_NCCL
namespace {

// No conv bias before the batch-norm: its true gradient is zero, so it would only carry rounding
// noise, which Adam turns into full-size steps of either sign.
std::shared_ptr<engine::Sequential> small_net() {
  engine::manual_seed(21);
  auto net = std::make_shared<engine::Sequential>();
  net->add(std::make_shared<engine::Conv2d>(3, 16, 3, 1, 1, false)).add(std::make_shared<engine::BatchNorm2d>(16));
  net->add(std::make_shared<engine::ReLU>()).add(std::make_shared<engine::MaxPool2d>(2));
  net->add(std::make_shared<engine::Flatten>()).add(std::make_shared<engine::Linear>(16 * 8 * 8, 10));
  return net;
}

std::vector<double> train_three_steps(bool with_reducer, bool sync_bn) {
  auto net = small_net();
  net->set_compute_dtype(DType::F16);
  net->to(kGpu);
  engine::SGD opt(net->parameters(), 0.05, 0.9);
  engine::LossScaler scaler;
  // Small caps: several buckets, the first started while backward still runs.
  std::unique_ptr<engine::dist::GradReducer> reducer;
  if (with_reducer) reducer = std::make_unique<engine::dist::GradReducer>(net->parameters(), 4096, 64);
  engine::dist::set_sync_batch_norm(sync_bn);
  for (int s = 0; s < 3; ++s) {
    engine::manual_seed(100 + s);
    Tensor x = engine::uniform({32, 16, 16, 3}, -1, 1, DType::F16).to(kGpu);
    std::vector<int32_t> labels(32);
    for (int i = 0; i < 32; ++i) labels[i] = (i * 3 + s) % 10;
    Tensor y = Tensor::from_ints(labels, {32}).to(kGpu);
    opt.zero_grad();
    engine::Tape tape;
    if (reducer) reducer->attach(tape);
    {
      engine::TapeScope rec(tape);
      engine::AutocastScope ac(DType::F16);
      tape.backward(scaler.scale(engine::cross_entropy((*net)(x), y)));
    }
    if (reducer) {
      reducer->finish();
      CHECK(reducer->started_during_backward() >= 1);
    }
    scaler.step(opt);
    scaler.update();
  }
  engine::dist::set_sync_batch_norm(false);
  std::vector<double> w;
  for (const auto& p : net->parameters()) {
    const auto v = p->master.to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

}  // namespace

TEST_CASE("NCCL with one rank: bucketed all-reduce on its own stream gives the plain step's weights", "[cuda][nccl]") {
  const std::vector<double> plain = train_three_steps(false, false);
  if (!engine::dist::nccl_active()) engine::dist::init_nccl(kGpu);  // a communicator of one rank
  REQUIRE(engine::dist::nccl_active());
  // A sum over one rank is the identity, so the weights must be the same bits; a missing event
  // would let the optimizer race the all-reduce on the other stream (compute-sanitizer's
  // racecheck and the memcheck section see such faults).
  const std::vector<double> reduced = train_three_steps(true, false);
  CHECK(reduced == plain);
  // Sync-BN through NCCL on one rank: the same statistics by the two-pass kernels instead of the
  // fused Welford ones, a few FP32 ulps apart, which move some FP16 activations by one ulp
  // (2^-11 relative); the gradients follow within about that, and three SGD steps (lr 0.05,
  // momentum 0.9: at most 0.05 * 2.71 times a gradient difference) keep the weights within
  // 1e-3 for gradients of order 1 with a margin of several times.
  const std::vector<double> synced = train_three_steps(true, true);
  double worst = 0;
  for (size_t i = 0; i < plain.size(); ++i) worst = std::max(worst, std::fabs(synced[i] - plain[i]));
  INFO("sync-BN vs plain, largest weight difference " << worst);
  CHECK(worst <= 1e-3);
}
#endif
