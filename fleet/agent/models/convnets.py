"""The image models the paper trains, in plain PyTorch: ResNet-18 and MobileNetV2 with CIFAR
stems, and a two-layer CNN for demos and tests.

- ``ResNet18``: the CIFAR stem (3x3 conv, stride 1, no max-pool), ~11.17M params at 10 classes.
- ``MobileNetV2``: adapted to 32x32 inputs (stride-1 stem and stride-1 second stage, as in the
  common CIFAR ports), width multiplier, ~2.24M params at 10 classes.
- ``SmallCNN``: two conv layers; seconds on a laptop CPU.

Why separate: the convolutional architectures share their initialisation and nothing with the
character transformer or the registry (``fleet.agent.models.registry``), which builds them by name.
Torch
1.10 APIs and Python 3.6 syntax only (JetPack 4.6 on the boards).
"""

from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------
# ResNet-18 (CIFAR stem)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18; ``cifar=True`` swaps the 7x7/2 stem + max-pool for a 3x3/1 stem.

    The CIFAR stem keeps 32x32 feature maps in the first stage, which is what makes this model
    ~10x slower per image than the stock stem at 32x32 -- the workload the paper profiles.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, cifar: bool = True) -> None:
        super(ResNet18, self).__init__()
        if cifar:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        layers = []
        in_planes = 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(BasicBlock(in_planes, planes, stride))
            layers.append(BasicBlock(planes, planes, 1))
            in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# --------------------------------------------------------------------------------------------
# MobileNetV2 (CIFAR variant)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels the way the MobileNetV2 reference does (never drop more than 10%)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


def _conv_bn_relu6(inp: int, out: int, kernel: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand_ratio: int) -> None:
        super(InvertedResidual, self).__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_residual = stride == 1 and inp == out
        layers: List[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(inp, hidden, 1, 1))
        layers.append(_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden))
        layers.append(nn.Conv2d(hidden, out, 1, 1, 0, bias=False))
        layers.append(nn.BatchNorm2d(out))
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018); ``cifar=True`` keeps resolution for 32x32 inputs.

    The CIFAR variant uses a stride-1 stem and a stride-1 second stage, so a 32x32 image leaves
    the last stage at 4x4 instead of 1x1. Residuals only where stride is 1 and widths match, as
    in the reference, so the parameter count equals the ImageNet model's minus the classifier.
    """

    # expansion t, output channels c, repeats n, first stride s (ImageNet strides)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        width_mult: float = 1.0,
        cifar: bool = True,
        dropout: float = 0.2,
    ) -> None:
        super(MobileNetV2, self).__init__()
        if not width_mult > 0:
            raise ValueError("width_mult must be > 0, got {}".format(width_mult))
        inp = _make_divisible(32 * width_mult)
        self.last_channels = _make_divisible(1280 * max(1.0, width_mult))
        layers: List[nn.Module] = [_conv_bn_relu6(in_channels, inp, 3, 1 if cifar else 2)]
        for i, (t, c, n, s) in enumerate(self.SETTINGS):
            if cifar and i == 1:
                s = 1
            out = _make_divisible(c * width_mult)
            for k in range(n):
                layers.append(InvertedResidual(inp, out, s if k == 0 else 1, t))
                inp = out
        layers.append(_conv_bn_relu6(inp, self.last_channels, 1, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(self.last_channels, num_classes)
        )
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# Small CNN for demos


class SmallCNN(nn.Module):
    """Two conv layers and a linear head: trains at thousands of images/s on a laptop CPU."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 16) -> None:
        super(SmallCNN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.fc = nn.Linear(2 * width * 16, num_classes)
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


def _init_conv_bn(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
