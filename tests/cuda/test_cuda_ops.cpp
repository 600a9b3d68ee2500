// [cuda] element-wise kernels, pooling, batch-norm and cross-entropy against the CPU
// reference kernels (kernels/cpu/) on the same inputs, per dtype, outputs poisoned with NaN.
//
// Error bounds. Where both sides evaluate the same expression with IEEE operations that the
// compiler cannot contract into an FMA (a single add, multiply or division, a conversion, a
// copy), the results must be bit-identical, and are checked so: relu, add, scale, cast,
// dropout, fill, max-pool (forward, argmax, backward), global average pool, the
// cross-entropy backward. Elsewhere the bound is stated at each check, in units of the
// storage type's unit roundoff u_T (half an ulp at 1: 2^-11 FP16, 2^-8 BF16, 2^-24 FP32)
// times the magnitude of the terms that were summed.
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"
#include "cuda_test_util.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/pool.h"

namespace kc = kernels::cpu;
namespace kg = kernels::cuda;
using namespace cuda_test;

namespace {

// Sizes: a single element, odd sizes below and above one 16-byte pack, an odd size that
// exercises the packed body plus a ragged tail over many blocks.
const std::vector<int64_t> kSizes = {1, 7, 1000, 1000003};

// Runs `body(n, offset)` for every size, with the arrays aligned (offset 0: 16-byte packed
// path) and shifted by one element (offset 1: the element-by-element path).
template <class F> void for_sizes(F body) {
  for (int64_t n : kSizes)
    for (int64_t off : {0, 1}) {
      INFO("n = " << n << ", pointer offset " << off << " elements");
      body(n, off);
    }
}

}  // namespace

// ---- element-wise ------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("element-wise kernels match the CPU reference", "[cuda]", float, half, bfloat16, double) {
  using T = TestType;
  INFO("dtype " << type_name<T>());
  for_sizes([&](int64_t n, int64_t off) {
    const size_t total = static_cast<size_t>(n + off);
    std::vector<T> a = random_vec<T>(total, 11, -3, 3), b = random_vec<T>(total, 12, -3, 3);
    DeviceBuffer<T> da(a), db(b), dy(total);
    const T* pa = da.get() + off;
    const T* pb = db.get() + off;
    T* py = dy.get() + off;
    std::vector<T> want(total);
    auto gpu = [&] {
      std::vector<T> all = dy.download();
      return std::vector<T>(all.begin() + off, all.end());
    };
    auto cpu = [&] { return std::vector<T>(want.begin() + off, want.end()); };

    // Exact: one rounding of the same float (double for double) expression on both sides.
    dy.poison();
    kg::relu_forward(pa, py, n, stream());
    kc::relu_forward(a.data() + off, want.data() + off, n);
    expect_bits_equal(gpu(), cpu(), "relu_forward");

    dy.poison();
    kg::relu_backward(pa, pb, py, n, stream());
    kc::relu_backward(a.data() + off, b.data() + off, want.data() + off, n);
    expect_bits_equal(gpu(), cpu(), "relu_backward");

    dy.poison();
    kg::add(pa, pb, py, n, stream());
    kc::add(a.data() + off, b.data() + off, want.data() + off, n);
    expect_bits_equal(gpu(), cpu(), "add");

    dy.poison();
    kg::scale(pa, -0.37, py, n, stream());
    kc::scale(a.data() + off, -0.37, want.data() + off, n);
    expect_bits_equal(gpu(), cpu(), "scale");

    // In place (y == x), as the engine's gradient accumulation uses it.
    {
      DeviceBuffer<T> dz(a);
      kg::add(dz.get() + off, pb, dz.get() + off, n, stream());
      std::vector<T> all = dz.download();
      kc::add(a.data() + off, b.data() + off, want.data() + off, n);
      expect_bits_equal(std::vector<T>(all.begin() + off, all.end()), cpu(), "add in place");
    }

    // GELU: erf and exp differ between the device's and glibc's libm by a couple of ulps
    // of the accumulation type. Near x ~ -3, 1 + erf(x/sqrt2) cancels, so that error is
    // relative to |x|, not to the small result: allowed = 8 u_A (|x| + |y|) + 2 u_T |y|.
    const double ua = std::is_same<T, double>::value ? unit_roundoff<double>() : unit_roundoff<float>();
    {
      dy.poison();
      kg::unary_forward<kernels::GeluOp>(pa, py, n, stream());
      kc::unary_forward<kernels::GeluOp>(a.data() + off, want.data() + off, n);
      std::vector<double> w = to_d(cpu()), sc(w.size());
      for (size_t i = 0; i < w.size(); ++i)
        sc[i] = 8 * ua * (std::fabs(to_d(a[off + i])) + std::fabs(w[i])) + 2 * unit_roundoff<T>() * std::fabs(w[i]);
      expect_close(gpu(), w, 1.0, 0.0, "gelu_forward", &sc);
    }
    {
      dy.poison();
      kg::unary_backward<kernels::GeluOp>(pa, pb, py, n, stream());
      kc::unary_backward<kernels::GeluOp>(a.data() + off, b.data() + off, want.data() + off, n);
      std::vector<double> w = to_d(cpu()), sc(w.size());
      for (size_t i = 0; i < w.size(); ++i)  // |d gelu/dx| <= 1.13, so |gy| * 2 bounds the terms
        sc[i] = 8 * ua * 2 * std::fabs(to_d(b[off + i])) + 2 * unit_roundoff<T>() * std::fabs(w[i]);
      expect_close(gpu(), w, 1.0, 0.0, "gelu_backward", &sc);
    }

    // Dropout: the masks must agree bit for bit (same Philox counters), hence the values too.
    for (float p : {0.0f, 0.3f, 1.0f}) {
      INFO("dropout p = " << p);
      dy.poison();
      kg::dropout(pa, py, n, p, 0x1234abcdULL, 5, 0, stream());
      kc::dropout(a.data() + off, want.data() + off, n, p, 0x1234abcdULL, 5, 0);
      expect_bits_equal(gpu(), cpu(), "dropout");
    }

    dy.poison();
    kg::fill(py, -2.7182818, n, stream());
    for (int64_t i = 0; i < n; ++i) want[off + i] = kernels::convert<T>(-2.7182818);
    expect_bits_equal(gpu(), cpu(), "fill");
  });
}

