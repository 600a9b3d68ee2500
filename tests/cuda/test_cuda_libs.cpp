// [cuda] cuDNN convolutions and cuBLASLt matrix products against the CPU reference kernels
// (kernels/cpu/conv.h, kernels/cpu/gemm.h) run in FP64 on the very same (FP16/BF16/FP32)
// input values, so the reference is exact to ~1e-16 and every difference is the GPU's own.
//
// Bounds are relative to the magnitude of the terms summed into each output element,
// mag = sum |a_i b_i| (+ |bias|), computed by the same CPU kernels on |inputs|:
//   FP32 (FMA math, no TF32): 2e-5. Summation order alone gives ~sqrt(K) u_32 ~ 1e-6; the
//     rest is room for transform-based algorithms (Winograd, FFT) that cuDNN may choose,
//     whose error follows the magnitude of a whole tile rather than one element: hence
//     also + 1% of the largest magnitude in `scale`.
//   TF32: 4e-3. Inputs are rounded to 10 mantissa bits (2^-11 relative each, two per
//     product), FP32 sums.
//   FP16: 4e-3. FP32 sums, one rounding of the result to FP16 (2^-11) and, with a bias
//     added after the convolution, a second one: 2 * 2^-11 ~ 1e-3, with margin.
//   BF16: 2e-2. Likewise with BF16's 2^-8: 2 * 2^-8 ~ 8e-3, with margin.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "catch2/catch.hpp"
#include "cuda_test_util.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/linear.h"
#include "kernels/element_math.h"

namespace kc = kernels::cpu;
namespace kg = kernels::cuda;
using namespace cuda_test;

