"""Trial workers: the harness that measures strategies on one rank, and the loops that feed it.

Started by a :class:`~autosync_transfer.runtime.trial.WorkerPool` (locally or inside an emulated
node's network namespace) as ``python -m autosync_transfer.runtime.worker '<json config>'``.
Commands arrive as JSON lines on stdin; every rank answers each with one line on stdout prefixed
by ``@@AST`` (anything else on stdout is ignored). All output meant for people goes to stderr.

Under torchrun there is no controller on stdin: the workers are started with
``autosync-transfer worker --torchrun ...`` (``docs/torchrun.md``), join the group with
:func:`torchrun_harness` and either follow a job queue (:func:`follow_queue`, the torchrun
launcher's pool) or measure a fixed list of strategies (:func:`run_jobs`, which the dataset's
``collect_torchrun`` drives). Rank 0's :class:`Watchdog` turns a trial that outlives its timeout
into a recorded ``timeout`` and exits with :data:`TIMEOUT_EXIT`, so that torchrun ends the job
(``torchrun --max-restarts N`` restarts it, and the recorded trial is skipped).

Every worker imports its workload from a spec string
(:func:`~autosync_transfer.domains.workload.load_workload`: ``zoo:bert-3l``, a bare zoo name,
``path/to/file.py``, ``package.module``, ``...:NAME``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autosync_transfer.strategies.types import TORCH_DDP

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.runtime.accuracy import GradientFidelity
    from autosync_transfer.runtime.trial import TrialResult

__all__ = ["REPLY_PREFIX", "TrialHarness", "main", "TIMEOUT_EXIT", "Watchdog", "STOP",
           "measure_on_all_ranks", "torchrun_harness", "run_jobs", "follow_queue"]

REPLY_PREFIX = "@@AST "


def _to_device(obj: Any, device: str) -> Any:
    """Tensors (alone, or in tuples, lists and dicts) moved to ``device``."""
    if hasattr(obj, "to") and callable(obj.to):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


class TrialHarness:
    """Model, data and process groups of one worker; measures one strategy per call.

    ``workload`` is a workload spec (a zoo model name stays valid); the graph the plans are
    made on is ``graph_json`` (the controller's) or the workload's own.
    """

    def __init__(self, workload: str, cluster_json: str, graph_json: str | None = None,
                 seed: int = 0, lr: float = 1e-3, device: str = "cpu"):
        self.device = device
        self.workload_spec = workload
        self.cluster_json = cluster_json
        self.graph_json = graph_json
        self.seed = seed
        self.lr = lr
        #: the gradient fidelity of the last :meth:`measure` (``None``: not probed)
        self.fidelity: GradientFidelity | None = None

    def setup(self) -> TrialHarness:
        import torch
        import torch.distributed as dist

        from autosync_transfer.domains.cluster import Cluster
        from autosync_transfer.domains.graph import ModelGraph
        from autosync_transfer.domains.workload import call_model, load_workload
        from autosync_transfer.runtime.executor import CommGroups

        torch.set_num_threads(1)
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.cluster = Cluster.model_validate_json(self.cluster_json)
        self.workload = load_workload(self.workload_spec)
        # the controller's graph (it may mark variables differently from the workload's)
        self.graph = (ModelGraph.model_validate_json(self.graph_json) if self.graph_json
                      else self.workload.graph())
        self.module = self.workload.build(self.device, seed=self.seed)
        self.loss = self.workload.loss_fn
        self._call = call_model
        g = torch.Generator().manual_seed(self.seed * 1000 + self.rank)
        self.batches = [_to_device(self.workload.example_batch(self.workload.batch_size, g),
                                   self.device) for _ in range(4)]
        self.groups = CommGroups.create()
        self.opt = torch.optim.SGD(self.module.parameters(), lr=self.lr)
        # every trial starts from the same weights, whatever ran before it in this process
        self.initial_state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        return self

    def _step(self, k: int, sync: Any) -> None:
        inputs, targets = self.batches[k % len(self.batches)]
        self.opt.zero_grad(set_to_none=False)
        model = sync if sync is not None and not hasattr(sync, "finish") else self.module
        out = self._call(model, inputs)
        self.loss(out, targets).backward()
        if sync is not None and hasattr(sync, "finish"):
            sync.finish()
        self.opt.step()

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def measure(self, strategy_json: str | None, warmup: int, iters: int,
                fidelity_steps: int = 0) -> list[float]:
        """Per-iteration seconds on this rank; ``strategy_json=None`` measures torch DDP.

        A lossy strategy then gets ``fidelity_steps`` untimed probe steps (after the timed
        ones, so the times never include the probe): :attr:`fidelity` holds the result
        (``None`` for a lossless strategy, torch DDP, or ``fidelity_steps=0``)."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        from autosync_transfer.runtime.accuracy import is_lossless
        from autosync_transfer.runtime.executor import StrategyExecutor
        from autosync_transfer.runtime.plan import make_plan
        from autosync_transfer.strategies.types import Strategy

        self.fidelity = None
        self.module.load_state_dict(self.initial_state)
        probe = False
        if strategy_json is None:
            sync: Any = DistributedDataParallel(self.module, process_group=self.groups.ar)
        else:
            strategy = Strategy.from_json(strategy_json)
            plan = make_plan(strategy, self.graph, self.cluster)
            sync = StrategyExecutor(self.module, plan, self.groups, seed=self.seed).setup()
            probe = fidelity_steps > 0 and not is_lossless(strategy)
        try:
            for k in range(warmup):
                self._step(k, sync)
            dist.barrier(group=self.groups.ar)
            times = []
            for k in range(iters):
                t0 = time.perf_counter()
                self._step(k, sync)
                times.append(time.perf_counter() - t0)
            if probe:
                self.fidelity = self.probe(sync, fidelity_steps, first=warmup + iters)
            return times
        finally:
            if hasattr(sync, "close"):
                sync.close()
            del sync

    def probe(self, executor: Any, steps: int, first: int = 0) -> GradientFidelity:
        """The gradient fidelity of ``executor`` (a set-up ``StrategyExecutor`` of this
        harness's module) over ``steps`` training steps on this rank's batches ``first``, ...
        (:func:`~autosync_transfer.runtime.fidelity.probe_fidelity`; collective)."""
        from autosync_transfer.runtime.fidelity import probe_fidelity

        def backward(k: int) -> None:
            inputs, targets = self.batches[k % len(self.batches)]
            self.opt.zero_grad(set_to_none=False)
            self.loss(self._call(self.module, inputs), targets).backward()

        return probe_fidelity(executor, backward, steps, step=self.opt.step, first=first)


def _dump(fidelity: GradientFidelity | None) -> dict[str, Any] | None:
    return None if fidelity is None else fidelity.model_dump(mode="json")


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
            times = harness.measure(cmd.get("strategy"), int(cmd["warmup"]), int(cmd["iters"]),
                                    int(cmd.get("fidelity_steps", 0)))
            _reply({"id": tid, "ok": True, "rank": harness.rank, "times": times,
                    "fidelity": _dump(harness.fidelity)})
        except Exception as e:  # the controller records it and restarts the workers
            _reply({"id": tid, "ok": False, "rank": harness.rank,
                    "error": f"{type(e).__name__}: {e}"[:2000]})


def main(argv: list[str] | None = None) -> None:
    """A :class:`~autosync_transfer.runtime.trial.WorkerPool` worker: ``argv[0]`` is its JSON
    config (rank, world size, rendezvous, workload spec, cluster, graph, seed)."""
    import faulthandler
    import signal

    import torch.distributed as dist

    args = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # SIGUSR1 dumps every thread's stack to stderr (the worker log): the watchdog sends it
    # before killing a hung trial, so the log says where it hung
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cfg = json.loads(args[0])
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
        rank=cfg["rank"],
        world_size=cfg["world_size"],
    )
    try:
        workload = cfg.get("workload") or f"zoo:{cfg['model']}"
        harness = TrialHarness(workload, cfg["cluster"], cfg.get("graph"),
                               seed=cfg.get("seed", 0)).setup()
        _reply({"op": "ready", "ok": True, "rank": harness.rank})
        _serve(harness)
    finally:
        dist.destroy_process_group()