TEMPLATE_TEST_CASE("dropout masks are identical on CPU and GPU and independent of the input", "[cuda]", float, half) {
  using T = TestType;
  const int64_t n = 4099;  // not a multiple of the 4 words of a Philox block
  // first: where these elements sit in a larger batch (a data-parallel shard); 7 is not a
  // multiple of 4 either, so the GPU's blocks of 4 straddle the shard's start.
  for (uint64_t first : {uint64_t(0), uint64_t(7), uint64_t(4096)}) {
    INFO("first " << first);
    std::vector<T> ones(n, kernels::convert<T>(1.0)), want(n);
    DeviceBuffer<T> dx(ones), dy(n);
    kg::dropout(dx.get(), dy.get(), n, 0.5f, 42, 3, first, stream());
    kc::dropout(ones.data(), want.data(), n, 0.5f, 42, 3, first);
    std::vector<T> got = dy.download();
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep_gpu = to_d(got[i]) != 0.0, keep_cpu = to_d(want[i]) != 0.0;
      CHECK(keep_gpu == keep_cpu);
      CHECK(keep_gpu == kernels::dropout_keep(42, 3, first + static_cast<uint64_t>(i), 0.5f));
      kept += keep_gpu;
    }
    CHECK(kept > n / 2 - 200);
    CHECK(kept < n / 2 + 200);
  }
}

