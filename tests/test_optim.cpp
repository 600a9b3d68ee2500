// SGD (momentum, Nesterov, weight decay), Adam and AdamW against double implementations of
// PyTorch's documented formulas written here; loss-scale unscaling, inf/NaN skips, FP32 masters.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/adam_bound.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "engine/tensor.h"
#include "engine/amp.h"
#include "models/models.h"

namespace {

using engine::DType;
using engine::ParamPtr;
using engine::Parameter;
using engine::Shape;
using engine::Tensor;
using Vec = std::vector<double>;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Round v to FP16/BF16 with ties to even, from the definition (independent of the engine).
double round_to(double v, DType t) {
  const int man = t == DType::F16 ? 10 : 7, emin = t == DType::F16 ? -14 : -126;
  const double maxv = t == DType::F16 ? 65504.0 : std::ldexp(255.0, 120);
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);
  const int q = std::max(e - 1, emin) - man;
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  return std::fabs(r) > maxv ? std::copysign(kInf, v) : r;
}

double unit(DType master) { return master == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

// |got - want| <= tol[i] elementwise, reporting the first few misses.
void expect_near(const char* what, const Vec& got, const Vec& want, const Vec& tol) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol[i])) {
      if (bad++ < 4) os << what << "[" << i << "] = " << got[i] << ", reference " << want[i] << ", tol " << tol[i] << "\n";
    }
  }
  INFO(os.str());
  CHECK(bad == 0);
}

// Bitwise-equal values (NaN equal to NaN).
void expect_same(const char* what, const Vec& got, const Vec& want) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i];
    if (!same && bad++ < 4) os << what << "[" << i << "] = " << got[i] << ", expected " << want[i] << "\n";
  }
  INFO(os.str());
  CHECK(bad == 0);
}

