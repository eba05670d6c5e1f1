"""The demo task: a small text classifier on synthetic, learnable data, and a launcher that runs a
script on every worker of an emulated cluster."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from autosync_transfer.domains.cluster import Cluster

__all__ = ["VOCAB", "DIM", "HIDDEN", "CLASSES", "TOKENS", "TextClassifier", "classifier_batch",
           "run_emulated"]

#: vocabulary, embedding width, default hidden width, classes, tokens per sample
VOCAB, DIM, HIDDEN, CLASSES, TOKENS = 2000, 64, 512, 4, 16


class TextClassifier(torch.nn.Module):
    """Embedding (row-sparse gradient) -> mean over tokens -> 2-layer MLP -> class scores
    (about 430 k parameters, 1.7 MB of gradients per step at the default ``hidden``; ``hidden``
    2048 makes it bandwidth-bound: 4.5 M parameters, 18 MB of dense gradients per step)."""

    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.fc1 = torch.nn.Linear(DIM, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(self.emb(tokens).mean(1)))
        return self.out(torch.relu(self.fc2(h)))


def classifier_batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` samples ``(tokens, labels)`` of a learnable task: class c draws its
    :data:`TOKENS` tokens from the c-th quarter of the vocabulary."""
    y = torch.randint(0, CLASSES, (size,), generator=gen)
    band = VOCAB // CLASSES
    return y[:, None] * band + torch.randint(0, band, (size, TOKENS), generator=gen), y


def run_emulated(cluster: Cluster, argv: Sequence[str], *, timeout_s: float = 900) -> int:
    """Run ``python argv...`` once per worker of ``cluster``, each inside its node's network
    namespace (:class:`~autosync_transfer.runtime.EmulatedCluster`: NICs shaped to the nodes'
    bandwidth; needs root), with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT). Returns 0 when every worker
    succeeded, else the first failing exit code (124 after ``timeout_s``); the others are then
    stopped and the namespaces removed."""
    from autosync_transfer.runtime import EmulatedCluster

    with EmulatedCluster(cluster) as ec:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a free port for rank 0
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        procs: list[subprocess.Popen] = []
        for node in ec.nodes:
            for local, rank in enumerate(node.ranks):
                env = {"RANK": str(rank), "WORLD_SIZE": str(cluster.world_size),
                       "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(node.workers),
                       "NODE_RANK": str(node.index), "PYTHONUNBUFFERED": "1"}
                env.update(ec.env_for(node.name, master_port=port))
                procs.append(ec.popen(node.name, [sys.executable, *argv], env=env))
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                print("a worker failed or the run timed out; stopping the others", file=sys.stderr)
                return failed[0] if failed else 124
            time.sleep(0.2)
        codes = [p.returncode for p in procs]
    return next((c for c in codes if c != 0), 0)
