"""Ranked search: score every candidate, pick the best with diversity.

Each round's candidates are the sampler's (:class:`~.base.SamplingProposer`), ``neighbours``
strategies near the ``parents`` fastest measured so far, builders included
(:mod:`autosync_transfer.search.neighbours`), and ``knob_candidates`` whole-model strategies
decoded from uniform knob assignments (:mod:`autosync_transfer.strategies.knobs`: corners the
per-variable sampler rarely reaches). A simulator scores them; ``per_round`` are picked, best
first with diversity (:func:`~autosync_transfer.search.selection.select_diverse`). Two scorers:

- :class:`AutoSyncProposer` (``autosync``): a learned simulator, re-trained after every round on
  every trial of the run: fine-tuned from the warm-start simulator when there is one, else trained
  from scratch once ``min_train`` strategies are measured (before that, a cold search picks at
  random: AutoSync without a simulator);
- :class:`AnalyticalProposer` (``analytical``): the analytical cost model, never re-trained.
- :class:`StepSimProposer` (``stepsim``): the step-time simulator, never re-trained.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync_transfer.errors import ConfigError
from autosync_transfer.search.proposers.base import uniform_knobs, unmeasured
from autosync_transfer.search.proposers.random import RandomProposer
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.summary import SearchProgress

__all__ = ["AnalyticalProposer", "AutoSyncProposer", "RankedProposer"]


class RankedProposer(RandomProposer):
    """Candidates scored by :meth:`scorer` (lower: predicted faster), picked best first with
    diversity; without a scorer (yet), the round is picked as :class:`RandomProposer` does."""

    ranked = True

    @abstractmethod
    def scorer(self) -> Simulator | None:
        """The simulator that scores this round's candidates (``None``: none yet)."""

    def knob_candidates(self, round_no: int) -> list[Strategy]:
        """``knob_candidates`` distinct strategies of round ``round_no`` decoded from uniform
        knob assignments (deterministic per round)."""
        from autosync_transfer.strategies.knobs import decode

        rng = np.random.default_rng([self.seed, round_no, 2])
        out: dict[str, Strategy] = {}
        for _ in range(4 * self.config.knob_candidates):
            s = decode(uniform_knobs(rng, lossless=self.lossless), self.domain)
            out.setdefault(s.content_key, s)
            if len(out) >= self.config.knob_candidates:
                break
        return list(out.values())

    def propose(self, round_no: int, k: int, measured: set[str], history: Sequence[Strategy],
                parents: Sequence[Strategy] = ()) -> list[Strategy]:
        from autosync_transfer.runtime.accuracy import is_lossless
        from autosync_transfer.search.neighbours import neighbours
        from autosync_transfer.search.selection import POOL, select_diverse

        simulator = self.scorer()
        if simulator is None:
            return super().propose(round_no, k, measured, history, parents)
        sampled = self.candidates(round_no)
        if self.lossless:
            parents = [p for p in parents if is_lossless(p)]
        near: Sequence[Strategy] = neighbours(
            parents, sampled[: min(len(sampled), 64)], self.config.neighbours, self.domain,
            seed=self.round_seed(round_no) + 1)
        if self.config.knob_candidates:
            near = [*near, *self.knob_candidates(round_no)]
        if self.lossless:
            near = [s for s in near if is_lossless(s)]
        cands: Sequence[Strategy] = _Joined(sampled, near)
        scores = np.concatenate([simulator.score(sampled, self.domain),
                                 simulator.score(near, self.domain)])
        if self.objective.checks_convergence:  # time to loss: seconds x the estimated ratio
            scores = (self.seconds(simulator, scores)
                      * np.concatenate([self.ratios(sampled), self.ratios(near)]))
        scores = np.where(np.isfinite(scores), scores, np.inf)
        order = np.lexsort((np.arange(len(cands)), scores))
        # select_diverse considers only the best-scored unmeasured candidates (its pool), so only
        # their objects are built
        keep = unmeasured(cands, order, measured, max(POOL, k))
        best = [cands[i] for i in keep]
        idx = select_diverse(best, scores[keep].tolist(), k, diversity=self.config.diversity,
                             pool=max(POOL, k), seen=history)
        return [best[i] for i in idx]

    def seconds(self, simulator: Simulator, scores: np.ndarray) -> np.ndarray:
        """``scores`` of ``simulator`` as step seconds, so that a step ratio can multiply them.
        The analytical and step-time models give seconds already. A learned simulator's
        slowness scores have no unit (a ranking loss fixes neither their offset nor their
        scale, and they may be negative): they are mapped through ``log t = a score + b``,
        fitted on the strategies the run measured (:attr:`timed`); when the fit does not rise
        (a <= 0, or fewer than 3 distinct scores), through the quantiles of the measured times
        matched to those of their scores (with fewer than 2 measured: the scores' ranks)."""
        if not getattr(simulator, "learned", True):  # a model of the step: seconds already
            return scores
        timed = list(self.timed)[-500:]
        if len(timed) < 2:  # nothing to fit on: positive, in the scores' order
            return (np.argsort(np.argsort(scores, kind="stable")) + 1.0) / max(len(scores), 1)
        measured = simulator.score([s for s, _ in timed], self.domain)
        logt = np.log(np.array([t for _, t in timed], dtype=np.float64))
        ok = np.isfinite(measured)
        if ok.sum() >= 3 and np.ptp(measured[ok]) > 0:
            a, b = np.polyfit(measured[ok], logt[ok], 1)
            if a > 0:
                return np.exp(a * scores + b)
        xs, ys = np.sort(measured[ok]), np.sort(logt[ok])
        if len(xs) < 2 or np.ptp(xs) <= 0:
            return np.full(len(scores), float(np.exp(np.median(logt))))
        return np.exp(np.interp(scores, xs, ys))


