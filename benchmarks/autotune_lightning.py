"""Autotuning inside a Lightning job vs Lightning's DDP and hand-optimized builders, fairly.

Every configuration trains the same LightningModule (``autosync_transfer.demos``: the examples'
text classifier with an embedding) for the same number of steps on the same data, in the same worker processes,
``--rounds`` times, in an order shuffled per round (randomized interleaved trials):

- ``AutoSync autotune``: ``AutoSyncStrategy(autotune=...)``: the job starts on torch DDP and
  compares the simulator's top lossless candidates with it in interleaved blocks, within a
  budget of 5 % of the planned steps; a candidate is locked in only when it is faster with
  confidence;
- ``Lightning DDP``: ``DDPStrategy`` (torch DDP, gloo), the baseline;
- the ``--builders`` (default ``all_reduce`` and ``ddp``), each run as a fixed strategy;
- with ``--untuned``, ``AutoSync on DDP (untuned)``: the same strategy with a tuning budget of
  one step (it proposes and tries nothing: torch DDP inside ``DistributedModel`` from the first
  step), to tell what tuning leaves behind from what the wrapper costs;
- with ``--control``, Lightning DDP once more as a configuration of its own: an A/A comparison
  whose interval is what the machine's noise between fits allows any row to show.

Printed: per configuration the median wall time of ``fit`` (from its start: proposal, tuning and
switches included), median step (after the tenth, and of the second half: what the job runs at
once tuned), final loss (the last 20 steps, averaged over workers), and the
speed-up over Lightning DDP paired by round with its 95 % interval and the number of rounds;
then what each autotuned fit locked in and what tuning cost, the time rank 0 spent in
Python's garbage collector per fit, and where each configuration's fit time differs from
Lightning DDP's (set-up, the first tenth of the steps, the other steps, between steps).
Each fit's foreign CPU share (``runtime.cpuwatch``: CPU time other processes took while it ran,
as a share of the machine; the tree is ``AUTOSYNC_CPUWATCH_ROOT``'s when a supervisor names one)
and steal share (CPU time the hypervisor gave to others, ``/proc/stat``) are stored with it in
``--json-out``.

    python benchmarks/autotune_lightning.py [--cluster B | --cluster-file F.yml]
        [--launcher emulated|local] [--steps 300] [--rounds 5] [--builders all_reduce,ddp]
        [--hidden 512] [--target-rounds 4] [--max-cost-share 0.01|none] [--untuned] [--control]

``--launcher local`` is a quick check on this host (Lightning starts ``cluster`` workers);
``emulated`` (the default as root) shapes every node's NIC to the cluster's bandwidth.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

from autosync_transfer.demos import HIDDEN, TOKENS, run_emulated


class _GcClock:
    """Time this process spends in the garbage collector (``gc.callbacks``), and its full
    (generation 2) collections, since the last :meth:`reset`."""

    def __init__(self) -> None:
        import gc

        self.seconds, self.full, self._t0 = 0.0, 0, None
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.seconds += time.perf_counter() - self._t0
            self.full += int(info.get("generation") == 2)
            self._t0 = None

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0


def _steal_ticks() -> tuple[int, int] | None:
    """(steal, total) clock ticks of the whole machine from ``/proc/stat`` (None without it):
    steal is time the hypervisor gave this machine's CPUs to someone else."""
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (v[7], sum(v)) if len(v) == 8 else None


def _steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    if start is None or end is None or end[1] <= start[1]:
        return None
    return round((end[0] - start[0]) / (end[1] - start[1]), 4)


