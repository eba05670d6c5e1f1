"""Lightning training with AutoSyncStrategy, optionally side by side with Lightning's DDP.

The strategy is chosen when the Trainer sets up, from the LightningModule itself, by
``recommend`` with the step-time simulator, or with a simulator from the registry:

    strategy = AutoSyncStrategy(None, cluster)                       # the step-time simulator
    strategy = AutoSyncStrategy.from_registry("models:/autosync-bert-B@champion", cluster)
    Trainer(accelerator="cpu", devices=..., num_nodes=..., strategy=strategy).fit(model, data)

    python examples/train_lightning.py [--cluster B] [--launcher emulated|local] [--steps 300]
                                       [--simulator models:/autosync-bert-B@champion] [--compare-ddp]
                                       [--autotune [--steps-per-candidate 5] [--trials PATH]]

``--autotune``: the job itself tries the simulator's top candidates (lossless) for the first
steps, a few steps each (max over ranks), locks in the fastest and keeps training with it; every
tried strategy is appended to ``--trials`` (a trial store) as a trial of this domain.

``--launcher local``: Lightning starts the workers itself on this host (``devices`` = the cluster's
worker count). ``--launcher emulated`` (the default as root): one process per worker inside its
node's network namespace, NICs shaped to the cluster's bandwidth; Lightning joins them
(``num_nodes`` x ``devices`` = the cluster's nodes x workers per node).
"""

from __future__ import annotations

import argparse
import os
import sys

from _common import default_launcher, describe

from autosync_transfer.demos import HIDDEN, TOKENS, run_emulated


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="B", choices=["A", "B", "C"], help="catalog cluster (default B)")
    ap.add_argument("--launcher", choices=["local", "emulated"], default=default_launcher())
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--hidden", type=int, default=HIDDEN,
                    help=f"width of the classifier's hidden layers (default {HIDDEN}; 2048 makes "
                         "its step bandwidth-bound)")
    ap.add_argument("--simulator", default=None,
                    help="registry URI or name of the simulator that picks the strategy "
                         "(default: the step-time simulator)")
    ap.add_argument("--candidates", type=int, default=2000, help="sampled candidates to rank")
    ap.add_argument("--compare-ddp", action="store_true",
                    help="also train with Lightning's DDP and print both side by side")
    ap.add_argument("--autotune", action="store_true",
                    help="try the simulator's top candidates during the first steps and lock in "
                         "the fastest")
    ap.add_argument("--steps-per-candidate", type=int, default=5)
    ap.add_argument("--trials", default=None,
                    help="trial store (JSON Lines) the autotuning steps are appended to")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


def autotune_config(args: argparse.Namespace):  # noqa: ANN201 - an AutotuneConfig or None
    """The ``--autotune`` configuration: candidates come from the strategy's simulator."""
    if not args.autotune:
        return None
    from autosync_transfer import AutotuneConfig
    from autosync_transfer.search import TrialRecorder

    return AutotuneConfig(steps_per_candidate=args.steps_per_candidate,
                          on_trial=TrialRecorder(args.trials) if args.trials else None)


def _train(args: argparse.Namespace) -> int:
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.demos import fit_classifier, lightning_layout, quiet_lightning
    from autosync_transfer.domains import get_cluster

    quiet_lightning()
    torch.set_num_threads(1)
    cluster = get_cluster(args.cluster)
    devices, num_nodes = lightning_layout(cluster, args.launcher)
    kw = {"candidates": args.candidates, "batch_size": args.batch_size, "seq_len": TOKENS,
          "autotune": autotune_config(args)}
    ours = (AutoSyncStrategy.from_registry(args.simulator, cluster, **kw) if args.simulator
            else AutoSyncStrategy(None, cluster, **kw))

    def fit(strategy):  # noqa: ANN001, ANN202 - a Lightning strategy -> fit_classifier's dict
        return fit_classifier(strategy, devices=devices, num_nodes=num_nodes, steps=args.steps,
                              batch_size=args.batch_size, lr=args.lr, hidden=args.hidden,
                              seed=args.seed)

    results = {"AutoSync": fit(ours)}
    if args.compare_ddp:
        results["Lightning DDP"] = fit(DDPStrategy(process_group_backend="gloo"))
    if not results["AutoSync"]["global_zero"]:
        return 0
    chooser = args.simulator or "step-time simulator"
    if args.autotune:
        chooser = f"autotuning in the job (candidates from the {chooser})"
    print(f"cluster {cluster.name}: {cluster.world_size} workers on {cluster.num_nodes} nodes "
          f"({args.launcher}); {args.steps} steps x {args.batch_size} samples per worker")
    print(f"AutoSync strategy chosen by {chooser}: {describe(ours.sync_strategy)}")
    tuner = ours.autotuner
    if tuner is not None:
        print(f"autotune: {len(tuner.trials)} strategies tried, {args.steps_per_candidate} steps "
              f"each (step time: max over ranks)")
        for t in tuner.trials:
            print(f"  {t.strategy.id} ({t.strategy.kind}): median step "
                  f"{1000 * (t.median_s or 0):.1f} ms")
        print(f"  locked in {describe(tuner.locked)}; tuning cost {tuner.tuning_s:.2f} s"
              + (f"; trials appended to {args.trials}" if args.trials else ""))
    names = list(results)
    rows = [("final loss (last 20 steps)", "final_loss", "{:.4f}"),
            ("training wall time", "train_s", "{:.1f} s"),
            ("median step time", "median_step_ms", "{:.1f} ms")]
    print(f"{'':28s}" + "".join(f"{n:>16s}" for n in names))
    for label, key, fmt in rows:
        print(f"{label:28s}" + "".join(f"{fmt.format(results[n][key]):>16s}" for n in names))
    print("(training wall time: first to last step; fit() including process start-up and setup: "
          + ", ".join(f"{n} {results[n]['fit_s']:.1f} s" for n in names) + ")")
    return 0


def main() -> int:
    args = _parse()
    if args.launcher == "emulated" and "LOCAL_RANK" not in os.environ:
        # this process only builds the emulated cluster; every worker runs this script again
        from autosync_transfer.domains import get_cluster

        return run_emulated(get_cluster(args.cluster), [os.path.abspath(__file__), *sys.argv[1:]])
    return _train(args)


if __name__ == "__main__":
    sys.exit(main())
