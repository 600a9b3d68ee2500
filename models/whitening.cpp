// The whitening layer's filters from the data (models/whitening.h).
#include "models/whitening.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "kernels/philox.h"

namespace models {

std::vector<double> patch_covariance(const uint8_t* images, int64_t n, int h, int w, int c, int k,
                                     const kernels::AugmentConfig& norm) {
  ENGINE_CHECK(n > 0 && k > 0 && k <= h && k <= w && c >= 1 && c <= 3,
               "patch_covariance: " << n << " images of " << h << "x" << w << "x" << c << ", patch " << k);
  const int d = k * k * c;
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks) * d * d, 0.0);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bl = 0; bl < blocks; ++bl) {
    double* acc = partial.data() + bl * d * d;
    std::vector<double> img(static_cast<size_t>(h) * w * c), patch(static_cast<size_t>(d));
    for (int64_t i = bl * kBlock; i < std::min(n, (bl + 1) * kBlock); ++i) {
      const uint8_t* src = images + i * h * w * c;
      for (int64_t j = 0; j < static_cast<int64_t>(img.size()); ++j)
        img[j] = double(src[j]) * double(norm.scale[j % c]) + double(norm.shift[j % c]);
      for (int y = 0; y + k <= h; ++y)
        for (int x = 0; x + k <= w; ++x) {
          for (int r = 0; r < k; ++r)
            for (int s = 0; s < k; ++s)
              for (int ch = 0; ch < c; ++ch) patch[(r * k + s) * c + ch] = img[((y + r) * w + x + s) * c + ch];
          for (int p = 0; p < d; ++p)
            for (int q = p; q < d; ++q) acc[p * d + q] += patch[p] * patch[q];
        }
    }
  }
  std::vector<double> cov(static_cast<size_t>(d) * d, 0.0);
  for (int64_t bl = 0; bl < blocks; ++bl)
    for (int p = 0; p < d; ++p)
      for (int q = p; q < d; ++q) cov[p * d + q] += partial[bl * d * d + p * d + q];
  const double patches = double(n) * (h - k + 1) * (w - k + 1);
  for (int p = 0; p < d; ++p)
    for (int q = p; q < d; ++q) cov[q * d + p] = cov[p * d + q] /= patches;
  return cov;
}

std::vector<double> whitening_filters(const engine::SymmetricEigen& e, double eps) {
  const int64_t d = static_cast<int64_t>(e.values.size());
  ENGINE_CHECK(e.vectors.size() == static_cast<size_t>(d * d), "whitening_filters: eigenvectors do not match");
  std::vector<double> f(static_cast<size_t>(2 * d * d));
  for (int64_t j = 0; j < d; ++j) {
    ENGINE_CHECK(e.values[j] + eps > 0, "whitening_filters: eigenvalue " << e.values[j] << " + eps is not positive");
    const double inv = 1.0 / std::sqrt(e.values[j] + eps);
    for (int64_t p = 0; p < d; ++p) {
      f[j * d + p] = e.vectors[p * d + j] * inv;
      f[(d + j) * d + p] = -f[j * d + p];
    }
  }
  return f;
}

std::vector<int64_t> whitening_sample(int64_t n, int64_t count, uint64_t seed) {
  ENGINE_CHECK(count >= 1 && count <= n, "whitening: " << count << " images asked of a training set of " << n);
  // A partial Fisher-Yates shuffle on its own Philox stream: the first `count` of a permutation.
  constexpr uint64_t kWhiteningStream = 0x3A17E00000000000ull;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t r = (static_cast<uint64_t>(kernels::philox_u32(seed, kWhiteningStream, 2 * i)) << 32) |
                       kernels::philox_u32(seed, kWhiteningStream, 2 * i + 1);
    std::swap(order[i], order[i + static_cast<int64_t>(r % static_cast<uint64_t>(n - i))]);
  }
  order.resize(static_cast<size_t>(count));
  return order;
}

void init_whitening(engine::Conv2d& conv, const data::Dataset& train, int64_t count, uint64_t seed,
                    const kernels::AugmentConfig& norm, double eps) {
  const engine::Shape& ws = conv.weight->master.shape();  // [2d, k, k, c]
  const int k = static_cast<int>(ws[1]), c = static_cast<int>(ws[3]), d = k * k * c;
  ENGINE_CHECK(conv.bias && ws[2] == k && ws[0] == 2 * d && conv.groups == 1 && c == data::Dataset::kC,
               "init_whitening: needs a [2 k*k*c, k, k, 3] convolution with a bias, got " << conv.describe());
  const std::vector<int64_t> pick = whitening_sample(train.size(), count, seed);
  std::vector<uint8_t> sample(static_cast<size_t>(count * data::Dataset::kImageBytes));
  for (int64_t i = 0; i < count; ++i)
    std::copy(train.image(pick[i]), train.image(pick[i]) + data::Dataset::kImageBytes,
              sample.begin() + i * data::Dataset::kImageBytes);
  const std::vector<double> cov =
      patch_covariance(sample.data(), count, data::Dataset::kH, data::Dataset::kW, c, k, norm);
  const std::vector<double> filters = whitening_filters(engine::symmetric_eigen(cov, d), eps);
  engine::NoGradScope no_grad;
  const engine::Device dev = conv.weight->master.device();
  conv.weight->master.copy_from(engine::Tensor::from_vector(filters, ws, engine::DType::F32).to(dev));
  conv.bias->master.zero();
  conv.refresh_compute_copies();
  conv.weight->set_trainable(false);
}

}  // namespace models
