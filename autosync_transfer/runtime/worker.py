"""A persistent trial worker: joins the process group once, then measures strategy after strategy.

Started by :class:`autosync_transfer.runtime.trial.WorkerPool` (locally or inside an emulated
node's network namespace) as ``python -m autosync_transfer.runtime.worker '<json config>'``.
Commands arrive as JSON lines on stdin; every rank answers each with one line on stdout prefixed
by ``@@AST`` (anything else on stdout is ignored). All output meant for people goes to stderr.

Under torchrun (``--torchrun``) there is no controller: rank 0 reads strategies from a JSON Lines
file, broadcasts each one, and appends the results to a trial store.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

__all__ = ["REPLY_PREFIX", "TrialHarness", "main"]

REPLY_PREFIX = "@@AST "


class TrialHarness:
    """Model, data and process groups of one worker; measures one strategy per call."""

    def __init__(self, model_name: str, cluster_json: str, graph_json: str | None = None,
                 seed: int = 0, lr: float = 1e-3, device: str = "cpu"):
        self.device = device
        self.model_name = model_name
        self.cluster_json = cluster_json
        self.graph_json = graph_json
        self.seed = seed
        self.lr = lr

    def setup(self) -> TrialHarness:
        import torch
        import torch.distributed as dist

        from autosync_transfer.domains.cluster import Cluster
        from autosync_transfer.domains.graph import ModelGraph
        from autosync_transfer.domains.zoo import build_module, example_batch, loss_fn, model_graph
        from autosync_transfer.runtime.executor import CommGroups

        torch.set_num_threads(1)
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.cluster = Cluster.model_validate_json(self.cluster_json)
        # the controller's graph (it may mark variables differently from the zoo's default)
        self.graph = (ModelGraph.model_validate_json(self.graph_json) if self.graph_json
                      else model_graph(self.model_name))
        self.module = build_module(self.model_name, self.device, seed=self.seed)
        self.loss = loss_fn(self.model_name)
        g = torch.Generator().manual_seed(self.seed * 1000 + self.rank)
        self.batches = [example_batch(self.model_name, None, g, device=self.device)
                        for _ in range(4)]
        self.groups = CommGroups.create()
        self.opt = torch.optim.SGD(self.module.parameters(), lr=self.lr)
        # every trial starts from the same weights, whatever ran before it in this process
        self.initial_state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        return self

    def _step(self, k: int, sync: Any) -> None:
        inputs, targets = self.batches[k % len(self.batches)]
        self.opt.zero_grad(set_to_none=False)
        model = sync if sync is not None and not hasattr(sync, "finish") else self.module
        out = model(**inputs)
        self.loss(out, targets).backward()
        if sync is not None and hasattr(sync, "finish"):
            sync.finish()
        self.opt.step()

    def measure(self, strategy_json: str | None, warmup: int, iters: int) -> list[float]:
        """Per-iteration seconds on this rank; ``strategy_json=None`` measures torch DDP."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        from autosync_transfer.runtime.executor import StrategyExecutor
        from autosync_transfer.runtime.plan import make_plan
        from autosync_transfer.strategies.types import Strategy

        self.module.load_state_dict(self.initial_state)
        if strategy_json is None:
            sync: Any = DistributedDataParallel(self.module, process_group=self.groups.ar)
        else:
            plan = make_plan(Strategy.from_json(strategy_json), self.graph, self.cluster)
            sync = StrategyExecutor(self.module, plan, self.groups, seed=self.seed).setup()
        try:
            for k in range(warmup):
                self._step(k, sync)
            dist.barrier(group=self.groups.ar)
            times = []
            for k in range(iters):
                t0 = time.perf_counter()
                self._step(k, sync)
                times.append(time.perf_counter() - t0)
            return times
        finally:
            if hasattr(sync, "close"):
                sync.close()
            del sync


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(REPLY_PREFIX + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _serve(harness: TrialHarness) -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            _reply({"op": "exit", "ok": True})
            return
        if cmd.get("op") == "ping":
            _reply({"op": "ping", "ok": True, "rank": harness.rank})
            continue
        tid = cmd.get("id")
        try:
            if cmd.get("fault") == "crash" and harness.rank == cmd.get("fault_rank", 0):
                os._exit(17)  # test hook: a worker dying mid-trial
            if cmd.get("fault") == "hang" and harness.rank == cmd.get("fault_rank", 0):
                time.sleep(3600)  # test hook: a hung worker
            if cmd.get("fault") == "error" and harness.rank == cmd.get("fault_rank", 0):
                raise RuntimeError("injected error")  # test hook: one rank fails
            times = harness.measure(cmd.get("strategy"), int(cmd["warmup"]), int(cmd["iters"]))
            _reply({"id": tid, "ok": True, "rank": harness.rank, "times": times})
        except Exception as e:  # the controller records it and restarts the workers
            _reply({"id": tid, "ok": False, "rank": harness.rank,
                    "error": f"{type(e).__name__}: {e}"[:2000]})


def main(argv: list[str] | None = None) -> None:
    import faulthandler
    import signal

    args = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # SIGUSR1 dumps every thread's stack to stderr (the worker log): the watchdog sends it
    # before killing a hung trial, so the log says where it hung
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args and args[0] == "--torchrun":
        _torchrun_main(args[1:])
        return
    import torch.distributed as dist

    cfg = json.loads(args[0])
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
        rank=cfg["rank"],
        world_size=cfg["world_size"],
    )
    try:
        harness = TrialHarness(cfg["model"], cfg["cluster"], cfg.get("graph"),
                               seed=cfg.get("seed", 0)).setup()
        _reply({"op": "ready", "ok": True, "rank": harness.rank})
        _serve(harness)
    finally:
        dist.destroy_process_group()


