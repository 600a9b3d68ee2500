// CPU reference fused optimizer steps: one pass per parameter that reads the gradient in its
// storage type G, multiplies by 1/scale in P, updates the master and state in P, and writes
// the compute copy W (when the parameter has one).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/convert.h"
#include "kernels/optim_math.h"

namespace kernels::cpu {

// True when every gradient element is finite (the found-inf check of loss scaling).
template <class G> bool all_finite(const G* g, int64_t n) {
  bool ok = true;
#pragma omp parallel for reduction(&& : ok) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(static_cast<double>(static_cast<float>(g[i])));
  return ok;
}
// 16-bit formats: finite unless the exponent field is all ones, tested on the bits (a loop
// that vectorises, where widening each value would not).
template <> inline bool all_finite<half>(const half* g, int64_t n) {
  uint32_t bad = 0;
#pragma omp parallel for reduction(| : bad) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((g[i].bits & 0x7c00u) == 0x7c00u);
  return bad == 0;
}
template <> inline bool all_finite<bfloat16>(const bfloat16* g, int64_t n) {
  uint32_t bad = 0;
#pragma omp parallel for reduction(| : bad) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((g[i].bits & 0x7f80u) == 0x7f80u);
  return bad == 0;
}
template <> inline bool all_finite<double>(const double* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(g[i])) return false;
  return true;
}

template <class G, class P, class W>
void sgd_step(int64_t n, const G* grad, P inv_scale, P* master, P* buf, W* compute_copy, bool first_step,
              const SgdConfig& c) {
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    sgd_update<P>(master[i], convert<P>(grad[i]) * inv_scale, buf ? buf + i : nullptr, first_step, c);
    if (compute_copy) compute_copy[i] = convert<W>(master[i]);
  }
}

template <class G, class P, class W>
void adam_step(int64_t n, const G* grad, P inv_scale, P* master, P* m, P* v, W* compute_copy, const AdamConfig& c) {
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    adam_update<P>(master[i], convert<P>(grad[i]) * inv_scale, m[i], v[i], c);
    if (compute_copy) compute_copy[i] = convert<W>(master[i]);
  }
}

}  // namespace kernels::cpu
