// Batch-norm folded into the preceding convolution for inference: the folded weights are
// the FP64 formula rounded once, the forward agrees within a derived bound, and a pair whose
// folded weights would overflow the compute dtype is left alone.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "models/models.h"

using engine::DType;
using engine::Tensor;

namespace {

void set(const Tensor& t, const std::vector<double>& v) { Tensor(t).copy_from(Tensor::from_vector(v, t.shape(), t.dtype())); }

// Non-trivial statistics and affine parameters: gamma in [0.5, 2), beta, mean in +-1, var in [0.1, 3).
void scramble(engine::BatchNorm2d& bn, int salt, double var_scale = 1.0) {
  const int64_t c = bn.running_mean.numel();
  std::vector<double> g(c), b(c), m(c), v(c);
  for (int64_t i = 0; i < c; ++i) {
    g[i] = 0.5 + std::fmod(0.37 * (i + salt), 1.5);
    b[i] = std::sin(1.3 * i + salt);
    m[i] = std::cos(0.7 * i + salt);
    v[i] = (0.1 + std::fmod(0.61 * (i + 2 * salt), 2.9)) * var_scale;
  }
  set(bn.gamma->master, g);
  set(bn.beta->master, b);
  set(bn.running_mean, m);
  set(bn.running_var, v);
}

}  // namespace

TEST_CASE("fold_batch_norm: weights are the FP64 formula rounded once; the forward agrees within a derived bound",
          "[fold_bn]") {
  engine::manual_seed(21);
  auto conv = std::make_shared<engine::Conv2d>(5, 8, 3, 2, 1, true);
  auto bn = std::make_shared<engine::BatchNorm2d>(8);
  scramble(*bn, 3);
  engine::Sequential seq;
  seq.add(conv).add(bn);
  seq.eval();
  const Tensor x = engine::uniform({2, 9, 9, 5}, -1, 1, DType::F32);
  engine::NoGradScope no_grad;
  const std::vector<double> before = seq(x).to_vector();

  // The expected folded parameters, from the definitions: s = gamma / sqrt(var + eps).
  const std::vector<double> w = conv->weight->master.to_vector(), b = conv->bias->master.to_vector(),
                            g = bn->gamma->master.to_vector(), be = bn->beta->master.to_vector(),
                            m = bn->running_mean.to_vector(), v = bn->running_var.to_vector();
  std::vector<double> s(8), wf(w.size()), bf(8);
  for (int o = 0; o < 8; ++o) {
    s[o] = g[o] / std::sqrt(v[o] + 1e-5);
    for (int j = 0; j < 45; ++j) wf[o * 45 + j] = static_cast<float>(w[o * 45 + j] * s[o]);
    bf[o] = static_cast<float>((b[o] - m[o]) * s[o] + be[o]);
  }

  REQUIRE(engine::fold_batch_norm(seq, DType::F32) == 1);
  const auto named = seq.named_modules();
  auto* fused = dynamic_cast<engine::Conv2d*>(named[1].second);
  REQUIRE(fused != nullptr);
  REQUIRE(dynamic_cast<engine::Identity*>(named[2].second) != nullptr);
  REQUIRE(fused->weight->master.to_vector() == wf);
  REQUIRE(fused->bias->master.to_vector() == bf);
  REQUIRE(fused->stride == 2);
  REQUIRE(fused->pad == 1);

  // |folded - unfolded| <= (2n + 12) u A elementwise, A = (|W||x| + |b|)|s| + |mean s| + |beta|:
  // the unfolded conv rounds within n u |W||x| (n = 45 products) and batch-norm's scale-and-shift
  // within 4 u of its terms; the folded conv within (n + 1) u of its terms, whose weights and
  // bias carry one more rounding (u). u = 2^-24.
  const std::vector<double> after = seq(x).to_vector();
  std::vector<double> absx = x.to_vector(), absw = w;
  for (double& e : absx) e = std::fabs(e);
  for (double& e : absw) e = std::fabs(e);
  const std::vector<double> ax =
      engine::conv2d(Tensor::from_vector(absx, x.shape(), DType::F64), Tensor::from_vector(absw, {8, 3, 3, 5}, DType::F64),
                     Tensor(), 2, 1)
          .to_vector();
  REQUIRE(ax.size() == before.size());
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < before.size(); ++i) {
    const int o = static_cast<int>(i % 8);
    const double a = (ax[i] + std::fabs(b[o])) * std::fabs(s[o]) + std::fabs(m[o] * s[o]) + std::fabs(be[o]);
    REQUIRE(std::fabs(after[i] - before[i]) <= (2 * 45 + 12) * u * a);
  }
}

TEST_CASE("fold_batch_norm: whole ResNets fold every conv+BN pair; an FP16 overflow is left unfolded", "[fold_bn]") {
  engine::manual_seed(4);
  auto r18 = models::resnet18();
  REQUIRE_THROWS_WITH(engine::fold_batch_norm(*r18, DType::F16), Catch::Contains("call eval() first"));
  r18->eval();
  const int64_t params_before = r18->num_parameters();
  int bns = 0;
  int64_t bn_channels = 0;
  for (const auto& [path, m] : r18->named_modules())
    if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(m)) {
      ++bns;
      bn_channels += bn->running_mean.numel();
    }
  REQUIRE(bns == 20);  // stem + 16 in blocks + 3 shortcuts: each right after its conv
  REQUIRE(engine::fold_batch_norm(*r18, DType::F16) == 20);
  for (const auto& [path, m] : r18->named_modules()) REQUIRE(dynamic_cast<engine::BatchNorm2d*>(m) == nullptr);
  // Each bias-free conv gained a bias of its width; each batch-norm's gamma and beta are gone.
  REQUIRE(r18->num_parameters() == params_before - bn_channels);  // + a bias, - gamma and beta, per channel

  // var ~ 1e-12: s ~ 1e6, folded weights far beyond FP16's 65504, fine in FP32.
  auto make = [] {
    auto seq = std::make_shared<engine::Sequential>();
    auto bn = std::make_shared<engine::BatchNorm2d>(4);
    scramble(*bn, 1, 1e-12);
    bn->eps = 0;
    seq->add(std::make_shared<engine::Conv2d>(2, 4, 1, 1, 0, false)).add(bn);
    return seq;
  };
  auto unfoldable = make(), foldable = make();
  unfoldable->eval();
  foldable->eval();
  REQUIRE(engine::fold_batch_norm(*unfoldable, DType::F16) == 0);
  REQUIRE(dynamic_cast<engine::BatchNorm2d*>(unfoldable->named_modules()[2].second) != nullptr);  // left as it was
  REQUIRE(engine::fold_batch_norm(*foldable, DType::F32) == 1);
}