#: exit code of a torchrun worker whose trial timed out (after the trial was recorded)
TIMEOUT_EXIT = 124


class Watchdog:
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


def measure_on_all_ranks(harness: TrialHarness, strategy_json: str | None, warmup: int,
                         iters: int, fidelity_steps: int = 0
                         ) -> tuple[str, list[float], dict[str, Any] | None]:
    """Measure on every rank; ``(first error of any rank, [], None)`` or ``("", max over ranks
    of every iteration's time, rank 0's gradient fidelity as a dict or None)``. A strategy that
    raises on some rank is a failed trial."""
    import torch.distributed as dist

    error, times, fidelity = "", [], None
    try:
        # test hook: AUTOSYNC_TEST_FAULT=error makes every rank's trials raise (as a strategy
        # the runtime cannot run does); error:<rank> only that rank's (the others then wait in a
        # collective: the watchdog's case)
        if os.environ.get("AUTOSYNC_TEST_FAULT") in ("error", f"error:{dist.get_rank()}"):
            raise RuntimeError("injected error")
        times = harness.measure(strategy_json, warmup, iters, fidelity_steps)
        fidelity = _dump(harness.fidelity)
    except Exception as e:  # noqa: BLE001 - a failed trial is a result
        error = f"{type(e).__name__}: {e}"[:2000]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (error, times, fidelity))
    errors = [g[0] for g in gathered if g[0]]
    if errors:
        return errors[0], [], None
    return "", [max(ts) for ts in zip(*[g[1] for g in gathered])], gathered[0][2]


