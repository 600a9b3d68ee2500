// The GPU section of bench_kernels: our linear op next to a direct cuBLASLt call, our conv op
// next to direct cuDNN calls (best algorithm by cudnnFind), our memory-bound kernels next to a
// device-to-device copy of the same bytes. CUDA events, warm-up, median, rotated inputs.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_kernels.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/pool.h"

namespace kcu = kernels::cuda;
using engine::DType;
using engine::Tensor;
// cuda_fp16.h declares its own global `half`; ours is always named in full.
using kernels::bfloat16;

namespace {

const engine::Device kGpu = engine::Device::cuda(0);

// ---- inputs: non-zero pseudo-random values, written on the device --------------------------------

template <class T> __global__ void fill_hash_kernel(T* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = T(lo + (hi - lo) * u);
  }
}

uint32_t g_seed = 12345;

Tensor random_gpu(const engine::Shape& shape, DType dt, float lo = -1, float hi = 1) {
  Tensor t = Tensor::empty(shape, dt, kGpu);
  const int64_t n = t.numel();
  const unsigned grid = 1024;
  g_seed = g_seed * 1664525u + 1013904223u;
  cudaStream_t s = kcu::default_stream();
  switch (dt) {
    case DType::F32: fill_hash_kernel<<<grid, 256, 0, s>>>(t.data<float>(), n, g_seed, lo, hi); break;
    case DType::F16: fill_hash_kernel<<<grid, 256, 0, s>>>(t.data<kernels::half>(), n, g_seed, lo, hi); break;
    case DType::BF16: fill_hash_kernel<<<grid, 256, 0, s>>>(t.data<bfloat16>(), n, g_seed, lo, hi); break;
    default: ENGINE_FAIL("random_gpu: unsupported dtype " << engine::dtype_name(dt));
  }
  CHECK_LAUNCH();
  return t;
}

const char* dname(DType d) { return d == DType::F32 ? "fp32" : d == DType::F16 ? "fp16" : "bf16"; }

// ---- timing ----------------------------------------------------------------------------------------

// Median over `iters` calls of fn(i), each bracketed by CUDA events on the engine's stream,
// after `warmup` untimed calls (algorithm searches, caches, clocks).
double time_gpu_ms(const std::function<void(int)>& fn, int warmup, int iters) {
  cudaStream_t s = kcu::default_stream();
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * iters));
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], s));
    fn(warmup + i);
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], s));
  }
  CHECK_CUDA(cudaEventSynchronize(ev.back()));
  CHECK_CUDA(cudaGetLastError());
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t.push_back(ms);
  }
  for (auto& e : ev) CHECK_CUDA(cudaEventDestroy(e));
  return bench::median(t);
}

// How many input sets to rotate so that one pass over them is at least twice the L2 cache
// (2..16): a call never finds its operands left in L2 by the previous one.
int rotation_sets(double set_bytes) {
  int l2 = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, kcu::context().device));
  const int sets = static_cast<int>(2.0 * l2 / std::max(set_bytes, 1.0)) + 1;
  return std::max(2, std::min(16, sets));
}

// ---- the copy yardstick ----------------------------------------------------------------------------

// Median time of a device-to-device cudaMemcpyAsync moving `bytes` in all (bytes/2 read and
// bytes/2 written), measured once per size. Consecutive copies move through different
// windows of buffers at least 4x the L2, so the copy never runs from cache either.
class CopyYardstick {
 public:
  CopyYardstick(size_t max_half_bytes, int iters) : iters_(iters) {
    int l2 = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, kcu::context().device));
    const size_t bytes = std::max(max_half_bytes, size_t{4} * static_cast<size_t>(l2));
    src_ = random_gpu({static_cast<int64_t>(bytes / 4 + 1)}, DType::F32);
    dst_ = Tensor::empty({static_cast<int64_t>(bytes / 4 + 1)}, DType::F32, kGpu);
  }
  double ms(double bytes) {
    const size_t half_bytes = static_cast<size_t>(bytes / 2);
    ENGINE_CHECK(half_bytes > 0 && half_bytes <= src_.nbytes(),
                 "copy yardstick: " << half_bytes << " bytes asked of a " << src_.nbytes() << "-byte buffer");
    auto it = cache_.find(half_bytes);
    if (it != cache_.end()) return it->second;
    const size_t windows = src_.nbytes() / half_bytes;
    char* dst = static_cast<char*>(dst_.raw());
    const char* src = static_cast<const char*>(src_.raw());
    const double t = time_gpu_ms(
        [&](int i) {
          const size_t off = static_cast<size_t>(i) % windows * half_bytes;
          CHECK_CUDA(cudaMemcpyAsync(dst + off, src + off, half_bytes, cudaMemcpyDeviceToDevice, kcu::default_stream()));
        },
        3, iters_);
    cache_[half_bytes] = t;
    return t;
  }

 private:
  Tensor src_, dst_;
  int iters_;
  std::map<size_t, double> cache_;
};

// ---- GEMM: our linear op vs a direct cuBLASLt call ---------------------------------------------------