def _torchrun_main(argv: list[str]) -> None:
    """Real multi-node measurement under torchrun: rank 0 reads the strategies and broadcasts
    them; every trial's per-iteration times (max over ranks) are appended by rank 0 to a trial
    store, and trials already in the store are skipped (restart torchrun to resume)."""
    import argparse

    import torch
    import torch.distributed as dist

    from autosync_transfer.runtime.launch import init_from_env

    ap = argparse.ArgumentParser(prog="python -m autosync_transfer.runtime.worker --torchrun")
    ap.add_argument("--domain", required=True, help="catalog domain, or a model name with --cluster-file")
    ap.add_argument("--cluster-file", default=None, help="AutoDist resource-spec YAML of this cluster")
    ap.add_argument("--strategies", required=True, help="JSON Lines of strategies; a line 'torch_ddp' measures DDP")
    ap.add_argument("--store", default=None, help="trial store (JSON Lines) written by rank 0")
    ap.add_argument("--follow", action="store_true",
                    help="serve a search: keep reading jobs appended to --strategies until a line "
                         "'stop', write one result per job to --results")
    ap.add_argument("--results", default=None, help="with --follow: results (JSON Lines) written by rank 0")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    from autosync_transfer.cli._common import resolve_domain
    from autosync_transfer.dataset.collect import TORCH_DDP, record_for
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.runtime.trial import Protocol, TrialResult
    from autosync_transfer.strategies.types import Strategy

    if a.follow != (a.results is not None) or a.follow == (a.store is not None):
        raise SystemExit("--torchrun needs --store, or --follow with --results")
    rank, world = init_from_env()
    domain = resolve_domain(a.domain, a.cluster_file)
    if world != domain.cluster.world_size:
        raise SystemExit(f"WORLD_SIZE={world} but cluster {domain.cluster.name!r} has "
                         f"{domain.cluster.world_size} workers")
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if dist.get_backend() == "nccl" else "cpu"
    if device != "cpu":
        torch.cuda.set_device(device)
    harness = TrialHarness(domain.model.name, domain.cluster.model_dump_json(),
                           domain.model.model_dump_json(), seed=a.seed, device=device).setup()
    if a.follow:
        _follow(harness, a.strategies, a.results, a.warmup, a.iters, rank, world)
        dist.destroy_process_group()
        return
    lines: list[Any] = [None]
    store = TrialStore(a.store)
    if rank == 0:
        done = store.ids()
        todo = []
        with open(a.strategies) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                sid = TORCH_DDP if line == TORCH_DDP else Strategy.from_json(line).id
                if f"{domain.name}/{sid}" not in done:
                    todo.append(line)
        lines = [todo]
    dist.broadcast_object_list(lines, src=0)
    proto = Protocol(warmup=a.warmup, iters=a.iters)
    for line in lines[0]:
        strategy = None if line == TORCH_DDP else Strategy.from_json(line)
        t0 = time.monotonic()
        times = harness.measure(None if strategy is None else line, a.warmup, a.iters)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, times)
        if rank == 0:
            result = TrialResult("ok", [max(ts) for ts in zip(*gathered)],
                                 wall_s=time.monotonic() - t0)
            sid = TORCH_DDP if strategy is None else strategy.id
            store.append(record_for(domain, strategy, result, proto, "torchrun", seed=a.seed,
                                    record_id=f"{domain.name}/{sid}"))
            print(f"{sid}: median {result.median_s * 1000:.1f} ms/iter", file=sys.stderr, flush=True)
    dist.destroy_process_group()


