"""Recommend a strategy for a model on a cluster without running anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.runtime.accuracy import ConvergenceCheck
    from autosync_transfer.search.export import ExportChoice

__all__ = ["recommend", "recommend_checked"]


def recommend(model: Any, cluster: Cluster | str, simulator: Any = None, *, candidates: int = 2000,
              seed: int = 0, batch_size: int = 1, seq_len: int = 1, preset: str = "dataset",
              allow_lossy: bool = False,
              checks: Mapping[str, ConvergenceCheck] | None = None,
              launcher: str | None = None) -> Strategy:
    """The candidate ``simulator`` ranks fastest among the hand-optimized builders and
    ``candidates`` sampled strategies, lossy ones only with a passed convergence check in
    ``checks`` (by strategy id) or ``allow_lossy`` (:mod:`autosync_transfer.search.export`;
    :func:`recommend_checked` also says which were passed over).

    ``model``: a ``torch.nn.Module`` (any device, ``meta`` included) or a :class:`ModelGraph`;
    ``batch_size``/``seq_len`` per worker size the sparse traffic of embeddings. ``cluster``: a
    :class:`Cluster` or a catalog name (``"B"``). ``simulator``: a
    :class:`~autosync_transfer.rankers.simulator.Simulator`, a registry reference
    (``models:/NAME@ALIAS``, ``models:/NAME/VERSION`` or a registered name: its champion), or
    ``None`` for the step-time simulator (its stored workload profile and cluster calibration
    where there are any, found by fingerprint; nominal cluster numbers and a FLOP estimate
    otherwise). ``launcher``: what the strategy will run with
    (``torchrun``, ``emulated``, ...): the step-simulator physics (its features, the
    ``stepsim`` kind) uses the stored calibration of the cluster made with it (``None``: the
    simulator's own ``launcher``; by default any calibration, a non-emulated one preferred).
    """
    return recommend_checked(model, cluster, simulator, candidates=candidates, seed=seed,
                             batch_size=batch_size, seq_len=seq_len, preset=preset,
                             allow_lossy=allow_lossy, checks=checks,
                             launcher=launcher).strategy  # type: ignore[return-value]


def recommend_checked(model: Any, cluster: Cluster | str, simulator: Any = None, *,
                      candidates: int = 2000, seed: int = 0, batch_size: int = 1,
                      seq_len: int = 1, preset: str = "dataset", allow_lossy: bool = False,
                      checks: Mapping[str, ConvergenceCheck] | None = None,
                      launcher: str | None = None) -> ExportChoice:
    """:func:`recommend`'s pick with the lossy candidates ranked above it that were refused
    (an :class:`~autosync_transfer.search.export.ExportChoice`; the hand-optimized builders are
    lossless, so there is always a pick)."""
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.search.export import ExportChoice, refusal
    from autosync_transfer.strategies.builders import BUILDERS, build
    from autosync_transfer.strategies.sampler import StrategySampler
    from autosync_transfer.strategies.sampler import preset as sampler_preset

    if isinstance(cluster, str):
        from autosync_transfer.domains.catalog import get_cluster

        cluster = get_cluster(cluster)
    if isinstance(simulator, str):
        from autosync_transfer.registry.models import load_simulator

        simulator = load_simulator(simulator)
    graph = model if isinstance(model, ModelGraph) else ModelGraph.from_torch(
        model, name="model", batch_size=batch_size, seq_len=seq_len)
    domain = Domain(name=f"{graph.name}-{cluster.name}", model=graph, cluster=cluster)
    builders = [build(b, domain) for b in BUILDERS]
    sampled = StrategySampler(domain, sampler_preset(preset), seed=seed).sample_batch(candidates)
    ranker = simulator if simulator is not None else Simulator("stepsim")
    if launcher is not None:
        ranker = ranker.with_launcher(launcher)
    # the sampled candidates are scored from the sampler's arrays; only those walked are built
    scores = np.concatenate((ranker.score(builders, domain), ranker.score(sampled, domain)))
    excluded = []
    for i in np.lexsort((np.arange(scores.size), scores)):
        s = builders[i] if i < len(builders) else sampled[int(i) - len(builders)]
        why = refusal(s, checks, allow_lossy)
        if why is None:
            return ExportChoice(s, None, tuple(excluded))
        excluded.append(why)
    return ExportChoice(None, None, tuple(excluded), "no candidate may be recommended")