TEST_CASE("cast between every pair of float types matches convert<To> bit for bit", "[cuda]") {
  const int64_t n = 100003;
  // Wide range: subnormals of half, values past half's max (-> inf), bf16 ties.
  std::vector<double> src(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u = kernels::philox_uniform(99, 1, static_cast<uint64_t>(i));
    src[i] = std::ldexp(u * 2 - 1, static_cast<int>(i % 48) - 28);
  }
  src[0] = std::numeric_limits<double>::quiet_NaN();
  src[1] = std::numeric_limits<double>::infinity();
  src[2] = -0.0;
  src[3] = 65520.0;  // rounds to inf in half
  // NaNs with payloads and signs: the GPU's cvt would return the canonical NaN for each, so
  // these check the patch in numeric.h (float_to_double, double_to_float).
  const uint64_t nans[] = {0xfff8000000000000ull, 0x7ff4000000000001ull, 0x7ff80000deadbeefull};
  for (size_t i = 0; i < 3; ++i) std::memcpy(&src[4 + i], &nans[i], sizeof(double));
  auto run = [&](auto from_tag, auto to_tag) {
    using F = decltype(from_tag);
    using To = decltype(to_tag);
    INFO("cast " << type_name<F>() << " -> " << type_name<To>());
    std::vector<F> x = from_d<F>(src);
    std::vector<To> want(n);
    kc::cast(x.data(), want.data(), n);
    DeviceBuffer<F> dx(x);
    DeviceBuffer<To> dy(n);
    kg::cast(dx.get(), dy.get(), n, stream());
    expect_bits_equal(dy.download(), want, "cast");
  };
  auto from_all = [&](auto from_tag) {
    run(from_tag, float{});
    run(from_tag, double{});
    run(from_tag, half{});
    run(from_tag, bfloat16{});
  };
  from_all(float{});
  from_all(double{});
  from_all(half{});
  from_all(bfloat16{});
}