LOSSLESS_BUILDERS = ("ps", "ps_lb", "partitioned_ps", "all_reduce", "partitioned_ar", "parallax",
                     "ddp")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="B", help="catalog cluster (default B)")
    ap.add_argument("--launcher", choices=["local", "emulated"],
                    default="emulated" if os.geteuid() == 0 else "local")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=HIDDEN,
                    help=f"the classifier's hidden width (default {HIDDEN}: an 18 ms step on B; "
                         "2048: bandwidth-bound)")
    ap.add_argument("--steps-per-candidate", type=int, default=4)
    ap.add_argument("--target-rounds", type=int, default=None,
                    help="AutotuneConfig.target_rounds (default: its own, 4): fewer candidates, "
                         "more rounds each")
    ap.add_argument("--max-cost-share", default=None,
                    help="AutotuneConfig.max_cost_share (default: its own, 0.005); 'none': no bound "
                         "on a tuning round's cost (the rows measured before the bound)")
    ap.add_argument("--simulator", default=None, help="registry URI or name (default: the step-time simulator)")
    ap.add_argument("--candidates", type=int, default=500, help="sampled strategies to rank")
    ap.add_argument("--builders", default="all_reduce,ddp")
    ap.add_argument("--trials", default=None, help="trial store for the autotuning steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved repetitions")
    ap.add_argument("--cluster-file", default=None, help="an AutoDist resource spec instead")
    ap.add_argument("--untuned", action="store_true",
                    help="also AutoSync on torch DDP with no tuning (a budget of one step)")
    ap.add_argument("--control", action="store_true",
                    help="also run Lightning DDP a second time as its own configuration (an A/A "
                         "control: its interval is the machine's noise between fits)")
    ap.add_argument("--version", default="unrecorded",
                    help="the package version the --json-out line records (benchmarks/"
                         "autotune_table.py passes it)")
    ap.add_argument("--protocol", type=int, default=None,
                    help="the table's measuring protocol the --json-out line records "
                         "(benchmarks/autotune_table.py passes it)")
    ap.add_argument("--json-out", default=None,
                    help="also append the run's fits and tuning records to this JSON-lines file "
                         "(one line per run; benchmarks/autotune_table.py pools them)")
    return ap.parse_args()


def _builder_picker(name: str):  # noqa: ANN202 - picker(graph, cluster) -> Strategy
    def pick(graph, cluster):  # noqa: ANN001, ANN202
        from autosync_transfer.domains.domain import Domain
        from autosync_transfer.strategies.builders import build

        return build(name, Domain(name=f"{graph.name}-{cluster.name}", model=graph,
                                  cluster=cluster))

    return pick


def _tuning(args: argparse.Namespace):  # noqa: ANN202 - an AutotuneConfig
    """What ``examples/train_lightning.py --autotune`` configures, with ``--target-rounds``."""
    from autosync_transfer import AutotuneConfig
    from autosync_transfer.search import TrialRecorder

    extra: dict = {} if args.target_rounds is None else {"target_rounds": args.target_rounds}
    if args.max_cost_share is not None:
        extra["max_cost_share"] = (None if args.max_cost_share.lower() == "none"
                                   else float(args.max_cost_share))
    return AutotuneConfig(steps_per_candidate=args.steps_per_candidate,
                          on_trial=TrialRecorder(args.trials) if args.trials else None, **extra)


