"""Autotuning inside the training job, decided by interleaved comparison against torch DDP.

With ``DistributedModel(..., autotune=AutotuneConfig(...))`` (or the Lightning strategy's
``autotune=``), the job's first steps compare candidate strategies with torch's own
``DistributedDataParallel`` (:data:`~autosync_transfer.runtime.torch_ddp.TORCH_DDP`), which is
the baseline of every tuning round, the start when no strategy is given, and the fallback:

- the candidates and DDP run in randomized interleaved rounds of ``steps_per_candidate`` steps
  each (:class:`~autosync_transfer.measure.Interleaved`): the job's own steps, forward, backward,
  synchronization, optimizer and data, each timed as the slowest rank's;
- warm-up is detected and dropped (a switch, the job's first steps), a candidate leaves the pool
  once the comparison has decided about it (slower, equivalent or faster), or as soon as one of
  its blocks runs more than ``drop_slower`` slower than DDP's latest block (a cost rule, not a
  verdict: it can only keep DDP), and the round budget
  is bounded: the steps run with candidates other than DDP stay within ``budget_share`` of the
  planned steps and ``max_tuning_steps``; the budget goes to the first candidates (the
  proposer's best first), as many as it gives ``target_rounds`` rounds each (at least one);
  what it leaves screens more: the next candidates run one block each in the first round, and
  after it only the compared number stays, those whose block ran fastest against DDP's (a
  choice of which candidates the comparison gets, not a verdict: it can only keep DDP);
  and what the round costs over running DDP (its steps' time beyond DDP's median step, switches
  included, and the proposal's time in the first round) stays within ``max_cost_share`` of
  the planned job's time, plus ``gain_share`` of what its fastest candidate would save over
  the planned steps left were it locked in (nothing when every candidate runs slower than
  DDP): before each block, when
  the cost so far plus what that block cost the last time it ran (a candidate not run yet:
  one of DDP's median steps, what its switch costs at least) would pass it, the round
  stops and keeps the verdicts of its last planned look (a tuning round that finds nothing
  costs the job about that share, at most one block more: a choice's first block is known
  only once it has run); in the first round the steps on DDP before the proposal are its
  reference until DDP's own first block, and a budget that leaves less than one of those
  steps after the proposal's share proposes nothing: the round compares the ``quick_builders``
  instead, built without a simulator, those that torch DDP's reducer cannot run (they send
  something else than DDP: a sparse variable's touched rows through parameter servers), or
  the job stays on DDP when none differs (a short job cannot pay for a ranking, and a builder
  DDP's reducer could run is at best DDP with other buckets); such a round runs its first
  candidate block whatever the bound (one block is the least a comparison can learn from: a
  candidate faster than DDP pays for the rest of the round, a slower one stops it);
- a candidate replaces DDP only when it is faster with confidence (the interval's lower bound
  above 1); otherwise the job locks in DDP. A small budget shortens the blocks (to no fewer
  than 3 steps); one too small for ``min_rounds`` such blocks of even one candidate tunes
  nothing.

Every candidate is a complete, correct synchronization (lossless unless ``allow_lossy=True``),
so training proceeds while it tunes. Switches happen at step boundaries on every rank at once;
the measurements are reduced (max over ranks) and rank 0 decides and broadcasts. Each tried
strategy is reported to ``on_trial`` on rank 0 as an :class:`AutotuneTrial` (the search room
records them in a trial store: :func:`autosync_transfer.search.autotune.trial_recorder`);
:attr:`Autotuner.record` is the whole tuning record: the comparison (speed-ups with intervals,
rounds, verdicts), the steps it took, the switches, the proposal's time and the time it cost
over running the locked choice throughout. The locked choice and the record are part of
:meth:`DistributedModel.sync_state_dict`, so a resumed job skips tuning. ``retune_every``
compares again after that many steps with the locked choice.

Candidates are given (a list of strategies) or proposed by a callable
``candidates(graph, cluster) -> list[Strategy]`` called on rank 0 (the runtime never imports the
simulators: :class:`autosync_transfer.search.autotune.SimulatorProposer` is such a callable).
With a bounded cost the proposal waits for the job's first steps on torch DDP (they run anyway)
and gets a time limit, a share of the cost budget they give in seconds: on a short job the
proposal cannot take what the budget is for.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field, field_validator

from autosync_transfer.errors import ConfigError
from autosync_transfer.measure import Design, Interleaved
from autosync_transfer.measure.stats import block_level
from autosync_transfer.runtime.accuracy import is_lossless
from autosync_transfer.runtime.torch_ddp import TORCH_DDP
from autosync_transfer.runtime.trial import Protocol, TrialResult
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.runtime.ddp import DistributedModel

__all__ = ["AutotuneConfig", "AutotuneTrial", "Autotuner", "is_lossless", "TORCH_DDP"]

log = logging.getLogger(__name__)

#: the shortest block a small budget may shorten ``steps_per_candidate`` to
MIN_BLOCK_STEPS = 3


class AutotuneConfig(BaseModel):
    """How the job tunes its synchronization.

    Args:
        candidates: strategies to compare with torch DDP, or a callable
            ``candidates(graph, cluster) -> list[Strategy]`` called on rank 0 (a *proposer*);
            ``None``: the Lightning strategy asks its ``autotune_candidates`` (its simulator
            proposes them), ``DistributedModel`` compares its initial strategy with DDP. With a
            bounded cost (``max_cost_share`` and ``planned_steps``) a proposer is called after
            the job's first :meth:`block_steps` + 1 steps on torch DDP, which give DDP's step
            time and so the cost budget in seconds; one that takes a ``time_limit_s`` keyword
            gets ``proposal_share`` of that budget (it returns what it ranked by then). Without
            a bound it is called at setup, without a limit.
        steps_per_candidate: optimizer steps of one block (a candidate's turn in a round; its
            first steps pay the switch and are dropped when detected as warm-up), at least 2.
            A budget too small for ``min_rounds`` blocks of it shortens the blocks, to no
            fewer than 3 steps (:meth:`block_steps`).
        budget_share: at most this share of ``planned_steps`` runs candidates other than DDP.
        max_tuning_steps: and at most this many steps.
        planned_steps: the job's planned optimizer steps (the Lightning strategy fills it from
            the Trainer); ``None``: the budget is ``max_tuning_steps``.
        min_rounds: rounds before the first decision (at least 3).
        max_rounds: at most this many rounds.
        target_rounds: the budget is shared by as many candidates as it gives this many rounds
            each (at least one candidate, given ``min_rounds``); what it leaves screens the
            next candidates, one block each in the first round, after which the compared
            number stays, the fastest of that round against DDP; the rounds the budget still
            leaves are run too, up to ``max_rounds``. The default, ``min_rounds``, tries many
            candidates (breadth against depth: ``docs/results.md``).
        max_cost_share: a tuning round stops before the first block that would take its cost
            over running DDP throughout (its steps' time minus as many of DDP's median steps;
            the switches are in it, and in the first round the proposal's time), counting what
            that block cost the last time it ran (one DDP median step for a candidate not run
            yet), past this share of ``planned_steps`` DDP steps; its verdicts are then those
            of its last planned look. A budget whose part left after ``proposal_share`` is
            less than one DDP step proposes nothing (with the defaults, a job of fewer than
            400 planned steps): it compares the ``quick_builders`` that differ from torch DDP
            (its first candidate block runs whatever the bound), or stays on DDP. ``None``, or
            no ``planned_steps``: no bound on the cost.
        gain_share: a round may spend beyond ``max_cost_share`` this share of what its fastest
            candidate (at least two blocks, still compared) would save over the planned steps
            left if it were locked in (its blocks' median level below DDP's median step): a
            candidate that runs faster than DDP pays for the comparison that can lock it in;
            one that runs slower adds nothing. ``0``: the bound is ``max_cost_share`` alone.
        quick_builders: builders a job whose cost budget cannot pay for a proposal compares
            instead (built without a simulator, in this order), keeping those that torch DDP's
            reducer cannot run (a model without sparse variables keeps none: the job stays on
            DDP); ``()``: such a job stays on DDP.
        proposal_share: the share of the cost budget a proposer that takes ``time_limit_s``
            may spend (its time counts in the first round's cost either way).
        margin: a candidate within this relative margin of DDP is "equivalent" (DDP stays).
        confidence: the two-sided confidence of the comparison's intervals (Bonferroni over its
            planned looks). Locking in is a one-sided decision, taken only on "faster" (the
            interval's lower bound above 1): the default 0.9 replaces DDP when a candidate is
            faster with 95 % one-sided confidence per comparison: a candidate as fast as DDP is
            locked in about 5 % of the time, one slower by ``margin`` far less often.
        drop_slower: a candidate whose block runs more than this share slower than torch
            DDP's latest block (each block's level: its median step after its detected
            warm-up) leaves the tuning round: it could only cost, and leaving never makes a
            candidate win. ``None``: every candidate runs until the comparison decides.
        allow_lossy: also try compressed candidates (otherwise they are skipped, logged).
        include_initial: the model's initial strategy (when one was given) is a candidate.
        retune_every: compare again after this many steps with the locked choice (``None``:
            never).
        on_trial: called on rank 0 with an :class:`AutotuneTrial` for every tried strategy.
        max_candidates: at most this many candidates besides DDP (after filtering and the
            budget).
        seed: the rounds' shuffles.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    candidates: Sequence[Strategy] | Callable[..., Sequence[Strategy]] | None = None
    steps_per_candidate: int = Field(default=4, ge=2)
    budget_share: float = Field(default=0.05, gt=0.0, le=0.5)
    max_tuning_steps: int = Field(default=300, ge=1)
    planned_steps: int | None = Field(default=None, ge=1)
    min_rounds: int = Field(default=4, ge=3)
    max_rounds: int = Field(default=12, ge=3)
    target_rounds: int = Field(default=4, ge=3)
    max_cost_share: float | None = Field(default=0.005, gt=0.0, le=0.5)
    proposal_share: float = Field(default=0.5, gt=0.0, le=1.0)
    quick_builders: tuple[str, ...] = ("ddp", "all_reduce")
    gain_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    margin: float = Field(default=0.02, ge=0.0, lt=1.0)
    confidence: float = Field(default=0.9, gt=0.5, lt=1.0)
    drop_slower: float | None = Field(default=0.05, gt=0.0, lt=1.0)
    allow_lossy: bool = False
    include_initial: bool = True
    retune_every: int | None = Field(default=None, ge=1)
    on_trial: Callable[[AutotuneTrial], None] | None = None
    max_candidates: int = Field(default=8, ge=1)
    seed: int = 0

    @field_validator("quick_builders")
    @classmethod
    def _known_builders(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from autosync_transfer.strategies.builders import BUILDERS

        unknown = [b for b in v if b not in BUILDERS]
        if unknown:
            raise ValueError(f"unknown builder {unknown[0]!r} (known: {', '.join(BUILDERS)})")
        return v

    def budget_steps(self) -> int:
        """Steps that may run candidates other than DDP in one tuning round."""
        if self.planned_steps is None:
            return self.max_tuning_steps
        return min(self.max_tuning_steps, int(self.budget_share * self.planned_steps))

    def block_steps(self) -> int:
        """Steps of one block: ``steps_per_candidate``, or fewer when the budget cannot give one
        candidate ``min_rounds`` blocks of it: as many as it can, but no fewer than
        :data:`MIN_BLOCK_STEPS` (the median of three steps still sets a switch's slow first step
        aside)."""
        s = self.steps_per_candidate
        fits = self.budget_steps() // self.min_rounds
        return s if fits >= s else max(min(s, MIN_BLOCK_STEPS), fits)

    def cost_budget_s(self, ddp_step_s: float) -> float | None:
        """The most a tuning round may cost over running DDP throughout, in seconds, when DDP's
        step takes ``ddp_step_s``; ``None``: unbounded."""
        if self.max_cost_share is None or self.planned_steps is None:
            return None
        return self.max_cost_share * self.planned_steps * ddp_step_s

    def schedule(self, candidates: int) -> tuple[int, int, int, int]:
        """``(candidates compared, max rounds, rounds between looks, candidates screened)`` for
        a tuning round with ``candidates`` available: ``(0, 0, 0, 0)`` when the budget cannot
        give one candidate ``min_rounds``. The budget goes first to as many candidates as it
        gives ``target_rounds`` each; what that leaves screens the next candidates, a block
        each in the first round (after which the compared number stays); what is left then
        adds rounds. The verdicts are looked at no more than three times (each look costs
        confidence: :class:`~autosync_transfer.measure.Design`)."""
        budget = self.budget_steps()
        s = self.block_steps()
        if budget < s * self.min_rounds:
            return 0, 0, 0, 0
        wanted = min(max(self.min_rounds, self.target_rounds), self.max_rounds)
        fit = min(candidates, self.max_candidates, max(1, budget // (s * wanted)))
        if fit < 1:
            return 0, 0, 0, 0
        screen = max(0, min(min(candidates, self.max_candidates) - fit,
                            (budget - s * fit * wanted) // s))
        max_rounds = max(self.min_rounds,
                         min(self.max_rounds, (budget - s * screen) // (s * fit)))
        look_every = max(1, -(-(max_rounds - self.min_rounds) // 2))
        return fit, max_rounds, look_every, screen

    def design(self, candidates: int, round: int = 0) -> Design | None:
        """The comparison of tuning round ``round`` with ``candidates`` available (DDP the
        baseline): its rounds and looks from :meth:`schedule`, ``margin`` and ``confidence``;
        ``None`` when the budget cannot decide on one candidate."""
        fit, max_rounds, look_every, _ = self.schedule(candidates)
        if fit < 1:
            return None
        return Design(baseline=TORCH_DDP, min_rounds=self.min_rounds, max_rounds=max_rounds,
                      look_every=look_every, margin=self.margin, confidence=self.confidence,
                      seed=self.seed + round)


@dataclass(frozen=True)
class AutotuneTrial:
    """One strategy tried by the job: its timed steps (max over ranks, blocks' detected warm-up
    dropped) as a trial result."""

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


Choice = Strategy | str  # a strategy, or TORCH_DDP


def _takes_time_limit(proposer: Callable[..., Any]) -> bool:
    """Whether ``proposer`` accepts a ``time_limit_s`` keyword."""
    import inspect

    try:
        params = inspect.signature(proposer).parameters
    except (TypeError, ValueError):
        return False
    return "time_limit_s" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class Autotuner:
    """Drives the tuning of one :class:`DistributedModel` (created by its setup)."""

    def __init__(self, model: DistributedModel, config: AutotuneConfig) -> None:
        if not isinstance(config, AutotuneConfig):
            raise ConfigError(f"autotune must be an AutotuneConfig, got {type(config).__name__}")
        if model.sync_on != "backward":
            raise ConfigError('autotune compares with torch DDP, which synchronizes every '
                              'backward: use sync_on="backward"')
        self.model = model
        self.config = config
        self.trials: list[AutotuneTrial] = []
        #: the locked choice: a Strategy or TORCH_DDP (``None`` while tuning)
        self.locked: Choice | None = None
        #: the tuning rounds' records (comparison, steps, switches, cost), newest last
        self.records: list[dict[str, Any]] = []
        self.tuning_s = 0.0
        self.round = 0
        self._step = 0
        self._steps_locked = 0
        self._t_last: float | None = None
        self._syncs_seen = -1
        self._cmp: Interleaved | None = None
        self._choices: dict[str, Choice] = {}
        self._order: list[str] = []
        self._current: str | None = None
        self._times: list[float] = []
        self._blocks: dict[str, list[list[float]]] = {}
        self._first_step: dict[str, int] = {}
        self._switches = 0
        self._round_steps: list[float] = []
        self._dropped: dict[str, float] = {}
        self._screened: dict[str, float] = {}
        self._keep: int | None = None  # candidates kept after the first round's screening
        self._block_steps = config.block_steps()  # the config is frozen: once
        self._candidates: list[Strategy] = []
        self.propose_s = 0.0
        #: the proposal's time limit (seconds; ``None``: none)
        self.propose_limit_s: float | None = None
        #: DDP's step times before a deferred proposal (``None``: not waiting for one)
        self._probe: list[float] | None = None
        #: those steps (the slowest rank's, the first left out): the first round's reference
        #: for its cost until DDP's own first block has run
        self._probe_ref: list[float] = []
        #: why the first round compares the quick builders (``""``: it does not)
        self._quick = ""
        state = model._autotune_state
        if state is not None and state.get("locked"):
            self.load_state_dict(state)  # resumed with its choice: nothing to propose
        elif config.schedule(1)[0] < 1:
            # a budget that cannot decide on one candidate proposes none (a simulator's
            # ranking costs time the job would not win back)
            self._start_round()
        elif callable(config.candidates) and config.cost_budget_s(1.0) is not None:
            self._probe = []  # propose once DDP's first steps give the budget in seconds
        else:
            self._candidates = self._timed_propose(None)
            self._start_round()

    # -- candidates -----------------------------------------------------------------------------
    def _timed_propose(self, time_limit_s: float | None, *, quick: bool = False
                       ) -> list[Strategy]:
        t0 = time.perf_counter()
        out = self._propose(time_limit_s, quick=quick)
        self.propose_s = time.perf_counter() - t0
        return out

    def _probe_step(self, step_s: float) -> None:
        """A step on torch DDP before a deferred proposal: after :meth:`block_steps` + 1 of
        them (the first left out: the job's warm-up), their median (the slowest rank's) sets
        the cost budget and the proposal's time limit (``proposal_share`` of it), and the round
        starts; a budget whose rest after that share is less than one such step proposes
        nothing: it could not pay even a candidate's switch."""
        assert self._probe is not None
        self._probe.append(step_s)
        if len(self._probe) < self._block_steps + 1:
            return
        probe, self._probe = self._probe, None
        times = torch.tensor(probe[1:], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=self._group)  # alike on every rank
        self._probe_ref = [max(t, 1e-9) for t in times.tolist()]
        med = float(times.median())
        cfg = self.config
        budget = cfg.cost_budget_s(med)
        limit = None if budget is None else cfg.proposal_share * budget
        if budget is not None and limit is not None and budget - limit < med:
            why = (f"nothing proposed: a cost budget of {budget * 1e3:.1f} ms (max_cost_share="
                   f"{cfg.max_cost_share:g} of {cfg.planned_steps} planned steps of torch DDP's "
                   f"{med * 1e3:.1f} ms median step) leaves less than one step after the "
                   f"proposal's share ({cfg.proposal_share:g})")
            self._candidates = self._timed_propose(None, quick=True) if cfg.quick_builders \
                else []
            if not self._candidates:
                self._lock(TORCH_DDP, reason=why + (
                    f"; no builder of quick_builders ({', '.join(cfg.quick_builders)}) differs "
                    f"from torch DDP" if cfg.quick_builders else ""))
                return
            self._quick = why
            if dist.get_rank() == 0:
                log.info("autotune: %s; comparing builders instead: %s", why,
                         ", ".join(c.id for c in self._candidates))
            self._start_round()
            return
        self._candidates = self._timed_propose(limit)
        self._start_round()

    def _propose(self, time_limit_s: float | None = None, *, quick: bool = False
                 ) -> list[Strategy]:
        """The candidate list, chosen on rank 0 (within ``time_limit_s`` where the proposer
        takes one; ``quick``: the ``quick_builders`` instead of the proposer's) and broadcast
        (JSON)."""
        payload: list[Any] = [None]
        if dist.get_rank() == 0:
            try:
                raw = self._quick_candidates() if quick else self._raw_candidates(time_limit_s)
                payload[0] = ("ok", [s.to_json() for s in self._filter(raw)], time_limit_s)
            except Exception as e:  # reported to every rank instead of leaving them waiting
                payload[0] = ("error", f"{type(e).__name__}: {e}", time_limit_s)
        dist.broadcast_object_list(payload, src=0, group=self._group)
        status, body, self.propose_limit_s = payload[0]  # rank 0's limit is the one applied
        if status != "ok":
            raise ConfigError(f"proposing autotune candidates failed on rank 0: {body}")
        return [Strategy.from_json(s) for s in body]

    @property
    def _group(self) -> Any:
        g = self.model.groups
        return None if g is None else (g.ctl or g.ps)

    def _raw_candidates(self, time_limit_s: float | None = None) -> list[Strategy]:
        c = self.config.candidates
        out: list[Any] = []
        if self.config.include_initial and self.model._configured is not None:
            out.append(self.model._configured)
        if c is not None:
            if callable(c):
                kwargs = ({"time_limit_s": time_limit_s}
                          if time_limit_s is not None and _takes_time_limit(c) else {})
                c = c(self.model.graph, self.model.cluster, **kwargs)
            out.extend(c)
        bad = [s for s in out if not isinstance(s, Strategy)]
        if bad:
            raise ConfigError(f"autotune candidates must be Strategy objects, got "
                              f"{type(bad[0]).__name__}")
        return out

    def _quick_candidates(self) -> list[Strategy]:
        """The initial strategy (when ``include_initial``), then the ``quick_builders`` that
        torch DDP's reducer cannot run, built for the model's graph and cluster."""
        from autosync_transfer.domains.domain import Domain
        from autosync_transfer.runtime.torch_ddp import ddp_bucket_caps
        from autosync_transfer.strategies.builders import build

        out: list[Strategy] = []
        if self.config.include_initial and self.model._configured is not None:
            out.append(self.model._configured)
        graph, cluster = self.model.graph, self.model.cluster
        for name in self.config.quick_builders:
            try:  # a builder that cannot serve this model or cluster is skipped, not fatal
                s = build(name, Domain(name=f"{graph.name}-{cluster.name}", model=graph,
                                       cluster=cluster))
                if ddp_bucket_caps(self.model.plan_for(s)) is not None:
                    continue  # DDP's reducer runs it: at best torch DDP with other buckets
            except Exception as e:
                log.warning("autotune: skipping quick builder %s: %s: %s", name,
                            type(e).__name__, e)
                continue
            out.append(s)
        return out

    def _filter(self, candidates: list[Strategy]) -> list[Strategy]:
        seen: set[str] = set()
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
        return out

    # -- the schedule ---------------------------------------------------------------------------
    @property
    def tuning(self) -> bool:
        return self._cmp is not None

    def _start_round(self) -> None:
        cfg = self.config
        budget = cfg.budget_steps()
        per_round = self._block_steps * cfg.min_rounds
        fit, _, _, screen = cfg.schedule(len(self._candidates))
        if fit < 1:
            reason = (f"a budget of {budget} steps cannot decide on one candidate "
                      f"({cfg.min_rounds} rounds x {self._block_steps} steps)"
                      if budget < per_round else "no candidate besides torch DDP")
            self._lock(TORCH_DDP if self.locked is None else self.locked, reason=reason)
            return
        cands = self._candidates[:fit + screen]
        self._keep = fit if screen else None
        self._choices = {TORCH_DDP: TORCH_DDP}
        for i, s in enumerate(cands):
            self._choices[f"{i}:{s.id}"] = s
        design = cfg.design(len(self._candidates), self.round)
        assert design is not None
        self._cmp = Interleaved(list(self._choices), design)
        self._blocks = {n: [] for n in self._choices}
        self._first_step = {}
        self._switches = 0
        self._round_steps = []
        self._dropped = {}
        self._screened = {}
        self._order = []
        self._next_block()

    def _next_block(self) -> None:
        """Rank 0 says what runs next (a candidate's name, or the end); every rank follows."""
        box: list[Any] = [None]
        if dist.get_rank() == 0:
            assert self._cmp is not None
            reason = ""
            if not self._order and not self._cmp.done:
                self._order = self._cmp.next_round() or []
            if self._order:
                reason = self._over_cost(self._order[0])
                if reason:  # the blocks left are not run
                    self._cmp.stop()
                    self._order = []
            if (not self._order and not reason and self._cmp.done and self._dropped
                    and set(self._dropped) | set(self._screened)
                    == set(self._choices) - {TORCH_DDP}):
                reason = ("every candidate left: a block ran more than drop_slower="
                          f"{self.config.drop_slower:g} slower than torch DDP's ("
                          + ", ".join(f"{n} {r:.2f}x" for n, r in self._dropped.items()) + ")"
                          + ("; screened out after the first round: " + ", ".join(
                              f"{n} {r:.2f}x" for n, r in self._screened.items())
                             if self._screened else ""))
            box[0] = (self._order.pop(0) if self._order else None, reason)
        dist.broadcast_object_list(box, src=0, group=self._group)
        name, reason = box[0]
        if name is None:
            self._finish_round(reason)
            return
        self._current = name
        self._times = []
        self._first_step.setdefault(name, self._step)
        self._switch_to(self._choices[name])

    def _switch_to(self, choice: Choice) -> None:
        if self._is_current(choice):
            return
        self.model._install(choice)
        self._switches += 1

    def _is_current(self, choice: Choice) -> bool:
        if isinstance(choice, str):
            return self.model.backend == TORCH_DDP
        return (self.model.backend != TORCH_DDP and self.model.strategy is not None
                and self.model.strategy.fingerprint == choice.fingerprint)

    def before_forward(self) -> None:
        """Called by the model before every forward with gradients: acts at step boundaries."""
        ex = self.model.executor
        assert ex is not None
        if ex.syncs == self._syncs_seen:
            return  # the same step (gradient accumulation, or the very first forward is below)
        now = time.perf_counter()
        if self._t_last is not None:
            self._step += 1
            self._on_step(now - self._t_last)  # may install another backend
        ex = self.model.executor
        assert ex is not None
        self._syncs_seen = ex.syncs
        self._t_last = now  # a switch's cost counts in the next step

    def after_sync(self) -> None:
        """Called after an explicit synchronization; nothing to do."""

    def _on_step(self, step_s: float) -> None:
        if self._probe is not None:
            self._probe_step(step_s)
            return
        if not self.tuning:
            self._steps_locked += 1
            every = self.config.retune_every
            if every is not None and self._steps_locked >= every:
                self.round += 1
                self._steps_locked = 0
                self._start_round()
            return
        self._times.append(step_s)
        if len(self._times) < self._block_steps:
            return
        times = torch.tensor(self._times, dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=self._group)  # the slowest rank
        block = [max(t, 1e-9) for t in times.tolist()]
        assert self._current is not None
        self._blocks[self._current].append(block)
        self._round_steps.extend(block)
        if dist.get_rank() == 0:
            assert self._cmp is not None
            self._cmp.record(self._current, block)
            self._drop_slow(self._current)
            if self._keep is not None and self._cmp.rounds >= 1:
                self._screen()
        self._next_block()

    def _drop_slow(self, name: str) -> None:
        """Rank 0, after ``name``'s block: the candidates whose latest block ran more than
        ``drop_slower`` slower than DDP's latest leave the round (after a DDP block, every
        candidate that ran in this round is looked at again)."""
        limit = self.config.drop_slower
        ddp = self._blocks.get(TORCH_DDP) or []
        if limit is None or not ddp:
            return
        assert self._cmp is not None
        ref = block_level(ddp[-1])[0]
        if name != TORCH_DDP:  # unless a look just decided it
            looked = [name] if name in self._cmp.active else []
        else:  # the candidates whose block of this round ran before it
            looked = [n for n in self._cmp.active
                      if n != TORCH_DDP and self._blocks.get(n) and n not in self._order]
        for n in looked:
            ratio = block_level(self._blocks[n][-1])[0] / ref
            if ratio > 1.0 + limit:
                self._cmp.drop(n)
                self._order = [] if self._cmp.done else [m for m in self._order if m != n]
                self._dropped[n] = ratio

    def _screen(self) -> None:
        """Rank 0, once the first round is complete: of the candidates still in it, those whose
        block ran fastest against DDP's block of that round stay, as many as the comparison
        was planned for; the others leave (their ratio is in the record)."""
        assert self._cmp is not None and self._keep is not None
        keep, self._keep = self._keep, None
        ddp = self._blocks.get(TORCH_DDP) or []
        if not ddp or self._cmp.done:
            return
        ref = block_level(ddp[0])[0]
        ratios = {n: block_level(self._blocks[n][0])[0] / ref for n in self._cmp.active
                  if n != TORCH_DDP and self._blocks.get(n)}
        ranked = sorted(ratios, key=lambda n: (ratios[n], list(self._choices).index(n)))
        for n in ranked[keep:]:
            self._cmp.drop(n)
            self._screened[n] = ratios[n]

    def _over_cost(self, next_block: str) -> str:
        """Why the round stops for its cost before ``next_block`` runs (rank 0), or ``""``:
        what it ran so far against as many of DDP's median steps (each block's first step, the
        switch, left out of that median; in the first round, before DDP's first block, the
        steps on DDP before the proposal), plus what ``next_block`` cost the last time it ran
        (a candidate not run yet: one median step, the least its switch costs; DDP: nothing),
        past the budget."""
        if (self._quick and self.round == 0 and next_block != TORCH_DDP
                and not any(self._blocks.get(n) for n in self._choices if n != TORCH_DDP)):
            return ""  # a quick round runs one candidate block at least: else it learns nothing
        ddp = [t for b in self._blocks.get(TORCH_DDP, []) for t in b[1:]]
        if not ddp and self.round == 0:
            ddp = list(self._probe_ref)
        if not ddp:
            return ""
        med = float(torch.tensor(ddp).median())
        budget = self.config.cost_budget_s(med)
        if budget is None:
            return ""
        credit = self._credit(med)
        budget += credit
        cost = sum(self._round_steps) - len(self._round_steps) * med
        if self.round == 0:  # the proposal is part of what the first round costs
            cost += self.propose_s
        last = (self._blocks.get(next_block) or [[]])[-1]
        expected = max(0.0, sum(last) - len(last) * med) if last else \
            (0.0 if next_block == TORCH_DDP else med)
        if cost + expected <= budget:
            return ""
        proposal = " with the proposal" if self.round == 0 else ""
        return (f"stopped after {len(self._round_steps)} steps: tuning cost {cost:.2f} s over "
                f"torch DDP's median step{proposal} (and {expected:.2f} s expected of the next "
                f"block), "
                f"more than max_cost_share={self.config.max_cost_share:g} of "
                f"{self.config.planned_steps} planned steps"
                + (f" and gain_share={self.config.gain_share:g} of what the fastest candidate "
                   f"would save ({credit:.2f} s)" if credit > 0 else "")
                + f" ({budget:.2f} s)")

    def _credit(self, med: float) -> float:
        """What a round may spend beyond its cost budget (rank 0): ``gain_share`` of what the
        fastest candidate still compared would save over the job's planned steps left if it were
        locked in (the median of its blocks' levels below DDP's median step ``med``; a
        candidate with at least two blocks); 0 when none runs faster."""
        cfg = self.config
        if not cfg.gain_share or cfg.planned_steps is None or self._cmp is None:
            return 0.0
        levels = [float(np.median([block_level(b)[0] for b in self._blocks[n]]))
                  for n in self._cmp.active
                  if n != TORCH_DDP and len(self._blocks.get(n) or []) >= 2]
        if not levels:
            return 0.0
        left = max(0, cfg.planned_steps - self._step)
        return cfg.gain_share * max(0.0, med - min(levels)) * left

    def _finish_round(self, reason: str = "") -> None:
        """Rank 0 reads the comparison's verdict and broadcasts the choice; trials reported."""
        box: list[Any] = [None]
        if dist.get_rank() == 0:
            assert self._cmp is not None
            result = self._cmp.result()
            box[0] = (result.best(), result.to_dict(), self._dropped, self._screened)
        dist.broadcast_object_list(box, src=0, group=self._group)
        best, comparison, self._dropped, self._screened = box[0]
        self._report_trials()
        self._cmp = None
        self._current = None
        self._lock(self._choices[best], comparison=comparison, name=best, reason=reason)

    def _report_trials(self) -> None:
        for name, choice in self._choices.items():
            blocks = self._blocks.get(name) or []
            if isinstance(choice, str) or not blocks:
                continue
            timed = [t for b in blocks for t in b[1:]]  # each block's first step: the switch
            trial = AutotuneTrial(strategy=choice,
                                  result=TrialResult(status="ok", iteration_times_s=timed,
                                                     wall_s=float(sum(map(sum, blocks)))),
                                  protocol=Protocol(warmup=1, iters=len(timed), fidelity_steps=0),
                                  first_step=self._first_step.get(name, 0), round=self.round,
                                  graph=self.model.graph, cluster=self.model.cluster)
            self.trials.append(trial)
            if dist.get_rank() == 0 and self.config.on_trial is not None:
                try:
                    self.config.on_trial(trial)
                except Exception as e:  # a failing recorder never stops training
                    log.warning("autotune: on_trial failed: %s: %s", type(e).__name__, e)

    def _lock(self, choice: Choice, *, comparison: dict[str, Any] | None = None,
              reason: str = "", name: str | None = None) -> None:
        self.locked = choice
        self._switch_to(choice)
        self.model.release_parked()
        steps = len(self._round_steps)
        locked_median = None
        if comparison is not None:  # the locked choice's median in the comparison
            locked_median = next((c["median_s"] for c in comparison["candidates"]
                                  if c["name"] == name), None)
        name = TORCH_DDP if isinstance(choice, str) else choice.id
        cost = 0.0
        if locked_median is not None and math.isfinite(locked_median):
            cost = max(0.0, sum(self._round_steps) - steps * locked_median)
        self.tuning_s += cost
        record = {"round": self.round, "locked": name, "steps": steps,
                  "switches": self._switches, "propose_s": self.propose_s if self.round == 0
                  else 0.0, "propose_limit_s": self.propose_limit_s if self.round == 0 else None,
                  "candidates": len(self._candidates) if self.round == 0 else None,
                  "quick": bool(self._quick) if self.round == 0 else False,
                  "cost_s": cost, "comparison": comparison, "reason": reason,
                  "dropped": dict(self._dropped), "screened": dict(self._screened)}
        self.records.append(record)
        if dist.get_rank() == 0:
            if comparison is None:
                log.info("autotune: %s; the job runs %s", reason, name)
            else:
                lines = "; ".join(
                    f"{c['name']}: {c.get('speedup', 1.0):.3f}x "
                    f"[{c.get('low', 1.0):.3f}, {c.get('high', 1.0):.3f}] {c['verdict']}"
                    for c in comparison["candidates"] if c["name"] != TORCH_DDP)
                log.info("autotune: locked in %s after %d steps (%d rounds, %d switches, "
                         "%.2f s over running it throughout); vs torch DDP: %s", name, steps,
                         comparison["rounds"], self._switches, cost, lines)

    @property
    def record(self) -> dict[str, Any] | None:
        """The latest tuning round's record (``None`` while the first one runs)."""
        return self.records[-1] if self.records else None

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The locked choice and the tuning records, for :meth:`sync_state_dict`."""
        locked: Any = None
        if self.locked is not None:
            locked = TORCH_DDP if isinstance(self.locked, str) else self.locked.to_json()
        return {
            "locked": locked,
            "round": self.round,
            "tuning_s": self.tuning_s,
            "records": list(self.records),
            "tried": [{"strategy": t.strategy.id, "fingerprint": t.strategy.fingerprint,
                       "median_s": t.median_s, "round": t.round} for t in self.trials],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: a locked choice is installed and tuning is over (until ``retune_every``);
        a checkpoint written while tuning starts the round again."""
        self.round = int(state.get("round", 0))
        self.tuning_s = float(state.get("tuning_s", 0.0))
        self.records = list(state.get("records") or [])
        locked = state.get("locked")
        if locked:
            self.locked = TORCH_DDP if locked == TORCH_DDP else Strategy.from_json(locked)
            self._cmp = None
            self._current = None
            self._switch_to(self.locked)
        else:
            self._start_round()
