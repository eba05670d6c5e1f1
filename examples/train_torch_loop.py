"""A plain torch training loop with DistributedModel on a (emulated) cluster.

Every worker of the cluster runs the same loop; DistributedModel averages the gradients with the
chosen strategy during ``backward()``, exactly where DistributedDataParallel would:

    model = DistributedModel(net, strategy, cluster)
    loss = F.cross_entropy(model(x), y); loss.backward(); optimizer.step()

    python examples/train_torch_loop.py [--cluster B] [--launcher emulated|local] [--steps 200]
                                        [--strategy recommend|<builder>|<file.json>]

``--launcher emulated`` (the default as root) runs each node of the cluster in its own network
namespace with its NIC shaped to the cluster's bandwidth; ``local`` runs every worker on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _common import default_launcher, describe, report_line, run_summary, worker_main

from autosync_transfer.demos import TextClassifier, classifier_batch, run_emulated


def train(rank: int, world: int, cfg: dict) -> dict:
    """One worker's training loop (the process group is already initialized)."""
    import torch
    import torch.nn.functional as F

    from autosync_transfer import Cluster, DistributedModel, Strategy

    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])  # the entry point of this worker owns the global seed
    strategy = Strategy.from_json(cfg["strategy"])
    model = DistributedModel(TextClassifier(), strategy, Cluster.model_validate_json(cfg["cluster"]))
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + rank)  # each worker: its own shard
    step_s, losses = [], []
    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        x, y = classifier_batch(gen, cfg["batch_size"])
        t = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # gradients are averaged across workers when this returns
        opt.step()
        step_s.append(time.perf_counter() - t)
        losses.append(loss.item())
        if rank == 0 and (step + 1) % max(1, cfg["steps"] // 5) == 0:
            print(f"  step {step + 1:4d}  loss {loss.item():.4f}", flush=True)
    wall_s = time.perf_counter() - t0
    model.close()
    # the replicas must be identical: a checksum of every rank's parameters
    return run_summary(model.module.parameters(), losses, step_s, wall_s, world)




def _choose(name: str, cluster, graph):  # noqa: ANN001, ANN202
    from autosync_transfer import Domain, Strategy, recommend
    from autosync_transfer.strategies import BUILDERS, build

    if name == "recommend":
        return recommend(graph, cluster)  # the step-time simulator
    if name in BUILDERS:
        return build(name, Domain(name=f"{graph.name}-{cluster.name}", model=graph, cluster=cluster))
    return Strategy.from_file(name)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker_main(train, sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="B", choices=["A", "B", "C"], help="catalog cluster (default B)")
    ap.add_argument("--launcher", choices=["local", "emulated"], default=default_launcher())
    ap.add_argument("--strategy", default="recommend",
                    help="'recommend' (the step-time simulator), a builder name, or a strategy file")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from autosync_transfer.domains import ModelGraph, get_cluster
    from autosync_transfer.errors import AutosyncError

    try:
        cluster = get_cluster(args.cluster)
        with torch.device("meta"):
            graph = ModelGraph.from_torch(TextClassifier(), name="textclf",
                                          batch_size=args.batch_size, seq_len=16)
        strategy = _choose(args.strategy, cluster, graph)
    except AutosyncError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"cluster {cluster.name}: {cluster.world_size} workers on {cluster.num_nodes} nodes "
          f"({args.launcher}); strategy {describe(strategy)}", flush=True)
    cfg = {"strategy": strategy.to_json(), "cluster": cluster.model_dump_json(), "steps": args.steps,
           "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed}

    t0 = time.perf_counter()
    if args.launcher == "local":
        from autosync_transfer.runtime import spawn_local

        result = spawn_local(train, cluster.world_size, cfg, timeout_s=1800)[0]
    else:
        result = _run_emulated(cluster, cfg)
        if result is None:
            return 1
    total_s = time.perf_counter() - t0
    print(report_line(result, args.steps, total_s), flush=True)
    return 0 if result["replicas_identical"] else 1


def _run_emulated(cluster, cfg: dict) -> dict | None:  # noqa: ANN001 - a Cluster
    """Run the workers in the emulated cluster; rank 0 writes its result to a file."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autosync-example-") as tmp:
        out = Path(tmp) / "result.json"
        cfg = {**cfg, "result_path": str(out)}
        code = run_emulated(cluster, [os.path.abspath(__file__), "--worker", json.dumps(cfg)])
        if code != 0 or not out.exists():
            print(f"workers failed (exit code {code})", file=sys.stderr)
            return None
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