cudaDataType_t lt_type(DType d) { return d == DType::F32 ? CUDA_R_32F : d == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

// One column-major cuBLASLt problem D[m,n] = op(A) op(B) (+ bias[m]), FP32 scale and
// accumulation, the heuristic's first algorithm, 32 MiB of workspace (as our gemm allows).
class DirectLt {
 public:
  DirectLt(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
           int64_t ldd, DType dt, bool tf32, const void* bias)
      : workspace_(Tensor::empty({kWorkspace}, DType::U8, kGpu)) {
    const cudaDataType_t t = lt_type(dt);
    const cublasComputeType_t compute = (dt == DType::F32 && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la_, t, an ? m : k, an ? k : m, lda));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb_, t, bn ? k : n, bn ? n : k, ldb));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&ld_, t, m, n, ldd));
    cublasLtMatmulPreference_t pref = nullptr;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res = {};
    int got = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(kcu::context().cublaslt(), desc_, la_, lb_, ld_, ld_, pref, 1, &res, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    CHECK_CUBLAS(st);
    ENGINE_CHECK(got > 0, "cuBLASLt has no algorithm for this problem (m " << m << ", n " << n << ", k " << k << ")");
    algo_ = res.algo;
  }
  ~DirectLt() {
    cublasLtMatrixLayoutDestroy(la_);
    cublasLtMatrixLayoutDestroy(lb_);
    cublasLtMatrixLayoutDestroy(ld_);
    cublasLtMatmulDescDestroy(desc_);
  }
  DirectLt(const DirectLt&) = delete;
  DirectLt& operator=(const DirectLt&) = delete;

  void run(const void* a, const void* b, void* d) {
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_CUBLAS(cublasLtMatmul(kcu::context().cublaslt(), desc_, &alpha, a, la_, b, lb_, &beta, d, ld_, d, ld_, &algo_,
                                workspace_.raw(), kWorkspace, kcu::default_stream()));
  }

 private:
  static constexpr int64_t kWorkspace = 32 << 20;
  Tensor workspace_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_ = {};
};

template <class T> const T* cptr(const Tensor& t) { return t.data<T>(); }

// Our linear backward kernels (what the op's backward calls), dispatched on dtype.
void ours_backward_data(DType dt, int64_t rows, int64_t in, int64_t out, const Tensor& gy, const Tensor& w, Tensor& gx) {
  cudaStream_t s = kcu::default_stream();
  if (dt == DType::F32) kcu::linear_backward_data(rows, in, out, gy.data<float>(), w.data<float>(), gx.data<float>(), s);
  else if (dt == DType::F16) kcu::linear_backward_data(rows, in, out, gy.data<kernels::half>(), w.data<kernels::half>(), gx.data<kernels::half>(), s);
  else kcu::linear_backward_data(rows, in, out, gy.data<bfloat16>(), w.data<bfloat16>(), gx.data<bfloat16>(), s);
}
void ours_backward_weight(DType dt, int64_t rows, int64_t in, int64_t out, const Tensor& x, const Tensor& gy, Tensor& gw) {
  cudaStream_t s = kcu::default_stream();
  if (dt == DType::F32)
    kcu::linear_backward_weight<float>(rows, in, out, x.data<float>(), gy.data<float>(), gw.data<float>(), nullptr, s);
  else if (dt == DType::F16)
    kcu::linear_backward_weight<kernels::half>(rows, in, out, x.data<kernels::half>(), gy.data<kernels::half>(), gw.data<kernels::half>(), nullptr, s);
  else
    kcu::linear_backward_weight<bfloat16>(rows, in, out, x.data<bfloat16>(), gy.data<bfloat16>(), gw.data<bfloat16>(),
                                          nullptr, s);
}