Vec random_vec(std::mt19937& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// A parameter whose value is its master (FP32 or FP64 mode), like Module::add_parameter makes.
ParamPtr make_param(const std::string& name, const Vec& w, DType master_t) {
  auto p = std::make_shared<Parameter>();
  p->name = name;
  p->master = Tensor::from_vector(w, {int64_t(w.size())}, master_t);
  p->master.set_requires_grad(true);
  p->value = p->master;
  return p;
}

// Puts gradient g (rounded to the value's dtype) on p and returns the values actually stored.
Vec set_grad(Parameter& p, const Vec& g) {
  Tensor t = Tensor::from_vector(g, p.value.shape(), p.value.dtype());
  p.value.set_grad(t);
  return t.to_vector();
}

// ---- Reference optimizers, from PyTorch's documentation, in double --------------------------

// torch.optim.SGD: g += wd w; if momentum: b = (t > 1) ? mu b + (1 - dampening) g : g;
// g = nesterov ? g + mu b : b; w -= lr g.
struct RefSGD {
  RefSGD(double lr_, double momentum_ = 0, double wd_ = 0, double dampening_ = 0, bool nesterov_ = false)
      : lr(lr_), momentum(momentum_), wd(wd_), dampening(dampening_), nesterov(nesterov_) {}
  double lr, momentum, wd, dampening;
  bool nesterov;
  Vec buf;
  bool started = false;
  void step(Vec& w, const Vec& grad) {
    if (buf.empty()) buf.assign(w.size(), 0);
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grad[i] + wd * w[i];
      if (momentum != 0) {
        buf[i] = started ? momentum * buf[i] + (1 - dampening) * g : g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      w[i] -= lr * g;
    }
    started = true;
  }
};

// torch.optim.Adam / AdamW: AdamW first multiplies w by (1 - lr wd), Adam adds wd w to g;
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; m^ = m / (1 - b1^t); v^ = v / (1 - b2^t);
// w -= lr m^ / (sqrt(v^) + eps)   (eps outside the square root).
struct RefAdam {
  RefAdam(double lr_, double b1_ = 0.9, double b2_ = 0.999, double eps_ = 1e-8, double wd_ = 0, bool decoupled_ = false)
      : lr(lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), decoupled(decoupled_) {}
  double lr, b1, b2, eps, wd;
  bool decoupled;
  Vec m, v;
  int t = 0;
  void step(Vec& w, const Vec& grad) {
    if (m.empty()) m.assign(w.size(), 0), v.assign(w.size(), 0);
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grad[i];
      if (decoupled) w[i] *= 1 - lr * wd;
      else g += wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// Error budget of the engine's update in the master type: each step is a handful (< 16) of
// roundings of values no bigger than |w| + 1 (weights, gradients and buffers here are O(1));
// three steps and the propagation through the buffers stay under 64 roundings.
Vec tol_for(const Vec& ref, DType master_t) {
  Vec t(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) t[i] = 64 * unit(master_t) * (1 + std::fabs(ref[i]));
  return t;
}

}  // namespace

TEST_CASE("SGD matches PyTorch's formulas over three steps", "[optim]") {
  struct Case {
    const char* name;
    double lr, momentum, wd, dampening;
    bool nesterov;
  };
  const Case cases[] = {
      {"plain", 0.1, 0, 0, 0, false},
      {"momentum", 0.1, 0.9, 0, 0, false},
      {"momentum + dampening", 0.1, 0.9, 0, 0.3, false},
      {"nesterov", 0.05, 0.8, 0, 0, true},
      {"weight decay", 0.1, 0, 0.01, 0, false},
      {"momentum + weight decay + nesterov", 0.1, 0.9, 0.05, 0, true},
  };
  for (DType mt : {DType::F32, DType::F64}) {
    for (const Case& c : cases) {
      INFO(c.name << ", master " << engine::dtype_name(mt));
      std::mt19937 rng(17);
      Vec w0 = random_vec(rng, 20, -1, 1), w1 = random_vec(rng, 7, -1, 1);
      auto p0 = make_param("a", w0, mt), p1 = make_param("b", w1, mt);
      w0 = p0->master.to_vector();
      w1 = p1->master.to_vector();
      engine::SGD opt({p0, p1}, c.lr, c.momentum, c.wd, c.nesterov, c.dampening);
      RefSGD r0{c.lr, c.momentum, c.wd, c.dampening, c.nesterov}, r1 = r0;
      for (int step = 0; step < 3; ++step) {
        const Vec g0 = set_grad(*p0, random_vec(rng, 20, -1, 1)), g1 = set_grad(*p1, random_vec(rng, 7, -1, 1));
        REQUIRE(opt.step() == engine::StepResult::Applied);
        r0.step(w0, g0);
        r1.step(w1, g1);
        INFO("after step " << step + 1);
        expect_near("w0", p0->master.to_vector(), w0, tol_for(w0, mt));
        expect_near("w1", p1->master.to_vector(), w1, tol_for(w1, mt));
        if (c.momentum > 0) {
          REQUIRE(opt.momentum_buffers[0].defined());
          expect_near("buf0", opt.momentum_buffers[0].to_vector(), r0.buf, tol_for(r0.buf, mt));
        }
      }
      CHECK(opt.steps() == 3);
    }
  }
}

TEST_CASE("Adam and AdamW match PyTorch's formulas over three steps", "[optim]") {
  struct Case {
    const char* name;
    double lr, b1, b2, eps, wd;
    bool decoupled;
    double grad_size;
  };
  const Case cases[] = {
      {"Adam", 1e-2, 0.9, 0.999, 1e-8, 0, false, 1},
      {"Adam, L2 weight decay", 1e-2, 0.9, 0.999, 1e-8, 0.1, false, 1},
      {"AdamW", 1e-2, 0.9, 0.999, 1e-8, 0.1, true, 1},
      {"AdamW, other betas", 3e-2, 0.8, 0.99, 1e-8, 0.5, true, 1},
      // Gradients the size of eps: eps outside vs inside the root differ by a factor ~20.
      {"Adam, large eps", 1e-2, 0.9, 0.999, 1e-3, 0, false, 1e-3},
  };
  for (DType mt : {DType::F32, DType::F64}) {
    for (const Case& c : cases) {
      INFO(c.name << ", master " << engine::dtype_name(mt));
      std::mt19937 rng(23);
      Vec w = random_vec(rng, 30, -1, 1);
      auto p = make_param("w", w, mt);
      w = p->master.to_vector();
      engine::Adam opt({p}, c.lr, c.b1, c.b2, c.eps, c.wd, c.decoupled);
      RefAdam r{c.lr, c.b1, c.b2, c.eps, c.wd, c.decoupled};
      for (int step = 0; step < 3; ++step) {
        const Vec g = set_grad(*p, random_vec(rng, 30, -c.grad_size, c.grad_size));
        REQUIRE(opt.step() == engine::StepResult::Applied);
        r.step(w, g);
        INFO("after step " << step + 1);
        // The update is lr * (a ratio good to a few roundings); budget as for SGD, on |w| + lr.
        Vec tol(w.size());
        for (size_t i = 0; i < w.size(); ++i) tol[i] = 64 * unit(mt) * (std::fabs(w[i]) + c.lr);
        expect_near("w", p->master.to_vector(), w, tol);
        Vec tm(w.size()), tv(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          tm[i] = 16 * unit(mt) * (std::fabs(r.m[i]) + c.grad_size);
          tv[i] = 16 * unit(mt) * (r.v[i] + c.grad_size * c.grad_size);
        }
        expect_near("exp_avg", opt.exp_avg[0].to_vector(), r.m, tm);
        expect_near("exp_avg_sq", opt.exp_avg_sq[0].to_vector(), r.v, tv);
      }
      CHECK(opt.steps() == 3);
    }
  }
}

TEST_CASE("step(1/1024) on gradients scaled by 1024 gives the unscaled update", "[optim]") {
  // Scaling by a power of two is exact in FP32 (no overflow, no subnormals here), so the two
  // runs must agree bit for bit, for SGD with momentum and for Adam.
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "SGD" : "Adam"));
    std::mt19937 rng(5);
    const Vec w = random_vec(rng, 16, -1, 1);
    auto plain = make_param("w", w, DType::F32), scaled = make_param("w", w, DType::F32);
    std::unique_ptr<engine::Optimizer> o1, o2;
    if (which == 0) {
      o1 = std::make_unique<engine::SGD>(std::vector<ParamPtr>{plain}, 0.1, 0.9);
      o2 = std::make_unique<engine::SGD>(std::vector<ParamPtr>{scaled}, 0.1, 0.9);
    } else {
      o1 = std::make_unique<engine::Adam>(std::vector<ParamPtr>{plain}, 1e-2);
      o2 = std::make_unique<engine::Adam>(std::vector<ParamPtr>{scaled}, 1e-2);
    }
    Vec ref = plain->master.to_vector();
    RefSGD rs{0.1, 0.9};
    RefAdam ra{1e-2};
    for (int step = 0; step < 3; ++step) {
      const Vec g = set_grad(*plain, random_vec(rng, 16, -1, 1));
      Vec g1024 = g;
      for (double& x : g1024) x *= 1024;
      set_grad(*scaled, g1024);
      REQUIRE(o1->step() == engine::StepResult::Applied);
      REQUIRE(o2->step(1.0 / 1024) == engine::StepResult::Applied);
      if (which == 0) rs.step(ref, g);
      else ra.step(ref, g);
    }
    expect_same("scaled vs plain", scaled->master.to_vector(), plain->master.to_vector());
    // ... and both are the right update (an ignored inv_scale would be 1024x off).
    Vec tol(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) tol[i] = 64 * unit(DType::F32) * (1 + std::fabs(ref[i]));
    expect_near("scaled", scaled->master.to_vector(), ref, tol);
  }
}

