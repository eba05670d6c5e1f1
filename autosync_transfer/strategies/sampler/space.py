"""The sampler's space on one domain: the knowledge constraints applied to every variable and
node, computed once per (domain, config)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.strategies.sampler.config import SamplerConfig

__all__ = ["DomainSpace", "domain_space"]


@dataclass(frozen=True)
class DomainSpace:
    """What the sampler precomputes once per (domain, config): per variable, whether and how it
    may be partitioned (the knowledge constraints applied); per node, its share for the
    balancer; the choices of every knob as arrays."""

    names: list[str]
    sparse: np.ndarray  # (V,) bool
    nbytes: np.ndarray  # (V,) int64
    p_partition: np.ndarray  # (V,) probability of partitioning
    n_axes: np.ndarray  # (V,) number of allowed axes (with a non-empty shard range)
    axis: np.ndarray  # (V, A) allowed axes, padded
    dim: np.ndarray  # (V, A) their lengths
    shard_lo: np.ndarray  # (V, A) shard range, inclusive
    shard_hi: np.ndarray  # (V, A)
    num_nodes: int
    node_names: list[str]
    ps_shares: np.ndarray  # (S,) target share per node for the balancer
    replication: np.ndarray  # local-replication choices (all False if it does nothing)
    type_is_ps: np.ndarray  # (T,) bool, one per synchronizer type choice
    compressors: list[str]
    is_powersgd: np.ndarray  # (C,) bool, one per compressor choice
    ranks: list[int]
    group_bounds: tuple[int, int]


def domain_space(domain: Domain, cfg: SamplerConfig) -> DomainSpace:
    """The :class:`DomainSpace` of ``cfg`` on ``domain``."""
    cluster = domain.cluster
    variables = domain.model.variables
    nv = len(variables)
    num_nodes = cluster.num_nodes
    plo, phi = cfg.resolved_bounds("num_partition_bounds", num_nodes)
    plo = max(2, plo)
    allowed = set(cfg.partitionable_axes)
    per_var: list[list[tuple[int, int, int, int]]] = []
    for v in variables:
        cands = []
        for a in v.partitionable_axes():
            if allowed and a not in allowed:
                continue
            d = v.shape[a]
            hi = min(d, phi)
            if plo <= hi:
                cands.append((a, d, plo, hi))
        per_var.append(cands)
    width = max(1, max(len(c) for c in per_var))
    axis = np.zeros((nv, width), np.int64)
    dim = np.ones((nv, width), np.int64)
    lo = np.full((nv, width), 2, np.int64)
    hi = np.full((nv, width), 2, np.int64)
    for i, cands in enumerate(per_var):
        for j, (a, d, l, h) in enumerate(cands):
            axis[i, j], dim[i, j], lo[i, j], hi[i, j] = a, d, l, h
    n_axes = np.array([len(c) for c in per_var], np.int64)
    nbytes = np.array([v.nbytes for v in variables], np.int64)

    blo, bhi = cfg.maybe_partition_bounds
    choices = set(cfg.maybe_partition)
    p = np.empty(nv)
    for i, v in enumerate(variables):
        size = int(nbytes[i])
        if n_axes[i] == 0 or size <= blo or True not in choices:
            p[i] = 0.0
        elif size >= bhi or False not in choices:
            p[i] = 1.0
        elif cfg.maybe_partition_by_size:
            p[i] = (size - blo) / (bhi - blo)
        else:
            p[i] = 0.5

    bw = np.array([n.bandwidth_gbps for n in cluster.nodes], float)
    randomized = cfg.ps_load_balancer in ("randomized_greedy", "sorted_randomized_greedy")
    shares = bw / bw.sum() if randomized else np.full(num_nodes, 1.0 / num_nodes)
    useful = any(n.workers > 1 for n in cluster.nodes)
    replication = np.array(cfg.local_replication if useful else (False,), bool)
    return DomainSpace(
        names=[v.name for v in variables],
        sparse=np.array([v.sparse for v in variables], bool),
        nbytes=nbytes,
        p_partition=p,
        n_axes=n_axes,
        axis=axis,
        dim=dim,
        shard_lo=lo,
        shard_hi=hi,
        num_nodes=num_nodes,
        node_names=list(cluster.node_names),
        ps_shares=shares,
        replication=replication,
        type_is_ps=np.array([t == "ps" for t in cfg.synchronizer_types], bool),
        compressors=list(cfg.compressors),
        is_powersgd=np.array([c == "powersgd" for c in cfg.compressors], bool),
        ranks=list(cfg.powersgd_ranks),
        group_bounds=cfg.resolved_bounds("num_group_bounds", num_nodes),
    )
