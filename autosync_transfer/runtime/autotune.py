"""Autotuning inside the training job: the first steps of the real job try candidate strategies.

With ``DistributedModel(..., autotune=AutotuneConfig(...))`` (or the Lightning strategy's
``autotune=``), the job runs its initial strategy and then each candidate for
``steps_per_candidate`` optimizer steps, measures every step's wall time (the step as the job
runs it: forward, backward, synchronization, optimizer, data), takes the maximum over the ranks,
and locks in the candidate with the fastest median step. Every candidate is a complete, correct
synchronization (lossless unless ``allow_lossy=True``), so training proceeds while it tunes.

Rank consistency: switches happen at step boundaries (the first forward after a
synchronization), at the same step on every rank; the measurements are reduced (max over ranks)
and the choice is made on rank 0 and broadcast. Every tried strategy is reported to
``on_trial`` on rank 0 as an :class:`AutotuneTrial` whose ``result`` is a
:class:`~autosync_transfer.runtime.trial.TrialResult` (the search room records them in a trial
store: :func:`autosync_transfer.search.autotune.trial_recorder`). ``retune_every`` tunes again
after that many steps with the locked strategy. The locked choice is part of
:meth:`DistributedModel.sync_state_dict`, so a resumed job skips tuning.

Candidates are given (a list of strategies) or proposed at setup by a callable
``candidates(graph, cluster) -> list[Strategy]`` called on rank 0 (the runtime never imports the
simulators: :class:`autosync_transfer.search.autotune.SimulatorProposer` is such a callable).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.accuracy import is_lossless
from autosync_transfer.runtime.trial import Protocol, TrialResult
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.runtime.ddp import DistributedModel

__all__ = ["AutotuneConfig", "AutotuneTrial", "Autotuner", "is_lossless"]

log = logging.getLogger(__name__)


class AutotuneConfig(BaseModel):
    """How the job tunes its synchronization.

    Args:
        candidates: strategies to try (besides the initial one), or a callable
            ``candidates(graph, cluster) -> list[Strategy]`` called on rank 0 at setup; ``None``:
            the Lightning strategy asks its ``autotune_candidates`` (the search room's proposes
            with a simulator), ``DistributedModel`` tries the initial strategy only.
        steps_per_candidate: optimizer steps each candidate runs; the first one is a warm-up
            (not timed), so at least 2.
        allow_lossy: also try compressed candidates (otherwise they are skipped, logged).
        include_initial: time the initial strategy too (it may win).
        retune_every: tune again after this many steps with the locked strategy (``None``:
            never).
        on_trial: called on rank 0 with an :class:`AutotuneTrial` for every tried strategy.
        max_candidates: at most this many candidates (after filtering).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    candidates: Sequence[Strategy] | Callable[..., Sequence[Strategy]] | None = None
    steps_per_candidate: int = Field(default=5, ge=2)
    allow_lossy: bool = False
    include_initial: bool = True
    retune_every: int | None = Field(default=None, ge=1)
    on_trial: Callable[[AutotuneTrial], None] | None = None
    max_candidates: int = Field(default=8, ge=1)


@dataclass(frozen=True)
class AutotuneTrial:
    """One strategy tried by the job: its step times (max over ranks) as a trial result."""

    strategy: Strategy
    result: TrialResult
    protocol: Protocol
    first_step: int
    round: int
    graph: ModelGraph
    cluster: Cluster

    @property
    def median_s(self) -> float | None:
        return self.result.median_s


