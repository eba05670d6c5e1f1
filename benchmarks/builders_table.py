"""Hand-optimized builders and torch DDP measured on one domain, beside the cost model.

Every builder's strategy and torch DDP run in one persistent process group on the emulated
cluster, interleaved over ``--rounds`` rounds; the table prints the median per-iteration time
(median over rounds), the analytical sync-time estimate, and whether the two orderings agree
(Kendall tau over the builders).

    python benchmarks/builders_table.py --domain bert-A --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys


def _kendall(a: list[float], b: list[float]) -> float:
    n, s = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            s += ((a[i] > a[j]) - (a[i] < a[j])) * ((b[i] > b[j]) - (b[i] < b[j]))
    return 2 * s / (n * (n - 1)) if n > 1 else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="bert-A")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.costmodel import estimate
    from autosync_transfer.runtime.trial import Protocol, WorkerPool
    from autosync_transfer.strategies.builders import BUILDERS, build

    domain = get_domain(args.domain)
    items = [(name, build(name, domain)) for name in BUILDERS] + [("torch DDP", None)]
    times: dict[str, list[float]] = {name: [] for name, _ in items}
    with WorkerPool(domain, args.launcher, Protocol(warmup=args.warmup, iters=args.iters)) as pool:
        for _ in range(args.rounds):
            for name, strat in items:
                res = pool.run(strat)
                times[name].append(res.median_s if res.ok else float("nan"))
                if not res.ok:
                    print(f"{name}: {res.status}: {res.error}", file=sys.stderr)
    print(f"\n{domain.name} ({args.launcher}, protocol {args.warmup}+{args.iters}, {args.rounds} rounds)")
    print(f"{'strategy':16s} {'measured ms/iter':>17s} {'estimated sync ms':>18s}")
    measured, estimated = [], []
    for name, strat in sorted(items, key=lambda it: statistics.median(times[it[0]])):
        m = statistics.median(times[name]) * 1000
        e = estimate(strat, domain).total_s * 1000 if strat is not None else float("nan")
        print(f"{name:16s} {m:17.1f} {e:18.1f}")
        if strat is not None:
            measured.append(m)
            estimated.append(e)
    print(f"Kendall tau (measured vs estimated, builders only): {_kendall(measured, estimated):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
