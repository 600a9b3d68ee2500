// Golden values from an independent implementation: PyTorch's float64 results for conv2d, linear,
// max-pool, batch-norm, cross-entropy and SGD/Adam/AdamW steps (tests/data/golden/*.txt, written
// by tests/golden/make_fixtures.py), recomputed here by the engine in F64 and in F32.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "engine/tape.h"
#include "engine/tensor.h"
#ifndef ENGINE_GOLDEN_ON_CUDA
#include "engine/linalg.h"
#include "models/whitening.h"
#endif

// Compiled twice: here for the CPU, and by tests/cuda/test_cuda_golden.cpp with
// ENGINE_GOLDEN_ON_CUDA for the GPU, where the same fixtures check the CUDA kernels.
#ifdef ENGINE_GOLDEN_ON_CUDA
#define GOLDEN_TEST(name, tags) TEST_CASE("cuda " name, tags "[cuda]")
#else
#define GOLDEN_TEST(name, tags) TEST_CASE(name, tags)
#endif

namespace {

#ifdef ENGINE_GOLDEN_ON_CUDA
const engine::Device kGoldenDevice = engine::Device::cuda(0);
#else
const engine::Device kGoldenDevice = engine::Device::cpu();
#endif

using engine::DType;
using engine::Shape;
using engine::Tensor;
using Vec = std::vector<double>;

// ---- The fixture reader ----------------------------------------------------------------------
// Lines "name dtype dims... : values..." (no dims = one scalar); '#' lines are comments.

struct Array {
  std::string dtype;
  Shape shape;
  Vec values;
};

std::string fixture_path(const std::string& name) { return std::string(ENGINE_TEST_DATA_DIR) + "/golden/" + name + ".txt"; }

// Returns false with a reason instead of throwing, so the reader itself can be tested.
bool load_fixture(const std::string& path, std::map<std::string, Array>& out, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = "cannot open " + path + " (fixtures are committed; regenerate with tests/golden/make_fixtures.py)";
    return false;
  }
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + ":" + std::to_string(lineno);
    const size_t colon = line.find(" : ");
    if (colon == std::string::npos) return err = where + ": no ' : '", false;
    std::istringstream head(line.substr(0, colon));
    std::string name;
    Array a;
    head >> name >> a.dtype;
    if (name.empty() || (a.dtype != "f64" && a.dtype != "i32")) return err = where + ": bad name or dtype", false;
    for (long long d; head >> d;) a.shape.push_back(d);
    if (!head.eof()) return err = where + ": bad dims", false;
    // strtod: correctly rounded, so the 17-digit repr values come back exactly.
    const char* p = line.c_str() + colon + 3;
    for (char* end;; p = end) {
      const double v = std::strtod(p, &end);
      if (end == p) break;
      a.values.push_back(v);
    }
    while (*p == ' ') ++p;
    if (*p != '\0') return err = where + ": bad value near '" + std::string(p).substr(0, 20) + "'", false;
    if (static_cast<int64_t>(a.values.size()) != engine::shape_numel(a.shape))
      return err = where + ": " + std::to_string(a.values.size()) + " values for shape " + engine::shape_str(a.shape), false;
    out[name] = std::move(a);
  }
  if (out.empty()) return err = path + ": no arrays", false;
  return true;
}

class Fixture {
 public:
  explicit Fixture(const std::string& name) {
    std::string err;
    const bool ok = load_fixture(fixture_path(name), arrays_, err);
    INFO(err);
    REQUIRE(ok);  // a missing or malformed fixture fails the test, never skips it
  }
  bool has(const std::string& name) const { return arrays_.count(name) > 0; }
  const Array& get(const std::string& name) const {
    INFO("fixture array '" << name << "'");
    REQUIRE(has(name));
    return arrays_.at(name);
  }
  const Vec& values(const std::string& name) const { return get(name).values; }
  double scalar(const std::string& name) const { return values(name).at(0); }
  int64_t integer(const std::string& name) const { return static_cast<int64_t>(scalar(name)); }
  Tensor tensor(const std::string& name, DType dt) const {
    const Array& a = get(name);
    Tensor t = a.dtype == "i32" ? Tensor::from_ints(std::vector<int32_t>(a.values.begin(), a.values.end()), a.shape)
                                : Tensor::from_vector(a.values, a.shape, dt);
    return kGoldenDevice.is_cpu() ? t : t.to(kGoldenDevice);
  }
  Tensor leaf(const std::string& name, DType dt) const {
    Tensor t = tensor(name, dt);
    t.set_requires_grad(true);
    return t;
  }

