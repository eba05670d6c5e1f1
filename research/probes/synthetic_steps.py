"""The executor on synthetic steps (no compute) on an emulated cluster, beside the step-time
simulator's prediction of the same strategies: where the simulator's model of the PS chain and
the rings misses, measured without any workload in the way.

Each case ``PIECES:ELEMENTS:AR`` is three strategies on the cluster's first node's parameter
server: ``ps`` (PIECES float32 parameters of ELEMENTS elements each, plus one one-element
all-reduced parameter), ``both`` (the same pieces beside one all-reduced parameter of AR
elements) and ``ar`` (one one-element PS piece beside the AR-element parameter); plus ``bare``,
``dist.all_reduce`` of AR elements outside the executor, ``ar-only``, the executor with the
AR-element parameter alone, and ``backward``, that parameter's backward pass alone (the step's
own compute: its gradient is written in full). Every rank runs every kind in 4 interleaved
blocks of 5 steps (order reversed every other block); the figure is the median step with its
distribution-free 95 % interval (binomial order statistics over the 20 steps), every rank's
slowest (the element-wise maximum over ranks). The simulator gets the newest calibration of the cluster on this machine type and a profile of
zero compute; ``--sim-option`` variants are printed beside the shipped model.

    python research/probes/synthetic_steps.py --cluster B --cases 64:1:1,32:65536:2097152 \
        --calibrations benchmarks/results/machines/intel-xeon/calibrations \
        --sim-option ps_sliced_while_computing=true
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# _lab sits beside this script (a rank's process runs with PYTHONSAFEPATH: no script folder)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lab  # noqa: E402

_REPLY = "@@STEPS "
KINDS = ("ps", "both", "ar", "ar-only", "bare", "backward")


def _layouts(pieces: int, elements: int, ar: int) -> dict[str, tuple[int, int, int]]:
    """kind -> (PS pieces, their elements, all-reduced elements)"""
    return {"ps": (pieces, elements, 1), "both": (pieces, elements, ar), "ar": (1, 1, ar),
            "ar-only": (0, 1, ar)}


def _strategy(cluster, pieces: int, elements: int, ar: int):  # noqa: ANN001, ANN202
    import torch

    from autosync_transfer.domains.importers import graph_from_torch
    from autosync_transfer.strategies.types import PS, AllReduce, Strategy, VarConfig

    module = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.zeros(elements)) for _ in range(pieces)]
        + [torch.nn.Parameter(torch.zeros(ar))])
    graph = graph_from_torch(module, f"synthetic-{pieces}-{elements}-{ar}")
    server = PS(destination=cluster.nodes[0].name)
    nodes = tuple(VarConfig(var_name=v.name, synchronizer=server if i < pieces
                            else AllReduce(group=0)) for i, v in enumerate(graph.variables))
    return module, graph, Strategy(id="synthetic", kind="calibration", nodes=nodes)


def _median_interval(times: list[float]) -> tuple[float, float, float]:
    """The median of ``times`` and its distribution-free 95 % interval (binomial order
    statistics)."""
    from scipy.stats import binom

    x = sorted(times)
    n = len(x)
    j = max(1, int(binom.ppf(0.025, n, 0.5)))
    return statistics.median(x), x[j - 1], x[n - j]


def _worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
                            rank=cfg["rank"], world_size=cfg["world_size"])
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.runtime.calibrate import _executor_steps
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan

    cluster = Cluster.model_validate(cfg["cluster"])
    groups = CommGroups.create()
    out = {}
    for case in cfg["cases"]:
        runs = []
        for kind, layout in _layouts(*case).items():
            module, graph, strategy = _strategy(cluster, *layout)
            runs.append((kind, module, StrategyExecutor(module, make_plan(strategy, graph, cluster),
                                                        groups).setup()))
        bare = torch.zeros(case[2])
        times: dict[str, list[float]] = {k: [] for k in KINDS}
        try:
            for block in range(4):
                order = runs if block % 2 == 0 else runs[::-1]
                for kind, module, executor in order:
                    times[kind] += _executor_steps(module, executor, 5, skip=2)
                module = runs[-1][1]  # the ar-only parameters: their backward alone
                for _ in range(5):
                    dist.barrier()
                    t0 = time.perf_counter()
                    torch.stack([p[0].sum() for p in module]).sum().backward()
                    times["backward"].append(time.perf_counter() - t0)
                    module.zero_grad(set_to_none=False)
                dist.all_reduce(bare)
                for _ in range(5):
                    dist.barrier()
                    t0 = time.perf_counter()
                    dist.all_reduce(bare)
                    times["bare"].append(time.perf_counter() - t0)
        finally:
            for _, _, executor in runs:
                executor.close()
        med = torch.tensor([_median_interval(times[k]) for k in KINDS], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        out[":".join(map(str, case))] = {k: [float(x) for x in med[i]]
                                         for i, k in enumerate(KINDS)}
    if dist.get_rank() == 0:
        sys.stdout.write(_REPLY + json.dumps(out) + "\n")
        sys.stdout.flush()
    dist.destroy_process_group()


def _measure(cluster, cases: list[tuple[int, int, int]]) -> dict:  # noqa: ANN001
    return _lab.run_on_emulated(cluster, __file__, {"cluster": cluster.model_dump(mode="json"),
                                                    "cases": cases}, _REPLY)


def _simulate(cluster, cal, case: tuple[int, int, int], kind: str, options: dict) -> float:  # noqa: ANN001
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.profile import WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimulator

    _, graph, strategy = _strategy(cluster, *_layouts(*case)[kind])
    prof = WorkloadProfile(workload=graph.name, fingerprint=graph.fingerprint,
                           worker_type="cpu:synthetic:threads=1", batch_size=1, forward_s=0.0,
                           backward_s=1e-4)
    config, variant = _lab._split(options, {"host_processes": cluster.world_size,
                                            "host_cores": cal.host_cores})
    sim = StepSimulator(Domain(name=graph.name, model=graph, cluster=cluster), prof, cal, config,
                        variant=variant)
    return float(sim.simulate([strategy])[0]["step_s"])


def main() -> int:
    if _lab.worker_entry(_worker):
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="B")
    ap.add_argument("--cases", default="64:1:1,32:65536:2097152,8:262144:2097152,"
                                       "32:65536:8388608")
    ap.add_argument("--calibrations", default=str(ROOT / "datasets/calibrations"))
    ap.add_argument("--sim-option", action="append", default=[],
                    help="NAME=VALUE of StepSimConfig or StepSimVariant (repeatable; each "
                         "option is one more column)")
    args = ap.parse_args()
    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.domains.profile import ClusterCalibration
    from autosync_transfer.runtime.profile import processor_name

    try:
        cases = [tuple(int(x) for x in c.split(":")) for c in args.cases.split(",")]
        if any(len(c) != 3 or min(c) < 1 for c in cases):
            raise ValueError
    except ValueError:
        ap.error(f"--cases: {args.cases!r}: expected PIECES:ELEMENTS:AR, comma-separated, "
                 "each at least 1")
    columns = [("v", {})] + [(o, _lab.sim_options([o], ap)) for o in args.sim_option]
    cluster = get_cluster(args.cluster)
    here = processor_name()
    cals = [ClusterCalibration.model_validate_json(f.read_text())
            for f in Path(args.calibrations).glob(f"{args.cluster}-*.json")]
    cals = [c for c in cals if c.fingerprint == cluster.fingerprint and c.processor == here]
    if not cals:
        ap.error(f"--calibrations: no calibration of cluster {args.cluster!r} on {here!r} in "
                 f"{args.calibrations}")
    cal = max(cals, key=lambda c: c.created_at)
    measured = _measure(cluster, cases)
    print("# measured (s): " + json.dumps(measured), flush=True)
    print(f"# python research/probes/synthetic_steps.py --cluster {args.cluster} --cases "
          f"{args.cases} " + " ".join(f"--sim-option {o}" for o in args.sim_option))
    print(f"# {here}; calibration {cal.created_at}; ms per step (median, every rank's slowest)")
    head = "".join(f" {('sim ' + n if n != 'v' else 'sim'):>34s}" for n, _ in columns)
    print(f"{'case':22s} {'kind':8s} {'measured':>9s} {'95 % interval':>15s}{head}")
    for case in cases:
        key = ":".join(map(str, case))
        for kind in KINDS:
            m, lo, hi = (1e3 * x for x in measured[key][kind])
            row = f"{key:22s} {kind:8s} {m:9.1f} {f'[{lo:.1f}, {hi:.1f}]':>15s}"
            if kind not in ("bare", "backward"):
                row += "".join(f" {1e3 * _simulate(cluster, cal, case, kind, o):34.1f}"
                               for _, o in columns)
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
