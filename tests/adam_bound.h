// How far two Adam runs from the same start may drift apart by rounding alone, and the statistic
// that still tells a wrong learning rate: tests/cuda/test_cuda_train.cpp judges the GPU against
// the CPU with it; tests/test_optim.cpp measures it on the CPU, where the answer is known.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace adam_bound {

// The most Adam (no weight decay) can move a weight in `steps` steps, in units of lr. Its step
// is lr * m^ / (sqrt(v^) + eps), m_t = (1-b1) sum_k b1^(t-k) g_k, v_t = (1-b2) sum_k b2^(t-k) g_k^2;
// Cauchy-Schwarz on b1^j g = (b1^j / b2^(j/2)) (b2^(j/2) g) gives, whatever the gradients,
//   |m^_t| / sqrt(v^_t) <= A_t = (1-b1)/(1-b1^t) sqrt((1-b2^t)/(1-b2)) sqrt(sum_{j<t} (b1^2/b2)^j),
// A_1 = 1 and A_2 = 1.0014 for b1 = 0.9, b2 = 0.999 (equality for some gradient sequences).
inline double reach(int steps, double beta1, double beta2) {
  double r = 0;
  for (int t = 1; t <= steps; ++t) {
    double s = 0;
    for (int j = 0; j < t; ++j) s += std::pow(beta1 * beta1 / beta2, j);
    r += (1 - beta1) / (1 - std::pow(beta1, t)) * std::sqrt((1 - std::pow(beta2, t)) / (1 - beta2)) * std::sqrt(s);
  }
  return r;
}

// Adam's step is about lr whatever the size of the gradient, so a gradient that is zero up to
// rounding can step +lr in one run and -lr in the other (the GPU rounds a biased convolution
// twice, the CPU once): from the same start a weight may differ by 2 * lr * reach, 4.0e-3 for
// 2 steps at lr 1e-3, far above FP16's 5e-3 of the largest weight (0.19 in simplecnn: 9.6e-4).
// That is every weight's bound; no smaller one holds for all. Alone it passes a wrong learning
// rate (2x on one side: 2e-3 apart), so the weights together must agree too: the ratio
// sum |a - b| / sum |a - start|. A weight whose gradients keep their signs takes the same steps
// in both runs but for lr, so lr k times too large in one makes the ratio |k - 1| (0.05 at 5%
// off); a weight that flips adds at most 2 * lr * reach. At most kMaxRatio: with simplecnn's
// moves (527,000 lr in all) about 4,000 weights (0.7%) may flip.
constexpr double kMaxRatio = 0.03;

struct Agreement {
  double worst = 0;    // the largest |a - b|
  double ratio = 0;    // sum |a - b| / sum |a - start|
  size_t flipped = 0;  // weights apart by more than half a step (lr / 2)
};

inline Agreement agreement(const std::vector<double>& start, const std::vector<double>& a, const std::vector<double>& b,
                           double lr) {
  Agreement g;
  double apart = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    g.worst = std::max(g.worst, d);
    g.flipped += d > 0.5 * lr;
    apart += d;
    moved += std::fabs(a[i] - start[i]);
  }
  g.ratio = moved > 0 ? apart / moved : INFINITY;  // nothing moved: no agreement to claim
  return g;
}

}  // namespace adam_bound
