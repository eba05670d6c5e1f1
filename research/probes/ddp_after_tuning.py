"""Does torch DDP inside ``DistributedModel`` run slower once the executor has been tried?

Three models side by side on local gloo ranks, the classifier of ``autosync_transfer.demos``:
plain ``DistributedDataParallel`` (the default group), a ``DistributedModel`` on DDP that never
switched, and one on DDP after three executor candidates (the ``ddp``, ``all_reduce`` and
``partitioned_ar`` builders) ran four steps each and the set-aside DDP wrappers were released,
as after an autotuning round that kept DDP. Blocks of ``--block`` steps of each, in an order
shuffled per round; every block's median step (the slowest rank's); speed-ups paired by round
with 95 % intervals.

    python research/probes/ddp_after_tuning.py [--ranks 4] [--rounds 12] [--block 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time


def worker(rank: int, world: int, rounds: int, block: int) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from autosync_transfer.demos.task import TextClassifier, classifier_batch
    from autosync_transfer.domains.cluster import Cluster, Node
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.runtime.torch_ddp import TORCH_DDP
    from autosync_transfer.strategies.builders import build

    torch.set_num_threads(1)
    cluster = Cluster(name="probe", nodes=tuple(
        Node(name=f"n{i}", address=f"10.9.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(world)))
    models: dict = {}
    torch.manual_seed(0)
    models["plain DDP"] = DistributedDataParallel(TextClassifier(512))
    for name in ("never switched", "after candidates"):
        torch.manual_seed(0)
        models[name] = DistributedModel(TextClassifier(512), None, cluster, autotune=AutotuneConfig(
            candidates=[], planned_steps=100)).setup()
    opts = {n: torch.optim.SGD(m.parameters(), lr=0.1) for n, m in models.items()}
    gen = torch.Generator().manual_seed(rank)

    def step(n: str) -> None:
        x, y = classifier_batch(gen, 32)
        opts[n].zero_grad()
        F.cross_entropy(models[n](x), y).backward()
        opts[n].step()

    for n in models:
        for _ in range(5):
            step(n)
    tuned = models["after candidates"]
    domain = Domain(name="probe", model=tuned.graph, cluster=cluster)
    for builder in ("ddp", "all_reduce", "partitioned_ar"):
        tuned.switch(build(builder, domain))
        for _ in range(4):
            step("after candidates")
        tuned.switch(TORCH_DDP)
        for _ in range(4):
            step("after candidates")
    tuned.release_parked()
    out: dict[str, list[float]] = {n: [] for n in models}
    for r in range(rounds):
        order = list(models)
        random.Random(r).shuffle(order)
        for n in order:
            times = []
            for _ in range(block):
                dist.barrier()
                t0 = time.perf_counter()
                step(n)
                times.append(time.perf_counter() - t0)
            t = torch.tensor([statistics.median(times)])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            out[n].append(float(t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block", type=int, default=20)
    args = ap.parse_args()
    from autosync_transfer.measure import paired_speedup
    from autosync_transfer.runtime.launch import spawn_local

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    res = spawn_local(__import__("ddp_after_tuning").worker, args.ranks, args.rounds, args.block,
                      timeout_s=900)[0]
    print(f"# python research/probes/ddp_after_tuning.py --ranks {args.ranks} --rounds "
          f"{args.rounds} --block {args.block}")
    for n, v in res.items():
        print(f"{n:18s} median block step {1e3 * statistics.median(v):7.2f} ms")
    for a, b in (("never switched", "plain DDP"), ("after candidates", "plain DDP"),
                 ("after candidates", "never switched")):
        e = paired_speedup(res[a], res[b])
        print(f"{a} vs {b}: {e.format()}, {e.n} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
