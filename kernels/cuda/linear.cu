// cuBLASLt matrix products. Row-major C = op(A) op(B) is computed as the column-major
// product C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B, its "B" is our A, m = N, n = M.
#include "kernels/cuda/linear.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "kernels/cuda/allocator.h"
#include "kernels/element_math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/numeric.h"

namespace kernels::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t(32) << 20;  // NVIDIA's suggestion for Hopper

std::atomic<bool> g_bgradb{true};
std::atomic<int64_t> g_fallbacks{0};

template <class T> cudaDataType_t cuda_type();
template <> cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <> cudaDataType_t cuda_type<half>() { return CUDA_R_16F; }
template <> cudaDataType_t cuda_type<bfloat16>() { return CUDA_R_16BF; }

using detail::pointer_alignment;

// ---- RAII wrappers ---------------------------------------------------------------------------

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) { CHECK_CUBLAS(cublasLtMatmulDescCreate(&d, compute, scale)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <class V> void set(cublasLtMatmulDescAttributes_t attr, const V& v) {
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d, t, rows, cols, ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(d); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  Preference() { CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&d)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(d); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <class V> void set(cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d, attr, &v, sizeof v));
  }
};

// ---- the algorithm cache ---------------------------------------------------------------------

struct Key {
  int dt, compute, ta, tb, epi;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t al_a, al_b, al_c, al_bias;
  bool operator<(const Key& o) const {
    return std::tie(dt, compute, ta, tb, epi, m, n, k, lda, ldb, ldc, al_a, al_b, al_c, al_bias) <
           std::tie(o.dt, o.compute, o.ta, o.tb, o.epi, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.al_a, o.al_b, o.al_c,
                    o.al_bias);
  }
};
struct Choice {
  bool found;  // false: the heuristic offered nothing (only tolerated with a fused epilogue)
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
};
std::mutex g_mu;
std::map<Key, Choice> g_cache;

// One column-major cuBLASLt product D = alpha * opA(A) opB(B) + beta * C (C == D), with an
// optional epilogue and bias pointer. Returns false, running nothing, when an epilogue other
// than DEFAULT was asked for and the heuristic has no algorithm for it (callers fall back).
struct LtProblem {
  cudaDataType_t dt;
  bool tf32;
  cublasOperation_t opa, opb;
  uint64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  float alpha, beta;
  cublasLtEpilogue_t epi;
  void* bias;
};