namespace {

template <class T> double rel_bound(bool tf32) {
  if (std::is_same<T, half>::value) return 4e-3;
  if (std::is_same<T, bfloat16>::value) return 2e-2;
  return tf32 ? 4e-3 : 2e-5;
}

std::vector<double> abs_d(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
  return r;
}

// mag_i + 1% of the largest: see the file comment.
std::vector<double> scale_of(const std::vector<double>& mag) {
  const double m = max_abs(mag);
  std::vector<double> s(mag.size());
  for (size_t i = 0; i < mag.size(); ++i) s[i] = mag[i] + 0.01 * m;
  return s;
}

// Restores the global flags even when a REQUIRE aborts the test.
struct FlagsGuard {
  ~FlagsGuard() {
    kg::set_allow_tf32(false);
    kg::set_conv_algo_search(kg::ConvAlgoSearch::Heuristic);
    kg::set_gemm_bias_grad_epilogue(true);
    kg::set_conv_first_route_for_test(kg::ConvRoute::Search);
    kg::set_deterministic(true);  // as tests/cuda/main.cpp sets it
  }
};

struct ConvCase {
  int64_t n, h, w, c, k, r, s, stride, pad;
};
const std::vector<ConvCase> kConvCases = {
    {1, 5, 7, 3, 5, 3, 3, 1, 1},      // batch 1, RGB-like input channels, odd spatial sizes
    {4, 9, 9, 13, 7, 3, 3, 2, 1},     // odd channels, stride 2
    {2, 8, 8, 16, 32, 1, 1, 1, 0},    // pointwise
    {3, 11, 10, 8, 12, 5, 5, 1, 2},   // 5x5
    {64, 12, 12, 8, 16, 3, 3, 1, 1},  // large batch
};

template <class T> void run_conv_case(const ConvCase& cc, bool tf32) {
  INFO("conv " << type_name<T>() << (tf32 ? " tf32" : "") << " x[" << cc.n << "," << cc.h << "," << cc.w << ","
               << cc.c << "] w[" << cc.k << "," << cc.r << "," << cc.s << "," << cc.c << "] stride " << cc.stride
               << " pad " << cc.pad);
  const kernels::ConvShape cs{cc.n, cc.h, cc.w, cc.c, cc.k, cc.r, cc.s, cc.stride, cc.pad};
  const kernels::ConvShape gs{cc.n, cc.h, cc.w, cc.c, cc.k, cc.r, cc.s, cc.stride, cc.pad};
  const int64_t nx = cc.n * cc.h * cc.w * cc.c, nw = cc.k * cc.r * cc.s * cc.c;
  const int64_t ny = cc.n * cs.out_h() * cs.out_w() * cc.k;
  const double rel = rel_bound<T>(tf32);

  std::vector<T> x = random_vec<T>(nx, 61), w = random_vec<T>(nw, 62), b = random_vec<T>(cc.k, 63),
                 gy = random_vec<T>(ny, 64);
  const std::vector<double> xd = to_d(x), wd = to_d(w), bd = to_d(b), gyd = to_d(gy);
  const std::vector<double> xa = abs_d(xd), wa = abs_d(wd), ba = abs_d(bd), gya = abs_d(gyd);
  DeviceBuffer<T> dx(x), dw(w), db(b), dgy(gy);

  // Forward, with and without bias.
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    std::vector<double> ref(ny), mag(ny);
    kc::conv2d_forward<double>(cs, xd.data(), wd.data(), bias ? bd.data() : nullptr, ref.data());
    kc::conv2d_forward<double>(cs, xa.data(), wa.data(), bias ? ba.data() : nullptr, mag.data());
    DeviceBuffer<T> dy(ny);
    kg::conv2d_forward<T>(gs, dx.get(), dw.get(), bias ? db.get() : nullptr, dy.get(), stream());
    const std::vector<double> sc = scale_of(mag);
    expect_close(dy.download(), ref, rel, 0.0, "conv forward", &sc);
  }
  // Backward data.
  {
    std::vector<double> ref(nx), mag(nx);
    kc::conv2d_backward_data<double>(cs, gyd.data(), wd.data(), ref.data());
    kc::conv2d_backward_data<double>(cs, gya.data(), wa.data(), mag.data());
    DeviceBuffer<T> dgx(nx);
    kg::conv2d_backward_data<T>(gs, dgy.get(), dw.get(), dgx.get(), stream());
    const std::vector<double> sc = scale_of(mag);
    expect_close(dgx.download(), ref, rel, 0.0, "conv backward data", &sc);
  }
  // Backward filter and bias.
  {
    std::vector<double> ref(nw), mag(nw), refb(cc.k), magb(cc.k);
    kc::conv2d_backward_filter<double>(cs, xd.data(), gyd.data(), ref.data(), refb.data());
    kc::conv2d_backward_filter<double>(cs, xa.data(), gya.data(), mag.data(), magb.data());
    DeviceBuffer<T> dgw(nw), dgb(cc.k);
    kg::conv2d_backward_filter<T>(gs, dx.get(), dgy.get(), dgw.get(), dgb.get(), stream());
    const std::vector<double> sc = scale_of(mag), scb = scale_of(magb);
    expect_close(dgw.download(), ref, rel, 0.0, "conv backward filter", &sc);
    expect_close(dgb.download(), refb, rel, 0.0, "conv bias gradient", &scb);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("cuDNN convolutions match the CPU reference (heuristic algorithms)", "[cuda]", float, half,
                   bfloat16) {
  FlagsGuard guard;
  const size_t cached0 = kg::conv_algo_cache_size();
  for (const ConvCase& cc : kConvCases) run_conv_case<TestType>(cc, false);
  CHECK(kg::conv_algo_cache_size() > cached0);
  // The same shapes again come from the cache, and still match.
  const size_t cached1 = kg::conv_algo_cache_size();
  run_conv_case<TestType>(kConvCases[1], false);
  CHECK(kg::conv_algo_cache_size() == cached1);
  UNSCOPED_INFO(kg::conv_algo_report());
}

TEST_CASE("cuDNN convolutions with TF32 allowed and with benchmarked algorithms", "[cuda]") {
  FlagsGuard guard;
  kg::set_allow_tf32(true);
  for (const ConvCase& cc : kConvCases) run_conv_case<float>(cc, true);
  kg::set_allow_tf32(false);
  kg::set_conv_algo_search(kg::ConvAlgoSearch::Benchmark);
  for (const ConvCase& cc : kConvCases) {
    run_conv_case<half>(cc, false);
    run_conv_case<float>(cc, false);
  }
  // Workspaces go back to the cache after every call.
  CHECK(kg::cuda_allocator().stats().current[static_cast<int>(kernels::MemKind::Workspace)] == 0);
}

TEST_CASE("cuDNN fallbacks: the measured search and zero-padded channels give the same results", "[cuda]") {
  // As if the heuristics (then also the measured search) had found nothing that runs: the
  // 3- and 13-channel cases must come out right through each fallback, in FP16 and FP32.
  FlagsGuard guard;
  for (kg::ConvRoute route : {kg::ConvRoute::Measured, kg::ConvRoute::Padded}) {
    INFO((route == kg::ConvRoute::Measured ? "measured search" : "padded channels"));
    kg::clear_conv_algo_cache();
    kg::set_conv_first_route_for_test(route);
    for (const ConvCase& cc : kConvCases) {
      run_conv_case<half>(cc, false);
      run_conv_case<float>(cc, false);
    }
    const std::string report = kg::conv_algo_report();
    INFO(report);
    if (route == kg::ConvRoute::Measured) CHECK(report.find("measured search") != std::string::npos);
    else CHECK(report.find("zero-padded") != std::string::npos);
  }
  kg::set_conv_first_route_for_test(kg::ConvRoute::Search);
  kg::clear_conv_algo_cache();
  CHECK(kg::cuda_allocator().stats().current[static_cast<int>(kernels::MemKind::Workspace)] == 0);
}

TEST_CASE("deterministic mode: only deterministic algorithms, and a repeated backward is bit-identical", "[cuda]") {
  FlagsGuard guard;
  kg::set_deterministic(true);
  kg::clear_conv_algo_cache();
  // A batch large enough that cuDNN would consider its atomics-based backward algorithms.
  const kernels::ConvShape d{64, 16, 16, 32, 32, 3, 3, 1, 1};
  const int64_t nx = d.n * d.h * d.w * d.c, nw = d.k * d.r * d.s * d.c, ny = d.n * d.out_h() * d.out_w() * d.k;
  const std::vector<half> x = random_vec<half>(nx, 81), w = random_vec<half>(nw, 82), gy = random_vec<half>(ny, 83);
  DeviceBuffer<half> dx(x), dw(w), dgy(gy), dgw(nw), dgx(nx);
  kg::conv2d_backward_filter<half>(d, dx.get(), dgy.get(), dgw.get(), nullptr, stream());
  kg::conv2d_backward_data<half>(d, dgy.get(), dw.get(), dgx.get(), stream());
  const std::vector<half> gw1 = dgw.download(), gx1 = dgx.download();
  for (int rep = 0; rep < 3; ++rep) {
    dgw.poison();
    dgx.poison();
    kg::conv2d_backward_filter<half>(d, dx.get(), dgy.get(), dgw.get(), nullptr, stream());
    kg::conv2d_backward_data<half>(d, dgy.get(), dw.get(), dgx.get(), stream());
    expect_bits_equal(dgw.download(), gw1, "deterministic backward filter");
    expect_bits_equal(dgx.download(), gx1, "deterministic backward data");
  }
  // The choices themselves: cuDNN's non-deterministic algorithms are backward-filter ALGO_0
  // and ALGO_3 and backward-data ALGO_0 (they add with atomics); none may have been chosen.
  const std::string report = kg::conv_algo_report();
  INFO(report);
  int seen = 0;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("-> algo ");
    REQUIRE(at != std::string::npos);
    const int algo = std::stoi(line.substr(at + 8));
    if (line.find("bwd-filter") != std::string::npos) {
      CHECK(algo != 0);
      CHECK(algo != 3);
      ++seen;
    } else if (line.find("bwd-data") != std::string::npos) {
      CHECK(algo != 0);
      ++seen;
    }
  }
  CHECK(seen == 2);
}

// ---- cuBLASLt ----------------------------------------------------------------------------------

namespace {

struct LinCase {
  int64_t rows, in, out;
};
const std::vector<LinCase> kLinCases = {{1, 13, 10}, {37, 64, 33}, {300, 8, 8}, {512, 129, 70}};

template <class T> void run_linear_case(const LinCase& lc, bool tf32) {
  const int64_t R = lc.rows, I = lc.in, O = lc.out;
  INFO("linear " << type_name<T>() << (tf32 ? " tf32" : "") << " rows " << R << " in " << I << " out " << O);
  const double rel = rel_bound<T>(tf32);
  std::vector<T> x = random_vec<T>(R * I, 71), w = random_vec<T>(O * I, 72), b = random_vec<T>(O, 73),
                 gy = random_vec<T>(R * O, 74);
  const std::vector<double> xd = to_d(x), wd = to_d(w), bd = to_d(b), gyd = to_d(gy);
  DeviceBuffer<T> dx(x), dw(w), db(b), dgy(gy);

  for (kg::Epilogue ep : {kg::Epilogue::None, kg::Epilogue::Relu, kg::Epilogue::Gelu}) {
    for (bool bias : {true, false}) {
      INFO("epilogue " << static_cast<int>(ep) << " bias " << bias);
      std::vector<double> pre(R * O), mag(R * O), ref(R * O);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t o = 0; o < O; ++o) {
          double s = bias ? bd[o] : 0.0, m = bias ? std::fabs(bd[o]) : 0.0;
          for (int64_t i = 0; i < I; ++i) {
            s += xd[r * I + i] * wd[o * I + i];
            m += std::fabs(xd[r * I + i] * wd[o * I + i]);
          }
          pre[r * O + o] = s;
          mag[r * O + o] = m;
          ref[r * O + o] = ep == kg::Epilogue::Relu   ? (s > 0 ? s : 0.0)
                           : ep == kg::Epilogue::Gelu ? kernels::gelu_fwd<double>(s)
                                                      : s;
        }
      DeviceBuffer<T> dy(R * O), dpre(R * O);
      kg::linear_forward<T>(R, I, O, dx.get(), dw.get(), bias ? db.get() : nullptr, dy.get(), ep, stream(),
                            ep == kg::Epilogue::Gelu ? dpre.get() : nullptr);
      // relu and gelu are 1- and 1.13-Lipschitz: the pre-activation's bound carries over.
      std::vector<double> sc = scale_of(mag);
      for (double& v : sc) v *= 1.2;
      expect_close(dy.download(), ref, rel, 0.0, "linear forward", &sc);
      if (ep == kg::Epilogue::Gelu) expect_close(dpre.download(), pre, rel, 0.0, "pre-activation", &sc);
    }
  }
  // gx = gy w.
  {
    std::vector<double> ref(R * I, 0.0), mag(R * I, 0.0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < I; ++i) {
          ref[r * I + i] += gyd[r * O + o] * wd[o * I + i];
          mag[r * I + i] += std::fabs(gyd[r * O + o] * wd[o * I + i]);
        }
    DeviceBuffer<T> dgx(R * I);
    kg::linear_backward_data<T>(R, I, O, dgy.get(), dw.get(), dgx.get(), stream());
    const std::vector<double> sc = scale_of(mag);
    expect_close(dgx.download(), ref, rel, 0.0, "linear backward data", &sc);
  }
  // gw = gy^T x and gbias = column sums of gy, through BGRADB and through the fallback.
  std::vector<double> ref(O * I, 0.0), mag(O * I, 0.0), refb(O, 0.0), magb(O, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) {
      refb[o] += gyd[r * O + o];
      magb[o] += std::fabs(gyd[r * O + o]);
      for (int64_t i = 0; i < I; ++i) {
        ref[o * I + i] += gyd[r * O + o] * xd[r * I + i];
        mag[o * I + i] += std::fabs(gyd[r * O + o] * xd[r * I + i]);
      }
    }
  const std::vector<double> sc = scale_of(mag), scb = scale_of(magb);
  for (bool bgradb : {true, false}) {
    INFO("BGRADB epilogue " << bgradb << " (fallbacks so far: " << kg::gemm_epilogue_fallbacks() << ")");
    kg::set_gemm_bias_grad_epilogue(bgradb);
    DeviceBuffer<T> dgw(O * I), dgb(O);
    kg::linear_backward_weight<T>(R, I, O, dx.get(), dgy.get(), dgw.get(), dgb.get(), stream());
    expect_close(dgw.download(), ref, rel, 0.0, "linear backward weight", &sc);
    expect_close(dgb.download(), refb, rel, 0.0, "linear bias gradient", &scb);
    DeviceBuffer<T> dgw2(O * I);  // without a bias gradient
    kg::linear_backward_weight<T>(R, I, O, dx.get(), dgy.get(), dgw2.get(), nullptr, stream());
    expect_close(dgw2.download(), ref, rel, 0.0, "linear backward weight, no bias", &sc);
  }
  kg::set_gemm_bias_grad_epilogue(true);
}

}  // namespace

