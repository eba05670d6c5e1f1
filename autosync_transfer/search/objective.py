"""What a search minimizes: step time, or time to a target loss (:data:`OBJECTIVES`).

- :class:`StepTime` (``step-time``): the median step time of a trial (the behaviour before time
  to accuracy was measured);
- :class:`TimeToLoss` (``time-to-loss``, the default): median step time x the steps the strategy
  needs to reach the target loss relative to exact synchronization. During the search the ratio
  is *estimated*: 1.0 for a lossless strategy; from the trial's gradient-fidelity probe when it
  has one (``record.fidelity``, :func:`~autosync_transfer.rankers.fidelity.step_ratio` of its
  relative error); else from the :class:`~autosync_transfer.rankers.fidelity.FidelityModel`
  (fitted on the run's probes, a prior per compressor before). At the end the final candidates
  get a convergence run (:mod:`autosync_transfer.runtime.convergence`) and the *measured* ratio
  replaces the estimate; a strategy that fails its check is excluded.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.strategies.types import Strategy

__all__ = ["OBJECTIVES", "Objective", "StepTime", "TimeToLoss", "get_objective",
           "record_fidelity"]


def record_fidelity(record: Any) -> dict[str, Any] | None:
    """The gradient-fidelity probe a trial record holds (a dict), or ``None``."""
    fid = record.get("fidelity") if isinstance(record, Mapping) else getattr(record, "fidelity", None)
    if fid is None:
        return None
    if hasattr(fid, "model_dump"):
        return dict(fid.model_dump())
    return dict(fid) if isinstance(fid, Mapping) else None


class Objective(ABC):
    """A search objective: :meth:`ratio` estimates a strategy's steps-to-target ratio,
    :meth:`score` the value to minimize (lower is better)."""

    #: the word naming it (``SearchConfig.objective``, ``--objective``)
    name: ClassVar[str]
    #: whether final candidates get convergence runs
    checks_convergence: ClassVar[bool] = False

    @abstractmethod
    def ratio(self, strategy: Strategy | None, record: Any = None,
              model: FidelityModel | None = None, graph: ModelGraph | None = None) -> float:
        """Estimated steps to the target loss relative to exact synchronization."""

    def score(self, median_s: float | None, ratio: float = 1.0) -> float:
        """The value to minimize: ``median_s x ratio`` (``inf`` without a time)."""
        if median_s is None or not median_s > 0:
            return math.inf
        return float(median_s) * ratio

    def ratios(self, strategies: Sequence[Strategy], model: FidelityModel | None,
               graph: ModelGraph) -> np.ndarray:
        """Estimated ratios of candidates (no probe yet) to rank them."""
        import numpy as np

        return np.array([self.ratio(s, None, model, graph) for s in strategies])


class StepTime(Objective):
    """Seconds per step (every ratio 1.0)."""

    name = "step-time"

    def ratio(self, strategy: Strategy | None, record: Any = None,
              model: FidelityModel | None = None, graph: ModelGraph | None = None) -> float:
        return 1.0

    def ratios(self, strategies: Sequence[Strategy], model: FidelityModel | None,
               graph: ModelGraph) -> np.ndarray:
        import numpy as np

        return np.ones(len(strategies))


class TimeToLoss(Objective):
    """Seconds per step x estimated steps-to-target ratio (module docstring)."""

    name = "time-to-loss"
    checks_convergence = True

    def ratio(self, strategy: Strategy | None, record: Any = None,
              model: FidelityModel | None = None, graph: ModelGraph | None = None) -> float:
        from autosync_transfer.rankers.fidelity import step_ratio
        from autosync_transfer.runtime.accuracy import is_lossless

        if strategy is None or is_lossless(strategy):
            return 1.0
        k = model.k if model is not None else 1.0
        fid = record_fidelity(record) if record is not None else None
        if fid is not None and fid.get("rel_error") is not None:
            return step_ratio(float(fid["rel_error"]), k)
        if model is not None and graph is not None:
            return float(model.ratio([strategy], graph)[0])
        return 1.0  # unknown: the convergence run of the final candidates decides

    def ratios(self, strategies: Sequence[Strategy], model: FidelityModel | None,
               graph: ModelGraph) -> np.ndarray:
        import numpy as np

        if model is None:
            return np.ones(len(strategies))
        return model.ratio(strategies, graph)


#: the objectives by name
OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (TimeToLoss, StepTime)}


def get_objective(name: str) -> Objective:
    """The objective named ``name``."""
    try:
        return OBJECTIVES[name]()
    except (KeyError, TypeError):
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got "
                          f"{name!r}") from None