void gpu_gemm(const bench::Options& opt, std::vector<bench::Row>& rows) {
  struct Shape { int64_t rows, in, out; const char* what; };
  std::vector<Shape> shapes = {{256, 2048, 256, "simplecnn fc1"}, {4096, 4096, 4096, "square"},
                               {8192, 8192, 8192, "square"}};
  if (opt.quick) shapes.resize(2);
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 5 : 25;
  struct Prec { DType dt; bool tf32; const char* name; };
  const Prec precs[] = {{DType::F32, false, "fp32"}, {DType::F32, true, "tf32"}, {DType::F16, false, "fp16"},
                        {DType::BF16, false, "bf16"}};
  for (const Shape& s : shapes)
    for (const Prec& p : precs) {
      kcu::set_allow_tf32(p.tf32);
      const double esize = engine::dtype_size(p.dt);
      const int sets = rotation_sets(esize * (s.rows * s.in + s.out * s.in + s.rows * s.out));
      std::vector<Tensor> x, w, gy;
      for (int i = 0; i < sets; ++i) {
        x.push_back(random_gpu({s.rows, s.in}, p.dt));
        w.push_back(random_gpu({s.out, s.in}, p.dt, -0.05f, 0.05f));
        gy.push_back(random_gpu({s.rows, s.out}, p.dt));
      }
      Tensor bias = random_gpu({s.out}, p.dt);
      Tensor y = Tensor::empty({s.rows, s.out}, p.dt, kGpu), gx = Tensor::empty({s.rows, s.in}, p.dt, kGpu),
             gw = Tensor::empty({s.out, s.in}, p.dt, kGpu);
      // Row-major y[rows,out] = x w^T is column-major y^T[out,rows] = w^T(op T of w stored
      // in x out) * x^T; likewise for the two backward products.
      DirectLt fwd(CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.rows, s.in, s.in, s.in, s.out, p.dt, p.tf32, bias.raw());
      DirectLt bwd_data(CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.rows, s.out, s.in, s.out, s.in, p.dt, p.tf32, nullptr);
      DirectLt bwd_weight(CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.rows, s.in, s.out, s.in, p.dt, p.tf32, nullptr);
      const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out);
      auto row = [&](const std::string& name) {
        bench::Row r = bench::make_row("cuda", "gemm", name + " (" + s.what + ")", p.name, shape, "TFLOP/s",
                                       2.0 * s.rows * s.in * s.out);
        r.ref_name = "cuBLASLt direct";
        return r;
      };
      bench::Row f = row("linear fwd+bias");
      f.ms = time_gpu_ms([&](int i) { (void)engine::linear(x[i % sets], w[i % sets], bias); }, 3, iters);
      f.ref_ms = time_gpu_ms([&](int i) { fwd.run(w[i % sets].raw(), x[i % sets].raw(), y.raw()); }, 3, iters);
      rows.push_back(f);
      bench::Row d = row("linear bwd data");
      d.ms = time_gpu_ms([&](int i) { ours_backward_data(p.dt, s.rows, s.in, s.out, gy[i % sets], w[i % sets], gx); },
                         3, iters);
      d.ref_ms = time_gpu_ms([&](int i) { bwd_data.run(w[i % sets].raw(), gy[i % sets].raw(), gx.raw()); }, 3, iters);
      rows.push_back(d);
      bench::Row g = row("linear bwd weight");
      g.ms = time_gpu_ms([&](int i) { ours_backward_weight(p.dt, s.rows, s.in, s.out, x[i % sets], gy[i % sets], gw); },
                         3, iters);
      g.ref_ms = time_gpu_ms([&](int i) { bwd_weight.run(x[i % sets].raw(), gy[i % sets].raw(), gw.raw()); }, 3, iters);
      rows.push_back(g);
      std::printf("  gemm %-5s %-16s fwd %.1f / %.1f TFLOP/s (ours / cuBLASLt)\n", p.name, shape.c_str(), f.rate(),
                  f.ref_rate());
      std::fflush(stdout);
    }
  kcu::set_allow_tf32(false);
}

// ---- convolution: our op vs direct cuDNN calls -----------------------------------------------------