TEMPLATE_TEST_CASE("cuBLASLt linear forward (bias, ReLU, GELU) and backward match the reference", "[cuda]", float,
                   half, bfloat16) {
  FlagsGuard guard;
  for (const LinCase& lc : kLinCases) run_linear_case<TestType>(lc, false);
  CHECK(kg::gemm_algo_cache_size() > 0);
}

TEST_CASE("cuBLASLt FP32 linear with TF32 allowed", "[cuda]") {
  FlagsGuard guard;
  kg::set_allow_tf32(true);
  for (const LinCase& lc : kLinCases) run_linear_case<float>(lc, true);
}

TEMPLATE_TEST_CASE("cuBLASLt gemm honours the row-major contract: transposes, ld, alpha, beta", "[cuda][sanitize]", float, half,
                   bfloat16) {
  using T = TestType;
  const double rel = rel_bound<T>(false);
  const int64_t M = 5, N = 7, K = 3;
  for (kg::Trans ta : {kg::Trans::N, kg::Trans::T})
    for (kg::Trans tb : {kg::Trans::N, kg::Trans::T})
      for (int64_t k : {K, int64_t(0)}) {
        INFO("ta " << static_cast<int>(ta) << " tb " << static_cast<int>(tb) << " K " << k << " " << type_name<T>());
        const int64_t lda = (ta == kg::Trans::N ? k : M) + 2, ldb = (tb == kg::Trans::N ? N : k) + 1, ldc = N + 3;
        const int64_t arows = ta == kg::Trans::N ? M : k, brows = tb == kg::Trans::N ? k : N;
        std::vector<T> a = random_vec<T>(std::max<int64_t>(1, arows * lda), 81),
                       b = random_vec<T>(std::max<int64_t>(1, brows * ldb), 82), c = random_vec<T>(M * ldc, 83);
        const float alpha = 2.0f, beta = 0.5f;
        std::vector<double> ref = to_d(c), mag(M * ldc);
        const std::vector<double> ad = to_d(a), bd = to_d(b), aa = abs_d(ad), ba = abs_d(bd);
        for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(beta * ref[i]);
        kc::gemm<double>(ta == kg::Trans::N ? kc::Trans::N : kc::Trans::T,
                         tb == kg::Trans::N ? kc::Trans::N : kc::Trans::T, M, N, k, alpha, ad.data(), lda, bd.data(),
                         ldb, beta, ref.data(), ldc);
        kc::gemm<double>(ta == kg::Trans::N ? kc::Trans::N : kc::Trans::T,
                         tb == kg::Trans::N ? kc::Trans::N : kc::Trans::T, M, N, k, alpha, aa.data(), lda, ba.data(),
                         ldb, 1.0, mag.data(), ldc);
        // The padding columns between N and ldc are not part of C: they must be left as they were.
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = N; j < ldc; ++j) ref[i * ldc + j] = to_d(c[i * ldc + j]);
        DeviceBuffer<T> da(a), db(b), dc(c);
        kg::gemm<T>(ta, tb, M, N, k, alpha, da.get(), lda, db.get(), ldb, beta, dc.get(), ldc, stream());
        // beta * C is one more rounding on top of the product's: 2 u_T |beta c| is inside rel * mag.
        const std::vector<T> got = dc.download();
        expect_close(got, ref, rel, 0.0, "gemm", &mag);
        int64_t padding_changed = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = N; j < ldc; ++j) padding_changed += to_d(got[i * ldc + j]) != to_d(c[i * ldc + j]);
        CHECK(padding_changed == 0);
      }
}
