"""Recommend a strategy for a model on a cluster without running anything."""

from __future__ import annotations

from typing import Any

import numpy as np

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.strategies.types import Strategy

__all__ = ["recommend"]


def recommend(model: Any, cluster: Cluster | str, simulator: Any = None, *, candidates: int = 2000,
              seed: int = 0, batch_size: int = 1, seq_len: int = 1, preset: str = "dataset") -> Strategy:
    """The candidate ``simulator`` ranks fastest among the hand-optimized builders and
    ``candidates`` sampled strategies.

    ``model``: a ``torch.nn.Module`` (any device, ``meta`` included) or a :class:`ModelGraph`;
    ``batch_size``/``seq_len`` per worker size the sparse traffic of embeddings. ``cluster``: a
    :class:`Cluster` or a catalog name (``"B"``). ``simulator``: a
    :class:`~autosync_transfer.rankers.simulator.Simulator`, a registry reference
    (``models:/NAME@ALIAS``, ``models:/NAME/VERSION`` or a registered name: its champion), or
    ``None`` for the analytical cost model.
    """
    from autosync_transfer.rankers.simulator import Simulator
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
    ranker = simulator if simulator is not None else Simulator("analytical")
    # the sampled candidates are scored from the sampler's arrays; only the pick is built
    scores = np.concatenate((ranker.score(builders, domain), ranker.score(sampled, domain)))
    best = int(np.lexsort((np.arange(scores.size), scores))[0])
    return builders[best] if best < len(builders) else sampled[best - len(builders)]
