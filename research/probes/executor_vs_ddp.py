"""Our executor running the DDP-equivalent strategy vs torch DistributedDataParallel.

Both run on the same emulated cluster, in the same persistent process group, interleaved round
by round (ours, DDP, ours, DDP, ...), so machine noise hits both alike. The strategy is the
``ddp`` builder (all-reduce, 25 MB buckets filled in reverse variable order, first bucket 1 MB)
on a graph where every variable is dense, exactly what DDP synchronizes. Prints per-round medians
and the ratio ours / DDP (goal <= 1.05).

    python research/probes/executor_vs_ddp.py [--model bert] [--cluster A] [--rounds 5] [--launcher emulated]
"""

from __future__ import annotations

import argparse
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--cluster", default="A")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.importers import graph_from_torch
    from autosync_transfer.domains.zoo import build_module, get_spec
    from autosync_transfer.runtime.trial import Protocol, WorkerPool
    from autosync_transfer.strategies.builders import build

    spec = get_spec(args.model)
    graph = graph_from_torch(build_module(args.model, "meta"), args.model, batch_size=spec.batch_size,
                             seq_len=spec.seq_len, sparse=(), description="all variables dense")
    domain = Domain(name=f"{args.model}-dense-{args.cluster}", model=graph,
                    cluster=get_cluster(args.cluster))
    ours_strategy = build("ddp", domain)
    proto = Protocol(warmup=args.warmup, iters=args.iters)
    ours, theirs = [], []
    with WorkerPool(domain, args.launcher, proto) as pool:
        for r in range(args.rounds):
            for label, strat, sink in (("ours", ours_strategy, ours), ("ddp", None, theirs)):
                res = pool.run(strat)
                if not res.ok:
                    print(f"round {r} {label}: {res.status}: {res.error}", file=sys.stderr)
                    return 1
                sink.append(res.median_s)
                print(f"round {r} {label:4s} median {res.median_s * 1000:8.1f} ms/iter", flush=True)
    ratios = [a / b for a, b in zip(ours, theirs)]
    print(f"\n{domain.name} ({args.launcher}, {args.rounds} rounds x {args.iters} iters): "
          f"ours {statistics.median(ours) * 1000:.1f} ms, DDP {statistics.median(theirs) * 1000:.1f} ms")
    print(f"ratio ours/DDP: median {statistics.median(ratios):.3f} "
          f"(per round {', '.join(f'{x:.3f}' for x in ratios)}); goal <= 1.05")
    return 0


if __name__ == "__main__":
    sys.exit(main())
