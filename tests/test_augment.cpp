// The batch builder (engine::make_batch, kernels/augment_math.h) against plain loops written
// independently here: zero and reflection padding, random crops, random and alternating flips,
// fixed views (test-time augmentation), normalisation; and the draws' own properties.
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/tensor.h"

using engine::DType;
using engine::Tensor;
using kernels::AugmentConfig;
using kernels::AugmentDraw;
using kernels::FlipMode;

namespace {

constexpr int kH = 7, kW = 6, kC = 3;  // H != W, so no swap of the axes goes unnoticed

// Distinct pixel values: image i, row y, column x, channel c.
uint8_t pixel_value(int64_t i, int y, int x, int c) { return static_cast<uint8_t>((i * 53 + y * 17 + x * 5 + c) % 251); }

std::vector<uint8_t> images_of(int64_t n) {
  std::vector<uint8_t> v(static_cast<size_t>(n * kH * kW * kC));
  for (int64_t i = 0; i < n; ++i)
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x)
        for (int c = 0; c < kC; ++c) v[static_cast<size_t>(((i * kH + y) * kW + x) * kC + c)] = pixel_value(i, y, x, c);
  return v;
}

// The padded image as numpy.pad builds it, one row and one column at a time: zeros, or
// 'reflect' (the row's pixels p..1 before it and n-2..n-1-p after it: the edge not repeated).
std::vector<int> padded_indices(int n, int pad, bool reflect) {
  std::vector<int> idx;
  for (int k = pad; k >= 1; --k) idx.push_back(reflect ? k : -1);
  for (int k = 0; k < n; ++k) idx.push_back(k);
  for (int k = 1; k <= pad; ++k) idx.push_back(reflect ? n - 1 - k : -1);
  return idx;
}

// The reference view of image i: pad, crop at (dy, dx), then mirror the crop; normalised.
std::vector<float> reference_view(int64_t i, const AugmentDraw& d, const AugmentConfig& cfg) {
  const std::vector<int> rows = padded_indices(kH, cfg.pad, cfg.reflect), cols = padded_indices(kW, cfg.pad, cfg.reflect);
  std::vector<float> out;
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      const int cx = d.flip ? kW - 1 - x : x;  // the crop's column
      const int sy = rows[static_cast<size_t>(y + d.dy)], sx = cols[static_cast<size_t>(cx + d.dx)];
      for (int c = 0; c < kC; ++c) {
        const float p = sy < 0 || sx < 0 ? 0.0f : static_cast<float>(pixel_value(i, sy, sx, c));
        out.push_back(std::fma(p, cfg.scale[c], cfg.shift[c]));  // one rounding, as the kernels
      }
    }
  return out;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};

Batch build(const std::vector<int32_t>& indices, bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch,
            int64_t n_images = 20) {
  const std::vector<uint8_t> px = images_of(n_images);
  Tensor images = Tensor::empty({n_images, kH, kW, kC}, DType::U8);
  std::copy(px.begin(), px.end(), images.data<uint8_t>());
  std::vector<int32_t> lab(static_cast<size_t>(n_images));
  for (int64_t i = 0; i < n_images; ++i) lab[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  const Tensor labels = Tensor::from_ints(lab, {n_images});
  const int64_t b = static_cast<int64_t>(indices.size());
  Tensor x = Tensor::empty({b, kH, kW, kC}, DType::F32), y = Tensor::empty({b}, DType::I32);
  engine::make_batch(images, labels, Tensor::from_ints(indices, {b}), augment, cfg, seed, epoch, x, y);
  Batch r;
  r.x.assign(x.data<float>(), x.data<float>() + x.numel());
  r.y.assign(y.data<int32_t>(), y.data<int32_t>() + b);
  return r;
}

std::vector<float> image_of(const Batch& b, size_t k) {
  const size_t per = kH * kW * kC;
  return std::vector<float>(b.x.begin() + static_cast<long>(k * per), b.x.begin() + static_cast<long>((k + 1) * per));
}

AugmentConfig cifar_norm() {
  AugmentConfig c;
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
  for (int k = 0; k < 3; ++k) c.scale[k] = 1.0f / (255.0f * std[k]), c.shift[k] = -mean[k] / std[k];
  return c;
}

}  // namespace

TEST_CASE("make_batch: no augmentation is the image itself, normalised, with its label", "[augment]") {
  AugmentConfig cfg = cifar_norm();
  cfg.pad = 2;
  cfg.reflect = true;
  cfg.flip = FlipMode::Alternating;
  const std::vector<int32_t> idx = {3, 0, 17, 3};
  const Batch b = build(idx, false, cfg, 7, 1);
  for (size_t k = 0; k < idx.size(); ++k) {
    INFO("image " << idx[k]);
    CHECK(image_of(b, k) == reference_view(idx[k], AugmentDraw{cfg.pad, cfg.pad, false}, cfg));
    CHECK(b.y[k] == idx[k] % 10);
  }
}