TEST_CASE("an inf or NaN gradient skips the step and changes nothing", "[optim]") {
  for (int which = 0; which < 2; ++which) {
    INFO((which == 0 ? "SGD with momentum" : "Adam"));
    std::mt19937 rng(9);
    auto p0 = make_param("a", random_vec(rng, 10, -1, 1), DType::F32);
    auto p1 = make_param("b", random_vec(rng, 6, -1, 1), DType::F32);
    Vec w0 = p0->master.to_vector(), w1 = p1->master.to_vector();
    std::unique_ptr<engine::Optimizer> opt;
    engine::SGD* sgd = nullptr;
    engine::Adam* adam = nullptr;
    if (which == 0) {
      auto o = std::make_unique<engine::SGD>(std::vector<ParamPtr>{p0, p1}, 0.1, 0.9);
      sgd = o.get();
      opt = std::move(o);
    } else {
      auto o = std::make_unique<engine::Adam>(std::vector<ParamPtr>{p0, p1}, 1e-2);
      adam = o.get();
      opt = std::move(o);
    }
    RefSGD rs0{0.1, 0.9}, rs1{0.1, 0.9};
    RefAdam ra0{1e-2}, ra1{1e-2};
    auto ref_step = [&](const Vec& g0, const Vec& g1) {
      if (which == 0) rs0.step(w0, g0), rs1.step(w1, g1);
      else ra0.step(w0, g0), ra1.step(w1, g1);
    };
    auto state = [&]() {
      Vec s;
      for (size_t i = 0; i < 2; ++i) {
        const std::vector<Tensor*> ts = sgd ? std::vector<Tensor*>{&sgd->momentum_buffers[i]}
                                            : std::vector<Tensor*>{&adam->exp_avg[i], &adam->exp_avg_sq[i]};
        for (Tensor* t : ts) {
          const Vec v = t->to_vector();
          s.insert(s.end(), v.begin(), v.end());
        }
      }
      return s;
    };

    // One good step first, so there is optimizer state to protect.
    Vec g0 = set_grad(*p0, random_vec(rng, 10, -1, 1)), g1 = set_grad(*p1, random_vec(rng, 6, -1, 1));
    REQUIRE(opt->step() == engine::StepResult::Applied);
    ref_step(g0, g1);
    const Vec m0 = p0->master.to_vector(), m1 = p1->master.to_vector(), st = state();

    for (double bad : {kInf, -kInf, kNaN}) {
      INFO("bad value " << bad);
      // The bad value sits in the second parameter: the first must not have been updated either.
      set_grad(*p0, random_vec(rng, 10, -1, 1));
      Vec gb = random_vec(rng, 6, -1, 1);
      gb[3] = bad;
      set_grad(*p1, gb);
      CHECK(opt->step() == engine::StepResult::Skipped);
      CHECK(opt->steps() == 1);
      expect_same("w0", p0->master.to_vector(), m0);
      expect_same("w1", p1->master.to_vector(), m1);
      expect_same("state", state(), st);
    }
    // The next finite step works and continues from step 1 (Adam's bias correction uses t = 2).
    g0 = set_grad(*p0, random_vec(rng, 10, -1, 1));
    g1 = set_grad(*p1, random_vec(rng, 6, -1, 1));
    REQUIRE(opt->step() == engine::StepResult::Applied);
    ref_step(g0, g1);
    CHECK(opt->steps() == 2);
    expect_near("w0", p0->master.to_vector(), w0, tol_for(w0, DType::F32));
    expect_near("w1", p1->master.to_vector(), w1, tol_for(w1, DType::F32));
  }
}

