"""Hand-made layouts of one domain, measured beside the step-time simulator, one structural
change at a time: where its physics holds on this machine and where it does not.

The layouts (``--sets``, comma-separated) cover one question each:

* ``replication``: every variable on one parameter server (each of the first two nodes), with
  local replication on nothing, everything, the dense variables only or the row-sparse ones only;
* ``buckets``: the dense variables all-reduced in 1 or 16 buckets, uncompressed or fp16, the
  row-sparse ones on one server (or cut over every node);
* ``mixes``: the same with every third dense variable on a parameter server (those variables
  round-robin over the nodes), every dense variable on the servers (round-robin), and each with
  its dense variables cut in 4 shards (where the first dimension allows);
* ``ps_buckets``: parameter-server-heavy mixes that differ only in their number of all-reduce
  buckets: every other dense variable on the servers (round-robin), the rest all-reduced in 1,
  4, 16 or one bucket per variable (does each extra collective cost the PS threads time on a
  host whose processes outnumber its cores? ``research/notebook.md``, 2026-11-27).

Every layout is measured in one pool of trial workers, in ``--rounds`` interleaved rounds
(``--warmup`` + ``--iters`` steps each; the median of the rounds' median steps is printed).
The prediction uses the newest profile and calibration found by fingerprint (``--scratch DIR``
takes them now, as ``research/probes/stepsim_sameday.py`` does, into ``DIR``: the same day as the
measurement). ``log`` is ln(measured / predicted). ``--sim-option NAME=VALUE`` predicts with a
:class:`~autosync_transfer.rankers.stepsim.StepSimConfig` setting; ``--rescore FILE`` measures
nothing and predicts again the layouts of an earlier run (a results file, newest first).

    sudo python research/probes/layout_probe.py --domain bert-3l-heldout \
        --store benchmarks/results/heldout/bert-3l-heldout.jsonl --scratch DIR
    python research/probes/layout_probe.py --domain bert-3l-heldout \
        --store benchmarks/results/heldout/bert-3l-heldout.jsonl --scratch DIR \
        --rescore research/results/layout_probe.txt --sim-option ring_slowed_while_computing=true
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETS = ("replication", "buckets", "mixes", "ps_buckets")


def layouts(domain, sets: list[str]) -> dict:  # noqa: ANN001
    """Strategies by name (see the module docstring)."""
    from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

    nodes = [n.name for n in domain.cluster.nodes]
    variables = sorted(domain.model.variables, key=lambda v: v.order)
    dense = {v.name: k for k, v in enumerate(v for v in variables if not v.sparse)}

    def one(v, sync, shards: int = 1):  # noqa: ANN001, ANN202
        if shards > 1 and v.shape and v.shape[0] >= shards:
            return VarConfig(var_name=v.name, partition=Partition(
                axis=0, shards=shards, synchronizers=(sync,) * shards))
        return VarConfig(var_name=v.name, synchronizer=sync)

    def on_server(node: str, lr_dense: bool, lr_sparse: bool) -> tuple:
        return tuple(one(v, PS(destination=node,
                               local_replication=lr_sparse if v.sparse else lr_dense))
                     for v in variables)

    def mixed(groups: int, comp: str = "none", emb: tuple = (), every_ps: int = 0,
              shards: int = 1) -> tuple:
        emb = emb or (nodes[0],)
        out = []
        for v in variables:
            if v.sparse:
                syncs = tuple(PS(destination=e) for e in emb)
                out.append(one(v, syncs[0]) if len(syncs) == 1 else VarConfig(
                    var_name=v.name, partition=Partition(axis=0, shards=len(syncs),
                                                         synchronizers=syncs)))
                continue
            k = dense[v.name]
            sync = (PS(destination=nodes[(k // every_ps) % len(nodes)])
                    if every_ps and k % every_ps == 0
                    else AllReduce(group=k * groups // len(dense), compressor=comp))
            out.append(one(v, sync, shards))
        return tuple(out)

    found: dict[str, tuple] = {}
    if "replication" in sets:
        for node in nodes[:2]:
            found[node] = on_server(node, False, False)
            found[f"{node}_lr"] = on_server(node, True, True)
            found[f"{node}_lr_dense"] = on_server(node, True, False)
            found[f"{node}_lr_sparse"] = on_server(node, False, True)
    if "buckets" in sets:
        found.update({"AR1": mixed(1), "AR16": mixed(16), "AR1_fp16": mixed(1, "fp16"),
                      "AR16_fp16": mixed(16, "fp16"),
                      "AR16_rows_cut": mixed(16, emb=tuple(nodes))})
    if "ps_buckets" in sets:
        n_ar = sum(1 for k in dense.values() if k % 2)
        for groups in (1, 4, 16, n_ar):
            found[f"PS2_AR{groups}"] = mixed(groups, every_ps=2)
    if "mixes" in sets:
        found.update({"AR16_ps3": mixed(16, every_ps=3),
                      "AR16_ps3_sh4": mixed(16, every_ps=3, shards=4),
                      "PS_all": mixed(16, every_ps=1),
                      "PS_all_sh4": mixed(16, every_ps=1, shards=4),
                      "AR16_sh4": mixed(16, shards=4)})
    return {name: Strategy(id=f"probe-{name}", kind="user", nodes=cfg)
            for name, cfg in found.items()}


def _measured_rows(text: str) -> dict[str, list[float]]:
    """An earlier run's rounds in seconds by layout (a results file holds newest runs first:
    the first row of a layout is kept)."""
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or line.startswith("#") or parts[0] in found:
            continue
        try:
            float(parts[1]), float(parts[2])
            found[parts[0]] = [float(x) / 1e3 for x in parts[7:]]
        except ValueError:
            continue
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", required=True)
    ap.add_argument("--store", type=Path, default=None,
                    help="a trial store holding the domain (default: the catalog's domain)")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--scratch", type=Path, default=None,
                    help="calibrate and profile now into this folder, and predict with them")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--launcher", default="emulated", choices=["emulated", "local"])
    ap.add_argument("--sim-option", action="append", default=[], metavar="NAME=VALUE",
                    help="predict with this StepSimConfig setting (repeatable)")
    ap.add_argument("--rescore", type=Path, default=None, metavar="FILE",
                    help="measure nothing: predict again the layouts an earlier run wrote to "
                         "FILE (its newest row of each), against their measured column")
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    if not sets or any(s not in SETS for s in sets):
        ap.error(f"--sets: {args.sets!r}: choose among {', '.join(SETS)}")
    for name, low in (("rounds", 1), ("iters", 1), ("warmup", 0)):
        if getattr(args, name) < low:
            ap.error(f"--{name}: {getattr(args, name)}: must be at least {low}")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import numpy as np
    from _lab import sim_options, simulator

    options = sim_options(args.sim_option, ap)
    earlier: dict[str, list[float]] = {}
    if args.rescore is not None:
        try:
            earlier = _measured_rows(args.rescore.read_text())
        except OSError as e:
            ap.error(f"--rescore: {args.rescore}: {e.strerror or e}")

    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.runtime.calibrate import get_calibration
    from autosync_transfer.runtime.profile import get_profile
    from _lab import interleaved_rounds

    from autosync_transfer.errors import ConfigError

    try:
        domain = (find_domain(args.domain, [args.store]) if args.store
                  else resolve_domain(args.domain))
        strategies = layouts(domain, sets)
    except (ConfigError, OSError) as e:
        ap.error(f"--domain / --store: {e}")
    if args.rescore is not None:
        strategies = {k: v for k, v in strategies.items() if k in earlier}
        if not strategies:
            ap.error(f"--rescore: {args.rescore}: no row of the layouts of --sets {args.sets!r}")
    if args.scratch is not None:
        cal, _ = get_calibration(domain.cluster, args.launcher,
                                 folder=args.scratch / "calibrations")
        prof, _ = get_profile(f"zoo:{domain.model.name}", folder=args.scratch / "profiles")
    else:
        cal = find_calibration(domain.cluster.fingerprint, args.launcher)
        prof = find_profile(domain.model.fingerprint)
    world = domain.cluster.world_size
    host = ({"host_processes": world, "host_cores": os.cpu_count() or 1}
            if args.launcher == "emulated" else {})
    terms = simulator(domain, prof, cal, host, options).simulate(
        list(strategies.values()))
    measured = earlier or interleaved_rounds(domain, args.launcher, strategies, args.rounds,
                                             args.warmup, args.iters)
    print(f"# python {' '.join(shlex.quote(a) for a in sys.argv)}")
    shape = ", ".join(f"{n.name}: {n.workers} x {n.bandwidth_gbps:g} Gbit/s"
                      for n in domain.cluster.nodes)
    print(f"# {domain.name} ({shape}), {args.launcher}; "
          f"profile {getattr(prof, 'worker_type', '-')} {getattr(prof, 'created_at', '-')}, "
          f"calibration {getattr(cal, 'created_at', '-')}; ms")
    print(f"{'layout':16s} {'measured':>8s} {'pred':>7s} {'log':>7s} {'ar_s':>6s} {'ps_s':>6s} "
          f"{'exposed':>7s}  rounds")
    for i, name in enumerate(strategies):
        m = float(np.nanmedian(measured[name]))
        p = float(terms["step_s"][i])
        print(f"{name:16s} {m * 1e3:8.1f} {p * 1e3:7.1f} {np.log(m / p):+7.3f} "
              f"{terms['ar_s'][i] * 1e3:6.1f} {terms['ps_s'][i] * 1e3:6.1f} "
              f"{terms['exposed_comm_s'][i] * 1e3:7.1f}  "
              + " ".join(f"{x * 1e3:.0f}" for x in measured[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