TEST_CASE("make_batch: random crops from zero and reflection padding, random flips, against plain loops",
          "[augment]") {
  const std::vector<int32_t> idx = {0, 5, 11, 19, 2, 8};
  for (bool reflect : {false, true})
    for (int pad : {1, 2, 3}) {
      AugmentConfig cfg = cifar_norm();
      cfg.pad = pad;
      cfg.reflect = reflect;
      cfg.flip = FlipMode::Random;
      const Batch b = build(idx, true, cfg, 11, 4);
      for (size_t k = 0; k < idx.size(); ++k) {
        const AugmentDraw d = kernels::augment_draw(11, 4, static_cast<uint64_t>(idx[k]), pad);
        INFO("reflect " << reflect << " pad " << pad << " image " << idx[k] << " view " << d.dy << "," << d.dx << ","
                        << d.flip);
        CHECK(image_of(b, k) == reference_view(idx[k], d, cfg));
      }
    }
}

TEST_CASE("make_batch: every reflected crop offset, mirrored or not, against plain loops", "[augment]") {
  // Fixed views walk all (2 pad + 1)^2 offsets both ways: every edge case of the reflection.
  for (int pad : {1, 2}) {
    for (int dy = 0; dy <= 2 * pad; ++dy)
      for (int dx = 0; dx <= 2 * pad; ++dx)
        for (bool flip : {false, true}) {
          AugmentConfig cfg = cifar_norm();
          cfg.pad = pad;
          cfg.reflect = true;
          cfg.fixed = true;
          cfg.view = AugmentDraw{dy, dx, flip};
          const Batch b = build({4, 13}, true, cfg, 1, 0);
          INFO("pad " << pad << " view " << dy << "," << dx << "," << flip);
          CHECK(image_of(b, 0) == reference_view(4, cfg.view, cfg));
          CHECK(image_of(b, 1) == reference_view(13, cfg.view, cfg));
        }
  }
}

TEST_CASE("make_batch: a fixed view outside the padding is refused", "[augment]") {
  AugmentConfig cfg;
  cfg.pad = 1;
  cfg.fixed = true;
  cfg.view = AugmentDraw{3, 0, false};
  CHECK_THROWS_WITH(build({0}, true, cfg, 1, 0), Catch::Contains("fixed view's offset (3, 0) is outside [0, 2]"));
}

TEST_CASE("alternating flip: one coin per image, every odd epoch flips them all", "[augment]") {
  AugmentConfig cfg;
  cfg.pad = 2;
  cfg.flip = FlipMode::Alternating;
  const int64_t n = 2000;
  int64_t flipped0 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool f0 = kernels::augment_view(true, cfg, 9, 0, static_cast<uint64_t>(i)).flip;
    flipped0 += f0;
    for (uint64_t e = 1; e < 6; ++e) {
      const AugmentDraw d = kernels::augment_view(true, cfg, 9, e, static_cast<uint64_t>(i));
      REQUIRE(d.flip == (f0 != (e % 2 == 1)));
      // The crop is still drawn afresh each epoch.
      const AugmentDraw r = kernels::augment_draw(9, e, static_cast<uint64_t>(i), 2);
      REQUIRE((d.dy == r.dy && d.dx == r.dx));
    }
  }
  // A fair coin: 1,000 +- 3.6 standard deviations (22.4) of the binomial.
  CHECK(flipped0 > 920);
  CHECK(flipped0 < 1080);
  // And the pixels follow: image 3 at epochs 0 and 1 are mirror images of each other (no crop).
  cfg.pad = 0;
  const Batch e0 = build({3}, true, cfg, 9, 0), e1 = build({3}, true, cfg, 9, 1);
  const bool f = kernels::augment_view(true, cfg, 9, 0, 3).flip;
  CHECK(image_of(e0, 0) == reference_view(3, AugmentDraw{0, 0, f}, cfg));
  CHECK(image_of(e1, 0) == reference_view(3, AugmentDraw{0, 0, !f}, cfg));
}

TEST_CASE("augment draws: offsets cover [0, 2 pad], random flips change with the epoch", "[augment]") {
  AugmentConfig cfg;
  cfg.pad = 2;
  cfg.flip = FlipMode::Random;
  std::set<int> dys, dxs;
  int64_t same_flip = 0;
  const int64_t n = 2000;
  for (int64_t i = 0; i < n; ++i) {
    const AugmentDraw a = kernels::augment_view(true, cfg, 5, 0, static_cast<uint64_t>(i)),
                      b = kernels::augment_view(true, cfg, 5, 1, static_cast<uint64_t>(i));
    dys.insert(a.dy), dxs.insert(a.dx);
    same_flip += a.flip == b.flip;
  }
  CHECK(dys == std::set<int>{0, 1, 2, 3, 4});
  CHECK(dxs == std::set<int>{0, 1, 2, 3, 4});
  // Independent coins agree half the time (not always, as alternating ones never do).
  CHECK(same_flip > 920);
  CHECK(same_flip < 1080);
  cfg.flip = FlipMode::None;
  for (int64_t i = 0; i < 100; ++i) CHECK_FALSE(kernels::augment_view(true, cfg, 5, 0, static_cast<uint64_t>(i)).flip);
}