TEST_CASE("FP16 compute copies: gradients on the copy, updates on the FP32 master", "[optim]") {
  engine::manual_seed(31);
  engine::Linear lin(4, 3);
  lin.set_compute_dtype(DType::F16);
  ParamPtr W = lin.weight, B = lin.bias;
  for (const ParamPtr& p : {W, B}) {
    REQUIRE(p->master.dtype() == DType::F32);
    REQUIRE(p->value.dtype() == DType::F16);
    REQUIRE_FALSE(p->value.same_storage(p->master));
    Vec want = p->master.to_vector();
    for (double& v : want) v = round_to(v, DType::F16);
    expect_same("value = half(master)", p->value.to_vector(), want);
  }

  std::mt19937 rng(2);
  Vec xv;
  Tensor x = Tensor::from_vector(random_vec(rng, 8, -1, 1), {2, 4}, DType::F16);
  xv = x.to_vector();
  engine::Tape tape;
  Tensor loss;
  {
    engine::TapeScope scope(tape);
    loss = engine::sum(lin(x));
  }
  tape.backward(loss);
  // d(sum y)/dW[o,i] = sum_n x[n,i] (two FP16 values added in FP32, rounded once, so exact
  // to within one FP16 rounding); d/db = N = 2.
  REQUIRE(W->value.grad().defined());
  REQUIRE(W->value.grad().dtype() == DType::F16);
  REQUIRE_FALSE(W->master.grad().defined());
  const Vec gw = W->value.grad().to_vector(), gb = B->value.grad().to_vector();
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < 4; ++i)
      CHECK(gw[static_cast<size_t>(o * 4 + i)] == round_to(double(float(xv[static_cast<size_t>(i)]) + float(xv[static_cast<size_t>(4 + i)])), DType::F16));
  expect_same("grad b", gb, {2, 2, 2});

  const Vec mw = W->master.to_vector(), mb = B->master.to_vector();
  engine::SGD opt(lin.parameters(), 0.1);
  REQUIRE(opt.step() == engine::StepResult::Applied);
  // w - 0.1 g in FP32: lr rounded to float, one product and one difference: 2u (|w| + |0.1 g|).
  Vec ww(mw.size()), tw(mw.size()), wb(mb.size()), tb(mb.size());
  for (size_t i = 0; i < mw.size(); ++i) {
    ww[i] = mw[i] - 0.1 * gw[i];
    tw[i] = 2 * unit(DType::F32) * (std::fabs(mw[i]) + std::fabs(0.1 * gw[i]));
  }
  for (size_t i = 0; i < mb.size(); ++i) {
    wb[i] = mb[i] - 0.1 * gb[i];
    tb[i] = 2 * unit(DType::F32) * (std::fabs(mb[i]) + std::fabs(0.1 * gb[i]));
  }
  const Vec nw = W->master.to_vector(), nb = B->master.to_vector();
  expect_near("master w", nw, ww, tw);
  expect_near("master b", nb, wb, tb);
  Vec hw = nw, hb = nb;
  for (double& v : hw) v = round_to(v, DType::F16);
  for (double& v : hb) v = round_to(v, DType::F16);
  expect_same("value w = half(master)", W->value.to_vector(), hw);
  expect_same("value b = half(master)", B->value.to_vector(), hb);
}

