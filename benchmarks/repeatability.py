"""Repeatability of the stores' labels: a stratified subset of each store measured again in
interleaved rounds (order shuffled per round), appended beside the store and resumable.

    python benchmarks/repeatability.py --run r1            # measure (or continue) run r1
    python benchmarks/repeatability.py --run r4 --domains bert-3l-heldout --strategies all
                                                           # a wider run: every strategy
    python benchmarks/repeatability.py --run p1 --physics  # with the physics of the run
    python benchmarks/repeatability.py --report            # the table, from what is stored

``--strategies N|all`` sets how many strategies a *new* run measures (default: the domain's
number below); a run that exists keeps its plan. Runs of different sizes pool: the reports
judge each pair on the rounds that measured both (``Repeatability.resolved``).

``--physics`` measures, before a new run's first round, the physics of its domain on this
machine (a calibration of the cluster, a profile of the model: ``<store>.physics/<run>/``, see
``dataset.repeat.measure_run_physics``), so that the step-time simulator can be judged with
physics of the machine and hour of the labels (``benchmarks/stepsim_accuracy.py``). A run that
was started without it is not given physics later.

Each domain's repeat file is ``<store>.repeat.ndjson`` (see
``autosync_transfer.dataset.repeat``); a run started again continues where it stopped. The
report gives, per domain: strategies x rounds, resolved pairs (95 % paired-t interval of the
per-round ratio excludes 1), the agreement of the first two runs on the pairs both resolve (and of every
pair of runs, with the lowest, where there are more),
their noise ceiling on all pairs, the machine time spent, and how the store's own labels order
the resolved pairs: raw (``norm=False``) and drift-normalized by the store's interleaved
references (the labels the rankers train on, ``dataset.loader.strategy_table``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autosync_transfer.dataset.repeat import Repeatability

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

ROOT = Path(__file__).resolve().parents[1]
#: (domain, store, strategies): the shipped domains the issue names plus cheap ones, the
#: held-out cluster of examples/clusters/heldout.yml, and the targets of the vgg16-s settings
DOMAINS = [
    ("ncf-B", ROOT / "datasets/trials/ncf-B.jsonl", 30),
    ("ncf-heldout", ROOT / "benchmarks/results/heldout/ncf-heldout.jsonl", 30),
    ("ncf-A", ROOT / "datasets/trials/ncf-A.jsonl", 30),
    ("bert-3l-B", ROOT / "datasets/trials/bert-3l-B.jsonl", 24),
    ("bert-B", ROOT / "datasets/trials/bert-B.jsonl", 20),
    ("bert-12l-B", ROOT / "datasets/trials/bert-12l-B.jsonl", 20),
    ("ncf-C", ROOT / "datasets/trials/ncf-C.jsonl", 30),
    ("bert-3l-heldout", ROOT / "benchmarks/results/heldout/bert-3l-heldout.jsonl", 20),
    ("vgg16-s-B", ROOT / "datasets/trials/vgg16-s-B.jsonl", 20),
    ("vgg16-s-heldout", ROOT / "benchmarks/results/heldout/vgg16-s-heldout.jsonl", 20),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="measure (or continue) this run on every domain")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--domains", help="comma-separated subset of the domains")
    ap.add_argument("--strategies", default=None,
                    help="N or 'all': how many strategies a new run measures (default: the "
                         "domain's own number)")
    ap.add_argument("--physics", action="store_true",
                    help="measure the domain's physics (calibration, profile) before a new run's "
                         "first round, beside the store")
    ap.add_argument("--report", action="store_true", help="print the table of what is stored")
    args = ap.parse_args()
    size = _run_size(args.strategies)
    if size is not None and not args.run:
        print("error: --strategies sets the size of a new run: give --run too", file=sys.stderr)
        return 2
    if args.physics and not args.run:
        print("error: --physics measures the physics of a run: give --run too", file=sys.stderr)
        return 2

    from autosync_transfer.dataset.loader import load_trials, strategy_table
    from autosync_transfer.dataset.repeat import (load_repeatability, measure_run,
                                                  measure_run_physics, ranking_figures,
                                                  repeat_processors, run_physics_dir, run_plan)

    chosen = [d for d in DOMAINS if not args.domains or d[0] in args.domains.split(",")]
    if args.run:
        from autosync_transfer.errors import ConfigError

        # every domain's size is checked before the first measurement
        try:
            sizes = [_planned_size(store, name, args.run, n if size is None else size,
                                   explicit=size is not None) for name, store, n in chosen]
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.physics:
            late = [name for name, store, _ in chosen if run_plan(store, name, args.run)
                    and not run_physics_dir(store, args.run).is_dir()]
            if late:
                print(f"error: --physics: run {args.run!r} of {late[0]} was started without "
                      f"physics; physics measured now would not be of its hour (start a new run)",
                      file=sys.stderr)
                return 2
        for (name, store, _), n in zip(chosen, sizes):
            try:
                if args.physics:
                    measure_run_physics(store, name, args.run,
                                        progress=lambda m: print(m, flush=True))
                measure_run(store, name, run=args.run, n=n, rounds=args.rounds,
                            progress=lambda m: print(m, flush=True))
            except ConfigError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
    if args.report or not args.run:
        print(f"{'domain':<15} {'processor':<27} {'runs':>4} {'n x rounds':>10} {'resolved':>12} "
              f"{'agree (both)':>14} {'ceiling':>8} {'machine':>8} {'store raw':>9} {'store norm':>10}")
        for name, store, _ in chosen:
            processors = repeat_processors(store, name)
            if not processors:
                print(f"{name:<15} (no repeat runs)")
            for proc in processors:
                rep = load_repeatability(store, name, processor=proc)
                if rep is not None:
                    _report_row(name, str(proc or "-"), store, rep)
    return 0


def _run_size(text: str | None) -> int | None:
    """``--strategies``: a positive count, ``all`` (every strategy of the store) or None."""
    if text is None:
        return None
    if text == "all":
        return sys.maxsize
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        print(f"error: --strategies must be a positive count or 'all', got {text!r}",
              file=sys.stderr)
        raise SystemExit(2)
    return n


def _planned_size(store: Path, name: str, run: str, n: int, explicit: bool) -> int:
    """The number of strategies run ``run`` measures: its plan's where it exists (a run
    continues, it is not widened: an ``explicit`` other number is refused), else ``n``."""
    from autosync_transfer.dataset.loader import load_trials, strategy_table
    from autosync_transfer.dataset.repeat import run_plan

    plan = run_plan(store, name, run)
    if plan is None:
        return n
    have = len(plan["strategy_ids"])
    if explicit and min(n, len(strategy_table(load_trials(store, domain=name)))) != have:
        shown = "all" if n == sys.maxsize else n
        print(f"error: --strategies {shown}: run {run!r} of {name} exists with {have} "
              f"strategies; a run keeps its plan (continue it without --strategies, or start "
              f"a new run to measure more)", file=sys.stderr)
        raise SystemExit(2)
    return have


def _report_row(name: str, proc: str, store: Path, rep: "Repeatability") -> None:
    """One line of the report: the runs of ``rep`` (one machine type)."""
    from autosync_transfer.dataset.loader import load_trials, strategy_table
    from autosync_transfer.dataset.repeat import MIN_ROUNDS, ranking_figures

    s = rep.summary()
    agree = (f"{s['agreement']:.3f} ({s['both_resolved']})"
             if s.get("agreement") is not None else "-")
    ceiling = f"{s['noise_ceiling']:.3f}" if s.get("noise_ceiling") is not None else "-"
    resolved = (f"{s['resolved_pairs']}/{s['pairs']}" if "pairs" in s else "-")
    labels = {}
    if s["complete_runs"]:
        df = load_trials(store, domain=name)
        for norm in (False, True):
            t = strategy_table(df, normalize=norm)
            fig = ranking_figures(dict(zip(t["strategy_id"], t["runtime_s"])), rep)
            labels[norm] = f"{fig['pairwise_resolved']:.3f}"
    print(f"{name:<15} {proc[:27]:<27} {len(s['complete_runs']):>4} "
          f"{s['strategies']:>4} x {s['rounds']:<3} {resolved:>12} {agree:>14} "
          f"{ceiling:>8} {s['machine_s'] / 60:>6.1f} m {labels.get(False, '-'):>9} "
          f"{labels.get(True, '-'):>10}")
    sizes = s.get("run_strategies") or {}
    if len(set(sizes.values())) > 1:
        print(f"{'':<15} runs of different sizes ({', '.join(f'{r} {n}' for r, n in sizes.items())}"
              f"): n is every strategy, resolved counts the pairs measured in {MIN_ROUNDS} rounds "
              f"together")
    pairs = [p for p in s.get("agreements", []) if p["agreement"] is not None]
    if len(pairs) > 1:  # the row shows the first two runs; every pair of runs here
        print(f"{'':<15} every pair of runs: " + ", ".join(
            f"{p['runs'][0]}/{p['runs'][1]} {p['agreement']:.3f} ({p['both_resolved']})"
            for p in pairs) + f"; lowest {min(p['agreement'] for p in pairs):.3f}")


if __name__ == "__main__":
    sys.exit(main())
