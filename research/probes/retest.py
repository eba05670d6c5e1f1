"""Test-retest of the measured dataset: strategies measured twice (a trial and its re-measurement).

For every domain with re-measurements (``collect --remeasure``; the new record ``supersedes`` the
old one), over the pairs where both ran ok: how many, the median ratio new / old (drift between
the two sessions: it scales every strategy alike and leaves their order alone), the pairwise
agreement of the two measurements (the share of strategy pairs both order alike: what a perfect
simulator trained on one measurement could score against the other), the median relative
difference of a pair divided by sqrt(2) (the per-measurement coefficient of variation, drift
included) and ``ceiling``: (1 + sqrt(2 agree - 1)) / 2, an upper bound on the pairwise accuracy of
a perfect simulator against one such measurement. (If a pair is ordered right by one measurement
with probability p, two independent measurements agree with probability p^2 + (1 - p)^2; that is
convex in p, so the mean of p is at most the inverse at the mean agreement.)

    python research/probes/retest.py [--stores datasets/trials]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default=None)
    args = ap.parse_args()

    import numpy as np

    from autosync_transfer.dataset.loader import load_trials

    df = load_trials(args.stores, status=None, superseded=True, disturbed=True)
    ok = df[df["status"] == "ok"].set_index("id")
    redo = ok[ok["supersedes"].notna() & ok["supersedes"].isin(ok.index)]
    if not len(redo):
        print("no re-measured trials", file=sys.stderr)
        return 1
    print(f"{'domain':12s} {'pairs':>5s} {'new/old':>8s} {'agree':>6s} {'pair cv':>8s} {'ceiling':>8s}")
    for d, sub in sorted(redo.groupby("domain")):
        new = sub["median_s"].to_numpy(dtype=float)
        old = ok.loc[sub["supersedes"], "median_s"].to_numpy(dtype=float)
        i, j = np.triu_indices(len(new), 1)
        agree = float(np.mean((new[i] < new[j]) == (old[i] < old[j]))) if len(new) > 1 else math.nan
        ratio = statistics.median((new / old).tolist())
        cv = statistics.median((np.abs(new - old) / ((new + old) / 2) / math.sqrt(2)).tolist())
        ceiling = (1 + math.sqrt(max(2 * agree - 1, 0.0))) / 2 if agree == agree else math.nan
        print(f"{d:12s} {len(new):5d} {ratio:7.3f}x {agree:6.3f} {cv:8.1%} {ceiling:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
