"""Proposers: the search methods, one class each, in the manner of Optuna's samplers.

:data:`PROPOSERS` maps the method word (``SearchConfig.method``, the CLI's ``--method``) to its
class, once: ``autosync``, ``stepsim`` and ``analytical`` rank candidates (by a learned
simulator, by the step-time simulator, by the analytical cost model), ``random`` takes the sampler's candidates as they come, ``tpe`` asks
Optuna's TPE over the knob encoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosync_transfer.search.proposers.base import (Proposer, SamplingProposer, uniform_knobs,
                                                     unmeasured)
from autosync_transfer.search.proposers.random import RandomProposer
from autosync_transfer.search.proposers.ranked import (AnalyticalProposer, AutoSyncProposer,
                                                       RankedProposer, StepSimProposer)
from autosync_transfer.search.proposers.tpe import TPEProposer

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.search.config import SearchConfig

__all__ = ["PROPOSERS", "RANKED_METHODS", "SEARCH_METHODS", "AnalyticalProposer",
           "AutoSyncProposer", "Proposer", "RandomProposer", "RankedProposer", "SamplingProposer",
           "StepSimProposer", "TPEProposer", "make_proposer", "uniform_knobs", "unmeasured"]

#: the method word -> its proposer class
PROPOSERS: dict[str, type[Proposer]] = {
    cls.method: cls for cls in (AutoSyncProposer, RandomProposer, TPEProposer, AnalyticalProposer,
                                StepSimProposer)
}
#: the search methods (``SearchConfig.method``)
SEARCH_METHODS: tuple[str, ...] = tuple(PROPOSERS)
#: the methods that rank candidates (and so can rank knob candidates too)
RANKED_METHODS: tuple[str, ...] = tuple(m for m, cls in PROPOSERS.items() if cls.ranked)


def make_proposer(domain: Domain, config: SearchConfig, *,
                  warm: Simulator | None = None) -> Proposer:
    """The proposer of ``config.method`` on ``domain``, starting from ``warm`` (methods that
    warm-start); one line naming the first setting it cannot search with."""
    cls = PROPOSERS[config.method]
    cls.check(config, warm)
    if cls.warm_starts:
        return cls(domain, config, warm=warm)  # type: ignore[call-arg]
    return cls(domain, config)