TEST_CASE("updates far below FP16 resolution accumulate in the FP32 master", "[optim]") {
  engine::manual_seed(1);
  engine::Linear lin(8, 4, false);
  lin.weight->master.fill(1.0);
  lin.set_compute_dtype(DType::F16);
  ParamPtr W = lin.weight;
  const double lr = 1e-3;
  engine::SGD opt(lin.parameters(), lr);
  const double g = round_to(0.01, DType::F16);  // lr * g ~ 1e-5: FP16's spacing below 1 is 2^-11 ~ 4.9e-4
  double ref = 1.0;
  for (int step = 1; step <= 30; ++step) {
    W->value.set_grad(Tensor::full(W->value.shape(), 0.01, DType::F16));
    REQUIRE(opt.step() == engine::StepResult::Applied);
    ref -= lr * g;
    const Vec m = W->master.to_vector(), v = W->value.to_vector();
    INFO("step " << step);
    // Each step: one product and one difference near 1 in FP32, so 2u per step.
    expect_near("master", m, Vec(m.size(), ref), Vec(m.size(), 2 * step * unit(DType::F32)));
    expect_same("value = half(master)", v, Vec(v.size(), round_to(m[0], DType::F16)));
    // Applied in FP16 each update would round away and the weight would stay at 1 forever.
    if (step == 10) CHECK(v[0] == 1.0);
  }
  CHECK(ref < 1 - std::ldexp(1.0, -12));  // below the midpoint between 1 - 2^-11 and 1
  CHECK(W->value.to_vector()[0] == 1 - std::ldexp(1.0, -11));
}

