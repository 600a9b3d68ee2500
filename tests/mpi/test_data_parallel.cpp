// Data-parallel training under mpirun (2 ranks; CTest runs `mpirun -np 2 engine_mpi_tests`):
// DDP's promise checked on every rank against a one-process step at the global batch that the
// same rank computes itself, so each rank holds both answers. Also: the bucketed reduction
// overlapping backward, an overflow on one rank skipping the step everywhere, sync-BN.
#define CATCH_CONFIG_RUNNER
#include "catch2/catch.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/amp.h"
#include "engine/distributed.h"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "kernels/philox.h"
#include "models/train_step.h"
#include "tests/small_nets.h"

namespace {

using engine::DType;
using engine::Tensor;
namespace dist = engine::dist;

constexpr int64_t kBatch = 128;  // global batch: 64 per rank with 2 ranks

using small_nets::masters;
using small_nets::grads;

struct Run {
  std::shared_ptr<engine::Sequential> net;
  std::unique_ptr<engine::Optimizer> opt;
  std::unique_ptr<engine::LossScaler> scaler;
  std::unique_ptr<dist::GradReducer> reducer;
  DType compute;
};

Run make_run(const char* optimizer, DType compute, bool batch_norm, bool dropout, bool data_parallel,
             size_t bucket_bytes = 25u << 20, size_t first_bucket_bytes = 1u << 20) {
  Run r;
  r.compute = compute;
  r.net = small_nets::conv_net(batch_norm, dropout);
  if (compute == DType::F64) small_nets::to_f64(*r.net);
  else r.net->set_compute_dtype(compute);
  if (std::string(optimizer) == "sgd")
    r.opt = std::make_unique<engine::SGD>(r.net->parameters(), 0.1, 0.9);
  else
    r.opt = std::make_unique<engine::Adam>(r.net->parameters(), 1e-2);
  engine::LossScalerConfig sc;
  sc.enabled = compute == DType::F16;
  r.scaler = std::make_unique<engine::LossScaler>(sc);
  if (data_parallel) {
    dist::broadcast_module(*r.net);
    r.reducer = std::make_unique<dist::GradReducer>(r.net->parameters(), bucket_bytes, first_bucket_bytes);
  }
  return r;
}

// Forward and backward of one step, leaving the gradients (scaled by the loss scale) in place.
// The reference (no reducer) takes the whole global batch; a data-parallel run takes this
// rank's shard and seeds backward with its share; with reduce = false it keeps its own partial
// gradients (nothing is sent). `poison` multiplies the seed: a huge one overflows FP16.
void backward(Run& r, int s, bool sync_bn = false, double poison = 1.0, bool reduce = true) {
  const small_nets::Batch b = small_nets::batch(s, kBatch, r.compute == DType::F64 ? DType::F64 : DType::F32);
  const int64_t ranks = r.reducer ? dist::world().size : 1, rank = r.reducer ? dist::world().rank : 0;
  const int64_t lo = kBatch * rank / ranks, hi = kBatch * (rank + 1) / ranks;
  Tensor x = b.x.slice0(lo, hi), y = b.y.slice0(lo, hi);
  if (r.compute == DType::F16) x = engine::cast(x, DType::F16);
  engine::set_batch_offset(lo);
  dist::set_sync_batch_norm(sync_bn && r.reducer);
  r.opt->zero_grad();
  const double share = static_cast<double>(hi - lo) / kBatch * poison;
  models::forward_backward(*r.net, *r.scaler, x, y, r.compute, 0.0,
                           Tensor::full({1}, share, r.compute == DType::F64 ? DType::F64 : DType::F32),
                           reduce ? r.reducer.get() : nullptr);
  dist::set_sync_batch_norm(false);
  engine::set_batch_offset(0);
}

void step(Run& r, int s, bool sync_bn = false, double poison = 1.0) {
  backward(r, s, sync_bn, poison);
  models::optimizer_step(*r.opt, *r.scaler, 0.0);
}


double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

double max_abs(const std::vector<double>& a) {
  double d = 0;
  for (double v : a) d = std::max(d, std::fabs(v));
  return d;
}

// Rank 0's value on every rank (to compare ranks with each other).
std::vector<double> from_rank0(std::vector<double> v) {
  dist::broadcast_bytes(v.data(), v.size() * sizeof(double), 0, "test broadcast");
  return v;
}

}  // namespace

