// The engine pieces the airbench94 recipe needs, each a general feature: parameter groups,
// frozen parameters (and batch-norm without a learned scale), Dirac init, the weight average
// (lookahead) and its checkpoint, the symmetric eigen-solver and the whitening layer's
// property, test-time augmentation, max-pool 3, the triangle schedule, and the model itself.
// (PyTorch float64 fixtures for the summed loss, the eigen-decomposition and the whitening
// filters: tests/test_golden.cpp; the batch builder: tests/test_augment.cpp.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/checkpoint.h"
#include "engine/linalg.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "models/models.h"
#include "models/train_step.h"
#include "models/trainer_args.h"
#include "models/tta.h"
#include "models/whitening.h"

using engine::DType;
using engine::ParamPtr;
using engine::Tensor;
using Vec = std::vector<double>;

namespace {

ParamPtr param_of(const Vec& v) {
  auto p = std::make_shared<engine::Parameter>();
  p->name = "p";
  p->master = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F32);
  p->master.set_requires_grad(true);
  p->value = p->master;
  return p;
}

void set_grad(const ParamPtr& p, const Vec& g) {
  p->value.set_grad(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}, DType::F32));
}

}  // namespace

TEST_CASE("parameter groups: each group's lr (x its scale) and weight decay, SGD and Adam", "[airbench][optim]") {
  const Vec w0 = {0.5, -1.25, 2.0}, g = {0.1, -0.3, 0.7};
  SECTION("SGD, plain L2 decay per group, Nesterov momentum") {
    ParamPtr a = param_of(w0), b = param_of(w0);
    engine::SGD opt({a, b}, 0.01, 0.85, 0.5, true);
    opt.set_param_group({b}, 64.0, 0.02);
    for (int step = 0; step < 2; ++step) {
      set_grad(a, g), set_grad(b, g);
      REQUIRE(opt.step() == engine::StepResult::Applied);
    }
    // PyTorch's SGD by hand for two steps: d = g + wd w; buf = d (first), then 0.85 buf + d;
    // w -= lr (d + 0.85 buf).
    auto expect = [&](const ParamPtr& p, double lr, double wd) {
      const Vec got = p->master.to_vector();
      for (size_t i = 0; i < w0.size(); ++i) {
        double w = w0[i], buf = 0, largest = std::fabs(w);
        for (int step = 0; step < 2; ++step) {
          const double d = g[i] + wd * w;
          buf = step == 0 ? d : 0.85 * buf + d;
          const double update = lr * (d + 0.85 * buf);
          largest = std::max({largest, std::fabs(update), std::fabs(buf)});
          w -= update;
        }
        // FP32 arithmetic: each of the ~10 roundings errs by at most half an ulp of the largest
        // value it touches, so the error is bounded by ~5 ulps of that value, not of the
        // result: w = 2 - 0.88 - 1.20 = -0.074 cancels, and 1e-6 of it is under one ulp of 2.
        // (A wrong decay, 0.02 against 0, would move w by lr wd w = 0.026.)
        const double bound = 8 * std::numeric_limits<float>::epsilon() * largest;
        CHECK(std::fabs(got[i] - w) <= bound);
      }
    };
    expect(a, 0.01, 0.5);
    expect(b, 0.01 * 64.0, 0.02);
  }
  SECTION("Adam: the group's lr scale and its own (L2) decay") {
    ParamPtr a = param_of(w0), b = param_of(w0);
    engine::Adam opt({a, b}, 1e-3, 0.9, 0.999, 1e-8, 0.0);
    opt.set_param_group({b}, 2.0, 0.1);
    set_grad(a, g), set_grad(b, g);
    REQUIRE(opt.step() == engine::StepResult::Applied);
    // One step: m = 0.1 g', v = 0.001 g'^2, w -= lr (m / 0.1) / (sqrt(v / 0.001) + eps) with
    // g' = g + wd w: lr g' / (|g'| + eps).
    for (size_t i = 0; i < w0.size(); ++i) {
      const double ga = g[i], gb = g[i] + 0.1 * w0[i];
      CHECK(a->master.to_vector()[i] == Approx(w0[i] - 1e-3 * ga / (std::fabs(ga) + 1e-8)).epsilon(1e-6));
      CHECK(b->master.to_vector()[i] == Approx(w0[i] - 2e-3 * gb / (std::fabs(gb) + 1e-8)).epsilon(1e-6));
    }
  }
  SECTION("a group naming a stranger, or set after the first step, is refused") {
    ParamPtr a = param_of(w0), stranger = param_of(w0);
    engine::SGD opt({a}, 0.1);
    CHECK_THROWS_WITH(opt.set_param_group({stranger}, 2.0, 0.0), Catch::Contains("does not hold"));
    CHECK_THROWS_WITH(opt.set_param_group({a}, 0.0, 0.0), Catch::Contains("lr scale must be positive"));
    set_grad(a, g);
    opt.step();
    CHECK_THROWS_WITH(opt.set_param_group({a}, 2.0, 0.0), Catch::Contains("before the first step"));
  }
}