class Autotuner:
    """Drives the tuning of one :class:`DistributedModel` (created by its setup)."""

    def __init__(self, model: DistributedModel, config: AutotuneConfig) -> None:
        if not isinstance(config, AutotuneConfig):
            raise ConfigError(f"autotune must be an AutotuneConfig, got {type(config).__name__}")
        self.model = model
        self.config = config
        self.trials: list[AutotuneTrial] = []
        self.locked: Strategy | None = None
        self.tuning_s = 0.0
        self.round = 0
        self._queue: list[Strategy] = []
        self._current: Strategy | None = None
        self._times: list[float] = []
        self._t_last: float | None = None
        self._syncs_seen = -1
        self._step = 0
        self._steps_locked = 0
        self._t_round = 0.0
        self._candidates = self._propose()
        state = model._autotune_state
        if state is not None and state.get("locked"):
            self.load_state_dict(state)
        else:
            self._start_round()

    # -- candidates -----------------------------------------------------------------------------
    def _propose(self) -> list[Strategy]:
        """The candidate list, chosen on rank 0 and broadcast (JSON)."""
        payload: list[Any] = [None]
        if dist.get_rank() == 0:
            try:
                payload[0] = ("ok", [s.to_json() for s in self._filter(self._raw_candidates())])
            except Exception as e:  # reported to every rank instead of leaving them waiting
                payload[0] = ("error", f"{type(e).__name__}: {e}")
        dist.broadcast_object_list(payload, src=0)
        status, body = payload[0]
        if status != "ok":
            raise ConfigError(f"proposing autotune candidates failed on rank 0: {body}")
        return [Strategy.from_json(s) for s in body]

    def _raw_candidates(self) -> list[Strategy]:
        c = self.config.candidates
        if c is None:
            return []
        if callable(c):
            c = c(self.model.graph, self.model.cluster)
        out = list(c)
        bad = [s for s in out if not isinstance(s, Strategy)]
        if bad:
            raise ConfigError(f"autotune candidates must be Strategy objects, got "
                              f"{type(bad[0]).__name__}")
        return out

    def _filter(self, candidates: list[Strategy]) -> list[Strategy]:
        seen = {self.model.strategy.fingerprint} if self.model.strategy is not None else set()
        out: list[Strategy] = []
        for s in candidates:
            if s.fingerprint in seen:
                continue
            seen.add(s.fingerprint)
            if not self.config.allow_lossy and not is_lossless(s):
                log.info("autotune: skipping lossy candidate %s (allow_lossy=False)", s.id)
                continue
            try:
                self.model.plan_for(s)
            except Exception as e:
                log.warning("autotune: skipping candidate %s: %s", s.id, e)
                continue
            out.append(s)
            if len(out) >= self.config.max_candidates:
                break
        return out

    # -- the schedule ---------------------------------------------------------------------------
    @property
    def tuning(self) -> bool:
        return self._current is not None

    def _start_round(self) -> None:
        initial = self.locked or self.model.strategy
        queue = list(self._candidates)
        if initial is not None and not self.config.allow_lossy and not is_lossless(initial) \
                and queue:
            log.info("autotune: the initial strategy %s is lossy (allow_lossy=False): training "
                     "starts with the first candidate", initial.id)
            initial = None
        if initial is not None:
            queue = [s for s in queue if s.fingerprint != initial.fingerprint]
            if self.config.include_initial or not queue:
                queue.insert(0, initial)
        self._queue = queue
        self._t_round = 0.0
        self._next_candidate()

    def _next_candidate(self) -> None:
        nxt = self._queue.pop(0)
        self._current = nxt
        self._times = []
        self._first_step = self._step
        if self.model.strategy is None or nxt.fingerprint != self.model.strategy.fingerprint:
            self.model._install(nxt)

    def before_forward(self) -> None:
        """Called by the model before every forward with gradients: acts at step boundaries."""
        ex = self.model.executor
        assert ex is not None
        if ex.syncs == self._syncs_seen:
            return  # the same step (gradient accumulation, or the very first forward is below)
        now = time.perf_counter()
        if self._t_last is not None:
            self._step += 1
            self._on_step(now - self._t_last)  # may install another executor
        ex = self.model.executor
        assert ex is not None
        self._syncs_seen = ex.syncs
        self._t_last = now  # a switch's cost counts in the next (warm-up) step

    def after_sync(self) -> None:
        """Called after an explicit synchronization (``sync_on="step"``); nothing to do."""

    def _on_step(self, step_s: float) -> None:
        if not self.tuning:
            self._steps_locked += 1
            every = self.config.retune_every
            if every is not None and self._steps_locked >= every:
                self.round += 1
                self._steps_locked = 0
                self._start_round()
            return
        self._times.append(step_s)
        self._t_round += step_s
        if len(self._times) < self.config.steps_per_candidate:
            return
        self._finish_candidate()
        if self._queue:
            self._next_candidate()
        else:
            self._lock_in()

    def _finish_candidate(self) -> None:
        assert self._current is not None and self.model.groups is not None
        times = torch.tensor(self._times, dtype=torch.float64)
        group = self.model.groups.ctl or self.model.groups.ps
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's step
        timed = times.tolist()[1:]  # the first step of a candidate is its warm-up
        protocol = Protocol(warmup=1, iters=len(timed), fidelity_steps=0)
        trial = AutotuneTrial(strategy=self._current,
                              result=TrialResult(status="ok", iteration_times_s=timed,
                                                 wall_s=float(times.sum())),
                              protocol=protocol, first_step=self._first_step, round=self.round,
                              graph=self.model.graph, cluster=self.model.cluster)
        self.trials.append(trial)
        if dist.get_rank() == 0:
            log.info("autotune: strategy %s (%s): median step %.2f ms", trial.strategy.id,
                     trial.strategy.kind, 1000 * (trial.median_s or 0.0))
            if self.config.on_trial is not None:
                try:
                    self.config.on_trial(trial)
                except Exception as e:  # a failing recorder never stops training
                    log.warning("autotune: on_trial failed: %s: %s", type(e).__name__, e)
        self._current = None

    def _lock_in(self) -> None:
        this_round = [t for t in self.trials if t.round == self.round]
        box: list[Any] = [None]
        if dist.get_rank() == 0:
            best = min(this_round, key=lambda t: (t.median_s or float("inf"), t.first_step))
            box[0] = best.strategy.to_json()
        dist.broadcast_object_list(box, src=0)
        best_strategy = Strategy.from_json(box[0])
        best = next(t for t in this_round if t.strategy.fingerprint == best_strategy.fingerprint)
        self.locked = best_strategy
        best_s = best.median_s or 0.0
        steps = sum(self.config.steps_per_candidate for _ in this_round)
        self.tuning_s += max(0.0, self._t_round - steps * best_s)
        if self.model.strategy is None or self.model.strategy.fingerprint != best_strategy.fingerprint:
            self.model._install(best_strategy)
        if dist.get_rank() == 0:
            log.info("autotune: locked in strategy %s (%s), median step %.2f ms; %d strategies "
                     "tried in %d steps, tuning cost %.2f s over running the winner throughout",
                     best_strategy.id, best_strategy.kind, 1000 * best_s, len(this_round), steps,
                     self.tuning_s)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The locked choice and what was tried (medians), for :meth:`sync_state_dict`."""
        return {
            "locked": self.locked.to_json() if self.locked is not None else None,
            "round": self.round,
            "tuning_s": self.tuning_s,
            "tried": [{"strategy": t.strategy.id, "fingerprint": t.strategy.fingerprint,
                       "median_s": t.median_s, "round": t.round} for t in self.trials],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: a locked choice is installed and tuning is over (until ``retune_every``);
        a checkpoint written while tuning restarts the round."""
        self.round = int(state.get("round", 0))
        self.tuning_s = float(state.get("tuning_s", 0.0))
        if state.get("locked"):
            self.locked = Strategy.from_json(state["locked"])
            self._current = None
            self._queue = []
            if self.model.strategy is None or self.model.strategy.fingerprint != self.locked.fingerprint:
                self.model._install(self.locked)
        else:
            self._start_round()
