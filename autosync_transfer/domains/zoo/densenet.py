"""DenseNet-BC: dense blocks joined by transitions that halve the channels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autosync_transfer.domains.zoo._common import classification_loss as loss
from autosync_transfer.domains.zoo._common import image_batch as example_batch

__all__ = ["DenseBlock", "DenseLayer", "DenseNet", "Transition", "example_batch", "loss"]


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (to ``bn_size * growth``), BN-ReLU-3x3 conv (to ``growth``)."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(y)))


class DenseBlock(nn.ModuleList):
    """Layers that each see the concatenation of the block input and every earlier output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        features = [x]
        for layer in self:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


class Transition(nn.Module):
    """BN-ReLU-1x1 conv, then 2x2 average pooling."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(self.conv(F.relu(self.norm(x))), 2)


class DenseNet(nn.Module):
    """DenseNet-BC: dense blocks joined by transitions that halve the channels."""

    def __init__(self, blocks: list[int], growth: int, init_features: int, bn_size: int,
                 classes: int, image_size: int):
        super().__init__()
        self.image_size = image_size
        self.conv0 = nn.Conv2d(3, init_features, 7, stride=2, padding=3, bias=False)
        self.norm0 = nn.BatchNorm2d(init_features)
        stages: list[nn.Module] = []
        c = init_features
        for i, n in enumerate(blocks):
            stages.append(
                DenseBlock(DenseLayer(c + j * growth, growth, bn_size) for j in range(n))
            )
            c += n * growth
            if i < len(blocks) - 1:
                stages.append(Transition(c, c // 2))
                c //= 2
        self.stages = nn.Sequential(*stages)
        self.norm5 = nn.BatchNorm2d(c)
        self.classifier = nn.Linear(c, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm0(self.conv0(images))), 3, stride=2, padding=1)
        x = F.relu(self.norm5(self.stages(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
