"""Trial throughput and trial-to-trial noise of the measurement protocol.

Measures one strategy (a builder, default ``ddp``) ``--repeats`` times in a row on a persistent
worker pool and prints every trial's median, the coefficient of variation of those medians
(goal <= 5%) and the throughput in trials per hour (wall time per trial, start-up excluded).

    python research/probes/trial_noise.py --domain bert-A --warmup 10 --iters 40 --repeats 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="bert-A")
    ap.add_argument("--builder", default="ddp")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.trial import Protocol, WorkerPool
    from autosync_transfer.strategies.builders import build

    domain = get_domain(args.domain)
    strategy = build(args.builder, domain)
    proto = Protocol(warmup=args.warmup, iters=args.iters)
    medians, walls = [], []
    with WorkerPool(domain, args.launcher, proto) as pool:
        t = time.monotonic()
        pool.run(strategy, Protocol(warmup=1, iters=1))  # start-up, not counted
        startup = time.monotonic() - t
        for k in range(args.repeats):
            res = pool.run(strategy)
            if not res.ok:
                print(f"trial {k}: {res.status}: {res.error}", file=sys.stderr)
                return 1
            medians.append(res.median_s)
            walls.append(res.wall_s)
            print(f"trial {k}: median {res.median_s * 1000:.1f} ms/iter, wall {res.wall_s:.1f} s", flush=True)
    cv = statistics.pstdev(medians) / statistics.mean(medians)
    print(f"\n{domain.name} {args.builder}, protocol {args.warmup}+{args.iters}, {args.launcher}: "
          f"cv of trial medians {cv:.2%} over {args.repeats} trials (goal <= 5%); "
          f"{3600 / statistics.mean(walls):.0f} trials/hour ({statistics.mean(walls):.1f} s per trial, "
          f"start-up {startup:.0f} s once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
