"""Where a trial's step goes: chosen strategies of a store, run by the trial harness on the
emulated cluster, every phase of every step timed on every rank, beside the step-time
simulator's terms for the same strategies.

Every rank runs the trial harness's own step (``TrialHarness._step``: the store's zoo workload,
its batches, SGD) with each strategy in 4 interleaved blocks (order reversed every other block);
each block builds the strategy's executor, runs 2 untimed steps, then 5 timed ones, and closes
it, as a trial does. Per timed step, relative to its start: forward, backward (until
``backward()`` returns), ``finish()``, the optimizer; every all-reduce bucket's flattening (the
executor's ``_all_reduce`` up to posting its collective), its ring (posted until its future
completes, on gloo's thread) and when the last ring ends; the PS thread's pieces (first start,
last end, busy time); the CPU time of the step, the main thread's in ``finish()`` and in all, and the process's (all its threads), summed over the ranks. Printed: medians over the 20 steps of every rank's slowest (the
element-wise maximum over ranks), in ms, and the simulator's prediction with the newest
calibration and profile of this machine type (``--physics DIR``: ``DIR/profiles`` and
``DIR/calibrations``). The calibrated ring of the same bytes (``ClusterCalibration.allreduce_s``,
interpolated) is printed beside the measured ring.

    python research/probes/trial_trace.py --domain bert-3l-B \\
        --strategies partitioned_ar-bert-3l-B,ps-bert-3l-B,s0-3-d1ecdf5f,s0-57-7b45f258 \\
        --physics benchmarks/results/machines/intel-xeon
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

_REPLY = "@@TRACE "
BLOCKS, WARMUP, STEPS = 4, 2, 5
PHASES = ("step", "forward", "backward", "finish", "optimizer", "ar_flatten", "ar_first_post",
          "ar_ring_busy", "ar_last_end", "ar_buckets", "ps_first", "ps_last_end", "ps_busy", "finish_cpu", "main_cpu", "cpu")


class _TracedDist:
    """``torch.distributed`` as the executor sees it, with every ``all_reduce`` timed from its
    posting to its future's completion."""

    def __init__(self, real, log: list) -> None:  # noqa: ANN001
        self._real = real
        self._log = log

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._real, name)

    def all_reduce(self, tensor, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        rec = [time.perf_counter(), None, tensor.numel() * tensor.element_size()]
        self._log.append(rec)
        work = self._real.all_reduce(tensor, *args, **kwargs)

        def done(fut):  # noqa: ANN001, ANN202
            rec[1] = time.perf_counter()
            return None

        work.get_future().then(done)
        return work


def _busy(rings: list, default_end: float) -> float:
    """The time some ring is in flight: the union of the [posted, completed] intervals (gloo
    runs a group's collectives one after another, so a ring posted behind another waits)."""
    total, end = 0.0, float("-inf")
    for start, stop, _ in sorted(rings):
        stop = stop if stop is not None else default_end
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
                            rank=cfg["rank"], world_size=cfg["world_size"])
    from autosync_transfer.runtime import executor as exmod
    from autosync_transfer.runtime.executor import StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.runtime.worker import TrialHarness
    from autosync_transfer.strategies.types import Strategy

    h = TrialHarness(cfg["workload"], cfg["cluster"], cfg["graph"], seed=0).setup()
    rings: list = []
    flats: list = []
    ps: list = []
    exmod.dist = _TracedDist(dist, rings)
    orig_ar, orig_ps = StrategyExecutor._all_reduce, StrategyExecutor._parameter_server

    def traced_ar(self, b, it):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        n = len(rings)
        orig_ar(self, b, it)
        # flattening (and compression) up to the first collective this bucket posted
        flats.append((rings[n][0] if len(rings) > n else time.perf_counter()) - t)

    def traced_ps(self, item, it):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        try:
            orig_ps(self, item, it)
        finally:
            ps.append((t, time.perf_counter()))

    StrategyExecutor._all_reduce = traced_ar
    StrategyExecutor._parameter_server = traced_ps

    strategies = [Strategy.from_json(s) for s in cfg["strategies"]]
    rows: dict[str, list[list[float]]] = {s.id: [] for s in strategies}
    for block in range(BLOCKS):
        order = strategies if block % 2 == 0 else strategies[::-1]
        for s in order:
            h.module.load_state_dict(h.initial_state)
            ex = StrategyExecutor(h.module, make_plan(s, h.graph, h.cluster), h.groups,
                                  seed=0).setup()
            try:
                for k in range(WARMUP):
                    h._step(k, ex)  # noqa: SLF001
                dist.barrier(group=h.groups.ar)
                for k in range(STEPS):
                    rings.clear()
                    flats.clear()
                    ps.clear()
                    inputs, targets = h.batches[k % len(h.batches)]
                    c0, m0 = time.process_time(), time.thread_time()
                    t0 = time.perf_counter()
                    h.opt.zero_grad(set_to_none=False)
                    out = h._call(h.module, inputs)  # noqa: SLF001
                    t1 = time.perf_counter()
                    h.loss(out, targets).backward()
                    t2 = time.perf_counter()
                    f0 = time.thread_time()
                    ex.finish()
                    t3 = time.perf_counter()
                    finish_cpu = time.thread_time() - f0
                    h.opt.step()
                    t4 = time.perf_counter()
                    cpu, main_cpu = time.process_time() - c0, time.thread_time() - m0
                    ends = [r[1] for r in rings if r[1] is not None]
                    rows[s.id].append([
                        t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, sum(flats),
                        (min(r[0] for r in rings) - t0) if rings else 0.0, _busy(rings, t3),
                        (max(ends) - t0) if ends else 0.0, float(len(rings)),
                        (min(a for a, _ in ps) - t0) if ps else 0.0,
                        (max(b for _, b in ps) - t0) if ps else 0.0,
                        sum(b - a for a, b in ps), finish_cpu, main_cpu, cpu])
            finally:
                ex.close()
    med = torch.tensor([[statistics.median(col) for col in zip(*rows[s.id])]
                        for s in strategies], dtype=torch.float64)
    cpu = med[:, -3:].clone()
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    dist.all_reduce(cpu)  # the host's: every rank's CPU summed
    med[:, -3:] = cpu
    if dist.get_rank() == 0:
        sys.stdout.write(_REPLY + json.dumps(
            {s.id: dict(zip(PHASES, map(float, med[i]))) for i, s in enumerate(strategies)})
            + "\n")
        sys.stdout.flush()
    h.close()


