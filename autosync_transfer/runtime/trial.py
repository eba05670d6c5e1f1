"""The measurement protocol and persistent trial workers.

Protocol (AutoSync's): ``warmup`` untimed iterations, then ``iters`` timed ones; the time of an
iteration is the maximum over ranks; a trial keeps every iteration time and their median. A lossy
strategy then gets ``fidelity_steps`` untimed probe steps
(:func:`~autosync_transfer.runtime.fidelity.probe_fidelity`): the trial's ``fidelity``.

A :class:`TrialPool` measures strategy after strategy of one domain (``run(strategy) ->
TrialResult``); every :class:`~autosync_transfer.runtime.launch.Launcher` opens one.
:class:`WorkerPool` (the local and emulated launchers) keeps one process group per (model,
cluster) alive and runs many strategies in a row, so a trial costs its iterations, not process
start-up. A watchdog turns a hang, a crash or an error into a failed :class:`TrialResult`
(recorded, never fatal) and restarts the workers.

An interruption is not a failure: a :class:`KeyboardInterrupt` (or
:class:`~autosync_transfer.errors.Interrupted`, a SIGTERM) in the controller, or a worker stopped
by SIGINT/SIGTERM, stops the workers and propagates from :meth:`WorkerPool.run`; no result is
returned for the trial in flight. The workers run in their own session, so a Ctrl-C in the
terminal reaches the controller only, which tears them down.
"""

from __future__ import annotations

import json
import logging
import os
import select
import statistics
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer._files import open_nofollow, refuse_symlink
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, Interrupted
from autosync_transfer.runtime.accuracy import GradientFidelity
from autosync_transfer.runtime.launch import Launcher, ProcessLauncher, as_launcher, free_port
from autosync_transfer.runtime.worker import REPLY_PREFIX
from autosync_transfer.strategies.types import Strategy

__all__ = ["Protocol", "TrialResult", "TrialPool", "WorkerPool", "ERROR_GRACE_S",
           "workload_spec_of", "fidelity_of"]

#: after one rank reports an error, how long the others get to report before the trial fails
ERROR_GRACE_S = 5.0

log = logging.getLogger(__name__)


class Protocol(BaseModel):
    """How a trial is measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup: int = Field(default=10, ge=0)
    iters: int = Field(default=40, ge=1)
    timeout_s: float = Field(default=300.0, gt=0, description="watchdog per trial")
    startup_timeout_s: float = Field(default=180.0, gt=0)
    fidelity_steps: int = Field(
        default=3, ge=0,
        description="gradient-fidelity probe of a lossy strategy: untimed steps after the "
                    "timed ones (0: no probe)")


@dataclass
class TrialResult:
    """One measured (or failed) trial. ``status``: ok | failed | timeout."""

    status: Literal["ok", "failed", "timeout"]
    iteration_times_s: list[float] = field(default_factory=list)
    error: str = ""
    wall_s: float = 0.0
    #: the failure is the environment's (workers did not start, pipes broke), not the strategy's
    infrastructure: bool = False
    #: the gradient-fidelity probe of a lossy strategy (``None``: lossless, or not probed)
    fidelity: GradientFidelity | None = None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.iteration_times_s) if self.iteration_times_s else None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class TrialPool(ABC):
    """Measures strategies of one domain, one :meth:`run` at a time; a context manager.

    :meth:`run` never raises for a failed measurement: the result says ``failed`` or
    ``timeout`` (``infrastructure=True`` when the environment, not the strategy, failed).
    """

    domain: Domain
    protocol: Protocol
    launcher: Launcher

    @property
    def launcher_name(self) -> str:
        """The launcher's name, as trial records store it."""
        return self.launcher.name

    @abstractmethod
    def run(self, strategy: Strategy | None, protocol: Protocol | None = None, *,
            job_id: str | None = None) -> TrialResult:
        """Measure ``strategy`` (``None``: torch DDP with default buckets) with ``protocol``
        (default: the pool's). ``job_id`` names the measurement where the launcher keeps
        results across restarts (torchrun's job queue); others ignore it."""

    def close(self) -> None:
        """Stop the workers (a closed pool starts them again on the next :meth:`run`)."""

    def __enter__(self) -> TrialPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def workload_spec_of(domain: Domain, workload: Any = None) -> str:
    """The workload spec the workers of ``domain`` import: ``workload`` (a spec string, or a
    :class:`~autosync_transfer.domains.workload.Workload` with one), else the zoo model named
    like ``domain.model``."""
    from autosync_transfer.domains.workload import absolute_spec

    if workload is None:
        return f"zoo:{domain.model.name}"
    if isinstance(workload, str):
        return absolute_spec(workload)
    spec = getattr(workload, "spec", None)
    if not spec:
        raise ConfigError(
            f"workload {getattr(workload, 'name', workload)!r} has no spec the workers can import "
            f"(load it with load_workload('path/to/file.py'), or give the spec string)")
    return absolute_spec(str(spec))


