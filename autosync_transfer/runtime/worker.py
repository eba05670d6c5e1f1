"""A persistent trial worker: joins the process group once, then measures strategy after strategy.

Started by :class:`autosync_transfer.runtime.trial.WorkerPool` (locally or inside an emulated
node's network namespace) as ``python -m autosync_transfer.runtime.worker '<json config>'``.
Commands arrive as JSON lines on stdin; every rank answers each with one line on stdout prefixed
by ``@@AST`` (anything else on stdout is ignored). All output meant for people goes to stderr.

Under torchrun (``--torchrun``) there is no controller: rank 0 reads strategies from a JSON Lines
file, broadcasts each one, and appends the results to a trial store. A strategy that raises on
any rank is stored as ``failed``; a trial that outlives ``--timeout`` (a hang, a rank that died)
is stored as ``timeout`` by rank 0, which then exits with code 124 so that torchrun ends the job
(``torchrun --max-restarts N`` restarts it, and the recorded trial is skipped).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
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


#: exit code of a torchrun worker whose trial timed out (after the trial was recorded)
TIMEOUT_EXIT = 124


class _Watchdog:
    """Rank 0's per-trial timer under torchrun.

    :meth:`start` arms it for one trial (its measurement and the gathering of every rank's
    times); if the trial is not :meth:`finish`-ed within ``timeout_s``, ``on_timeout`` records the
    trial and the process exits with :data:`TIMEOUT_EXIT` (the other ranks, stuck in a collective,
    are ended by torchrun). ``finish`` and the timer exclude each other, so a trial is recorded
    once: as finished or as timed out.
    """

    def __init__(self, timeout_s: float, exit: Callable[[int], Any] = os._exit) -> None:
        self.timeout_s = timeout_s
        self._exit = exit
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._done = True

    def start(self, on_timeout: Callable[[], None]) -> None:
        self._done = False

        def fire() -> None:
            with self._lock:
                if self._done:
                    return
                self._done = True
                try:
                    on_timeout()
                finally:
                    print(f"trial timed out after {self.timeout_s:g} s; recorded, exiting with "
                          f"code {TIMEOUT_EXIT}", file=sys.stderr, flush=True)
                    self._exit(TIMEOUT_EXIT)

        self._timer = threading.Timer(self.timeout_s, fire)
        self._timer.daemon = True
        self._timer.start()

    def finish(self) -> bool:
        """Disarm; False when the timer has fired (the trial is recorded as timed out)."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        if self._timer is not None:
            self._timer.cancel()
        return True


def _read_strategies(path: str, domain: Any, done: set[str]) -> list[str] | str:
    """The lines of ``path`` (strategies as JSON, or ``torch_ddp``) not measured yet, each
    checked against ``domain``; or a one-line description of the first bad line."""
    from autosync_transfer.dataset.collect import TORCH_DDP
    from autosync_transfer.errors import StrategyValidationError
    from autosync_transfer.strategies.types import Strategy
    from autosync_transfer.strategies.validate import validate

    todo = []
    try:
        f = open(path)  # noqa: SIM115 - closed below
    except OSError as e:
        return f"--strategies {path}: {e.strerror}"
    with f:
        for no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if line == TORCH_DDP:
                sid = TORCH_DDP
            else:
                try:
                    strategy = Strategy.from_json(line)
                    validate(strategy, domain)
                except (ValueError, StrategyValidationError) as e:
                    why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    return f"--strategies {path} line {no}: {why}"
                sid = strategy.id
            if f"{domain.name}/{sid}" not in done:
                todo.append(line)
    return todo


