// Test-time augmentation (airbench's): a batch's logits as the weighted mean over fixed views
// of each image, built by the batch kernel (engine::make_batch with a fixed view).
#pragma once

#include <vector>

#include "engine/nn.h"
#include "kernels/augment_math.h"

namespace models {

struct TtaView {
  kernels::AugmentConfig augment;  // the model's normalisation, a fixed view (pad, offset, flip)
  double weight;
};

// airbench's six: 0.5 x the mean over the image and its mirror, plus 0.5 x the mean over two
// translated views (reflection-padded by 1, crops at (0,0) and (2,2)), each mirror-averaged:
// weights 1/4, 1/4 and four of 1/8. `norm` gives the normalisation.
std::vector<TtaView> tta_views(const kernels::AugmentConfig& norm);

// sum_v weight_v x model(view_v(images[indices])) in FP32 [B, classes]; x is a [B,32,32,3]
// batch buffer in the model's compute dtype (overwritten per view), y receives the labels.
// Model in eval mode, under the caller's autocast and no-grad scopes.
engine::Tensor tta_logits(engine::Module& model, const std::vector<TtaView>& views, const engine::Tensor& images,
                          const engine::Tensor& labels, const engine::Tensor& indices, engine::Tensor& x,
                          engine::Tensor& y);

}  // namespace models