bool lt_matmul(const LtProblem& p, cudaStream_t stream) {
  cublasLtHandle_t h = context().cublaslt();
  const cublasComputeType_t compute = p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MatmulDesc desc(compute, CUDA_R_32F);
  const int32_t opa = p.opa, opb = p.opb;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, opa);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, opb);
  const uint32_t epi = p.epi;
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (p.bias) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  // Stored shapes: op == N -> rows x cols = m x k (A) / k x n (B); op == T -> transposed.
  const bool ta = p.opa != CUBLAS_OP_N, tb = p.opb != CUBLAS_OP_N;
  Layout la(p.dt, ta ? p.k : p.m, ta ? p.m : p.k, p.lda);
  Layout lb(p.dt, tb ? p.n : p.k, tb ? p.k : p.n, p.ldb);
  Layout lc(p.dt, p.m, p.n, p.ldc);

  const Key key{static_cast<int>(p.dt), static_cast<int>(compute), opa, opb, static_cast<int>(epi),
                static_cast<int64_t>(p.m), static_cast<int64_t>(p.n), static_cast<int64_t>(p.k), p.lda, p.ldb,
                p.ldc, pointer_alignment(p.a), pointer_alignment(p.b), pointer_alignment(p.c),
                pointer_alignment(p.bias)};
  Choice choice{};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) {
      choice = it->second;
    } else {
      Preference pref;
      const uint64_t max_ws = kMaxWorkspace;
      pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_ws);
      // The heuristic must not assume more alignment than these pointers have.
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.al_a);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.al_b);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.al_c);
      pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.al_c);
      cublasLtMatmulHeuristicResult_t res[4] = {};
      int got = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(h, desc.d, la.d, lb.d, lc.d, lc.d, pref.d, 4, res, &got);
      choice.found = false;
      if (st == CUBLAS_STATUS_SUCCESS) {
        for (int i = 0; i < got; ++i) {
          if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= kMaxWorkspace) {
            choice.found = true;
            choice.algo = res[i].algo;
            choice.workspace = res[i].workspaceSize;
            break;
          }
        }
      } else if (p.epi == CUBLASLT_EPILOGUE_DEFAULT) {
        CHECK_CUBLAS(st);  // no algorithm for a plain product: report it
      }
      // A fused epilogue the library refuses, with whatever status: the caller falls back.
      g_cache.emplace(key, choice);
    }
  }
  if (!choice.found) {
    ENGINE_CHECK(p.epi != CUBLASLT_EPILOGUE_DEFAULT,
                 "cuBLASLt has no algorithm for a " << p.m << "x" << p.n << "x" << p.k << " product (type "
                                                    << static_cast<int>(p.dt) << ")");
    return false;
  }
  Workspace ws(choice.workspace);
  const cublasStatus_t run = cublasLtMatmul(h, desc.d, &p.alpha, p.a, la.d, p.b, lb.d, &p.beta, p.c, lc.d, p.c,
                                            lc.d, &choice.algo, ws.get(), ws.size(), stream);
  if (run != CUBLAS_STATUS_SUCCESS && p.epi != CUBLASLT_EPILOGUE_DEFAULT) {
    // Refused at launch (nothing ran): remember that, and let the caller use its fallback.
    std::lock_guard<std::mutex> lock(g_mu);
    g_cache[key].found = false;
    return false;
  }
  CHECK_CUBLAS(run);
  return true;
}

// Row-major problem -> column-major LtProblem (see the top of the file).
template <class T>
LtProblem row_major(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda,
                    const T* B, int64_t ldb, float beta, T* C, int64_t ldc) {
  LtProblem p{};
  p.dt = cuda_type<T>();
  p.tf32 = std::is_same_v<T, float> && allow_tf32();
  p.opa = tb == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;  // cuBLASLt's A is our B
  p.opb = ta == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T;  // and its B is our A
  p.m = static_cast<uint64_t>(N);
  p.n = static_cast<uint64_t>(M);
  p.k = static_cast<uint64_t>(K);
  p.a = B;
  p.lda = ldb;
  p.b = A;
  p.ldb = lda;
  p.c = C;
  p.ldc = ldc;
  p.alpha = alpha;
  p.beta = beta;
  p.epi = CUBLASLT_EPILOGUE_DEFAULT;
  p.bias = nullptr;
  return p;
}

template <class T>
void check_gemm_args(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  ENGINE_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size " << M << "x" << N << "x" << K);
  ENGINE_CHECK(lda >= std::max<int64_t>(1, ta == Trans::N ? K : M) &&
                   ldb >= std::max<int64_t>(1, tb == Trans::N ? N : K) && ldc >= std::max<int64_t>(1, N),
               "gemm: leading dimensions lda=" << lda << " ldb=" << ldb << " ldc=" << ldc << " too small for " << M
                                               << "x" << N << "x" << K);
}

}  // namespace

void set_gemm_bias_grad_epilogue(bool use) { g_bgradb.store(use); }
bool gemm_bias_grad_epilogue() { return g_bgradb.load(); }
int64_t gemm_epilogue_fallbacks() { return g_fallbacks.load(); }
size_t gemm_algo_cache_size() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_cache.size();
}
void clear_gemm_algo_cache() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_cache.clear();
}

template <class T>
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, float beta, T* C, int64_t ldc, cudaStream_t stream) {
  check_gemm_args<T>(ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.f) {  // C = beta * C, row by row when C is strided
    for (int64_t i = 0; i < (ldc == N ? 1 : M); ++i) {
      const int64_t n = ldc == N ? M * N : N;
      if (beta == 0.f) fill<T>(C + i * ldc, 0.0, n, stream);
      else if (beta != 1.f) scale<T>(C + i * ldc, beta, C + i * ldc, n, stream);
    }
    return;
  }
  lt_matmul(row_major<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), stream);
}