TEST_CASE("FP16 conversions on the device: all 65,536 patterns and every rounding midpoint", "[cuda]") {
  // The GPU converts with cvt and patches NaNs (kernels/numeric.h); the bit-manipulation
  // reference defines the answer on every input, NaN payloads included.
  std::vector<half> all(65536);
  std::vector<float> widened(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    all[b] = half::from_bits(static_cast<uint16_t>(b));
    widened[b] = kernels::half_bits_to_float_soft(static_cast<uint16_t>(b));
  }
  DeviceBuffer<half> dh(all);
  DeviceBuffer<float> df(all.size());
  kg::cast(dh.get(), df.get(), static_cast<int64_t>(all.size()), stream());
  expect_bits_equal(df.download(), widened, "half -> float");

  // Narrowing: every finite half, the midpoint to its neighbour and one float ulp either
  // side of it (ties to even), both signs; plus overflow, float subnormals, NaN payloads.
  std::vector<float> probes;
  for (uint32_t b = 0; b < 0x7c00u; ++b) {
    const float v = kernels::half_bits_to_float_soft(static_cast<uint16_t>(b));
    const float next = kernels::half_bits_to_float_soft(static_cast<uint16_t>(b + 1));
    const float mid = v + (next - v) / 2;  // exact: floats carry 13 more bits than halves
    for (float p : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  for (uint32_t bits : {0x477fefffu, 0x477ff000u, 0x477ff001u, 0x7f7fffffu, 0x7f800000u, 0x00000001u, 0x007fffffu, 0x7f800001u,
                        0x7fc00000u, 0x7fbfe000u, 0xffc12345u, 0x7f802000u})
    probes.push_back(kernels::bits_float(bits));
  std::vector<half> narrowed(probes.size());
  for (size_t i = 0; i < probes.size(); ++i) narrowed[i] = half::from_bits(kernels::float_to_half_bits_soft(probes[i]));
  DeviceBuffer<float> dp(probes);
  DeviceBuffer<half> dn(probes.size());
  kg::cast(dp.get(), dn.get(), static_cast<int64_t>(probes.size()), stream());
  expect_bits_equal(dn.download(), narrowed, "float -> half");
}

TEMPLATE_TEST_CASE("all_finite sets the flag on inf or NaN and never clears it", "[cuda]", float, half, bfloat16,
                   double) {
  using T = TestType;
  for (int64_t n : kSizes) {
    INFO("n = " << n);
    std::vector<T> x = random_vec<T>(static_cast<size_t>(n), 3, -60000, 60000);
    DeviceBuffer<T> dx(x);
    DeviceBuffer<int> flag(1);
    auto run = [&](int start) {
      flag.upload({start});
      kg::all_finite(dx.get(), n, flag.get(), stream());
      return flag.download()[0];
    };
    CHECK(run(0) == 0);
    CHECK(run(1) == 1);  // never cleared
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<T> y = x;
      y[static_cast<size_t>(n - 1)] = kernels::convert<T>(bad);  // the last element: the ragged tail
      dx.upload(y);
      CHECK(run(0) == 1);
      if (n > 2) {
        y = x;
        y[static_cast<size_t>(n / 2)] = kernels::convert<T>(bad);
        dx.upload(y);
        CHECK(run(0) == 1);
      }
    }
    dx.upload(x);
    CHECK(run(0) == 0);
  }
}

TEMPLATE_TEST_CASE("sum, row bias and column sums", "[cuda]", float, half, bfloat16, double) {
  using T = TestType;
  using A = kernels::acc_t<T>;
  for (int64_t n : kSizes) {
    INFO("n = " << n);
    std::vector<T> x = random_vec<T>(static_cast<size_t>(n), 21);
    double exact = 0, mag = 0;
    for (T v : x) {
      exact += to_d(v);
      mag += std::fabs(to_d(v));
    }
    DeviceBuffer<T> dx(x);
    DeviceBuffer<A> out(1);
    kg::sum(dx.get(), n, out.get(), stream());
    // Summing n terms in A (tree order) errs by at most ~log2(n) * u_A * sum|x|; 64 u_A is generous.
    const std::vector<double> mags{mag};
    expect_close(out.download(), {exact}, 64 * unit_roundoff<A>(), 0.0, "sum", &mags);
  }
  for (auto rc : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {1000, 37}, {4097, 64}, {33, 300}}) {
    const int64_t rows = rc.first, cols = rc.second;
    INFO("rows " << rows << " cols " << cols);
    std::vector<T> x = random_vec<T>(static_cast<size_t>(rows * cols), 31), bias = random_vec<T>(cols, 32);
    // Row bias: one rounding of acc(y) + acc(b), as the CPU conv's bias add: exact.
    DeviceBuffer<T> dy(x), db(bias);
    kg::add_row_bias(rows, cols, db.get(), dy.get(), stream());
    std::vector<T> want(x.size());
    for (int64_t i = 0; i < rows * cols; ++i)
      want[i] = kernels::from_acc<T>(A(x[i]) + A(bias[i % cols]));
    expect_bits_equal(dy.download(), want, "add_row_bias");
    // Column sums: A accumulation (u_A * rows relative to sum|x|) plus one rounding to T.
    DeviceBuffer<T> dx(x), dout(cols);
    kg::column_sum(rows, cols, dx.get(), dout.get(), stream());
    std::vector<double> exact(cols, 0.0), mag(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        exact[c] += to_d(x[r * cols + c]);
        mag[c] += std::fabs(to_d(x[r * cols + c]));
      }
    expect_close(dout.download(), exact, 2 * unit_roundoff<T>() + 64 * unit_roundoff<A>(), 0.0, "column_sum", &mag);
  }
}

// ---- pooling -----------------------------------------------------------------------------------

namespace {
struct PoolCase {
  int64_t n, h, w, c, k, s, p;
};
const std::vector<PoolCase> kPoolCases = {
    {1, 7, 9, 3, 3, 2, 1},    // batch 1, odd sizes, padding, overlapping windows
    {5, 8, 8, 16, 2, 2, 0},   // the usual 2x2/2
    {32, 15, 13, 35, 3, 1, 1},  // large batch, stride 1: every input in up to 9 windows
    {4, 3, 3, 256, 3, 3, 0},    // airbench94's last pool, 3x3 -> 1x1
    {2, 17, 18, 3, 16, 5, 8},   // the largest window a byte indexes (places 0..255), padded
};
}  // namespace

