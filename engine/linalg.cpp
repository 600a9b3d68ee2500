// Cyclic Jacobi for symmetric matrices (engine/linalg.h): each rotation zeroes one
// off-diagonal pair; sweeps over all pairs until the off-diagonal mass is negligible.
#include "engine/linalg.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/error.h"

namespace engine {

SymmetricEigen symmetric_eigen(const std::vector<double>& a_in, int n) {
  ENGINE_CHECK(n > 0 && a_in.size() == static_cast<size_t>(n) * static_cast<size_t>(n),
               "symmetric_eigen: " << a_in.size() << " entries for a " << n << "x" << n << " matrix");
  std::vector<double> a = a_in, v(a.size(), 0.0);
  double norm2 = 0, largest = 0;
  for (double x : a) {
    ENGINE_CHECK(std::isfinite(x), "symmetric_eigen: the matrix holds " << x);
    norm2 += x * x;
    largest = std::max(largest, std::fabs(x));
  }
  auto at = [n](std::vector<double>& m, int i, int j) -> double& { return m[static_cast<size_t>(i) * n + j]; };
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j)
      ENGINE_CHECK(std::fabs(at(a, i, j) - at(a, j, i)) <= 1e-12 * largest,
                   "symmetric_eigen: the matrix is not symmetric at (" << i << ", " << j << ")");
  for (int i = 0; i < n; ++i) at(v, i, i) = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += 2 * at(a, p, q) * at(a, p, q);
    if (off <= 1e-30 * norm2) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = at(a, p, q);
        if (apq == 0) continue;
        // The rotation by t = tan(phi) with cot(2 phi) = (a_qq - a_pp) / (2 a_pq), the smaller
        // root, so |phi| <= pi/4 and the diagonal moves the least.
        const double theta = (at(a, q, q) - at(a, p, p)) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p and q: A R
          const double akp = at(a, k, p), akq = at(a, k, q);
          at(a, k, p) = c * akp - s * akq;
          at(a, k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p and q: R^T (A R)
          const double apk = at(a, p, k), aqk = at(a, q, k);
          at(a, p, k) = c * apk - s * aqk;
          at(a, q, k) = s * apk + c * aqk;
        }
        at(a, p, q) = at(a, q, p) = 0;  // zero by construction; not left to rounding
        for (int k = 0; k < n; ++k) {  // V R: the eigenvectors as columns
          const double vkp = at(v, k, p), vkq = at(v, k, q);
          at(v, k, p) = c * vkp - s * vkq;
          at(v, k, q) = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return at(a, i, i) < at(a, j, j); });
  SymmetricEigen r;
  r.values.resize(static_cast<size_t>(n));
  r.vectors.resize(a.size());
  for (int j = 0; j < n; ++j) {
    const int src = order[static_cast<size_t>(j)];
    r.values[static_cast<size_t>(j)] = at(a, src, src);
    int big = 0;
    for (int k = 1; k < n; ++k)
      if (std::fabs(at(v, k, src)) > std::fabs(at(v, big, src))) big = k;
    const double sign = at(v, big, src) < 0 ? -1.0 : 1.0;
    for (int k = 0; k < n; ++k) r.vectors[static_cast<size_t>(k) * n + j] = sign * at(v, k, src);
  }
  return r;
}

}  // namespace engine