def torchrun_harness(domain: Domain, workload: str | None = None, *, seed: int = 0
                     ) -> TrialHarness:
    """Join the process group torchrun describes and set up this rank's harness for
    ``domain`` (its workers import ``workload``, default the zoo model named like
    ``domain.model``); NCCL and this rank's GPU when CUDA is available, else gloo on CPU."""
    import torch
    import torch.distributed as dist

    from autosync_transfer.errors import ConfigError
    from autosync_transfer.runtime.launch import init_from_env

    _, world = init_from_env()
    if world != domain.cluster.world_size:
        dist.destroy_process_group()
        raise ConfigError(f"WORLD_SIZE={world} but cluster {domain.cluster.name!r} has "
                          f"{domain.cluster.world_size} workers")
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if dist.get_backend() == "nccl" else "cpu"
    if device != "cpu":
        torch.cuda.set_device(device)
    spec = workload or f"zoo:{domain.model.name}"
    return TrialHarness(spec, domain.cluster.model_dump_json(), domain.model.model_dump_json(),
                        seed=seed, device=device).setup()


def _result(error: str, times: list[float], wall_s: float,
            fidelity: dict[str, Any] | None = None) -> TrialResult:
    from autosync_transfer.runtime.trial import TrialResult, fidelity_of

    return (TrialResult("failed", error=error, wall_s=wall_s) if error
            else TrialResult("ok", times, wall_s=wall_s, fidelity=fidelity_of(fidelity)))


def _timeout(timeout_s: float, wall_s: float) -> TrialResult:
    from autosync_transfer.runtime.trial import TrialResult

    return TrialResult("timeout", error=f"timeout after {timeout_s:g} s (torchrun watchdog)",
                       wall_s=wall_s)


def _measure_job(harness: TrialHarness, line: str, warmup: int, iters: int,
                 watchdog: Watchdog, on_result: Callable[[TrialResult], None],
                 fidelity_steps: int = 0) -> None:
    """One job on every rank; rank 0 hands its result (or its timeout) to ``on_result``."""
    t0 = time.monotonic()
    if harness.rank == 0:
        watchdog.start(lambda: on_result(_timeout(watchdog.timeout_s, time.monotonic() - t0)))
    error, times, fidelity = measure_on_all_ranks(
        harness, None if line == TORCH_DDP else line, warmup, iters, fidelity_steps)
    if harness.rank == 0 and watchdog.finish():
        on_result(_result(error, times, time.monotonic() - t0, fidelity))


