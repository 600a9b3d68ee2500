// Benchmark of kernels::cpu::gemm: GFLOP/s at the shapes our CNN produces (im2col convs,
// classifier) and square sizes, per storage type; optionally side by side with OpenBLAS sgemm.
//   bench_cpu_gemm [--quick] [--json FILE]
// Build with -DENGINE_HAVE_OPENBLAS and link openblas for the comparison column.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/numeric.h"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(ENGINE_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace {

using kernels::cpu::Trans;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* what;
  int64_t M, N, K;
};

// NHWC im2col: M = batch*H*W output pixels, N = output channels, K = kh*kw*in channels.
const Shape kShapes[] = {
    {"conv1 3x3x3->16, 64x32x32", 65536, 16, 27},
    {"conv 3x3x16->32, 64x16x16", 16384, 32, 144},
    {"deep 256x256x2048", 256, 256, 2048},
    {"linear 256->10, batch 256", 256, 10, 256},
    {"square 512", 512, 512, 512},
    {"square 1024", 1024, 1024, 1024},
};

struct Result {
  std::string dtype, what;
  int64_t M, N, K;
  double gflops, blas_gflops;  // blas_gflops < 0: not measured
};

// Median GFLOP/s of `reps` timings, each of enough calls to take about `min_s` seconds.
// Idle threads of the other library spin for a while after their last call and would steal
// the cores (OpenBLAS's for ~0.1 s), so each measurement starts after a pause.
template <class F>
double measure(F&& f, double flops, int reps, double min_s) {
#if defined(ENGINE_HAVE_OPENBLAS)
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
#endif
  f();  // warm-up: page faults, packing buffers, thread team
  auto t0 = Clock::now();
  f();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const int calls = std::max(1, static_cast<int>(min_s / std::max(once, 1e-7)));
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    t0 = Clock::now();
    for (int c = 0; c < calls; ++c) f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(flops * calls / s * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

template <class T>
std::vector<T> random_matrix(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

template <class T>
Result run_one(const char* dtype, const Shape& s, int reps, double min_s, bool with_blas) {
  std::mt19937 rng(42);
  auto A = random_matrix<T>(size_t(s.M * s.K), rng);
  auto B = random_matrix<T>(size_t(s.K * s.N), rng);
  std::vector<T> C(size_t(s.M * s.N));
  const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
  Result r{dtype, s.what, s.M, s.N, s.K, 0.0, -1.0};
  r.gflops = measure(
      [&] {
        kernels::cpu::gemm<T>(Trans::N, Trans::N, s.M, s.N, s.K, 1.0, A.data(), s.K, B.data(),
                              s.N, 0.0, C.data(), s.N);
      },
      flops, reps, min_s);
#if defined(ENGINE_HAVE_OPENBLAS)
  if constexpr (std::is_same<T, float>::value) {
    if (with_blas) {
      r.blas_gflops = measure(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.M), int(s.N), int(s.K),
                        1.f, A.data(), int(s.K), B.data(), int(s.N), 0.f, C.data(), int(s.N));
          },
          flops, reps, min_s);
    }
  }
#else
  (void)with_blas;
#endif
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  const int reps = quick ? 3 : 7;
  const double min_s = quick ? 0.02 : 0.1;
  int threads = 1;
#if defined(_OPENMP)
  threads = omp_get_max_threads();
#endif
  std::printf("CPU GEMM (C = A*B, row-major, no transposes), %d thread(s), median of %d\n", threads,
              reps);
#if defined(ENGINE_HAVE_OPENBLAS)
  std::printf("OpenBLAS sgemm alongside for FP32 (set OPENBLAS_NUM_THREADS to match)\n");
#else
  std::printf("OpenBLAS comparison not built (-DENGINE_HAVE_OPENBLAS and -lopenblas)\n");
#endif

  std::vector<Result> results;
  for (const Shape& s : kShapes) results.push_back(run_one<float>("fp32", s, reps, min_s, true));
  // Other types: FP64 for gradient checks, FP16/BF16 storage with FP32 accumulation.
  for (const Shape& s : kShapes) {
    if (quick && s.M * s.N * s.K > (int64_t(1) << 28)) continue;
    results.push_back(run_one<double>("fp64", s, reps, min_s, false));
    results.push_back(run_one<kernels::half>("fp16", s, reps, min_s, false));
    results.push_back(run_one<kernels::bfloat16>("bf16", s, reps, min_s, false));
  }

  std::printf("%-5s %-28s %6s %5s %5s %9s %9s %6s\n", "dtype", "shape", "M", "N", "K", "GFLOP/s",
              "OpenBLAS", "ratio");
  for (const Result& r : results) {
    std::printf("%-5s %-28s %6lld %5lld %5lld %9.1f", r.dtype.c_str(), r.what.c_str(),
                (long long)r.M, (long long)r.N, (long long)r.K, r.gflops);
    if (r.blas_gflops > 0)
      std::printf(" %9.1f %5.0f%%\n", r.blas_gflops, 100.0 * r.gflops / r.blas_gflops);
    else
      std::printf(" %9s %6s\n", "-", "-");
  }

  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "{\n  \"benchmark\": \"cpu_gemm\",\n  \"threads\": %d,\n  \"results\": [\n",
                 threads);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "    {\"dtype\": \"%s\", \"shape\": \"%s\", \"M\": %lld, \"N\": %lld, "
                   "\"K\": %lld, \"gflops\": %.3f",
                   r.dtype.c_str(), r.what.c_str(), (long long)r.M, (long long)r.N, (long long)r.K,
                   r.gflops);
      if (r.blas_gflops > 0)
        std::fprintf(f, ", \"openblas_gflops\": %.3f, \"ratio\": %.4f", r.blas_gflops,
                     r.gflops / r.blas_gflops);
      std::fprintf(f, "}%s\n", i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
