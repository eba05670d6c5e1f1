"""How much faster than the best hand-optimized builder did any search find, lossless and lossy?

A time-to-loss speed-up needs either a lossless strategy (its steps to the target loss are exact
synchronization's) or a lossy one whose convergence check passes. This reads every stored search
run of ``benchmarks/results/search-table/`` (AutoSync, TPE, random, the analytical model; nothing
is measured) and prints, per run, the fastest lossless and the fastest lossy trial as measured in
the search, over the run's own best builder (measured in the same run, as the search table
does). These are searched minima, with the winner's curse of a minimum over noisy trials: an
upper estimate of what a confirmation would find, not a figure to publish.

    python research/probes/search_headroom.py [--root benchmarks/results/search-table]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BUILDERS = ("ps", "ps_lb", "partitioned_ps", "all_reduce", "partitioned_ar", "parallax", "ddp")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="benchmarks/results/search-table")
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.accuracy import is_lossless
    from autosync_transfer.strategies.compact import decode, is_compact
    from autosync_transfer.strategies.types import Strategy

    print(f"# python research/probes/search_headroom.py --root {args.root}")
    print("# per stored search run: the fastest lossless and lossy trial over the run's best builder"
          " (searched minima, not confirmed)")
    print(f"{'run':48s} {'trials':>6s} {'builder':>16s} {'lossless':>9s} {'lossy':>7s}")
    widest: dict[str, float] = {}
    for path in sorted(Path(args.root).glob("*/*-seed*.jsonl")):
        if path.name.count(".") > 1:  # checks, knobs: stores beside the run's
            continue
        domain, refs, best, trials = None, {}, {}, 0
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if domain is None:
                domain = get_domain(rec["domain"])
            if rec.get("status") != "ok" or not rec.get("median_s") or "/confirm/" in rec["id"]:
                continue
            if "/reference/" in rec["id"]:
                refs[rec["id"].split("/reference/")[1]] = rec["median_s"]
                continue
            data = rec.get("strategy")
            if not data:
                continue
            trials += 1
            s = decode(data, domain.model) if is_compact(data) else Strategy.model_validate(data)
            kind = "lossless" if is_lossless(s) else "lossy"
            best[kind] = min(best.get(kind, float("inf")), rec["median_s"])
        builders = {k: v for k, v in refs.items() if k in BUILDERS}
        if not builders or domain is None:
            continue
        name = min(builders, key=builders.__getitem__)
        b = builders[name]
        cells = {k: (f"{b / best[k]:.2f}x" if k in best else "-") for k in ("lossless", "lossy")}
        if "lossless" in best:
            family = domain.model.config.get("family", domain.model.name)
            widest[family] = max(widest.get(family, 0.0), b / best["lossless"])
        run = f"{path.parent.name}/{path.stem}"
        print(f"{run:48s} {trials:6d} {name + f' {1000 * b:.0f} ms':>16s} "
              f"{cells['lossless']:>9s} {cells['lossy']:>7s}")
    print("# the widest lossless gain over the best builder, per model family: " + ", ".join(
        f"{k} {v:.2f}x" for k, v in sorted(widest.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
