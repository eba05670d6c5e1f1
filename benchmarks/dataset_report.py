"""The measured dataset's acceptance figures, per domain.

Counts (ok / failed / timeout), failure rate, noise of the drift reference (coefficient of
variation of its re-measurements), spread of the sampled strategies (worst / best), and the room
a search has: speed-up of the best sampled strategy over the best hand-optimized builder and over
torch DDP, all from the same store.

    python benchmarks/dataset_report.py [--stores datasets/trials]
"""

from __future__ import annotations

import argparse
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default=None)
    args = ap.parse_args()

    from autosync_transfer.dataset.loader import load_trials
    from autosync_transfer.strategies.builders import BUILDERS

    df = load_trials(args.stores, status=None)
    print(f"{'domain':12s} {'trials':>6s} {'ok':>5s} {'fail':>5s} {'ref cv':>7s} {'sampled':>7s} "
          f"{'spread':>7s} {'best smp':>9s} {'best bld':>9s} {'ddp':>8s} {'vs bld':>7s} {'vs ddp':>7s}")
    totals = [0, 0, 0]
    cvs = []
    for d, sub in sorted(df.groupby("domain")):
        trials = sub[~sub["reference"]]
        ok = trials[trials["status"] == "ok"]
        refs = sub[sub["reference"] & (sub["status"] == "ok")]["median_s"].tolist()
        ref_b = ok[ok["strategy_kind"] == "ddp"]["median_s"].tolist()
        ref_all = refs + ref_b
        cv = statistics.pstdev(ref_all) / statistics.mean(ref_all) if len(ref_all) > 1 else float("nan")
        if cv == cv:
            cvs.append(cv)
        sampled = ok[ok["strategy_kind"] == "sampled"]["median_s"]
        builders = ok[ok["strategy_kind"].isin(list(BUILDERS))]["median_s"]
        ddp = ok[ok["strategy_kind"] == "torch_ddp"]["median_s"]
        best_s = float(sampled.min()) if len(sampled) else float("nan")
        best_b = float(builders.min()) if len(builders) else float("nan")
        ddp_s = float(ddp.min()) if len(ddp) else float("nan")
        spread = float(sampled.max() / sampled.min()) if len(sampled) else float("nan")
        totals[0] += len(trials)
        totals[1] += len(ok)
        totals[2] += len(trials) - len(ok)
        print(f"{d:12s} {len(trials):6d} {len(ok):5d} {len(trials) - len(ok):5d} {cv:7.1%} "
              f"{len(sampled):7d} {spread:6.2f}x {best_s * 1000:7.0f}ms {best_b * 1000:7.0f}ms "
              f"{ddp_s * 1000:6.0f}ms {best_b / best_s:6.2f}x {ddp_s / best_s:6.2f}x")
    n, ok, bad = totals
    print(f"\ntotal {n} trials, {ok} ok, {bad} failed/timeout ({bad / max(n, 1):.1%}); median reference "
          f"cv {statistics.median(cvs) if cvs else float('nan'):.1%} (goal <= 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
