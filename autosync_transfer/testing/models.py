"""A tiny torch model with one embedding (sparse gradient rows) for runtime tests."""

from __future__ import annotations

from typing import Any

__all__ = ["TinyNet", "tiny_batches", "tiny_net_graph"]


def _nn() -> Any:
    import torch

    return torch


class TinyNet(_nn().nn.Module):  # type: ignore[misc]
    """embedding(50x6) -> mean over tokens -> linear(6x8) -> tanh -> linear(8x3) -> cross-entropy."""

    def __init__(self, vocab: int = 50, dim: int = 6, hidden: int = 8, classes: int = 3):
        import torch

        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.fc = torch.nn.Linear(dim, hidden)
        self.out = torch.nn.Linear(hidden, classes)

    def forward(self, idx: Any, y: Any) -> Any:
        import torch
        import torch.nn.functional as F

        h = torch.tanh(self.fc(self.emb(idx).mean(1)))
        return F.cross_entropy(self.out(h), y)


def tiny_batches(steps: int, ranks: int, per_rank: int = 4, tokens: int = 5, vocab: int = 50,
                 seed: int = 0) -> list[list[tuple[Any, Any]]]:
    """``batches[step][rank] = (idx, y)``; concatenating over ranks gives the global batch."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        row = []
        for _ in range(ranks):
            idx = torch.randint(0, vocab, (per_rank, tokens), generator=g)
            y = torch.randint(0, 3, (per_rank,), generator=g)
            row.append((idx, y))
        out.append(row)
    return out


def tiny_net_graph(batch_size: int = 4, seq_len: int = 5):  # noqa: ANN201 - ModelGraph
    import torch

    from autosync_transfer.domains.graph import ModelGraph

    with torch.device("meta"):
        net = TinyNet()
    return ModelGraph.from_torch(net, name="tinynet", batch_size=batch_size, seq_len=seq_len)
