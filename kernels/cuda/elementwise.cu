// CUDA element-wise kernels: grid-stride loops, 16-byte packed loads/stores when every
// pointer is 16-byte aligned (the tail of n % pack elements is done element by element in
// the same launch), element-by-element otherwise. Math in acc_t<T> through the same
// ENGINE_HD formulas as the CPU reference.
#include "kernels/cuda/elementwise.h"

#include <cuda_runtime.h>

#include "kernels/convert.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/element_math.h"
#include "kernels/optim_math.h"
#include "kernels/philox.h"

namespace kernels::cuda {

using detail::aligned16;
using detail::grid_for;
using detail::kBlock;
using detail::load_pack;
using detail::Pack;
using detail::store_pack;

namespace {

// ---- generic maps ------------------------------------------------------------------------

template <int N, class F, class Out, class In>
__global__ void __launch_bounds__(kBlock) map1_kernel(int64_t n, F f, Out* y, const In* x) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (N > 1) {
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<In, N> in = load_pack<In, N>(x + p * N);
      Pack<Out, N> out;
#pragma unroll
      for (int j = 0; j < N; ++j) out.v[j] = f(p * N + j, in.v[j]);
      store_pack<Out, N>(y + p * N, out);
    }
    done = packs * N;
  }
  for (int64_t i = done + tid; i < n; i += stride) y[i] = f(i, x[i]);
}

template <int N, class F, class Out, class In>
__global__ void __launch_bounds__(kBlock) map2_kernel(int64_t n, F f, Out* y, const In* a, const In* b) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (N > 1) {
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<In, N> va = load_pack<In, N>(a + p * N);
      const Pack<In, N> vb = load_pack<In, N>(b + p * N);
      Pack<Out, N> out;
#pragma unroll
      for (int j = 0; j < N; ++j) out.v[j] = f(va.v[j], vb.v[j]);
      store_pack<Out, N>(y + p * N, out);
    }
    done = packs * N;
  }
  for (int64_t i = done + tid; i < n; i += stride) y[i] = f(a[i], b[i]);
}

template <class In, class Out> constexpr int pack_elems() {
  return static_cast<int>(16 / (sizeof(In) < sizeof(Out) ? sizeof(In) : sizeof(Out)));
}

template <class F, class Out, class In>
void launch_map1(int64_t n, F f, Out* y, const In* x, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int N = pack_elems<In, Out>();
  if (aligned16(x) && aligned16(y) && n >= N) {
    map1_kernel<N><<<grid_for((n + N - 1) / N), kBlock, 0, s>>>(n, f, y, x);
  } else {
    map1_kernel<1><<<grid_for(n), kBlock, 0, s>>>(n, f, y, x);
  }
  CHECK_LAUNCH();
}

template <class F, class Out, class In>
void launch_map2(int64_t n, F f, Out* y, const In* a, const In* b, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int N = pack_elems<In, Out>();
  if (aligned16(a) && aligned16(b) && aligned16(y) && n >= N) {
    map2_kernel<N><<<grid_for((n + N - 1) / N), kBlock, 0, s>>>(n, f, y, a, b);
  } else {
    map2_kernel<1><<<grid_for(n), kBlock, 0, s>>>(n, f, y, a, b);
  }
  CHECK_LAUNCH();
}

// ---- the functors (device code; the formulas are the CPU's) --------------------------------

template <class T> struct ReluFwd {
  __device__ T operator()(int64_t, T x) const { return from_acc<T>(relu_fwd<acc_t<T>>(acc_t<T>(x))); }
};
template <class T> struct ReluBwd {
  __device__ T operator()(T x, T gy) const { return from_acc<T>(relu_bwd<acc_t<T>>(acc_t<T>(x), acc_t<T>(gy))); }
};
template <class Op, class T> struct UnaryFwd {
  __device__ T operator()(int64_t, T x) const { return from_acc<T>(Op::fwd(acc_t<T>(x))); }
};
template <class Op, class T> struct UnaryBwd {
  __device__ T operator()(T x, T gy) const { return from_acc<T>(Op::bwd(acc_t<T>(x), acc_t<T>(gy))); }
};
template <class T> struct AddF {
  __device__ T operator()(T a, T b) const { return from_acc<T>(acc_t<T>(a) + acc_t<T>(b)); }
};
template <class T> struct ScaleF {
  acc_t<T> s;
  __device__ T operator()(int64_t, T x) const { return from_acc<T>(s * acc_t<T>(x)); }
};
template <class From, class To> struct CastF {
  __device__ To operator()(int64_t, From x) const { return convert<To>(x); }
};

