"""BERT encoder with a masked-token head over token buckets and a next-sentence head."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autosync_transfer.domains.zoo._common import DenseTable

__all__ = ["Bert", "BertEmbeddings", "BertLayer", "example_batch", "loss"]


class BertEmbeddings(nn.Module):
    """Word embeddings (``nn.Embedding``: row-sparse gradient) plus position and token-type
    tables (plain parameters, sliced / indexed: dense gradient, as in TF BERT)."""

    def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int,
                 dropout: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = DenseTable(max_positions, hidden)
        self.token_type_embeddings = DenseTable(type_vocab, hidden)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        nn.init.normal_(self.word_embeddings.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        positions = self.position_embeddings.weight[:seq].unsqueeze(0)
        x = self.word_embeddings(input_ids) + positions
        x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(x))


class BertLayer(nn.Module):
    """Self-attention and feed-forward sublayers, each with a residual and a post-LayerNorm."""

    def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        p = self.dropout.p if self.training else 0.0
        a = F.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)),
            attn_mask=mask, dropout_p=p,
        )
        a = a.transpose(1, 2).reshape(b, s, h)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(y))


class Bert(nn.Module):
    """BERT encoder with a masked-token head over ``mlm_classes`` token buckets and a
    next-sentence head on the pooled first token. ``forward`` returns
    ``(mlm_logits [B, S, mlm_classes], nsp_logits [B, 2])``."""

    def __init__(self, layers: int, hidden: int, heads: int, intermediate: int, vocab: int,
                 max_positions: int, type_vocab: int, mlm_classes: int,
                 dropout: float = 0.1):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab, dropout)
        self.layers = nn.ModuleList(
            BertLayer(hidden, heads, intermediate, dropout) for _ in range(layers)
        )
        self.mlm_transform = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.mlm_decoder = nn.Linear(hidden, mlm_classes)
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None
        if attention_mask is not None:  # [B, S] of 1 (attend) / 0 (padding)
            mask = attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask)
        mlm = self.mlm_decoder(self.mlm_norm(F.gelu(self.mlm_transform(x))))
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        return mlm, nsp


def example_batch(
    config: dict[str, Any], batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Token and segment ids ``[B, S]``; targets ``mlm`` (token buckets ``[B, S]``) and ``nsp``
    (``[B]``)."""

    def ints(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(high, shape, generator=generator)

    b, s = batch_size, seq_len
    inputs = {"input_ids": ints(config["vocab"], b, s),
              "token_type_ids": ints(config["type_vocab"], b, s)}
    return inputs, {"mlm": ints(config["mlm_classes"], b, s), "nsp": ints(2, b)}


def loss(
    outputs: tuple[torch.Tensor, torch.Tensor], targets: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Masked-token plus next-sentence cross-entropy."""
    mlm_logits, nsp_logits = outputs
    mlm = F.cross_entropy(mlm_logits.flatten(0, 1), targets["mlm"].flatten())
    return mlm + F.cross_entropy(nsp_logits, targets["nsp"])
