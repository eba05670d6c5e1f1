"""The proposer interface: what a search asks for the strategies to measure next.

A :class:`Proposer` is one search method, in the manner of an Optuna sampler: the search binds it
to its run once (:meth:`Proposer.bind`: state read from the store), and then, round after round,
lets it learn from every result so far when it learns (:meth:`Proposer.fit`), asks it for ``k``
new strategies (:meth:`Proposer.propose`), measures them, and tells it each result
(:meth:`Proposer.tell`). A proposer owns its state and its randomness: everything it draws comes
from its ``seed`` (the run's), per round, so that a continued run proposes what the uninterrupted
one would have.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import math

import numpy as np

from autosync_transfer.errors import ConfigError
from autosync_transfer.search.objective import Objective, get_objective
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.dataset.store import TrialRecord, TrialStore
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.summary import SearchProgress
    from autosync_transfer.strategies.sampler import SampledBatch

__all__ = ["Proposer", "SamplingProposer", "unmeasured", "uniform_knobs"]


class Proposer(ABC):
    """One search method on ``domain``, configured by ``config`` (its ``seed`` is the
    proposer's). Subclasses set :attr:`method` (the word naming them in
    :data:`~autosync_transfer.search.proposers.PROPOSERS`) and implement :meth:`propose`."""

    #: the method word (``SearchConfig.method``)
    method: ClassVar[str]
    #: ranks candidates (so whole-model knob candidates may join them)
    ranked: ClassVar[bool] = False
    #: may start from a warm-start simulator
    warm_starts: ClassVar[bool] = False

    def __init__(self, domain: Domain, config: SearchConfig) -> None:
        self.domain = domain
        self.config = config
        self.seed = config.seed
        self.store: TrialStore | None = None
        self.run: str | None = None
        #: the search's objective (ranks by step time or by estimated time to target loss)
        self.objective: Objective = get_objective(config.objective)
        #: predicts a candidate's gradient error for the objective (set by the search)
        self.fidelity: FidelityModel | None = None
        #: the launcher the search measures with (set by the search): the simulators score with
        #: the cluster calibration made with it
        self.launcher: str | None = None
        #: ``(strategy, median seconds)`` of every strategy the run measured ok so far, builders
        #: included (set by the search before each round)
        self.timed: Sequence[tuple[Strategy, float]] = ()

    @property
    def lossless(self) -> bool:
        """Whether only lossless strategies may be proposed (``config.lossless``)."""
        return bool(getattr(self.config, "lossless", False))

    def ratios(self, cands: Sequence[Strategy]) -> np.ndarray:
        """The objective's estimated steps-to-target ratios of ``cands`` (1.0 by step time)."""
        return self.objective.ratios(cands, self.fidelity, self.domain.model)

    def value(self, strategy: Strategy, record: TrialRecord, penalty: float) -> float:
        """What a measurement is worth to the objective: the median time (``penalty`` when it
        failed) x the strategy's estimated ratio."""
        t = float(record.median_s) if record.status == "ok" and record.median_s else penalty
        ratio = self.objective.ratio(strategy, record, self.fidelity, self.domain.model)
        return t * ratio if math.isfinite(ratio) else 2 * penalty

    @classmethod
    def check(cls, config: SearchConfig, warm: Simulator | None = None) -> None:
        """One line naming the first setting this method cannot search with, else nothing."""
        from autosync_transfer.search.proposers import PROPOSERS

        if warm is not None and not cls.warm_starts:
            words = " or ".join(repr(m) for m, p in PROPOSERS.items() if p.warm_starts)
            raise ConfigError(f"warm_start needs method={words}, got method={config.method!r}")
        if warm is not None and not warm.learned:
            raise ConfigError(f"warm_start needs a learned simulator, got the {warm.kind} model")
        if config.knob_candidates and not cls.ranked:
            words = ", ".join(m for m, p in PROPOSERS.items() if p.ranked)
            raise ConfigError(f"knob_candidates needs a ranked method ({words}), "
                              f"got {config.method!r}")
        from autosync_transfer.strategies.sampler import preset

        preset(config.preset)  # the name, before anything runs

    @property
    def warm(self) -> Simulator | None:
        """The simulator this proposer started from (methods that warm-start)."""
        return None

    @property
    def simulator(self) -> Simulator | None:
        """The simulator it has learned (methods that learn one), else ``None``."""
        return None

    def bind(self, store: TrialStore, run: str, progress: SearchProgress,
             strategies: Mapping[str, Strategy]) -> None:
        """Bind to run ``run`` stored in ``store``, which holds ``progress`` and ``strategies``
        (by record id): set up the state a continued run resumes from. Called once, before the
        first round."""
        self.store, self.run = store, run

    def refits_before(self, round_no: int) -> bool:
        """Whether :meth:`fit` learns something before round ``round_no``."""
        return False

    def fit(self, progress: SearchProgress, strategies: Mapping[str, Strategy]) -> None:
        """Learn from every result of the run so far (nothing, unless the method learns)."""

    @abstractmethod
    def propose(self, round_no: int, k: int, measured: set[str], history: Sequence[Strategy],
                parents: Sequence[Strategy] = ()) -> list[Strategy]:
        """Up to ``k`` new strategies for round ``round_no``: none of ``measured`` (content keys),
        none twice. ``history``: the strategies measured so far; ``parents``: the fastest of
        them (builders included), for local search."""

    def tell(self, strategy: Strategy, record: TrialRecord, penalty: float) -> None:
        """The measurement of a proposed ``strategy``; ``penalty``: what a failure counts as."""


class SamplingProposer(Proposer):
    """A proposer that draws each round's candidates from the constrained strategy sampler
    (``config.candidates`` of preset ``config.preset``, with a fresh seed per round)."""

    def round_seed(self, round_no: int) -> int:
        """The sampler's seed of round ``round_no``."""
        return (self.seed * 100003 + round_no * 7919 + 17) % (2**31 - 1)

    def candidates(self, round_no: int) -> SampledBatch:
        """Round ``round_no``'s sampled candidates (the same whenever asked)."""
        from autosync_transfer.strategies.sampler import StrategySampler, preset

        lossless = {"compressors": ("none",)} if self.lossless else {}
        return StrategySampler(self.domain, preset(self.config.preset, **lossless),
                               seed=self.round_seed(round_no)).sample_batch(self.config.candidates)


def unmeasured(cands: Sequence[Strategy], order: Iterable[int], measured: set[str], limit: int
               ) -> list[int]:
    """Indices of the first ``limit`` candidates in ``order`` that are neither measured nor a
    repeat of an earlier one (only their strategy objects are built)."""
    seen: set[str] = set()
    out: list[int] = []
    for i in order:
        fp = cands[int(i)].content_key
        if fp in measured or fp in seen:
            continue
        seen.add(fp)
        out.append(int(i))
        if len(out) >= limit:
            break
    return out


def uniform_knobs(rng: np.random.Generator, *, lossless: bool = False) -> dict[str, Any]:
    """One assignment of every knob, each drawn uniformly from its choices or range
    (``lossless``: the compressor is ``none``)."""
    from autosync_transfer.strategies.knobs import KNOBS

    out = {kn.name: (kn.choices[int(rng.integers(len(kn.choices)))] if kn.categorical
                     else int(rng.integers(kn.low, kn.high + 1))) for kn in KNOBS}
    if lossless:
        out["compressor"] = "none"
    return out