TEST_CASE("frozen parameters: no gradient, no step, no decay; thawed they train again", "[airbench][optim]") {
  engine::manual_seed(3);
  auto conv = std::make_shared<engine::Conv2d>(3, 4, 3, 1, 1, true);
  conv->set_compute_dtype(DType::F16);  // a compute copy too: freezing must reach it
  conv->weight->set_trainable(false);
  const Vec w_before = conv->weight->master.to_vector();
  engine::SGD opt(conv->parameters(), 0.1, 0.9, 0.5);  // decay and momentum would move it
  const Tensor x = engine::uniform({2, 5, 5, 3}, -1, 1, DType::F16);
  auto step = [&] {
    opt.zero_grad();
    engine::Tape tape;
    engine::TapeScope scope(tape);
    engine::AutocastScope autocast(DType::F16);
    tape.backward(engine::sum(engine::cast((*conv)(x), DType::F32)));
    opt.step();
  };
  step();
  step();
  CHECK_FALSE(conv->weight->grad().defined());
  CHECK(conv->weight->master.to_vector() == w_before);  // bit for bit
  CHECK(conv->bias->grad().defined());                   // the bias trains meanwhile
  // Thawed, it gets gradients and moves; frozen again it keeps its (zeroed) gradient, as a
  // data-parallel bucket view must, and still no step, decay or momentum moves it.
  conv->weight->set_trainable(true);
  step();
  CHECK(conv->weight->grad().defined());
  CHECK(conv->weight->master.to_vector() != w_before);
  conv->weight->set_trainable(false);
  const Vec w_frozen = conv->weight->master.to_vector();
  step();
  step();
  CHECK(conv->weight->master.to_vector() == w_frozen);
}

TEST_CASE("batch-norm without a learned scale keeps gamma at 1 while the shift learns", "[airbench][optim]") {
  // relu(bn(x)) summed: its gradient reaches gamma (sum of x_hat where the output is positive),
  // which the control, a batch-norm with a learned scale, shows by moving it.
  auto train = [](bool learn_scale) {
    auto bn = std::make_shared<engine::BatchNorm2d>(3, 0.4, 1e-12, learn_scale);
    engine::SGD opt(bn->parameters(), 0.5, 0.9, 0.1);
    engine::manual_seed(4);
    const Tensor x = engine::uniform({4, 3, 3, 3}, -2, 2, DType::F32);
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      engine::Tape tape;
      engine::TapeScope scope(tape);
      tape.backward(engine::sum(engine::relu((*bn)(x))));
      opt.step();
    }
    return bn;
  };
  const auto fixed = train(false), learned = train(true);
  CHECK(fixed->gamma->master.to_vector() == Vec{1, 1, 1});
  CHECK_FALSE(fixed->gamma->trainable);
  CHECK(learned->gamma->master.to_vector() != Vec{1, 1, 1});
  CHECK(fixed->beta->master.to_vector() != Vec{0, 0, 0});
}

