// Element-wise formulas shared by the CPU reference and the CUDA kernels, so both compute
// exactly the same expression. A is the accumulation type (float, or double for checks).
#pragma once

#include <cmath>

#include "kernels/hd.h"
#include "kernels/philox.h"

namespace kernels {

template <class A> ENGINE_HD A relu_fwd(A x) { return x > A(0) ? x : A(0); }
template <class A> ENGINE_HD A relu_bwd(A x, A gy) { return x > A(0) ? gy : A(0); }

// GELU with the exact erf form (PyTorch's default nn.GELU()).
template <class A> ENGINE_HD A gelu_fwd(A x) {
  return A(0.5) * x * (A(1) + erf_of(x * A(0.70710678118654752440)));
}
template <class A> ENGINE_HD A gelu_bwd(A x, A gy) {
  const A cdf = A(0.5) * (A(1) + erf_of(x * A(0.70710678118654752440)));
  const A pdf = exp_of(A(-0.5) * x * x) * A(0.39894228040143267794);  // 1/sqrt(2 pi)
  return gy * (cdf + x * pdf);
}

// Logistic sigmoid 1 / (1 + e^-x): e^-x overflows to inf for x < -88 in FP32, giving 0, the
// right limit. SiLU (swish) x * sigmoid(x), EfficientNet's activation.
template <class A> ENGINE_HD A sigmoid_fwd(A x) { return A(1) / (A(1) + exp_of(-x)); }
template <class A> ENGINE_HD A sigmoid_bwd(A x, A gy) {
  const A s = sigmoid_fwd(x);
  return gy * s * (A(1) - s);
}
template <class A> ENGINE_HD A silu_fwd(A x) { return x * sigmoid_fwd(x); }
template <class A> ENGINE_HD A silu_bwd(A x, A gy) {
  const A s = sigmoid_fwd(x);
  return gy * s * (A(1) + x * (A(1) - s));
}

// ---- unary element-wise ops, each one struct: the only place its formula lives --------------
// fwd(x) and bwd(x, gy) in the accumulation type A. kernels::cpu::unary_forward/backward and
// kernels::cuda::unary_forward/backward run any of them; the CUDA side is instantiated for every
// op in ENGINE_UNARY_OPS. A new element-wise op is a struct here, its name in that list, and
// its op function (with backward) in engine/ops.cpp.
struct GeluOp {
  template <class A> ENGINE_HD static A fwd(A x) { return gelu_fwd(x); }
  template <class A> ENGINE_HD static A bwd(A x, A gy) { return gelu_bwd(x, gy); }
};
struct SigmoidOp {
  template <class A> ENGINE_HD static A fwd(A x) { return sigmoid_fwd(x); }
  template <class A> ENGINE_HD static A bwd(A x, A gy) { return sigmoid_bwd(x, gy); }
};
struct SiluOp {
  template <class A> ENGINE_HD static A fwd(A x) { return silu_fwd(x); }
  template <class A> ENGINE_HD static A bwd(A x, A gy) { return silu_bwd(x, gy); }
};
#define ENGINE_UNARY_OPS(X) X(GeluOp) X(SigmoidOp) X(SiluOp)

// Dropout keeps element i when its uniform draw is >= p; the mask is a pure function of
// (seed, stream, i), so backward and the GPU recompute it instead of storing it.
ENGINE_HD bool dropout_keep(uint64_t seed, uint64_t stream, uint64_t i, float p) {
  return philox_uniform(seed, stream, i) >= p;
}

}  // namespace kernels
