"""Convergence runs: does a strategy train as well as exact synchronization?

:func:`check_convergence` trains the domain's workload ``steps`` steps on real gloo processes on
this host (:func:`~autosync_transfer.runtime.launch.spawn_local`, one process per worker of the
cluster), once with exact synchronization (the DDP-equivalent builder: all-reduce without
compression, :func:`~autosync_transfer.runtime.ddp.ddp_equivalent`) and once with every strategy
given, each through :class:`~autosync_transfer.runtime.ddp.DistributedModel`. Every run starts
from the same weights (seeded), draws the same batches (a generator seeded per step and rank) and
the same dropout masks; only the synchronization differs.

Batches come from the workload's learnable task (:func:`~autosync_transfer.domains.tasks.
learnable_batches`: a zoo model's synthetic task with structure, a user's model its own
``example_batch``). The loss of a step is the mean over ranks of the ranks' losses.

What decides (:func:`analyze`, a pure function):

- the curves are smoothed by a trailing mean over ``smoothing`` steps;
- the **target loss** is the exact run's smoothed loss at ``target_at`` of the steps (3/4 by
  default): a loss that exact synchronization reaches late in the run;
- **steps to target**: the first step whose smoothed loss is at or below the target (``None``
  when never); ``step_ratio`` = strategy's / exact's (``inf`` when never reached);
- **final loss**: the mean raw loss of the last ``smoothing`` steps; ``final_gap`` relative to
  the exact run's;
- ``passed``: ``step_ratio <= max_step_ratio`` and ``final_gap <= max_final_gap``
  (:class:`~autosync_transfer.runtime.accuracy.ConvergenceTolerance`).

The result is a :class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck` per strategy
(with the wall time of its run), plus the curves (:class:`ConvergenceRun`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.accuracy import (ConvergenceCheck, ConvergenceTolerance,
                                                over_seeds)

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.strategies.types import Strategy

__all__ = ["ConvergenceConfig", "ConvergenceRun", "EXACT", "analyze", "check_convergence",
           "resolve_config", "smooth", "steps_to"]

#: the name of the exact-synchronization run in :class:`ConvergenceRun` and stores
EXACT = "exact"


class ConvergenceConfig(BaseModel):
    """How a convergence run trains: ``steps`` steps of ``optimizer`` at learning rate ``lr``
    (Adam by default; SGD with ``momentum``; ``lr=None``: the workload's own,
    :func:`~autosync_transfer.domains.tasks.training_lr`), model and batches seeded by ``seed``,
    ``seed + 1``, ... (``seeds`` of them: the verdict is a one-sided bound over the seeds,
    :func:`~autosync_transfer.runtime.accuracy.over_seeds`);
    the curves are compared as the module docstring says (``smoothing``, ``target_at``,
    ``tolerance``).
    ``max_world_size`` bounds the processes started on this host (one per worker of the
    cluster); ``timeout_s`` bounds the whole run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=150, ge=4)
    seed: int = 0
    seeds: int = Field(default=3, ge=1)
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    smoothing: int = Field(default=10, ge=1)
    target_at: float = Field(default=0.75, gt=0, le=1)
    tolerance: ConvergenceTolerance = Field(default_factory=ConvergenceTolerance)
    max_world_size: int = Field(default=8, ge=1)
    timeout_s: float = Field(default=3600.0, gt=0)


@dataclass
class ConvergenceRun:
    """One strategy's convergence check and the loss curves it was decided on (the loss of
    every step, mean over ranks)."""

    check: ConvergenceCheck
    losses: list[float] = field(default_factory=list)
    exact_losses: list[float] = field(default_factory=list)
    #: each seed's check (the first seed's curves are ``losses`` / ``exact_losses``)
    per_seed: list[ConvergenceCheck] = field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        """A JSON-able row: the check and both curves."""
        return {"check": self.check.model_dump(mode="python"), "losses": self.losses,
                "exact_losses": self.exact_losses}


