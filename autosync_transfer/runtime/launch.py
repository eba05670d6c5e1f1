"""Launchers: how worker processes are started and connected.

- :func:`spawn_local` runs a Python function on W local processes joined in a gloo group over
  loopback (tests, small experiments, the library API).
- :class:`WorkerPool` (``runtime/trial.py``) starts persistent trial workers either locally or
  inside the network namespaces of an emulated cluster (``runtime/emulation.py``).
- torchrun: see ``docs/torchrun.md`` for the exact commands per node; workers started that way
  read their rank and rendezvous from the environment (:func:`init_from_env`).
"""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import Any

from autosync_transfer.errors import AutosyncError, ConfigError

__all__ = ["free_port", "spawn_local", "init_from_env", "WorkerFailed"]


class WorkerFailed(AutosyncError, RuntimeError):
    """A worker process raised, crashed or timed out."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local_entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple,
                 queue: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        result = fn(rank, world, *args)
        # plain pickle: tensors travel by value, not as shared-memory handles that die with us
        queue.put((rank, True, pickle.dumps(result)))
    except BaseException as e:  # reported to the parent
        queue.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_local(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 300) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local gloo processes; return results
    by rank. ``fn`` must be importable (a module-level function)."""
    import multiprocessing as mp
    import queue as queue_mod

    if world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {world_size}")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_local_entry, args=(r, world_size, port, fn, args, q), daemon=True)
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
