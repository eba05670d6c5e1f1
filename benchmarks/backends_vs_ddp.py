"""DistributedModel's backends against torch DDP, per step, interleaved, with intervals.

Copies of one zoo workload (same initial weights, each with its own optimizer) train on the same
batches in the same process group: torch ``DistributedDataParallel`` itself (the baseline), and
``DistributedModel`` with the lossless ``all_reduce`` builder on a graph whose variables are all
dense — on DDP's reducer (``ddp_reducer``, the default for such a strategy), with
``strategy=None`` (``none``: torch DDP as its backend) and on the executor
(``executor``, ``use_ddp_reducer=False``). Blocks of ``--block`` steps run in randomized
interleaved rounds through :func:`autosync_transfer.measure.compare`; a step's time is the
slowest rank's (every rank records the same times, so all follow the same schedule). Printed:
ms per step and each backend's per-step speed-up over torch DDP with its 95 % interval, verdict
and rounds.

    python benchmarks/backends_vs_ddp.py --model bert --cluster A            # emulated cluster (root)
    python benchmarks/backends_vs_ddp.py --model bert --cluster B --launcher local
    python benchmarks/backends_vs_ddp.py --model bert --device cuda         # one GPU, NCCL
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

BACKENDS = ("torch_ddp", "ddp_reducer", "none", "executor")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert", help="a zoo model (bert, bert-3l, ncf, vgg16-s, ...) "
                    "or 'classifier' (the examples' text classifier: the short step of "
                    "benchmarks/autotune_lightning.py)")
    ap.add_argument("--cluster", default="A", help="catalog cluster (CPU runs)")
    ap.add_argument("--launcher", choices=["emulated", "local"], default="emulated")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: one process on one GPU (NCCL)")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--block", type=int, default=4, help="steps per block")
    ap.add_argument("--min-rounds", type=int, default=6)
    ap.add_argument("--max-rounds", type=int, default=16)
    return ap.parse_args()


class _Classifier:
    """The examples' text classifier (``autosync_transfer.demos``), 32 samples per worker, as
    the little of a workload this benchmark uses."""

    def build(self, device: str, *, seed: int = 0):  # noqa: ANN201
        import torch

        from autosync_transfer.demos import TextClassifier

        torch.manual_seed(seed)
        return TextClassifier().to(device)

    def batch(self, gen):  # noqa: ANN001, ANN201
        from autosync_transfer.demos import classifier_batch

        return classifier_batch(gen, 32)

    def loss(self, model, inputs, targets):  # noqa: ANN001, ANN201
        import torch.nn.functional as F

        return F.cross_entropy(model(inputs), targets)


def _bench(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.domains.workload import zoo_workload
    from autosync_transfer.measure import Design, compare
    from autosync_transfer.runtime.ddp import DistributedModel, cluster_from_process_group
    from autosync_transfer.runtime.launch import init_from_env
    from autosync_transfer.strategies.builders import build

    torch.set_num_threads(1)
    if args.device == "cuda":
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
    init_from_env()
    rank, dev = dist.get_rank(), torch.device(args.device)
    if dev.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    ctl = dist.new_group(backend="gloo")
    wl = _Classifier() if args.model == "classifier" else zoo_workload(args.model)
    base = wl.build("cpu", seed=0).to(dev)
    cluster = cluster_from_process_group()
    graph = ModelGraph.from_torch(base, name=args.model, sparse=())  # every variable dense
    strategy = build("all_reduce", Domain(name=f"{args.model}-pg", model=graph, cluster=cluster))
    makers = {
        "torch_ddp": lambda m: DistributedDataParallel(m),
        "ddp_reducer": lambda m: DistributedModel(m, strategy, cluster, graph=graph),
        "none": lambda m: DistributedModel(m, None, cluster, graph=graph),
        "executor": lambda m: DistributedModel(m, strategy, cluster, graph=graph,
                                               use_ddp_reducer=False),
    }
    names = [b for b in args.backends.split(",") if b]
    models = {n: makers[n](copy.deepcopy(base)) for n in names}
    opts = {n: torch.optim.SGD(m.parameters(), lr=1e-3) for n, m in models.items()}
    gen = torch.Generator().manual_seed(1 + rank)
    inputs, targets = wl.batch(gen)
    inputs = inputs.to(dev) if hasattr(inputs, "to") else inputs
    targets = targets.to(dev) if hasattr(targets, "to") else targets

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def block(name: str) -> list[float]:
        m, opt = models[name], opts[name]
        out = []
        for _ in range(args.block):
            sync()
            t0 = time.perf_counter()
            opt.zero_grad()
            wl.loss(m, inputs, targets).backward()
            opt.step()
            sync()
            out.append(time.perf_counter() - t0)
        t = torch.tensor(out, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)  # the slowest rank's step
        return t.tolist()

    for name in names:  # first touch (allocations, the reducers' first iteration) outside
        block(name)
    res = compare(names, block, Design(baseline="torch_ddp", min_rounds=args.min_rounds,
                                        max_rounds=args.max_rounds, race=False))
    if rank == 0:
        where = (torch.cuda.get_device_name() if dev.type == "cuda"
                 else f"cluster {args.cluster} ({args.launcher})")
        print(f"{args.model} on {where}: {dist.get_world_size()} workers, {dist.get_backend()}, "
              f"torch {torch.__version__}; blocks of {args.block} steps, {res.rounds} rounds "
              f"({res.warmup_rounds} dropped as warm-up)")
        for name, c in res.candidates.items():
            backend = getattr(models[name], "backend", "torch DDP")
            sp = "1 (baseline)" if c.speedup is None else \
                f"{c.speedup.format()} {c.verdict.value}, {c.rounds} rounds"
            print(f"  {name:<12} backend {backend:<12} {1000 * c.median_s:9.2f} ms/step   "
                  f"per-step speed-up vs torch DDP: {sp}")
    dist.destroy_process_group()


def main() -> int:
    args = _parse()
    if args.device == "cpu" and "RANK" not in os.environ:
        from autosync_transfer.demos import run_emulated
        from autosync_transfer.domains.catalog import get_cluster

        cluster = get_cluster(args.cluster)
        if args.launcher == "emulated":
            return run_emulated(cluster, [os.path.abspath(__file__), *sys.argv[1:]],
                                timeout_s=3600)
        from autosync_transfer.runtime.launch import free_port

        import subprocess

        port, procs = free_port(), []
        for rank in range(cluster.world_size):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(cluster.world_size),
                   "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo"}
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                           *sys.argv[1:]], env=env))
        return max(p.wait() for p in procs)
    _bench(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
