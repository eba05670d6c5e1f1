"""Bottleneck ResNet (v1.5: the stride sits on the 3x3 convolution)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autosync_transfer.domains.zoo._common import classification_loss as loss
from autosync_transfer.domains.zoo._common import image_batch as example_batch
from autosync_transfer.errors import ConfigError

__all__ = ["Bottleneck", "ResNet", "example_batch", "loss"]


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, v1.5), 1x1 expand x4, plus the (projected) shortcut."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(y + shortcut)


class ResNet(nn.Module):
    """Bottleneck ResNet. ``stem='imagenet'``: 7x7/2 convolution and 3x3/2 max-pool;
    ``stem='cifar'``: one 3x3/1 convolution (for 32x32 inputs)."""

    def __init__(self, blocks: list[int], width: int, classes: int, image_size: int,
                 stem: str = "imagenet"):
        super().__init__()
        if stem not in ("imagenet", "cifar"):
            raise ConfigError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
        self.image_size = image_size
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
            self.pool: nn.Module = nn.MaxPool2d(3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
            self.pool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(width)
        stages = []
        cin = width
        for i, n in enumerate(blocks):
            w = width * 2**i
            stage = []
            for j in range(n):
                stage.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * 4
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(images))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