TEST_CASE("Dirac init: the first c_in filters pass their channel through, the rest keep their init", "[airbench]") {
  engine::manual_seed(5);
  engine::Conv2d conv(3, 5, 3, 1, 1, false);
  const Vec before = conv.weight->master.to_vector();
  engine::dirac_init(conv);
  const Tensor x = engine::uniform({2, 4, 6, 3}, -1, 1, DType::F32);
  const Vec y = conv(x).to_vector(), xv = x.to_vector();
  for (int64_t p = 0; p < 2 * 4 * 6; ++p)
    for (int c = 0; c < 3; ++c) REQUIRE(y[p * 5 + c] == xv[p * 3 + c]);  // exactly: one product by 1
  const Vec after = conv.weight->master.to_vector();
  const int64_t per = 3 * 3 * 3;
  for (int64_t i = 3 * per; i < 5 * per; ++i) REQUIRE(after[i] == before[i]);  // filters 3, 4 untouched
  engine::Conv2d grouped(4, 4, 3, 1, 1, false, 2);
  CHECK_THROWS_WITH(engine::dirac_init(grouped), Catch::Contains("ungrouped convolution with an odd kernel"));
}

TEST_CASE("weight average: avg moves (1 - decay) toward the weights, which then take it", "[airbench]") {
  engine::manual_seed(6);
  auto net = std::make_shared<engine::Sequential>();
  auto lin = std::make_shared<engine::Linear>(3, 2);
  auto bn = std::make_shared<engine::BatchNorm2d>(2);
  net->add(lin).add(bn);
  net->set_compute_dtype(DType::BF16);
  const Vec w0 = lin->weight->master.to_vector(), m0 = bn->running_mean.to_vector();
  engine::WeightAverage avg(*net);
  // New weights and statistics, as training would leave them.
  const Vec w1 = {0.5, -0.25, 1.0, 2.0, -1.5, 0.75};
  lin->weight->master.copy_from(Tensor::from_vector(w1, {2, 3}, DType::F32));
  bn->running_mean.copy_from(Tensor::from_vector({3.0, -3.0}, {2}, DType::F32));
  avg.update(*net, 0.75);
  const Vec got = lin->weight->master.to_vector();
  // FP32 arithmetic (a fused multiply-add or not): a few ulps of the FP64 formula.
  for (size_t i = 0; i < w1.size(); ++i) CHECK(got[i] == Approx(0.75 * w0[i] + 0.25 * w1[i]).epsilon(1e-6));
  CHECK(bn->running_mean.to_vector()[0] == Approx(0.75 * m0[0] + 0.25 * 3.0).epsilon(1e-6).margin(1e-7));
  CHECK(bn->running_mean.to_vector()[1] == Approx(0.75 * m0[1] - 0.25 * 3.0).epsilon(1e-6).margin(1e-7));
  // The compute copy follows the master.
  const Vec copy = lin->weight->value.to_vector(), rounded = engine::cast(lin->weight->master, DType::BF16).to_vector();
  CHECK(copy == rounded);
  // decay 1 (the run's end): the model takes the average unchanged.
  const Vec a1 = lin->weight->master.to_vector();
  lin->weight->master.copy_from(Tensor::from_vector(Vec(6, 9.0), {2, 3}, DType::F32));
  avg.update(*net, 1.0);
  CHECK(lin->weight->master.to_vector() == a1);
  // The checkpoint carries the average: a fresh one loaded from it continues identically.
  engine::StateDict ck;
  avg.save_state(ck);
  engine::WeightAverage other(*net);
  lin->weight->master.copy_from(Tensor::from_vector(w1, {2, 3}, DType::F32));
  other.load_state(ck);
  engine::WeightAverage same(*net);
  same.load_state(ck);
  avg.update(*net, 0.5);
  const Vec via_avg = lin->weight->master.to_vector();
  lin->weight->master.copy_from(Tensor::from_vector(w1, {2, 3}, DType::F32));
  other.update(*net, 0.5);
  CHECK(lin->weight->master.to_vector() == via_avg);
  CHECK_THROWS_WITH(avg.update(*net, 1.5), Catch::Contains("outside [0, 1]"));
}