cudnnDataType_t dnn_type(DType d) {
  return d == DType::F32 ? CUDNN_DATA_FLOAT : d == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

enum class ConvDir { Fwd, BwdData, BwdFilter };

// The three directions of one NHWC/KRSC convolution, each with the fastest algorithm
// cudnnFind*AlgorithmEx measures (within a 1 GiB workspace, our own limit). True FP32
// (no TF32) is held to CUDNN_FMA_MATH, as our conv does.
class DirectConv {
 public:
  DirectConv(const kernels::ConvShape& d, DType dt, bool tf32, const Tensor& x, const Tensor& w, const Tensor& y)
      : workspace_(Tensor::empty({kWorkspace}, DType::U8, kGpu)) {
    const cudnnDataType_t t = dnn_type(dt);
    auto i = [](int64_t v) { return static_cast<int>(v); };
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&xd_));
    CHECK_CUDNN(cudnnCreateTensorDescriptor(&yd_));
    CHECK_CUDNN(cudnnCreateFilterDescriptor(&wd_));
    CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&cd_));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NHWC, t, i(d.n), i(d.c), i(d.h), i(d.w)));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NHWC, t, i(d.n), i(d.k), i(d.out_h()), i(d.out_w())));
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(wd_, t, CUDNN_TENSOR_NHWC, i(d.k), i(d.c), i(d.r), i(d.s)));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(cd_, i(d.pad), i(d.pad), i(d.stride), i(d.stride), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    fp32_strict_ = dt == DType::F32 && !tf32;
    const cudnnMathType_t query = dt == DType::F32 ? (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH) : CUDNN_TENSOR_OP_MATH;
    CHECK_CUDNN(cudnnSetConvolutionMathType(cd_, query));
    cudnnHandle_t h = kcu::context().cudnn();
    CHECK_CUDNN(cudnnSetStream(h, kcu::default_stream()));
    // Find runs every candidate on these buffers; the outputs are scratch here.
    Tensor gx = Tensor::empty(x.shape(), dt, kGpu), gw = Tensor::empty(w.shape(), dt, kGpu);
    Tensor out = Tensor::empty(y.shape(), dt, kGpu);
    constexpr int kMax = 16;
    int got = 0;
    {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(h, xd_, x.raw(), wd_, w.raw(), cd_, yd_, out.raw(), kMax, &got,
                                                         perf, workspace_.raw(), kWorkspace));
      choose(perf, got, &fwd_, &fwd_math_, "forward", [&] { run(ConvDir::Fwd, x.raw(), w.raw(), out.raw()); });
    }
    {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd_, w.raw(), yd_, y.raw(), cd_, xd_, gx.raw(), kMax,
                                                              &got, perf, workspace_.raw(), kWorkspace));
      choose(perf, got, &bwd_data_, &bwd_data_math_, "backward data",
             [&] { run(ConvDir::BwdData, y.raw(), w.raw(), gx.raw()); });
    }
    {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd_, x.raw(), yd_, y.raw(), cd_, wd_, gw.raw(), kMax,
                                                                &got, perf, workspace_.raw(), kWorkspace));
      choose(perf, got, &bwd_filter_, &bwd_filter_math_, "backward filter",
             [&] { run(ConvDir::BwdFilter, x.raw(), y.raw(), gw.raw()); });
    }
    kcu::stream_synchronize(kcu::default_stream());
  }
  ~DirectConv() {
    cudnnDestroyTensorDescriptor(xd_);
    cudnnDestroyTensorDescriptor(yd_);
    cudnnDestroyFilterDescriptor(wd_);
    cudnnDestroyConvolutionDescriptor(cd_);
  }
  DirectConv(const DirectConv&) = delete;
  DirectConv& operator=(const DirectConv&) = delete;

  // in0/in1/out as for the direction: Fwd (x, w -> y), BwdData (gy, w -> gx), BwdFilter (x, gy -> gw).
  void run(ConvDir dir, const void* in0, const void* in1, void* out) {
    cudnnHandle_t h = kcu::context().cudnn();
    const float alpha = 1.0f, beta = 0.0f;
    switch (dir) {
      case ConvDir::Fwd:
        CHECK_CUDNN(cudnnSetConvolutionMathType(cd_, fwd_math_));
        CHECK_CUDNN(cudnnConvolutionForward(h, &alpha, xd_, in0, wd_, in1, cd_, fwd_, workspace_.raw(), kWorkspace,
                                            &beta, yd_, out));
        break;
      case ConvDir::BwdData:
        CHECK_CUDNN(cudnnSetConvolutionMathType(cd_, bwd_data_math_));
        CHECK_CUDNN(cudnnConvolutionBackwardData(h, &alpha, wd_, in1, yd_, in0, cd_, bwd_data_, workspace_.raw(),
                                                 kWorkspace, &beta, xd_, out));
        break;
      case ConvDir::BwdFilter:
        CHECK_CUDNN(cudnnSetConvolutionMathType(cd_, bwd_filter_math_));
        CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &alpha, xd_, in0, yd_, in1, cd_, bwd_filter_, workspace_.raw(),
                                                   kWorkspace, &beta, wd_, out));
        break;
    }
  }

 private:
  static constexpr int64_t kWorkspace = int64_t{1} << 30;
  // Find's results, fastest first: the first that succeeded, has an allowed math type and
  // really runs (a dry run; a configuration cuDNN rejects moves on to the next one).
  template <class Perf, class Algo>
  void choose(const Perf* perf, int got, Algo* algo, cudnnMathType_t* math, const char* what,
              const std::function<void()>& dry_run) {
    std::string last = "Find returned no successful candidate";
    for (int j = 0; j < got; ++j) {
      if (perf[j].status != CUDNN_STATUS_SUCCESS) continue;
      if (fp32_strict_ && perf[j].mathType != CUDNN_FMA_MATH && perf[j].mathType != CUDNN_DEFAULT_MATH) continue;
      *algo = perf[j].algo;
      *math = fp32_strict_ ? CUDNN_FMA_MATH : perf[j].mathType;
      try {
        dry_run();
        return;
      } catch (const engine::Error& e) {
        last = e.message();
      }
    }
    ENGINE_FAIL("direct cuDNN: no usable " << what << " algorithm (" << last << ")");
  }
  Tensor workspace_;
  bool fp32_strict_ = false;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  cudnnMathType_t fwd_math_ = CUDNN_DEFAULT_MATH, bwd_data_math_ = CUDNN_DEFAULT_MATH,
                  bwd_filter_math_ = CUDNN_DEFAULT_MATH;
};

template <class T> void ours_conv_backward(ConvDir dir, const kernels::ConvShape& d, const Tensor& a, const Tensor& b, Tensor& out) {
  cudaStream_t s = kcu::default_stream();
  if (dir == ConvDir::BwdData) kcu::conv2d_backward_data(d, a.data<T>(), b.data<T>(), out.data<T>(), s);
  else kcu::conv2d_backward_filter(d, a.data<T>(), b.data<T>(), out.data<T>(), static_cast<T*>(nullptr), s);
}