TEST_CASE("the job has two ranks", "[mpi]") {
  REQUIRE(dist::mpi_built());
  REQUIRE(dist::world().size == 2);
}

// FP64: the two runs differ only in where the batch sums are split (one partial sum per rank,
// then added). A gradient element sums m <= 128 * 64 = 8192 products per step; two orders of
// it differ by at most 2 (m - 1) u sum|terms| with u = 2^-53, about 1.8e-12 times sum|terms|
// (sum|terms| is below 10 here). Four steps of SGD (lr 0.1, momentum 0.9: at most 0.1 * (1 +
// 0.9 + 0.81 + 0.73) = 0.34 times a gradient error reaches a weight) and Adam (lr 1e-2 over
// sqrt(v): an error of e in g moves the update by about 1e-2 * e / |g|, |g| >= 1e-4 for all but
// exactly-zero gradients) stay below 1e-9 with margin. A wrong share, shard, dropout mask or a
// missing sum moves weights by more than 1e-4: the last check shows this bound can fail.
TEST_CASE("data-parallel FP64 steps equal one process at the global batch", "[mpi]") {
  for (const char* optimizer : {"sgd", "adam"})
    for (bool dropout : {false, true}) {
      INFO(optimizer << (dropout ? " with dropout" : ""));
      Run ref = make_run(optimizer, DType::F64, false, dropout, false);
      Run ddp = make_run(optimizer, DType::F64, false, dropout, true);
      const std::vector<double> w0 = masters(*ref.net);
      for (int s = 0; s < 4; ++s) {
        step(ref, s);
        step(ddp, s);
      }
      const std::vector<double> wr = masters(*ref.net), wd = masters(*ddp.net);
      const double diff = max_abs_diff(wr, wd);
      INFO("max |ddp - reference| = " << diff << ", max |reference - initial| = " << max_abs_diff(wr, w0));
      CHECK(diff <= 1e-9);
      CHECK(max_abs_diff(wr, w0) > 1e-3);  // the steps did move the weights
      CHECK(max_abs_diff(from_rank0(wd), wd) == 0.0);  // and every rank holds the same bits
    }
  // The check can fail: a run that forgets the other rank's half (no reducer, own shard only).
  Run ref = make_run("sgd", DType::F64, false, false, false);
  Run lone = make_run("sgd", DType::F64, false, false, true);
  lone.reducer.reset();
  for (int s = 0; s < 2; ++s) step(ref, s);
  for (int s = 0; s < 2; ++s) {
    const small_nets::Batch b = small_nets::batch(s, kBatch, DType::F64);
    const int64_t half = kBatch / 2, lo = dist::world().rank * half;
    lone.opt->zero_grad();
    engine::Tape tape;
    engine::TapeScope rec(tape);
    tape.backward(engine::cross_entropy((*lone.net)(b.x.slice0(lo, lo + half)), b.y.slice0(lo, lo + half)));
    lone.opt->step();
  }
  CHECK(max_abs_diff(masters(*ref.net), masters(*lone.net)) > 1e-4);
}