# -- deciding (pure) ---------------------------------------------------------------------------
def smooth(losses: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` steps (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(losses):
        acc += v
        if i >= window:
            acc -= losses[i - window]
        out.append(acc / min(i + 1, window))
    return out


def steps_to(smoothed: list[float], target: float) -> int | None:
    """The first step (1-based) whose smoothed loss is at or below ``target``; ``None``: never."""
    for i, v in enumerate(smoothed):
        if v <= target:
            return i + 1
    return None


def analyze(strategy_id: str, losses: list[float], exact_losses: list[float],
            config: ConvergenceConfig | None = None, *, seconds: float = 0.0
            ) -> ConvergenceCheck:
    """The check of a strategy's loss curve against the exact run's (module docstring)."""
    cfg = config or ConvergenceConfig()
    if not losses or len(losses) != len(exact_losses):
        raise ConfigError(f"losses must be as many as exact_losses (> 0), got {len(losses)} "
                          f"and {len(exact_losses)}")
    n = len(exact_losses)
    w = min(cfg.smoothing, n)
    exact_s, strat_s = smooth(exact_losses, w), smooth(losses, w)
    at = max(1, min(n, round(cfg.target_at * n)))
    target = exact_s[at - 1]
    exact_steps = steps_to(exact_s, target) or at
    got = steps_to(strat_s, target) if all(math.isfinite(v) for v in losses) else None
    ratio = got / exact_steps if got is not None else math.inf
    final = sum(losses[-w:]) / w
    exact_final = sum(exact_losses[-w:]) / w
    if not math.isfinite(final):
        final, gap = math.inf, math.inf
    else:
        gap = (final - exact_final) / max(abs(exact_final), 1e-12)
    tol = cfg.tolerance
    return ConvergenceCheck(
        strategy_id=strategy_id, steps=n, seed=cfg.seed, optimizer=cfg.optimizer, lr=cfg.lr,
        target_loss=target, steps_to_target=got, exact_steps_to_target=exact_steps,
        final_loss=final, exact_final_loss=exact_final, step_ratio=ratio, final_gap=gap,
        tolerance=tol,
        passed=tol.accepts(ratio, gap),
        seconds=seconds)


def resolve_config(config: ConvergenceConfig | None, workload_spec: str) -> ConvergenceConfig:
    """``config`` (default :class:`ConvergenceConfig`) with its learning rate filled in: the
    workload's own (:func:`~autosync_transfer.domains.tasks.training_lr`) when none is given."""
    from autosync_transfer.domains.tasks import training_lr

    cfg = config or ConvergenceConfig()
    if cfg.lr is None:
        cfg = cfg.model_copy(update={"lr": training_lr(workload_spec)})
    return cfg


# -- training (on every rank) ------------------------------------------------------------------
def _step_seed(seed: int, step: int, rank: int) -> int:
    return (seed * 1_000_003 + step * 1009 + rank * 7 + 1) % (2**63 - 1)


def _train(rank: int, world: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Train every strategy of ``payload`` in turn (``None``: exact); rank 0 returns the loss
    curves (mean over ranks) and the seconds of each run."""
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.domains.tasks import learnable_batches
    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.runtime.executor import CommGroups

    cfg = ConvergenceConfig.model_validate_json(payload["config"])
    cluster = Cluster.model_validate_json(payload["cluster"])
    graph = ModelGraph.model_validate_json(payload["graph"])
    workload = load_workload(payload["workload"])
    batches = learnable_batches(workload, seed=0)
    groups = CommGroups.create()
    out: dict[str, Any] = {"losses": [], "seconds": []}
    # a convergence run is the check of its lossy strategy: no warning that it has none
    logging.getLogger("autosync_transfer.runtime.ddp").setLevel(logging.ERROR)
    for seed in payload.get("seeds") or [cfg.seed]:
        run = _train_seed(rank, world, payload, cfg.model_copy(update={"seed": seed}),
                          cluster, graph, workload, batches, groups)
        out["losses"].append(run["losses"])
        out["seconds"].append(run["seconds"])
    return out if rank == 0 else {}


def _train_seed(rank: int, world: int, payload: dict[str, Any], cfg: ConvergenceConfig,
                cluster: Any, graph: Any, workload: Any, batches: Any, groups: Any
                ) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.strategies.types import Strategy

    out: dict[str, Any] = {"losses": [], "seconds": []}
    for text in payload["strategies"]:
        strategy = Strategy.from_json(text) if text is not None else None
        module = workload.build("cpu", seed=cfg.seed)
        model = DistributedModel(module, strategy, cluster, graph=graph, groups=groups,
                                 seed=cfg.seed)
        params = list(module.parameters())
        opt = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam"
               else torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum))
        local: list[float] = []
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed * 1009 + rank)  # the same dropout masks in every run
            for k in range(cfg.steps):
                inputs, targets = batches(workload.batch_size,
                                          torch.Generator().manual_seed(_step_seed(cfg.seed, k, rank)))
                opt.zero_grad(set_to_none=False)
                loss = workload.loss(model, inputs, targets)
                loss.backward()
                opt.step()
                local.append(float(loss.detach()))
        seconds = time.perf_counter() - t0
        model.close()
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, local)
        out["losses"].append([sum(v) / world for v in zip(*gathered)])
        out["seconds"].append(seconds)
    return out


def check_convergence(domain: Domain, strategies: list[Strategy], *, workload: Any = None,
                      config: ConvergenceConfig | None = None) -> list[ConvergenceRun]:
    """One :class:`ConvergenceRun` per strategy of ``strategies`` against exact synchronization
    on ``domain`` (its cluster's world size, local gloo processes), training ``workload`` (a
    spec or a :class:`~autosync_transfer.domains.workload.Workload` with one; default the zoo
    model named like ``domain.model``). The exact run is trained once for all of them. Each
    check's ``seconds`` is the wall time of its run plus its share of the exact run."""
    from autosync_transfer.runtime.launch import spawn_local
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.runtime.trial import workload_spec_of

    spec = workload_spec_of(domain, workload)
    cfg = resolve_config(config, spec)
    world = domain.cluster.world_size
    if world > cfg.max_world_size:
        raise ConfigError(f"cluster {domain.cluster.name!r} has {world} workers, more than "
                          f"max_world_size={cfg.max_world_size} processes on this host")
    if not strategies:
        return []
    for s in strategies:  # a strategy that does not fit the domain fails here, not in a worker
        make_plan(s, domain.model, domain.cluster)
    seeds = [cfg.seed + k for k in range(cfg.seeds)]
    payload = {"config": cfg.model_dump_json(), "cluster": domain.cluster.model_dump_json(),
               "graph": domain.model.model_dump_json(),
               "workload": spec, "seeds": seeds,
               "strategies": [None, *(s.to_json() for s in strategies)]}
    results = spawn_local(_train, world, payload, timeout_s=cfg.timeout_s)[0]
    per_seed: list[list[ConvergenceCheck]] = [[] for _ in strategies]
    curves: list[tuple[list[float], list[float]]] = []
    for k, seed in enumerate(seeds):
        losses_k, seconds_k = results["losses"][k], results["seconds"][k]
        exact, share = losses_k[0], seconds_k[0] / len(strategies)
        seed_cfg = cfg.model_copy(update={"seed": seed})
        for i, s in enumerate(strategies):
            per_seed[i].append(analyze(s.id, losses_k[i + 1], exact, seed_cfg,
                                       seconds=seconds_k[i + 1] + share))
            if k == 0:
                curves.append((losses_k[i + 1], exact))
    return [ConvergenceRun(over_seeds(checks), curves[i][0], curves[i][1], checks)
            for i, checks in enumerate(per_seed)]

