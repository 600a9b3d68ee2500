// Finite-difference gradient checking in FP64: compares the tape's gradients of
// L = sum(f(inputs) * seed) with central differences, element by element.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/random.h"

namespace testing {

using Fn = std::function<engine::Tensor(const std::vector<engine::Tensor>&)>;

// Inputs must be F64 CPU tensors; each gets requires_grad. Tolerance: with h = 1e-6 the
// truncation error of a central difference is ~h^2 = 1e-12 and the cancellation error in
// (L+ - L-) / 2h is ~1e-16 |L| / 2e-6 < 1e-10 |L|; rtol 1e-6 sits far above both yet
// catches any wrong term.
inline void gradcheck(const std::string& what, const Fn& f, std::vector<engine::Tensor> inputs,
                      double h = 1e-6, double rtol = 1e-6, double atol = 1e-8) {
  using engine::Tensor;
  for (auto& x : inputs) {
    REQUIRE(x.dtype() == engine::DType::F64);
    x.set_requires_grad(true);
  }
  Tensor seed;
  std::vector<double> seed_v;
  {
    engine::Tape tape;
    engine::TapeScope scope(tape);
    Tensor y = f(inputs);
    seed = engine::uniform(y.shape(), -1.0, 1.0, engine::DType::F64);
    seed_v = seed.to_vector();
    tape.backward(y, seed);
  }
  auto loss = [&]() {
    engine::NoGradScope no_grad;
    const std::vector<double> y = f(inputs).to_vector();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * seed_v[i];
    return l;
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    INFO(what << ": input " << k << " got no gradient");
    REQUIRE(x.grad().defined());
    const std::vector<double> analytic = x.grad().to_vector();
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double saved = p[i];
      p[i] = saved + h;
      const double lp = loss();
      p[i] = saved - h;
      const double lm = loss();
      p[i] = saved;
      const double numeric = (lp - lm) / (2 * h);
      const double err = std::fabs(analytic[i] - numeric);
      INFO(what << ": input " << k << " element " << i << " analytic " << analytic[i] << " numeric " << numeric);
      REQUIRE(err <= atol + rtol * std::fabs(numeric) + 1e-9 * std::fabs(lp));
    }
  }
}

inline engine::Tensor rand64(const engine::Shape& s, double lo = -1.0, double hi = 1.0) {
  return engine::uniform(s, lo, hi, engine::DType::F64);
}

}  // namespace testing