void gpu_conv(const bench::Options& opt, std::vector<bench::Row>& rows) {
  struct Shape { int64_t n, hw, c, k; const char* what; };
  std::vector<Shape> shapes = {{256, 32, 3, 16, "simplecnn conv1"},  {256, 16, 16, 32, "simplecnn conv2"},
                               {256, 32, 64, 64, "resnet 32x32x64"}, {256, 16, 128, 128, "resnet 16x16x128"},
                               {256, 8, 256, 256, "resnet 8x8x256"}, {256, 4, 512, 512, "resnet 4x4x512"}};
  if (opt.quick) shapes = {shapes[1], shapes[3]};
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 5 : 25;
  struct Prec { DType dt; bool tf32; const char* name; };
  const Prec precs[] = {{DType::F32, false, "fp32"}, {DType::F32, true, "tf32"}, {DType::F16, false, "fp16"},
                        {DType::BF16, false, "bf16"}};
  const kcu::ConvAlgoSearch saved_search = kcu::conv_algo_search();
  for (const Shape& s : shapes)
    for (const Prec& p : precs) {
      kcu::set_allow_tf32(p.tf32);
      const kernels::ConvShape d{s.n, s.hw, s.hw, s.c, s.k, 3, 3, 1, 1};
      const double esize = engine::dtype_size(p.dt);
      const int64_t xn = s.n * s.hw * s.hw * s.c, yn = s.n * d.out_h() * d.out_w() * s.k;
      const int sets = rotation_sets(esize * (2.0 * xn + yn));
      std::vector<Tensor> x, gy;
      for (int i = 0; i < sets; ++i) {
        x.push_back(random_gpu({s.n, s.hw, s.hw, s.c}, p.dt));
        gy.push_back(random_gpu({s.n, d.out_h(), d.out_w(), s.k}, p.dt));
      }
      Tensor w = random_gpu({s.k, 3, 3, s.c}, p.dt, -0.1f, 0.1f);
      Tensor y = Tensor::empty(gy[0].shape(), p.dt, kGpu), gx = Tensor::empty(x[0].shape(), p.dt, kGpu),
             gw = Tensor::empty(w.shape(), p.dt, kGpu);
      DirectConv direct(d, p.dt, p.tf32, x[0], w, gy[0]);
      const std::string shape = "n" + std::to_string(s.n) + " " + std::to_string(s.hw) + "x" + std::to_string(s.hw) +
                                "x" + std::to_string(s.c) + " k" + std::to_string(s.k);
      const double flops = 2.0 * yn * 9 * s.c;
      auto row = [&](const char* dir) {
        bench::Row r = bench::make_row("cuda", "conv", std::string("conv ") + dir + " (" + s.what + ")", p.name, shape,
                                       "TFLOP/s", flops);
        r.ref_name = "cuDNN direct, Find";
        return r;
      };
      // Ours with the same kind of choice as the direct call (cuDNN's Find), then forward with
      // cuDNN's heuristic choice, the engine's default (what the trainer runs).
      kcu::set_conv_algo_search(kcu::ConvAlgoSearch::Benchmark);
      bench::Row f = row("fwd");
      f.ms = time_gpu_ms([&](int i) { (void)engine::conv2d(x[i % sets], w, Tensor(), 1, 1); }, 3, iters);
      f.ref_ms = time_gpu_ms([&](int i) { direct.run(ConvDir::Fwd, x[i % sets].raw(), w.raw(), y.raw()); }, 3, iters);
      rows.push_back(f);
      kcu::set_conv_algo_search(kcu::ConvAlgoSearch::Heuristic);
      bench::Row fh = row("fwd, heuristic algo");
      fh.ms = time_gpu_ms([&](int i) { (void)engine::conv2d(x[i % sets], w, Tensor(), 1, 1); }, 3, iters);
      fh.ref_ms = f.ref_ms;
      rows.push_back(fh);
      kcu::set_conv_algo_search(kcu::ConvAlgoSearch::Benchmark);
      auto ours = [&](ConvDir dir, const Tensor& a, const Tensor& b, Tensor& out) {
        if (p.dt == DType::F32) ours_conv_backward<float>(dir, d, a, b, out);
        else if (p.dt == DType::F16) ours_conv_backward<kernels::half>(dir, d, a, b, out);
        else ours_conv_backward<bfloat16>(dir, d, a, b, out);
      };
      bench::Row bd = row("bwd data");
      bd.ms = time_gpu_ms([&](int i) { ours(ConvDir::BwdData, gy[i % sets], w, gx); }, 3, iters);
      bd.ref_ms = time_gpu_ms([&](int i) { direct.run(ConvDir::BwdData, gy[i % sets].raw(), w.raw(), gx.raw()); }, 3,
                              iters);
      rows.push_back(bd);
      bench::Row bf = row("bwd filter");
      bf.ms = time_gpu_ms([&](int i) { ours(ConvDir::BwdFilter, x[i % sets], gy[i % sets], gw); }, 3, iters);
      bf.ref_ms = time_gpu_ms([&](int i) { direct.run(ConvDir::BwdFilter, x[i % sets].raw(), gy[i % sets].raw(), gw.raw()); },
                              3, iters);
      rows.push_back(bf);
      std::printf("  conv %-5s %-24s fwd %.1f (heuristic %.1f) / %.1f TFLOP/s (ours / cuDNN)\n", p.name, shape.c_str(),
                  f.rate(), fh.rate(), f.ref_rate());
      std::fflush(stdout);
    }
  kcu::set_conv_algo_search(saved_search);
  kcu::set_allow_tf32(false);
}