// ---- dropout: one Philox block feeds 4 consecutive elements --------------------------------
// Global element k = first + i uses word k % 4 of philox_block(seed, stream, k / 4): exactly
// what kernels::dropout_keep computes element by element, with a quarter of the rounds.

template <class T>
__global__ void __launch_bounds__(kBlock) dropout_kernel(const T* x, T* y, int64_t n, float p, acc_t<T> inv_keep,
                                                         uint64_t seed, uint64_t rs, uint64_t first) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint64_t g0 = first / 4;
  const int64_t groups = static_cast<int64_t>((first + static_cast<uint64_t>(n) + 3) / 4 - g0);
  for (int64_t gg = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; gg < groups; gg += stride) {
    const uint64_t g = g0 + static_cast<uint64_t>(gg);
    uint32_t r[4];
    philox_block(seed, rs, g, r);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = static_cast<int64_t>(g * 4 + j - first);  // wraps negative before `first`
      if (g * 4 + j >= first && i < n) {
        const bool keep = uniform_from_u32(r[j]) >= p;
        y[i] = keep ? from_acc<T>(acc_t<T>(x[i]) * inv_keep) : from_acc<T>(acc_t<T>(0));
      }
    }
  }
}

// ---- fill ------------------------------------------------------------------------------------

template <int N, class T> __global__ void __launch_bounds__(kBlock) fill_kernel(T* y, T v, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (N > 1) {
    Pack<T, N> pk;
#pragma unroll
    for (int j = 0; j < N; ++j) pk.v[j] = v;
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) store_pack<T, N>(y + p * N, pk);
    done = packs * N;
  }
  for (int64_t i = done + tid; i < n; i += stride) y[i] = v;
}

// ---- finiteness ------------------------------------------------------------------------------

template <class T> __device__ __forceinline__ bool nonfinite(T v) { return !isfinite(v); }
template <> __device__ __forceinline__ bool nonfinite<half>(half v) { return (v.bits & 0x7c00u) == 0x7c00u; }
template <> __device__ __forceinline__ bool nonfinite<bfloat16>(bfloat16 v) {
  return (v.bits & 0x7f80u) == 0x7f80u;
}

template <int N, class T>
__global__ void __launch_bounds__(kBlock) nonfinite_kernel(const T* x, int64_t n, int* found_inf) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool bad = false;
  int64_t done = 0;
  if constexpr (N > 1) {
    const int64_t packs = n / N;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<T, N> pk = load_pack<T, N>(x + p * N);
#pragma unroll
      for (int j = 0; j < N; ++j) bad |= nonfinite(pk.v[j]);
    }
    done = packs * N;
  }
  for (int64_t i = done + tid; i < n; i += stride) bad |= nonfinite(x[i]);
  // Every thread of the (full) warp reaches the vote; one store per warp that saw a bad value.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *found_inf = 1;
}

// ---- sum -------------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kBlock) sum_partial_kernel(const T* x, int64_t n, acc_t<T>* partial) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  A s = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) s += A(x[i]);
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <class A> __global__ void __launch_bounds__(kBlock) sum_final_kernel(const A* partial, int count, A* out) {
  __shared__ A scratch[32];
  A s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

// ---- row bias and column sums ------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kBlock) add_row_bias_kernel(int64_t n, int64_t cols, const T* bias, T* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = from_acc<T>(acc_t<T>(y[i]) + acc_t<T>(bias[i % cols]));
}

// Block (32, 8): 32 consecutive columns (coalesced along a row) x 8 rows; the y-blocks split
// the rows into gridDim.y interleaved groups. partial[g * cols + c] = the group's sum.
template <class T>
__global__ void __launch_bounds__(kBlock)
    column_sum_partial_kernel(int64_t rows, int64_t cols, const T* x, acc_t<T>* partial) {
  using A = acc_t<T>;
  __shared__ A sh[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  A s = 0;
  if (col < cols) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * 8)
      s += A(x[r * cols + col]);
  }
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    A t = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) t += sh[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + col] = t;
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    column_sum_final_kernel(int64_t cols, int groups, const acc_t<T>* partial, T* out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  acc_t<T> t = 0;
  for (int g = 0; g < groups; ++g) t += partial[static_cast<int64_t>(g) * cols + c];
  out[c] = from_acc<T>(t);
}

}  // namespace

