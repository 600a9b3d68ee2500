// Model definitions.
#include "models/models.h"

#include "engine/ops.h"

namespace models {

using engine::Module;
using engine::Sequential;
using std::make_shared;

Residual::Residual(std::shared_ptr<Module> body_, std::shared_ptr<Module> shortcut_)
    : body(std::move(body_)), shortcut(std::move(shortcut_)) {
  add_module("body", body);
  if (shortcut) add_module("shortcut", shortcut);
}

engine::Tensor Residual::forward(const engine::Tensor& x) {
  return engine::add((*body)(x), shortcut ? (*shortcut)(x) : x);
}

std::string Residual::describe() const {
  return "Residual(" + body->describe() + (shortcut ? ", shortcut " + shortcut->describe() : std::string()) + ")";
}

SqueezeExcite::SqueezeExcite(int64_t channels, int64_t squeeze)
    : fc1(std::make_shared<engine::Linear>(channels, squeeze)), fc2(std::make_shared<engine::Linear>(squeeze, channels)) {
  add_module("fc1", fc1);
  add_module("fc2", fc2);
}

engine::Tensor SqueezeExcite::forward(const engine::Tensor& x) {
  const engine::Tensor s = engine::silu((*fc1)(engine::global_avg_pool(x)));
  return engine::channel_gate(x, engine::sigmoid((*fc2)(s)));
}

std::string SqueezeExcite::describe() const {
  return "SqueezeExcite(" + fc1->describe() + ", " + fc2->describe() + ")";
}

namespace {

// conv (no bias: batch-norm follows) + BN + SiLU: EfficientNet's unit.
std::shared_ptr<Sequential> conv_bn_silu(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups = 1) {
  auto s = make_shared<Sequential>();
  s->add(make_shared<engine::Conv2d>(in, out, kernel, stride, kernel / 2, false, groups))
      .add(make_shared<engine::BatchNorm2d>(out))
      .add(make_shared<engine::SiLU>());
  return s;
}

// MBConv: [1x1 expand + BN + SiLU] depthwise kxk + BN + SiLU, squeeze-and-excitation (to a
// quarter of the block's input channels), 1x1 project + BN; + x when stride 1 and in = out.
std::shared_ptr<Module> mbconv(int64_t in, int64_t out, int64_t expand, int64_t kernel, int64_t stride) {
  const int64_t mid = in * expand;
  auto body = make_shared<Sequential>();
  if (expand != 1) body->add(conv_bn_silu(in, mid, 1, 1));
  body->add(conv_bn_silu(mid, mid, kernel, stride, mid));
  body->add(make_shared<SqueezeExcite>(mid, std::max<int64_t>(1, in / 4)));
  body->add(make_shared<engine::Conv2d>(mid, out, 1, 1, 0, false)).add(make_shared<engine::BatchNorm2d>(out));
  if (stride == 1 && in == out) return make_shared<Residual>(body);
  return body;
}

// conv3x3 (no bias: batch-norm follows) + BN + ReLU.
std::shared_ptr<Sequential> conv_bn_relu(int64_t in, int64_t out, int64_t stride = 1) {
  auto s = make_shared<Sequential>();
  s->add(make_shared<engine::Conv2d>(in, out, 3, stride, 1, false))
      .add(make_shared<engine::BatchNorm2d>(out))
      .add(make_shared<engine::ReLU>());
  return s;
}

// relu(body(x) + shortcut(x)): the shortcut a strided 1x1 conv + BN where the shape changes.
std::shared_ptr<Sequential> residual_block(std::shared_ptr<Sequential> body, int64_t in, int64_t out, int64_t stride) {
  std::shared_ptr<Sequential> shortcut;
  if (stride != 1 || in != out) {
    shortcut = make_shared<Sequential>();
    shortcut->add(make_shared<engine::Conv2d>(in, out, 1, stride, 0, false)).add(make_shared<engine::BatchNorm2d>(out));
  }
  auto block = make_shared<Sequential>();
  block->add(make_shared<Residual>(body, shortcut)).add(make_shared<engine::ReLU>());
  return block;
}

// ResNet basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)).
std::shared_ptr<Sequential> basic_block(int64_t in, int64_t out, int64_t stride) {
  auto body = make_shared<Sequential>();
  body->add(make_shared<engine::Conv2d>(in, out, 3, stride, 1, false))
      .add(make_shared<engine::BatchNorm2d>(out))
      .add(make_shared<engine::ReLU>())
      .add(make_shared<engine::Conv2d>(out, out, 3, 1, 1, false))
      .add(make_shared<engine::BatchNorm2d>(out));
  return residual_block(body, in, out, stride);
}

// ResNet bottleneck (v1.5: the stride on the 3x3): relu(bn(conv1x1(relu(bn(conv3x3(relu(bn(
// conv1x1(x))))))) + shortcut(x)), width -> 4 * width channels out.
std::shared_ptr<Sequential> bottleneck(int64_t in, int64_t width, int64_t stride) {
  const int64_t out = 4 * width;
  auto body = make_shared<Sequential>();
  body->add(make_shared<engine::Conv2d>(in, width, 1, 1, 0, false))
      .add(make_shared<engine::BatchNorm2d>(width))
      .add(make_shared<engine::ReLU>())
      .add(make_shared<engine::Conv2d>(width, width, 3, stride, 1, false))
      .add(make_shared<engine::BatchNorm2d>(width))
      .add(make_shared<engine::ReLU>())
      .add(make_shared<engine::Conv2d>(width, out, 1, 1, 0, false))
      .add(make_shared<engine::BatchNorm2d>(out));
  return residual_block(body, in, out, stride);
}

}  // namespace

std::shared_ptr<Module> efficientnet_b0(int classes) {
  struct Stage { int64_t expand, kernel, stride, out, layers; };
  const Stage stages[] = {{1, 3, 1, 16, 1}, {6, 3, 2, 24, 2},  {6, 5, 2, 40, 2}, {6, 3, 2, 80, 3},
                          {6, 5, 1, 112, 3}, {6, 5, 2, 192, 4}, {6, 3, 1, 320, 1}};
  auto net = make_shared<Sequential>();
  net->add(conv_bn_silu(3, 32, 3, 1));  // CIFAR stem: stride 1 (ImageNet's is 2)
  int64_t in = 32;
  for (const Stage& st : stages)
    for (int64_t l = 0; l < st.layers; ++l) {
      net->add(mbconv(in, st.out, st.expand, st.kernel, l == 0 ? st.stride : 1));
      in = st.out;
    }
  net->add(conv_bn_silu(in, 1280, 1, 1))
      .add(make_shared<engine::GlobalAvgPool>())
      .add(make_shared<engine::Dropout>(0.2))
      .add(make_shared<engine::Linear>(1280, classes));
  return net;
}

std::shared_ptr<Module> resnet50(int classes) {
  auto net = make_shared<Sequential>();
  net->add(conv_bn_relu(3, 64));
  int64_t in = 64;
  const int64_t blocks[4] = {3, 4, 6, 3}, widths[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage)
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      net->add(bottleneck(in, widths[stage], b == 0 && stage > 0 ? 2 : 1));
      in = 4 * widths[stage];
    }
  net->add(make_shared<engine::GlobalAvgPool>()).add(make_shared<engine::Linear>(2048, classes));
  return net;
}

