"""What the examples share besides the demo task (``autosync_transfer.demos``): the launcher
default, a strategy's one-line description, and a training worker's entry and report."""

from __future__ import annotations

import os
from collections import Counter

import torch


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
