"""Bus bandwidth of gloo ``all_reduce`` on an emulated cluster (draft).

Emulates a catalog cluster with one network namespace per node (see
``autosync_transfer.runtime.emulation``), starts one gloo process per worker inside the namespaces,
times ``all_reduce`` of one large float32 tensor (median over repetitions; per repetition the
slowest rank's time) and reports the achieved bus bandwidth ``2 (W - 1) / W * bytes / time``
against the shaped link rate (the slowest NIC of the cluster). A ring all-reduce at line rate gives
a ratio near 1; TCP/IP headers alone cap it at about 0.96 of the tbf rate (1448 payload bytes in a
1514-byte frame).

Usage (as root)::

    python research/probes/bus_bandwidth.py --cluster A --mb 64 --reps 5
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time

logger = logging.getLogger(__name__)

GOAL_RATIO = 0.9


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="A", help="catalog cluster name (default: A)")
    p.add_argument("--mb", type=float, default=64.0, help="tensor size in MB (default: 64)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (default: 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions (default: 1)")
    p.add_argument("--port", type=int, default=29510, help="MASTER_PORT (default: 29510)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="limit for the whole run")
    p.add_argument("--no-link-check", action="store_true",
                   help="skip the TCP rate check between the first two nodes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args: argparse.Namespace) -> None:
    """One rank: time all_reduce; rank 0 prints the per-repetition times (max over ranks)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    numel = int(args.mb * 1e6) // 4
    t = torch.ones(numel, dtype=torch.float32)
    for _ in range(args.warmup):
        dist.all_reduce(t)
    times = []
    for _ in range(args.reps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"world": world, "bytes": numel * 4, "times_s": slowest.tolist()}),
              flush=True)
    dist.destroy_process_group()


def run(args: argparse.Namespace) -> dict[str, float]:
    from autosync_transfer.domains.catalog import get_cluster
    from autosync_transfer.runtime.emulation import EmulatedCluster

    cluster = get_cluster(args.cluster)
    link_gbps = cluster.min_bandwidth_gbps
    out: dict[str, float] = {"link_gbps": link_gbps}
    with EmulatedCluster(cluster) as ec:
        if not args.no_link_check and cluster.num_nodes >= 2:
            a, b = cluster.node_names[:2]
            rate = ec.measure_link_rate(a, b, nbytes=int(link_gbps * 1e9 / 8 * 0.5))
            out["tcp_link_gbps"] = rate / 1e9
        fwd = [f"--mb={args.mb}", f"--reps={args.reps}", f"--warmup={args.warmup}"]
        procs = []
        for node in ec.nodes:
            for rank in node.ranks:
                env = {"RANK": str(rank), "WORLD_SIZE": str(cluster.world_size),
                       "LOCAL_RANK": str(rank - node.ranks[0]), "MASTER_PORT": str(args.port)}
                procs.append(ec.popen(
                    node.name, [sys.executable, os.path.abspath(__file__), "--worker", *fwd],
                    env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                    text=True,
                ))
        deadline = time.monotonic() + args.timeout_s
        stdout, _ = procs[0].communicate(timeout=args.timeout_s)
        for p in procs[1:]:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        failed = [i for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise RuntimeError(f"ranks {failed} failed (exit codes "
                               f"{[procs[i].returncode for i in failed]})")
    res = json.loads(stdout.strip().splitlines()[-1])
    world, nbytes = res["world"], res["bytes"]
    median_s = statistics.median(res["times_s"])
    bus_gbps = 2 * (world - 1) / world * nbytes * 8 / median_s / 1e9
    out.update(world=world, bytes=nbytes, median_s=median_s, min_s=min(res["times_s"]),
               max_s=max(res["times_s"]), bus_gbps=bus_gbps, ratio=bus_gbps / link_gbps)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.worker:
        worker(args)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from autosync_transfer.errors import AutosyncError
    from autosync_transfer.runtime.emulation import available

    ok, why = available()
    if not ok:
        print(f"cannot emulate a cluster: {why}", file=sys.stderr)
        return 2
    try:
        r = run(args)
    except AutosyncError as e:
        print(str(e), file=sys.stderr)
        return 2
    print(f"cluster {args.cluster}: {r['world']} workers, all_reduce of {r['bytes'] / 1e6:.1f} MB "
          f"float32, {args.reps} reps: median {r['median_s']:.3f} s "
          f"(min {r['min_s']:.3f}, max {r['max_s']:.3f})")
    if "tcp_link_gbps" in r:
        print(f"TCP goodput on one link: {r['tcp_link_gbps']:.3f} Gbit/s")
    verdict = "ok" if r["ratio"] >= GOAL_RATIO else f"below goal {GOAL_RATIO}"
    print(f"bus bandwidth {r['bus_gbps']:.3f} Gbit/s vs shaped link {r['link_gbps']:g} Gbit/s: "
          f"ratio {r['ratio']:.3f} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
