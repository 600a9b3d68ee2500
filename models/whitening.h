// airbench's whitening layer: a k x k convolution whose filters are computed from the data, not
// learned. The covariance of all k x k patches of some normalised training images (X^T X / n,
// no mean removed), its eigenvectors V and eigenvalues L, and the filters V / sqrt(L + eps)
// followed by their negatives: the layer's outputs are decorrelated, each of unit variance
// where L >> eps, and the pair (v, -v) lets a ReLU-like activation keep both signs.
#pragma once

#include <cstdint>
#include <vector>

#include "data/cifar.h"
#include "engine/linalg.h"
#include "engine/nn.h"
#include "kernels/augment_math.h"

namespace models {

// The (k*k*c)^2 covariance of every k x k patch (all positions, stride 1, no padding) of `n`
// images [h, w, c] (uint8) after out = pixel * norm.scale + norm.shift, in FP64. A patch is
// flattened in KRSC order (row, column, channel), the layout of our convolution filters. The
// sum runs in blocks of 64 images added in order, so it does not depend on the thread count.
std::vector<double> patch_covariance(const uint8_t* images, int64_t n, int h, int w, int c, int k,
                                     const kernels::AugmentConfig& norm);

// The 2d filters [2d, k, k, c] (d = k*k*c), KRSC, row-major: filter j < d is eigenvector j (in
// ascending eigenvalue order) over sqrt(value_j + eps), filter d + j its negative.
std::vector<double> whitening_filters(const engine::SymmetricEigen& e, double eps);

// `count` distinct images of n, drawn with the seed (airbench takes the first 5,000 of its
// shuffled files; ours are sorted by class, so a seeded draw stands in for "the first").
std::vector<int64_t> whitening_sample(int64_t n, int64_t count, uint64_t seed);

// Sets conv's weights to the whitening filters of `count` images of `train` drawn with `seed`,
// its bias to zero, and freezes the weights (the bias stays trainable). conv must be
// [2 k*k*c, k, k, c] with a bias.
void init_whitening(engine::Conv2d& conv, const data::Dataset& train, int64_t count, uint64_t seed,
                    const kernels::AugmentConfig& norm, double eps = 5e-4);

}  // namespace models
