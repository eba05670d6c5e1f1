"""Where one training step's time goes, per rank: compute phases and the executor's work.

W local gloo ranks (loopback, the machine's cores shared as on an emulated cluster, no NIC
shaping) train DOMAIN's zoo model with a builder's strategy; every rank times forward, backward
(until ``backward()`` returns), ``finish()`` (waiting for the synchronization), the optimizer and
the whole step, and the executor's own work summed per step (the PS exchanges and their parts,
the all-reduce launches, the row-sparse row search ``_rows``). Printed per rank: medians over
``--steps`` steps after 3 warm-up steps, in ms. Compare with the step-time simulator's terms
(``StepSimulator.simulate``) to see which part of a step it misses.

    python research/probes/step_trace.py --domain ncf-C --strategy ddp
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time


def _worker(rank: int, world: int, domain_name: str, strategy_name: str, steps: int) -> dict:
    import torch

    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.workload import call_model, load_workload
    from autosync_transfer.runtime import executor as exmod
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.strategies.builders import build

    torch.set_num_threads(1)
    domain = resolve_domain(domain_name)
    wl = load_workload(f"zoo:{domain.model.name}")
    module = wl.build("cpu", seed=0)
    gen = torch.Generator().manual_seed(rank)
    batches = [wl.example_batch(wl.batch_size, gen) for _ in range(4)]
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    acc: dict[str, float] = {}

    def timed(name: str, fn):  # noqa: ANN001, ANN202
        def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    exmod._rows = timed("_rows", exmod._rows)  # noqa: SLF001
    for m in ("_parameter_server", "_all_reduce", "_gather", "_push", "_send_result"):
        setattr(StrategyExecutor, m, timed(m, getattr(StrategyExecutor, m)))
    plan = make_plan(build(strategy_name, domain), domain.model, domain.cluster)
    ex = StrategyExecutor(module, plan, CommGroups.create()).setup()
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "finish": [],
                                      "optimizer": [], "step": []}
    for k in range(3 + steps):
        inputs, targets = batches[k % len(batches)]
        acc.clear()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = wl.loss_fn(call_model(module, inputs), targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        ex.finish()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        if k < 3:
            continue
        for key, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
            phases[key].append(v)
        for key, v in acc.items():
            phases.setdefault(key, []).append(v)
    ex.close()
    return {k: statistics.median(v) * 1e3 for k, v in phases.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", required=True)
    ap.add_argument("--strategy", default="ddp", help="a builder name")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.runtime.launch import spawn_local

    world = resolve_domain(args.domain).cluster.world_size
    res = spawn_local(_worker, world, args.domain, args.strategy, args.steps, timeout_s=600)
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.domain}, {args.strategy}: {world} local ranks; median ms per step")
    keys = list(dict.fromkeys(k for r in res for k in r))
    print(f"{'rank':>4s} " + " ".join(f"{k:>17s}" for k in keys))
    for rank, r in enumerate(res):
        print(f"{rank:4d} " + " ".join(f"{r.get(k, 0.0):17.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
