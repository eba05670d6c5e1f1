"""NeuMF (neural collaborative filtering): a GMF path and an MLP path over user/item tables."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autosync_transfer.domains.zoo._common import DenseTable
from autosync_transfer.errors import ConfigError

__all__ = ["NeuMF", "example_batch", "loss"]


class NeuMF(nn.Module):
    """Neural matrix factorization: a GMF path and an MLP path over user/item embeddings,
    joined by one output unit. ``forward`` returns logits ``[B]``."""

    def __init__(self, users: int, items: int, factors: int, mlp_layers: list[int],
                 dense_embeddings: bool = False):
        super().__init__()
        if len(mlp_layers) < 1 or mlp_layers[0] % 2:
            raise ConfigError(
                f"mlp_layers must start with an even width (user and item halves), "
                f"got {mlp_layers}"
            )
        table: Callable[[int, int], nn.Module] = DenseTable if dense_embeddings else nn.Embedding
        half = mlp_layers[0] // 2
        self.mf_user_embedding = table(users, factors)
        self.mf_item_embedding = table(items, factors)
        self.mlp_user_embedding = table(users, half)
        self.mlp_item_embedding = table(items, half)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(mlp_layers))
        self.output = nn.Linear(factors + mlp_layers[-1], 1)
        for t in (self.mf_user_embedding, self.mf_item_embedding,
                  self.mlp_user_embedding, self.mlp_item_embedding):
            nn.init.normal_(t.weight, std=0.01)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        mf = self.mf_user_embedding(users) * self.mf_item_embedding(items)
        h = torch.cat([self.mlp_user_embedding(users), self.mlp_item_embedding(items)], dim=-1)
        for layer in self.mlp:
            h = F.relu(layer(h))
        return self.output(torch.cat([mf, h], dim=-1)).squeeze(-1)


def example_batch(
    config: dict[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """User and item ids ``[B]``; binary click targets ``[B]`` (float)."""
    b = batch_size
    inputs = {"users": torch.randint(config["users"], (b,), generator=generator),
              "items": torch.randint(config["items"], (b,), generator=generator)}
    return inputs, torch.randint(2, (b,), generator=generator).float()


def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy on logits."""
    return F.binary_cross_entropy_with_logits(outputs, targets)