TEST_CASE("symmetric eigen: A V = V L, V orthonormal, eigenvalues ascending, on a spread and a degenerate matrix",
          "[airbench][linalg]") {
  for (int kind = 0; kind < 2; ++kind) {
    const int n = 12;
    Vec a(n * n, 0.0);
    engine::manual_seed(7);
    const Vec b = engine::uniform({n, n}, -1, 1, DType::F64).to_vector();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k) a[i * n + j] += b[i * n + k] * b[j * n + k] / n;
    if (kind == 1)  // repeated eigenvalues: 3 x identity plus a rank-2 part
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) a[i * n + j] = (i == j ? 3.0 : 0.0) + b[i] * b[j] + b[n + i] * b[n + j];
    INFO((kind == 0 ? "spread" : "degenerate"));
    const engine::SymmetricEigen e = engine::symmetric_eigen(a, n);
    for (int j = 0; j + 1 < n; ++j) CHECK(e.values[j] <= e.values[j + 1]);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double av = 0, vv = 0;
        for (int k = 0; k < n; ++k) {
          av += a[i * n + k] * e.vectors[k * n + j];
          vv += e.vectors[k * n + i] * e.vectors[k * n + j];
        }
        CHECK(std::fabs(av - e.values[j] * e.vectors[i * n + j]) <= 1e-13);
        CHECK(std::fabs(vv - (i == j ? 1.0 : 0.0)) <= 1e-13);
      }
  }
  CHECK_THROWS_WITH(engine::symmetric_eigen({1, 2, 3, 4}, 2), Catch::Contains("not symmetric"));
  CHECK_THROWS_WITH(engine::symmetric_eigen({1, NAN, NAN, 4}, 2), Catch::Contains("holds nan"));
}

TEST_CASE("whitening: the filters decorrelate the patches they came from", "[airbench][linalg]") {
  // f_i^T C f_j = delta_ij L_i / (L_i + eps) for the positive filters, C the patch covariance.
  engine::manual_seed(8);
  const Vec r = engine::uniform({16 * 8 * 8 * 3}, 0, 255, DType::F64).to_vector();
  std::vector<uint8_t> px(r.begin(), r.end());
  const kernels::AugmentConfig norm = models::input_normalisation("airbench94");
  const Vec cov = models::patch_covariance(px.data(), 16, 8, 8, 3, 2, norm);
  const double eps = 5e-4;
  const engine::SymmetricEigen e = engine::symmetric_eigen(cov, 12);
  const Vec filters = models::whitening_filters(e, eps);
  REQUIRE(filters.size() == 24 * 12);
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) {
      double s = 0;
      for (int p = 0; p < 12; ++p)
        for (int q = 0; q < 12; ++q) s += filters[i * 12 + p] * cov[p * 12 + q] * filters[j * 12 + q];
      CHECK(s == Approx(i == j ? e.values[i] / (e.values[i] + eps) : 0.0).margin(1e-10));
      CHECK(filters[(12 + i) * 12 + j] == -filters[i * 12 + j]);
    }
  // The draw of images: distinct, within range, fixed by the seed.
  const std::vector<int64_t> pick = models::whitening_sample(50000, 5000, 3);
  CHECK(pick == models::whitening_sample(50000, 5000, 3));
  CHECK(pick != models::whitening_sample(50000, 5000, 4));
  std::vector<int64_t> sorted = pick;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  CHECK(sorted.front() >= 0);
  CHECK(sorted.back() < 50000);
  // Not one class: our folders are sorted by class, 5,000 images each; a draw spans them all.
  std::vector<int> per_class(10, 0);
  for (int64_t i : pick) ++per_class[static_cast<size_t>(i / 5000)];
  for (int c : per_class) CHECK(c > 400);  // 500 expected, +-4.5 standard deviations (21.2)
}