 private:
  std::map<std::string, Array> arrays_;
};

// ---- Comparison ------------------------------------------------------------------------------

// The two precisions under test, each with its bound on err_i / (|want_i| + max_j |want_j|).
// The max term is there because an element that is a sum with cancellation (a conv gradient
// near zero) carries the absolute error of its terms, not a relative one.
//  F64: both sides are float64 (u = 1.1e-16) and differ only in summation order and formula
//       (e.g. Adam's eps placement); the longest sums here are ~100 terms of O(1), so the
//       difference is ~1e-14. 1e-10 leaves four orders of margin; a wrong term is ~1e-1 off.
//  F32: the inputs are rounded to float32 (u = 6e-8) and the arithmetic is float32 (batch-norm
//       and loss statistics too), so ~100-term sums drift by ~1e-6 at worst; 1e-5 still
//       catches any wrong term.
struct Mode {
  DType dt;
  double rtol;
  double unit;  // unit roundoff of dt
};
#ifdef ENGINE_GOLDEN_ON_CUDA
// On the GPU only FP32 (FP64 is CPU-only). cuDNN may pick Winograd or FFT algorithms whose
// transforms add tens of ulps relative to the magnitude of the sum: 1e-4, still far below
// the ~1e-1 of a wrong term.
const Mode kModes[] = {{DType::F32, 1e-4, std::ldexp(1.0, -24)}};
#else
const Mode kModes[] = {{DType::F64, 1e-10, std::ldexp(1.0, -53)}, {DType::F32, 1e-5, std::ldexp(1.0, -24)}};
#endif

// Number of elements with |got - want| > rtol * (|want_i| + max|want|) + atol; reports the first few.
int count_misses(const Vec& got, const Vec& want, double rtol, double atol, std::string& report) {
  if (got.size() != want.size()) {
    report = "size " + std::to_string(got.size()) + " != reference size " + std::to_string(want.size());
    return static_cast<int>(std::max(got.size(), want.size()));
  }
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  std::ostringstream os;
  os.precision(17);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * (std::fabs(want[i]) + scale) + atol;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 4)
      os << "[" << i << "] = " << got[i] << ", PyTorch " << want[i] << ", |diff| " << std::fabs(got[i] - want[i])
         << " > tol " << tol << "\n";
  }
  report = os.str();
  return bad;
}

void expect_close(const std::string& what, const Tensor& got, const Array& want, double rtol, double atol = 0) {
  INFO(what << ": engine " << got.desc() << ", fixture " << engine::shape_str(want.shape));
  CHECK(got.shape() == want.shape);
  std::string report;
  const int bad = count_misses(got.to_vector(), want.values, rtol, atol, report);
  INFO(report);
  CHECK(bad == 0);
}

[[maybe_unused]] void expect_values(const std::string& what, const Vec& got, const Vec& want, double rtol) {
  std::string report;
  const int bad = count_misses(got, want, rtol, 0, report);
  INFO(what << ":\n" << report);
  CHECK(bad == 0);
}

// Runs f under a tape and back-propagates the fixture's gout.
template <class F> Tensor forward_backward(const Tensor& gout, F f) {
  engine::Tape tape;
  engine::TapeScope scope(tape);
  Tensor y = f();
  tape.backward(y, gout);
  return y;
}

const char* dtype_str(DType dt) { return dt == DType::F64 ? "f64" : "f32"; }

Tensor run_conv(const Fixture& f, DType dt, Tensor& x, Tensor& w, Tensor& b) {
  x = f.leaf("x", dt);
  w = f.leaf("w", dt);
  b = f.has("b") ? f.leaf("b", dt) : Tensor();
  const int64_t groups = f.has("groups") ? f.integer("groups") : 1;
  return forward_backward(f.tensor("gout", dt),
                          [&] { return engine::conv2d(x, w, b, f.integer("stride"), f.integer("pad"), groups); });
}

}  // namespace

GOLDEN_TEST("golden: conv2d matches PyTorch in values and gradients (NHWC/KRSC)", "[golden][conv]") {
  for (const char* name : {"conv_3x3_s1_p1_bias", "conv_3x3_s2_p1_nobias", "conv_5x5_s1_p2_bias", "conv_1x1_s2_nobias",
                           "conv_depthwise_3x3_s1_p1_bias", "conv_depthwise_5x5_s2_p2_nobias",
                           "conv_groups2_3x3_s1_p1_bias"}) {
    const Fixture f(name);
    for (const Mode& m : kModes) {
      INFO(name << " in " << dtype_str(m.dt));
      Tensor x, w, b;
      const Tensor y = run_conv(f, m.dt, x, w, b);
      expect_close("out", y, f.get("out"), m.rtol);
      expect_close("gx", x.grad(), f.get("gx"), m.rtol);
      expect_close("gw", w.grad(), f.get("gw"), m.rtol);
      if (b.defined()) expect_close("gb", b.grad(), f.get("gb"), m.rtol);
    }
  }
}

