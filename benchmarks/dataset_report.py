"""The measured dataset's acceptance figures, per domain.

Counts (ok / failed / timeout), failure rate, noise of the drift reference (coefficient of
variation of its re-measurements: all of them, and those taken with the foreign-CPU check), how
and within a session: ``cv sess``, the pooled deviation of each re-measurement from its
session's mean, a session being a run of measurements of the domain without a pause of more than
15 minutes (every collection or re-measurement pass starts one; across sessions the level of the
machine drifts, which the two other columns include), how many ok trials still lack that check (``unchk``: measured before it existed and not yet
measured again with ``collect --remeasure``), spread of the sampled strategies (worst / best), and the
room a search has: speed-up of the best sampled strategy over the best hand-optimized builder and
over torch DDP, all from the same store.

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
    df["checked"] = df["machine"].map(_checked)
    print(f"{'domain':12s} {'trials':>6s} {'ok':>5s} {'fail':>5s} {'unchk':>5s} {'ref cv':>7s} "
          f"{'cv chk':>7s} {'cv sess':>7s} {'sampled':>7s} {'spread':>7s} {'best smp':>9s} {'best bld':>9s} "
          f"{'ddp':>8s} {'vs bld':>7s} {'vs ddp':>7s}")
    totals = [0, 0, 0, 0]
    cvs, cvs_checked, cvs_session = [], [], []
    import pandas as pd

    df["t"] = pd.to_datetime(df["timestamp"])
    for d, sub in sorted(df.groupby("domain")):
        trials = sub[~sub["reference"]]
        ok = trials[trials["status"] == "ok"]
        # every measurement of the reference strategy: drift references and its own trial
        ref = sub[(sub["status"] == "ok") & (sub["reference"] | (sub["strategy_kind"] == "ddp"))]
        cv = _cv(ref["median_s"].tolist())
        cv_checked = _cv(ref[ref["checked"]]["median_s"].tolist())
        if cv == cv:
            cvs.append(cv)
        if cv_checked == cv_checked:
            cvs_checked.append(cv_checked)
        timed = sub.sort_values("t")
        session = (timed["t"].diff().dt.total_seconds().fillna(0) > _SESSION_GAP_S).cumsum()
        cv_session = _pooled_cv(ref["median_s"], session.loc[ref.index])
        if cv_session == cv_session:
            cvs_session.append(cv_session)
        unchecked = int((~ok["checked"]).sum())
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
        totals[3] += unchecked
        print(f"{d:12s} {len(trials):6d} {len(ok):5d} {len(trials) - len(ok):5d} {unchecked:5d} "
              f"{cv:7.1%} {cv_checked:7.1%} {cv_session:7.1%} {len(sampled):7d} {spread:6.2f}x "
              f"{best_s * 1000:7.0f}ms {best_b * 1000:7.0f}ms {ddp_s * 1000:6.0f}ms "
              f"{best_b / best_s:6.2f}x {ddp_s / best_s:6.2f}x")
    n, ok, bad, unchecked = totals
    nan = float("nan")
    print(f"\ntotal {n} trials, {ok} ok, {bad} failed/timeout ({bad / max(n, 1):.1%}), {unchecked} "
          f"without the foreign-CPU check; median reference cv "
          f"{statistics.median(cvs) if cvs else nan:.1%} (checked measurements only: "
          f"{statistics.median(cvs_checked) if cvs_checked else nan:.1%}; within a session: "
          f"{statistics.median(cvs_session) if cvs_session else nan:.1%}; goal <= 5%)")
    return 0


def _checked(machine: object) -> bool:
    """Whether a record's machine facts carry the foreign-CPU check."""
    if isinstance(machine, str):
        return '"foreign_cpu"' in machine
    return isinstance(machine, dict) and "foreign_cpu" in machine


_SESSION_GAP_S = 15 * 60


def _pooled_cv(values, sessions) -> float:  # noqa: ANN001
    """sqrt(sum over sessions of sum (x / session mean - 1)^2 / (n - sessions)), over the
    sessions holding at least two values."""
    sq, dof = 0.0, 0
    for _, x in values.groupby(sessions):
        if len(x) >= 2:
            sq += float(((x / x.mean() - 1) ** 2).sum())
            dof += len(x) - 1
    return (sq / dof) ** 0.5 if dof else float("nan")


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


if __name__ == "__main__":
    sys.exit(main())
