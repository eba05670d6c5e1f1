"""What a row-sparse parameter-server exchange costs beyond a dense one, on an emulated cluster.

The runtime's sparse PS exchange (``runtime/executor.py``: ``_push``, ``_gather``,
``_send_result``, ``_post_result_recv``) sends a header (the row count), then the indices and
the values, and the receiver posts the payload's receives only once the header is in: two
dependent hops each way where a dense exchange has one. The step-time simulator counts one
message per exchange, and under-predicts NCF's step (sparse embedding tables on PS) by 0.4-0.6x
with the shipped profile and calibration.

Between the first workers of the cluster's first two nodes, this measures the round trip of
``--rows`` rows of ``--width`` float32 pushed and pulled back with the executor's sparse protocol
and with one dense message each way, ``--reps`` times each, first with the other workers idle,
then with them running a small training step in a loop (as they do during a real step, sharing
the host's cores). Printed per cluster, in ms: the median (and fastest) round trip of each, and
the sparse protocol's extra cost per exchange (median sparse - median dense), side by side.

    sudo .venv/bin/python research/probes/sparse_exchange.py --domains ncf-A,ncf-B,ncf-C
        [--domains examples/clusters/heldout.yml]  (a cluster file stands for its cluster)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

_REPLY = "@@SPX "


def _exchange(rank: int, peer: int, first: bool, sparse: bool, rows: int, width: int) -> None:
    """One push and pull between ``rank`` and ``peer`` (``first`` pushes first)."""
    import torch
    import torch.distributed as dist

    def send(idx: torch.Tensor, vals: torch.Tensor) -> list:
        if not sparse:
            return [dist.isend(vals, peer)]
        return [dist.isend(torch.tensor([idx.numel()]), peer), dist.isend(idx, peer),
                dist.isend(vals, peer)]

    def recv() -> tuple[torch.Tensor, torch.Tensor]:
        if not sparse:
            vals = torch.empty(rows, width)
            dist.recv(vals, peer)
            return torch.arange(rows), vals
        hdr = torch.empty(1, dtype=torch.int64)
        dist.recv(hdr, peer)  # the payload's receives wait for the header, as in the executor
        idx, vals = torch.empty(int(hdr), dtype=torch.int64), torch.empty(int(hdr), width)
        works = [dist.irecv(idx, peer), dist.irecv(vals, peer)]
        for w in works:
            w.wait()
        return idx, vals

    if first:
        works = send(torch.arange(rows), torch.randn(rows, width))
        recv()
    else:
        works = send(*recv())
    for w in works:
        w.wait()


def worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
                            rank=cfg["rank"], world_size=cfg["world_size"])
    rank, rank_nodes = dist.get_rank(), cfg["rank_nodes"]
    nodes = list(dict.fromkeys(rank_nodes))
    a, b = rank_nodes.index(nodes[0]), rank_nodes.index(nodes[1])
    net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    inp = torch.randn(64, 512)
    out: dict[str, dict[str, float]] = {}
    for loaded in (False, True):
        for sparse in (False, True):
            dist.barrier()
            if rank in (a, b):
                times = []
                for _ in range(cfg["reps"] + 1):
                    t0 = time.perf_counter()
                    _exchange(rank, b if rank == a else a, rank == a, sparse, cfg["rows"],
                              cfg["width"])
                    times.append(time.perf_counter() - t0)
                if rank == a:
                    key = f"{'sparse' if sparse else 'dense'} {'loaded' if loaded else 'idle'}"
                    out[key] = {"median": statistics.median(times[1:]), "min": min(times[1:])}
            elif loaded:  # the other workers compute meanwhile (longer than the exchanges take)
                t_end = time.perf_counter() + cfg["load_s"]
                while time.perf_counter() < t_end:
                    net.zero_grad()
                    net(inp).square().mean().backward()
    dist.barrier()
    if rank == a:
        print(_REPLY + json.dumps(out), flush=True)
    dist.destroy_process_group()


def measure(domain_name: str, cfg: dict) -> dict:
    """The worker's figures on ``domain_name``'s cluster (a catalog domain, or a cluster YAML)."""
    from pathlib import Path

    from autosync_transfer.domains.catalog import resolve_domain
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.runtime.launch import as_launcher, free_port
    from autosync_transfer.runtime.trial import _worker_env

    if domain_name.endswith((".yml", ".yaml")):
        path = Path(domain_name)
        cluster = Cluster.from_yaml(path.read_text(), name=path.stem)
    else:
        cluster = resolve_domain(domain_name).cluster
    if len(cluster.nodes) < 2:
        raise SystemExit(f"{domain_name}: its cluster has one node, no exchange crosses a NIC")
    launcher = as_launcher("emulated")
    rank_nodes = cluster.rank_nodes()
    master, port = launcher.start(cluster), free_port()
    procs = []
    try:
        for rank in range(cluster.world_size):
            c = {**cfg, "rank": rank, "world_size": cluster.world_size, "master_addr": master,
                 "master_port": port, "rank_nodes": rank_nodes}
            argv, env = launcher.command(rank_nodes[rank], [sys.executable, __file__, "--worker",
                                                            json.dumps(c)], _worker_env(), port)
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=env))
        outs = [p.communicate(timeout=cfg["timeout_s"])[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        launcher.stop()
    for text in outs:
        for line in text.decode(errors="replace").splitlines():
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY):])
    raise SystemExit(f"{domain_name}: no result (workers exited {[p.returncode for p in procs]})")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", default="ncf-A,ncf-B,ncf-C")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--load-s", type=float, default=1.5)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    args = ap.parse_args()
    cfg = {"rows": args.rows, "width": args.width, "reps": args.reps, "load_s": args.load_s,
           "timeout_s": args.timeout_s}
    print(f"# python {' '.join(sys.argv)}")
    print(f"# round trip of {args.rows} x {args.width} float32 rows, ms: median (fastest); "
          f"extra = sparse - dense, medians")
    print(f"{'cluster':10s} {'dense idle':>14s} {'sparse idle':>14s} {'extra':>6s} "
          f"{'dense loaded':>14s} {'sparse loaded':>14s} {'extra':>6s}")
    for name in args.domains.split(","):
        r = measure(name, cfg)

        def cell(k: str) -> str:
            return f"{r[k]['median'] * 1e3:6.2f} ({r[k]['min'] * 1e3:5.2f})"

        extra = {w: (r[f"sparse {w}"]["median"] - r[f"dense {w}"]["median"]) * 1e3
                 for w in ("idle", "loaded")}
        label = name.rsplit("/", 1)[-1].removesuffix(".yml").removesuffix(".yaml")
        print(f"{label:10s} {cell('dense idle'):>14s} {cell('sparse idle'):>14s} "
              f"{extra['idle']:6.2f} {cell('dense loaded'):>14s} {cell('sparse loaded'):>14s} "
              f"{extra['loaded']:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