// ---- memory-bound kernels vs the copy yardstick ----------------------------------------------------

template <class T> void add_typed_cases(std::vector<bench::MemCase>& cases, DType dt, int64_t n) {
  cudaStream_t s = kcu::default_stream();
  const std::string d = dname(dt);
  const double e = sizeof(T);
  // Two sets of each input (each set is several times the L2), alternated between calls.
  std::vector<Tensor> x = {random_gpu({n}, dt), random_gpu({n}, dt)}, g = {random_gpu({n}, dt), random_gpu({n}, dt)};
  Tensor y = Tensor::empty({n}, dt, kGpu);
  const std::string flat = std::to_string(n);
  cases.push_back({"relu fwd", d, flat, 2 * e * n, [=](int i) { kcu::relu_forward(x[i & 1].data<T>(), y.data<T>(), n, s); }});
  cases.push_back({"relu bwd", d, flat, 3 * e * n, [=](int i) {
                     kcu::relu_backward(x[i & 1].data<T>(), g[i & 1].data<T>(), y.data<T>(), n, s);
                   }});
  cases.push_back({"add", d, flat, 3 * e * n,
                   [=](int i) { kcu::add(x[i & 1].data<T>(), g[i & 1].data<T>(), y.data<T>(), n, s); }});
  // Batch-norm over [N*H*W, 64]: the statistics pass and the normalising pass each read x.
  const int64_t c = 64, rows = n / c;
  Tensor gamma = random_gpu({c}, DType::F32, 0.5f, 1.5f), beta = random_gpu({c}, DType::F32);
  Tensor mean = Tensor::empty({c}, DType::F32, kGpu), invstd = Tensor::empty({c}, DType::F32, kGpu);
  Tensor rm = random_gpu({c}, DType::F32, -0.1f, 0.1f), rv = random_gpu({c}, DType::F32, 0.5f, 1.5f);
  Tensor gg = Tensor::empty({c}, DType::F32, kGpu), gb = Tensor::empty({c}, DType::F32, kGpu);
  const std::string bn = std::to_string(rows) + " x " + std::to_string(c);
  cases.push_back({"batchnorm fwd (train)", d, bn, 3 * e * n, [=](int i) {
                     kcu::batch_norm_forward_train<T, float>(rows, c, x[i & 1].data<T>(), gamma.data<float>(),
                                                            beta.data<float>(), 1e-5f, 0.1f, rm.data<float>(),
                                                            rv.data<float>(), mean.data<float>(), invstd.data<float>(),
                                                            y.data<T>(), s);
                   }});
  // Backward: the reductions read x and gy, the gradient pass reads them again and writes gx.
  cases.push_back({"batchnorm bwd", d, bn, 5 * e * n, [=](int i) {
                     kcu::batch_norm_backward<T, float>(rows, c, x[i & 1].data<T>(), g[i & 1].data<T>(),
                                                       gamma.data<float>(), mean.data<float>(), invstd.data<float>(),
                                                       true, y.data<T>(), gg.data<float>(), gb.data<float>(), s);
                   }});
  // 2x2 max-pool over [N, 32, 32, 64]: read x, write a quarter of it and its one-byte argmax.
  const int64_t hw = 32, batch = n / (hw * hw * c), out = n / 4;
  const kernels::PoolShape pd{batch, hw, hw, c, 2, 2, 0};
  Tensor py = random_gpu({out}, dt);
  Tensor arg = Tensor::empty({out}, DType::U8, kGpu);
  kcu::max_pool2d_forward(pd, x[0].data<T>(), py.data<T>(), arg.data<uint8_t>(), s);  // valid argmax for bwd
  const std::string pool = std::to_string(batch) + "x32x32x64";
  cases.push_back({"maxpool 2x2 fwd", d, pool, e * n + (e + 1) * out, [=](int i) {
                     kcu::max_pool2d_forward(pd, x[i & 1].data<T>(), py.data<T>(), arg.data<uint8_t>(), s);
                   }});
  cases.push_back({"maxpool 2x2 bwd", d, pool, (e + 1) * out + e * n, [=](int) {
                     kcu::max_pool2d_backward(pd, py.data<T>(), arg.data<uint8_t>(), y.data<T>(), s);
                   }});
  cases.push_back({"global avgpool fwd", d, pool, e * n, [=](int i) {
                     kcu::global_avg_pool_forward(batch, hw * hw, c, x[i & 1].data<T>(), py.data<T>(), s);
                   }});
  // Cross-entropy over [rows, 1000] logits (FP32 softmax): read logits and labels, write FP32
  // probabilities and per-row losses (then summed); backward reads probabilities and labels
  // and writes the logits' gradient. (CIFAR's 10 classes x a batch is too small to time.)
  const int64_t k = 1000, ce_rows = n / k;
  std::vector<int32_t> lab(static_cast<size_t>(ce_rows));
  for (int64_t j = 0; j < ce_rows; ++j) lab[static_cast<size_t>(j)] = static_cast<int32_t>((j * 7) % k);
  Tensor labels = Tensor::from_ints(lab, {ce_rows}).to(kGpu);
  Tensor probs = Tensor::empty({ce_rows, k}, DType::F32, kGpu);
  Tensor loss = Tensor::empty({1}, DType::F32, kGpu), bad = Tensor::zeros({1}, DType::I32, kGpu);
  Tensor gscale = Tensor::full({1}, 1024.0, DType::F32, kGpu);
  const std::string ce = std::to_string(ce_rows) + " x 1000";
  // + 16 B per row: the per-row loss and bad-label count, written and read back by the sum.
  cases.push_back({"cross-entropy fwd", d, ce, (e + 4) * ce_rows * k + 20.0 * ce_rows, [=](int i) {
                     kcu::cross_entropy_forward<T, float>(ce_rows, k, x[i & 1].data<T>(), labels.data<int32_t>(), 0.0f,
                                                          probs.data<float>(), loss.data<float>(), bad.data<int>(), s);
                   }});
  cases.push_back({"cross-entropy bwd", d, ce, (4 + e) * ce_rows * k + 4.0 * ce_rows, [=](int) {
                     kcu::cross_entropy_backward<T, float>(ce_rows, k, probs.data<float>(), labels.data<int32_t>(),
                                                           0.0f, gscale.data<float>(), bad.data<int>(), y.data<T>(), s);
                   }});
}

