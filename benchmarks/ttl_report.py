"""Time to target loss of one stored search run: a zoo domain or a user's workload.

``benchmarks/search_table.py --report --check`` does this for the runs of its own table; this
script takes any search store (e.g. one a ``search`` of your own model wrote, or
``benchmarks/results/byo-flow/search.jsonl``), reads the run as measured (nothing is timed
again), runs the convergence checks of its lossy final candidates that are not stored yet (in
rounds, as the search does: :func:`autosync_transfer.search.timetoloss.check_final`; checks
are stored beside the trial store and never trained twice) and prints the step-time and
time-to-loss figures of the run: the best strategy that counts (lossless, or lossy with a
passed check) x its steps-to-target ratio, over the best hand-optimized builder and torch DDP
measured in the same run, and over the confirmation's medians when the run was confirmed.

    python benchmarks/ttl_report.py --store STORE [--run NAME]
        (--domain NAME | --model SPEC --cluster-file FILE) [--check-steps 150]
        [--final-checks 3] [--final-rounds 3] [--max-step-ratio 1.10] [--first N] [--no-train]

Checks are read from the check store beside the trial store and from ``convergence.jsonl`` in its
folder (where ``search_table.py`` keeps a domain's checks); new ones go beside the trial store.

Convergence runs train (local gloo processes, one per worker of the cluster); they are not
timed measurements, so a busy machine makes them slower, not wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="the search run's trial store (.jsonl)")
    ap.add_argument("--run", default=None, help="the run's name (default: the store's only run)")
    ap.add_argument("--domain", default=None, help="a catalog domain (e.g. bert-3l-C)")
    ap.add_argument("--model", default=None, help="a workload spec (FILE.py[:NAME] or zoo name)")
    ap.add_argument("--cluster-file", default=None, help="the cluster YAML of --model")
    ap.add_argument("--check-steps", type=int, default=150)
    ap.add_argument("--final-checks", type=int, default=3)
    ap.add_argument("--final-rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None,
                    help="seeds the convergence runs (default: the run's seed, as its search did)")
    ap.add_argument("--max-step-ratio", type=float, default=1.10,
                    help="a lossy strategy passes its check within this many times exact "
                         "synchronization's steps to the target loss (charged to its time to loss)")
    ap.add_argument("--first", type=int, default=None,
                    help="only the run's first N trials (what a budget of N would have found)")
    ap.add_argument("--no-train", action="store_true",
                    help="read stored checks only; print which candidates are unchecked")
    args = ap.parse_args()

    from autosync_transfer.dataset.checks import checks_path
    from autosync_transfer.runtime.accuracy import ConvergenceTolerance
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.search.objective import get_objective
    from autosync_transfer.search.resume import load_run, record_prefix, run_meta
    from autosync_transfer.search.summary import summarize
    from autosync_transfer.search.timetoloss import check_final, time_to_loss_figures
    from autosync_transfer.dataset.store import TrialStore

    store = Path(args.store)
    workload = None
    if args.domain:
        from autosync_transfer.domains.catalog import get_domain

        domain = get_domain(args.domain)
    elif args.model and args.cluster_file:
        from autosync_transfer.domains.workload import workload_domain

        domain, workload = workload_domain(args.model, args.cluster_file)
    else:
        ap.error("give --domain, or --model and --cluster-file")
    meta = TrialStore(store).read_meta()
    # a store written before it could hold several runs names its one run "search"
    runs = sorted(meta.get("searches") or ([meta["search"]] if meta.get("search") else []))
    name = args.run or (runs[0] if len(runs) == 1 else None)
    if name is None:
        ap.error(f"the store holds runs {runs}: pick one with --run")
    meta = run_meta(store, name)
    config = meta.get("config") or {}
    budget = int(config.get("budget", 10**9))
    seed = args.seed if args.seed is not None else int(config.get("seed", 0))
    progress, strategies = load_run(domain, store, name, budget)
    if args.first is not None:
        progress.trials = progress.trials[: args.first]
    summary = summarize(progress.trials, progress.references, int(config.get("per_round", 10)),
                        progress.confirmations)
    prefix = record_prefix(domain.name, name)
    checks, errors, unchecked = check_final(
        domain, progress, strategies, prefix, get_objective("time-to-loss"), checks_path(store),
        limit=args.final_checks, rounds=args.final_rounds, steps=args.check_steps,
        seed=seed, model=FidelityModel(), graph=domain.model, workload=workload,
        train=not args.no_train, stored=[store.parent / "convergence.jsonl"],
        tolerance=ConvergenceTolerance(max_step_ratio=args.max_step_ratio),
        on_message=lambda m: print(f"  [{domain.name} {name}] {m}", file=sys.stderr, flush=True))
    ttl = time_to_loss_figures(progress, strategies, prefix, checks, summary, errors)

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v else "-"

    print(f"# python benchmarks/ttl_report.py {' '.join(sys.argv[1:])}")
    print(f"domain {domain.name}, run {name}: {summary['trials']} trials, objective of the run "
          f"{config.get('objective', 'step-time (stored before objectives)')}, launcher "
          f"{meta.get('launcher', '?')}")
    print(f"step time: best {1e3 * (summary['best_s'] or 0):.1f} ms, best builder "
          f"{summary['best_builder']} {1e3 * (summary['best_builder_s'] or 0):.1f} ms, torch DDP "
          f"{1e3 * (summary['ddp_s'] or 0):.1f} ms: {x(summary['speedup_vs_builder'])} vs the "
          f"builder (confirmed {x(summary['confirmed_speedup_vs_builder'])}), "
          f"{x(summary['speedup_vs_ddp'])} vs DDP; trials to 1.2x: {summary['trials_to_1.2x']}")
    best = ttl["ttl_best"]
    print(f"time to target loss: best that counts {best} (ratio "
          f"{ttl['ttl_best_ratio'] if ttl['ttl_best_ratio'] is not None else '-'}), "
          f"{x(ttl['ttl_speedup_vs_builder'])} vs the builder (confirmed "
          f"{x(ttl['confirmed_ttl_speedup_vs_builder'])}, lower bound "
          f"{x(ttl.get('confirmed_ttl_speedup_vs_builder_low'))}), "
          f"{x(ttl['ttl_speedup_vs_ddp'])} vs DDP")
    conf = summary.get("confirmed") or {}
    if conf:
        from autosync_transfer.search.summary import format_speedup

        print(f"confirmed per step: {conf.get('best')} vs the builder "
              f"{format_speedup(conf, 'speedup_vs_builder')}")
    for sid, c in ttl["convergence"].items():
        verdict = "passed" if c["passed"] else "failed"
        seeds = c.get("seeds") or ()
        bounds = (f" (upper bounds over seeds {', '.join(map(str, seeds))}: ratio "
                  f"{c['step_ratio_high']:.2f}, gap {100 * c['final_gap_high']:+.1f}%)"
                  if seeds else " (one seed)")
        print(f"  check {sid}: {verdict}, steps ratio {c['step_ratio']:.2f}, final gap "
              f"{100 * c['final_gap']:+.1f}% over {c['steps']} steps{bounds}")
    for sid, why in ttl["excluded"].items():
        if sid not in ttl["convergence"]:
            print(f"  excluded {sid}: {why}")
    for s in unchecked:
        print(f"  unchecked {s.id} (run without --no-train)")
    print(f"convergence runs: {ttl['convergence_minutes']:.1f} min of training")
    print(json.dumps({k: v for k, v in ttl.items() if k != "convergence"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