GOLDEN_TEST("golden: SiLU and sigmoid match PyTorch (FP32 math for 16-bit data)", "[golden]") {
  for (const char* name : {"silu", "sigmoid"}) {
    const Fixture f(name);
    for (const Mode& m : kModes) {
      INFO(name << " in " << dtype_str(m.dt));
      Tensor x = f.leaf("x", m.dt);
      const Tensor y = forward_backward(f.tensor("gout", m.dt), [&] {
        return std::string(name) == "silu" ? engine::silu(x) : engine::sigmoid(x);
      });
      expect_close("out", y, f.get("out"), m.rtol);
      expect_close("gx", x.grad(), f.get("gx"), m.rtol);
    }
  }
}

GOLDEN_TEST("golden: the channel gate matches PyTorch's broadcast multiply", "[golden]") {
  const Fixture f("channel_gate");
  for (const Mode& m : kModes) {
    INFO(dtype_str(m.dt));
    Tensor x = f.leaf("x", m.dt), g = f.leaf("g", m.dt);
    const Tensor y = forward_backward(f.tensor("gout", m.dt), [&] { return engine::channel_gate(x, g); });
    expect_close("out", y, f.get("out"), m.rtol);
    expect_close("gx", x.grad(), f.get("gx"), m.rtol);
    expect_close("gg", g.grad(), f.get("gg"), m.rtol);
  }
}

GOLDEN_TEST("golden: linear matches PyTorch", "[golden]") {
  const Fixture f("linear_bias");
  for (const Mode& m : kModes) {
    INFO(dtype_str(m.dt));
    Tensor x = f.leaf("x", m.dt), w = f.leaf("w", m.dt), b = f.leaf("b", m.dt);
    const Tensor y = forward_backward(f.tensor("gout", m.dt), [&] { return engine::linear(x, w, b); });
    expect_close("out", y, f.get("out"), m.rtol);
    expect_close("gx", x.grad(), f.get("gx"), m.rtol);
    expect_close("gw", w.grad(), f.get("gw"), m.rtol);
    expect_close("gb", b.grad(), f.get("gb"), m.rtol);
  }
}

GOLDEN_TEST("golden: max_pool2d matches PyTorch", "[golden][pool]") {
  for (const char* name : {"maxpool_k2_s2", "maxpool_k3_s2_p1"}) {
    const Fixture f(name);
    for (const Mode& m : kModes) {
      INFO(name << " in " << dtype_str(m.dt));
      Tensor x = f.leaf("x", m.dt);
      const Tensor y = forward_backward(f.tensor("gout", m.dt), [&] {
        return engine::max_pool2d(x, f.integer("kernel"), f.integer("stride"), f.integer("pad"));
      });
      expect_close("out", y, f.get("out"), m.rtol);
      expect_close("gx", x.grad(), f.get("gx"), m.rtol);
    }
  }
}

GOLDEN_TEST("golden: batch_norm matches PyTorch in training and eval mode with running statistics",
          "[golden][bn]") {
  for (const char* name : {"batchnorm_train_nhwc", "batchnorm_eval_nhwc", "batchnorm_train_2d"}) {
    const Fixture f(name);
    for (const Mode& m : kModes) {
      INFO(name << " in " << dtype_str(m.dt));
      // Parameters and statistics are F32 for F32 x, F64 for F64 x (the engine's rule).
      Tensor x = f.leaf("x", m.dt), gamma = f.leaf("gamma", m.dt), beta = f.leaf("beta", m.dt);
      Tensor rm = f.tensor("running_mean", m.dt), rv = f.tensor("running_var", m.dt);
      const Tensor y = forward_backward(f.tensor("gout", m.dt), [&] {
        return engine::batch_norm(x, gamma, beta, rm, rv, f.integer("training") != 0, f.scalar("momentum"), f.scalar("eps"));
      });
      expect_close("out", y, f.get("out"), m.rtol);
      expect_close("gx", x.grad(), f.get("gx"), m.rtol);
      expect_close("ggamma", gamma.grad(), f.get("ggamma"), m.rtol);
      expect_close("gbeta", beta.grad(), f.get("gbeta"), m.rtol);
      expect_close("running_mean", rm, f.get("running_mean_out"), m.rtol);
      expect_close("running_var", rv, f.get("running_var_out"), m.rtol);
    }
  }
}

