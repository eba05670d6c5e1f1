"""The ranker kinds, registered by name once: one class per kind says how it scores, whether it
has weights to fit, save and load, which features it reads and what it needs installed.

- :class:`Analytical`: the analytical sync-only cost model (no weights; scores are predicted
  synchronization seconds; its features do not depend on the measured physics);
- :class:`StepTime`: the event-driven step-time simulator (no weights; scores are simulated
  step seconds);
- :class:`Learned`: a ranking network, one per :class:`~autosync_transfer.rankers.modules.RankerModule`
  subclass (linear, residual, RNN, GAT, transformer), fitted by
  :func:`~autosync_transfer.rankers.simulator.train_simulator`.

Code elsewhere asks a kind what it is (``kind_of(name).learned``, a :class:`Simulator`'s
``learned``) and never compares kind names itself. The learned kinds are read from
``modules.RANKERS`` on first use (Lightning is imported then, not before).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from autosync_transfer.errors import UnknownNameError

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.features import StrategyFeatures
    from autosync_transfer.rankers.modules import RankerModule
    from autosync_transfer.rankers.simulator import Simulator

__all__ = ["RankerKind", "Analytical", "StepTime", "Learned", "kind_of", "kind_names",
           "is_learned", "ANALYTICAL", "STEPSIM"]

#: the kind of the analytical cost-model simulator (no weights)
ANALYTICAL = "analytical"
#: the kind of the step-time simulator (rankers.stepsim; no weights): scores are simulated seconds
STEPSIM = "stepsim"


class RankerKind:
    """What one kind of ranker is. Subclasses set the class attributes and implement
    :meth:`score` / :meth:`score_features` for a :class:`Simulator` of their kind."""

    name: ClassVar[str] = ""
    #: has weights: fitted by training, saved and loaded with the simulator
    learned: ClassVar[bool] = False
    #: its scores depend on the physics the step-simulator features are computed with
    reads_physics: ClassVar[bool] = True

    def score(self, sim: Simulator, strategies: Any, domain: Domain,
              batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def score_features(self, sim: Simulator, features: Sequence[StrategyFeatures],
                       batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def requirements(self) -> tuple[str, ...]:
        """Distributions a logged simulator of this kind needs beyond the package's own."""
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _Physics(RankerKind):
    """A kind without weights that scores by a model of the step: one aggregate feature column
    (its prediction) when scoring featurized strategies."""

    agg_column: ClassVar[str] = ""

    def score_features(self, sim: Simulator, features: Sequence[StrategyFeatures],
                       batch_size: int) -> np.ndarray:
        from autosync_transfer.rankers.features import FEATURE_SCHEMA

        col = FEATURE_SCHEMA.agg_index(self.agg_column)
        return np.array([float(f.agg[col]) for f in features], dtype=np.float64)


class Analytical(_Physics):
    name = ANALYTICAL
    reads_physics = False  # the cost model reads the cluster spec only
    agg_column = "total"

    def score(self, sim: Simulator, strategies: Any, domain: Domain,
              batch_size: int) -> np.ndarray:
        return sim._featurizer_for(domain).totals(strategies)


class StepTime(_Physics):
    name = STEPSIM
    agg_column = "sim_step"

    def score(self, sim: Simulator, strategies: Any, domain: Domain,
              batch_size: int) -> np.ndarray:
        return sim._featurizer_for(domain).simulator.score(strategies)


class Learned(RankerKind):
    """A learned ranker: the network ``module_class``."""

    learned = True

    def __init__(self, module_class: type[RankerModule]) -> None:
        self.module_class = module_class

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.module_class.kind

    def score(self, sim: Simulator, strategies: Any, domain: Domain,
              batch_size: int) -> np.ndarray:
        from autosync_transfer.rankers.simulator import _score_aggregates, _score_features

        module = sim.module
        featurizer = sim._featurizer_for(domain)
        if module.inputs <= {"agg"}:
            return _score_aggregates(module, featurizer.aggregates(strategies), batch_size)
        return _score_features(module, featurizer.featurize_many(strategies), batch_size)

    def score_features(self, sim: Simulator, features: Sequence[StrategyFeatures],
                       batch_size: int) -> np.ndarray:
        from autosync_transfer.rankers.simulator import _score_features

        return _score_features(sim.module, list(features), batch_size)

    def requirements(self) -> tuple[str, ...]:
        return tuple(getattr(self.module_class, "requirements", ()))


_PHYSICS_KINDS: dict[str, RankerKind] = {k.name: k for k in (Analytical(), StepTime())}
_registry: dict[str, RankerKind] | None = None


def _kinds() -> dict[str, RankerKind]:
    global _registry
    if _registry is None:
        from autosync_transfer.rankers.modules import RANKERS

        _registry = {**_PHYSICS_KINDS, **{name: Learned(cls) for name, cls in RANKERS.items()}}
    return _registry


def kind_names() -> list[str]:
    """Every registered kind, the physics ones first."""
    return list(_kinds())


def kind_of(name: str) -> RankerKind:
    """The kind registered as ``name``; an unknown name is an :class:`UnknownNameError`."""
    kinds = _kinds()
    if name not in kinds:
        raise UnknownNameError(f"unknown ranker {name!r} (known: {', '.join(kinds)})")
    return kinds[name]


def is_learned(name: str) -> bool:
    """Whether kind ``name`` has weights (an unknown name counts as learned: loading it then
    fails on its weights or its kind, with the reason). Needs no learned module imported."""
    return name not in _PHYSICS_KINDS