// Parameter sizes like a ResNet's (3x3 filters of 64..512 channels, biases, batch-norm
// vectors), repeated until about n weights.
std::vector<int64_t> resnet_like_sizes(int64_t n) {
  const int64_t pattern[] = {9 * 64 * 64, 64, 64, 9 * 128 * 128, 128, 128, 9 * 256 * 256, 256, 256, 9 * 512 * 512, 512, 512};
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int j = 0; total < n; j = (j + 1) % 12) {
    sizes.push_back(pattern[j]);
    total += pattern[j];
  }
  return sizes;
}

void add_optimizer_cases(std::vector<bench::MemCase>& cases, int64_t n) {
  cudaStream_t s = kcu::default_stream();
  const std::vector<int64_t> sizes = resnet_like_sizes(n);
  // FP16 gradients and compute copies, FP32 master, momentum / Adam moments: a mixed
  // precision model's optimizer state. Two gradient sets, alternated.
  std::vector<Tensor> keep;
  std::vector<kcu::ParamSlot> sgd_slots[2], adam_slots[2];
  int64_t total = 0;
  for (int64_t sz : sizes) {
    Tensor g0 = random_gpu({sz}, DType::F16, -1e-2f, 1e-2f), g1 = random_gpu({sz}, DType::F16, -1e-2f, 1e-2f);
    Tensor master = random_gpu({sz}, DType::F32, -0.1f, 0.1f), m = random_gpu({sz}, DType::F32, -1e-3f, 1e-3f);
    Tensor v = random_gpu({sz}, DType::F32, 1e-8f, 1e-6f), copy = Tensor::empty({sz}, DType::F16, kGpu);
    for (int set = 0; set < 2; ++set) {
      kcu::ParamSlot p;
      p.grad = (set ? g1 : g0).raw();
      p.grad_type = kcu::ElemType::F16;
      p.master = master.data<float>();
      p.state1 = m.data<float>();
      p.copy = copy.raw();
      p.copy_type = kcu::ElemType::F16;
      p.n = sz;
      sgd_slots[set].push_back(p);
      p.state2 = v.data<float>();
      adam_slots[set].push_back(p);
    }
    keep.insert(keep.end(), {g0, g1, master, m, v, copy});
    total += sz;
  }
  auto sgd_plans = std::make_shared<std::vector<std::unique_ptr<kcu::MultiTensorPlan>>>();
  auto adam_plans = std::make_shared<std::vector<std::unique_ptr<kcu::MultiTensorPlan>>>();
  for (int set = 0; set < 2; ++set) {
    sgd_plans->push_back(std::make_unique<kcu::MultiTensorPlan>(sgd_slots[set], s));
    adam_plans->push_back(std::make_unique<kcu::MultiTensorPlan>(adam_slots[set], s));
  }
  Tensor inv_scale = Tensor::full({1}, 1.0 / 1024, DType::F32, kGpu);
  Tensor found_inf = Tensor::zeros({1}, DType::I32, kGpu);  // stays 0: every step is applied
  keep.insert(keep.end(), {inv_scale, found_inf});  // the lambdas below hold raw pointers into these
  kcu::StepScalars sc;
  sc.inv_scale = inv_scale.data<float>();
  sc.found_inf = found_inf.data<int>();
  kernels::SgdConfig sgd;
  sgd.lr = 1e-6;
  sgd.momentum = 0.9;
  kernels::AdamConfig adam;
  adam.lr = 1e-6;
  const std::string shape = std::to_string(sizes.size()) + " tensors, " + std::to_string(total);
  // Per weight: SGD reads g (2), w, buf (8) and writes w, buf (8), copy (2): 20 B.
  // Adam reads g (2), w, m, v (12) and writes w, m, v (12), copy (2): 28 B.
  cases.push_back({"found-inf check (multi)", "fp16 grads", shape, 2.0 * total, [=](int i) {
                     (void)keep;
                     kcu::multi_all_finite(*(*sgd_plans)[i & 1], found_inf.data<int>(), s);
                   }});
  cases.push_back({"SGD momentum step (multi)", "fp16 grads", shape, 20.0 * total, [=](int i) {
                     (void)keep;
                     kcu::multi_sgd_step(*(*sgd_plans)[i & 1], sgd, sc, s);
                   }});
  cases.push_back({"Adam step (multi)", "fp16 grads", shape, 28.0 * total, [=](int i) {
                     (void)keep;
                     kcu::multi_adam_step(*(*adam_plans)[i & 1], adam, sc, s);
                   }});
}