std::shared_ptr<Module> simplecnn(int classes) {
  auto net = make_shared<Sequential>();
  net->add(make_shared<engine::Conv2d>(3, 16, 3, 1, 1)).add(make_shared<engine::ReLU>())
      .add(make_shared<engine::MaxPool2d>(2))
      .add(make_shared<engine::Conv2d>(16, 32, 3, 1, 1)).add(make_shared<engine::ReLU>())
      .add(make_shared<engine::MaxPool2d>(2))
      .add(make_shared<engine::Flatten>())
      .add(make_shared<engine::Linear>(32 * 8 * 8, 256)).add(make_shared<engine::ReLU>())
      .add(make_shared<engine::Dropout>(0.5))
      .add(make_shared<engine::Linear>(256, classes));
  return net;
}

std::shared_ptr<Module> resnet18(int classes) {
  auto net = make_shared<Sequential>();
  net->add(conv_bn_relu(3, 64));
  int64_t in = 64;
  for (int64_t width : {64, 128, 256, 512}) {
    net->add(basic_block(in, width, width == 64 ? 1 : 2)).add(basic_block(width, width, 1));
    in = width;
  }
  net->add(make_shared<engine::GlobalAvgPool>()).add(make_shared<engine::Linear>(512, classes));
  return net;
}

std::shared_ptr<Module> resnet9(int classes) {
  auto layer = [](int64_t in, int64_t out, bool residual) {
    auto s = make_shared<Sequential>();
    s->add(conv_bn_relu(in, out)).add(make_shared<engine::MaxPool2d>(2));
    if (residual) {
      auto body = make_shared<Sequential>();
      body->add(conv_bn_relu(out, out)).add(conv_bn_relu(out, out));
      s->add(make_shared<Residual>(body));
    }
    return s;
  };
  auto net = make_shared<Sequential>();
  net->add(conv_bn_relu(3, 64))
      .add(layer(64, 128, true))
      .add(layer(128, 256, false))
      .add(layer(256, 512, true))
      .add(make_shared<engine::GlobalAvgPool>())
      .add(make_shared<engine::Linear>(512, classes));
  return net;
}