def run_jobs(harness: TrialHarness, lines: list[str], *, warmup: int, iters: int,
             timeout_s: float, on_result: Callable[[str, TrialResult], None],
             fidelity_steps: int = 0) -> None:
    """Measure every line of ``lines`` (a strategy as JSON, or ``torch_ddp``; the same list on
    every rank) with every rank, probing lossy strategies' gradient fidelity on
    ``fidelity_steps`` untimed steps; rank 0 calls ``on_result(line, result)`` for each. A trial
    past ``timeout_s`` is handed over as ``timeout``, then the process exits with
    :data:`TIMEOUT_EXIT` (see :class:`Watchdog`)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    watchdog = Watchdog(timeout_s)
    for line in lines:
        _measure_job(harness, line, warmup, iters, watchdog,
                     lambda result, line=line: on_result(line, result), fidelity_steps)


#: the line that ends a job queue
STOP = "stop"


def follow_queue(harness: TrialHarness, queue: str, results: str, *, warmup: int, iters: int,
                 timeout_s: float = 300.0, fidelity_steps: int = 0,
                 on_result: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Serve a job queue (the torchrun launcher's pool,
    :class:`~autosync_transfer.runtime.torchrun.TorchrunPool`): every line ``{"record_id",
    "strategy"[, "warmup", "iters", "fidelity_steps"]}`` (a strategy object or ``"torch_ddp"``)
    is measured by every rank; rank 0 appends ``{"record_id", "status", "iteration_times_s",
    "wall_s", "error", "fidelity"}`` to ``results`` (fsynced) and passes the row to
    ``on_result``. Jobs whose record
    id is in ``results`` already are skipped; a line ``stop`` ends the loop. A job that outlives
    ``timeout_s`` gets a ``timeout`` row, then the worker exits (see :class:`Watchdog`)."""
    from autosync_transfer._files import append_line
    from autosync_transfer.errors import AutosyncError, ConfigError

    watchdog = Watchdog(timeout_s)
    problem: str | None = None
    done: set[str] = set()
    if harness.rank == 0:
        try:
            for no, line in _numbered(results, 0, 0, "torchrun results file")[0]:
                try:
                    done.add(json.loads(line)["record_id"])
                except (ValueError, KeyError, TypeError):
                    raise ConfigError(f"torchrun results file {results!r}: line {no} is not a "
                                      f"result; move it away and start again") from None
        except AutosyncError as e:
            problem = str(e)
    problem = harness.broadcast(problem)
    if problem is not None:  # every rank stops, none waits for a broadcast that never comes
        raise ConfigError(problem)
    offset, line_no = 0, 0
    while True:
        jobs: list[Any] = []
        if harness.rank == 0:
            lines, offset, line_no = _new_lines(queue, offset, line_no)
            for no, line in lines:
                if line == STOP:
                    jobs.append(STOP)
                    break
                try:
                    job = json.loads(line)
                    rid = job["record_id"]
                    job["strategy"]  # noqa: B018 - a job names its strategy
                except (ValueError, KeyError, TypeError):
                    jobs = [{"error": f"torchrun job queue {queue!r}: line {no} is not a job"}]
                    break
                if rid not in done:
                    jobs.append(job)
        for job in harness.broadcast(jobs):
            if job == STOP:
                return
            if "error" in job:
                raise ConfigError(job["error"])
            strategy = job["strategy"]
            line = TORCH_DDP if strategy == TORCH_DDP else json.dumps(strategy)

            def record(result: TrialResult, rid: str = job["record_id"]) -> None:
                row = {"record_id": rid, "status": result.status, "error": result.error,
                       "iteration_times_s": result.iteration_times_s, "wall_s": result.wall_s,
                       "fidelity": _dump(result.fidelity)}
                append_line(results, json.dumps(row), "torchrun results file")
                done.add(rid)
                if on_result is not None:
                    on_result(row)

            _measure_job(harness, line, int(job.get("warmup", warmup)),
                         int(job.get("iters", iters)), watchdog, record,
                         int(job.get("fidelity_steps", fidelity_steps)))


def _numbered(path: str, offset: int, line_no: int, what: str
              ) -> tuple[list[tuple[int, str]], int, int]:
    """The non-blank complete lines of ``path`` after ``offset`` with their line numbers (read
    under the file's lock; a torn last line is left for its writer), the new offset and the
    number of the last line read."""
    from autosync_transfer._files import complete_lines

    raw, offset = complete_lines(path, what, offset)
    out = []
    for r in raw:
        line_no += 1
        text = r.decode(errors="replace").strip()
        if text:
            out.append((line_no, text))
    return out, offset, line_no


def _new_lines(path: str, offset: int, line_no: int, poll_s: float = 0.2
               ) -> tuple[list[tuple[int, str]], int, int]:
    """Block until ``path`` has complete lines past ``offset``; return them (numbered), the new
    offset and line number."""
    while True:
        lines, offset, line_no = _numbered(path, offset, line_no, "torchrun job queue")
        if lines:
            return lines, offset, line_no
        time.sleep(poll_s)


def _exit_now(code: int = 0) -> None:
    """End a finished worker without the interpreter's teardown (torch and its compiler modules
    take about a second of CPU to tear down, paid by every worker of every pool at close): its
    replies are flushed, its logs closed, its process group already destroyed."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
    _exit_now(0)