void gpu_memory(const bench::Options& opt, std::vector<bench::Row>& rows) {
  // 64 Mi elements (256 MiB of FP32) even in quick mode: smaller sets would sit in the L2.
  const int64_t n = int64_t{1} << 26;
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 5 : 30;
  cudaStream_t s = kcu::default_stream();
  std::vector<bench::MemCase> cases;
  add_typed_cases<float>(cases, DType::F32, n);
  add_typed_cases<kernels::half>(cases, DType::F16, n);
  if (!opt.quick) add_typed_cases<bfloat16>(cases, DType::BF16, n);
  {
    std::vector<Tensor> x32 = {random_gpu({n}, DType::F32), random_gpu({n}, DType::F32)};
    std::vector<Tensor> x16 = {random_gpu({n}, DType::F16), random_gpu({n}, DType::F16)};
    Tensor y16 = Tensor::empty({n}, DType::F16, kGpu), y32 = Tensor::empty({n}, DType::F32, kGpu);
    Tensor yb = Tensor::empty({n}, DType::BF16, kGpu);
    Tensor flag = Tensor::zeros({1}, DType::I32, kGpu);
    const std::string flat = std::to_string(n);
    cases.push_back({"cast", "fp32->fp16", flat, 6.0 * n,
                     [=](int i) { kcu::cast(x32[i & 1].data<float>(), y16.data<kernels::half>(), n, s); }});
    cases.push_back({"cast", "fp32->bf16", flat, 6.0 * n,
                     [=](int i) { kcu::cast(x32[i & 1].data<float>(), yb.data<bfloat16>(), n, s); }});
    cases.push_back({"cast", "fp16->fp32", flat, 6.0 * n,
                     [=](int i) { kcu::cast(x16[i & 1].data<kernels::half>(), y32.data<float>(), n, s); }});
    cases.push_back({"found-inf check", "fp16", flat, 2.0 * n,
                     [=](int i) { kcu::all_finite(x16[i & 1].data<kernels::half>(), n, flag.data<int>(), s); }});
  }
  add_optimizer_cases(cases, n);
  double max_bytes = 0;
  for (const auto& c : cases) max_bytes = std::max(max_bytes, c.bytes);
  const double big = 2.0 * (size_t{1} << 30);
  CopyYardstick copy(static_cast<size_t>(std::max(max_bytes, big) / 2) + 64, iters);
  std::printf("  device-to-device copy of 1 GiB: %.0f GB/s (read + written)\n", big / (copy.ms(big) * 1e-3) / 1e9);
  for (const bench::MemCase& mc : cases) {
    bench::Row r = bench::make_row("cuda", "memory", mc.name, mc.dtype, mc.shape, "GB/s", mc.bytes);
    r.ms = time_gpu_ms(mc.run, 3, iters);
    r.ref_name = "D2D copy, same bytes";
    r.ref_ms = copy.ms(mc.bytes);
    rows.push_back(r);
  }
}

}  // namespace

bool bench::run_cuda(const Options& opt, std::vector<Row>& rows, std::string* why) {
  if (engine::cuda_device_count(why) == 0) return false;
  (void)engine::parse_device("cuda:0");  // checks the device index (the allocator registers on first use)
  const kcu::Context& ctx = kcu::context();
  std::printf("GPU section on %s (%d SMs, compute %d.%d)%s...\n", ctx.name.c_str(), ctx.sm_count, ctx.cc_major,
              ctx.cc_minor, opt.quick ? ", quick" : "");
  std::fflush(stdout);
  if (opt.wants("gemm")) gpu_gemm(opt, rows);
  if (opt.wants("conv")) gpu_conv(opt, rows);
  if (opt.wants("memory")) gpu_memory(opt, rows);
  kcu::stream_synchronize(kcu::default_stream());
  return true;
}
