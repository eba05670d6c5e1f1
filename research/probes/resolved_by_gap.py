"""Which resolved pairs does the step-time simulator misorder: its accuracy on the pairs the
repeat runs resolve (``benchmarks/repeatability.py``), by how far apart the two strategies are.

For every store with complete repeat runs: the simulator alone (profile and calibration, as
``benchmarks/stepsim_accuracy.py`` builds it, zero target trials) predicts each re-measured
strategy's step; each resolved pair (the repeat runs order it with 95 % confidence) falls in a
bin of its measured gap (the slower strategy's consensus time over the faster's) and counts as
right when the simulator orders it the same way. Also printed: the simulator's median absolute
error on the store (its MAPE), the scale of gap below which a simulator that errs that much
cannot order pairs reliably.

    python research/probes/resolved_by_gap.py [--datasets datasets/trials]
        [--heldout benchmarks/results/heldout]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BINS = ((1.0, 1.03), (1.03, 1.06), (1.06, 1.10), (1.10, 1.20), (1.20, float("inf")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="datasets/trials")
    ap.add_argument("--heldout", default="benchmarks/results/heldout")
    ap.add_argument("--profiles", default="datasets/profiles")
    ap.add_argument("--calibrations", default="datasets/calibrations")
    args = ap.parse_args()

    import numpy as np

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.repeat import load_repeatability
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    def load(folder: str, cls: type) -> list:
        return [cls.model_validate_json(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]

    profiles = load(args.profiles, WorkloadProfile)
    calibrations = sorted(load(args.calibrations, ClusterCalibration),
                          key=lambda c: c.created_at, reverse=True)
    files = sorted(Path(args.datasets).glob("*.jsonl"))
    if args.heldout and Path(args.heldout).is_dir():
        files += sorted(Path(args.heldout).glob("*.jsonl"))
    head = "  ".join(f"{lo:.2f}-{hi:.2f}" if hi < 9 else f">={lo:.2f}" for lo, hi in BINS)
    print(f"# python {' '.join(sys.argv)}")
    print("# right / resolved pairs of the step-time simulator alone, by the measured gap of the "
          "pair (slower / faster consensus time)")
    print(f"{'domain':16s} {'mape':>6s}  {head}   all resolved")
    for f in files:
        df = load_trials(f)
        if not len(df):
            continue
        name = str(df["domain"].iloc[0])
        rep = load_repeatability(f, name)
        if rep is None or not rep.complete_runs():
            continue
        domain = find_domain(name, [f])
        raw = strategy_table(df, normalize=False)
        world = sum(n.workers for n in domain.cluster.nodes)
        cpus = [json.loads(m).get("cpus") for m in df["machine"] if m]
        cpus = [c for c in cpus if c]
        host = {"host_processes": world, **({"host_cores": int(np.median(cpus))} if cpus else {})}
        prof = next((p for p in profiles if p.fingerprint == domain.model.fingerprint), None)
        cal = next((c for c in calibrations if c.fingerprint == domain.cluster.fingerprint), None)
        pred_s = StepSimulator(domain, prof, cal, StepSimConfig(**host)).simulate(
            list(raw["strategy"]))["step_s"]
        y = raw["runtime_s"].to_numpy(dtype=float)
        mape = float(np.median(np.abs(pred_s - y) / y))
        pred = dict(zip(raw["strategy_id"], (float(v) for v in pred_s)))
        runs = rep.complete_runs()
        labels = rep.consensus(runs)
        counts = [[0, 0] for _ in BINS]
        for (a, b), sign in rep.resolved(runs).items():
            if a not in pred or b not in pred:
                continue
            gap = max(labels[a], labels[b]) / min(labels[a], labels[b])
            right = (pred[a] < pred[b]) == (sign > 0)
            for i, (lo, hi) in enumerate(BINS):
                if lo <= gap < hi:
                    counts[i][0] += int(right)
                    counts[i][1] += 1
        cells = "  ".join(f"{r:>4d}/{n:<4d}" for r, n in counts)
        right, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
        print(f"{name:16s} {mape:6.3f}  {cells}   {right}/{total} = {right / max(total, 1):.3f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
