"""Parameter-server layouts on an emulated cluster: measured step against the simulator, and
where a step's PS time goes.

Every layout puts every variable of DOMAIN's model on a parameter server (no local replication,
no partitioning), spread over the cluster's nodes in one of these ways:

* ``all_<node>``: every variable on ``<node>``;
* ``halves``: the first half of the bytes (forward order) on the first node, the rest on the
  second;
* ``alternate``: variables alternate between the first two nodes;
* ``quarters``: the bytes in forward order cut into one contiguous share per node;
* a builder name (``ps``, ``ps_lb``, ``partitioned_ps``, ...).

For each layout it prints the measured median step (trial workers on the emulated cluster,
``--warmup`` + ``--iters`` steps) beside the step-time simulator's prediction (the shipped
profile and the newest calibration). With ``--trace LAYOUT`` it also runs that layout once more
with every rank timing the executor's gathers (a server waiting for a piece's pushes) in the
last of 6 steps, and prints them: a server's gathers follow one another, and a small piece
waits as long as the answers the server queued before it (gloo sends a receive's ready notice on
the same connection as the data queued to that peer).

    python research/probes/ps_layouts.py --domain vgg16-s-A --layouts all_n1,halves,alternate,quarters \
        [--trace quarters]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time


def layout(domain, name: str):  # noqa: ANN001, ANN201 - Domain -> Strategy
    from autosync_transfer.strategies.builders import build
    from autosync_transfer.strategies.types import PS, Strategy, VarConfig

    nodes = [n.name for n in domain.cluster.nodes]
    variables = domain.model.variables
    total = sum(v.num_elements for v in variables)

    def spread(where) -> Strategy:  # noqa: ANN001
        done, configs = 0, []
        for i, v in enumerate(variables):
            mid = (done + v.num_elements / 2) / total  # the variable's middle, as a byte share
            done += v.num_elements
            configs.append(VarConfig(var_name=v.name, synchronizer=PS(destination=where(i, mid))))
        return Strategy(id=name, kind=name, nodes=tuple(configs))

    if name.startswith("all_") and name[4:] in nodes:
        return spread(lambda i, f: name[4:])
    if name == "halves":
        return spread(lambda i, f: nodes[0] if f < 0.5 else nodes[min(1, len(nodes) - 1)])
    if name == "alternate":
        return spread(lambda i, f: nodes[i % min(2, len(nodes))])
    if name == "quarters":
        return spread(lambda i, f: nodes[min(int(f * len(nodes)), len(nodes) - 1)])
    return build(name, domain)


def _trace_worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.workload import call_model, load_workload
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master']}:{cfg['port']}",
                            rank=cfg["rank"], world_size=cfg["world"])
    domain = resolve_domain(cfg["domain"])
    wl = load_workload(f"zoo:{domain.model.name}")
    module = wl.build("cpu", seed=0)
    gen = torch.Generator().manual_seed(cfg["rank"])
    batches = [wl.example_batch(wl.batch_size, gen) for _ in range(2)]
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    events: list[tuple[int, float, float]] = []
    t_start = [0.0]
    gather = StrategyExecutor._gather

    def timed_gather(self, it, own, sources):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        try:
            return gather(self, it, own, sources)
        finally:
            events.append((it.index, t - t_start[0], time.perf_counter() - t_start[0]))

    StrategyExecutor._gather = timed_gather  # type: ignore[method-assign]
    plan = make_plan(layout(domain, cfg["layout"]), domain.model, domain.cluster)
    ex = StrategyExecutor(module, plan, CommGroups.create()).setup()
    out: dict = {}
    for k in range(6):
        inputs, targets = batches[k % 2]
        events.clear()
        dist.barrier()
        t_start[0] = t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        wl.loss_fn(call_model(module, inputs), targets).backward()
        t1 = time.perf_counter()
        ex.finish()
        t2 = time.perf_counter()
        opt.step()
        out = {"backward_end": t1 - t0, "finish_end": t2 - t0,
               "step": time.perf_counter() - t0, "gathers": list(events)}
    ex.close()
    sys.stdout.write("@@" + json.dumps(out) + "\n")
    dist.destroy_process_group()


def trace(domain_name: str, layout_name: str) -> list[dict]:
    """Every rank's last step: its phases and its gathers (piece, start, end)."""
    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.runtime.launch import as_launcher, free_port
    from autosync_transfer.runtime.trial import _worker_env

    domain = resolve_domain(domain_name)
    launcher = as_launcher("emulated")
    master = launcher.start(domain.cluster)
    port = free_port()
    rank_nodes = domain.cluster.rank_nodes()
    procs = []
    try:
        for rank in range(domain.cluster.world_size):
            cfg = {"rank": rank, "world": domain.cluster.world_size, "master": master,
                   "port": port, "domain": domain_name, "layout": layout_name}
            argv, env = launcher.command(rank_nodes[rank], [sys.executable, __file__, "--worker",
                                                            json.dumps(cfg)], _worker_env(), port)
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE))
        outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        launcher.stop()
    return [json.loads(next(line[2:] for line in o.splitlines() if line.startswith("@@")))
            for o in outs]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _trace_worker(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", required=True)
    ap.add_argument("--layouts", default="all_n1,halves,alternate,quarters")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--trace", default=None, help="a layout to trace (gathers per rank)")
    args = ap.parse_args()

    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator
    from autosync_transfer.runtime.profile import worker_type
    from autosync_transfer.runtime.trial import Protocol, WorkerPool

    domain = resolve_domain(args.domain)
    names = [n for n in args.layouts.split(",") if n]
    strategies = [layout(domain, n) for n in names]
    world = domain.cluster.world_size
    sim = StepSimulator(domain, find_profile(domain.model.fingerprint, worker_type()),
                        find_calibration(domain.cluster.fingerprint, "emulated"),
                        StepSimConfig(host_processes=world))
    predicted = sim.simulate(strategies)["step_s"]
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.domain}: {world} workers on an emulated cluster; median step of "
          f"{args.iters} after {args.warmup}; pred = the step-time simulator")
    print(f"{'layout':16s} {'measured':>9s} {'pred':>7s}")
    with WorkerPool(domain, "emulated", Protocol(warmup=args.warmup, iters=args.iters,
                                                 fidelity_steps=0)) as pool:
        for name, strategy, pred in zip(names, strategies, predicted):
            result = pool.run(strategy)
            measured = f"{result.median_s:9.3f}" if result.ok else f"{result.status:>9s}"
            print(f"{name:16s} {measured} {pred:7.3f}", flush=True)
    if args.trace:
        print(f"\n# trace of {args.trace}: every rank's last step (s); gathers: piece start-end")
        for rank, r in enumerate(trace(args.domain, args.trace)):
            print(f"rank {rank}: backward ends {r['backward_end']:.3f}, finish ends "
                  f"{r['finish_end']:.3f}, step {r['step']:.3f}; "
                  f"{len(r['gathers'])} gathers, "
                  f"{statistics.fsum(e - s for _, s, e in r['gathers']):.3f} s in all")
            for piece, s, e in r["gathers"]:
                if e - s >= 0.02:
                    print(f"    piece {piece:3d}  {s:.3f}-{e:.3f}  ({e - s:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
