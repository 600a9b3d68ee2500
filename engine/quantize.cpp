// Post-training quantization's arithmetic and calibration (quantize.h).
#include "engine/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace engine {

ActivationQuant activation_quant(float lo, float threshold) {
  ENGINE_CHECK(std::isfinite(lo) && std::isfinite(threshold) && threshold > 0,
               "activation range: minimum " << lo << ", threshold " << threshold << " (a finite positive threshold needed)");
  ActivationQuant p;
  p.is_signed = lo < 0;
  p.zero_point = 0;
  p.scale = threshold / (p.is_signed ? 127.f : 255.f);
  return p;
}

void quantize_weights(const float* w, int64_t n, int64_t k, int8_t* q, float* scale) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = w + j * k;
    float absmax = 0;
    for (int64_t i = 0; i < k; ++i) {
      ENGINE_CHECK(std::isfinite(row[i]), "quantize_weights: weight [" << j << "][" << i << "] is " << row[i]);
      absmax = std::max(absmax, std::fabs(row[i]));
    }
    scale[j] = absmax > 0 ? absmax / 127.f : 1.f;
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::nearbyint(row[i] / scale[j]);
      q[j * k + i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, v)));
    }
  }
}

void quantize(const float* x, int64_t count, const ActivationQuant& p, void* q) {
  const float qmin = p.is_signed ? -128.f : 0.f, qmax = p.is_signed ? 127.f : 255.f;
  const float zp = static_cast<float>(p.zero_point);
  if (p.is_signed) {
    int8_t* o = static_cast<int8_t*>(q);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      o[i] = static_cast<int8_t>(std::min(qmax, std::max(qmin, std::nearbyint(x[i] / p.scale) + zp)));
  } else {
    uint8_t* o = static_cast<uint8_t*>(q);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      o[i] = static_cast<uint8_t>(std::min(qmax, std::max(qmin, std::nearbyint(x[i] / p.scale) + zp)));
  }
}

void dequantize(const void* q, int64_t count, const ActivationQuant& p, float* x) {
  if (p.is_signed) {
    const int8_t* in = static_cast<const int8_t*>(q);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) x[i] = p.scale * static_cast<float>(in[i] - p.zero_point);
  } else {
    const uint8_t* in = static_cast<const uint8_t*>(q);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) x[i] = p.scale * static_cast<float>(in[i] - p.zero_point);
  }
}

const char* calibration_method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::MinMax: return "minmax";
    case CalibrationMethod::Percentile: return "percentile";
    case CalibrationMethod::Entropy: return "entropy";
  }
  return "?";
}

CalibrationMethod parse_calibration_method(const std::string& name) {
  if (name == "minmax") return CalibrationMethod::MinMax;
  if (name == "percentile") return CalibrationMethod::Percentile;
  if (name == "entropy") return CalibrationMethod::Entropy;
  ENGINE_FAIL("unknown calibration method '" << name << "' (choose minmax, percentile or entropy)");
}

void RangeObserver::observe_range(const float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    ENGINE_CHECK(std::isfinite(x[i]), "calibration met a value of " << x[i] << ": the FP32 model overflows");
    if (!seen_) lo_ = hi_ = x[i], seen_ = true;
    lo_ = std::min(lo_, x[i]);
    hi_ = std::max(hi_, x[i]);
  }
}

float RangeObserver::absmax() const { return std::max(std::fabs(lo_), std::fabs(hi_)); }

void RangeObserver::observe_histogram(const float* x, int64_t count) {
  if (hist_.empty()) hist_.assign(kBins, 0);
  const double top = absmax();
  if (top < FLT_MIN) {  // zeros (and subnormals, which no threshold can resolve)
    hist_[0] += count;
    return;
  }
  const double per_unit = kBins / top;
  for (int64_t i = 0; i < count; ++i) {
    const double bin = std::fabs(static_cast<double>(x[i])) * per_unit;  // finite: |x| <= top
    ++hist_[static_cast<size_t>(std::min<double>(bin, kBins - 1))];
  }
}

int entropy_threshold_bins(const std::vector<int64_t>& hist, int levels) {
  const int bins = static_cast<int>(hist.size());
  if (bins <= levels) return bins;
  std::vector<double> p(static_cast<size_t>(bins)), q(static_cast<size_t>(bins));
  double best = std::numeric_limits<double>::infinity();
  int best_bins = bins;
  for (int i = levels; i <= bins; ++i) {
    // P: the first i bins, everything beyond clipped into the last of them.
    double outliers = 0;
    for (int b = i; b < bins; ++b) outliers += static_cast<double>(hist[b]);
    double p_total = 0;
    for (int b = 0; b < i; ++b) p_total += p[b] = static_cast<double>(hist[b]);
    p[i - 1] += outliers;
    p_total += outliers;
    if (p_total == 0) return bins;
    // Q: the first i bins (without the outliers) merged into `levels` levels, each level's
    // count spread evenly over its non-empty bins, as a quantizer with this threshold sees them.
    double q_total = 0;
    for (int l = 0; l < levels; ++l) {
      const int b0 = static_cast<int>(int64_t{l} * i / levels), b1 = static_cast<int>(int64_t{l + 1} * i / levels);
      double sum = 0;
      int nonzero = 0;
      for (int b = b0; b < b1; ++b) {
        sum += static_cast<double>(hist[b]);
        nonzero += hist[b] != 0;
      }
      for (int b = b0; b < b1; ++b) q[b] = hist[b] != 0 ? sum / nonzero : 0;
      q_total += sum;
    }
    if (q_total == 0) continue;
    double kl = 0;
    for (int b = 0; b < i; ++b) {
      if (p[b] == 0) continue;
      const double pb = p[b] / p_total, qb = std::max(q[b] / q_total, 1e-12);  // Q misses clipped mass: a floor
      kl += pb * std::log(pb / qb);
    }
    if (kl < best) best = kl, best_bins = i;
  }
  return best_bins;
}

float RangeObserver::threshold(CalibrationMethod m) const {
  ENGINE_CHECK(seen_, "calibration saw no values");
  const float top = absmax();
  if (top == 0 || m == CalibrationMethod::MinMax) return top;
  ENGINE_CHECK(!hist_.empty(), "RangeObserver: threshold before observe_histogram");
  const float width = top / kBins;
  if (m == CalibrationMethod::Percentile) {
    int64_t total = 0;
    for (int64_t c : hist_) total += c;
    const double want = 0.9999 * static_cast<double>(total);
    int64_t seen = 0;
    for (int b = 0; b < kBins; ++b) {
      seen += hist_[b];
      if (static_cast<double>(seen) >= want) return width * static_cast<float>(b + 1);
    }
    return top;
  }
  // The zero bin holds every exact zero (half a ReLU output, often more). Left as it is, that
  // spike dominates P and Q: at wide thresholds, where a level spans several bins, spreading it
  // costs a lot of divergence, so clipping the tail looks cheap in comparison (simplecnn lost
  // 2.4 points). Its count is taken as its neighbour's, as NVIDIA's pytorch-quantization
  // entropy calibrator does.
  std::vector<int64_t> hist = hist_;
  hist[0] = hist[1];
  return width * static_cast<float>(entropy_threshold_bins(hist, lo_ < 0 ? 128 : 256));
}

}  // namespace engine