def _measure_all(harness: Any, line: str | None, warmup: int, iters: int, world: int
                 ) -> tuple[str, list[float]]:
    """Measure on every rank; ``(first error of any rank, "")`` or ``("", max over ranks of
    every iteration's time)``. A strategy that raises on some rank is a failed trial."""
    import torch.distributed as dist

    error, times = "", []
    try:
        # test hook: AUTOSYNC_TEST_FAULT=error makes every rank's trials raise (as a strategy
        # the runtime cannot run does); error:<rank> only that rank's (the others then wait in a
        # collective: the watchdog's case)
        if os.environ.get("AUTOSYNC_TEST_FAULT") in ("error", f"error:{dist.get_rank()}"):
            raise RuntimeError("injected error")
        times = harness.measure(line, warmup, iters)
    except Exception as e:  # noqa: BLE001 - a failed trial is a result
        error = f"{type(e).__name__}: {e}"[:2000]
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (error, times))
    errors = [g[0] for g in gathered if g[0]]
    if errors:
        return errors[0], []
    return "", [max(ts) for ts in zip(*[g[1] for g in gathered])]


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
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a trial may take before rank 0 records it as timed out and "
                         f"exits with code {TIMEOUT_EXIT} (default 300)")
    a = ap.parse_args(argv)
    if not a.timeout > 0:
        raise SystemExit(f"--timeout must be > 0, got {a.timeout}")

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
        _follow(harness, a.strategies, a.results, a.warmup, a.iters, rank, world, a.timeout)
        dist.destroy_process_group()
        return
    lines: list[Any] = [None]
    store = TrialStore(a.store)
    if rank == 0:
        lines = [_read_strategies(a.strategies, domain, store.ids())]
    dist.broadcast_object_list(lines, src=0)
    if isinstance(lines[0], str):  # a bad strategies file: nothing is measured or written
        if rank == 0:
            print(f"error: {lines[0]}", file=sys.stderr, flush=True)
        dist.destroy_process_group()
        raise SystemExit(2)
    proto = Protocol(warmup=a.warmup, iters=a.iters, timeout_s=a.timeout)
    watchdog = _Watchdog(a.timeout)
    for line in lines[0]:
        strategy = None if line == TORCH_DDP else Strategy.from_json(line)
        sid = TORCH_DDP if strategy is None else strategy.id
        t0 = time.monotonic()

        def store_result(result: TrialResult, strategy: Strategy | None = strategy,
                         sid: str = sid) -> None:
            store.append(record_for(domain, strategy, result, proto, "torchrun", seed=a.seed,
                                    record_id=f"{domain.name}/{sid}"))

        if rank == 0:
            watchdog.start(lambda: store_result(TrialResult(
                "timeout", error=f"timeout after {a.timeout:g} s (torchrun watchdog)",
                wall_s=time.monotonic() - t0)))
        error, times = _measure_all(harness, None if strategy is None else line, a.warmup,
                                    a.iters, world)
        if rank == 0 and watchdog.finish():
            wall = time.monotonic() - t0
            result = (TrialResult("failed", error=error, wall_s=wall) if error
                      else TrialResult("ok", times, wall_s=wall))
            store_result(result)
            what = (f"failed: {error}" if error
                    else f"median {result.median_s * 1000:.1f} ms/iter")
            print(f"{sid}: {what}", file=sys.stderr, flush=True)
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
            world: int, timeout_s: float = 300.0) -> None:
    """Serve a search's job queue: every line ``{"record_id", "strategy"}`` (a strategy object
    or ``"torch_ddp"``) is measured by every rank; rank 0 appends ``{"record_id", "status",
    "iteration_times_s", "wall_s", "error"}`` to ``results`` (fsynced). Jobs whose record id is
    in ``results`` already are skipped; a line ``stop`` ends the job. A job that outlives
    ``timeout_s`` gets a ``timeout`` row, then the worker exits (see :class:`_Watchdog`)."""
    import json

    import torch.distributed as dist

    offset = 0
    done: set[str] = set()
    watchdog = _Watchdog(timeout_s)
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
            if rank == 0:
                watchdog.start(lambda job=job, t0=t0: _append_row(results, {
                    "record_id": job["record_id"], "status": "timeout",
                    "error": f"timeout after {timeout_s:g} s (torchrun watchdog)",
                    "iteration_times_s": [], "wall_s": time.monotonic() - t0}))
            error, times = _measure_all(harness, line, warmup, iters, world)
            if rank == 0 and watchdog.finish():
                row = {"record_id": job["record_id"], "status": "failed" if error else "ok",
                       "error": error, "iteration_times_s": times,
                       "wall_s": time.monotonic() - t0}
                _append_row(results, row)
                done.add(job["record_id"])
                print(f"{job['record_id']}: {row['status']}", file=sys.stderr, flush=True)


def _append_row(path: str, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


if __name__ == "__main__":
    main()
