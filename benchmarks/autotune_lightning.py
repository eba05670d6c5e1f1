"""Autotuning inside a Lightning job vs Lightning's DDP and the hand-optimized builders.

Every configuration trains the same LightningModule (examples/_common.py: a text classifier with
an embedding) for the same fixed number of steps on the same data, side by side in one run:

- ``AutoSync autotune``: ``AutoSyncStrategy(autotune=...)``: the first steps try the simulator's
  top lossless candidates, a few steps each, then the fastest is locked in (tuning included in
  the wall time);
- ``Lightning DDP``: ``DDPStrategy`` (torch DDP, gloo);
- every lossless hand-optimized builder (``--builders``), each run as a fixed strategy; the best
  of them is the "best hand-optimized builder".

Printed: wall time to ``--steps`` steps (first to last step), median step time, final loss (the
last 20 steps, averaged over workers), and ratios vs DDP and vs the best builder.

    python benchmarks/autotune_lightning.py [--cluster B] [--launcher emulated|local] [--steps 200]
        [--steps-per-candidate 5] [--builders all_reduce,ps_lb,...] [--trials PATH]

``--launcher local`` is a quick check on this host (Lightning starts ``cluster`` workers);
``emulated`` (the default as root) shapes every node's NIC to the cluster's bandwidth.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

from _common import TOKENS, default_launcher, describe, run_emulated  # noqa: E402

LOSSLESS_BUILDERS = ("ps", "ps_lb", "partitioned_ps", "all_reduce", "partitioned_ar", "parallax",
                     "ddp")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="B", help="catalog cluster (default B)")
    ap.add_argument("--launcher", choices=["local", "emulated"], default=default_launcher())
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--steps-per-candidate", type=int, default=5)
    ap.add_argument("--simulator", default=None, help="registry URI or name (default: the step-time simulator)")
    ap.add_argument("--candidates", type=int, default=500, help="sampled strategies to rank")
    ap.add_argument("--builders", default=",".join(LOSSLESS_BUILDERS))
    ap.add_argument("--trials", default=None, help="trial store for the autotuning steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.autotune = True
    args.compare_ddp = False
    return args


def _builder_picker(name: str):  # noqa: ANN202 - picker(graph, cluster) -> Strategy
    def pick(graph, cluster):  # noqa: ANN001, ANN202
        from autosync_transfer.domains.domain import Domain
        from autosync_transfer.strategies.builders import build

        return build(name, Domain(name=f"{graph.name}-{cluster.name}", model=graph,
                                  cluster=cluster))

    return pick


def _bench(args: argparse.Namespace) -> int:
    import torch
    from lightning.pytorch.strategies import DDPStrategy
    from train_lightning import _fit, _quiet_lightning, autotune_config

    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.search.lightning import AutoSyncStrategy

    _quiet_lightning()
    torch.set_num_threads(1)
    cluster = get_cluster(args.cluster)
    if args.launcher == "local":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        devices, num_nodes = cluster.world_size, 1
    else:
        devices, num_nodes = cluster.nodes[0].workers, cluster.num_nodes
    kw = {"batch_size": args.batch_size, "seq_len": TOKENS}
    tuned = AutoSyncStrategy(None, cluster, simulator=args.simulator, candidates=args.candidates,
                             autotune=autotune_config(args), **kw)
    results = {"AutoSync autotune": _fit(args, tuned, devices, num_nodes)}
    results["Lightning DDP"] = _fit(args, DDPStrategy(process_group_backend="gloo"), devices,
                                    num_nodes)
    builders = [b for b in args.builders.split(",") if b]
    for b in builders:
        results[f"builder {b}"] = _fit(args, AutoSyncStrategy(_builder_picker(b), cluster, **kw),
                                       devices, num_nodes)
    if not results["AutoSync autotune"]["global_zero"]:
        return 0
    best_b = min((f"builder {b}" for b in builders), key=lambda k: results[k]["train_s"],
                 default=None)
    ddp = results["Lightning DDP"]
    print(f"cluster {cluster.name}: {cluster.world_size} workers on {cluster.num_nodes} nodes "
          f"({args.launcher}); {args.steps} steps x {args.batch_size} samples per worker")
    tuner = tuned.autotuner
    if tuner is not None and tuner.locked is not None:
        print(f"autotune: {len(tuner.trials)} strategies x {args.steps_per_candidate} steps, "
              f"locked in {describe(tuner.locked)}, tuning cost {tuner.tuning_s:.2f} s")
        for t in tuner.trials:
            print(f"  tried {t.strategy.id} ({t.strategy.kind}): median step "
                  f"{1000 * (t.median_s or 0):.1f} ms")
    print(f"{'configuration':28s}{'wall time':>12s}{'median step':>14s}{'final loss':>12s}"
          f"{'vs DDP':>9s}")
    for name, r in results.items():
        mark = "  <- best builder" if name == best_b else ""
        print(f"{name:28s}{r['train_s']:>10.2f} s{r['median_step_ms']:>11.1f} ms"
              f"{r['final_loss']:>12.4f}{ddp['train_s'] / r['train_s']:>8.2f}x{mark}")
    ours = results["AutoSync autotune"]
    print(f"speed-up to {args.steps} steps (tuning included): "
          f"{ddp['train_s'] / ours['train_s']:.2f}x vs Lightning DDP"
          + (f", {results[best_b]['train_s'] / ours['train_s']:.2f}x vs the best builder "
             f"({best_b.removeprefix('builder ')})" if best_b else ""))
    print(f"final loss: autotune {ours['final_loss']:.4f} vs DDP {ddp['final_loss']:.4f} "
          f"(difference {ours['final_loss'] - ddp['final_loss']:+.4f})")
    return 0


def main() -> int:
    args = _parse()
    if args.launcher == "emulated" and "LOCAL_RANK" not in os.environ:
        from autosync_transfer.domains.catalog import get_cluster

        return run_emulated(get_cluster(args.cluster), [os.path.abspath(__file__), *sys.argv[1:]])
    return _bench(args)


if __name__ == "__main__":
    sys.exit(main())
