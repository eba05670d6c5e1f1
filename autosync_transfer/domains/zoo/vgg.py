"""VGG: blocks of 3x3 convolutions and max-pooling, then fully connected layers."""

from __future__ import annotations

from collections import OrderedDict
from itertools import pairwise

import torch
from torch import nn

from autosync_transfer.domains.zoo._common import classification_loss as loss
from autosync_transfer.domains.zoo._common import image_batch as example_batch
from autosync_transfer.errors import ConfigError

__all__ = ["VGG", "VGG_STACKS", "example_batch", "loss"]

#: depth -> convolution widths per block
VGG_STACKS: dict[int, list[list[int]]] = {
    16: [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]],
}


class VGG(nn.Module):
    """VGG: blocks of 3x3 convolutions and 2x2 max-pooling, then fully connected layers
    ``fc6, fc7, ...`` (``classifier`` hidden widths, then ``classes``). Initialized as
    torchvision initializes its VGG (He-normal convolutions, fan-out; fully connected weights
    N(0, 0.01); zero biases): with PyTorch's default initialization the 13 convolutions without
    batch normalization shrink the signal so much that training stalls for hundreds of steps."""

    def __init__(self, depth: int, classifier: list[int], classes: int, image_size: int,
                 dropout: float = 0.0):
        super().__init__()
        if depth not in VGG_STACKS:
            raise ConfigError(f"VGG depth must be one of {sorted(VGG_STACKS)}, got {depth}")
        self.image_size = image_size
        features: OrderedDict[str, nn.Module] = OrderedDict()
        c = 3
        for block, widths in enumerate(VGG_STACKS[depth], start=1):
            for i, w in enumerate(widths, start=1):
                features[f"conv{block}_{i}"] = nn.Conv2d(c, w, 3, padding=1)
                features[f"relu{block}_{i}"] = nn.ReLU(inplace=True)
                c = w
            features[f"pool{block}"] = nn.MaxPool2d(2)
        self.features = nn.Sequential(features)
        side = image_size // 2 ** len(VGG_STACKS[depth])
        dims = [c * side * side, *classifier, classes]
        head: OrderedDict[str, nn.Module] = OrderedDict()
        last = len(dims) - 2
        for i, (a, b) in enumerate(pairwise(dims)):
            head[f"fc{6 + i}"] = nn.Linear(a, b)
            if i < last:
                head[f"relu{6 + i}"] = nn.ReLU(inplace=True)
                if dropout > 0:
                    head[f"drop{6 + i}"] = nn.Dropout(dropout)
        self.classifier = nn.Sequential(head)
        if not any(p.is_meta for p in self.parameters()):
            self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))
