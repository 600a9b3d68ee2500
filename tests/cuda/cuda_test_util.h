// Helpers for the [cuda] tests: device buffers poisoned with NaN, seeded random inputs,
// and comparisons that report the worst element. Every GPU result is checked against the
// CPU reference kernels (kernels/cpu/) run on the same inputs.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/numeric.h"
#include "kernels/philox.h"

namespace cuda_test {

using kernels::bfloat16;
using kernels::half;

inline cudaStream_t stream() { return kernels::cuda::default_stream(); }
// Waits for the stream and turns an asynchronous kernel fault into a test failure here.
inline void sync() { CHECK_CUDA(cudaStreamSynchronize(stream())); }

// A cudaMalloc'd array, filled with 0xFF bytes on creation: NaN for float, double, half and
// bfloat16, -1 for int32. An output element a kernel forgets to write stays NaN and fails
// every comparison below.
template <class T> class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : n_(count) {
    if (n_) CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
    poison();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void poison() {
    sync();
    if (n_) CHECK_CUDA(cudaMemset(p_, 0xFF, n_ * sizeof(T)));
  }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    sync();
    if (n_) CHECK_CUDA(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    sync();
    std::vector<T> host(n_);
    if (n_) CHECK_CUDA(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T> double to_d(T v) { return kernels::convert<double>(v); }
template <class T> std::vector<double> to_d(const std::vector<T>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_d(v[i]);
  return r;
}
template <class T> std::vector<T> from_d(const std::vector<double>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = kernels::convert<T>(v[i]);
  return r;
}
template <class T> std::vector<T> abs_of(const std::vector<T>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = kernels::convert<T>(std::fabs(to_d(v[i])));
  return r;
}

// Uniform in [lo, hi) from Philox(seed, stream 7, i), rounded once to T.
template <class T> std::vector<T> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = kernels::philox_uniform(seed, 7, i);
    v[i] = kernels::convert<T>(lo + (hi - lo) * u);
  }
  return v;
}

template <class T> const char* type_name() {
  if (std::is_same<T, float>::value) return "f32";
  if (std::is_same<T, double>::value) return "f64";
  if (std::is_same<T, half>::value) return "f16";
  if (std::is_same<T, bfloat16>::value) return "bf16";
  return "?";
}

// Unit roundoff of T's storage (half an ulp at 1): the size of one rounding to T.
template <class T> double unit_roundoff() {
  if (std::is_same<T, half>::value) return std::ldexp(1.0, -11);
  if (std::is_same<T, bfloat16>::value) return std::ldexp(1.0, -8);
  if (std::is_same<T, float>::value) return std::ldexp(1.0, -24);
  return std::ldexp(1.0, -53);
}

// Passes when, for every i, |got - want| <= abs + rel * scale[i] (scale defaults to |want|);
// NaN only matches NaN. Reports how many elements failed and the worst one.
template <class G>
void expect_close(const std::vector<G>& got, const std::vector<double>& want, double rel, double abs,
                  const std::string& what, const std::vector<double>* scale = nullptr) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]), w = want[i];
    const double s = scale ? (*scale)[i] : std::fabs(w);
    const double allowed = abs + rel * s;
    double ratio;
    if (std::isnan(w) || std::isnan(g)) {
      ratio = (std::isnan(w) && std::isnan(g)) ? 0.0 : 1e300;
    } else if (std::isinf(w) || std::isinf(g)) {
      ratio = g == w ? 0.0 : 1e300;
    } else {
      const double err = std::fabs(g - w);
      ratio = allowed > 0 ? err / allowed : (err == 0 ? 0.0 : 1e300);
    }
    if (ratio > 1.0) ++bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream os;
  os.precision(9);
  if (!got.empty())
    os << what << ": " << bad << " of " << got.size() << " elements off; worst [" << worst << "] got "
       << to_d(got[worst]) << " want " << want[worst] << " (error / allowed = " << worst_ratio << ", rel " << rel
       << ", abs " << abs << ")";
  INFO(os.str());
  CHECK(bad == 0);
}

// Bit-for-bit equality (the same bytes), reporting the first difference.
template <class T> void expect_bits_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (first == got.size()) first = i;
      ++bad;
    }
  }
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements differ";
  if (bad) os << "; first [" << first << "] got " << to_d(got[first]) << " want " << to_d(want[first]);
  INFO(os.str());
  CHECK(bad == 0);
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

}  // namespace cuda_test
