// CPU reference fused optimizer steps: one pass per parameter that reads the gradient in its
// storage type G, multiplies by 1/scale in P, updates the master and state in P, and writes
// the compute copy W (when the parameter has one).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/convert.h"
#include "kernels/cpu/threads.h"
#include "kernels/optim_math.h"
#include "kernels/quant_math.h"

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

// The gradient widened and the master narrowed in forms that vectorise: 16-bit types through
// load_simd/store_simd (the same bits as convert), the rest through convert.
template <class P, class G> P widen_grad(G g) {
  if constexpr (std::is_same_v<G, half> || std::is_same_v<G, bfloat16>) return static_cast<P>(load_simd(g));
  else return convert<P>(g);
}
template <class W, class P> W narrow_copy(P w) {
  if constexpr ((std::is_same_v<W, half> || std::is_same_v<W, bfloat16>) && std::is_same_v<P, float>)
    return store_simd<W>(w);
  else return convert<W>(w);
}

template <class G, class P, class W>
void sgd_step(int64_t n, const G* grad, P inv_scale, P* master, P* buf, W* compute_copy, bool first_step,
              const SgdConfig& c) {
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    sgd_update<P>(master[i], widen_grad<P>(grad[i]) * inv_scale, buf ? buf + i : nullptr, first_step, c);
    if (compute_copy) compute_copy[i] = narrow_copy<W>(master[i]);
  }
}

// One pass over 28 bytes a parameter (FP32 master and moments, 16-bit gradient and copy): at
// memory speed only when it vectorises. So each thread's range runs in a function of its own
// (not inlined: the arrays' restrict would be lost) on the coefficients in locals (read through
// the configuration in memory, they kept the loop scalar, at a third of the speed).
template <bool kCopy, bool kDecoupled, class G, class P, class W>
[[gnu::noinline]] void adam_range(int64_t i0, int64_t i1, const G* __restrict g, P inv_scale, P* __restrict w,
                                  P* __restrict m, P* __restrict v, W* __restrict copy, const AdamConfig& config) {
  const AdamCoefficients<P> k(config);  // locals, invariant in the loop
  for (int64_t i = i0; i < i1; ++i) {
    adam_update_as<kDecoupled, P>(w[i], widen_grad<P>(g[i]) * inv_scale, m[i], v[i], k);
    if constexpr (kCopy) copy[i] = narrow_copy<W>(w[i]);
  }
}

template <class G, class P, class W>
void adam_step(int64_t n, const G* grad, P inv_scale, P* master, P* m, P* v, W* compute_copy, const AdamConfig& c) {
#pragma omp parallel if (n > (1 << 15))
  {
    const int64_t threads = team_size(), me = team_rank();
    const int64_t i0 = n * me / threads, i1 = n * (me + 1) / threads;
    if (compute_copy) {
      if (c.decoupled) adam_range<true, true>(i0, i1, grad, inv_scale, master, m, v, compute_copy, c);
      else adam_range<true, false>(i0, i1, grad, inv_scale, master, m, v, compute_copy, c);
    } else {
      if (c.decoupled) adam_range<false, true>(i0, i1, grad, inv_scale, master, m, v, compute_copy, c);
      else adam_range<false, false>(i0, i1, grad, inv_scale, master, m, v, compute_copy, c);
    }
  }
}

// ---- compact optimizer state (--optimizer-state bf16 | int8) ----------------------------------
// The fused step works block by block: a block of state is widened to FP32, updated with the
// same formulas as above (kernels/optim_math.h), and narrowed again; int8 blocks get a fresh
// absmax first (kernels/quant_math.h). Each codec reads and writes one block.
struct Bf16State {
  bfloat16* p;
  void load(int64_t, int64_t at, int64_t len, float* out) const {
    for (int64_t j = 0; j < len; ++j) out[j] = convert<float>(p[at + j]);
  }
  void store(int64_t, int64_t at, int64_t len, const float* in) const {
    for (int64_t j = 0; j < len; ++j) p[at + j] = convert<bfloat16>(in[j]);
  }
};

template <bool Signed> struct Int8State {
  uint8_t* codes;
  float* absmax;  // one per kQuantBlock values
  void load(int64_t block, int64_t at, int64_t len, float* out) const {
    const float a = absmax[block];
    for (int64_t j = 0; j < len; ++j) out[j] = Signed ? decode_signed(codes[at + j], a) : decode_unsigned(codes[at + j], a);
  }
  void store(int64_t block, int64_t at, int64_t len, const float* in) const {
    float a = 0.0f;
    for (int64_t j = 0; j < len; ++j) a = std::max(a, std::fabs(in[j]));
    absmax[block] = a;
    for (int64_t j = 0; j < len; ++j)
      codes[at + j] = a > 0.0f ? (Signed ? encode_signed(in[j], a) : encode_unsigned(in[j], a)) : uint8_t(0);
  }
};
using Int8SignedState = Int8State<true>;
using Int8UnsignedState = Int8State<false>;

// Adam over compact state M (first moment) and V (second moment), FP32 masters.
template <class G, class W, class M, class V>
void adam_step_blocks(int64_t n, const G* grad, float inv_scale, float* master, M m, V v, W* compute_copy,
                      const AdamConfig& c) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * kQuantBlock, len = std::min(kQuantBlock, n - at);
    float mb[kQuantBlock], vb[kQuantBlock];
    m.load(b, at, len, mb);
    v.load(b, at, len, vb);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = at + j;
      adam_update<float>(master[i], convert<float>(grad[i]) * inv_scale, mb[j], vb[j], c);
      if (compute_copy) compute_copy[i] = convert<W>(master[i]);
    }
    m.store(b, at, len, mb);
    v.store(b, at, len, vb);
  }
}

// SGD with a compact momentum buffer B.
template <class G, class W, class B>
void sgd_step_blocks(int64_t n, const G* grad, float inv_scale, float* master, B buf, W* compute_copy,
                     bool first_step, const SgdConfig& c) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * kQuantBlock, len = std::min(kQuantBlock, n - at);
    float bb[kQuantBlock];
    buf.load(b, at, len, bb);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = at + j;
      sgd_update<float>(master[i], convert<float>(grad[i]) * inv_scale, bb + j, first_step, c);
      if (compute_copy) compute_copy[i] = convert<W>(master[i]);
    }
    buf.store(b, at, len, bb);
  }
}

}  // namespace kernels::cpu
