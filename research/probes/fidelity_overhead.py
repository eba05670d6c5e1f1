"""What the gradient-fidelity probe costs a trial of a lossy strategy.

The probe runs ``fidelity_steps`` untimed steps after the timed ones, so it cannot change the
recorded iteration times; what it costs is trial wall time. This measures, on the local (or
emulated) launcher, the same lossy strategies with the probe off and on, interleaved (off, on,
on, off, ...), and prints per strategy: median iteration time with and without the probe (they
should agree within the noise), trial wall time with and without, and the wall time per probed
step relative to a timed step.

    python research/probes/fidelity_overhead.py [--domain ncf-A] [--launcher local] [--repeats 3]
        [--warmup 5] [--iters 20] [--fidelity-steps 3]
"""

from __future__ import annotations

import argparse
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="ncf-A")
    ap.add_argument("--launcher", default="local")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fidelity-steps", type=int, default=3)
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.launch import open_pool
    from autosync_transfer.runtime.trial import Protocol
    from autosync_transfer.strategies.builders import build

    d = get_domain(args.domain)
    strategies = {
        "all_reduce+fp16": build("all_reduce", d, compressor="fp16"),
        "all_reduce+powersgd1": build("all_reduce", d, compressor="powersgd", powersgd_rank=1),
    }
    off = Protocol(warmup=args.warmup, iters=args.iters, fidelity_steps=0)
    on = off.model_copy(update={"fidelity_steps": args.fidelity_steps})
    rows = []
    with open_pool(d, args.launcher, off) as pool:
        for name, s in strategies.items():
            got: dict[str, list] = {"off": [], "on": []}
            for i in range(args.repeats):
                for which in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    res = pool.run(s, on if which == "on" else off)
                    if not res.ok:
                        raise SystemExit(f"{name} ({which}): {res.error}")
                    got[which].append(res)
            med = {k: statistics.median(r.median_s for r in v) for k, v in got.items()}
            wall = {k: statistics.median(r.wall_s for r in v) for k, v in got.items()}
            fid = got["on"][-1].fidelity
            per_probe = (wall["on"] - wall["off"]) / args.fidelity_steps
            rows.append((name, med["off"], med["on"], wall["off"], wall["on"], per_probe,
                         per_probe / med["off"], fid.rel_error if fid else float("nan")))
    print(f"{args.domain} on {args.launcher}: {args.warmup} warm-up + {args.iters} timed "
          f"iterations, {args.fidelity_steps} probe steps, median of {args.repeats} trials each")
    print(f"{'strategy':24} {'iter off ms':>11} {'iter on ms':>10} {'wall off s':>10} "
          f"{'wall on s':>9} {'s/probe step':>12} {'x timed step':>12} {'grad err':>9}")
    for name, m0, m1, w0, w1, pp, ratio, err in rows:
        print(f"{name:24} {m0 * 1e3:11.1f} {m1 * 1e3:10.1f} {w0:10.2f} {w1:9.2f} {pp:12.3f} "
              f"{ratio:12.2f} {err:9.2%}")


if __name__ == "__main__":
    main()