TEMPLATE_TEST_CASE("max-pool forward, argmax and backward are bit-identical to the CPU", "[cuda][sanitize]", float, half,
                   bfloat16, double) {
  using T = TestType;
  for (const PoolCase& pc : kPoolCases) {
    INFO("pool n=" << pc.n << " h=" << pc.h << " w=" << pc.w << " c=" << pc.c << " k=" << pc.k << " s=" << pc.s
                   << " p=" << pc.p << " " << type_name<T>());
    const kernels::PoolShape cs{pc.n, pc.h, pc.w, pc.c, pc.k, pc.s, pc.p};
    const kernels::PoolShape gs{pc.n, pc.h, pc.w, pc.c, pc.k, pc.s, pc.p};
    const int64_t in_n = pc.n * pc.h * pc.w * pc.c, out_n = pc.n * cs.out_h() * cs.out_w() * pc.c;
    // Few distinct values, so windows hold ties (first maximum wins), and a few NaNs (win).
    // The (i % 3) * 2^-40 term survives only in FP64 (and at 0 in FP32): values that FP64
    // tells apart and a float comparison would call ties, so FP64 must compare as FP64.
    std::vector<T> x(static_cast<size_t>(in_n));
    for (int64_t i = 0; i < in_n; ++i) {
      const double u = kernels::philox_uniform(5, 1, static_cast<uint64_t>(i));
      x[i] = kernels::convert<T>(std::floor(u * 6) - 3 + std::ldexp(static_cast<double>(i % 3), -40));
      if (i % 997 == 13) x[i] = kernels::convert<T>(std::numeric_limits<double>::quiet_NaN());
    }
    std::vector<T> y(out_n);
    std::vector<uint8_t> am(out_n);
    kc::max_pool2d_forward(cs, x.data(), y.data(), am.data());
    DeviceBuffer<T> dx(x), dy(out_n);
    DeviceBuffer<uint8_t> dam(out_n);
    kg::max_pool2d_forward(gs, dx.get(), dy.get(), dam.get(), stream());
    expect_bits_equal(dy.download(), y, "maxpool forward");
    expect_bits_equal(dam.download(), am, "maxpool argmax");

    std::vector<T> gy = random_vec<T>(static_cast<size_t>(out_n), 6), gx(static_cast<size_t>(in_n));
    for (auto& v : gx) v = kernels::convert<T>(std::nan(""));  // poisoned: the CPU kernel overwrites gx too
    kc::max_pool2d_backward(cs, gy.data(), am.data(), gx.data());
    DeviceBuffer<T> dgy(gy), dgx(in_n);  // NaN-poisoned: the GPU gather must write every element
    kg::max_pool2d_backward(gs, dgy.get(), dam.get(), dgx.get(), stream());
    expect_bits_equal(dgx.download(), gx, "maxpool backward");
  }
}

TEMPLATE_TEST_CASE("global average pool forward and backward are bit-identical to the CPU", "[cuda][sanitize]", float, half,
                   bfloat16, double) {
  using T = TestType;
  for (auto shape : {std::vector<int64_t>{1, 1, 3}, {3, 49, 17}, {128, 64, 64}}) {
    const int64_t n = shape[0], hw = shape[1], c = shape[2];
    INFO("gap n=" << n << " hw=" << hw << " c=" << c);
    std::vector<T> x = random_vec<T>(static_cast<size_t>(n * hw * c), 8), y(n * c);
    kc::global_avg_pool_forward(n, hw, c, x.data(), y.data());
    DeviceBuffer<T> dx(x), dy(n * c);
    kg::global_avg_pool_forward(n, hw, c, dx.get(), dy.get(), stream());
    expect_bits_equal(dy.download(), y, "gap forward");  // same summation order, one division
    std::vector<T> gy = random_vec<T>(static_cast<size_t>(n * c), 9), gx(n * hw * c);
    kc::global_avg_pool_backward(n, hw, c, gy.data(), gx.data());
    DeviceBuffer<T> dgy(gy), dgx(n * hw * c);
    kg::global_avg_pool_backward(n, hw, c, dgy.get(), dgx.get(), stream());
    expect_bits_equal(dgx.download(), gx, "gap backward");
  }
}

