"""Pieces the families share: the dense-gradient lookup table, and the synthetic batch and loss
of the image classifiers (imports torch)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DenseTable", "classification_loss", "image_batch"]


class DenseTable(nn.Module):
    """A lookup table whose gradient is dense: a plain parameter indexed by ids (the
    counterpart of ``nn.Embedding``, whose gradient touches only the looked-up rows)."""

    def __init__(self, rows: int, width: int, std: float = 0.02):
        super().__init__()
        self.std = std
        self.weight = nn.Parameter(torch.empty(rows, width))
        nn.init.normal_(self.weight, std=std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]


def image_batch(
    config: dict[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``({"images": [B, 3, side, side]}, labels [B])`` for an image classifier."""
    side = config["image_size"]
    inputs = {"images": torch.randn(batch_size, 3, side, side, generator=generator)}
    return inputs, torch.randint(config["classes"], (batch_size,), generator=generator)


def classification_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of class logits."""
    return F.cross_entropy(outputs, targets)
