"""False-positive and detection rates of the comparison module on synthetic timings.

Each run compares two candidates with :func:`autosync_transfer.measure.compare` on a
:class:`~autosync_transfer.testing.timings.NoisyMachine`: the level drifts by 27 % over the
session (with a slow wander on top), 5 % of steps are heavy-tailed outliers (1 + Pareto(1.5)
x 0.1), the first 30 steps start 2.5x slower, every block's first step pays a 1.5x switch. The
rates are printed with 95 % Wilson intervals for the Student-t interval the module uses and for
a BCa bootstrap (which undercovers at these round counts).

    python benchmarks/comparison_rates.py --runs 1000
"""

from __future__ import annotations

import argparse

from scipy.stats import binomtest

from autosync_transfer.measure import Design, Verdict, compare
from autosync_transfer.testing.timings import NoisyMachine


def rates(diff: float, runs: int, method: str) -> tuple[int, int, float]:
    declared = found = rounds = 0
    for seed in range(runs):
        m = NoisyMachine({"a": 0.02, "b": 0.02 / diff}, seed=seed, session_steps=200,
                         warmup_steps=30)
        c = compare(["a", "b"], m.time_block, Design(baseline="a", seed=seed, method=method))
        v = c["b"].verdict
        declared += v in (Verdict.FASTER, Verdict.SLOWER)
        found += v is Verdict.FASTER
        rounds += c.rounds
    return declared, found, rounds / runs


def _ci(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return f"{k / n:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args()
    d = Design(baseline="a")
    print(f"design: rounds {d.min_rounds}..{d.max_rounds}, looks at {d.looks}, each at "
          f"{d.look_confidence:.4f}; margin {d.margin}; {args.runs} seeded runs per row")
    print(f"{'interval':<10} {'truth':<14} {'difference declared':<26} {'faster found':<26} "
          f"mean rounds")
    for method in ("t", "bootstrap"):
        for diff, label in ((1.0, "identical"), (1.05, "5 % faster")):
            declared, found, mean_rounds = rates(diff, args.runs, method)
            print(f"{method:<10} {label:<14} {_ci(declared, args.runs):<26} "
                  f"{_ci(found, args.runs):<26} {mean_rounds:.1f}")


if __name__ == "__main__":
    main()
