"""Profile a workload once on one worker (one process, no process group).

:func:`profile_workload` measures what the step-time simulator needs about a workload on this
worker type (:func:`worker_type`: the processor and the number of compute threads):

* forward, backward and optimizer time of one training step (medians over ``steps`` steps after
  ``warmup`` ones; the step is the trial workers' own: ``zero_grad(set_to_none=False)``, forward,
  loss, backward, ``SGD.step``; ``optimizer_s`` includes ``zero_grad``);
* when each variable's gradient becomes ready during backward (post-accumulate-grad hooks, the
  hooks the executor launches communication from), in seconds after backward started, named as
  in the workload's model graph (the module's ``named_parameters``, which the executor's plans
  use);
* the cost of each synchronization action vs tensor size, with the executor's own torch ops
  (:func:`action_costs`, over a geometric range of sizes up to the largest variable).

The clock: with one compute thread (``threads=1``, the trial workers' setting) the times are the
process's CPU seconds (``clock="cpu"``), which equal the wall time of an undisturbed process but
are not inflated when other processes share the cores; with several threads, wall seconds. The
foreign CPU share during the measurement is watched (:class:`~.cpuwatch.CpuWatch`): a disturbed
profile (share above ``max_foreign_cpu``) waits for a quiet machine (at most ``quiet_wait_s``)
and is measured again, up to ``attempts`` times; the least disturbed attempt is kept and its
share recorded.

:func:`get_profile` returns the stored profile of (graph fingerprint, worker type) when there is
one (shipped or cached, :mod:`autosync_transfer.domains.physics`) and profiles and caches it
otherwise; ``force=True`` measures again.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autosync_transfer.domains.profile import ActionCost, WorkloadProfile
from autosync_transfer.errors import ConfigError

__all__ = ["profile_workload", "get_profile", "worker_type", "processor_name", "action_costs",
           "size_grid", "POWERSGD_RANK_NOTE", "PROFILE_MAX_FOREIGN_CPU"]

log = logging.getLogger(__name__)

#: how PowerSGD's cost scales with its rank (the profile records rank 1)
POWERSGD_RANK_NOTE = ("powersgd is measured at rank 1 on square matrices. Most of a step is "
                      "full-size element-wise work that does not depend on the rank (adding the "
                      "error, the new error M - P(PᵀM), writing the approximation PQᵀ back); only "
                      "the thin products and the QR grow with r. On the 2-core development "
                      "machine rank 8 cost 1.2x (2^16 elements) to 1.5x (2^20) of rank 1, so "
                      "cost(r) ~ cost(1) * (1 + 0.07 (r - 1)) for r <= 8")

#: fraction of a row-sparse gradient's rows one batch touches, in the sparse actions' benchmark
SPARSE_TOUCHED = 1 / 32
#: row width of the sparse actions' benchmark tensors
SPARSE_WIDTH = 256


#: foreign CPU share (of the machine) above which a profile counts as disturbed
PROFILE_MAX_FOREIGN_CPU = 0.25


@functools.cache
def processor_name() -> str:
    """The processor's model name (``/proc/cpuinfo``, read once), else
    :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def worker_type(threads: int = 1, device: str = "cpu") -> str:
    """``cpu:<processor>:threads=<n>``: what a profile was measured on."""
    if device != "cpu":
        raise ConfigError(f"device must be 'cpu' (GPU profiles are not measured yet), got "
                          f"{device!r}")
    return f"cpu:{processor_name()}:threads={threads}"


def _clock(kind: str) -> Callable[[], float]:
    return time.process_time if kind == "cpu" else time.perf_counter


# -- action costs ------------------------------------------------------------------------------
def size_grid(largest: int, *, smallest: int = 256, factor: int = 4) -> list[int]:
    """Tensor sizes (elements) ``smallest, smallest*factor, ...`` while below ``largest``, then
    ``largest`` itself."""
    sizes = [smallest]
    while sizes[-1] * factor < largest:
        sizes.append(sizes[-1] * factor)
    if largest > sizes[-1]:
        sizes.append(int(largest))
    return sizes


def _time_op(op: Callable[[], Any], clock: Callable[[], float], *, min_s: float = 0.01,
             rounds: int = 3, max_reps: int = 1000) -> float:
    """Median over ``rounds`` of the mean seconds of ``op`` (repeated to last ``min_s``)."""
    op()  # warm
    t0 = clock()
    op()
    once = max(clock() - t0, 1e-7)
    reps = max(1, min(max_reps, int(min_s / once)))
    out = []
    for _ in range(rounds):
        t0 = clock()
        for _ in range(reps):
            op()
        out.append((clock() - t0) / reps)
    return statistics.median(out)