GOLDEN_TEST("golden: cross_entropy matches PyTorch with and without label smoothing", "[golden][loss]") {
  for (const char* name : {"cross_entropy_ls0", "cross_entropy_ls0.1"}) {
    const Fixture f(name);
    for (const Mode& m : kModes) {
      INFO(name << " in " << dtype_str(m.dt));
      Tensor logits = f.leaf("logits", m.dt);
      const Tensor labels = f.tensor("labels", DType::I32);
      const Tensor loss = forward_backward(f.tensor("gout", m.dt), [&] {
        return engine::cross_entropy(logits, labels, f.scalar("smoothing"));
      });
      expect_close("loss", loss, f.get("loss"), m.rtol);
      expect_close("glogits", logits.grad(), f.get("glogits"), m.rtol);
    }
  }
}

GOLDEN_TEST("golden: cross_entropy summed over the batch (airbench's loss) matches PyTorch", "[golden][loss]") {
  const Fixture f("cross_entropy_sum_ls0.2");
  for (const Mode& m : kModes) {
    INFO("in " << dtype_str(m.dt));
    Tensor logits = f.leaf("logits", m.dt);
    const Tensor labels = f.tensor("labels", DType::I32);
    const Tensor loss = forward_backward(f.tensor("gout", m.dt), [&] {
      return engine::cross_entropy(logits, labels, f.scalar("smoothing"), engine::Reduction::Sum);
    });
    expect_close("loss", loss, f.get("loss"), m.rtol);
    expect_close("glogits", logits.grad(), f.get("glogits"), m.rtol);
  }
}

#ifndef ENGINE_GOLDEN_ON_CUDA  // host-only FP64 math: nothing of it runs on a GPU
GOLDEN_TEST("golden: the Jacobi eigen-decomposition matches torch.linalg.eigh", "[golden][linalg]") {
  const Fixture f("eigh_12x12");
  const engine::SymmetricEigen e = engine::symmetric_eigen(f.values("a"), 12);
  // Both sides are float64 with backward errors ~1e-15 |A|; the eigenvectors' error is that
  // over the smallest gap between eigenvalues (here above 0.01 of |A| ~ 1): 1e-12 has margin,
  // a wrong rotation is off by O(1).
  expect_values("eigenvalues", e.values, f.values("values"), 1e-12);
  expect_values("eigenvectors", e.vectors, f.values("vectors"), 1e-11);
}

GOLDEN_TEST("golden: the whitening layer's covariance and filters match PyTorch's float64", "[golden][linalg]") {
  const Fixture f("whitening_2x2");
  const Array& img = f.get("images");
  std::vector<uint8_t> px(img.values.begin(), img.values.end());
  kernels::AugmentConfig norm;
  for (int c = 0; c < 3; ++c) {
    norm.scale[c] = static_cast<float>(f.values("scale")[c]);  // float32 values, exactly
    norm.shift[c] = static_cast<float>(f.values("shift")[c]);
    REQUIRE(double(norm.scale[c]) == f.values("scale")[c]);
  }
  const std::vector<double> cov = models::patch_covariance(px.data(), 4, 6, 5, 3, 2, norm);
  expect_values("covariance", cov, f.values("covariance"), 1e-13);
  const engine::SymmetricEigen e = engine::symmetric_eigen(cov, 12);
  expect_values("eigenvalues", e.values, f.values("values"), 1e-12);
  // The closest eigenvalues here are 0.023 apart: 1e-10 of the filters' scale is margin.
  expect_values("filters", models::whitening_filters(e, f.scalar("eps")), f.values("filters"), 1e-10);
}
#endif

