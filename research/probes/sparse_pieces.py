"""What cutting a row-sparse table into pieces costs a step, measured against the simulator.

One pool of workers on DOMAIN's cluster (``--launcher emulated``: one network namespace per
node, NICs shaped; needs root) measures ``ps_lb`` and variants of it that change one thing,
interleaved round after round so that the machine's drift hits them alike:

* ``P4`` / ``P16``: the first sparse table cut into 4 / 16 pieces on its ``ps_lb`` server;
* ``P16_rr``: 16 pieces spread round-robin over every node's server;
* ``P4_lr`` / ``P16_lr``: as ``P4`` / ``P16``, with local replication (a node's pushes summed
  first);
* ``dense_AR``: the dense variables all-reduced in one group instead of on parameter servers.

Printed per variant: the measured step (median over ``--rounds``), its change from ``ps_lb``
measured in the same run, and the step-time simulator's prediction and change (the shipped
profile and calibration of the domain, told that every worker shares this machine's cores).
The changes, not the levels, are the comparison: the level moves with the machine between
sessions (the calibration was taken on another day).

    sudo python research/probes/sparse_pieces.py --domain ncf-C --rounds 4
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys


def variants(domain) -> dict:  # noqa: ANN001
    """``ps_lb`` and its one-change variants (``Strategy`` objects), by name."""
    from autosync_transfer.strategies.builders import build
    from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

    base = build("ps_lb", domain)
    sparse = [v.name for v in domain.model.variables if v.sparse]
    if not sparse:
        raise SystemExit(f"error: domain {domain.name!r} has no row-sparse variable")
    table = sparse[0]
    nodes = [n.name for n in domain.cluster.nodes]
    server = next(c.synchronizer.destination for c in base.nodes if c.var_name == table)

    def cut(servers: list[str], replication: bool) -> tuple[VarConfig, ...]:
        out = []
        for c in base.nodes:
            if c.var_name == table:
                syncs = tuple(PS(destination=s, local_replication=replication) for s in servers)
                c = VarConfig(var_name=table, partition=Partition(
                    axis=0, shards=len(servers), synchronizers=syncs))
            out.append(c)
        return tuple(out)

    dense_ar = tuple(c if c.var_name in sparse else
                     VarConfig(var_name=c.var_name, synchronizer=AllReduce(group=0))
                     for c in base.nodes)
    layouts = {
        "ps_lb": base.nodes,
        "P4": cut([server] * 4, False),
        "P16": cut([server] * 16, False),
        "P16_rr": cut([nodes[k % len(nodes)] for k in range(16)], False),
        "P4_lr": cut([server] * 4, True),
        "P16_lr": cut([server] * 16, True),
        "dense_AR": dense_ar,
    }
    return {name: Strategy(id=f"pieces-{name}", kind="sampled", nodes=nodes_)
            for name, nodes_ in layouts.items()}


from _lab import interleaved_rounds  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="ncf-C")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import numpy as np

    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    domain = resolve_domain(args.domain)
    strategies = variants(domain)
    world = domain.cluster.world_size
    host = ({"host_processes": world, "host_cores": os.cpu_count() or 1}
            if args.launcher == "emulated" else {})
    sim = StepSimulator(domain, find_profile(domain.model.fingerprint),
                        find_calibration(domain.cluster.fingerprint, args.launcher),
                        StepSimConfig(**host))
    pred = dict(zip(strategies, sim.simulate(list(strategies.values()))["step_s"]))
    measured = interleaved_rounds(domain, args.launcher, strategies, args.rounds, args.warmup,
                                  args.iters)
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"# {args.domain}, {args.launcher}: median step over {args.rounds} interleaved rounds "
          f"({args.warmup} + {args.iters} iterations each); d = change from ps_lb, in ms")
    m0 = float(np.nanmedian(measured["ps_lb"]))
    print(f"{'variant':10s} {'measured':>9s} {'d meas':>8s} {'predicted':>10s} {'d pred':>8s}"
          f"  rounds")
    for name in strategies:
        m = float(np.nanmedian(measured[name]))
        print(f"{name:10s} {m * 1e3:9.1f} {(m - m0) * 1e3:+8.1f} {pred[name] * 1e3:10.1f} "
              f"{(pred[name] - pred['ps_lb']) * 1e3:+8.1f}  "
              + " ".join(f"{x * 1e3:.1f}" for x in measured[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
