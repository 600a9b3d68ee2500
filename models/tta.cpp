// Test-time augmentation (models/tta.h).
#include "models/tta.h"

#include "engine/ops.h"

namespace models {

std::vector<TtaView> tta_views(const kernels::AugmentConfig& norm) {
  std::vector<TtaView> v;
  auto view = [&](int pad, int offset, bool flip, double weight) {
    kernels::AugmentConfig a = norm;
    a.pad = pad;
    a.reflect = true;
    a.flip = kernels::FlipMode::None;
    a.fixed = true;
    a.view = kernels::AugmentDraw{offset, offset, flip};
    v.push_back({a, weight});
  };
  for (bool flip : {false, true}) view(0, 0, flip, 0.25);  // the image itself and its mirror
  for (int offset : {0, 2})
    for (bool flip : {false, true}) view(1, offset, flip, 0.125);  // shifted by one pixel each way
  return v;
}

engine::Tensor tta_logits(engine::Module& model, const std::vector<TtaView>& views, const engine::Tensor& images,
                          const engine::Tensor& labels, const engine::Tensor& indices, engine::Tensor& x,
                          engine::Tensor& y) {
  engine::Tensor sum;
  for (const TtaView& v : views) {
    engine::make_batch(images, labels, indices, true, v.augment, 0, 0, x, y);
    const engine::Tensor logits = engine::scale(engine::cast(model(x), engine::DType::F32), v.weight);
    sum = sum.defined() ? engine::add(sum, logits) : logits;
  }
  return sum;
}

}  // namespace models
