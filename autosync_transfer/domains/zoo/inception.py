"""Inception-v3 in the Keras layout (``keras.applications.InceptionV3``, no auxiliary head)."""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from autosync_transfer.domains.zoo._common import classification_loss as loss
from autosync_transfer.domains.zoo._common import image_batch as example_batch

__all__ = [
    "BatchNormNoScale",
    "ConvBN",
    "InceptionA",
    "InceptionB",
    "InceptionC",
    "InceptionD",
    "InceptionE",
    "InceptionV3",
    "example_batch",
    "loss",
]


class BatchNormNoScale(nn.Module):
    """Batch norm with a trainable offset and no scale (Keras ``BatchNormalization(scale=
    False)``): one trainable vector ``bias``; the moving statistics are buffers."""

    def __init__(self, channels: int, eps: float = 1e-3, momentum: float = 0.01):
        super().__init__()
        self.eps = eps
        self.momentum = momentum
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, None, self.bias,
                            self.training, self.momentum, self.eps)


class ConvBN(nn.Module):
    """Keras ``conv2d_bn``: convolution without bias, batch norm without scale, ReLU.
    ``same`` padding keeps the size at stride 1; ``valid`` pads nothing."""

    def __init__(self, cin: int, cout: int, kernel: tuple[int, int] | int, stride: int = 1,
                 padding: str = "same"):
        super().__init__()
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        pad = (kh // 2, kw // 2) if padding == "same" else (0, 0)
        self.conv = nn.Conv2d(cin, cout, (kh, kw), stride=stride, padding=pad, bias=False)
        self.bn = BatchNormNoScale(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


def avg_pool_same(x: torch.Tensor) -> torch.Tensor:
    """3x3 average pooling at stride 1 that keeps the size (padding not counted)."""
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


class InceptionA(nn.Module):  # mixed0-2, 35x35
    def __init__(self, cin: int, pool_features: int):
        super().__init__()
        self.branch1x1 = ConvBN(cin, 64, 1)
        self.branch5x5_1 = ConvBN(cin, 48, 1)
        self.branch5x5_2 = ConvBN(48, 64, 5)
        self.branch3x3dbl_1 = ConvBN(cin, 64, 1)
        self.branch3x3dbl_2 = ConvBN(64, 96, 3)
        self.branch3x3dbl_3 = ConvBN(96, 96, 3)
        self.branch_pool = ConvBN(cin, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(avg_pool_same(x))], 1)


class InceptionB(nn.Module):  # mixed3, 35x35 -> 17x17
    def __init__(self, cin: int):
        super().__init__()
        self.branch3x3 = ConvBN(cin, 384, 3, stride=2, padding="valid")
        self.branch3x3dbl_1 = ConvBN(cin, 64, 1)
        self.branch3x3dbl_2 = ConvBN(64, 96, 3)
        self.branch3x3dbl_3 = ConvBN(96, 96, 3, stride=2, padding="valid")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch3x3(x), b3, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionC(nn.Module):  # mixed4-7, 17x17, factorized 7x7
    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.branch1x1 = ConvBN(cin, 192, 1)
        self.branch7x7_1 = ConvBN(cin, c7, 1)
        self.branch7x7_2 = ConvBN(c7, c7, (1, 7))
        self.branch7x7_3 = ConvBN(c7, 192, (7, 1))
        self.branch7x7dbl_1 = ConvBN(cin, c7, 1)
        self.branch7x7dbl_2 = ConvBN(c7, c7, (7, 1))
        self.branch7x7dbl_3 = ConvBN(c7, c7, (1, 7))
        self.branch7x7dbl_4 = ConvBN(c7, c7, (7, 1))
        self.branch7x7dbl_5 = ConvBN(c7, 192, (1, 7))
        self.branch_pool = ConvBN(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = x
        for conv in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3,
                     self.branch7x7dbl_4, self.branch7x7dbl_5):
            d = conv(d)
        return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(avg_pool_same(x))], 1)


class InceptionD(nn.Module):  # mixed8, 17x17 -> 8x8
    def __init__(self, cin: int):
        super().__init__()
        self.branch3x3_1 = ConvBN(cin, 192, 1)
        self.branch3x3_2 = ConvBN(192, 320, 3, stride=2, padding="valid")
        self.branch7x7x3_1 = ConvBN(cin, 192, 1)
        self.branch7x7x3_2 = ConvBN(192, 192, (1, 7))
        self.branch7x7x3_3 = ConvBN(192, 192, (7, 1))
        self.branch7x7x3_4 = ConvBN(192, 192, 3, stride=2, padding="valid")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionE(nn.Module):  # mixed9-10, 8x8, expanded filter bank
    def __init__(self, cin: int):
        super().__init__()
        self.branch1x1 = ConvBN(cin, 320, 1)
        self.branch3x3_1 = ConvBN(cin, 384, 1)
        self.branch3x3_2a = ConvBN(384, 384, (1, 3))
        self.branch3x3_2b = ConvBN(384, 384, (3, 1))
        self.branch3x3dbl_1 = ConvBN(cin, 448, 1)
        self.branch3x3dbl_2 = ConvBN(448, 384, 3)
        self.branch3x3dbl_3a = ConvBN(384, 384, (1, 3))
        self.branch3x3dbl_3b = ConvBN(384, 384, (3, 1))
        self.branch_pool = ConvBN(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(avg_pool_same(x))], 1)


class InceptionV3(nn.Module):
    """Inception-v3 as Keras builds it (``keras.applications.InceptionV3``), without the
    auxiliary classifier."""

    def __init__(self, classes: int, image_size: int):
        super().__init__()
        self.image_size = image_size
        self.stem = nn.Sequential(
            ConvBN(3, 32, 3, stride=2, padding="valid"),
            ConvBN(32, 32, 3, padding="valid"),
            ConvBN(32, 64, 3),
            nn.MaxPool2d(3, stride=2),
            ConvBN(64, 80, 1, padding="valid"),
            ConvBN(80, 192, 3, padding="valid"),
            nn.MaxPool2d(3, stride=2),
        )
        self.mixed = nn.Sequential(OrderedDict(
            mixed0=InceptionA(192, 32),
            mixed1=InceptionA(256, 64),
            mixed2=InceptionA(288, 64),
            mixed3=InceptionB(288),
            mixed4=InceptionC(768, 128),
            mixed5=InceptionC(768, 160),
            mixed6=InceptionC(768, 160),
            mixed7=InceptionC(768, 192),
            mixed8=InceptionD(768),
            mixed9=InceptionE(1280),
            mixed10=InceptionE(2048),
        ))
        self.fc = nn.Linear(2048, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.mixed(self.stem(images))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
