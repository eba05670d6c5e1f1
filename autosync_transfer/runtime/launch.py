"""Launchers: how trial workers are started and connected.

A :class:`Launcher` is one way of running the workers of a cluster; each one opens a
:class:`~autosync_transfer.runtime.trial.TrialPool` (``launcher.pool(domain, protocol)``) that
measures strategy after strategy with the same interface, so the collector and the search have
one path for all of them:

- :class:`LocalLauncher` (``local``): one process per worker on this host, joined over loopback;
- :class:`EmulatedLauncher` (``emulated``): one network namespace per node of the cluster spec,
  NICs shaped to its bandwidths (``runtime/emulation.py``; needs root);
- :class:`TorchrunLauncher` (``torchrun``): a real cluster; the workers are started by hand on
  every node with torchrun (:meth:`TorchrunLauncher.worker_command`, ``docs/torchrun.md``) and
  follow a job queue the pool writes.

:data:`LAUNCHERS` maps the names to the classes once; :func:`get_launcher` resolves a name.
Also here: :func:`spawn_local` runs a Python function on W local gloo processes (tests, the
library API), and :func:`init_from_env` joins the process group torchrun describes.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import socket
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autosync_transfer.errors import AutosyncError, ConfigError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.runtime.trial import Protocol, TrialPool

__all__ = [
    "free_port", "spawn_local", "init_from_env", "WorkerFailed", "Launcher", "ProcessLauncher",
    "LocalLauncher", "EmulatedLauncher", "TorchrunLauncher", "LAUNCHERS", "get_launcher",
    "as_launcher", "open_pool",
]


class WorkerFailed(AutosyncError, RuntimeError):
    """A worker process raised, crashed or timed out."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end_with(caller: int) -> None:
    """Kill this process when process ``caller`` ends: a daemon thread waits on the caller's
    pidfd (Linux; elsewhere it polls every second). A :func:`spawn_local` process is the
    forkserver's child, and the server outlives a killed caller while any of its children lives,
    so the processes watch the caller itself: one killed, even with SIGKILL, leaves no worker
    training on behind it."""
    import signal
    import threading

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    try:
        fd = os.pidfd_open(caller)
    except ProcessLookupError:
        die()
        return
    except (AttributeError, OSError):  # no pidfd: poll
        def poll() -> None:
            import time

            while True:
                time.sleep(1.0)
                try:
                    os.kill(caller, 0)
                except (ProcessLookupError, PermissionError):  # gone, or its pid reused
                    die()

        threading.Thread(target=poll, name="spawn_local-caller", daemon=True).start()
        return

    def wait() -> None:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll()  # readable once the caller has ended
        os.close(fd)
        die()

    threading.Thread(target=wait, name="spawn_local-caller", daemon=True).start()


def _local_entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple,
                 queue: Any, environ: dict[str, str] | None = None,
                 caller: int | None = None) -> None:
    if caller is not None:
        _end_with(caller)
    import torch
    import torch.distributed as dist

    if environ is not None:  # the caller's environment at the call, as a spawned process has it
        os.environ.clear()
        os.environ.update(environ)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    torch.set_num_threads(1)
    try:
        # the caller's store, listening since before this process started
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=_STORE_TIMEOUT)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
        result = fn(rank, world, *args)
        # plain pickle: tensors travel by value, not as shared-memory handles that die with us
        queue.put((rank, True, pickle.dumps(result)))
    except BaseException as e:  # reported to the parent
        queue.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


#: the rendezvous store's limit on one wait: gloo's default process-group timeout
_STORE_TIMEOUT = datetime.timedelta(minutes=30)
#: what the processes of :func:`spawn_local` find imported: they fork from a server that imported
#: these once (torch's compiler modules are imported by the first optimizer a process builds)
_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "autosync_transfer.runtime.ddp")


def spawn_local(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 300) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local gloo processes; return results
    by rank. ``fn`` must be importable (a module-level function).

    The processes start as spawned ones do (a fresh interpreter's state: the caller's
    ``sys.path``, working folder and environment at the call, ``fn`` imported by name), but
    fork from multiprocessing's forkserver, which imports torch and the runtime once per calling
    process, and they end without the interpreter's teardown: a call costs its work, not two
    torch start-ups and shutdowns per rank. The server stays idle for the life of the calling
    process (about 300 MB resident: torch imported) and ends with it; the processes end with it
    too, even when it is killed (they watch it)."""
    import multiprocessing as mp
    import queue as queue_mod

    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(_PRELOAD))  # read when the server starts (first call)
    q = ctx.Queue()
    # the rendezvous store is the caller's, bound to a port the system picks and held for the
    # call: no port chosen first and bound later, which another process can take in between
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=_STORE_TIMEOUT)
    port = int(store.port)
    environ = dict(os.environ)
    procs = [ctx.Process(target=_local_entry,
                         args=(r, world_size, port, fn, args, q, environ, os.getpid()),
                         daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    import time

    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerFailed(f"local workers timed out after {timeout_s:.0f} s")
            try:
                rank, ok, payload = q.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise WorkerFailed(f"a local worker died with exit code {dead[0].exitcode}") from None
                continue
            if not ok:
                raise WorkerFailed(f"rank {rank} failed: {payload}")
            results[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        del store
    return [results[r] for r in range(world_size)]


def init_from_env(backend: str | None = None) -> tuple[int, int]:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT); gloo on CPU, NCCL when CUDA is available."""
    import torch
    import torch.distributed as dist

    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"environment variable {missing[0]} is not set; start workers with torchrun")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