TEST_CASE("Adam with FP16/BF16 compute copies: zero gradients stay finite, tiny ones follow the reference", "[optim]") {
  for (DType t : {DType::F16, DType::BF16}) {
    INFO("compute dtype " << engine::dtype_name(t));
    engine::manual_seed(4);
    engine::Linear lin(5, 3);
    lin.set_compute_dtype(t);
    auto params = lin.parameters();
    engine::Adam opt(params, 1e-3);
    std::vector<Vec> masters;
    for (auto& p : params) masters.push_back(p->master.to_vector());
    // All-zero gradients: m = v = 0, so the update is 0 / (0 + eps). With eps applied in
    // FP16 (where 1e-8 is 0) it would be 0/0 = NaN.
    for (int step = 0; step < 3; ++step) {
      for (auto& p : params) p->value.set_grad(Tensor::zeros(p->value.shape(), t));
      REQUIRE(opt.step() == engine::StepResult::Applied);
    }
    for (size_t k = 0; k < params.size(); ++k) {
      expect_same("master", params[k]->master.to_vector(), masters[k]);
      Vec h = masters[k];
      for (double& v : h) v = round_to(v, t);
      expect_same("value", params[k]->value.to_vector(), h);
    }
    // Tiny FP16 gradients (subnormal in FP16: 2^-24 .. 2^-20): Adam normalises them, so the
    // step is ~ lr * g / (|g| + eps), with eps = 1e-8 of the same order as g. Squares ~ 1e-14
    // are fine in FP32 and would be 0 in FP16.
    std::mt19937 rng(6);
    std::vector<RefAdam> refs(params.size(), RefAdam{1e-3});
    for (size_t k = 0; k < params.size(); ++k) {  // after three zero steps: t = 3, m = v = 0
      refs[k].t = 3;
      refs[k].m.assign(masters[k].size(), 0);
      refs[k].v.assign(masters[k].size(), 0);
    }
    for (int step = 0; step < 2; ++step) {
      std::vector<Vec> grads;
      for (auto& p : params) {
        Vec g = random_vec(rng, static_cast<size_t>(p->value.numel()), -1, 1);
        for (double& x : g) x = std::ldexp(std::round(x * 16), -24);  // k * 2^-24, |k| <= 16
        grads.push_back(set_grad(*p, g));
      }
      REQUIRE(opt.step() == engine::StepResult::Applied);
      for (size_t k = 0; k < params.size(); ++k) refs[k].step(masters[k], grads[k]);
    }
    for (size_t k = 0; k < params.size(); ++k) {
      const Vec m = params[k]->master.to_vector();
      for (double v : m) REQUIRE(std::isfinite(v));
      Vec tol(m.size());
      for (size_t i = 0; i < m.size(); ++i) tol[i] = 64 * unit(DType::F32) * (std::fabs(masters[k][i]) + 1e-3);
      expect_near("master after tiny steps", m, masters[k], tol);
      Vec h = m;
      for (double& v : h) v = round_to(v, t);
      expect_same("value after tiny steps", params[k]->value.to_vector(), h);
    }
  }
}

TEST_CASE("parameters without a gradient are not stepped: no weight decay, momentum or moments move them",
          "[optim]") {
  // PyTorch skips a parameter whose .grad is None; the engine skips one with no gradient (a
  // layer the forward pass did not use), on the CPU and, through the same
  // stepped_parameters(), in the CUDA plan.
  std::mt19937 rng(31);
  const Vec w_used = random_vec(rng, 8, -1, 1), w_unused = random_vec(rng, 5, -1, 1);
  for (int which = 0; which < 3; ++which) {
    INFO((which == 0 ? "sgd" : which == 1 ? "adam" : "adamw") << " with weight decay");
    auto used = make_param("used", w_used, DType::F32), unused = make_param("unused", w_unused, DType::F32);
    const Vec unused0 = unused->master.to_vector(), used0 = used->master.to_vector();  // rounded to FP32
    std::unique_ptr<engine::Optimizer> opt;
    if (which == 0) opt = std::make_unique<engine::SGD>(std::vector<ParamPtr>{used, unused}, 0.1, 0.9, 0.5);
    else opt = std::make_unique<engine::Adam>(std::vector<ParamPtr>{used, unused}, 0.1, 0.9, 0.999, 1e-8, 0.5, which == 2);
    for (int step = 0; step < 3; ++step) {
      set_grad(*used, random_vec(rng, 8, -1, 1));
      REQUIRE(opt->stepped_parameters() == std::vector<size_t>{0});
      REQUIRE(opt->step() == engine::StepResult::Applied);
      CHECK_FALSE(opt->last_step_skipped());
    }
    CHECK(unused->master.to_vector() == unused0);  // bit for bit: never touched
    CHECK(used->master.to_vector() != used0);      // while the used one moved
    CHECK(opt->steps() == 3);
  }
}

