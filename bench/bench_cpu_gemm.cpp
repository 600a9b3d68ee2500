// Benchmark of kernels::cpu::gemm: GFLOP/s at the shapes our CNN produces (im2col convs,
// classifier) and square sizes, per storage type; optionally side by side with OpenBLAS sgemm.
// BF16 runs on the CPU's BF16 unit where it has one (AMX, AVX512-BF16): those rows also give
// GFLOP/s per core against the unit's peak (dpbf16ps on resident tiles, measured here first).
//   bench_cpu_gemm [--quick] [--json FILE]
// Build with -DENGINE_HAVE_OPENBLAS and link openblas for the comparison column. Debian's
// OpenBLAS 0.3.21 runs its AVX2 (Haswell) kernels on Zen 4/5; OPENBLAS_CORETYPE=SkylakeX
// selects its AVX-512 ones, the fairer reference there.
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

#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/cpu_isa.h"
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
  Trans ta, tb;
  int64_t M, N, K;
};

// NHWC im2col as kernels/cpu/conv.h calls it: forward y = col * w^T (NT, M = output pixels,
// N = output channels, K = kh*kw*in), backward data gcol = gy * w (NN), backward filter
// gw = gy^T * col (TN). Linear: y = x * w^T (NT).
const Shape kShapes[] = {
    {"conv1 fwd 3x3x3->16", Trans::N, Trans::T, 65536, 16, 27},
    {"conv fwd 3x3x16->32", Trans::N, Trans::T, 16384, 32, 144},
    {"conv bwd-data 3x3x16->32", Trans::N, Trans::N, 16384, 144, 32},
    {"conv bwd-filter 3x3x16->32", Trans::T, Trans::N, 32, 144, 16384},
    {"deep 256x256x2048", Trans::N, Trans::N, 256, 256, 2048},
    {"linear 256->10, batch 256", Trans::N, Trans::T, 256, 10, 256},
    {"square 512", Trans::N, Trans::N, 512, 512, 512},
    {"square 1024", Trans::N, Trans::N, 1024, 1024, 1024},
};

struct Result {
  std::string dtype, what, op;
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

// Leading dimensions follow from the stored shapes (A is M x K or K x M, B is K x N or N x K).
template <class T>
Result run_one(const char* dtype, const Shape& s, int reps, double min_s, bool with_blas) {
  std::mt19937 rng(42);
  auto A = random_matrix<T>(size_t(s.M * s.K), rng);
  auto B = random_matrix<T>(size_t(s.K * s.N), rng);
  std::vector<T> C(size_t(s.M * s.N));
  const int64_t lda = s.ta == Trans::N ? s.K : s.M;
  const int64_t ldb = s.tb == Trans::N ? s.N : s.K;
  const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
  std::string op = std::string(s.ta == Trans::N ? "N" : "T") + (s.tb == Trans::N ? "N" : "T");
  Result r{dtype, s.what, op, s.M, s.N, s.K, 0.0, -1.0};
  r.gflops = measure(
      [&] {
        kernels::cpu::gemm<T>(s.ta, s.tb, s.M, s.N, s.K, 1.0, A.data(), lda, B.data(), ldb, 0.0,
                              C.data(), s.N);
      },
      flops, reps, min_s);
#if defined(ENGINE_HAVE_OPENBLAS)
  if constexpr (std::is_same<T, float>::value) {
    if (with_blas) {
      const auto ta = s.ta == Trans::N ? CblasNoTrans : CblasTrans;
      const auto tb = s.tb == Trans::N ? CblasNoTrans : CblasTrans;
      r.blas_gflops = measure(
          [&] {
            cblas_sgemm(CblasRowMajor, ta, tb, int(s.M), int(s.N), int(s.K), 1.f, A.data(),
                        int(lda), B.data(), int(ldb), 0.f, C.data(), int(s.N));
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
  std::printf("CPU GEMM C = op(A)*op(B), row-major, %d thread(s), median of %d\n%s\n", threads, reps,
              kernels::cpu::cpu_isa_report().c_str());
#if defined(ENGINE_HAVE_OPENBLAS)
  std::printf("OpenBLAS sgemm alongside for FP32 (set OPENBLAS_NUM_THREADS to match)\n");
#else
  std::printf("OpenBLAS comparison not built (-DENGINE_HAVE_OPENBLAS and -lopenblas)\n");
#endif

  kernels::cpu::TileUnit unit;
  double unit_peak = 0;  // GFLOP/s per core of the BF16 unit, 0 without one
  if (kernels::cpu::bf16_tile_unit(&unit)) {
    unit_peak = kernels::cpu::tile_peak_gflops(unit);
    std::printf("BF16 unit: %s, peak %.0f GFLOP/s per core (dpbf16ps on resident tiles)\n",
                kernels::cpu::tile_unit_name(unit), unit_peak);
  } else {
    std::printf("BF16 unit: none (BF16 runs widened to FP32)\n");
  }

  std::vector<Result> results;
  for (const Shape& s : kShapes) results.push_back(run_one<float>("fp32", s, reps, min_s, true));
  // Other types: FP64 for gradient checks, FP16/BF16 storage with FP32 accumulation.
  for (const Shape& s : kShapes) {
    if (quick && s.M * s.N * s.K > (int64_t(1) << 28)) continue;
    results.push_back(run_one<double>("fp64", s, reps, min_s, false));
    results.push_back(run_one<kernels::half>("fp16", s, reps, min_s, false));
    results.push_back(run_one<kernels::bfloat16>("bf16", s, reps, min_s, false));
  }

  std::printf("%-5s %-27s %2s %6s %5s %6s %9s %9s %6s %13s\n", "dtype", "shape", "op", "M", "N", "K",
              "GFLOP/s", "OpenBLAS", "ratio", "/core of peak");
  for (const Result& r : results) {
    std::printf("%-5s %-27s %2s %6lld %5lld %6lld %9.1f", r.dtype.c_str(), r.what.c_str(),
                r.op.c_str(), (long long)r.M, (long long)r.N, (long long)r.K, r.gflops);
    if (r.blas_gflops > 0)
      std::printf(" %9.1f %5.0f%%", r.blas_gflops, 100.0 * r.gflops / r.blas_gflops);
    else
      std::printf(" %9s %6s", "-", "-");
    if (r.dtype == "bf16" && unit_peak > 0)
      std::printf(" %12.0f%%\n", 100.0 * r.gflops / threads / unit_peak);
    else
      std::printf(" %13s\n", "-");
  }

  if (json_path) {
    FILE* f = std::fopen(json_path, "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(f, "{\n  \"benchmark\": \"cpu_gemm\",\n  \"threads\": %d,\n  \"bf16_unit_peak_gflops_per_core\": %.1f,\n  \"results\": [\n",
                 threads, unit_peak);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "    {\"dtype\": \"%s\", \"shape\": \"%s\", \"op\": \"%s\", \"M\": %lld, "
                   "\"N\": %lld, \"K\": %lld, \"gflops\": %.3f",
                   r.dtype.c_str(), r.what.c_str(), r.op.c_str(), (long long)r.M, (long long)r.N,
                   (long long)r.K, r.gflops);
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
