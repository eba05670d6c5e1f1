"""``AutoSyncStrategy`` with the simulator's choice: the runtime's Lightning strategy
(:class:`autosync_transfer.runtime.lightning.AutoSyncStrategy`) whose strategy, when not given,
is picked at setup time by :func:`~autosync_transfer.search.recommend.recommend` with the
step-time simulator or another simulator (an object, or one loaded from the registry by rank 0).

This module imports Lightning; import it on demand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.lightning import AutoSyncStrategy as _RuntimeStrategy
from autosync_transfer.strategies.types import Strategy

__all__ = ["AutoSyncStrategy", "Recommender"]


class Recommender:
    """A picker for the Lightning strategy: ``picker(graph, cluster)`` is
    ``recommend(graph, cluster, simulator, candidates=..., seed=..., allow_lossy=...)`` (a
    registry reference is loaded on the first call, i.e. by rank 0 at setup time; lossy
    strategies only with ``allow_lossy``, as ``recommend``)."""

    def __init__(self, simulator: Any = None, *, candidates: int = 2000, seed: int = 0,
                 allow_lossy: bool = False) -> None:
        if candidates < 0:
            raise ConfigError(f"candidates must be >= 0, got {candidates}")
        self.simulator = simulator
        self.candidates = candidates
        self.seed = seed
        self.allow_lossy = allow_lossy

    def __call__(self, graph: ModelGraph, cluster: Cluster) -> Strategy:
        from autosync_transfer.search.recommend import recommend

        return recommend(graph, cluster, self.simulator, candidates=self.candidates,
                         seed=self.seed, allow_lossy=self.allow_lossy)


class AutoSyncStrategy(_RuntimeStrategy):
    """The runtime's ``AutoSyncStrategy`` (same arguments), where ``strategy=None`` lets
    ``simulator`` choose at setup time.

    Args:
        strategy: the synchronization strategy, a picker ``picker(graph, cluster) -> Strategy``,
            or ``None`` to choose one with :func:`~autosync_transfer.search.recommend.recommend`.
        cluster: see the runtime's ``AutoSyncStrategy``.
        simulator: only when ``strategy`` is ``None``: the ranker that picks the strategy — a
            :class:`~autosync_transfer.rankers.simulator.Simulator`, a registry URI or name
            (``"models:/autosync-bert-B@champion"``, loaded by rank 0), or ``None`` for the
            step-time simulator. With ``autotune`` and no candidates in it, the simulator also
            proposes the candidates the job tries.
        candidates, seed: sampled candidates scored by ``recommend`` and its sampler's seed.
        allow_lossy: let ``recommend`` choose a lossy strategy (fp16, PowerSGD) without a
            convergence check (default: lossless ones only); it trains with a warning.
        **kwargs: the runtime strategy's other arguments (``batch_size``, ``seq_len``,
            ``process_group_backend``, ``convergence_check``, DDP process and device options).
    """

    def __init__(self, strategy: Any = None, cluster: Cluster | str | None = None, *,
                 simulator: Any = None, candidates: int = 2000, seed: int = 0,
                 allow_lossy: bool = False, **kwargs: Any) -> None:
        if strategy is not None and simulator is not None:
            raise ConfigError("give either a strategy or a simulator to choose one, not both")
        picker = Recommender(simulator, candidates=candidates, seed=seed,
                             allow_lossy=allow_lossy)
        super().__init__(picker if strategy is None else strategy, cluster, **kwargs)
        self.simulator = simulator
        self.candidates = candidates
        self.seed = seed

    def autotune_candidates(self, graph: ModelGraph, cluster: Cluster) -> Any:
        """Autotune candidates when ``autotune`` names none: the ``simulator``'s top strategies
        (:class:`~autosync_transfer.search.autotune.SimulatorProposer`, called on rank 0)."""
        from autosync_transfer.search.autotune import SimulatorProposer

        allow_lossy = bool(getattr(self.autotune, "allow_lossy", False))
        return SimulatorProposer(self.simulator, k=4, candidates=min(self.candidates, 500),
                                 seed=self.seed, lossless=not allow_lossy)

    @classmethod
    def from_registry(cls, uri_or_name: str, cluster: Cluster | str | None = None, *,
                      candidates: int = 2000,
                      **kwargs: Any) -> AutoSyncStrategy:
        """Choose the strategy at setup time with the registered simulator ``uri_or_name``
        (``"models:/autosync-bert-B@champion"``, or a registered model name for its champion)."""
        if not isinstance(uri_or_name, str) or not uri_or_name:
            raise ConfigError(
                f"registry URI or model name must be a non-empty string, got {uri_or_name!r}"
            )
        return cls(None, cluster, simulator=uri_or_name, candidates=candidates, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, cluster: Cluster | str | None = None,
                  **kwargs: Any) -> AutoSyncStrategy:
        """Use the strategy of a JSON file or an AutoDist (protobuf) strategy file."""
        return cls(Strategy.from_file(path), cluster, **kwargs)