// ---- public entry points ---------------------------------------------------------------------

template <class T> void relu_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launch_map1(n, ReluFwd<T>{}, y, x, s);
}
template <class T> void relu_backward(const T* x, const T* gy, T* gx, int64_t n, cudaStream_t s) {
  launch_map2(n, ReluBwd<T>{}, gx, x, gy, s);
}
template <class Op, class T> void unary_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  launch_map1(n, UnaryFwd<Op, T>{}, y, x, s);
}
template <class Op, class T> void unary_backward(const T* x, const T* gy, T* gx, int64_t n, cudaStream_t s) {
  launch_map2(n, UnaryBwd<Op, T>{}, gx, x, gy, s);
}
template <class T> void add(const T* a, const T* b, T* y, int64_t n, cudaStream_t s) {
  launch_map2(n, AddF<T>{}, y, a, b, s);
}
template <class T> void scale(const T* x, double sc, T* y, int64_t n, cudaStream_t s) {
  launch_map1(n, ScaleF<T>{static_cast<acc_t<T>>(sc)}, y, x, s);
}
template <class From, class To> void cast(const From* x, To* y, int64_t n, cudaStream_t s) {
  launch_map1(n, CastF<From, To>{}, y, x, s);
}

template <class T>
__global__ void __launch_bounds__(kBlock) weight_average_kernel(T* avg, T* w, acc_t<T> weight, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc_t<T> v = acc_t<T>(avg[i]), x = acc_t<T>(w[i]);
    average_step(v, x, weight);
    avg[i] = w[i] = from_acc<T>(v);
  }
}
template <class T> void weight_average(T* avg, T* w, double weight, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  weight_average_kernel<T><<<grid_for(n), kBlock, 0, s>>>(avg, w, static_cast<acc_t<T>>(weight), n);
  CHECK_LAUNCH();
}

template <class T>
void dropout(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t rng_stream, uint64_t first,
             cudaStream_t s) {
  if (n <= 0) return;
  ENGINE_CHECK(p >= 0.f && p <= 1.f, "dropout: p = " << p << " must be in [0, 1]");
  // The same expression as the CPU, evaluated on the host once: IEEE division either way.
  const acc_t<T> inv_keep = acc_t<T>(1) / (acc_t<T>(1) - acc_t<T>(p));
  dropout_kernel<T><<<grid_for((n + 3) / 4 + 1), kBlock, 0, s>>>(x, y, n, p, inv_keep, seed, rng_stream, first);
  CHECK_LAUNCH();
}

template <class T>
__global__ void __launch_bounds__(kBlock) fill_from_device_kernel(T* y, const acc_t<T>* value, int64_t n) {
  const T v = convert<T>(*value);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = v;
}

template <class T> void fill_from_device(T* y, const acc_t<T>* value, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  fill_from_device_kernel<T><<<grid_for(n), kBlock, 0, s>>>(y, value, n);
  CHECK_LAUNCH();
}

template <class T> void fill(T* y, double value, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const T v = convert<T>(value);
  constexpr int N = static_cast<int>(16 / sizeof(T));
  if (aligned16(y) && n >= N) fill_kernel<N, T><<<grid_for((n + N - 1) / N), kBlock, 0, s>>>(y, v, n);
  else fill_kernel<1, T><<<grid_for(n), kBlock, 0, s>>>(y, v, n);
  CHECK_LAUNCH();
}

void zero(void* p, size_t bytes, cudaStream_t s) {
  if (bytes) CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, s));
}

template <class T> void all_finite(const T* x, int64_t n, int* found_inf, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int N = static_cast<int>(16 / sizeof(T));
  if (aligned16(x) && n >= N) nonfinite_kernel<N, T><<<grid_for((n + N - 1) / N), kBlock, 0, s>>>(x, n, found_inf);
  else nonfinite_kernel<1, T><<<grid_for(n), kBlock, 0, s>>>(x, n, found_inf);
  CHECK_LAUNCH();
}

template <class T> void sum(const T* x, int64_t n, acc_t<T>* out, cudaStream_t s) {
  using A = acc_t<T>;
  if (n <= 0) {
    CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(A), s));  // all-zero bits are +0.0
    return;
  }
  const unsigned blocks = grid_for(n);
  Workspace partial(sizeof(A) * blocks);
  sum_partial_kernel<T><<<blocks, kBlock, 0, s>>>(x, n, partial.as<A>());
  CHECK_LAUNCH();
  sum_final_kernel<A><<<1, kBlock, 0, s>>>(partial.as<A>(), static_cast<int>(blocks), out);
  CHECK_LAUNCH();
}