#: the line that ends a --follow job queue
STOP = "stop"


def _new_lines(path: str, offset: int, poll_s: float = 0.2) -> tuple[list[str], int]:
    """Block until ``path`` has complete lines past ``offset``; return them and the new offset."""
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n")
        if end >= 0:
            chunk = data[:end + 1]
            lines = [ln.strip() for ln in chunk.decode().splitlines() if ln.strip()]
            if lines:
                return lines, offset + len(chunk)
            offset += len(chunk)
        time.sleep(poll_s)


def _follow(harness: Any, queue: str, results: str, warmup: int, iters: int, rank: int,
            world: int) -> None:
    """Serve a search's job queue: every line ``{"record_id", "strategy"}`` (a strategy object
    or ``"torch_ddp"``) is measured by every rank; rank 0 appends ``{"record_id", "status",
    "iteration_times_s", "wall_s", "error"}`` to ``results`` (fsynced). Jobs whose record id is
    in ``results`` already are skipped; a line ``stop`` ends the job."""
    import json

    import torch.distributed as dist

    offset = 0
    done: set[str] = set()
    if rank == 0 and os.path.exists(results):
        with open(results) as f:
            for line in f:
                try:
                    done.add(json.loads(line)["record_id"])
                except (ValueError, KeyError, TypeError):
                    continue
    while True:
        batch: list[Any] = [None]
        if rank == 0:
            lines, offset = _new_lines(queue, offset)
            jobs: list[Any] = []
            for line in lines:
                if line == STOP:
                    jobs.append(STOP)
                    break
                job = json.loads(line)
                if job["record_id"] not in done:
                    jobs.append(job)
            batch = [jobs]
        dist.broadcast_object_list(batch, src=0)
        for job in batch[0]:
            if job == STOP:
                return
            strategy = job["strategy"]
            line = None if strategy == "torch_ddp" else json.dumps(strategy)
            t0 = time.monotonic()
            error, times = "", []
            try:
                times = harness.measure(line, warmup, iters)
            except Exception as e:  # noqa: BLE001 - a failed trial is a result
                error = f"{type(e).__name__}: {e}"
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, (error, times))
            if rank == 0:
                errors = [g[0] for g in gathered if g[0]]
                row = {"record_id": job["record_id"], "status": "failed" if errors else "ok",
                       "error": errors[0] if errors else "",
                       "iteration_times_s": [] if errors else [max(ts) for ts in zip(*[g[1] for g in gathered])],
                       "wall_s": time.monotonic() - t0}
                with open(results, "a") as f:
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                done.add(job["record_id"])
                print(f"{job['record_id']}: {row['status']}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