TEST_CASE("test-time augmentation: the logits are the weighted mean of the six views' logits", "[airbench]") {
  engine::manual_seed(9);
  auto net = models::simplecnn();
  net->eval();
  engine::NoGradScope no_grad;
  const int64_t n = 3;
  const Vec r = engine::uniform({n * 32 * 32 * 3}, 0, 255, DType::F64).to_vector();
  Tensor images = Tensor::empty({n, 32, 32, 3}, DType::U8);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(r[i]);
  const Tensor labels = Tensor::from_ints({0, 1, 2}, {n}), idx = Tensor::from_ints({2, 0, 1}, {n});
  Tensor x = Tensor::empty({n, 32, 32, 3}, DType::F32), y = Tensor::empty({n}, DType::I32);
  const kernels::AugmentConfig norm = models::input_normalisation("simplecnn");
  const std::vector<models::TtaView> views = models::tta_views(norm);
  REQUIRE(views.size() == 6);
  double total = 0;
  for (const auto& v : views) total += v.weight;
  CHECK(total == 1.0);
  const Vec got = models::tta_logits(*net, views, images, labels, idx, x, y).to_vector();
  CHECK(y.to_vector() == Vec{2, 0, 1});  // the batch's labels
  // Each view by hand: mirror / shift the images on the host, normalise, run the net.
  auto view_logits = [&](int shift, bool mirror) {
    Tensor u = Tensor::empty({n, 32, 32, 3}, DType::U8);
    const uint8_t* src = images.data<uint8_t>();
    for (int64_t b = 0; b < n; ++b) {
      const int64_t img = std::vector<int64_t>{2, 0, 1}[static_cast<size_t>(b)];
      for (int yy = 0; yy < 32; ++yy)
        for (int xx = 0; xx < 32; ++xx) {
          // Reflect-pad by 1, crop at (shift, shift), then mirror (shift -1 means no padding).
          auto refl = [](int i) { return i < 0 ? -i : i > 31 ? 62 - i : i; };
          const int cx = mirror ? 31 - xx : xx;
          const int sy = shift < 0 ? yy : refl(yy + shift - 1), sx = shift < 0 ? cx : refl(cx + shift - 1);
          for (int c = 0; c < 3; ++c) u.data<uint8_t>()[((b * 32 + yy) * 32 + xx) * 3 + c] = src[((img * 32 + sy) * 32 + sx) * 3 + c];
        }
    }
    engine::make_batch(u, Tensor::from_ints({0, 0, 0}, {n}), Tensor::from_ints({0, 1, 2}, {n}), false, norm, 0, 0, x, y);
    return (*net)(x).to_vector();
  };
  const Vec a = view_logits(-1, false), am = view_logits(-1, true), b0 = view_logits(0, false),
            b0m = view_logits(0, true), b2 = view_logits(2, false), b2m = view_logits(2, true);
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = 0.5 * (a[i] + am[i]) / 2 + 0.5 * ((b0[i] + b0m[i]) / 2 + (b2[i] + b2m[i]) / 2) / 2;
    CHECK(got[i] == Approx(want).epsilon(1e-6).margin(1e-6));
  }
}

TEST_CASE("max-pool 3 over a 3x3 map is the maximum of each channel", "[airbench]") {
  engine::manual_seed(10);
  const Tensor x = engine::uniform({2, 3, 3, 4}, -1, 1, DType::F32);
  const Tensor y = engine::max_pool2d(x, 3, 3);
  REQUIRE(y.shape() == engine::Shape{2, 1, 1, 4});
  const Vec xv = x.to_vector(), yv = y.to_vector();
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 4; ++c) {
      double m = -1e30;
      for (int p = 0; p < 9; ++p) m = std::max(m, xv[(b * 9 + p) * 4 + c]);
      CHECK(yv[b * 4 + c] == m);
    }
}

