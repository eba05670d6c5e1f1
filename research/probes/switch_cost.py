"""What does one autotune switch cost, and where: the install itself or the steps after it?

On a catalog cluster (emulated as root, like the autotune table), a ``DistributedModel`` of the
demo classifier starts on torch DDP, runs ``--warm`` steps, then alternates ``--cycles`` times:
switch to a builder's strategy (``--builder``, default the ``all_reduce`` builder), ``--block``
steps, switch back to DDP, ``--block`` steps. Printed per switch: the install time (the
slowest rank's) and the first steps after it against DDP's median step, the excess in ms.

    sudo .venv/bin/python research/probes/switch_cost.py [--cluster A] [--builder all_reduce]
        [--cycles 4] [--block 6] [--warm 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="A")
    ap.add_argument("--builder", default="all_reduce")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=512)
    return ap.parse_args()


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from autosync_transfer.demos.task import TextClassifier, classifier_batch
    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.runtime.torch_ddp import TORCH_DDP
    from autosync_transfer.strategies.builders import build

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cluster = get_cluster(args.cluster)
    torch.manual_seed(0)
    net = TextClassifier(args.hidden)
    model = DistributedModel(net, None, cluster, autotune=AutotuneConfig(
        candidates=[], planned_steps=100)).setup()
    graph = ModelGraph.from_torch(net, name="model")
    strategy = build(args.builder, Domain(name="probe", model=graph, cluster=cluster))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)

    def step() -> float:
        t0 = time.perf_counter()
        x, y = classifier_batch(gen, 32)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    def slowest(v: list[float]) -> list[float]:
        t = torch.tensor(v, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    for _ in range(args.warm):
        step()
    rows = []
    for c in range(args.cycles):
        for target in (strategy, TORCH_DDP):
            dist.barrier()
            t0 = time.perf_counter()
            model.switch(target)
            install = time.perf_counter() - t0
            steps = [step() for _ in range(args.block)]
            rows.append((c, "to " + (target if isinstance(target, str) else args.builder),
                         model.backend, slowest([install, *steps])))
    if rank == 0:
        ddp = [t for _, name, _, v in rows if name == f"to {TORCH_DDP}" for t in v[3:]]
        med = statistics.median(ddp)
        print(f"cluster {args.cluster}, {dist.get_world_size()} ranks; DDP median step "
              f"{med * 1e3:.1f} ms (its blocks' steps after the third)")
        for c, name, backend, v in rows:
            print(f"  cycle {c} {name:18s} ({backend:11s}) install {v[0] * 1e3:6.1f} ms; steps "
                  + " ".join(f"{(t - med) * 1e3:+6.1f}" for t in v[1:])
                  + f"  excess of the block {sum(t - med for t in v[1:]) * 1e3:+.1f} ms")
    dist.destroy_process_group()


def main() -> int:
    args = _parse()
    if "RANK" in os.environ:
        worker(args)
        return 0
    from autosync_transfer.demos.task import run_emulated
    from autosync_transfer.domains.catalog import get_cluster

    return run_emulated(get_cluster(args.cluster), [os.path.abspath(__file__), *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