std::shared_ptr<Module> airbench94(int classes, bool dirac, bool whitened) {
  // conv (Dirac) -> pool -> BN -> GELU -> conv (Dirac) -> BN -> GELU.
  auto conv = [dirac](int64_t in, int64_t out) {
    auto c = make_shared<engine::Conv2d>(in, out, 3, 1, 1, false);
    if (dirac) engine::dirac_init(*c);
    return c;
  };
  auto bn = [](int64_t ch) { return make_shared<engine::BatchNorm2d>(ch, 0.4, 1e-12, false); };
  auto group = [&](int64_t in, int64_t out) {
    auto s = make_shared<Sequential>();
    s->add(conv(in, out)).add(make_shared<engine::MaxPool2d>(2)).add(bn(out)).add(make_shared<engine::GELU>())
        .add(conv(out, out)).add(bn(out)).add(make_shared<engine::GELU>());
    return s;
  };
  auto whiten = make_shared<engine::Conv2d>(3, 24, 2, 1, 0, true);
  whiten->bias->master.zero();
  whiten->weight->set_trainable(!whitened);
  auto net = make_shared<Sequential>();
  net->add(whiten).add(make_shared<engine::GELU>())
      .add(group(24, 64)).add(group(64, 256)).add(group(256, 256))
      .add(make_shared<engine::MaxPool2d>(3)).add(make_shared<engine::Flatten>())
      .add(make_shared<engine::Linear>(256, classes, false)).add(make_shared<engine::Scale>(1.0 / 9.0));
  return net;
}

kernels::AugmentConfig input_normalisation(const std::string& model) {
  kernels::AugmentConfig c;  // [0, 255] -> [-1, 1]
  if (model == "airbench94") {
    // CIFAR-10's channel means and standard deviations (as airbench normalises).
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
    for (int k = 0; k < 3; ++k) {
      c.scale[k] = 1.0f / (255.0f * std[k]);
      c.shift[k] = -mean[k] / std[k];
    }
  }
  return c;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"simplecnn", "resnet9", "resnet18", "resnet50", "efficientnet_b0",
                                                 "airbench94"};
  return names;
}

std::shared_ptr<Module> make_model(const std::string& name, int classes, const ModelOptions& options) {
  if (name == "airbench94") return airbench94(classes, options.dirac, options.whitened);
  ENGINE_CHECK(options.dirac && options.whitened, "the Dirac-init and whitening ablations apply to airbench94 only, not " << name);
  if (name == "simplecnn") return simplecnn(classes);
  if (name == "resnet9") return resnet9(classes);
  if (name == "resnet18") return resnet18(classes);
  if (name == "resnet50") return resnet50(classes);
  if (name == "efficientnet_b0") return efficientnet_b0(classes);
  ENGINE_FAIL("unknown model '" << name << "' (choose simplecnn, resnet9, resnet18, resnet50, efficientnet_b0 or airbench94)");
}

std::string pytorch_path(const std::string& model, const std::string& path) {
  for (const auto& [ours, theirs] : pytorch_naming(model).module_renames) {
    if (path == ours) return theirs;
    if (path.rfind(ours + ".", 0) == 0) return theirs + path.substr(ours.size());
  }
  return path;
}

std::vector<NamedLayer> named_layers(engine::Module& net, const std::string& model) {
  const auto modules = net.named_modules();
  std::vector<NamedLayer> out;
  for (size_t i = 1; i < modules.size(); ++i) {  // [0] is the root
    // Pre-order: a module has children exactly when the next path extends its own.
    const bool leaf = i + 1 == modules.size() || modules[i + 1].first.rfind(modules[i].first + ".", 0) != 0;
    out.push_back({pytorch_path(model, modules[i].first), modules[i].second, leaf});
  }
  return out;
}

const PytorchNaming& pytorch_naming(const std::string& model) {
  // simplecnn is the classic PyTorch CIFAR-10 tutorial net: conv1, conv2, fc1 (after
  // x.view(-1, 32*8*8), so NCHW order), fc2. The ResNets' PyTorch twins are Sequentials laid
  // out like ours, so their paths agree as they are.
  static const std::map<std::string, PytorchNaming> table = {
      {"simplecnn", {{{"0", "conv1"}, {"3", "conv2"}, {"7", "fc1"}, {"10", "fc2"}}, {{"7", {8, 8, 32}}}}},
      {"resnet9", {}},
      {"resnet18", {}},
      {"resnet50", {}},
      {"efficientnet_b0", {}},
      {"airbench94", {}},
  };
  auto it = table.find(model);
  ENGINE_CHECK(it != table.end(), "unknown model '" << model
                                      << "' (choose simplecnn, resnet9, resnet18, resnet50, efficientnet_b0 or airbench94)");
  return it->second;
}

}  // namespace models