template <class T>
void linear_forward(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* bias, T* y, Epilogue ep,
                    cudaStream_t stream, T* pre_activation) {
  ENGINE_CHECK(rows >= 0 && in > 0 && out > 0, "linear_forward: bad shape rows=" << rows << " in=" << in
                                                                                 << " out=" << out);
  if (rows == 0) return;
  T* dst = (ep == Epilogue::Gelu && pre_activation) ? pre_activation : y;
  // y = x * w^T: row-major gemm(N, T) with M = rows, N = out, K = in.
  LtProblem p = row_major<T>(Trans::N, Trans::T, rows, out, in, 1.f, x, in, w, in, 0.f, dst, out);
  const bool relu = ep == Epilogue::Relu;
  p.epi = bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
               : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  p.bias = const_cast<T*>(bias);  // read-only for BIAS epilogues; the attribute is a void*
  if (!lt_matmul(p, stream)) {
    ++g_fallbacks;
    p.epi = CUBLASLT_EPILOGUE_DEFAULT;
    p.bias = nullptr;
    lt_matmul(p, stream);
    if (bias) add_row_bias<T>(rows, out, bias, dst, stream);
    if (relu) relu_forward<T>(dst, dst, rows * out, stream);
  }
  if (ep == Epilogue::Gelu) unary_forward<GeluOp, T>(dst, y, rows * out, stream);
}

template <class T>
void linear_backward_data(int64_t rows, int64_t in, int64_t out, const T* gy, const T* w, T* gx, cudaStream_t stream) {
  // gx[rows, in] = gy[rows, out] * w[out, in]
  gemm<T>(Trans::N, Trans::N, rows, in, out, 1.f, gy, out, w, in, 0.f, gx, in, stream);
}

template <class T>
void linear_backward_weight(int64_t rows, int64_t in, int64_t out, const T* x, const T* gy, T* gw, T* gbias,
                            cudaStream_t stream) {
  ENGINE_CHECK(rows >= 0 && in > 0 && out > 0, "linear_backward_weight: bad shape rows=" << rows << " in=" << in
                                                                                         << " out=" << out);
  if (rows == 0) {
    fill<T>(gw, 0.0, out * in, stream);
    if (gbias) fill<T>(gbias, 0.0, out, stream);
    return;
  }
  // gw[out, in] = gy^T * x: row-major gemm(T, N), M = out, N = in, K = rows. In cuBLASLt's
  // terms B is gy with op T and k = rows, so BGRADB (a reduction of B over k, one value per
  // column of D = per output feature) is exactly the bias gradient.
  LtProblem p = row_major<T>(Trans::T, Trans::N, out, in, rows, 1.f, gy, out, x, in, 0.f, gw, in);
  if (gbias && gemm_bias_grad_epilogue()) {
    p.epi = CUBLASLT_EPILOGUE_BGRADB;
    p.bias = gbias;
    if (lt_matmul(p, stream)) return;
    ++g_fallbacks;
    p.epi = CUBLASLT_EPILOGUE_DEFAULT;
    p.bias = nullptr;
  }
  lt_matmul(p, stream);
  if (gbias) column_sum<T>(rows, out, gy, gbias, stream);
}

#define ENGINE_CUDA_GEMM(T)                                                                                       \
  template void gemm<T>(Trans, Trans, int64_t, int64_t, int64_t, float, const T*, int64_t, const T*, int64_t,      \
                        float, T*, int64_t, cudaStream_t);                                                        \
  template void linear_forward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*, Epilogue,          \
                                  cudaStream_t, T*);                                                              \
  template void linear_backward_data<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);         \
  template void linear_backward_weight<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, T*, cudaStream_t);
ENGINE_CUDA_GEMM(float)
ENGINE_CUDA_GEMM(kernels::half)
ENGINE_CUDA_GEMM(kernels::bfloat16)
#undef ENGINE_CUDA_GEMM

}  // namespace kernels::cuda
