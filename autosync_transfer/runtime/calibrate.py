"""Calibrate a cluster once: its links and its hosts' cores, measured through the runtime.

:func:`calibrate_cluster` starts one worker process per rank of the cluster with a process
launcher (``emulated``: one network namespace per node, NICs shaped to the spec; ``local``:
loopback) exactly as trial workers are started, and every worker runs the same microbenchmark
script (``python -m autosync_transfer.runtime.calibrate '<json>'``) on a gloo process group:

* **point to point**, between the first workers of every pair of nodes: a ping-pong of a 4-byte
  message (half its round trip is the pair's one-way latency), and messages of 1 MiB and 8 MiB
  answered by a 4-byte acknowledgement; the pair's rate is the slope between the two sizes
  (so latencies and token-bucket bursts cancel out). Every time is the fastest of its
  repetitions (20 ping-pongs, ``reps`` large messages): other processes' load only adds to it;
* **incast**, for every node: every other node's first worker sends to it at once, up to 8 MiB
  each in proportion to its pair rate (so that, were the receiving NIC unlimited, all flows would
  end together); the aggregate rate is what the node's NIC carries when every peer pushes (a NIC
  faster than all of its peers together cannot be saturated in this cluster, and is reported as
  that sum);
* **intra-node**, when a node has two workers: the same ping-pong and slope between them;
* **all-reduce** over every worker of 4 bytes, 16, 64 and 256 KiB, 1 and 8 MiB, the sizes
  interleaved in three blocks (``reps_small`` repetitions of the small sizes in all, ``reps``
  of the large ones per block): each rank's median, the slowest rank (a link's rate is a
  capacity, its fastest repetition; a collective's time is what a step meets: at 16–256 KiB
  the fastest repetition is 3–5x below the median on an emulated cluster);
* **compute**: the same small training step (a 3-layer MLP's forward and backward) run at once
  by ``k`` workers for ``k = 1 .. world size`` (the others wait), timed in CPU seconds;
* **parameter-server pieces**: the runtime's own executor synchronizes a module of
  ``ps_pieces`` one-element parameters, all on the first node's parameter server (median step
  over ``reps_small`` steps after warm-up steps); the step divided by the pieces is what one
  piece costs beyond its bytes (every rank's PS thread, the messages' latencies). The same
  with row-sparse pieces (``ps_pieces / 2`` tables of 64 x 16, one row touched per step: the
  header, the rows and the answer of the executor's row-sparse exchange). Then the same dense
  pieces beside 1 or 17 parameters of 4096 elements all-reduced in buckets of their own, in
  interleaved blocks: what one more collective costs such a step (4096 elements: several
  chunks per rank, as the executor's buckets; a one-element collective costs a quarter of the
  CPU);
* **all-reduce CPU**: every rank's process CPU time of all-reduces of 256 K and 2 M float32 and
  float16 elements, interleaved (the reduction and the socket copies: what a ring takes from
  the host's cores beyond its wire time).

From these (:class:`~autosync_transfer.domains.profile.ClusterCalibration`):

* a node's ``bandwidth_gbps`` is the largest of its pair rates and its incast rate (goodput:
  the shaped line rate times ~0.957, what TCP gets through tbf); its ``latency_s`` is half the
  median one-way latency of its pairs (a message between nodes i and j takes ``latency_i +
  latency_j``); a cluster of one node keeps its spec's bandwidth;
* ``intra_bandwidth_gbps`` / ``intra_latency_s`` from the intra-node pair (without a node of
  two workers: the fastest node's figures, which no strategy then uses);
* ``collective_latency_s``: the 4-byte all-reduce time (its median) beyond the ``2 (W - 1)``
  message latencies of a ring over ``W`` workers (the links' fastest ping-pongs; at least 0);
  ``allreduce_s`` keeps every size (``allreduce_stat``: ``median``);
* ``ps_piece_s`` / ``ps_sparse_piece_s``: the parameter-server steps divided by their pieces;
* ``ar_collective_s``: what one more all-reduce collective adds to a step whose
  parameter-server work binds (the ``ps_pieces`` dense pieces beside 1, then 17, parameters of
  ``ar_collective_elements`` elements all-reduced in buckets of their own, interleaved; the
  difference over 16). Where
  the workers outnumber the cores, a collective's wake-ups take CPU from the PS threads;
* ``ar_cpu_s_per_element`` / ``ar_fp16_cpu_s_per_element``: the slope of a rank's CPU seconds
  between the two all-reduce sizes, per element of each dtype;
* ``compute_slowdown[k] = (cpu_k / cpu_1) * max(1, k / host_cores)``: ``cpu_k`` the step's CPU
  seconds with ``k`` workers computing at once (shared caches and memory bandwidth), and
  ``k / host_cores`` the time slicing once the workers outnumber the cores. Measured in CPU
  seconds, this holds when other processes load the machine too (their share is recorded).

Emulated nodes share this machine's cores, so the compute slowdown is that of all the
cluster's workers on one host (``host_cores = os.cpu_count()``).

:func:`get_calibration` returns the stored calibration of (cluster fingerprint, launcher)
(shipped or written before, :mod:`autosync_transfer.domains.physics`), else calibrates and
stores it (a new version; older ones stay).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.profile import ClusterCalibration, NodeCalibration
from autosync_transfer.errors import ConfigError

__all__ = ["calibrate_cluster", "get_calibration", "CALIBRATION_LAUNCHERS", "main"]

log = logging.getLogger(__name__)

#: launchers a calibration can run through (they start the worker processes themselves)
CALIBRATION_LAUNCHERS = ("emulated", "local")

_SMALL, _MID, _BIG = 4, 1 << 20, 8 << 20
_ALLREDUCE_BYTES = (4, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20)
_REPLY = "@@CAL "
#: elements of the two all-reduces whose process CPU times give the per-element slope
_AR_CPU_ELEMENTS = (1 << 18, 1 << 21)
#: float32 elements of each bucket whose collectives ar_collective_s counts: several chunks per
#: rank, as the executor's buckets (a one-element collective costs a quarter of the CPU)
_AR_COLLECTIVE_ELEMENTS = 4096


# -- the workers' script ----------------------------------------------------------------------
def _bench(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Every rank runs this; rank 0 returns the raw measurements."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    rank_nodes: list[str] = cfg["rank_nodes"]
    nodes = list(dict.fromkeys(rank_nodes))
    leader = {n: rank_nodes.index(n) for n in nodes}
    reps_small, reps_big = int(cfg.get("reps_small", 20)), int(cfg.get("reps_big", 3))
    ack = torch.zeros(1, dtype=torch.int32)
    bufs = {s: torch.zeros(s // 4, dtype=torch.float32) for s in (_SMALL, _MID, _BIG)}

    def pair(a: int, b: int) -> dict[str, float] | None:
        """Ping-pong and slope between ranks a and b; the figures on rank a."""
        out: dict[str, list[float]] = {}
        for size, reps in ((_SMALL, reps_small), (_MID, reps_big), (_BIG, reps_big)):
            x = bufs[size]
            times = []
            for _ in range(reps + 1):
                if rank == a:
                    t0 = time.perf_counter()
                    dist.send(x, b)
                    dist.recv(ack if size != _SMALL else x, b)
                    times.append(time.perf_counter() - t0)
                elif rank == b:
                    dist.recv(x, a)
                    dist.send(ack if size != _SMALL else x, a)
            out[str(size)] = times[1:]
        dist.barrier()
        if rank != a:
            return None
        # the fastest repetition: other processes' load only ever adds to a time
        t_small = min(out[str(_SMALL)])
        t_mid, t_big = min(out[str(_MID)]), min(out[str(_BIG)])
        slope = max(t_big - t_mid, 1e-9)
        return {"one_way_s": t_small / 2, "gbps": (_BIG - _MID) * 8 / slope / 1e9,
                "t_mid_s": t_mid, "t_big_s": t_big}

    result: dict[str, Any] = {"pairs": [], "incast": {}, "intra": None, "allreduce": {},
                              "compute": {}}
    dist.barrier()
    # point to point between node leaders
    rates: dict[tuple[str, str], float] = {}
    for i, ni in enumerate(nodes):
        for nj in nodes[i + 1:]:
            r = pair(leader[ni], leader[nj])
            box = [r]
            dist.broadcast_object_list(box, src=leader[ni])
            rates[(ni, nj)] = rates[(nj, ni)] = box[0]["gbps"]
            if rank == 0:
                result["pairs"].append({"a": ni, "b": nj, **box[0]})
    # incast into every node's leader
    if len(nodes) > 1:
        for n in nodes:
            dst = leader[n]
            others = [m for m in nodes if m != n]
            top = max(rates[(m, n)] for m in others)
            # every sender sends in proportion to its own rate into n: unconstrained, all would
            # finish together, so the time is set by n's NIC when it is the bottleneck
            sizes = {leader[m]: max(64 << 10, int(_BIG * rates[(m, n)] / top) // 4 * 4)
                     for m in others}
            times = []
            for _ in range(2):
                dist.barrier()
                t0 = time.perf_counter()
                if rank == dst:
                    works = [dist.irecv(torch.empty(sz // 4), s) for s, sz in sizes.items()]
                    for w in works:
                        w.wait()
                    times.append(time.perf_counter() - t0)
                elif rank in sizes:
                    dist.send(torch.zeros(sizes[rank] // 4), dst)
            box = [min(times) if times else None]
            dist.broadcast_object_list(box, src=dst)
            if rank == 0:
                result["incast"][n] = sum(sizes.values()) * 8 / box[0] / 1e9
    # intra-node: two workers of one node
    multi = [n for n in nodes if rank_nodes.count(n) >= 2]
    if multi:
        a = leader[multi[0]]
        b = rank_nodes.index(multi[0], a + 1)
        r = pair(a, b)
        box = [r]
        dist.broadcast_object_list(box, src=a)
        if rank == 0:
            result["intra"] = {"node": multi[0], **box[0]}
    # all-reduce over everyone: the sizes interleaved in three blocks (order reversed every other
    # block, each size's first repetition in a block untimed), each rank's median, the slowest
    tensors = {size: torch.zeros(max(size // 4, 1)) for size in _ALLREDUCE_BYTES}
    ar_times: dict[int, list[float]] = {size: [] for size in _ALLREDUCE_BYTES}
    for block in range(3):
        for size in (_ALLREDUCE_BYTES if block % 2 == 0 else _ALLREDUCE_BYTES[::-1]):
            t = tensors[size]
            reps = -(-reps_small // 3) if size <= (256 << 10) else reps_big
            for k in range(reps + 1):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if k:
                    ar_times[size].append(time.perf_counter() - t0)
    mx = torch.tensor([statistics.median(ar_times[size]) for size in _ALLREDUCE_BYTES],
                      dtype=torch.float64)
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    if rank == 0:
        result["allreduce"] = {str(size): float(v) for size, v in zip(_ALLREDUCE_BYTES, mx)}
    # compute with k concurrent workers
    torch.manual_seed(0)
    layers = [torch.nn.Linear(512, 512) for _ in range(3)]
    net = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    inp = torch.randn(64, 512)

    def step() -> None:
        net.zero_grad(set_to_none=False)
        net(inp).square().mean().backward()

    step()
    steps = int(cfg.get("compute_steps", 10))
    for k in range(1, world + 1):
        dist.barrier()
        cpu, wall = [], []
        if rank < k:
            for _ in range(steps):
                c0, w0 = time.process_time(), time.perf_counter()
                step()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
        dist.barrier()
        mine = torch.tensor([statistics.median(cpu) if cpu else 0.0,
                             statistics.median(wall) if wall else 0.0])
        dist.all_reduce(mine)
        if rank == 0:
            result["compute"][str(k)] = {"cpu_s": float(mine[0]) / k, "wall_s": float(mine[1]) / k}
    if world > 1 and cfg.get("cluster") is not None:
        result["ps_piece_s"] = _ps_pieces(cfg, reps_small, sparse=False)
        result["ps_sparse_piece_s"] = _ps_pieces(cfg, reps_small, sparse=True)
        result["ar_collective_s"] = _ar_collectives(cfg, reps_small)
    if world > 1:
        result["ar_cpu_s_per_element"] = _ar_cpu_per_element(reps_big)
    dist.barrier()
    return result if rank == 0 else None


def _ps_pieces(cfg: dict[str, Any], reps: int, *, sparse: bool) -> float:
    """Median seconds per piece of the executor synchronizing ``ps_pieces`` one-element
    parameters (``sparse``: half as many row-sparse 64 x 16 tables, one row touched) on the
    first node's parameter server (every rank runs it; the slowest rank's)."""
    import torch
    import torch.distributed as dist

    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.importers import graph_from_torch
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.strategies.types import PS, Strategy, VarConfig

    cluster = Cluster.model_validate(cfg["cluster"])
    pieces = int(cfg.get("ps_pieces", 64)) // (2 if sparse else 1)
    shape = (64, 16) if sparse else (1,)
    module = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(shape))
                                     for _ in range(pieces)])
    graph = graph_from_torch(module, "ps-pieces", sparse=lambda _name: sparse)
    server = PS(destination=cluster.nodes[0].name)
    strategy = Strategy(id="ps-pieces", kind="calibration", nodes=tuple(
        VarConfig(var_name=v.name, synchronizer=server) for v in graph.variables))
    executor = StrategyExecutor(module, make_plan(strategy, graph, cluster),
                                CommGroups.create()).setup()
    try:
        times = _executor_steps(module, executor, reps, skip=3)
    finally:
        executor.close()
    mine = torch.tensor([statistics.median(times) / pieces])
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def _executor_steps(module: Any, executor: Any, reps: int, *, skip: int) -> list[float]:
    """Seconds of ``reps`` steps of ``module`` (parameters only: their first elements summed)
    synchronized by ``executor``, after ``skip`` untimed ones; every rank starts each step
    together."""
    import torch
    import torch.distributed as dist

    times = []
    for k in range(reps + skip):
        dist.barrier()
        t0 = time.perf_counter()
        torch.stack([p[0].sum() for p in module]).sum().backward()
        executor.finish()
        if k >= skip:
            times.append(time.perf_counter() - t0)
        module.zero_grad(set_to_none=False)
    return times


def _ar_collectives(cfg: dict[str, Any], reps: int, extra: int = 16,
                    elements: int = _AR_COLLECTIVE_ELEMENTS) -> float:
    """What one more all-reduce collective adds to a step whose parameter-server work binds:
    the executor synchronizing ``ps_pieces`` one-element parameters on the first node's
    parameter server beside one, then ``1 + extra``, parameters of ``elements`` elements
    all-reduced each in a bucket of its own; the difference of the two steps' medians
    (interleaved, three blocks of ``reps`` steps each, every rank's slowest) over ``extra``, at
    least 0."""
    import torch
    import torch.distributed as dist

    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.importers import graph_from_torch
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.strategies.types import PS, AllReduce, Strategy, VarConfig

    cluster = Cluster.model_validate(cfg["cluster"])
    pieces = int(cfg.get("ps_pieces", 64))
    server = PS(destination=cluster.nodes[0].name)
    groups = CommGroups.create()
    runs = []
    for buckets in (1, 1 + extra):
        module = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(1 if i < pieces
                                                                         else elements))
                                         for i in range(pieces + buckets)])
        graph = graph_from_torch(module, f"ar-collectives-{buckets}")
        nodes = tuple(VarConfig(var_name=v.name, synchronizer=server if i < pieces
                                else AllReduce(group=i - pieces))
                      for i, v in enumerate(graph.variables))
        strategy = Strategy(id=f"ar-collectives-{buckets}", kind="calibration", nodes=nodes)
        runs.append((module, StrategyExecutor(module, make_plan(strategy, graph, cluster),
                                              groups).setup()))
    times: list[list[float]] = [[], []]
    try:
        for _ in range(3):  # blocks; a block's first steps are the switch between the two
            for i, (module, executor) in enumerate(runs):
                times[i] += _executor_steps(module, executor, reps, skip=2)
    finally:
        for _, executor in runs:
            executor.close()
    mine = torch.tensor([statistics.median(times[0]), statistics.median(times[1])])
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return max(0.0, float(mine[1] - mine[0]) / extra)


def _ar_cpu_per_element(reps: int, sizes: tuple[int, int] | None = None) -> dict[str, float]:
    """Process CPU seconds one rank spends per all-reduced element, by dtype (``float32``,
    ``float16``): every rank's CPU time of one ``all_reduce`` of each of ``sizes`` elements
    (three blocks of ``reps`` repetitions each, the four (dtype, size) cases interleaved,
    their order reversed every other block; the median of each case's ``3 x reps`` times), the
    mean over ranks, the slope between the two sizes (at least 0). A collective's fixed cost
    cancels in the slope. The tensors hold zeros, so repeated sums never overflow float16."""
    import torch
    import torch.distributed as dist

    sizes = sizes or _AR_CPU_ELEMENTS
    world = dist.get_world_size()
    cases = [(dt, n) for dt in (torch.float32, torch.float16) for n in sizes]
    tensors = {c: torch.zeros(c[1], dtype=c[0]) for c in cases}
    cpu: dict[tuple[Any, int], list[float]] = {c: [] for c in cases}
    for block in range(3):
        for c in (cases if block % 2 == 0 else cases[::-1]):
            t = tensors[c]
            dist.all_reduce(t)  # untimed: the first after a switch of case
            for _ in range(reps):
                dist.barrier()
                c0 = time.process_time()
                dist.all_reduce(t)
                cpu[c].append(time.process_time() - c0)
    medians = torch.tensor([statistics.median(cpu[c]) for c in cases], dtype=torch.float64)
    dist.all_reduce(medians)
    medians /= world
    out = {}
    for k, dt in enumerate(("float32", "float16")):
        small, big = float(medians[2 * k]), float(medians[2 * k + 1])
        out[dt] = max(0.0, (big - small) / (sizes[1] - sizes[0]))
    return out


def main(argv: list[str] | None = None) -> None:
    """A calibration worker: ``argv[0]`` is its JSON config."""
    import torch
    import torch.distributed as dist

    args = sys.argv[1:] if argv is None else argv
    cfg = json.loads(args[0])
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
                            rank=cfg["rank"], world_size=cfg["world_size"])
    try:
        out = _bench(cfg)
        if out is not None:
            sys.stdout.write(_REPLY + json.dumps(out) + "\n")
            sys.stdout.flush()
    finally:
        dist.destroy_process_group()


# -- the controller ---------------------------------------------------------------------------
def _run_workers(cluster: Cluster, launcher: Any, cfg: dict[str, Any], timeout_s: float,
                 log_dir: Path | None) -> dict[str, Any]:
    from autosync_transfer.runtime.launch import free_port
    from autosync_transfer.runtime.trial import _worker_env

    world = cluster.world_size
    rank_nodes = cluster.rank_nodes()
    master = launcher.start(cluster)
    port = free_port()
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world):
            c = {**cfg, "rank": rank, "world_size": world, "master_addr": master,
                 "master_port": port, "rank_nodes": rank_nodes}
            argv = [sys.executable, "-m", "autosync_transfer.runtime.calibrate", json.dumps(c)]
            argv, env = launcher.command(rank_nodes[rank], argv, _worker_env(), port)
            stderr: Any = subprocess.DEVNULL
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                stderr = open(log_dir / f"calibrate-{rank}.log", "ab")  # noqa: SIM115
            try:
                procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr,
                                              stdin=subprocess.DEVNULL, env=env,
                                              start_new_session=True))
            finally:
                if stderr is not subprocess.DEVNULL:
                    stderr.close()
        deadline = time.monotonic() + timeout_s
        outs: list[bytes] = []
        for rank, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ConfigError(f"calibration of cluster {cluster.name!r} timed out after "
                                  f"{timeout_s:g} s (rank {rank})") from None
            if p.returncode != 0:
                raise ConfigError(f"calibration worker {rank} of cluster {cluster.name!r} "
                                  f"exited with code {p.returncode}")
            outs.append(out)
        for line in outs[0].decode(errors="replace").splitlines():
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY):])
        raise ConfigError(f"calibration of cluster {cluster.name!r}: rank 0 sent no result")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        launcher.stop()


def _summarize(cluster: Cluster, launcher: str, raw: dict[str, Any], seconds: float,
               foreign: float | None) -> ClusterCalibration:
    from autosync_transfer.runtime.profile import processor_name

    names = cluster.node_names
    pairs = raw["pairs"]
    nodes = []
    for n in names:
        mine = [p for p in pairs if n in (p["a"], p["b"])]
        spec = cluster.node(n)
        if not mine:  # one node: nothing crosses a NIC
            nodes.append(NodeCalibration(name=n, bandwidth_gbps=spec.bandwidth_gbps,
                                         latency_s=0.0))
            continue
        bw = max([p["gbps"] for p in mine] + [raw["incast"].get(n, 0.0)])
        lat = statistics.median(p["one_way_s"] for p in mine) / 2
        nodes.append(NodeCalibration(name=n, bandwidth_gbps=round(bw, 4), latency_s=lat))
    intra = raw.get("intra")
    if intra:
        intra_bw, intra_lat = intra["gbps"], intra["one_way_s"]
    else:
        fastest = max(nodes, key=lambda c: c.bandwidth_gbps)
        intra_bw, intra_lat = fastest.bandwidth_gbps, fastest.latency_s
    world = cluster.world_size
    msg_lat = statistics.median(p["one_way_s"] for p in pairs) if pairs else (intra_lat or 0.0)
    tiny = raw["allreduce"].get(str(_SMALL), 0.0)
    coll = max(0.0, tiny - 2 * (world - 1) * msg_lat) if world > 1 else 0.0
    cores = os.cpu_count() or 1
    comp = raw["compute"]
    base = comp["1"]["cpu_s"]
    slow = {int(k): round(max(1.0, v["cpu_s"] / base) * max(1.0, int(k) / cores), 4)
            for k, v in comp.items()}
    slow[1] = 1.0
    return ClusterCalibration(
        cluster=cluster.name, fingerprint=cluster.fingerprint, launcher=launcher,
        nodes=tuple(nodes), intra_bandwidth_gbps=round(max(intra_bw, 1e-6), 4),
        intra_latency_s=intra_lat, collective_latency_s=coll, compute_slowdown=slow,
        host_cores=cores, seconds=round(seconds, 3),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        allreduce_s={int(k): v for k, v in raw["allreduce"].items()},
        foreign_cpu=None if foreign is None else round(foreign, 4),
        ps_piece_s=raw.get("ps_piece_s"), ps_sparse_piece_s=raw.get("ps_sparse_piece_s"),
        ar_collective_s=raw.get("ar_collective_s"),
        ar_collective_elements=_AR_COLLECTIVE_ELEMENTS if "ar_collective_s" in raw else None,
        allreduce_stat="median", processor=processor_name(),
        ar_cpu_s_per_element=(raw.get("ar_cpu_s_per_element") or {}).get("float32"),
        ar_fp16_cpu_s_per_element=(raw.get("ar_cpu_s_per_element") or {}).get("float16"))


def calibrate_cluster(cluster: Cluster, launcher: str | Any = "emulated", *,
                      timeout_s: float = 300.0, max_foreign_cpu: float = 0.25,
                      attempts: int = 2, quiet_wait_s: float = 30.0, reps: int = 3,
                      log_dir: str | Path | None = None) -> ClusterCalibration:
    """Measure ``cluster`` through ``launcher`` (``emulated`` or ``local``, or a
    :class:`~autosync_transfer.runtime.launch.ProcessLauncher`); see the module docstring. A
    calibration disturbed by foreign CPU load (share above ``max_foreign_cpu``) is measured
    again after waiting for a quiet machine (at most ``quiet_wait_s``), up to ``attempts``
    times; the least disturbed one is kept. ``reps``: repetitions of the large messages."""
    from autosync_transfer.runtime.cpuwatch import CpuWatch, wait_until_quiet
    from autosync_transfer.runtime.launch import ProcessLauncher, as_launcher

    if not isinstance(cluster, Cluster):
        raise ConfigError(f"cluster must be a Cluster, got {type(cluster).__name__}")
    if isinstance(launcher, str) and launcher not in CALIBRATION_LAUNCHERS:
        raise ConfigError(f"launcher must be one of {', '.join(CALIBRATION_LAUNCHERS)}, got "
                          f"{launcher!r}")
    for name, value in (("attempts", attempts), ("reps", reps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    if not timeout_s > 0:
        raise ConfigError(f"timeout_s must be > 0, got {timeout_s!r}")
    resolved = as_launcher(launcher)
    if not isinstance(resolved, ProcessLauncher):
        raise ConfigError(f"launcher {resolved.name!r} cannot calibrate (it does not start the "
                          f"workers itself); use one of {', '.join(CALIBRATION_LAUNCHERS)}")
    resolved.check()
    cfg = {"reps_small": 20, "reps_big": reps, "cluster": cluster.model_dump(mode="json")}
    best: tuple[float, dict[str, Any], float, float | None] | None = None
    for attempt in range(1, attempts + 1):
        t0 = time.monotonic()
        with CpuWatch() as watch:
            raw = _run_workers(cluster, resolved, cfg, timeout_s,
                               Path(log_dir) if log_dir else None)
        took = time.monotonic() - t0
        share = watch.foreign
        key = share if share is not None else 0.0
        if best is None or key < best[0]:
            best = (key, raw, took, share)
        if share is None or share <= max_foreign_cpu or attempt == attempts:
            break
        log.warning("calibration of %s disturbed (foreign CPU %.0f%% of the machine), measuring "
                    "again when quiet", cluster.name, share * 100)
        wait_until_quiet(max_foreign_cpu, max_wait_s=quiet_wait_s)
    assert best is not None
    _, raw, took, share = best
    return _summarize(cluster, resolved.name, raw, took, share)


def get_calibration(cluster: Cluster, launcher: str = "emulated", *, force: bool = False,
                    folder: str | Path | None = None, **kwargs: Any
                    ) -> tuple[ClusterCalibration, bool]:
    """``(calibration, measured)``: the newest stored calibration of ``cluster`` by
    ``launcher`` (shipped or written before; ``folder``: look and write there only), else a new
    one (:func:`calibrate_cluster` with ``kwargs``) saved as the next version; ``force=True``
    always calibrates."""
    from autosync_transfer.domains.physics import find_calibration, save_calibration

    if not force:
        found = find_calibration(cluster.fingerprint, launcher, folder=folder)
        if found is not None:
            return found, False
    cal = calibrate_cluster(cluster, launcher, **kwargs)
    save_calibration(cal, folder=folder)
    return cal, True


if __name__ == "__main__":
    main()