namespace {

// Two parameters (w, b) whose value is their master, like a module in F32 (or F64) mode.
engine::ParamPtr make_param(const Fixture& f, const std::string& name, DType dt) {
  auto p = std::make_shared<engine::Parameter>();
  p->name = name;
  p->master = f.leaf(name + "_in", dt);
  p->value = p->master;
  return p;
}

// Two steps with the fixture's gradients; after each, the state and the weights' change from
// the start. The change, not the weight itself: Adam moves a weight of O(1) by ~1e-3, which a
// comparison relative to the weight would hardly see. atol covers the master's own rounding
// (start and two steps, each <= u |w|) that the change inherits in F32.
void run_optimizer(const Fixture& f, const Mode& m, engine::Optimizer& opt, const std::vector<engine::ParamPtr>& ps,
                   const std::vector<std::string>& state_names,
                   const std::function<Tensor(size_t param, const std::string& state)>& state) {
  for (int step = 1; step <= 2; ++step) {
    const std::string s = std::to_string(step);
    for (auto& p : ps) p->value.set_grad(f.tensor(p->name + "_grad" + s, m.dt));
    REQUIRE(opt.step() == engine::StepResult::Applied);
    for (size_t i = 0; i < ps.size(); ++i) {
      const std::string& n = ps[i]->name;
      INFO("after step " << step << ", parameter " << n);
      const Vec& w0 = f.values(n + "_in");
      const Array& want = f.get(n + "_step" + s);
      Vec got = ps[i]->master.to_vector();
      Array want_delta = want;
      double wmax = 0;
      for (size_t j = 0; j < got.size() && j < w0.size(); ++j) {
        got[j] -= w0[j];
        want_delta.values[j] -= w0[j];
        wmax = std::max(wmax, std::fabs(w0[j]));
      }
      CHECK(ps[i]->master.shape() == want.shape);
      std::string report;
      const int bad = count_misses(got, want_delta.values, m.rtol, 4 * m.unit * wmax, report);
      INFO("weight change: " << report);
      CHECK(bad == 0);
      for (const std::string& sn : state_names) expect_close(sn, state(i, sn), f.get(n + "_" + sn + s), m.rtol);
    }
  }
  CHECK(opt.steps() == 2);
}

}  // namespace

GOLDEN_TEST("golden: SGD with momentum and weight decay matches torch.optim.SGD over two steps", "[golden][optim]") {
  const Fixture f("sgd_momentum");
  for (const Mode& m : kModes) {
    INFO(dtype_str(m.dt));
    std::vector<engine::ParamPtr> ps = {make_param(f, "w", m.dt), make_param(f, "b", m.dt)};
    engine::SGD opt(ps, 0.1, 0.9, 5e-4, /*nesterov=*/false, /*dampening=*/0.0);
    run_optimizer(f, m, opt, ps, {"momentum_buffer"}, [&](size_t i, const std::string&) { return opt.momentum_buffers[i]; });
  }
}

GOLDEN_TEST("golden: Adam and AdamW match torch.optim over two steps (bias correction included)", "[golden][optim]") {
  for (const bool decoupled : {false, true}) {
    const Fixture f(decoupled ? "adamw" : "adam");
    for (const Mode& m : kModes) {
      INFO((decoupled ? "AdamW" : "Adam") << " in " << dtype_str(m.dt));
      std::vector<engine::ParamPtr> ps = {make_param(f, "w", m.dt), make_param(f, "b", m.dt)};
      engine::Adam opt(ps, 1e-3, 0.9, 0.999, 1e-8, decoupled ? 1e-2 : 0.0, decoupled);
      run_optimizer(f, m, opt, ps, {"exp_avg", "exp_avg_sq"}, [&](size_t i, const std::string& sn) {
        return sn == "exp_avg" ? opt.exp_avg[i] : opt.exp_avg_sq[i];
      });
    }
  }
}

#ifndef ENGINE_GOLDEN_ON_CUDA  // checks the checker: once, on the CPU, is enough
GOLDEN_TEST("golden: the checks themselves fail on a missing fixture or a slightly wrong result", "[golden]") {
  std::map<std::string, Array> arrays;
  std::string err;
  CHECK_FALSE(load_fixture(fixture_path("no_such_case"), arrays, err));
  CHECK(err.find("cannot open") != std::string::npos);

  // An error of 1e-8 of the largest output (far below anything a loss curve would show) must
  // be caught in F64, and 1e-4 in F32.
  const Fixture f("conv_3x3_s1_p1_bias");
  const Vec& want = f.values("out");
  for (const Mode& m : kModes) {
    INFO(dtype_str(m.dt));
    Tensor x, w, b;
    Vec got = run_conv(f, m.dt, x, w, b).to_vector();
    std::string report;
    REQUIRE(count_misses(got, want, m.rtol, 0, report) == 0);
    const size_t j = std::max_element(want.begin(), want.end(), [](double a, double c) { return std::fabs(a) < std::fabs(c); }) -
                     want.begin();
    got[j] += (m.dt == DType::F64 ? 1e-8 : 1e-4) * std::fabs(want[j]);
    CHECK(count_misses(got, want, m.rtol, 0, report) == 1);
  }
}
#endif