// ---- batch-norm --------------------------------------------------------------------------------
// The GPU merges per-thread Welford statistics; the CPU takes two passes. Both are backward
// stable: mean and variance agree to a few u_P (P = FP32 here) times the row count's log, so
// 2e-5 relative (1e-10 for FP64) is a safe bound for mean (relative to mean|x|), variance
// and invstd. The outputs are affine maps of x with those statistics; the bound on y is
// relative to the magnitude of its terms, |gamma| invstd (|x| + |mean|) + |beta|, at
// 2e-5 + 2 u_T (FP32 statistics, then one rounding to T; the device fuses a*x + b into an
// FMA, which the CPU does not). Gradients: sums relative to the sum of |terms|, the input
// gradient relative to |gamma| invstd (|gy| + |dbeta|/M + |xhat| |dgamma|/M).

TEMPLATE_TEST_CASE("batch-norm training/eval forward and backward match the CPU", "[cuda][sanitize]", float, half, bfloat16,
                   double) {
  using T = TestType;
  using P = kernels::acc_t<T>;
  const double tol = std::is_same<T, double>::value ? 1e-10 : 2e-5;
  for (auto shape : {std::pair<int64_t, int64_t>{1, 5}, {105, 13}, {16384, 64}, {2048, 3}}) {
    const int64_t rows = shape.first, c = shape.second;
    INFO("batch-norm rows=" << rows << " c=" << c << " " << type_name<T>());
    // An offset mean (5) and a spread (3): the case where one-pass sum-of-squares loses digits.
    std::vector<T> x = random_vec<T>(static_cast<size_t>(rows * c), 41, 2, 8);
    std::vector<P> gamma = random_vec<P>(c, 42, 0.5, 1.5), beta = random_vec<P>(c, 43, -1, 1);
    std::vector<P> rm = random_vec<P>(c, 44, -0.1, 0.1), rv = random_vec<P>(c, 45, 0.5, 2);
    const P eps = P(1e-5), mom = P(0.1);

    // Training forward.
    std::vector<P> rm_cpu = rm, rv_cpu = rv, mean_cpu(c), invstd_cpu(c);
    std::vector<T> y_cpu(x.size());
    kc::batch_norm_forward_train(rows, c, x.data(), gamma.data(), beta.data(), eps, mom, rm_cpu.data(), rv_cpu.data(),
                                mean_cpu.data(), invstd_cpu.data(), y_cpu.data());
    DeviceBuffer<T> dx(x), dy(x.size());
    DeviceBuffer<P> dgamma(gamma), dbeta(beta), drm(rm), drv(rv), dmean(c), dinv(c);
    kg::batch_norm_forward_train(rows, c, dx.get(), dgamma.get(), dbeta.get(), eps, mom, drm.get(), drv.get(),
                                dmean.get(), dinv.get(), dy.get(), stream());
    expect_close(dmean.download(), to_d(mean_cpu), tol, 0.0, "save_mean");
    expect_close(dinv.download(), to_d(invstd_cpu), tol, 0.0, "save_invstd");
    expect_close(drm.download(), to_d(rm_cpu), tol, 0.0, "running_mean");
    expect_close(drv.download(), to_d(rv_cpu), tol, 0.0, "running_var");
    std::vector<double> sc(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch)
        sc[r * c + ch] = std::fabs(to_d(gamma[ch])) * to_d(invstd_cpu[ch]) *
                             (std::fabs(to_d(x[r * c + ch])) + std::fabs(to_d(mean_cpu[ch]))) +
                         std::fabs(to_d(beta[ch]));
    expect_close(dy.download(), to_d(y_cpu), tol + 2 * unit_roundoff<T>(), 0.0, "train y", &sc);

    // Eval forward: invstd = 1 / sqrt(running_var + eps) is one IEEE sqrt and division: exact.
    std::vector<P> inv_eval_cpu(c);
    std::vector<T> ye_cpu(x.size());
    kc::batch_norm_forward_eval(rows, c, x.data(), gamma.data(), beta.data(), eps, rm.data(), rv.data(),
                               inv_eval_cpu.data(), ye_cpu.data());
    DeviceBuffer<P> drm0(rm), drv0(rv), dinv_eval(c);
    dy.poison();
    kg::batch_norm_forward_eval(rows, c, dx.get(), dgamma.get(), dbeta.get(), eps, drm0.get(), drv0.get(),
                               dinv_eval.get(), dy.get(), stream());
    expect_bits_equal(dinv_eval.download(), inv_eval_cpu, "eval invstd");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch)
        sc[r * c + ch] = std::fabs(to_d(gamma[ch])) * to_d(inv_eval_cpu[ch]) *
                             (std::fabs(to_d(x[r * c + ch])) + std::fabs(to_d(rm[ch]))) +
                         std::fabs(to_d(beta[ch]));
    expect_close(dy.download(), to_d(ye_cpu), tol + 2 * unit_roundoff<T>(), 0.0, "eval y", &sc);

    // Backward, training and eval, from the same saved statistics on both sides.
    std::vector<T> gy = random_vec<T>(x.size(), 46);
    DeviceBuffer<T> dgy(gy), dgx(x.size());
    DeviceBuffer<P> dm(mean_cpu), di(invstd_cpu), dgg(c), dgb(c);
    for (bool training : {true, false}) {
      INFO("backward, training = " << training);
      std::vector<T> gx_cpu(x.size());
      std::vector<P> gg_cpu(c), gb_cpu(c);
      kc::batch_norm_backward(rows, c, x.data(), gy.data(), gamma.data(), mean_cpu.data(), invstd_cpu.data(), training,
                             gx_cpu.data(), gg_cpu.data(), gb_cpu.data());
      dgx.poison();
      dgg.poison();
      dgb.poison();
      kg::batch_norm_backward(rows, c, dx.get(), dgy.get(), dgamma.get(), dm.get(), di.get(), training, dgx.get(),
                             dgg.get(), dgb.get(), stream());
      std::vector<double> mg(c, 0.0), mgx(c, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t ch = 0; ch < c; ++ch) {
          const double g = std::fabs(to_d(gy[r * c + ch]));
          mg[ch] += g;
          mgx[ch] += g * std::fabs((to_d(x[r * c + ch]) - to_d(mean_cpu[ch])) * to_d(invstd_cpu[ch]));
        }
      expect_close(dgb.download(), to_d(gb_cpu), tol, 0.0, "dbeta", &mg);
      expect_close(dgg.download(), to_d(gg_cpu), tol, 0.0, "dgamma", &mgx);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t ch = 0; ch < c; ++ch) {
          const double xhat = std::fabs((to_d(x[r * c + ch]) - to_d(mean_cpu[ch])) * to_d(invstd_cpu[ch]));
          sc[r * c + ch] = std::fabs(to_d(gamma[ch])) * to_d(invstd_cpu[ch]) *
                           (std::fabs(to_d(gy[r * c + ch])) + mg[ch] / rows + xhat * mgx[ch] / rows);
        }
      expect_close(dgx.download(), to_d(gx_cpu), tol + 2 * unit_roundoff<T>(), 0.0, "gx", &sc);
    }
  }
}

