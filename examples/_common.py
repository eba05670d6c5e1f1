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


def batch(gen: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable task: class c draws its tokens from the c-th quarter of the vocabulary."""
    y = torch.randint(0, CLASSES, (size,), generator=gen)
    band = VOCAB // CLASSES
    return y[:, None] * band + torch.randint(0, band, (size, TOKENS), generator=gen), y


def default_launcher() -> str:
    return "emulated" if os.geteuid() == 0 else "local"


def describe(strategy) -> str:  # noqa: ANN001 - a Strategy, or "torch_ddp" (autotune's DDP)
    """One line: how many variables use which synchronizer."""
    if isinstance(strategy, str):
        return f"{strategy} (torch's DistributedDataParallel)"
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
    import socket

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


def run_summary(parameters, losses: list[float], step_s: list[float], wall_s: float,
                world: int) -> dict:  # noqa: ANN001 - an iterable of tensors
    """What a training worker reports (collective: every rank calls it): the first loss, the
    final loss (last 20 steps, averaged over workers), the wall and median step time, and
    whether every rank's parameters are identical (a checksum of each replica)."""
    import statistics

    import torch.distributed as dist

    flat = torch.cat([p.detach().reshape(-1) for p in parameters])
    sums = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(sums, torch.stack([flat.double().sum(), flat.double().abs().sum()]))
    tail = torch.tensor(losses[-20:]).mean()
    dist.all_reduce(tail)
    return {
        "first_loss": losses[0],
        "final_loss": float(tail) / world,
        "wall_s": wall_s,
        "median_step_ms": statistics.median(step_s[min(10, len(step_s) - 1):]) * 1000,
        "replicas_identical": all(torch.equal(s, sums[0]) for s in sums),
    }


def worker_main(train, cfg_json: str) -> int:  # noqa: ANN001 - (rank, world, cfg) -> dict
    """Entry of a worker started inside an emulated node (torchrun's environment): joins the
    gloo group, runs ``train(rank, world, cfg)`` and rank 0 writes its result to
    ``cfg["result_path"]``."""
    import json
    from pathlib import Path

    import torch.distributed as dist

    from autosync_transfer.runtime import init_from_env

    cfg = json.loads(cfg_json)
    rank, world = init_from_env("gloo")
    try:
        result = train(rank, world, cfg)
        if rank == 0:
            Path(cfg["result_path"]).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
    return 0


def report_line(result: dict, steps: int, total_s: float) -> str:
    """The one line a training example prints about its run (see :func:`run_summary`)."""
    return (f"final loss {result['final_loss']:.4f} (first {result['first_loss']:.4f}); "
            f"{steps} steps in {result['wall_s']:.1f} s, median "
            f"{result['median_step_ms']:.1f} ms/step; replicas identical: "
            f"{'yes' if result['replicas_identical'] else 'NO'}; total with start-up "
            f"{total_s:.1f} s")
