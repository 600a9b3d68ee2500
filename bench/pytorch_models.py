"""PyTorch twins of the engine's models (models/models.cpp), with the parameter names and
layouts that `trainer --export` writes, so an exported file loads with no renaming:

    import safetensors.torch, pytorch_models
    net = pytorch_models.MODELS["simplecnn"]()
    net.load_state_dict(safetensors.torch.load_file("model.safetensors"))
    logits = net(pytorch_models.to_input(images_uint8_nhwc))

simplecnn is the classic PyTorch CIFAR-10 tutorial net (conv1, conv2, fc1, fc2); the ResNets are
Sequentials laid out module for module like ours. bench/pytorch_reference.py trains these same
definitions for the side-by-side tables.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleCNN(nn.Module):
    """conv3x3(3->16)+ReLU+pool, conv3x3(16->32)+ReLU+pool, fc 2048->256+ReLU, dropout 0.5, fc."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(32 * 8 * 8, 256)
        self.dropout = nn.Dropout(0.5)
        self.fc2 = nn.Linear(256, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        # The tutorial's x.view(-1, 32 * 8 * 8): NCHW order. flatten also accepts channels_last.
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


def conv_bn_relu(cin, cout, stride=1):
    # No conv bias: batch-norm follows and would cancel it.
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Residual(nn.Module):
    """body(x) + shortcut(x) (identity when shortcut is None), as models::Residual."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut

    def forward(self, x):
        return self.body(x) + (self.shortcut(x) if self.shortcut is not None else x)


class GlobalAvgPool(nn.Module):
    """Mean over H and W to [N, C]: one module, as engine::GlobalAvgPool, so indices agree."""

    def forward(self, x):
        return x.mean((2, 3))


def basic_block(cin, cout, stride):
    body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
    shortcut = None
    if stride != 1 or cin != cout:
        shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))
    return nn.Sequential(Residual(body, shortcut), nn.ReLU())


def bottleneck(cin, width, stride):
    out = 4 * width
    body = nn.Sequential(nn.Conv2d(cin, width, 1, 1, 0, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, out, 1, 1, 0, bias=False), nn.BatchNorm2d(out))
    shortcut = None
    if stride != 1 or cin != out:
        shortcut = nn.Sequential(nn.Conv2d(cin, out, 1, stride, 0, bias=False), nn.BatchNorm2d(out))
    return nn.Sequential(Residual(body, shortcut), nn.ReLU())


def simplecnn(classes=10):
    return SimpleCNN(classes)


def resnet9(classes=10):
    def layer(cin, cout, residual):
        mods = [conv_bn_relu(cin, cout), nn.MaxPool2d(2)]
        if residual:
            mods.append(Residual(nn.Sequential(conv_bn_relu(cout, cout), conv_bn_relu(cout, cout))))
        return nn.Sequential(*mods)

    return nn.Sequential(conv_bn_relu(3, 64), layer(64, 128, True), layer(128, 256, False), layer(256, 512, True),
                         GlobalAvgPool(), nn.Linear(512, classes))


def resnet18(classes=10):
    mods, cin = [conv_bn_relu(3, 64)], 64
    for width in (64, 128, 256, 512):
        mods += [basic_block(cin, width, 1 if width == 64 else 2), basic_block(width, width, 1)]
        cin = width
    mods += [GlobalAvgPool(), nn.Linear(512, classes)]
    return nn.Sequential(*mods)


def resnet50(classes=10):
    mods, cin = [conv_bn_relu(3, 64)], 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            mods.append(bottleneck(cin, width, 2 if b == 0 and stage > 0 else 1))
            cin = 4 * width
    mods += [GlobalAvgPool(), nn.Linear(2048, classes)]
    return nn.Sequential(*mods)


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(channels, squeeze), nn.Linear(squeeze, channels)

    def forward(self, x):
        s = torch.sigmoid(self.fc2(F.silu(self.fc1(x.mean((2, 3))))))
        return x * s[:, :, None, None]


def conv_bn_silu(cin, cout, kernel, stride, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.SiLU())


def mbconv(cin, cout, expand, kernel, stride):
    mid = cin * expand
    mods = [conv_bn_silu(cin, mid, 1, 1)] if expand != 1 else []
    mods += [conv_bn_silu(mid, mid, kernel, stride, groups=mid), SqueezeExcite(mid, max(1, cin // 4)),
             nn.Conv2d(mid, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout)]
    body = nn.Sequential(*mods)
    return Residual(body) if stride == 1 and cin == cout else body


def efficientnet_b0(classes=10):
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    mods, cin = [conv_bn_silu(3, 32, 3, 1)], 32
    for expand, kernel, stride, cout, layers in stages:
        for i in range(layers):
            mods.append(mbconv(cin, cout, expand, kernel, stride if i == 0 else 1))
            cin = cout
    mods += [conv_bn_silu(cin, 1280, 1, 1), GlobalAvgPool(), nn.Dropout(0.2), nn.Linear(1280, classes)]
    return nn.Sequential(*mods)


class Scale(nn.Module):
    """x * factor (airbench's logit scale), as engine::Scale."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def dirac_conv(cin, cout):
    """conv3x3 'same' without bias, its first cin filters the identity (the rest default init)."""
    conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
    nn.init.dirac_(conv.weight.data[:cin])
    return conv


def fixed_scale_bn(channels):
    """Batch-norm without a learned scale (weight frozen at 1), eps 1e-12, momentum 0.4."""
    bn = nn.BatchNorm2d(channels, eps=1e-12, momentum=0.4)
    bn.weight.requires_grad_(False)
    return bn


def airbench94_group(cin, cout):
    return nn.Sequential(dirac_conv(cin, cout), nn.MaxPool2d(2), fixed_scale_bn(cout), nn.GELU(),
                         dirac_conv(cout, cout), fixed_scale_bn(cout), nn.GELU())


def airbench94(classes=10):
    """models::airbench94: whitening conv 2x2 3->24 (weights set from the data and frozen, bias
    zero), GELU, three groups 64, 256, 256, maxpool 3, linear 256->classes without bias, x 1/9."""
    whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
    whiten.weight.requires_grad_(False)
    nn.init.zeros_(whiten.bias)
    return nn.Sequential(whiten, nn.GELU(), airbench94_group(24, 64), airbench94_group(64, 256),
                         airbench94_group(256, 256), nn.MaxPool2d(3), nn.Flatten(),
                         nn.Linear(256, classes, bias=False), Scale(1.0 / 9.0))


MODELS = {"simplecnn": simplecnn, "resnet9": resnet9, "resnet18": resnet18, "resnet50": resnet50,
          "efficientnet_b0": efficientnet_b0, "airbench94": airbench94}

# The per-channel normalisation each model trains with (models::input_normalisation).
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def to_input(images_u8_nhwc, model="simplecnn"):
    """uint8 [N, 32, 32, 3] RGB -> float NCHW as the trainer normalises for `model`: [-1, 1], or
    CIFAR-10's mean and std for airbench94."""
    x = torch.as_tensor(images_u8_nhwc).permute(0, 3, 1, 2).float() / 255.0
    if model == "airbench94":
        mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
        return (x - mean) / std
    return (x - 0.5) / 0.5