class AnalyticalProposer(RankedProposer):
    """Ranked by the analytical cost model (nothing learned)."""

    method = "analytical"

    def scorer(self) -> Simulator:
        from autosync_transfer.rankers.simulator import Simulator

        return Simulator("analytical")


class StepSimProposer(RankedProposer):
    """Ranked by the step-time simulator (:mod:`autosync_transfer.rankers.stepsim`; nothing
    learned)."""

    method = "stepsim"

    _stepsim: Simulator | None = None

    def scorer(self) -> Simulator:
        from autosync_transfer.rankers.simulator import STEPSIM, Simulator

        # kept between rounds (its featurizer too); the physics of the search's launcher
        if self._stepsim is None or self._stepsim.launcher != self.launcher:
            self._stepsim = Simulator(STEPSIM, launcher=self.launcher)
        return self._stepsim


class AutoSyncProposer(RankedProposer):
    """AutoSync: ranked by a learned simulator, re-trained on every trial of the run before each
    round (a cold search from round 1 on, once ``min_train`` strategies are measured; a warm one
    from round 0, fine-tuning ``warm``)."""

    method = "autosync"
    warm_starts = True

    def __init__(self, domain: Domain, config: SearchConfig, *,
                 warm: Simulator | None = None) -> None:
        super().__init__(domain, config)
        self._warm = warm
        self._simulator: Simulator | None = warm

    @classmethod
    def check(cls, config: SearchConfig, warm: Simulator | None = None) -> None:
        super().check(config, warm)
        if warm is None:
            from autosync_transfer.rankers.modules import RANKERS

            learned = list(RANKERS)  # the analytical cost model learns nothing
            if config.ranker not in learned:
                raise ConfigError(f"ranker must be a learned ranker ({', '.join(learned)}), "
                                  f"got {config.ranker!r}")

    @property
    def warm(self) -> Simulator | None:
        return self._warm

    @property
    def simulator(self) -> Simulator | None:
        return self._simulator

    def scorer(self) -> Simulator | None:
        sim = self._simulator
        if sim is not None and sim.launcher != self.launcher:  # the search's physics
            sim = self._simulator = sim.with_launcher(self.launcher)
        return sim

    def refits_before(self, round_no: int) -> bool:
        # a cold search picks all of round 0 at random, also when it continues mid-round
        return round_no > 0 or self._warm is not None

    def fit(self, progress: SearchProgress, strategies: Mapping[str, Strategy]) -> None:
        from autosync_transfer.adapt.methods import FineTune, FromScratch
        from autosync_transfer.adapt.training import ShotTraining

        data = self.training_data(strategies)
        # the epochs are chosen on held-out trials, then every trial trains the simulator
        training = ShotTraining(max_epochs=self.config.max_epochs, refit=True)
        if self._warm is not None:
            if len(data) >= 2:
                self._simulator = FineTune("full", training=training).fit(
                    self._warm, data, seed=self.seed).simulator
        elif len(data) >= self.config.min_train:
            self._simulator = FromScratch(self.config.ranker, training=training).fit(
                None, data, seed=self.seed).simulator

    def training_data(self, strategies: Mapping[str, Strategy]) -> Any:
        """Every strategy of the run measured in the store, once, with its time (a failure
        counts as twice the slowest ok time)."""
        from autosync_transfer.adapt.data import TargetData

        if self.store is None:
            from autosync_transfer.errors import NotFittedError

            raise NotFittedError("AutoSyncProposer.fit needs bind(store, ...) first")
        by_fp: dict[str, tuple[Strategy, float]] = {}
        records = {r.id: r for r in self.store.records() if r.id in strategies}
        ok = {rid: float(r.median_s) for rid, r in records.items()
              if r.status == "ok" and r.median_s}
        # a failed or timed-out strategy is a slow one to the ranker: twice the slowest ok time
        # (as TPE is told), so that the simulator learns to avoid its region
        penalty = 2 * max(ok.values()) if ok else None
        for rid, r in records.items():
            t = ok.get(rid, penalty if r.status != "ok" else None)
            if t is not None:
                s = strategies[rid]
                by_fp.setdefault(s.content_key, (s, t))
        keyed = sorted((f"{s.id}#{fp[:8]}", s, t) for fp, (s, t) in by_fp.items())
        return TargetData(self.domain, tuple(k for k, _, _ in keyed),
                          tuple(s for _, s, _ in keyed), tuple(t for _, _, t in keyed),
                          self.launcher)


class _Joined(Sequence[Strategy]):
    """Two sequences of strategies read as one (the sampled batch stays lazy)."""

    def __init__(self, first: Sequence[Strategy], second: Sequence[Strategy]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, i: int) -> Strategy:  # type: ignore[override]
        n = len(self.first)
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i = i % len(self)
        return self.first[i] if i < n else self.second[i - n]
