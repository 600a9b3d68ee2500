// CPU reference element-wise kernels over raw pointers, templated over the storage type T:
// math in acc_t<T>, one rounding on store (as the GPU does). Loads and stores go through
// load_simd/store_simd so the loops vectorise for FP16 too.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/convert.h"
#include "kernels/element_math.h"
#include "kernels/numeric.h"
#include "kernels/optim_math.h"
#include "kernels/cpu/gelu_table.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// Large loops are split across threads; small ones are not worth waking them.
constexpr int64_t kParallelMin = 1 << 15;

// ReLU of FP16/BF16 on the bits: x > 0 exactly when, read as a signed 16-bit integer, the bits
// are positive (sign clear, not zero) and at most those of +inf (above are NaNs). The same
// results as widening (a positive value round-trips exactly; the rest give +0), but the
// integer compare and select vectorise with no conversion.
template <class T> constexpr uint16_t inf_bits16() { return std::is_same_v<T, half> ? 0x7C00 : 0x7F80; }
template <class T> inline bool positive16(uint16_t b) {
  return static_cast<int16_t>(b) > 0 && b <= inf_bits16<T>();
}

template <class T> void relu_forward(const T* x, T* y, int64_t n, Stream = nullptr) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    const auto* xb = reinterpret_cast<const uint16_t*>(x);
    auto* yb = reinterpret_cast<uint16_t*>(y);
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) yb[i] = positive16<T>(xb[i]) ? xb[i] : uint16_t(0);
    return;
  }
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = store_simd<T>(relu_fwd<acc_t<T>>(load_simd(x[i])));
}
template <class T> void relu_backward(const T* x, const T* gy, T* gx, int64_t n, Stream = nullptr) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    const auto* xb = reinterpret_cast<const uint16_t*>(x);
    const auto* gb = reinterpret_cast<const uint16_t*>(gy);
    auto* ob = reinterpret_cast<uint16_t*>(gx);
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) ob[i] = positive16<T>(xb[i]) ? gb[i] : uint16_t(0);
    return;
  }
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<acc_t<T>, float>) {
      // relu_bwd as a bit mask: compilers otherwise branch on the sign of x, and skip
      // widening gy when it is negative, which random data makes unpredictable (5x slower
      // for FP16). Same results: gy where x > 0, else +0 (also for a NaN/inf gy).
      const uint32_t keep = load_simd(x[i]) > 0.0f ? 0xFFFFFFFFu : 0u;
      gx[i] = store_simd<T>(bits_float(float_bits(load_simd(gy[i])) & keep));
    } else {
      gx[i] = from_acc<T>(relu_bwd<acc_t<T>>(x[i], gy[i]));
    }
  }
}
// Any unary op of kernels/element_math.h: y = Op::fwd(x), gx = Op::bwd(x, gy), in acc_t<T>.
// GELU on float data runs kernels/cpu/vector_math.h's vectorising form of the same function
// (libm's erf is one call per element), on FP16 and BF16 data its tables (gelu_table.h: the
// same bits); FP64 (gradient checks) keeps libm's.
template <class Op, class T> void unary_forward(const T* x, T* y, int64_t n, Stream = nullptr) {
  if constexpr (std::is_same_v<Op, GeluOp> && sizeof(T) == 2) {
    const uint16_t* table = gelu16_table<T>().forward;
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = T::from_bits(table[x[i].bits]);
  } else if constexpr (std::is_same_v<Op, GeluOp> && !std::is_same_v<T, double>) {
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = store_simd<T>(gelu_fwd_vec(load_simd(x[i])));
  } else {
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = from_acc<T>(Op::fwd(acc_t<T>(x[i])));
  }
}
template <class Op, class T> void unary_backward(const T* x, const T* gy, T* gx, int64_t n, Stream = nullptr) {
  if constexpr (std::is_same_v<Op, GeluOp> && sizeof(T) == 2) {
    const float* slope = gelu16_table<T>().slope;
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = store_simd<T>(load_simd(gy[i]) * slope[x[i].bits]);
  } else if constexpr (std::is_same_v<Op, GeluOp> && !std::is_same_v<T, double>) {
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = store_simd<T>(gelu_bwd_vec(load_simd(x[i]), load_simd(gy[i])));
  } else {
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = from_acc<T>(Op::bwd(acc_t<T>(x[i]), acc_t<T>(gy[i])));
  }
}
// y = a + b
template <class T> void add(const T* a, const T* b, T* y, int64_t n, Stream = nullptr) {
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = store_simd<T>(load_simd(a[i]) + load_simd(b[i]));
}
// y = s * x
template <class T> void scale(const T* x, double s, T* y, int64_t n, Stream = nullptr) {
  const acc_t<T> sa = static_cast<acc_t<T>>(s);
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = store_simd<T>(sa * load_simd(x[i]));
}
// In place, both: avg += weight * (w - avg); w = avg (kernels/optim_math.h average_step).
template <class T> void weight_average(T* avg, T* w, double weight, int64_t n, Stream = nullptr) {
  const acc_t<T> a = static_cast<acc_t<T>>(weight);
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    acc_t<T> v = acc_t<T>(avg[i]), x = acc_t<T>(w[i]);
    average_step(v, x, a);
    avg[i] = w[i] = from_acc<T>(v);
  }
}
// Conversion between storage types through float (double when either side is double).
template <class From, class To> void cast(const From* x, To* y, int64_t n, Stream = nullptr) {
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    // The two casts of every FP16 step (masters to compute copies, gradients back) take
    // the vectorising forms; the rest go through convert's one correct rounding.
    if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) y[i] = store_simd<half>(x[i]);
    else if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) y[i] = load_simd(x[i]);
    else y[i] = convert<To>(x[i]);
  }
}
// y = x * keep(first + i) / (1 - p); the same function serves forward and backward. `first`
// places these elements in a larger batch (a data-parallel rank's shard).
template <class T>
void dropout(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t first, Stream = nullptr) {
  const acc_t<T> inv_keep = acc_t<T>(1) / (acc_t<T>(1) - acc_t<T>(p));
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keep(seed, stream, first + static_cast<uint64_t>(i), p) ? from_acc<T>(acc_t<T>(x[i]) * inv_keep)
                                                                            : from_acc<T>(acc_t<T>(0));
}

// *out = sum of all elements in acc_t<T>, in index order.
template <class T> void sum(const T* x, int64_t n, acc_t<T>* out, Stream = nullptr) {
  acc_t<T> total = 0;
  for (int64_t i = 0; i < n; ++i) total += acc_t<T>(x[i]);
  *out = total;
}
// y[i] = *value rounded once to T (sum's backward; the CUDA twin reads value on the device).
template <class T> void fill_from_device(T* y, const acc_t<T>* value, int64_t n, Stream = nullptr) {
  const T v = from_acc<T>(*value);
  for (int64_t i = 0; i < n; ++i) y[i] = v;
}

}  // namespace kernels::cpu
