"""The step-time simulator (profile + calibration, zero trials) under research variants, scored on
every re-measured store of every machine type: pairwise accuracy on the pairs the repeat runs
resolve, and the top-1 regret of its pick. Simulation only: nothing is measured.

Each ``--sim-option NAME=VALUE`` (a ``StepSimConfig`` or ``StepSimVariant`` field) is one more
column; so is each ``--physics NAME=VALUE``, which overrides one attribute of the simulator's
per-domain numbers (``rankers.stepsim._Physics``, e.g. ``comm_scale``, the per-piece PS
slowdown) after they are built: a diagnostic of what a number would have to be, not a model.
The stores of one machine type are simulated with that machine type's profiles and
calibrations (``--machine TYPE=PROFILES:CALIBRATIONS``; by default the shipped AMD EPYC folders
and the Intel Xeon ones of ``benchmarks/results/machines/intel-xeon``), judged only by runs of
that type.

    python research/probes/variant_scan.py --sim-option ps_sliced_while_computing=true \\
        --physics comm_scale=1.0 --physics comm_scale=3.0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINES = {
    "AMD EPYC": (ROOT / "datasets/profiles", ROOT / "datasets/calibrations"),
    "Intel(R) Xeon(R) Processor": (ROOT / "benchmarks/results/machines/intel-xeon/profiles",
                                   ROOT / "benchmarks/results/machines/intel-xeon/calibrations"),
}


def _physics_option(pair: str, ap: argparse.ArgumentParser) -> tuple[str, float]:
    name, _, value = pair.partition("=")
    try:
        return name, float(value)
    except ValueError:
        ap.error(f"--physics: {pair!r}: expected NAME=NUMBER")
        raise  # unreachable: ap.error exits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim-option", action="append", default=[],
                    help="NAME=VALUE of StepSimConfig or StepSimVariant (one column each)")
    ap.add_argument("--physics", action="append", default=[],
                    help="NAME=NUMBER: an attribute of the simulator's physics (one column each)")
    ap.add_argument("--machine", action="append", default=[],
                    help="TYPE=PROFILES:CALIBRATIONS (replaces the default machine types)")
    ap.add_argument("--domains", default=None, help="only these stores (comma-separated)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _lab
    from repeatability import DOMAINS
    from stepsim_accuracy import _load_json_models, host_settings, physics_of

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.repeat import load_repeatability, ranking_figures
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimulator

    machines = dict(MACHINES)
    if args.machine:
        machines = {}
        for spec in args.machine:
            kind, _, folders = spec.partition("=")
            prof_dir, _, cal_dir = folders.partition(":")
            if not kind or not prof_dir or not cal_dir:
                ap.error(f"--machine: {spec!r}: expected TYPE=PROFILES:CALIBRATIONS")
            machines[kind] = (Path(prof_dir), Path(cal_dir))
    columns: list[tuple[str, dict, tuple[str, float] | None]] = [("v", {}, None)]
    columns += [(o, _lab.sim_options([o], ap), None) for o in args.sim_option]
    columns += [(p, {}, _physics_option(p, ap)) for p in args.physics]
    chosen = [d for d in DOMAINS if not args.domains or d[0] in args.domains.split(",")]
    print(f"# python research/probes/variant_scan.py {' '.join(sys.argv[1:])}")
    print("# resolved-pair accuracy / top-1 regret; columns: "
          + " | ".join("shipped" if n == "v" else n for n, _, _ in columns))
    for kind, (prof_dir, cal_dir) in machines.items():
        profiles = _load_json_models(prof_dir, WorkloadProfile)
        cals = sorted(_load_json_models(cal_dir, ClusterCalibration), key=lambda c: c.created_at,
                      reverse=True)
        for name, store, _ in chosen:
            rep = load_repeatability(store, name, processor=kind)
            if rep is None or not rep.complete_runs():
                continue
            df = load_trials(store)
            domain = find_domain(name, [store])
            prof, cal = physics_of(domain, profiles, cals)
            table = strategy_table(df, normalize=False)
            sub = table[table["strategy_id"].isin(set(rep.strategy_ids(rep.complete_runs())))]
            host = host_settings(store, df, domain)
            cells = []
            for _, options, phys in columns:
                config, variant = _lab._split(options, host)  # noqa: SLF001
                sim = StepSimulator(domain, prof, cal, config, variant=variant)
                if phys is not None:
                    if not hasattr(sim.physics, phys[0]):
                        ap.error(f"--physics: the simulator's physics has no {phys[0]!r}")
                    setattr(sim.physics, phys[0], phys[1])
                pred = dict(zip(sub["strategy_id"],
                                map(float, sim.simulate(list(sub["strategy"]))["step_s"])))
                fig = ranking_figures(pred, rep)
                cells.append(f"{fig['pairwise_resolved']:.3f} / {100 * fig['top1_regret']:4.1f} %")
            print(f"{kind.split()[0]:9s} {name:16s} {fig['resolved_pairs']:4d}  " + " | ".join(cells),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