def _bench(args: argparse.Namespace) -> int:
    import random


    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from autosync_transfer.demos import fit_classifier, lightning_layout, quiet_lightning
    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.measure import paired_speedup
    from autosync_transfer.runtime.cpuwatch import CpuWatch
    from autosync_transfer.search.lightning import AutoSyncStrategy

    quiet_lightning()
    torch.set_num_threads(1)
    from autosync_transfer.domains.cluster import Cluster

    cluster = Cluster.from_file(args.cluster_file) if args.cluster_file else \
        get_cluster(args.cluster)
    devices, num_nodes = lightning_layout(cluster, args.launcher)
    kw = {"batch_size": args.batch_size, "seq_len": TOKENS}
    builders = [b for b in args.builders.split(",") if b]

    fit = functools.partial(fit_classifier, devices=devices, num_nodes=num_nodes,
                            steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                            hidden=args.hidden, seed=args.seed)

    def make(name: str):  # noqa: ANN202 - a fresh Lightning strategy per fit
        if name == "AutoSync autotune":
            return AutoSyncStrategy(None, cluster, simulator=args.simulator,
                                    candidates=args.candidates, autotune=_tuning(args),
                                    **kw)
        if name == "AutoSync on DDP (untuned)":
            from autosync_transfer import AutotuneConfig

            return AutoSyncStrategy(None, cluster, autotune=AutotuneConfig(max_tuning_steps=1),
                                    **kw)
        if name.startswith("Lightning DDP"):
            return DDPStrategy(process_group_backend="gloo")
        return AutoSyncStrategy(_builder_picker(name.removeprefix("builder ")), cluster, **kw)

    names = ["AutoSync autotune", "Lightning DDP", *(f"builder {b}" for b in builders),
             *(["AutoSync on DDP (untuned)"] if args.untuned else []),
             *(["Lightning DDP (A/A control)"] if args.control else [])]
    fits: dict[str, list[dict]] = {n: [] for n in names}
    tuners = []
    # the first fit of the run starts the worker processes and the rendezvous (seconds): one
    # Lightning DDP fit outside the comparison pays that for all
    fit(make("Lightning DDP"))
    gc_clock = _GcClock()
    for r in range(args.rounds):  # every rank shuffles alike (seeded): the same order
        order = list(names)
        random.Random(f"{args.seed}/{r}").shuffle(order)
        for name in order:
            strategy = make(name)
            gc_clock.reset()
            steal0 = _steal_ticks()
            with CpuWatch() as watch:
                result = fit(strategy)
            fits[name].append({**result, "gc_s": gc_clock.seconds, "gc_full": gc_clock.full,
                               "foreign_cpu": None if watch.foreign is None
                               else round(watch.foreign, 4),
                               "steal_cpu": _steal_share(steal0, _steal_ticks())})
            if name == "AutoSync autotune":
                tuners.append(strategy.autotuner)
    if not fits["Lightning DDP"][0]["global_zero"]:
        return 0
    print(f"cluster {cluster.name}: {cluster.world_size} workers on {cluster.num_nodes} nodes "
          f"({args.launcher}); classifier of hidden width {args.hidden}; {args.steps} steps x "
          f"{args.batch_size} samples per worker; "
          f"{args.rounds} rounds, configurations in a shuffled order each round; wall time "
          f"from the start of fit (proposal, tuning and switches included)")
    for i, tuner in enumerate(tuners):
        rec = tuner.record if tuner is not None else None
        if rec is not None:
            print(f"  autotune round {i}: locked in {rec['locked']} after {rec['steps']} steps, "
                  f"{rec['switches']} switches, proposal {rec['propose_s']:.2f} s, cost "
                  f"{rec['cost_s']:.2f} s{'; ' + rec['reason'] if rec['reason'] else ''}"
                  + ("" if not rec.get("dropped") or "every candidate left" in rec["reason"]
                     else "; left after a slow block: " + ", ".join(
                         f"{n} {r:.2f}x" for n, r in rec["dropped"].items()))
                  + ("" if not rec.get("screened") or "every candidate left" in rec["reason"]
                     else "; screened out after the first round: " + ", ".join(
                         f"{n} {r:.2f}x" for n, r in rec["screened"].items())))
    if args.json_out:
        _append_run(args, cluster, fits, tuners)
    ddp = [f["fit_s"] for f in fits["Lightning DDP"]]
    print(f"{'configuration':28s}{'median fit':>12s}{'median step':>13s}{'2nd half':>10s}"
          f"{'final loss':>12s}   speed-up vs Lightning DDP [95 % interval]")
    for name in names:
        wall = [f["fit_s"] for f in fits[name]]
        step = statistics.median(f["median_step_ms"] for f in fits[name])
        late = statistics.median(f["late_step_ms"] for f in fits[name])
        loss = statistics.median(f["final_loss"] for f in fits[name])
        if name == "Lightning DDP":
            ratio = "1 (baseline)"
        else:
            est = paired_speedup(wall, ddp)
            ratio = f"{est.format()}, {est.n} rounds"
        print(f"{name:28s}{statistics.median(wall):>10.2f} s{step:>10.1f} ms{late:>7.1f} ms"
              f"{loss:>12.4f}   {ratio}")
    for n in names:
        print(f"  fit wall times of {n} by round: "
              + ", ".join(f"{f['fit_s']:.2f} s" for f in fits[n]))
        print(f"  second half's median step of {n} by round: "
              + ", ".join(f"{f['late_step_ms']:.1f} ms" for f in fits[n]))
    print("  rank 0's garbage collection per fit (median seconds, full collections): "
          + "; ".join(f"{n} {statistics.median(f['gc_s'] for f in fits[n]):.3f} s, "
                      f"{statistics.median(f['gc_full'] for f in fits[n]):g}" for n in names))
    from scipy import stats

    print("  where each configuration's fit time differs from Lightning DDP's (seconds, mean of "
          "the paired differences by round [95 % t-interval]): setup before the first step and "
          "after the last; the first tenth of the steps (where tuning runs); the other steps; "
          "between steps")
    for n in names:
        if n == "Lightning DDP" or args.rounds < 2:
            continue
        parts = []
        for phase in ("setup", "early", "later", "between"):
            d = [f["phases_s"][phase] - g["phases_s"][phase]
                 for f, g in zip(fits[n], fits["Lightning DDP"])]
            ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
            parts.append(f"{phase} {statistics.fmean(d):+.3f} s [{ci.low:+.3f}, {ci.high:+.3f}]")
        print(f"  {n}: " + "; ".join(parts))
    late_ddp = [f["late_step_ms"] for f in fits["Lightning DDP"]]
    for n in names:
        if n != "Lightning DDP":
            est = paired_speedup([f["late_step_ms"] for f in fits[n]], late_ddp)
            print(f"  second half's median step of {n} vs Lightning DDP: {est.format()}, "
                  f"{est.n} rounds")
    return 0