TEST_CASE("triangle schedule: airbench's 0.2 -> 1 at 23% -> 0.07, and the lookahead's decay", "[airbench]") {
  // airbench94: 476 steps, the peak at int(0.23 x 476) = 109.
  auto lr = [](int64_t s) { return models::lr_factor("triangle", s, 476, 0.23, 0.2, 0.07); };
  CHECK(lr(0) == Approx(0.2));
  CHECK(lr(109) == Approx(1.0));
  CHECK(lr(476) == Approx(0.07));
  CHECK(lr(54) == Approx(0.2 + 0.8 * 54.0 / 109.0));
  CHECK(lr(300) == Approx(1.0 - 0.93 * (300.0 - 109.0) / (476.0 - 109.0)));
  CHECK(models::lr_factor("constant", 7, 10, 0.2, 0, 0) == 1.0);
  CHECK(models::lr_factor("onecycle", 1, 10, 0.2, 0, 0) == Approx(0.5));
  CHECK(models::ema_decay(0.95, 5, 238, 476) == Approx(std::pow(0.95, 5) * 0.125));
  CHECK(models::ema_decay(0.95, 5, 0, 476) == 0.0);
}

TEST_CASE("airbench94: its layers, frozen whitening weights, Dirac convs, 1x1 output", "[airbench][models]") {
  engine::manual_seed(11);
  auto net = models::airbench94();
  int64_t trainable = 0, frozen = 0;
  for (const auto& [name, p] : net->named_parameters()) (p->trainable ? trainable : frozen) += p->master.numel();
  // Frozen: the whitening weights (24 x 2 x 2 x 3) and the six batch-norm scales.
  CHECK(frozen == 24 * 12 + 2 * (64 + 256 + 256));
  // Trainable: the whitening bias, the six 3x3 convolutions, the batch-norm shifts, the head.
  const int64_t convs = 9 * (24 * 64 + 64 * 64 + 64 * 256 + 256 * 256 + 256 * 256 + 256 * 256);
  CHECK(trainable == 24 + convs + 2 * (64 + 256 + 256) + 256 * 10);
  const Tensor x = engine::uniform({2, 32, 32, 3}, -1, 1, DType::F32);
  CHECK((*net)(x).shape() == engine::Shape{2, 10});
  CHECK(models::input_normalisation("airbench94").scale[0] == Approx(1.0 / (255 * 0.2470)));
  CHECK(models::input_normalisation("simplecnn").scale[0] == Approx(2.0 / 255));
}

TEST_CASE("airbench94 without Dirac init (the --no-dirac ablation) differs only in the identity filters", "[airbench][models]") {
  engine::manual_seed(12);
  auto with = models::airbench94(10, true);
  engine::manual_seed(12);
  auto without = models::airbench94(10, false);
  const auto a = with->named_parameters(), b = without->named_parameters();
  REQUIRE(a.size() == b.size());
  int convs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    const std::vector<double> wa = a[i].second->master.to_vector(), wb = b[i].second->master.to_vector();
    const engine::Shape& s = a[i].second->master.shape();
    if (s.size() != 4 || s[1] != 3) {  // everything but the 3x3 convolutions: the same draws
      CHECK(wa == wb);
      continue;
    }
    ++convs;
    // [out, 3, 3, in]: filters o < in are the identity with Dirac init and random without;
    // the others are the same draws in both.
    const int64_t in = s[3], per_filter = 9 * in;
    int64_t identity_filters = 0, same_rest = 0;
    for (int64_t o = 0; o < s[0]; ++o) {
      const bool same = std::equal(wa.begin() + o * per_filter, wa.begin() + (o + 1) * per_filter, wb.begin() + o * per_filter);
      if (o < in) {
        const double centre = wa[static_cast<size_t>(o * per_filter + 4 * in + o)];
        identity_filters += centre == 1.0 && !same;
      } else {
        same_rest += same;
      }
    }
    CHECK(identity_filters == in);
    CHECK(same_rest == s[0] - in);
  }
  CHECK(convs == 6);
  // --no-whiten: the first layer's weights learn (frozen in the recipe).
  CHECK_FALSE(with->named_parameters().front().second->trainable);
  CHECK(models::airbench94(10, true, false)->named_parameters().front().second->trainable);
  // The same models by name, as the trainer builds them; other models have no such ablations.
  CHECK_FALSE(models::make_model("airbench94", 10, {true, true})->named_parameters().front().second->trainable);
  CHECK(models::make_model("airbench94", 10, {true, false})->named_parameters().front().second->trainable);
  engine::manual_seed(12);
  const auto by_name = models::make_model("airbench94", 10, {false, true})->named_parameters();
  REQUIRE(by_name.size() == b.size());
  for (size_t i = 0; i < b.size(); ++i) CHECK(by_name[i].second->master.to_vector() == b[i].second->master.to_vector());
  CHECK_THROWS_WITH(models::make_model("simplecnn", 10, {false, true}), Catch::Contains("airbench94 only"));
}