class WorkerPool(TrialPool):
    """Persistent workers for one domain, started by a process launcher: ``local`` (loopback)
    or ``emulated`` (one network namespace per node, NICs shaped to the cluster's bandwidths),
    given as a name or a :class:`~autosync_transfer.runtime.launch.ProcessLauncher`.

    Every worker imports ``workload`` (a spec string; default the zoo model named like
    ``domain.model``). Use as a context manager; :meth:`run` measures one strategy
    (``None`` = torch DDP).
    """

    def __init__(self, domain: Domain, launcher: str | Launcher = "local",
                 protocol: Protocol | None = None, *, seed: int = 0,
                 log_dir: str | Path | None = None, workload: Any = None):
        resolved = as_launcher(launcher)
        if not isinstance(resolved, ProcessLauncher):
            raise ConfigError(
                f"launcher {resolved.name!r} does not start worker processes itself: open its "
                f"pool with get_launcher({resolved.name!r})(...).pool(domain, protocol)")
        self.domain = domain
        self.launcher = resolved
        self.protocol = protocol or Protocol()
        self.seed = seed
        self.log_dir = Path(log_dir) if log_dir else None
        self.workload = workload_spec_of(domain, workload)
        self._procs: list[subprocess.Popen] = []
        self.restarts = 0
        self._trial_no = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> WorkerPool:
        return self

    def close(self) -> None:
        self._stop_workers(graceful=True)
        self.launcher.stop()

    def _ensure(self) -> None:
        if self._procs and all(p.poll() is None for p in self._procs):
            return
        self._stop_workers(graceful=False)
        self._start_workers()

    def _start_workers(self) -> None:
        cluster = self.domain.cluster
        world = cluster.world_size
        port = free_port()
        rank_nodes = cluster.rank_nodes()
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for rank in range(world):  # before anything starts
                refuse_symlink(self.log_dir / f"worker-{rank}.log", "worker log")
        master = self.launcher.start(cluster)  # rank 0 hosts the rendezvous store
        for rank in range(world):
            cfg = {
                "rank": rank, "world_size": world, "master_addr": master, "master_port": port,
                "workload": self.workload, "cluster": cluster.model_dump_json(),
                "graph": self.domain.model.model_dump_json(),
                "seed": self.seed,
            }
            argv = [sys.executable, "-m", "autosync_transfer.runtime.worker", json.dumps(cfg)]
            stderr: Any = subprocess.DEVNULL
            if self.log_dir:
                # a log folder beside a shared store: never append through a planted link
                stderr = os.fdopen(open_nofollow(self.log_dir / f"worker-{rank}.log",
                                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                                 "worker log"), "ab")
            argv, env = self.launcher.command(rank_nodes[rank], argv, _worker_env(), port)
            try:
                # own session: the terminal's Ctrl-C goes to the controller, which stops them
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=stderr, env=env, start_new_session=True)
            except OSError as e:
                self._stop_workers(graceful=False)
                raise ConfigError(f"cannot start trial workers: {e}") from e
            finally:
                if stderr is not subprocess.DEVNULL:
                    stderr.close()
            self._procs.append(proc)
        replies = self._collect("ready", self.protocol.startup_timeout_s)
        if isinstance(replies, str):
            self._stop_workers(graceful=False)
            raise ConfigError(f"trial workers for {self.domain.name} did not start: {replies}")

    def _stop_workers(self, graceful: bool) -> None:
        procs, self._procs = self._procs, []
        if graceful:
            for p in procs:
                try:
                    if p.poll() is None and p.stdin:
                        p.stdin.write(b'{"op": "exit"}\n')
                        p.stdin.flush()
                except OSError:
                    pass
            deadline = time.monotonic() + 10
            for p in procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for p in procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdin, p.stdout):
                try:
                    if f:
                        f.close()
                except OSError:
                    pass

    # -- protocol -------------------------------------------------------------------------------
    def _collect(self, want: str, timeout_s: float) -> list[dict] | str:
        """One reply per rank for ``want`` (an op or a trial id), or an error string."""
        deadline = time.monotonic() + timeout_s
        replies: dict[int, dict] = {}
        bufs = {i: b"" for i in range(len(self._procs))}
        while len(replies) < len(self._procs):
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = [i for i in range(len(self._procs)) if i not in replies]
                errors = [f"rank {i}: {r.get('error')}" for i, r in replies.items() if not r.get("ok")]
                if errors:
                    return f"failed: {'; '.join(errors)} (ranks {waiting} did not finish)"
                return f"timeout after {timeout_s:.0f} s waiting for {want} from ranks {waiting}"
            fds = {p.stdout.fileno(): i for i, p in enumerate(self._procs)
                   if i not in replies and p.stdout}
            readable, _, _ = select.select(list(fds), [], [], min(left, 1.0))
            for fd in readable:
                i = fds[fd]
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    try:
                        code = self._procs[i].wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        code = None
                    return f"worker {i} exited with code {code}"
                bufs[i] += chunk
                while b"\n" in bufs[i] and i not in replies:
                    line, bufs[i] = bufs[i].split(b"\n", 1)
                    text = line.decode(errors="replace")
                    if not text.startswith(REPLY_PREFIX):
                        continue
                    try:
                        msg = json.loads(text[len(REPLY_PREFIX):])
                    except json.JSONDecodeError:
                        return f"worker {i} sent a malformed reply: {text[:200]!r}"
                    if msg.get("op") == want or msg.get("id") == want:
                        replies[i] = msg
                        if not msg.get("ok"):
                            # the other ranks are likely stuck in a collective with this one:
                            # give them a moment to report, then stop waiting
                            deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
            for i, p in enumerate(self._procs):
                if i not in replies and p.poll() is not None:
                    return f"worker {i} exited with code {p.returncode}"
        return [replies[i] for i in range(len(self._procs))]

    def run(self, strategy: Strategy | None, protocol: Protocol | None = None, *,
            job_id: str | None = None, fault: dict[str, Any] | None = None) -> TrialResult:
        """Measure ``strategy`` (``None``: torch DDP with default buckets). Never raises for a
        failed measurement: the result says ``failed`` / ``timeout`` and the workers restart."""
        proto = protocol or self.protocol
        t0 = time.monotonic()
        try:
            try:
                self._ensure()
            except Exception as e:  # the environment, not the strategy
                return TrialResult("failed", error=str(e), wall_s=time.monotonic() - t0,
                                   infrastructure=True)
            try:
                return self._run(strategy, proto, fault, t0)
            except Exception as e:  # never fatal for a collection: record it, restart the workers
                self._restart()
                return TrialResult("failed", error=f"{type(e).__name__}: {e}",
                                   wall_s=time.monotonic() - t0, infrastructure=True)
        except KeyboardInterrupt:  # Interrupted too: not a result, the workers go
            self._stop_workers(graceful=False)
            raise

    def _run(self, strategy: Strategy | None, proto: Protocol, fault: dict[str, Any] | None,
             t0: float) -> TrialResult:
        self._trial_no += 1
        tid = f"t{self._trial_no}"
        cmd = {"op": "trial", "id": tid, "warmup": proto.warmup, "iters": proto.iters,
               "fidelity_steps": proto.fidelity_steps,
               "strategy": strategy.to_json() if strategy is not None else None}
        if fault:
            cmd.update(fault)
        line = (json.dumps(cmd) + "\n").encode()
        try:
            for p in self._procs:
                assert p.stdin is not None
                p.stdin.write(line)
                p.stdin.flush()
        except OSError as e:
            self._restart()
            return TrialResult("failed", error=f"cannot reach workers: {e}", wall_s=time.monotonic() - t0,
                               infrastructure=True)
        replies = self._collect(tid, proto.timeout_s)
        wall = time.monotonic() - t0
        if isinstance(replies, str):
            stopped_by = self._interrupted_worker()
            if stopped_by is not None:  # someone stopped the workers: not the strategy's doing
                raise Interrupted(stopped_by)
            status: Literal["failed", "timeout"] = "timeout" if replies.startswith("timeout") else "failed"
            replies = replies.removeprefix("failed: ")
            if status == "timeout":
                self._dump_stacks()
            self._restart()
            return TrialResult(status, error=replies, wall_s=wall)
        bad = [r for r in replies if not r.get("ok")]
        if bad:
            self._restart()
            return TrialResult("failed", error=f"rank {bad[0].get('rank')}: {bad[0].get('error')}", wall_s=wall)
        per_rank = [r["times"] for r in replies]
        times = [max(ts) for ts in zip(*per_rank)]
        return TrialResult("ok", iteration_times_s=times, wall_s=wall,
                           fidelity=fidelity_of(replies[0].get("fidelity")))

    def _interrupted_worker(self) -> int | None:
        """The signal (SIGINT / SIGTERM) that stopped a worker, if one was stopped so (a signal
        to the whole process group or session); ``None`` otherwise."""
        import signal

        by_code = {-signal.SIGINT: signal.SIGINT, -signal.SIGTERM: signal.SIGTERM,
                   128 + signal.SIGINT: signal.SIGINT, 128 + signal.SIGTERM: signal.SIGTERM}
        for p in self._procs:
            code = p.poll()
            if code in by_code:
                return int(by_code[code])
        return None

    def _dump_stacks(self) -> None:
        """Ask hung workers to write their threads' stacks to their logs before they are killed."""
        import signal

        for p in self._procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGUSR1)
                except OSError:
                    pass
        time.sleep(1.0)

    def _restart(self) -> None:
        self.restarts += 1
        self._stop_workers(graceful=False)


def fidelity_of(data: Any) -> GradientFidelity | None:
    """A worker's or a results row's ``fidelity`` (``None`` stays ``None``)."""
    return None if data is None else GradientFidelity.model_validate(data)


def _worker_env() -> dict[str, str]:
    """A worker's environment: this one, one thread, and no implicit import path: the workers
    run ``python -m`` (which would put the working folder first on ``sys.path``) with
    ``PYTHONSAFEPATH``, and find this package where the controller found it."""
    import autosync_transfer

    env = dict(os.environ)
    root = str(Path(autosync_transfer.__file__).resolve().parents[1])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({"OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR", "PYTHONUNBUFFERED": "1",
                "PYTHONSAFEPATH": "1",
                "PYTHONPATH": os.pathsep.join([root, *[p for p in paths if p != root]])})
    return env