# -- launchers -----------------------------------------------------------------------------------
class Launcher(ABC):
    """One way of starting the trial workers of a cluster (see the module docstring).

    Subclasses set :attr:`name` (the word on the command line) and implement :meth:`pool`.
    A launcher instance serves one pool at a time (an emulated launcher owns its namespaces).
    """

    #: the name in :data:`LAUNCHERS` and in trial records
    name: ClassVar[str]
    #: trials run on this machine only, so its foreign CPU load can disturb them
    runs_here: ClassVar[bool] = True

    def check(self) -> None:
        """A :class:`ConfigError` unless trials can be measured with this launcher here."""

    @abstractmethod
    def pool(self, domain: Domain, protocol: Protocol | None = None, *, seed: int = 0,
             log_dir: str | Path | None = None, workload: Any = None,
             state_path: str | Path | None = None) -> TrialPool:
        """A pool measuring strategies of ``domain`` (use it as a context manager).

        ``workload``: the workload spec the workers import (default: the zoo model named like
        ``domain.model``); ``state_path``: where a launcher keeps files next to a trial store
        (the torchrun job queue)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ProcessLauncher(Launcher):
    """A launcher that starts the worker processes itself (one per rank) for a
    :class:`~autosync_transfer.runtime.trial.WorkerPool`: :meth:`start` prepares the cluster and
    returns the rendezvous address, :meth:`command` places rank ``rank``'s process, :meth:`stop`
    tears down what :meth:`start` built."""

    def pool(self, domain: Domain, protocol: Protocol | None = None, *, seed: int = 0,
             log_dir: str | Path | None = None, workload: Any = None,
             state_path: str | Path | None = None) -> TrialPool:
        from autosync_transfer.runtime.trial import WorkerPool

        return WorkerPool(domain, self, protocol, seed=seed, log_dir=log_dir, workload=workload)

    @abstractmethod
    def start(self, cluster: Cluster) -> str:
        """Prepare ``cluster``'s nodes (idempotent); the address of rank 0 (the rendezvous)."""

    @abstractmethod
    def command(self, node: str, argv: list[str], env: dict[str, str], master_port: int
                ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of a worker on node ``node``."""

    def stop(self) -> None:
        """Undo :meth:`start`."""


class LocalLauncher(ProcessLauncher):
    """Every worker a process on this host, joined over loopback (no bandwidth shaping)."""

    name = "local"

    def start(self, cluster: Cluster) -> str:
        return "127.0.0.1"

    def command(self, node: str, argv: list[str], env: dict[str, str], master_port: int
                ) -> tuple[list[str], dict[str, str]]:
        return argv, {**env, "GLOO_SOCKET_IFNAME": "lo"}


class EmulatedLauncher(ProcessLauncher):
    """Every node a network namespace with its NIC shaped to the cluster's bandwidth
    (:class:`~autosync_transfer.runtime.emulation.EmulatedCluster`; needs root and ``tc``)."""

    name = "emulated"

    def __init__(self, prefix: str = "ast") -> None:
        #: first part of the namespace names (``<prefix>-<run id>-n<i>``, ``...-br``)
        self.prefix = prefix
        self._emu: Any = None

    def check(self) -> None:
        geteuid = getattr(os, "geteuid", None)
        if geteuid is None or geteuid() != 0:
            raise ConfigError("launcher 'emulated' needs root (network namespaces and tc); run "
                              "as root, or use launcher 'local'")
        from autosync_transfer.runtime.emulation import available

        ok, reason = available()
        if not ok:
            raise ConfigError(f"launcher 'emulated' is unavailable here: {reason}")

    def start(self, cluster: Cluster) -> str:
        if self._emu is None:
            from autosync_transfer.runtime.emulation import EmulatedCluster, cleanup_leftovers

            # namespaces of dead runs (SIGKILLed) go first; a live owner's are never touched
            try:
                stale = cleanup_leftovers(self.prefix)
            except ConfigError as e:
                log.warning("cannot remove stale namespaces: %s", e)
            else:
                if stale:
                    log.warning("removed %d namespaces of dead runs: %s", len(stale),
                                ", ".join(stale))
            self._emu = EmulatedCluster(cluster, prefix=self.prefix)
            self._emu.start()
        return self._emu.address_of(cluster.rank_nodes()[0])

    def command(self, node: str, argv: list[str], env: dict[str, str], master_port: int
                ) -> tuple[list[str], dict[str, str]]:
        return (self._emu.exec_prefix(node) + argv,
                {**env, **self._emu.env_for(node, master_port=master_port)})

    def stop(self) -> None:
        if self._emu is not None:
            self._emu.stop()
            self._emu = None


class TorchrunLauncher(Launcher):
    """A real cluster: torchrun workers, started by hand on every node
    (:meth:`worker_command`), follow a job queue that the pool appends to and write one result
    per job (:class:`~autosync_transfer.runtime.torchrun.TorchrunPool`).

    ``queue`` and ``results`` default to ``<state_path>.queue.jsonl`` and
    ``<state_path>.results.jsonl`` of the pool's ``state_path`` (a trial store); ``wait_s`` is
    the longest wait for one result (default: the protocol's watchdog plus 10 minutes).
    """

    name = "torchrun"
    runs_here = False

    def __init__(self, queue: str | Path | None = None, results: str | Path | None = None, *,
                 wait_s: float | None = None, poll_s: float = 0.2) -> None:
        self.queue = Path(queue) if queue is not None else None
        self.results = Path(results) if results is not None else None
        self.wait_s = wait_s
        self.poll_s = poll_s

    def paths(self, state_path: str | Path | None = None) -> tuple[Path, Path]:
        """``(queue, results)``: the given ones, or those next to ``state_path``."""
        if self.queue is not None and self.results is not None:
            return self.queue, self.results
        if state_path is None:
            raise ConfigError("launcher 'torchrun' needs queue and results paths, or a "
                              "state_path (a trial store) to put them next to")
        return (self.queue or Path(f"{state_path}.queue.jsonl"),
                self.results or Path(f"{state_path}.results.jsonl"))

    def pool(self, domain: Domain, protocol: Protocol | None = None, *, seed: int = 0,
             log_dir: str | Path | None = None, workload: Any = None,
             state_path: str | Path | None = None) -> TrialPool:
        from autosync_transfer.runtime.torchrun import TorchrunPool

        queue, results = self.paths(state_path)
        return TorchrunPool(domain, queue, results, protocol, wait_s=self.wait_s,
                            poll_s=self.poll_s)

    def worker_command(self, domain: Domain, protocol: Protocol | None = None, *,
                       state_path: str | Path | None = None, cluster_file: str | None = None,
                       workload: str | None = None, seed: int = 0) -> str:
        """The command to start on every node for a pool of ``domain`` (``<i>`` and the other
        ``<...>`` are the node's values)."""
        from autosync_transfer.runtime.trial import Protocol as _Protocol

        proto = protocol or _Protocol()
        queue, results = self.paths(state_path)
        if workload is not None:
            what = f"--model {workload}"
        else:
            what = f"--domain {domain.model.name if cluster_file else domain.name}"
        spec = f" --cluster-file {cluster_file}" if cluster_file else ""
        seed_opt = f" --seed {seed}" if seed else ""
        # PYTHONSAFEPATH: python -m (torchrun -m) must not import modules from the folder
        # the command is started in
        return (f"PYTHONSAFEPATH=1 torchrun --nnodes {domain.cluster.num_nodes} --node_rank <i> "
                f"--nproc_per_node <workers of node i> --master_addr <node 0> --master_port 29500 "
                f"-m autosync_transfer worker --torchrun --follow {what}{spec} "
                f"--strategies {queue} --results {results} "
                f"--warmup {proto.warmup} --iters {proto.iters} --timeout {proto.timeout_s:g}"
                f"{seed_opt}")


#: the launchers by name (the word on the command line and in trial records)
LAUNCHERS: dict[str, type[Launcher]] = {
    cls.name: cls for cls in (LocalLauncher, EmulatedLauncher, TorchrunLauncher)
}


def get_launcher(name: str) -> type[Launcher]:
    """The launcher class named ``name``."""
    try:
        return LAUNCHERS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"launcher must be one of {', '.join(sorted(LAUNCHERS))}, got {name!r}") from None


def as_launcher(launcher: str | Launcher) -> Launcher:
    """``launcher`` itself, or a new instance of the launcher it names."""
    if isinstance(launcher, Launcher):
        return launcher
    return get_launcher(launcher)()


def open_pool(domain: Domain, launcher: str | Launcher = "local", protocol: Protocol | None = None,
              **kwargs: Any) -> TrialPool:
    """``as_launcher(launcher).pool(domain, protocol, **kwargs)``."""
    return as_launcher(launcher).pool(domain, protocol, **kwargs)
