"""What both examples share: a small text classifier, its synthetic data, and worker launching
inside an emulated cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence

import torch

VOCAB, DIM, HIDDEN, CLASSES, TOKENS = 2000, 64, 512, 4, 16


class TextClassifier(torch.nn.Module):
    """Embedding (row-sparse gradient) -> mean over tokens -> 2-layer MLP -> class scores
    (about 430 k parameters, 1.7 MB of gradients per step)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.fc1 = torch.nn.Linear(DIM, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(self.emb(tokens).mean(1)))
        return self.out(torch.relu(self.fc2(h)))


def batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable task: class c draws its tokens from the c-th quarter of the vocabulary."""
    y = torch.randint(0, CLASSES, (size,), generator=gen)
    band = VOCAB // CLASSES
    return y[:, None] * band + torch.randint(0, band, (size, TOKENS), generator=gen), y


def default_launcher() -> str:
    return "emulated" if os.geteuid() == 0 else "local"


def describe(strategy) -> str:  # noqa: ANN001 - a Strategy
    """One line: how many variables use which synchronizer."""
    kinds: Counter[str] = Counter()
    for n in strategy.nodes:
        for _, s in n.items():
            kinds["PS" if s.kind == "ps" else f"AR/{s.compressor}"] += 1
    parts = ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items()))
    return f"{strategy.id} ({strategy.kind}): {parts}"


def run_emulated(cluster, argv: Sequence[str], *, timeout_s: float = 900) -> int:  # noqa: ANN001
    """Run ``python argv...`` once per worker of ``cluster``, each inside its node's network
    namespace, with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR,
    MASTER_PORT). Returns 0 when every worker succeeded, else the first failing exit code."""
    from autosync_transfer.runtime.emulation import EmulatedCluster
    from autosync_transfer.runtime.launch import free_port

    with EmulatedCluster(cluster) as ec:
        port = free_port()
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