// ---- cross-entropy -----------------------------------------------------------------------------
// Forward: both sides compute max, sum of exp, log in A (FP32; FP64 for FP64 logits), the
// device's expf/logf being within 2 ulps of glibc's. log_sum = max + log(sum) is rounded at
// the magnitude of the largest logit, so probabilities agree to a few u_A *relative to
// max|z|* (exp(z - log_sum) amplifies an absolute error in log_sum into a relative one):
// allowed |dp| <= p * 16 u_A (1 + max|z|). The loss, a mean of log_sum - z[y] terms, gets
// 16 u_A (1 + max|z|). Backward from the same probabilities is exact on both sides.

TEMPLATE_TEST_CASE("cross-entropy forward and backward match the CPU", "[cuda][sanitize]", float, half, bfloat16, double) {
  using T = TestType;
  using A = kernels::acc_t<T>;
  struct Case {
    int64_t rows, k;
    double range, smoothing;
    bool bad_labels;
  };
  std::vector<Case> cases = {{1, 10, 5, 0.0, false}, {7, 37, 8, 0.1, true}, {300, 1000, 10, 0.1, false},
                             {256, 10, 3, 0.0, true}};
  if (!std::is_same<T, bfloat16>::value) cases.push_back({33, 10, 60000, 0.05, false});  // FP16's range
  for (const Case& cs : cases) {
    INFO("cross-entropy rows=" << cs.rows << " k=" << cs.k << " |z|<" << cs.range << " eps=" << cs.smoothing << " "
                               << type_name<T>());
    std::vector<T> z = random_vec<T>(static_cast<size_t>(cs.rows * cs.k), 51, -cs.range, cs.range);
    std::vector<int32_t> labels(cs.rows);
    for (int64_t r = 0; r < cs.rows; ++r) labels[r] = static_cast<int32_t>((r * 7 + 3) % cs.k);
    if (cs.bad_labels) {
      labels[0] = -1;
      if (cs.rows > 2) labels[2] = static_cast<int32_t>(cs.k);
    }
    std::vector<A> probs_cpu(z.size());
    A loss_cpu = 0;
    int bad_cpu = -1;
    kc::cross_entropy_forward(cs.rows, cs.k, z.data(), labels.data(), A(cs.smoothing), probs_cpu.data(), &loss_cpu,
                              &bad_cpu);
    DeviceBuffer<T> dz(z);
    DeviceBuffer<int32_t> dl(labels);
    DeviceBuffer<A> dprobs(z.size()), dloss(1);
    DeviceBuffer<int> dbad(1);
    kg::cross_entropy_forward(cs.rows, cs.k, dz.get(), dl.get(), A(cs.smoothing), dprobs.get(), dloss.get(),
                              dbad.get(), stream());
    double zmax = 0;
    for (T v : z) zmax = std::fmax(zmax, std::fabs(to_d(v)));
    const double ua = unit_roundoff<A>();
    expect_close(dprobs.download(), to_d(probs_cpu), 16 * ua * (1 + zmax), 1e-30, "probs");
    if (bad_cpu) {  // both backends' contract: the loss is NaN
      CHECK(std::isnan(to_d(loss_cpu)));
      CHECK(std::isnan(to_d(dloss.download()[0])));
    } else {
      expect_close(dloss.download(), {to_d(loss_cpu)}, 0.0, 16 * ua * (1 + zmax) + 1e-6 * std::fabs(to_d(loss_cpu)),
                   "loss");
    }
    CHECK(dbad.download()[0] == bad_cpu);

    // Backward from the CPU's probabilities, with the incoming gradient (the loss scale) on
    // the device: identical IEEE operations on both sides.
    for (double g : {1.0, 65536.0}) {
      DeviceBuffer<A> dp(probs_cpu), dg(std::vector<A>{A(g)});
      DeviceBuffer<T> dgl(z.size());
      std::vector<T> gl_cpu(z.size());
      const A g_cpu = A(g);
      kc::cross_entropy_backward(cs.rows, cs.k, probs_cpu.data(), labels.data(), A(cs.smoothing), &g_cpu, nullptr,
                                 gl_cpu.data());
      kg::cross_entropy_backward(cs.rows, cs.k, dp.get(), dl.get(), A(cs.smoothing), dg.get(), nullptr, dgl.get(),
                                 stream());
      expect_bits_equal(dgl.download(), gl_cpu, "cross-entropy backward");
    }
    // A bad-label count from the forward turns every gradient into NaN (the step is skipped).
    DeviceBuffer<int> flagged(std::vector<int>{1});
    DeviceBuffer<A> dp(probs_cpu), dg(std::vector<A>{A(1)});
    DeviceBuffer<T> dgl(z.size());
    kg::cross_entropy_backward(cs.rows, cs.k, dp.get(), dl.get(), A(cs.smoothing), dg.get(), flagged.get(), dgl.get(),
                               stream());
    for (T v : dgl.download()) REQUIRE(std::isnan(to_d(v)));
  }
}
