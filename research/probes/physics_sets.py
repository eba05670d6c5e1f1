"""How much the step-time simulator's ranking figure moves with the hour its physics was measured:
the simulator (profile + calibration, zero trials) scored on the same re-measured stores with
every physics set given, each set a folder with ``profiles/`` and ``calibrations/`` measured at
one time on one machine type. Simulation only: nothing is measured.

Each ``--sim-option NAME=VALUE`` (a ``StepSimConfig`` or ``StepSimVariant`` field) scores every
set once more with it, so that a research variant is judged over the spread of the physics, not
on one set. Printed: each set's calibration figures (PS piece, per-collective cost, ring CPU, slowdown of four
processes), then per store and per choice of runs (the first two, then all complete runs of the
machine type) the resolved-pair accuracy and top-1 regret with each set (against the
consensus-fastest, then against the confidently-best), their range and mean. A
set without a profile of the store's model is left out for that store.

    python research/probes/physics_sets.py --domains bert-12l-B,bert-3l-B,bert-B \\
        benchmarks/results/machines/intel-xeon benchmarks/results/machines/intel-xeon/later/*

``--runs r5 --runs r1+r2+r3+r4+r5`` judges by those runs instead (each choice its own row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="+", help="folders, each with profiles/ and calibrations/")
    ap.add_argument("--domains", default="bert-12l-B,bert-3l-B,bert-B")
    ap.add_argument("--sim-option", action="append", default=[],
                    help="NAME=VALUE of StepSimConfig or StepSimVariant: every set is scored "
                         "once more with each (repeatable)")
    ap.add_argument("--runs", action="append", default=[],
                    help="runs that judge, joined by + (e.g. r5 or r4+r5; repeatable); default: "
                         "the first two complete runs, then all of them")
    ap.add_argument("--processor", default="Intel(R) Xeon(R) Processor",
                    help="the machine type of the sets and of the runs that judge them")
    args = ap.parse_args()
    for folder in args.sets:
        if not (Path(folder) / "calibrations").is_dir() or not (Path(folder) / "profiles").is_dir():
            ap.error(f"sets: {folder!r} has no profiles/ and calibrations/ folders")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _lab
    from repeatability import DOMAINS
    from stepsim_accuracy import _load_json_models, host_settings, physics_of

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.repeat import load_repeatability, ranking_figures
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimulator

    variants = [("shipped", {})] + [(o, _lab.sim_options([o], ap)) for o in args.sim_option]
    stores = {name: store for name, store, _ in DOMAINS}
    unknown = [d for d in args.domains.split(",") if d not in stores]
    if unknown:
        ap.error(f"--domains: {unknown[0]!r} has no repeat runs (one of {', '.join(stores)})")
    sets = {}
    for folder in args.sets:
        cals = [c for c in _load_json_models(Path(folder) / "calibrations", ClusterCalibration)
                if c.processor == args.processor]
        profs = _load_json_models(Path(folder) / "profiles", WorkloadProfile)
        sets[Path(folder).name] = (profs, sorted(cals, key=lambda c: c.created_at, reverse=True))
    print(f"# python research/probes/physics_sets.py {' '.join(sys.argv[1:])}")
    shown = set()
    for name in args.domains.split(","):
        store = stores[name]
        df = load_trials(store)
        domain = find_domain(name, [store])
        rep = load_repeatability(store, name, processor=args.processor)
        if rep is None or not rep.complete_runs():
            print(f"{name}: no complete runs on {args.processor}")
            continue
        table = strategy_table(df, normalize=False)
        sub = table[table["strategy_id"].isin(set(rep.strategy_ids(rep.complete_runs())))]
        host = host_settings(store, df, domain)
        choices = [rep.complete_runs()[:2]]
        if len(rep.complete_runs()) > 2:
            choices.append(rep.complete_runs())
        if args.runs:
            choices = []
            for spec in args.runs:
                wanted = spec.split("+")
                gone = [r for r in wanted if r not in rep.complete_runs()]
                if gone:
                    print(f"# {name}: no complete run {gone[0]!r}; --runs {spec} left out")
                elif wanted not in choices:
                    choices.append(wanted)
            if not choices:
                continue
            sub = table[table["strategy_id"].isin(
                set(rep.strategy_ids(sorted({r for c in choices for r in c}))))]
        rows: dict[str, list[tuple[str, dict]]] = {}
        for tag, (profs, cals) in sets.items():
            profs = [p for p in profs if p.fingerprint == domain.model.fingerprint]
            cals = [c for c in cals if c.fingerprint == domain.cluster.fingerprint]
            if not profs or not cals:
                continue
            prof, cal = physics_of(domain, profs, cals)
            if (tag, cal.cluster) not in shown:
                shown.add((tag, cal.cluster))
                print(f"# set {tag}: calibration of {cal.cluster} {cal.created_at}, PS piece "
                      f"{1e6 * (cal.ps_piece_s or 0):.0f} us, collective "
                      f"{1e6 * (cal.ar_collective_s or 0):.0f} us, ring CPU "
                      f"{1e9 * (cal.ar_cpu_s_per_element or 0):.2f} ns per element, slowdown "
                      f"of 4 processes {cal.slowdown(4):.2f}; profile {prof.created_at}")
            for label, options in variants:
                config, variant = _lab._split(options, host)  # noqa: SLF001
                sim = StepSimulator(domain, prof, cal, config, variant=variant)
                pred = dict(zip(sub["strategy_id"],
                                map(float, sim.simulate(list(sub["strategy"]))["step_s"])))
                for runs in choices:
                    rows.setdefault(("+".join(runs), label), []).append(
                        (tag, ranking_figures(pred, rep, runs)))
        for (runs, label), figs in rows.items():
            accs = [f["pairwise_resolved"] for _, f in figs]
            head = f"{name:16s} by {runs:9s}" + (f" {label}" if len(variants) > 1 else "")
            print(f"{head} {figs[0][1]['resolved_pairs']:4d} resolved: "
                  + "  ".join(f"{t} {f['pairwise_resolved']:.3f} / {100 * f['top1_regret']:.1f}"
                              f" % / {100 * f['top1_regret_resolved']:.1f} %" for t, f in figs)
                  + f"  | range {min(accs):.3f}-{max(accs):.3f}, mean {statistics.mean(accs):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
