"""A tiny decoder-only transformer (GPT-style) learning to copy: a workload for autosync-transfer.

It follows the plain workload convention (``build_model``, ``example_batch``, ``loss_fn`` and
``BATCH_SIZE``), so it runs as ``--model examples/workloads/tiny_gpt.py`` or
``load_workload("examples/workloads/tiny_gpt.py")``. The task: a sequence of random tokens
followed by the same tokens again; the model predicts each next token, and the loss counts the
second half only, which an attention layer learns to copy (an induction task). The defaults are
sized to train on a CPU in seconds; change the constants below for a bigger model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: tokens in the vocabulary (token 0 is never drawn)
VOCAB = 64
#: tokens per sequence (the model sees SEQ_LEN - 1 of them and predicts the next)
SEQ_LEN = 16
#: width of the residual stream
D_MODEL = 32
#: transformer blocks
N_LAYERS = 2
#: attention heads per block
N_HEADS = 4
#: sequences per worker and step
BATCH_SIZE = 8

#: targets that do not count in the loss
IGNORE = -100


class TinyGPT(nn.Module):
    """Token and position embeddings, pre-norm causal transformer blocks, a linear head."""

    def __init__(self, vocab: int = VOCAB, seq_len: int = SEQ_LEN, d_model: int = D_MODEL,
                 n_layers: int = N_LAYERS, n_heads: int = N_HEADS) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model,
                                       dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(pos)
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=input_ids.device)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def build_model() -> nn.Module:
    return TinyGPT()


def example_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, targets)``: random tokens repeated twice; targets are the next tokens, with
    the first half (unpredictable) ignored."""
    return copy_task_batch(batch_size, generator)


def copy_task_batch(batch_size: int, generator: torch.Generator, vocab: int = VOCAB,
                    seq_len: int = SEQ_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`example_batch` for any vocabulary and sequence length."""
    half = seq_len // 2
    first = torch.randint(1, vocab, (batch_size, half), generator=generator)
    seq = torch.cat([first, first], dim=1)
    inputs, targets = seq[:, :-1], seq[:, 1:].clone()
    targets[:, : half - 1] = IGNORE
    return inputs, targets


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def lab():  # noqa: ANN201 - a Workload
    """The same model at the sizes of the acceptance run on ``examples/clusters/lab.yml``
    (``--model examples/workloads/tiny_gpt.py:lab``): 4 blocks of width 96 over 31 tokens of a
    256-token vocabulary, about 0.5 M parameters (2.0 MB of gradients per step), roughly
    50-150 ms per step on one CPU core. Its domains are ``tiny_gpt_lab-<cluster>``."""
    from functools import partial

    from autosync_transfer import Workload

    vocab, seq_len = 256, 32
    return Workload(
        name="tiny_gpt_lab", batch_size=8,
        build_model=partial(TinyGPT, vocab=vocab, seq_len=seq_len, d_model=96, n_layers=4,
                            n_heads=4),
        example_batch=partial(copy_task_batch, vocab=vocab, seq_len=seq_len),
        loss_fn=loss_fn,
        description="tiny GPT (4 x 96, 256 tokens, 31 positions) learning to copy")