// ---- The CPU-vs-GPU Adam bound, measured ----------------------------------------------------
// tests/cuda/test_cuda_train.cpp judges two Adam steps of simplecnn on the GPU against the CPU
// by tests/adam_bound.h: every weight within what rounding can flip, and the ratio sum |gpu -
// cpu| / sum |cpu - start| within kMaxRatio. Both are measured here on the CPU, with runs that
// differ only by rounding, each a larger difference than a GPU's other summation order makes:
//   FP32 compute copies against FP64 ones; FP16 against FP32; FP16 against BF16 (8 bits of
//   mantissa against 11: the coarsest pair).
// Each must stay well inside the bound, so a correct GPU engine cannot fail it; and a learning
// rate 5% off in one of two FP16 runs must exceed it, so a wrong one cannot pass.
namespace {
struct AdamRun {
  std::vector<double> start, end;
};
AdamRun adam_two_steps(DType compute, double lr = 1e-3) {
  engine::manual_seed(5);
  auto model = models::simplecnn();
  model->set_compute_dtype(compute);
  AdamRun r;
  for (auto& p : model->parameters())
    for (double v : p->master.to_vector()) r.start.push_back(v);
  engine::Adam opt(model->parameters(), lr);
  engine::LossScalerConfig cfg;
  cfg.enabled = compute == DType::F16;  // as the [cuda] test's FP16 case
  engine::LossScaler scaler(cfg);
  engine::manual_seed(6);
  Tensor x = engine::cast(engine::uniform({8, 32, 32, 3}, -1, 1, DType::F32), compute);
  Tensor y = Tensor::from_ints({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    engine::Tape tape;
    {
      engine::TapeScope scope(tape);
      engine::AutocastScope autocast(compute);
      tape.backward(scaler.scale(engine::cross_entropy((*model)(x), y)));
    }
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(opt.steps() == 2);  // no step skipped
  for (auto& p : model->parameters())
    for (double v : p->master.to_vector()) r.end.push_back(v);
  return r;
}
}  // namespace

TEST_CASE("Adam CPU-vs-GPU bound: rounding stays inside it, a 5% learning-rate error does not", "[optim][quota]") {
  const double lr = 1e-3, reach = 2 * lr * adam_bound::reach(2, 0.9, 0.999);
  const AdamRun f64 = adam_two_steps(DType::F64), f32 = adam_two_steps(DType::F32), f16 = adam_two_steps(DType::F16),
                b16 = adam_two_steps(DType::BF16), f16_lr = adam_two_steps(DType::F16, 1.05 * lr);
  for (const AdamRun* r : {&f32, &f16, &b16, &f16_lr}) REQUIRE(r->start == f64.start);
  const adam_bound::Agreement g32 = adam_bound::agreement(f64.start, f64.end, f32.end, lr),
                              g16 = adam_bound::agreement(f64.start, f32.end, f16.end, lr),
                              gb16 = adam_bound::agreement(f64.start, f16.end, b16.end, lr),
                              glr = adam_bound::agreement(f64.start, f16.end, f16_lr.end, lr);
  WARN("Adam bound measured (ratio, worst, weights apart by > lr/2 of " << f64.start.size() << "): FP32 vs FP64 "
       << g32.ratio << ", " << g32.worst << ", " << g32.flipped << "; FP16 vs FP32 " << g16.ratio << ", " << g16.worst
       << ", " << g16.flipped << "; FP16 vs BF16 " << gb16.ratio << ", " << gb16.worst << ", " << gb16.flipped
       << "; FP16 lr 5% off " << glr.ratio << "; bound " << adam_bound::kMaxRatio << ", reach " << reach);
  // Rounding alone, with room to spare (measured here: FP32/FP64 2e-7, FP16/FP32 0.0038,
  // FP16/BF16 0.0146): the GPU's FP16 rounds activations at the same points as the CPU's, so
  // GPU against CPU differs far less than FP16 against FP32, let alone against BF16 (the
  // coarsest pair, still at half the bound). No weight beyond the reach.
  for (const adam_bound::Agreement* g : {&g32, &g16, &gb16}) CHECK(g->worst <= reach * (1 + 1e-6));
  CHECK(g32.ratio <= 1e-3 / 100);  // the [cuda] test's FP32 bound, with room for a GPU's 100x
  CHECK(g16.ratio <= adam_bound::kMaxRatio / 4);
  CHECK(gb16.ratio <= adam_bound::kMaxRatio);
  // A learning rate 5% off moves every steadily-signed weight 5% further: the ratio shows it.
  CHECK(glr.ratio > adam_bound::kMaxRatio);
}