// FP16 and BF16 gradients, reduced in their own dtype. Forward and the per-sample backward are
// the same bits in both runs (shares and the loss scale are powers of two), so only the weight
// gradients' batch sums differ: one process rounds S = S0 + S1 once; here each rank rounds its
// partial S_r, and the sum of those is rounded again. With u the dtype's unit roundoff (2^-11,
// 2^-8) that is |ddp - one process| <= u |g0| + u |g1| + 2 u |g0 + g1| (1 + u) <= 3.01 u (|g0| + |g1|),
// plus the FP32 accumulation's reordering of the products (m <= 8192 terms, 2^-24 each, at most
// 8192 * 2^-24 of the largest gradient).
TEST_CASE("16-bit reduced gradients equal one process's within the rounding of the partial sums", "[mpi]") {
  for (DType compute : {DType::F16, DType::BF16}) {
    INFO(engine::dtype_name(compute));
    // No dropout here: the two backward passes below would draw two different masks.
    Run ref = make_run("sgd", compute, false, false, false);
    Run ddp = make_run("sgd", compute, false, false, true);
    backward(ref, 0);
    backward(ddp, 0, false, 1.0, false);  // this rank's partial gradients, kept here
    std::vector<double> abs_partials = grads(*ddp.net);
    for (double& v : abs_partials) v = std::fabs(v);
    dist::all_reduce_sum(abs_partials.data(), abs_partials.size(), "test |g0| + |g1|");
    backward(ddp, 0);  // now summed across the ranks
    const std::vector<double> gr = grads(*ref.net), gd = grads(*ddp.net);
    const double u = compute == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double floor = 8192 * std::ldexp(1.0, -24) * max_abs(gr);
    size_t worst = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < gr.size(); ++i) {
      const double ratio = std::fabs(gd[i] - gr[i]) / (3.01 * u * abs_partials[i] + floor);
      if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
    INFO("worst element " << worst << ": ddp " << gd[worst] << ", one process " << gr[worst] << ", |g0|+|g1| "
                          << abs_partials[worst] << ", used " << worst_ratio << " of the bound");
    CHECK(worst_ratio <= 1.0);
    CHECK(max_abs(gr) > 0);
  }
}

// FP32 and FP16 with the loss scaler over several steps: relative to how far the weights moved,
// the runs must agree to 4 u per step over 3 steps (per step the gradients differ by about 3 u
// relative, as above, and a relative error of the update adds up at most linearly); a wrong
// share (a factor 2) is off by order 1. FP16 Adam is left to the gradient check above: Adam
// divides each element by its own magnitude, so an element whose two halves nearly cancel turns
// its rounding into an update difference of order lr, which no rounding-sized bound covers.
TEST_CASE("data-parallel FP32 and FP16 steps track one process within rounding", "[mpi]") {
  for (DType compute : {DType::F32, DType::F16})
    for (const char* optimizer : {"sgd", "adam"}) {
      if (compute == DType::F16 && std::string(optimizer) == "adam") continue;
      INFO(engine::dtype_name(compute) << " " << optimizer);
      Run ref = make_run(optimizer, compute, false, true, false);
      Run ddp = make_run(optimizer, compute, false, true, true);
      const std::vector<double> w0 = masters(*ref.net);
      for (int s = 0; s < 3; ++s) {
        step(ref, s);
        step(ddp, s);
      }
      const std::vector<double> wr = masters(*ref.net), wd = masters(*ddp.net);
      double num = 0, den = 0;
      for (size_t i = 0; i < wr.size(); ++i) {
        num += (wd[i] - wr[i]) * (wd[i] - wr[i]);
        den += (wr[i] - w0[i]) * (wr[i] - w0[i]);
      }
      const double u = compute == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
      const double rel = std::sqrt(num / den);
      INFO("relative L2 distance of the updates " << rel << ", bound " << 3 * 4 * u);
      CHECK(rel <= 3 * 4 * u);
      CHECK(max_abs_diff(from_rank0(wd), wd) == 0.0);
      CHECK(ddp.scaler->skipped_steps() == ref.scaler->skipped_steps());
    }
}

TEST_CASE("buckets start while backward is still running, in the same order on every rank", "[mpi]") {
  // Caps of 1 KiB: conv weight (864 B in FP32), conv bias, linear weight (5 KiB) and bias fall
  // into several buckets; the linear layer's gradients are final long before the conv's.
  Run ddp = make_run("sgd", DType::F32, false, false, true, 1024, 64);
  const auto buckets = ddp.reducer->buckets();
  REQUIRE(buckets.size() >= 3);
  step(ddp, 0);
  CHECK(ddp.reducer->started_during_backward() >= 1);
  Run ref = make_run("sgd", DType::F32, false, false, false);
  step(ref, 0);
  const std::vector<double> wr = masters(*ref.net), wd = masters(*ddp.net);
  CHECK(max_abs_diff(wr, wd) <= 1e-5 * std::max(1.0, max_abs(wr)));
  CHECK(ddp.reducer->bytes_per_step() == static_cast<int64_t>(sizeof(float)) * ddp.net->num_parameters());
}