TEST_CASE("the airbench94 recipe: its decays follow --batch-size as airbench derives them; --no-ema, --no-tta", "[airbench][cli]") {
  // Named arrays, not initializer-list temporaries: GCC 12's -O1 ASan build read a stale
  // pointer from a braced list passed by value to a lambda (SIGSEGV in CI).
  auto parse = [](const std::vector<std::string>& words) {
    std::vector<std::string> owned = {"trainer"};
    owned.insert(owned.end(), words.begin(), words.end());
    std::vector<const char*> argv;
    for (const std::string& w : owned) argv.push_back(w.c_str());
    return models::parse_trainer_args(static_cast<int>(argv.size()), argv.data());
  };
  // airbench: decay at SGD's lr = 0.0153 x batch / 11.5; batch-norm shifts / 64.
  const models::TrainerConfig full = parse({"--recipe", "airbench94"});
  CHECK(full.batch_size == 1024);
  CHECK(full.weight_decay == Approx(1.36236522));
  CHECK(full.norm_weight_decay == Approx(1.36236522 / 64));
  CHECK(full.lr == Approx(1.46484375e-3));
  CHECK((full.ema && full.tta));
  const models::TrainerConfig quarter = parse({"--batch-size", "256", "--recipe", "airbench94"});
  CHECK(quarter.weight_decay == Approx(0.34059130));
  CHECK(quarter.norm_weight_decay == Approx(0.34059130 / 64));
  CHECK(quarter.lr == full.lr);  // the loss is summed: the lr per step does not move
  // Accumulated micro-batches sum into one step: the effective batch decides.
  CHECK(parse({"--recipe", "airbench94", "--batch-size", "256", "--accumulate", "4"}).weight_decay == Approx(1.36236522));
  const models::TrainerConfig given = parse({"--recipe", "airbench94", "--batch-size", "256", "--weight-decay", "0.5"});
  CHECK(given.weight_decay == 0.5);
  CHECK(given.norm_weight_decay == Approx(0.5 / 64));  // the same decay per step for the shifts
  const models::TrainerConfig both =
      parse({"--recipe", "airbench94", "--norm-weight-decay", "0.125", "--norm-lr-scale", "8", "--no-ema", "--no-tta"});
  CHECK(both.norm_weight_decay == 0.125);
  CHECK(both.norm_lr_scale == 8);
  CHECK_FALSE(both.ema);
  CHECK_FALSE(both.tta);
  CHECK(parse({"--recipe", "airbench94", "--norm-lr-scale", "8"}).norm_weight_decay == Approx(1.36236522 / 8));
}