template <class T> void add_row_bias(int64_t rows, int64_t cols, const T* bias, T* y, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  add_row_bias_kernel<T><<<grid_for(n), kBlock, 0, s>>>(n, cols, bias, y);
  CHECK_LAUNCH();
}

template <class T> void column_sum(int64_t rows, int64_t cols, const T* x, T* out, cudaStream_t s) {
  using A = acc_t<T>;
  if (cols <= 0) return;
  if (rows <= 0) {
    fill(out, 0.0, cols, s);
    return;
  }
  const int groups = detail::row_groups(rows, cols);
  Workspace partial(sizeof(A) * static_cast<size_t>(groups) * static_cast<size_t>(cols));
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(groups));
  column_sum_partial_kernel<T><<<grid, dim3(32, 8), 0, s>>>(rows, cols, x, partial.as<A>());
  CHECK_LAUNCH();
  column_sum_final_kernel<T><<<static_cast<unsigned>((cols + kBlock - 1) / kBlock), kBlock, 0, s>>>(
      cols, groups, partial.as<A>(), out);
  CHECK_LAUNCH();
}

// ---- instantiations ----------------------------------------------------------------------------

#define ENGINE_CUDA_EW(T)                                                                        \
  template void relu_forward<T>(const T*, T*, int64_t, cudaStream_t);                            \
  template void relu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t);                 \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);                           \
  template void scale<T>(const T*, double, T*, int64_t, cudaStream_t);                           \
  template void weight_average<T>(T*, T*, double, int64_t, cudaStream_t);                       \
  template void dropout<T>(const T*, T*, int64_t, float, uint64_t, uint64_t, uint64_t, cudaStream_t); \
  template void fill<T>(T*, double, int64_t, cudaStream_t);                                      \
  template void fill_from_device<T>(T*, const acc_t<T>*, int64_t, cudaStream_t);                 \
  template void all_finite<T>(const T*, int64_t, int*, cudaStream_t);                            \
  template void sum<T>(const T*, int64_t, acc_t<T>*, cudaStream_t);                              \
  template void add_row_bias<T>(int64_t, int64_t, const T*, T*, cudaStream_t);                   \
  template void column_sum<T>(int64_t, int64_t, const T*, T*, cudaStream_t);
ENGINE_CUDA_EW(float)
ENGINE_CUDA_EW(double)
ENGINE_CUDA_EW(kernels::half)
ENGINE_CUDA_EW(kernels::bfloat16)
#undef ENGINE_CUDA_EW

// Every unary op of ENGINE_UNARY_OPS (kernels/element_math.h), in every float type.
#define ENGINE_CUDA_UNARY_T(Op, T)                                                          \
  template void unary_forward<Op, T>(const T*, T*, int64_t, cudaStream_t);                   \
  template void unary_backward<Op, T>(const T*, const T*, T*, int64_t, cudaStream_t);
#define ENGINE_CUDA_UNARY(Op)              \
  ENGINE_CUDA_UNARY_T(Op, float)           \
  ENGINE_CUDA_UNARY_T(Op, double)          \
  ENGINE_CUDA_UNARY_T(Op, kernels::half)   \
  ENGINE_CUDA_UNARY_T(Op, kernels::bfloat16)
ENGINE_UNARY_OPS(ENGINE_CUDA_UNARY)
#undef ENGINE_CUDA_UNARY
#undef ENGINE_CUDA_UNARY_T

#define ENGINE_CUDA_CAST(F, T) template void cast<F, T>(const F*, T*, int64_t, cudaStream_t);
#define ENGINE_CUDA_CAST_FROM(F)          \
  ENGINE_CUDA_CAST(F, float)              \
  ENGINE_CUDA_CAST(F, double)             \
  ENGINE_CUDA_CAST(F, kernels::half)      \
  ENGINE_CUDA_CAST(F, kernels::bfloat16)
ENGINE_CUDA_CAST_FROM(float)
ENGINE_CUDA_CAST_FROM(double)
ENGINE_CUDA_CAST_FROM(kernels::half)
ENGINE_CUDA_CAST_FROM(kernels::bfloat16)
#undef ENGINE_CUDA_CAST_FROM
#undef ENGINE_CUDA_CAST

}  // namespace kernels::cuda