TEST_CASE("an overflow on one rank only skips the step and halves the scale on every rank", "[mpi]") {
  Run ddp = make_run("adam", DType::F16, false, false, true);
  step(ddp, 0);
  const double scale_before = ddp.scaler->current_scale();
  const std::vector<double> before = masters(*ddp.net);
  // Rank 1 seeds its backward with 1e30 times its share: its FP16 gradients overflow to inf,
  // rank 0's stay finite. After the sum every rank holds the inf.
  step(ddp, 1, false, dist::world().rank == 1 ? 1e30 : 1.0);
  CHECK(ddp.scaler->skipped_steps() == 1);
  CHECK(ddp.scaler->current_scale() == scale_before / 2);
  CHECK(masters(*ddp.net) == before);  // nothing moved, on either rank
  for (int s = 2; s < 5; ++s) step(ddp, s);
  const std::vector<double> w = masters(*ddp.net);
  CHECK(w != before);
  CHECK(from_rank0(w) == w);  // the ranks agree bit for bit afterwards
  std::vector<double> scale{ddp.scaler->current_scale(), double(ddp.scaler->skipped_steps())};
  CHECK(from_rank0(scale) == scale);
}

// Sync-BN: the statistics of both ranks' 16 images are those of the 32 together, so the run
// equals one process with plain batch-norm at the global batch (FP64; the bound as above, the
// statistics adding two more sums of the same kind). Without --sync-bn each rank normalises by
// its own half's statistics and the runs differ by far more.
TEST_CASE("a stop request on one rank is agreed by every rank at the same vote, one step later", "[mpi]") {
  const int rank = dist::world().rank;
  dist::StopVote vote;
  // Rank 1 asks at vote 3 (its signal number, 15); rank 0 never does. Every rank must see 0
  // through vote 3 and 15 at vote 4: the vote started at step 3 is read at step 4.
  std::vector<int> seen;
  for (int call = 1; call <= 6; ++call) {
    const int result = vote.vote(rank == 1 && call >= 3 ? 15 : 0);
    seen.push_back(result);
    if (result) break;
  }
  CHECK(seen == std::vector<int>{0, 0, 0, 15});
  // The blocking form: rank 0 asks (SIGINT, 2), rank 1 does not; both get 2 at once. A
  // pending vote is folded in first (here: none pending after the stop above).
  CHECK(vote.vote_now(rank == 0 ? 2 : 0) == 2);
  CHECK(vote.vote(0) == 0);  // a fresh vote starts; a later vote_now collects it
  CHECK(vote.vote_now(0) == 0);
}

TEST_CASE("sync-BN equals one process's batch-norm at the global batch; per-rank BN does not", "[mpi]") {
  Run ref = make_run("sgd", DType::F64, true, false, false);
  Run sync = make_run("sgd", DType::F64, true, false, true);
  Run local = make_run("sgd", DType::F64, true, false, true);
  for (int s = 0; s < 3; ++s) {
    step(ref, s);
    step(sync, s, true);
    step(local, s, false);
  }
  const std::vector<double> wr = masters(*ref.net), ws = masters(*sync.net), wl = masters(*local.net);
  INFO("sync-BN " << max_abs_diff(wr, ws) << ", per-rank BN " << max_abs_diff(wr, wl));
  CHECK(max_abs_diff(wr, ws) <= 1e-9);
  CHECK(max_abs_diff(wr, wl) > 1e-4);
  // The running statistics too: sync-BN's are the global batch's, the same on both ranks.
  auto stats = [](engine::Module& m) {
    for (auto& [path, mod] : m.named_modules())
      if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(mod)) {
        std::vector<double> v = bn->running_mean.to_vector(), var = bn->running_var.to_vector();
        v.insert(v.end(), var.begin(), var.end());
        return v;
      }
    return std::vector<double>{};
  };
  CHECK(max_abs_diff(stats(*ref.net), stats(*sync.net)) <= 1e-12);
}

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  dist::set_timeout(60);
  const int failed = Catch::Session().run(argc, argv);
  // A failure on either rank fails the job.
  double worst = failed;
  dist::all_reduce_sum(&worst, 1, "test results");
  dist::finalize();
  return worst > 0 ? 1 : 0;
}
