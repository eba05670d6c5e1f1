"""The gradient-fidelity probe: how far a strategy's averaged gradient is from the exact average.

:func:`probe_fidelity` runs ``steps`` training steps on every rank with a
:class:`~autosync_transfer.runtime.executor.StrategyExecutor`. In each, backward runs with
synchronization held back (the executor's ``no_sync`` mode), so every rank holds its local
gradient; a copy of it (of the variables a compressed all-reduce synchronizes; the others are
synchronized exactly) is averaged exactly with one plain ``all_reduce`` (sum, then divided by
the world size, in float32 or wider), then the executor synchronizes the very same local
gradients as the strategy says (compressors, error feedback, parameter servers, shards, sparse
rows) and the two averages are compared per variable and over all variables
(:class:`~autosync_transfer.runtime.accuracy.GradientFidelity`; the worst step counts). The
optimizer then steps, so the compressor state (error feedback, PowerSGD's warm-started Q)
evolves as in training.

The trial harness probes on extra, untimed steps after the timed ones: the recorded iteration
times never include the probe's copies and its extra all-reduce. Every rank computes the same
figures from the same synchronized gradients; rank 0 reports them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.accuracy import GradientFidelity

__all__ = ["probe_fidelity", "compare_gradients", "DEFAULT_FIDELITY_STEPS", "compressors",
           "unchecked_lossy"]

#: probed steps per trial of a lossy strategy (``Protocol.fidelity_steps``)
DEFAULT_FIDELITY_STEPS = 3

#: significant digits kept of each per-variable error (trial records stay small)
_DIGITS = 4


def compressors(strategy: Any) -> list[str]:
    """The compressors ``strategy`` uses (``powersgd rank r``; sorted; empty when lossless)."""
    from autosync_transfer.strategies.types import AllReduce

    found: set[str] = set()
    for node in strategy.nodes:
        syncs = ([node.synchronizer] if node.partition is None
                 else list(node.partition.synchronizers))
        for s in syncs:
            if isinstance(s, AllReduce) and s.compressor != "none":
                found.add(s.compressor if s.compressor != "powersgd"
                          else f"powersgd rank {s.powersgd_rank}")
    return sorted(found)


def unchecked_lossy(strategy: Any, check: Any = None) -> str | None:
    """One line of warning when ``strategy`` is lossy and ``check`` (a
    :class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck`) is not a passed check of it;
    ``None`` otherwise (a lossless strategy, or a passed check of this strategy)."""
    found = compressors(strategy)
    if not found:
        return None
    if check is not None and check.strategy_id == strategy.id and check.passed:
        return None
    what = f"strategy {strategy.id!r} is lossy ({', '.join(found)})"
    if check is None:
        why = "and has no convergence check"
    elif check.strategy_id != strategy.id:
        why = f"and the convergence check given is of another strategy ({check.strategy_id!r})"
    else:
        why = f"and its {check.summary()}"
    return (f"{what} {why}: its averaged gradients differ from exact synchronization, so "
            f"training may need more steps or reach a worse loss")


def _round(x: float) -> float:
    return float(f"{x:.{_DIGITS}g}")


def compare_gradients(synced: dict[str, torch.Tensor], exact: dict[str, torch.Tensor]
                      ) -> tuple[float, float, dict[str, float]]:
    """``(rel_error, cosine, per_variable)`` of ``synced`` against ``exact`` (same shapes):
    ``||g - g_exact|| / ||g_exact||`` over all variables, their cosine, and each variable's
    relative error. A variable of ``synced`` missing from ``exact`` is exact (its synchronizer is
    lossless: no error, its norm counts in the total). A variable whose exact average is zero
    counts its error relative to the whole gradient's norm (0 when it is zero too). All zeros on
    both sides: 0 and 1."""
    diff_sq = dot = s_sq = e_sq = 0.0
    per: dict[str, tuple[float, float]] = {}
    for name, g in synced.items():
        if name not in exact:
            n2 = float(torch.sum(g.detach().to(torch.float32) ** 2))
            per[name] = (0.0, n2)
            e_sq, s_sq, dot = e_sq + n2, s_sq + n2, dot + n2
            continue
        e = exact[name].reshape(-1)
        g = g.detach().to(e.dtype).reshape(-1)
        d = float(torch.sum((g - e) ** 2))
        en = float(torch.sum(e * e))
        per[name] = (d, en)
        diff_sq += d
        e_sq += en
        s_sq += float(torch.sum(g * g))
        dot += float(torch.sum(g * e))
    total = math.sqrt(e_sq)
    rel = math.sqrt(diff_sq) / total if total > 0 else (0.0 if diff_sq == 0 else math.inf)
    if s_sq > 0 and e_sq > 0:
        cos = max(-1.0, min(1.0, dot / math.sqrt(s_sq * e_sq)))
    else:
        cos = 1.0 if s_sq == e_sq == 0 else 0.0
    per_variable = {}
    for name, (d, en) in per.items():
        if en > 0:
            per_variable[name] = _round(math.sqrt(d / en))
        elif d == 0:
            per_variable[name] = 0.0
        else:
            per_variable[name] = _round(math.sqrt(d) / total) if total > 0 else math.inf
    return rel, cos, per_variable


def probe_fidelity(executor: Any, backward: Callable[[int], None], steps: int, *,
                   step: Callable[[], None] | None = None, first: int = 0,
                   every_variable: bool = False) -> GradientFidelity:
    """Probe ``steps`` steps (collective: every rank calls it with the same ``steps``).

    ``executor``: a set-up :class:`~autosync_transfer.runtime.executor.StrategyExecutor`
    (not ``deferred``, nothing in flight); ``backward(k)`` zeroes the gradients and runs the
    forward and backward of batch ``k`` (``first``, ``first + 1``, ...) on this rank's module;
    ``step()`` the optimizer step after each probed step (none: the weights stay).

    Only the variables a compressed all-reduce synchronizes (in whole or in part) are averaged
    again exactly: the others' synchronization is exact (the executor's parity tests), so their
    averaged gradient is their exact average and enters the totals as such, without a second
    all-reduce of, say, a whole embedding table. ``every_variable=True`` averages every variable
    again (a check of the lossless synchronizers too)."""
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if executor.in_flight or executor.deferred:
        raise ConfigError("the executor must be idle (nothing in flight, not deferred) to probe")
    world = dist.get_world_size()
    group = executor.groups.ar
    every = list(executor.plan.var_tasks)
    lossy = {p.var for b in executor.plan.buckets if b.compressor != "none" for p in b.pieces}
    names = every if every_variable else [n for n in every if n in lossy]
    params = executor.params
    worst_rel, worst_cos = 0.0, 1.0
    worst_per: dict[str, float] = {}
    enabled = executor.sync_enabled
    try:
        for k in range(steps):
            executor.sync_enabled = False  # backward only accumulates: the local gradients
            backward(first + k)
            local = [params[n].grad if params[n].grad is not None else torch.zeros_like(params[n])
                     for n in names]
            exact: dict[str, torch.Tensor] = {}
            if local:
                dtype = torch.promote_types(torch.float32, local[0].dtype)
                flat = torch.cat([g.detach().reshape(-1).to(dtype) for g in local])
                dist.all_reduce(flat, group=group)  # the exact sum; nothing else is in flight
                flat.div_(world)
                off = 0
                for n, g in zip(names, local):
                    exact[n] = flat[off:off + g.numel()].view(g.shape)
                    off += g.numel()
            executor.sync_enabled = True
            executor.finish()  # the strategy averages the same local gradients
            synced = {n: (params[n].grad if params[n].grad is not None
                          else torch.zeros_like(params[n])) for n in every}
            rel, cos, per = compare_gradients(synced, exact)
            worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
            for n, v in per.items():
                worst_per[n] = max(worst_per.get(n, 0.0), v)
            if step is not None:
                step()
    finally:
        executor.sync_enabled = enabled
    if not math.isfinite(worst_rel):
        worst_rel = 1e30
    worst_per = {n: (v if math.isfinite(v) else 1e30) for n, v in worst_per.items()}
    return GradientFidelity(rel_error=worst_rel, cosine=worst_cos, per_variable=worst_per,
                            steps=steps)