def _measure(domain, strategies) -> dict:  # noqa: ANN001
    from autosync_transfer.runtime.trial import workload_spec_of

    return _lab.run_on_emulated(
        domain.cluster, __file__,
        {"cluster": domain.cluster.model_dump_json(), "graph": domain.model.model_dump_json(),
         "workload": workload_spec_of(domain), "strategies": [s.to_json() for s in strategies]},
        _REPLY, timeout_s=1800)


def _calibrated_ring(cal, nbytes: float) -> float:  # noqa: ANN001
    """The calibration's all-reduce time of ``nbytes``, linear between its measured sizes."""
    pts = sorted((int(k), v) for k, v in (cal.allreduce_s or {}).items())
    if not pts or nbytes <= 0:
        return 0.0
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if nbytes <= b1:
            return t0 + (t1 - t0) * max(0.0, nbytes - b0) / (b1 - b0)
    (b0, t0), (b1, t1) = pts[-2], pts[-1]
    return t1 + (t1 - t0) * (nbytes - b1) / (b1 - b0)


def main() -> int:
    if _lab.worker_entry(_worker):
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domain", required=True)
    ap.add_argument("--strategies", required=True, help="strategy ids of the store, comma-separated")
    ap.add_argument("--datasets", default=str(ROOT / "datasets/trials"))
    ap.add_argument("--physics", default=str(ROOT / "benchmarks/results/machines/intel-xeon"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from stepsim_accuracy import _load_json_models, host_settings, physics_of

    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    f = Path(args.datasets) / f"{args.domain}.jsonl"
    if not f.is_file():
        ap.error(f"--domain: {args.domain!r}: no store {f}")
    df = load_trials(f)
    domain = find_domain(args.domain, [f])
    table = strategy_table(df, normalize=False)
    by_id = dict(zip(table["strategy_id"], table["strategy"]))
    ids = [s for s in args.strategies.split(",") if s]
    missing = [s for s in ids if s not in by_id]
    if missing or not ids:
        ap.error(f"--strategies: {missing[0] if missing else args.strategies!r}: not a "
                 f"strategy of {f.name}")
    strategies = [by_id[s] for s in ids]
    phys = Path(args.physics)
    profiles = _load_json_models(phys / "profiles", WorkloadProfile)
    cals = sorted(_load_json_models(phys / "calibrations", ClusterCalibration),
                  key=lambda c: c.created_at, reverse=True)
    prof, cal = physics_of(domain, profiles, cals)
    sim = StepSimulator(domain, prof, cal, StepSimConfig(**host_settings(f, df, domain)))
    pred = sim.simulate(strategies)
    stored = dict(zip(table["strategy_id"], table["runtime_s"]))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    measured = _measure(domain, strategies)
    print(f"# {started}; python research/probes/trial_trace.py --domain {args.domain} "
          f"--strategies {args.strategies} --physics {args.physics}")
    print("# measured (s): " + json.dumps(measured))
    print(f"# ms per step: medians of {BLOCKS * STEPS} steps ({BLOCKS} interleaved blocks of "
          f"{STEPS}), every rank's slowest; calibration {cal.created_at if cal else '-'}")
    cols = ("step", "forward", "backward", "finish", "optimizer", "ar_flatten", "ar_first_post",
            "ar_ring_busy", "ar_last_end", "ps_first", "ps_last_end", "ps_busy", "finish_cpu", "main_cpu", "cpu")
    print(f"{'strategy':26s} {'what':9s}" + "".join(f" {c:>11s}" for c in cols)
          + f" {'buckets':>7s} {'cal ring':>8s} {'wire MB':>7s}")
    for i, (sid, s) in enumerate(zip(ids, strategies)):
        m = measured[sid]
        ring_bytes = float(pred[i]["ar_wire_bytes"])
        print(f"{sid[:26]:26s} {'measured':9s}" + "".join(f" {1e3 * m[c]:11.1f}" for c in cols)
              + f" {m['ar_buckets']:7.0f} {1e3 * _calibrated_ring(cal, ring_bytes):8.1f}"
              f" {ring_bytes / 1e6:7.2f}")
        p = pred[i]
        print(f"{'':26s} {'simulated':9s} {1e3 * p['step_s']:11.1f} "
              f"compute {1e3 * p['compute_s']:.1f} exposed comm {1e3 * p['exposed_comm_s']:.1f} "
              f"ar {1e3 * p['ar_s']:.1f} ps {1e3 * p['ps_s']:.1f} sync end "
              f"{1e3 * p['sync_end_s']:.1f} buckets {p['ar_buckets']:.0f}; stored "
              f"{1e3 * float(stored[sid]):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
