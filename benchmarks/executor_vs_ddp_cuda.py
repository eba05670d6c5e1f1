"""DistributedModel's backends against torch DDP on one CUDA GPU (world size 1, NCCL).

Four copies of one transformer (same initial weights, each with its own AdamW) train on the same
batches: torch ``DistributedDataParallel`` itself, and ``DistributedModel`` with the lossless
``all_reduce`` builder on DDP's reducer (the default), with ``strategy=None`` (torch DDP as its
backend) and with the same strategy on the executor (``use_ddp_reducer=False``). They run in
randomized interleaved rounds through :func:`autosync_transfer.measure.compare` (blocks of
``--block`` steps, each step synchronized with the device); printed: ms per step and each
backend's speed-up over torch DDP with its 95 % interval and the rounds.

    python benchmarks/executor_vs_ddp_cuda.py [--layers 6] [--width 1024] [--batch 16]
"""

from __future__ import annotations

import argparse
import copy
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.measure import Design, compare
    from autosync_transfer.runtime.ddp import DistributedModel, cluster_from_process_group
    from autosync_transfer.strategies.builders import build

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dev = torch.device(args.device)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(args.width, 16, 4 * args.width, batch_first=True)
    base = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, args.layers),
                               torch.nn.Linear(args.width, args.width)).to(dev)
    cluster = cluster_from_process_group()
    graph = ModelGraph.from_torch(base, name="encoder")
    strategy = build("all_reduce", Domain(name="encoder-pg", model=graph, cluster=cluster))

    models = {
        "torch_ddp": DistributedDataParallel(copy.deepcopy(base)),
        "ours_ddp_reducer": DistributedModel(copy.deepcopy(base), strategy, cluster, graph=graph),
        "ours_strategy_none": DistributedModel(copy.deepcopy(base), None, cluster, graph=graph),
        "ours_executor": DistributedModel(copy.deepcopy(base), strategy, cluster, graph=graph,
                                          use_ddp_reducer=False),
    }
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(args.batch, args.seq, args.width, generator=g).to(dev)

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
            m(x).float().pow(2).mean().backward()
            opt.step()
            sync()
            out.append(time.perf_counter() - t0)
        return out

    for name in models:  # first touch (allocations, cuBLAS handles) outside the comparison
        block(name)
    res = compare(list(models), block, Design(baseline="torch_ddp", min_rounds=6,
                                               max_rounds=args.max_rounds, race=False))
    print(f"device {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, torch "
          f"{torch.__version__}, backend {dist.get_backend()}; {args.layers} layers x "
          f"{args.width}, batch {args.batch}x{args.seq}; blocks of {args.block} steps; "
          f"{res.rounds} rounds ({res.warmup_rounds} dropped as warm-up)")
    for name, c in res.candidates.items():
        backend = getattr(models[name], "backend", "torch DDP")
        sp = "1 (baseline)" if c.speedup is None else \
            f"{c.speedup.speedup:.3f}x [{c.speedup.low:.3f}, {c.speedup.high:.3f}] {c.verdict.value}"
        print(f"{name:<20} backend {backend:<12} {1000 * c.median_s:8.2f} ms/step  vs torch "
              f"DDP: {sp}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
