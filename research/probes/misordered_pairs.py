"""Which resolved pairs the step-time simulator (profile + calibration, zero trials) misorders,
and what the strategies in them have in common. Simulation only: nothing is measured.

For each store with complete repeat runs (``benchmarks/repeatability.py``), the re-measured
strategies are predicted as ``benchmarks/stepsim_accuracy.py`` predicts them; the pairs the
repeat runs resolve are split into ordered and misordered; every misordered pair is printed with
both strategies' consensus and predicted times and their numbers (``strategy_numbers``: PS, fp16,
PowerSGD and local-replication byte shares, all-reduce groups, partitioned variables, pieces,
servers); then, over all re-measured strategies, the Spearman correlation of each number with
the log residual ln(consensus / predicted): a number the residual follows is what the model
misses.

    python research/probes/misordered_pairs.py --domains bert-12l-B,bert-3l-B,bert-B
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
NUMBERS = ("ps", "fp16", "psgd", "lr", "groups", "shards", "pieces", "servers")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domains", default="bert-12l-B,bert-3l-B,bert-B")
    ap.add_argument("--datasets", default=str(ROOT / "datasets/trials"))
    ap.add_argument("--profiles", default=str(ROOT / "datasets/profiles"))
    ap.add_argument("--calibrations", default=str(ROOT / "datasets/calibrations"))
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scipy.stats import spearmanr
    from stepsim_accuracy import (_load_json_models, host_settings, machine_type, physics_of,
                                  strategy_numbers)

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.repeat import load_repeatability
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    profiles = _load_json_models(Path(args.profiles), WorkloadProfile)
    calibrations = sorted(_load_json_models(Path(args.calibrations), ClusterCalibration),
                          key=lambda c: c.created_at, reverse=True)
    print(f"# python research/probes/misordered_pairs.py --domains {args.domains}")
    for name in args.domains.split(","):
        f = Path(args.datasets) / f"{name}.jsonl"
        df = load_trials(f)
        domain = find_domain(name, [f])
        prof, cal = physics_of(domain, profiles, calibrations)
        rep = load_repeatability(f, name, processor=machine_type(prof, cal))
        if rep is None or not rep.complete_runs():
            print(f"{name}: no complete repeat runs")
            continue
        runs = rep.complete_runs()
        table = strategy_table(df, normalize=False)
        held = set(rep.strategy_ids(runs))
        sub = table[table["strategy_id"].isin(held)]
        sim = StepSimulator(domain, prof, cal, StepSimConfig(**host_settings(f, df, domain)))
        strategies = list(sub["strategy"])
        pred = dict(zip(sub["strategy_id"], map(float, sim.simulate(strategies)["step_s"])))
        nums = {sid: strategy_numbers(s, domain) for sid, s in zip(sub["strategy_id"], strategies)}
        labels = rep.consensus(runs)
        resolved = {p: s for p, s in rep.resolved(runs).items() if p[0] in pred and p[1] in pred}
        wrong = [(a, b, s) for (a, b), s in resolved.items() if (pred[a] < pred[b]) != (s > 0)]
        print(f"\n## {name}: {len(pred)} re-measured strategies, {len(resolved)} resolved pairs, "
              f"{len(wrong)} misordered ({1 - len(wrong) / max(1, len(resolved)):.3f} right); "
              f"calibration {cal.created_at if cal else '-'}")
        print(f"{'faster (consensus)':22s} {'cons ms':>8s} {'pred ms':>8s}   "
              f"{'slower (consensus)':22s} {'cons ms':>8s} {'pred ms':>8s}   numbers (faster | slower)")
        for a, b, s in wrong:
            fast, slow = (a, b) if s > 0 else (b, a)

            def fmt(sid: str) -> str:
                n = nums[sid]
                return (f"ps {n[0]:.2f} fp16 {n[1]:.2f} psgd {n[2]:.2f} lr {n[3]:.2f} "
                        f"g {n[4]} sh {n[5]} pc {n[6]} sv {n[7]}")

            print(f"{fast:22s} {1e3 * labels[fast]:8.1f} {1e3 * pred[fast]:8.1f}   "
                  f"{slow:22s} {1e3 * labels[slow]:8.1f} {1e3 * pred[slow]:8.1f}   "
                  f"{fmt(fast)} | {fmt(slow)}")
        ids = sorted(pred)
        resid = np.array([math.log(labels[s] / pred[s]) for s in ids])
        print(f"log residual ln(consensus / predicted): median {np.median(resid):+.3f}, "
              f"spread (p90 - p10) {np.percentile(resid, 90) - np.percentile(resid, 10):.3f}")
        in_wrong = {x for a, b, _ in wrong for x in (a, b)}
        counts: dict[str, int] = {}
        for a, b, _ in wrong:
            for x in (a, b):
                counts[x] = counts.get(x, 0) + 1
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
        print("strategies in most misordered pairs: " + ", ".join(
            f"{sid} ({k}; residual {math.log(labels[sid] / pred[sid]):+.3f})" for sid, k in top))
        cols = np.array([nums[s] for s in ids], dtype=float)
        cor = []
        for k, label in enumerate(NUMBERS):
            if np.ptp(cols[:, k]) == 0:
                continue
            rho, p = spearmanr(cols[:, k], resid)
            cor.append(f"{label} {rho:+.2f} (p {p:.3f})")
        print("Spearman of the residual with: " + "; ".join(cor))
        print(f"({len(in_wrong)} distinct strategies in misordered pairs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
