// The networks: the classic small CNN, a fast ResNet-9, ResNet-18 and ResNet-50 and
// EfficientNet-B0 (CIFAR variants), built from engine modules (NHWC activations, 32x32x3
// inputs, 10 classes).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn.h"
#include "kernels/augment_math.h"

namespace models {

// out = body(x) + shortcut(x), shortcut defaulting to the identity.
class Residual : public engine::Module {
 public:
  Residual(std::shared_ptr<engine::Module> body, std::shared_ptr<engine::Module> shortcut = nullptr);
  engine::Tensor forward(const engine::Tensor& x) override;
  std::string describe() const override;
  std::shared_ptr<engine::Module> body, shortcut;
};

// Squeeze-and-excitation (Hu et al.): x * sigmoid(fc2(silu(fc1(mean over H, W of x)))), one
// gate per image and channel; fc1 squeezes to `squeeze` channels.
class SqueezeExcite : public engine::Module {
 public:
  SqueezeExcite(int64_t channels, int64_t squeeze);
  engine::Tensor forward(const engine::Tensor& x) override;
  std::string describe() const override;
  std::shared_ptr<engine::Linear> fc1, fc2;
};

// conv3x3(3->16)+ReLU+maxpool2, conv3x3(16->32)+ReLU+maxpool2, linear(32*8*8->256)+ReLU,
// dropout 0.5, linear(256->10).
std::shared_ptr<engine::Module> simplecnn(int classes = 10);
// He et al.'s ResNet-18 adapted to 32x32 inputs: 3x3 stem, no stem pooling, [2,2,2,2] basic blocks.
std::shared_ptr<engine::Module> resnet18(int classes = 10);
// The DAWNBench-style fast residual net: prep 64, layer 128 (+residual), 256, layer 512
// (+residual), global pool, linear; batch-norm + ReLU throughout.
std::shared_ptr<engine::Module> resnet9(int classes = 10);
// He et al.'s ResNet-50 with the same CIFAR stem: [3,4,6,3] bottleneck blocks (v1.5, stride on
// the 3x3), widths 64..512 expanded 4x: 23.5M parameters with a 10-class head.
std::shared_ptr<engine::Module> resnet50(int classes = 10);
// Tan and Le's EfficientNet-B0 with a CIFAR stem (the 3x3 stem conv at stride 1, so 32x32
// inputs end at 2x2): MBConv blocks (1x1 expand, depthwise kxk, squeeze-and-excitation, 1x1
// project, identity shortcut when shapes allow), SiLU throughout, dropout 0.2 before the head.
// 4,020,358 parameters with a 10-class head, torchvision's count. No drop-connect.
std::shared_ptr<engine::Module> efficientnet_b0(int classes = 10);

// airbench94 (Keller Jordan, arXiv 2404.00498), written from its published description: a 2x2
// whitening convolution 3->24 (no padding, with bias; weights computed from the data by
// models/whitening.h and frozen), GELU, three conv groups of widths 64, 256, 256 (conv3x3 'same'
// without bias, maxpool 2, batch-norm, GELU, conv3x3, batch-norm, GELU; batch-norm without a
// learned scale, eps 1e-12, running-stat momentum 0.4; each conv Dirac on its first c_in
// filters), maxpool 3, linear 256->10 without bias, logits times 1/9. The whitening weights
// here are the default init until init_whitening runs, and its bias is zero.
// Ablations of the recipe: dirac = false leaves the 3x3 convolutions at their default init;
// whitened = false makes the first layer's weights trainable from their default init.
std::shared_ptr<engine::Module> airbench94(int classes = 10, bool dirac = true, bool whitened = true);

// The input normalisation each model trains with (kernels/augment_math.h's scale and shift):
// airbench94 CIFAR-10's per-channel mean and std; the others [0, 255] -> [-1, 1].
kernels::AugmentConfig input_normalisation(const std::string& model);

const std::vector<std::string>& model_names();
// A model's ablations (the trainer's --no-dirac, --no-whiten): only airbench94 has any.
struct ModelOptions {
  bool dirac = true;
  bool whitened = true;
};
// The model by name; an unknown name, or an ablation of a model without it, is an
// engine::Error.
std::shared_ptr<engine::Module> make_model(const std::string& name, int classes = 10, const ModelOptions& options = {});

// How a model's parameter paths and layouts map onto its PyTorch twin in
// bench/pytorch_models.py, for the safetensors export and import (models/pytorch_weights.h).
struct PytorchNaming {
  // Our module path -> PyTorch's ("0" -> "conv1"); paths not listed are the same in both.
  std::map<std::string, std::string> module_renames;
  // Linear layers fed by a flatten of NHWC activations [H, W, C]: PyTorch flattens NCHW, so
  // their weight columns are reordered on the way out and back.
  std::map<std::string, std::array<int64_t, 3>> flattened_hwc;
};
const PytorchNaming& pytorch_naming(const std::string& model);
// Our module path under PyTorch's name ("7" -> "fc1" in simplecnn, "7.x" -> "fc1.x").
std::string pytorch_path(const std::string& model, const std::string& path);

// Every module of a model built by make_model(model), root excluded, under the names the range
// report prints and --fp32-layers takes (PyTorch's paths); `leaf`: a layer without children.
struct NamedLayer {
  std::string name;
  engine::Module* module;
  bool leaf;
};
std::vector<NamedLayer> named_layers(engine::Module& net, const std::string& model);

}  // namespace models
