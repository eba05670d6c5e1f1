"""Train your own workload on your cluster with a strategy (e.g. `search --export-json`'s).

The workload is the same ``--model SPEC`` the command line takes (a file or module with
``build_model()``, ``example_batch(batch_size, generator)`` and ``loss_fn(output, targets)``, or
``...:NAME`` for a ``Workload``); every worker builds it, wraps it in
``DistributedModel(module, strategy, cluster)`` and trains on its own batches:

    python examples/train_workload.py --model examples/workloads/tiny_gpt.py \\
        --cluster-file examples/clusters/lab.yml --strategy strategy.json --steps 300 \\
        [--launcher emulated|local] [--optimizer adam|sgd] [--lr 0.003]

``--strategy``: a strategy file (JSON or AutoDist), a builder name (``ddp``, ``ps_lb``, ...), or
``recommend`` (the step-time simulator). ``--launcher emulated`` (the default as root) runs
every node of the cluster file in its own network namespace with its NIC shaped to the file's
bandwidth; ``local`` runs every worker on this host over loopback. Printed: the loss every
``--log-every`` steps (rank 0), then the first and final loss, the median step time and whether
every replica ends with the same parameters (exit code 1 if not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from _common import default_launcher, describe, report_line, run_summary, worker_main

from autosync_transfer.demos import run_emulated


def train(rank: int, world: int, cfg: dict) -> dict:
    """One worker's training loop (the process group is already initialized)."""
    import torch

    from autosync_transfer import Cluster, DistributedModel, Strategy
    from autosync_transfer.domains import load_workload

    torch.set_num_threads(1)
    workload = load_workload(cfg["model"])
    module = workload.build(seed=cfg["seed"])
    model = DistributedModel(module, Strategy.from_json(cfg["strategy"]),
                             Cluster.model_validate_json(cfg["cluster"]), graph=workload.graph())
    if cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + rank)  # each worker: its own batches
    step_s, losses = [], []
    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        inputs, targets = workload.batch(gen)
        t = time.perf_counter()
        opt.zero_grad()
        loss = workload.loss(model, inputs, targets)
        loss.backward()  # gradients are averaged across workers when this returns
        opt.step()
        step_s.append(time.perf_counter() - t)
        losses.append(loss.item())
        if rank == 0 and (step + 1) % cfg["log_every"] == 0:
            recent = statistics.fmean(losses[-cfg["log_every"]:])
            print(f"  step {step + 1:5d}  loss {recent:.4f}", flush=True)
    wall_s = time.perf_counter() - t0
    model.close()
    # the replicas must be identical: a checksum of every rank's parameters
    return run_summary(module.parameters(), losses, step_s, wall_s, world)




def _strategy(name: str, domain):  # noqa: ANN001, ANN202
    from autosync_transfer import Strategy
    from autosync_transfer.strategies import BUILDERS, build, read_autodist_file, validate

    if name == "recommend":
        from autosync_transfer import recommend

        return recommend(domain.model, domain.cluster)
    if name in BUILDERS:
        return build(name, domain)
    # JSON starts with '{' (after blanks); an AutoDist (protobuf) file names its PS destinations
    # by address, which the cluster maps to its nodes
    json_file = Path(name).read_bytes().lstrip()[:1] in (b"{", b"[", b"")
    strategy = Strategy.from_file(name) if json_file else read_autodist_file(name, domain.cluster)
    return validate(strategy, domain)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker_main(train, sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, metavar="SPEC", help="the workload (as --model)")
    ap.add_argument("--cluster-file", required=True, metavar="YAML",
                    help="the cluster (an AutoDist resource spec)")
    ap.add_argument("--strategy", default="recommend",
                    help="a strategy file (JSON or AutoDist), a builder name, or 'recommend'")
    ap.add_argument("--launcher", choices=["local", "emulated"], default=default_launcher())
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()

    from autosync_transfer.domains import workload_domain
    from autosync_transfer.errors import AutosyncError

    try:
        domain, spec = workload_domain(args.model, args.cluster_file)
        strategy = _strategy(args.strategy, domain)
    except (AutosyncError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cluster = domain.cluster
    print(f"{domain.name}: {cluster.world_size} workers on {cluster.num_nodes} nodes "
          f"({args.launcher}); strategy {describe(strategy)}", flush=True)
    cfg = {"model": spec, "strategy": strategy.to_json(), "cluster": cluster.model_dump_json(),
           "steps": args.steps, "optimizer": args.optimizer, "lr": args.lr, "seed": args.seed,
           "log_every": max(1, args.log_every)}
    t0 = time.perf_counter()
    if args.launcher == "local":
        from autosync_transfer.runtime import spawn_local

        result = spawn_local(train, cluster.world_size, cfg, timeout_s=3600)[0]
    else:
        result = _run_emulated(cluster, cfg)
        if result is None:
            return 1
    total_s = time.perf_counter() - t0
    print(report_line(result, args.steps, total_s), flush=True)
    if os.environ.get("AUTOSYNC_RESULT_JSON"):
        Path(os.environ["AUTOSYNC_RESULT_JSON"]).write_text(json.dumps(
            {**result, "total_s": total_s, "strategy": strategy.id, "domain": domain.name}))
    return 0 if result["replicas_identical"] else 1


def _run_emulated(cluster, cfg: dict) -> dict | None:  # noqa: ANN001 - a Cluster
    """Run the workers in the emulated cluster; rank 0 writes its result to a file."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autosync-example-") as tmp:
        out = Path(tmp) / "result.json"
        cfg = {**cfg, "result_path": str(out)}
        code = run_emulated(cluster, [os.path.abspath(__file__), "--worker", json.dumps(cfg)],
                            timeout_s=3600)
        if code != 0 or not out.exists():
            print(f"workers failed (exit code {code})", file=sys.stderr)
            return None
        return json.loads(out.read_text())


if __name__ == "__main__":
    sys.exit(main())