def _append_run(args: argparse.Namespace, cluster, fits: dict[str, list[dict]],  # noqa: ANN001
                tuners: list) -> None:
    """One JSON line: what ran, each configuration's fits by round, each autotuned fit's
    record. Written whole in one append, so a killed run leaves no partial line."""
    import datetime
    import json

    keep = ("fit_s", "median_step_ms", "late_step_ms", "final_loss", "phases_s", "foreign_cpu",
            "steal_cpu")
    line = {
        "version": args.version,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "argv": sys.argv[1:], "cluster": cluster.name, "steps": args.steps,
        "hidden": args.hidden, "rounds": args.rounds, "seed": args.seed,
        **({"protocol": args.protocol} if args.protocol is not None else {}),
        "fits": {n: [{k: f[k] for k in keep} for f in fs] for n, fs in fits.items()},
        "tuning": [None if t is None or t.record is None else
                   {k: t.record.get(k) for k in ("locked", "steps", "switches", "propose_s",
                                                  "propose_limit_s", "candidates", "cost_s",
                                                  "reason", "dropped", "screened")}
                   for t in tuners],
    }
    with open(args.json_out, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def _compile_package() -> None:
    """Compile the package's bytecode, as installing it does (pip compiles at install time):
    a checkout run with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module it
    imports in each worker's first fit, and only the autotuned configuration imports the
    simulator's modules (Lightning's are compiled in site-packages)."""
    import compileall

    import autosync_transfer

    compileall.compile_dir(os.path.dirname(autosync_transfer.__file__), quiet=1)


def main() -> int:
    args = _parse()
    if "LOCAL_RANK" not in os.environ:
        _compile_package()
    if args.launcher == "emulated" and "LOCAL_RANK" not in os.environ:
        from autosync_transfer.domains.catalog import get_cluster

        from autosync_transfer.domains.cluster import Cluster

        cluster = Cluster.from_file(args.cluster_file) if args.cluster_file else \
            get_cluster(args.cluster)
        return run_emulated(cluster, [os.path.abspath(__file__), *sys.argv[1:]],
                            timeout_s=3600)
    return _bench(args)


if __name__ == "__main__":
    sys.exit(main())
