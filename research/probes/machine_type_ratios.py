"""One store's re-measured strategies on two machine types: where a step-time simulator miss is
one machine type's. Simulation only: nothing is measured.

For each strategy of the repeat runs of both types (``benchmarks/repeatability.py``): the
consensus step time on each type, the prediction of each type's physics (``--physics-a`` /
``--physics-b``: folders holding ``profiles/`` and ``calibrations/``, as the written folders of
the lookup), and each prediction's ratio to its consensus over the median ratio. A strategy whose
ratio is off on one type only is a cost that type's runs have and its physics does not.

    python research/probes/machine_type_ratios.py --domain bert-3l-heldout \\
        --store-a benchmarks/results/heldout/bert-3l-heldout.jsonl --type-a "AMD EPYC" \\
        --physics-a datasets \\
        --store-b benchmarks/results/machines/intel-xeon/heldout/bert-3l-heldout.jsonl \\
        --type-b "Intel(R) Xeon(R) Processor" --physics-b benchmarks/results/machines/intel-xeon \\
        --repeats benchmarks/results/heldout
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys


def side(domain: str, store: str, processor: str, physics: str, repeats: list[str]
         ) -> tuple[dict[str, float], dict[str, float]]:
    """(consensus, prediction) per re-measured strategy of one machine type."""
    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.repeat import load_repeatability
    from autosync_transfer.rankers.physics import clear_physics_cache
    from autosync_transfer.rankers.simulator import Simulator

    os.environ["AUTOSYNC_PROFILES_DIR"] = os.path.join(physics, "profiles")
    os.environ["AUTOSYNC_CALIBRATIONS_DIR"] = os.path.join(physics, "calibrations")
    clear_physics_cache()
    rep = load_repeatability(store, domain, processor=processor, repeats=repeats)
    if rep is None or not rep.complete_runs():
        raise SystemExit(f"no complete {processor} repeat runs of {domain} for {store}")
    cons = rep.consensus(rep.complete_runs())
    df = load_trials([store], status="all")
    tab = strategy_table(df[df["domain"] == domain])
    tab = tab[tab["strategy_id"].isin(cons)]
    dom = find_domain(domain, [store])
    pred = Simulator("stepsim").score(list(tab["strategy"]), dom)
    return cons, dict(zip(tab["strategy_id"], map(float, pred)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for k in ("domain", "store-a", "type-a", "physics-a", "store-b", "type-b", "physics-b"):
        ap.add_argument(f"--{k}", required=True)
    ap.add_argument("--repeats", default="", help="comma-separated folders of repeat files")
    args = ap.parse_args()
    repeats = [x for x in args.repeats.split(",") if x]
    ca, pa = side(args.domain, args.store_a, args.type_a, args.physics_a, repeats)
    cb, pb = side(args.domain, args.store_b, args.type_b, args.physics_b, repeats)
    ids = sorted(set(ca) & set(cb) & set(pa) & set(pb), key=lambda s: ca[s])
    if not ids:
        print("no strategy re-measured on both types", file=sys.stderr)
        return 1
    ma = statistics.median(pa[s] / ca[s] for s in ids)
    mb = statistics.median(pb[s] / cb[s] for s in ids)
    mab = statistics.median(ca[s] / cb[s] for s in ids)
    print(f"{args.domain}: {len(ids)} strategies; median predicted / measured {ma:.3f} "
          f"({args.type_a}), {mb:.3f} ({args.type_b}); measured a / b {mab:.3f}")
    print(f"{'strategy':32s} {'meas a':>7s} {'meas b':>7s} {'a/b':>6s} {'res a':>6s} {'res b':>6s}")
    for s in ids:
        print(f"{s:32s} {ca[s]:7.3f} {cb[s]:7.3f} {ca[s] / cb[s] / mab:6.3f} "
              f"{pa[s] / ca[s] / ma:6.3f} {pb[s] / cb[s] / mb:6.3f}")
    print("a/b: measured on a over measured on b, over its median; res: predicted / measured "
          "over the median (below 1: slower than predicted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