TEST_CASE("trainer flags: a parameter frozen again takes the later epochs; a flag made pointless is refused",
          "[airbench][cli]") {
  auto parse = [](const std::vector<std::string>& words) {  // by reference: see the test above
    std::vector<std::string> owned = {"trainer"};
    owned.insert(owned.end(), words.begin(), words.end());
    std::vector<const char*> argv;
    for (const std::string& w : owned) argv.push_back(w.c_str());
    return models::parse_trainer_args(static_cast<int>(argv.size()), argv.data());
  };
  using Freeze = std::vector<std::pair<std::string, double>>;
  CHECK(parse({"--recipe", "airbench94"}).freeze_after == Freeze{{"0.bias", 3.0}});
  // The command line overrides the recipe's epochs for the same parameter, wherever it stands.
  CHECK(parse({"--freeze-after", "0.bias=5", "--recipe", "airbench94"}).freeze_after == Freeze{{"0.bias", 5.0}});
  CHECK(parse({"--recipe", "airbench94", "--freeze-after", "2.bias=1"}).freeze_after ==
        Freeze{{"0.bias", 3.0}, {"2.bias", 1.0}});
  CHECK(parse({"--freeze-after", "a=1", "--freeze-after", "b=2", "--freeze-after", "a=4"}).freeze_after ==
        Freeze{{"b", 2.0}, {"a", 4.0}});
  // Each of these would be ignored by the configuration it is given with.
  const std::vector<std::pair<std::vector<std::string>, std::string>> pointless = {
      {{"--lr-end", "0.1"}, "--lr-end applies to --lr-schedule triangle only"},
      {{"--recipe", "airbench94", "--lr-schedule", "onecycle", "--lr-start", "0.1"}, "--lr-start applies to"},
      {{"--warmup", "0.3"}, "--warmup applies to --lr-schedule onecycle or triangle only"},
      {{"--ema-rate", "0.9"}, "--ema-rate applies to --ema only"},
      {{"--recipe", "airbench94", "--no-ema", "--ema-every", "3"}, "--ema-every applies to --ema only"},
      {{"--precision", "bf16", "--init-scale", "8"}, "--init-scale applies to --precision fp16"},
      {{"--recipe", "airbench94", "--no-augment", "--flip", "none"}, "--flip applies to --augment only"},
      {{"--momentum", "0.5"}, "--momentum applies to --optimizer sgd only"},
      {{"--whiten-images", "10"}, "--whiten-images applies to --model airbench94"},
  };
  for (const auto& [words, message] : pointless) {
    INFO(message);
    CHECK_THROWS_WITH(parse(words), Catch::Contains(message));
  }
  // The same flags where they apply.
  CHECK(parse({"--lr-schedule", "triangle", "--lr-end", "0.1"}).lr_end == 0.1);
  CHECK(parse({"--lr-schedule", "onecycle", "--warmup", "0.3"}).warmup == 0.3);
  CHECK(parse({"--ema", "--ema-rate", "0.9"}).ema_rate == 0.9);
  CHECK(parse({"--init-scale", "8"}).init_scale == 8);
  CHECK(parse({"--recipe", "airbench94", "--flip", "none"}).flip == "none");
  CHECK(parse({"--optimizer", "sgd", "--momentum", "0.5"}).momentum == 0.5);
  CHECK(parse({"--recipe", "airbench94", "--whiten-images", "10"}).whiten_images == 10);
  // The recipe's Nesterov goes with its SGD: another optimizer drops it; given, it is refused.
  CHECK_FALSE(parse({"--recipe", "airbench94", "--optimizer", "adam"}).nesterov);
  CHECK_THROWS_WITH(parse({"--recipe", "airbench94", "--optimizer", "adam", "--nesterov"}),
                    Catch::Contains("--nesterov applies to --optimizer sgd only"));
  // The recipe's ablations: airbench94 only; without the whitening layer there is no sample.
  const models::TrainerConfig ablated = parse({"--recipe", "airbench94", "--no-whiten", "--no-dirac"});
  CHECK_FALSE(ablated.whiten);
  CHECK_FALSE(ablated.dirac);
  CHECK((parse({"--recipe", "airbench94"}).whiten && parse({"--recipe", "airbench94"}).dirac));
  CHECK_THROWS_WITH(parse({"--no-dirac"}), Catch::Contains("--no-dirac applies to --model airbench94 only"));
  CHECK_THROWS_WITH(parse({"--recipe", "airbench94", "--no-whiten", "--whiten-images", "10"}),
                    Catch::Contains("--whiten-images applies to --model airbench94 and its whitening layer only"));
}