def _square(n: int) -> tuple[int, int]:
    rows = max(2, int(round(math.sqrt(n))))
    return rows, max(2, n // rows)


def _action_ops(n: int, gen: Any) -> dict[str, Callable[[], Any]]:
    """One callable per action on tensors of ``n`` elements, doing what the executor does."""
    import torch

    from autosync_transfer.runtime.executor import _orthogonalize, _rows, _scatter

    flat = torch.randn(n, generator=gen)
    ef = torch.randn(n, generator=gen) * 1e-3
    halves = [flat[: n // 2].clone(), flat[n // 2:].clone()]
    views = [torch.empty_like(h) for h in halves]
    rows, cols = _square(n)
    m0 = torch.randn(rows, cols, generator=gen)
    err = torch.randn(rows, cols, generator=gen) * 1e-3
    q0 = torch.randn(cols, 1, generator=gen)
    out_view = torch.empty(rows, cols)
    srows = max(2, n // SPARSE_WIDTH)
    dense = torch.zeros(srows, SPARSE_WIDTH)
    touched = torch.randperm(srows, generator=gen)[: max(1, int(srows * SPARSE_TOUCHED))]
    dense[touched] = torch.randn(len(touched), SPARSE_WIDTH, generator=gen)
    idx, vals = _rows(dense)
    other = torch.randn(n, generator=gen)

    def fp16_cast() -> Any:
        return flat.to(torch.float16).to(flat.dtype)

    def error_feedback() -> Any:
        x = flat.clone()  # the executor adds into its freshly concatenated bucket
        x.add_(ef)
        wire = x.to(torch.float16)
        return x - wire.to(x.dtype)

    def powersgd() -> Any:
        m = m0 + err
        p = m @ q0
        p = _orthogonalize(p)
        new_q = m.t() @ p
        e = m - p @ (p.t() @ m)
        approx = (p @ new_q.t()) / 2
        out_view.copy_(approx)
        return e

    def ps_aggregate() -> Any:
        return flat.add_(other)

    def sparse_gather() -> Any:
        return _rows(dense)

    def sparse_scatter() -> Any:
        out = torch.zeros(dense.shape, dtype=dense.dtype)
        out.index_copy_(0, idx, vals)
        return out

    def copy() -> Any:
        bucket = torch.cat([h.reshape(-1) for h in halves]).div_(2)
        _scatter(bucket, views)
        return bucket

    return {"fp16_cast": fp16_cast, "error_feedback": error_feedback, "powersgd": powersgd,
            "ps_aggregate": ps_aggregate, "sparse_gather": sparse_gather,
            "sparse_scatter": sparse_scatter, "copy": copy}


def action_costs(sizes: list[int], *, clock: str = "cpu", seed: int = 0
                 ) -> dict[str, ActionCost]:
    """Seconds of every synchronization action for tensors of each of ``sizes`` elements, with
    the executor's ops (see the module docstring and :data:`POWERSGD_RANK_NOTE`):

    * ``fp16_cast``: fp32 -> fp16 -> fp32 of a flat tensor;
    * ``error_feedback``: the fp16_ef compressor: add the residual, cast, keep the new residual;
    * ``powersgd``: one rank-1 step on a square matrix (error added, ``P = MQ``, QR of P,
      ``Q = MᵀP``, the new error, the approximation written back);
    * ``ps_aggregate``: a server adding one worker's gradient into the sum;
    * ``sparse_gather`` / ``sparse_scatter``: the executor's ``_rows`` (find the non-zero rows,
      gather them) and writing received rows into a zero dense gradient, on a dense gradient of
      that many elements with :data:`SPARSE_TOUCHED` of its rows non-zero;
    * ``copy``: flattening two tensors into a bucket (``cat`` + ``div_``) and copying it back.

    Costs are made non-decreasing in size (a running maximum: a smaller tensor never costs more,
    so timer noise at tiny sizes is not passed on)."""
    import torch

    tick = _clock(clock)
    gen = torch.Generator().manual_seed(seed)
    points: dict[str, list[float]] = {}
    for n in sizes:
        for name, op in _action_ops(n, gen).items():
            points.setdefault(name, []).append(_time_op(op, tick))
    out: dict[str, ActionCost] = {}
    for name, secs in points.items():
        mono, top = [], 0.0
        for s in secs:
            top = max(top, s)
            mono.append(top)
        out[name] = ActionCost(action=name, elements=tuple(sizes), seconds=tuple(mono))
    return out


# -- compute and gradient-ready times ---------------------------------------------------------
def _step_times(workload: Any, steps: int, warmup: int, clock: str, seed: int
                ) -> tuple[list[float], list[float], list[float], dict[str, list[float]]]:
    import torch

    from autosync_transfer.runtime.worker import _to_device

    tick = _clock(clock)
    module = workload.build("cpu", seed=seed)
    g = torch.Generator().manual_seed(seed)
    batches = [_to_device(workload.batch(g), "cpu") for _ in range(4)]
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    ready: dict[str, float] = {}
    t_bwd = [0.0]

    def hook_for(name: str) -> Callable[[Any], None]:
        def hook(_p: Any) -> None:
            ready[name] = tick() - t_bwd[0]
        return hook

    handles = [p.register_post_accumulate_grad_hook(hook_for(n))
               for n, p in module.named_parameters() if p.requires_grad]
    fwd, bwd, optim = [], [], []
    per_var: dict[str, list[float]] = {}
    try:
        for k in range(warmup + steps):
            inputs, targets = batches[k % len(batches)]
            ready.clear()
            t0 = tick()
            opt.zero_grad(set_to_none=False)
            t1 = tick()
            loss = workload.loss(module, inputs, targets)
            t2 = tick()
            t_bwd[0] = t2
            loss.backward()
            t3 = tick()
            opt.step()
            t4 = tick()
            if k < warmup:
                continue
            fwd.append(t2 - t1)
            bwd.append(t3 - t2)
            optim.append((t1 - t0) + (t4 - t3))
            for n, t in ready.items():
                per_var.setdefault(n, []).append(t)
    finally:
        for h in handles:
            h.remove()
    return fwd, bwd, optim, per_var


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def profile_workload(workload: Any, *, steps: int = 10, warmup: int = 3, threads: int = 1,
                     seed: int = 0, max_foreign_cpu: float = PROFILE_MAX_FOREIGN_CPU,
                     attempts: int = 2,
                     quiet_wait_s: float = 30.0, actions: bool = True,
                     largest: int | None = None) -> WorkloadProfile:
    """Measure ``workload`` (a :class:`~autosync_transfer.domains.workload.Workload` or a spec
    string) on this process with ``threads`` compute threads (see the module docstring).
    ``largest``: the largest tensor size of the action costs (default: the largest variable of
    the model graph). Restores the process's torch thread count afterwards."""
    import torch

    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.runtime.cpuwatch import CpuWatch, wait_until_quiet

    for name, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("threads", threads, 1),
                             ("attempts", attempts, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")
    if not 0 <= max_foreign_cpu <= 1:
        raise ConfigError(f"max_foreign_cpu must be in [0, 1], got {max_foreign_cpu!r}")
    wl = load_workload(workload)
    graph = wl.graph()
    clock = "cpu" if threads == 1 else "wall"
    started = time.monotonic()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    best: tuple[float, Any] | None = None
    try:
        for attempt in range(1, attempts + 1):
            with CpuWatch() as watch:
                fwd, bwd, optim, per_var = _step_times(wl, steps, warmup, clock, seed)
                big = largest or max((v.num_elements for v in graph.variables), default=256)
                costs = action_costs(size_grid(big), clock=clock, seed=seed) if actions else {}
            share = watch.foreign if watch.foreign is not None else 0.0
            if best is None or share < best[0]:
                best = (share, (fwd, bwd, optim, per_var, costs))
            if share <= max_foreign_cpu or attempt == attempts:
                break
            log.warning("profile of %s disturbed (foreign CPU %.0f%% of the machine), measuring "
                        "again when quiet", wl.name, share * 100)
            wait_until_quiet(max_foreign_cpu, max_wait_s=quiet_wait_s)
    finally:
        torch.set_num_threads(before)
    assert best is not None
    share, (fwd, bwd, optim, per_var, costs) = best
    names = {v.name for v in graph.variables}
    ready = {n: statistics.median(ts) for n, ts in per_var.items() if n in names}
    return WorkloadProfile(
        workload=wl.name, fingerprint=graph.fingerprint, worker_type=worker_type(threads),
        batch_size=wl.batch_size, threads=threads, forward_s=statistics.median(fwd),
        backward_s=statistics.median(bwd), optimizer_s=statistics.median(optim),
        ready_s=dict(sorted(ready.items(), key=lambda kv: kv[1])), actions=costs, steps=steps,
        versions={"torch": torch.__version__, "python": platform.python_version(),
                  "host_cores": str(os.cpu_count() or 1)},
        created_at=_now(), clock=clock, seconds=round(time.monotonic() - started, 3),
        foreign_cpu=round(share, 4))


def get_profile(workload: Any, *, threads: int = 1, force: bool = False,
                folder: str | Path | None = None, **kwargs: Any
                ) -> tuple[WorkloadProfile, bool]:
    """``(profile, measured)``: the stored profile of ``workload``'s graph on this worker type
    (shipped or cached; ``folder``: look and write there only), else a new one
    (:func:`profile_workload` with ``kwargs``) written to the cache; ``force=True`` always
    measures. ``measured`` says whether it was measured now."""
    from autosync_transfer.domains.physics import find_profile, save_profile
    from autosync_transfer.domains.workload import load_workload

    wl = load_workload(workload)
    fp = wl.graph().fingerprint
    if not force:
        found = find_profile(fp, worker_type(threads), folder=folder)
        if found is not None:
            return found, False
    prof = profile_workload(wl, threads=threads, **kwargs)
    save_profile(prof, folder=folder)
    return prof, True
