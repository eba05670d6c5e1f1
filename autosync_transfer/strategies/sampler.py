"""Random strategies from AutoSync's strategy space, under its knowledge constraints.

The space and the heuristics follow AutoSync's ``RandomStrategySampler`` (per variable: partition or
not, then a synchronizer per piece; then a global pass that places parameter-server pieces and fuses
all-reduce pieces into groups), with these differences:

* a single fixed ``maybe_partition`` choice is honoured (``(False,)`` never partitions, ``(True,)``
  always partitions a partitionable variable);
* ``"num_nodes"`` works as either bound of ``num_group_bounds`` / ``num_partition_bounds``;
* a variable whose shard range ``[max(2, lb), min(dim, ub)]`` is empty on every allowed axis is not
  partitioned (instead of sampling from an empty range);
* the randomized balancers divide their logits by ``balance_temperature x total load``, so that they
  really sample (AutoSync's raw byte differences made them an argmax after the first item);
* all-reduce groups are 0-based and numbered by first appearance in forward order; the
  ``ordered_balanced`` fill never runs past the last group.

Knowledge constraints every sample satisfies: a sparse variable is synchronized by parameter servers
only (whatever ``synchronizer_types`` says) and partitioned only along axis 0; scalars and axes of
length 1 are never partitioned; PS synchronizers are synchronous with staleness 0; local replication
is only sampled when some node of the cluster has more than one worker (it aggregates the workers of
each node before the push; with one worker per node it does nothing, so it is always off there).

Performance: every random decision of a strategy is drawn in a few vectorized numpy calls; the
sequential load-balancing and group-filling passes run batched across the strategies of a
:meth:`StrategySampler.sample_n` call; synchronizer objects and whole-variable configs are shared
between strategies (they are frozen), and the objects the sampler builds itself skip re-validation
(as ``model_construct`` does: they are valid by construction). Sampling 2,000 strategies for
``bert-large-B`` (about 4,400 synchronized pieces each) takes about 4 s on a 2-core machine.
"""

from __future__ import annotations

import gc
import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.strategies.types import (
    COMPRESSORS,
    PS,
    AllReduce,
    Compressor,
    Partition,
    Strategy,
    VarConfig,
)

__all__ = [
    "MAX_INT32",
    "SamplerConfig",
    "StrategySampler",
    "SampledBatch",
    "PRESETS",
    "preset",
    "preset_names",
]

#: AutoSync's "unbounded" value for bounds (2**31 - 1)
MAX_INT32 = 2**31 - 1

SynchronizerType = Literal["ps", "ar"]
LoadBalancer = Literal[
    "random", "greedy", "sorted_greedy", "randomized_greedy", "sorted_randomized_greedy"
]
MergeScheme = Literal["random", "by_chunk", "randomized_greedy", "ordered_balanced"]
KnobPrior = Literal["uniform", "mixture"]
Bound = Union[int, Literal["num_nodes"]]

# strategies whose sequential passes run batched together (bounds the padded work arrays)
_BATCH = 256
# the per-sampler caches of shared objects are cleared when they grow past this many entries
_CACHE_LIMIT = 200_000


class SamplerConfig(BaseModel):
    """The strategy space and the heuristics of :class:`StrategySampler`.

    Space (uniform choices): ``synchronizer_types`` (``ps``/``ar``) for dense pieces,
    ``compressors`` and ``powersgd_ranks`` for all-reduce pieces, ``local_replication`` for PS
    pieces (only when some node has more than one worker), ``maybe_partition`` (partition a
    variable or not), ``partitionable_axes`` (if non-empty, only these axes may be split).

    Heuristics: ``ps_load_balancer`` places PS pieces on nodes (``greedy`` = least bytes so far;
    ``sorted_*`` handles pieces largest first; ``randomized_*`` samples a node with probability
    ``softmax((target_s - load_s) / (balance_temperature * total))`` where ``target_s`` is the
    node's bandwidth share of the total load — smaller temperatures are closer to greedy);
    ``merge_scheme`` fuses all-reduce pieces into G groups, G uniform in ``num_group_bounds``
    clipped to ``[1, #AR pieces]`` (``random`` groups with none empty, contiguous ``by_chunk``
    chunks of ``chunk_size`` pieces when set (then G is not used) else ``ceil(pieces / G)``,
    ``randomized_greedy`` size balancing largest first, or ``ordered_balanced``: contiguous groups
    in forward order, each filled until it holds ``1/G`` of the bytes). ``num_partition_bounds``
    bounds the shard count: ``[max(2, lb), min(dim, ub)]``. Either bound of both may be
    ``"num_nodes"``. ``maybe_partition_bounds`` (bytes): variables of at most ``lb`` bytes are
    never partitioned, of at least ``ub`` bytes always (when partitioning is a choice), in between
    with probability ``(size - lb) / (ub - lb)`` if ``maybe_partition_by_size`` else 1/2.
    ``same_synchronizer_for_parts`` gives all shards of a variable one synchronizer type.

    ``knob_prior``: ``uniform`` (AutoSync's) draws every variable's choices uniformly, so on a
    model of a few hundred variables every strategy is about half PS, half all-reduce, half
    compressed: the sampled strategies all look alike in aggregate, far from the builders (all
    all-reduce, all PS) and from, say, all-reduce with fp16 everywhere. ``mixture`` first draws
    per strategy the probability of PS for a dense piece, of local replication, the compressor
    weights (Dirichlet(1, ...)) and a partition scale ``s`` (a variable partitioned with
    probability ``min(1, 2 s p)`` where ``uniform`` uses ``p``), then every variable from those:
    the same space (every constraint holds), spread over its corners.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    synchronizer_types: tuple[SynchronizerType, ...] = ("ps", "ar")
    compressors: tuple[Compressor, ...] = ("none", "fp16")
    powersgd_ranks: tuple[int, ...] = (1, 2, 4)
    local_replication: tuple[bool, ...] = (True, False)
    maybe_partition: tuple[bool, ...] = (True, False)
    partitionable_axes: tuple[int, ...] = ()

    ps_load_balancer: LoadBalancer = "sorted_randomized_greedy"
    merge_scheme: MergeScheme = "ordered_balanced"
    balance_temperature: float = Field(default=0.1, gt=0, allow_inf_nan=False)
    chunk_size: int | None = Field(default=None, ge=1)
    num_group_bounds: tuple[Bound, Bound] = (1, 20)
    num_partition_bounds: tuple[Bound, Bound] = (2, 40)
    maybe_partition_bounds: tuple[int, int] = (0, MAX_INT32)
    maybe_partition_by_size: bool = False
    same_synchronizer_for_parts: bool = False
    knob_prior: KnobPrior = "uniform"

    @field_validator(
        "synchronizer_types",
        "compressors",
        "powersgd_ranks",
        "local_replication",
        "maybe_partition",
    )
    @classmethod
    def _choices(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        if not v:
            raise ValueError(f"{info.field_name} needs at least one choice, got none")
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} must not repeat a choice, got {list(v)}")
        return v

    @field_validator("powersgd_ranks")
    @classmethod
    def _ranks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for r in v:
            if not 1 <= r <= 64:
                raise ValueError(f"powersgd_ranks must be between 1 and 64, got {r}")
        return v

    @field_validator("partitionable_axes")
    @classmethod
    def _axes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for a in v:
            if a < 0:
                raise ValueError(f"partitionable_axes must be >= 0, got {a}")
        if len(set(v)) != len(v):
            raise ValueError(f"partitionable_axes must not repeat an axis, got {list(v)}")
        return v

    @field_validator(
        "num_group_bounds", "num_partition_bounds", "maybe_partition_bounds", mode="before"
    )
    @classmethod
    def _no_bools(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, (list, tuple)) and any(isinstance(x, bool) for x in v):
            raise ValueError(f"{info.field_name} must be integers, got {list(v)}")
        return v

    @field_validator("num_group_bounds", "num_partition_bounds")
    @classmethod
    def _bounds(cls, v: tuple[Bound, Bound], info: ValidationInfo) -> tuple[Bound, Bound]:
        name = info.field_name
        lo, hi = v
        for which, b in (("lower", lo), ("upper", hi)):
            if isinstance(b, int) and b < 1:
                raise ValueError(f"{name} {which} bound must be >= 1 or 'num_nodes', got {b}")
        if name == "num_partition_bounds" and isinstance(hi, int) and hi < 2:
            raise ValueError(
                f"num_partition_bounds upper bound must be >= 2 (a partition has at least 2 "
                f"shards; use maybe_partition=(False,) to never partition), got {hi}"
            )
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            raise ValueError(f"{name} must satisfy lower <= upper, got ({lo}, {hi})")
        return v

    @field_validator("maybe_partition_bounds")
    @classmethod
    def _byte_bounds(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if lo < 0 or lo > hi:
            raise ValueError(
                f"maybe_partition_bounds must satisfy 0 <= lower <= upper (bytes), got ({lo}, {hi})"
            )
        return v

    def resolved_bounds(
        self, which: Literal["num_group_bounds", "num_partition_bounds"], num_nodes: int
    ) -> tuple[int, int]:
        """The integer bounds of ``which`` with ``"num_nodes"`` replaced by ``num_nodes``."""
        lo, hi = getattr(self, which)
        lo_i = num_nodes if lo == "num_nodes" else int(lo)
        hi_i = num_nodes if hi == "num_nodes" else int(hi)
        return lo_i, hi_i


#: named sampler configurations (keyword arguments of :class:`SamplerConfig`)
PRESETS: dict[str, dict[str, Any]] = {
    # the package default: AutoSync's product preset (AutoStrategy), with fp16 for Horovod's cast
    "default": {},
    "product": {},
    # AutoSync's default_space / default_heuristics: random placement and random groups
    "autosync_default": {
        "compressors": ("none", "fp16", "fp16_ef"),
        "local_replication": (False,),
        "ps_load_balancer": "random",
        "merge_scheme": "random",
        "num_group_bounds": (1, MAX_INT32),
        "num_partition_bounds": (2, MAX_INT32),
    },
    "ps_only": {"synchronizer_types": ("ps",)},
    "ar_only": {"synchronizer_types": ("ar",)},
    # every compressor, PowerSGD ranks included
    "compressed": {"compressors": ("none", "fp16", "fp16_ef", "powersgd")},
    # AutoSync's data-collection setting "if-partition-lb-100000": never split vars <= 100 kB
    "large_partitions": {"maybe_partition_bounds": (100_000, MAX_INT32)},
    # the dataset's space with strategy-level knob probabilities (what a search samples)
    "mixture": {"maybe_partition_bounds": (100_000, MAX_INT32), "num_partition_bounds": (2, 20),
                "knob_prior": "mixture"},
    # what the shipped dataset samples: AutoSync's collection settings "if-partition-lb-100000"
    # and "max-par-20" (tiny tensors are never split, at most 20 shards)
    "dataset": {"maybe_partition_bounds": (100_000, MAX_INT32), "num_partition_bounds": (2, 20)},
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset(name: str, **overrides: Any) -> SamplerConfig:
    """The :class:`SamplerConfig` of preset ``name``, with ``overrides`` applied."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown sampler preset {name!r} (known: {', '.join(PRESETS)})"
        ) from None
    return SamplerConfig(**{**base, **overrides})


# -- static per-domain tables ------------------------------------------------------------------


@dataclass(frozen=True)
class _Tables:
    """What the sampler precomputes once per (domain, config)."""

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


def _tables(domain: Domain, cfg: SamplerConfig) -> _Tables:
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
    return _Tables(
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


# -- one strategy's decisions ------------------------------------------------------------------


@dataclass
class _Draft:
    """Every decision of one strategy, as arrays over variables (V) and pieces (I)."""

    partitioned: np.ndarray  # (V,) bool
    axis: np.ndarray  # (V,) int
    pieces: np.ndarray  # (V,) 1 or #shards
    is_ps: np.ndarray  # (I,) bool
    piece_bytes: np.ndarray  # (I,) int64
    replication: np.ndarray  # (I,) bool
    compressor: np.ndarray  # (I,) index into compressors
    rank: np.ndarray  # (I,) index into ranks
    ps_items: np.ndarray  # piece indices of PS pieces, forward order
    ar_items: np.ndarray  # piece indices of AR pieces, forward order
    destination: np.ndarray  # (#PS,) node index (filled by the placement pass)
    group: np.ndarray  # (#AR,) group id (filled by the grouping pass)
    ps_order: np.ndarray | None = None  # processing order of the placement pass
    ps_uniform: np.ndarray | None = None  # one U[0, 1) per piece for the randomized placement
    ar_order: np.ndarray | None = None
    ar_uniform: np.ndarray | None = None
    num_groups: int = 0


def _relabel_first_appearance(groups: np.ndarray) -> np.ndarray:
    """Renumber group ids 0, 1, ... in order of first appearance."""
    if groups.size == 0:
        return groups
    uniq, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    new_id = np.empty(uniq.size, np.int64)
    new_id[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return new_id[inverse.reshape(-1)]


class StrategySampler:
    """Samples valid strategies for ``domain`` from the space of ``config`` (default: the product
    preset).

    ``config`` may also be a preset name. The sampler owns a ``numpy.random.Generator`` seeded with
    ``seed``; each strategy draws from its own child generator seeded from it, so the k-th strategy
    of a sampler depends only on ``seed`` and ``k`` (``sample_n(3)`` equals three ``sample()``).
    Strategy ids are ``s{seed}-{k}-{content hash}``.
    """

    def __init__(
        self, domain: Domain, config: SamplerConfig | str | None = None, seed: int = 0
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
        if isinstance(config, str):
            config = preset(config)
        if config is not None and not isinstance(config, SamplerConfig):
            raise ConfigError(
                f"config must be a SamplerConfig, a preset name or None, "
                f"got {type(config).__name__}"
            )
        self.domain = domain
        self.config = config if config is not None else SamplerConfig()
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        self._count = 0
        self._tab: _Tables | None = None
        self._sync_cache: dict[int, PS | AllReduce] = {}
        self._var_cache: dict[int, VarConfig] = {}  # key: code * #vars + var

    @property
    def num_sampled(self) -> int:
        """How many strategies this sampler has produced."""
        return self._count

    def sample(self) -> Strategy:
        """One strategy."""
        return self.sample_n(1)[0]

    def sample_n(self, n: int) -> list[Strategy]:
        """``n`` strategies (ids unique within this sampler)."""
        batch = self.sample_batch(n)
        with _gc_paused():
            return [batch[i] for i in range(len(batch))]

    def sample_batch(self, n: int) -> SampledBatch:
        """``n`` strategies as a :class:`SampledBatch`: their decisions held as arrays, each
        :class:`Strategy` object built only when it is indexed. The batch's ``i``-th strategy is
        the one ``sample_n`` would have returned in its place (same id, same content), and
        :class:`~autosync_transfer.rankers.features.Featurizer` reads the arrays directly."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ConfigError(f"n must be a non-negative integer, got {n!r}")
        n = int(n)
        if self._tab is None:
            self._tab = _tables(self.domain, self.config)
        nv = self._tab.nbytes.size
        part = np.zeros((n, nv), bool)
        axis = np.zeros((n, nv), np.int64)
        pieces = np.ones((n, nv), np.int64)
        codes: list[np.ndarray] = []
        for start in range(0, n, _BATCH):
            m = min(_BATCH, n - start)
            seeds = [int(self._rng.integers(0, 2**63)) for _ in range(m)]
            drafts = [self._draft(np.random.default_rng(s)) for s in seeds]
            self._place_ps(drafts)
            self._group_ar(drafts)
            for i, d in enumerate(drafts):
                part[start + i] = d.partitioned
                axis[start + i] = d.axis
                pieces[start + i] = d.pieces
                codes.append(self._codes(d))
        first = self._count
        self._count += n
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(pieces.sum(axis=1), out=offsets[1:])
        flat = np.concatenate(codes) if codes else np.zeros(0, np.int64)
        return SampledBatch(self, first, part, axis, pieces, flat, offsets)

    # -- phase 1: independent decisions ----------------------------------------------------
    def _draft(self, rng: np.random.Generator) -> _Draft:
        t = self._tab
        assert t is not None
        cfg = self.config
        nv = t.nbytes.size
        rows = np.arange(nv)
        u = rng.random((nv, 4))
        mixture = cfg.knob_prior == "mixture"
        if mixture:  # strategy-level knobs (extra draws: the uniform prior's stay as they were)
            knob = rng.random(3)
            weights = rng.dirichlet(np.ones(len(t.compressors)))
            p_part = np.where((t.p_partition > 0) & (t.p_partition < 1),
                              np.minimum(1.0, 2.0 * knob[0] * t.p_partition), t.p_partition)
            part = u[:, 0] < p_part
        else:
            part = u[:, 0] < t.p_partition
        a_idx = (u[:, 1] * np.maximum(t.n_axes, 1)).astype(np.int64)
        axis = t.axis[rows, a_idx]
        lo, hi = t.shard_lo[rows, a_idx], t.shard_hi[rows, a_idx]
        shards = lo + (u[:, 2] * (hi - lo + 1)).astype(np.int64)
        pieces = np.where(part, shards, 1)
        dim = np.where(part, t.dim[rows, a_idx], 1)

        total = int(pieces.sum())
        var_of = np.repeat(rows, pieces)
        first = np.cumsum(pieces) - pieces
        shard_idx = np.arange(total) - np.repeat(first, pieces)
        base, rem = np.divmod(dim, pieces)
        row_bytes = t.nbytes // dim
        piece_bytes = (base[var_of] + (shard_idx < rem[var_of])) * row_bytes[var_of]

        ui = rng.random((total, 4))
        type_u = u[var_of, 3] if cfg.same_synchronizer_for_parts else ui[:, 0]
        if mixture and t.type_is_ps.any() and not t.type_is_ps.all():
            is_ps = t.sparse[var_of] | (type_u < knob[1])
        else:
            type_idx = (type_u * t.type_is_ps.size).astype(np.int64)
            is_ps = t.sparse[var_of] | t.type_is_ps[type_idx]
        if mixture:
            edges = np.cumsum(weights)[:-1]
            compressor = np.searchsorted(edges, ui[:, 1], side="right").astype(np.int64)
        else:
            compressor = (ui[:, 1] * len(t.compressors)).astype(np.int64)
        rank = (ui[:, 2] * len(t.ranks)).astype(np.int64)
        if mixture and t.replication.any() and not t.replication.all():
            replication = ui[:, 3] < knob[2]
        else:
            replication = t.replication[(ui[:, 3] * t.replication.size).astype(np.int64)]

        ps_items = np.flatnonzero(is_ps)
        ar_items = np.flatnonzero(~is_ps)
        d = _Draft(
            partitioned=part,
            axis=axis,
            pieces=pieces,
            is_ps=is_ps,
            piece_bytes=piece_bytes,
            replication=replication,
            compressor=compressor,
            rank=rank,
            ps_items=ps_items,
            ar_items=ar_items,
            destination=np.zeros(ps_items.size, np.int64),
            group=np.zeros(ar_items.size, np.int64),
        )

        # PS placement: random now; the greedy kinds get their order (and uniforms) here
        nps, nodes = ps_items.size, t.num_nodes
        lb = cfg.ps_load_balancer
        if nps and nodes > 1:
            if lb == "random":
                d.destination = rng.integers(0, nodes, size=nps)
            else:
                sizes = piece_bytes[ps_items]
                d.ps_order = (
                    np.argsort(-sizes, kind="stable") if lb.startswith("sorted") else np.arange(nps)
                )
                if "randomized" in lb:
                    d.ps_uniform = rng.random(nps)

        # AR grouping: number of groups, then the scheme
        nar = ar_items.size
        if nar:
            glo, ghi = t.group_bounds
            ghi = min(nar, ghi)
            glo = min(max(1, glo), ghi)
            g = int(rng.integers(glo, ghi + 1))
            d.num_groups = g
            scheme = cfg.merge_scheme
            if scheme == "by_chunk" and cfg.chunk_size is not None:
                d.group = np.arange(nar) // cfg.chunk_size
            elif g == 1:
                pass
            elif scheme == "random":
                groups = rng.integers(0, g, size=nar)
                groups[rng.choice(nar, size=g, replace=False)] = np.arange(g)  # no empty group
                d.group = _relabel_first_appearance(groups)
            elif scheme == "by_chunk":
                d.group = np.arange(nar) // math.ceil(nar / g)
            elif scheme == "randomized_greedy":
                d.ar_order = np.argsort(-piece_bytes[ar_items], kind="stable")
                d.ar_uniform = rng.random(nar)
            # ordered_balanced is deterministic given the number of groups
        return d

    # -- phase 2: sequential passes, batched over strategies ----------------------------------
    def _place_ps(self, drafts: list[_Draft]) -> None:
        t = self._tab
        assert t is not None
        todo = [d for d in drafts if d.ps_order is not None]
        if not todo:
            return
        sizes = [d.piece_bytes[d.ps_items][d.ps_order] for d in todo]
        shares = np.broadcast_to(t.ps_shares, (len(todo), t.num_nodes))
        uniforms = [d.ps_uniform for d in todo] if todo[0].ps_uniform is not None else None
        for d, assigned in zip(
            todo, _balance(sizes, shares, uniforms, self.config.balance_temperature)
        ):
            assert d.ps_order is not None
            d.destination[d.ps_order] = assigned

    def _group_ar(self, drafts: list[_Draft]) -> None:
        scheme = self.config.merge_scheme
        todo = [d for d in drafts if d.num_groups > 1]
        if scheme == "ordered_balanced" and todo:
            sizes = [d.piece_bytes[d.ar_items] for d in todo]
            for d, groups in zip(todo, _ordered_fill(sizes, [d.num_groups for d in todo])):
                d.group = groups
        elif scheme == "randomized_greedy" and todo:
            sizes = [d.piece_bytes[d.ar_items][d.ar_order] for d in todo]
            width = max(d.num_groups for d in todo)
            shares = np.zeros((len(todo), width))
            for i, d in enumerate(todo):
                shares[i, : d.num_groups] = 1.0 / d.num_groups
            uniforms = [d.ar_uniform for d in todo]
            for d, assigned in zip(
                todo, _balance(sizes, shares, uniforms, self.config.balance_temperature)
            ):
                assert d.ar_order is not None
                groups = np.empty_like(assigned)
                groups[d.ar_order] = assigned
                d.group = _relabel_first_appearance(groups)

    # -- phase 3: objects --------------------------------------------------------------------
    def _sync(self, code: int) -> PS | AllReduce:
        t = self._tab
        assert t is not None
        nodes2 = 2 * t.num_nodes
        if code < nodes2:
            node, lr = divmod(code, 2)
            return PS(destination=t.node_names[node], local_replication=bool(lr))
        rest, rank = divmod(code - nodes2, len(t.ranks))
        group, comp = divmod(rest, len(t.compressors))
        compressor = t.compressors[comp]
        if compressor == "powersgd":
            return AllReduce(group=group, compressor=compressor, powersgd_rank=t.ranks[rank])
        return AllReduce(group=group, compressor=compressor)

    def _codes(self, d: _Draft) -> np.ndarray:
        """One synchronizer code per piece (decoded by :meth:`SampledBatch.synchronizer_columns`):
        ``2 node + replication`` for PS, ``2 N + (group C + compressor) K + rank`` for AR (``N``
        nodes, ``C`` compressor choices, ``K`` rank choices; indices into the config's lists)."""
        t = self._tab
        assert t is not None
        codes = np.empty(d.is_ps.size, np.int64)
        codes[d.ps_items] = 2 * d.destination + d.replication[d.ps_items]
        comp = d.compressor[d.ar_items]
        rank = np.where(t.is_powersgd[comp], d.rank[d.ar_items], 0)
        codes[d.ar_items] = (2 * t.num_nodes
                             + (d.group * len(t.compressors) + comp) * len(t.ranks) + rank)
        return codes

    def _assemble(self, partitioned: np.ndarray, axis: np.ndarray, pieces: np.ndarray,
                  codes: np.ndarray, k: int) -> Strategy:
        t = self._tab
        assert t is not None
        if len(self._sync_cache) > _CACHE_LIMIT or len(self._var_cache) > _CACHE_LIMIT:
            self._sync_cache.clear()
            self._var_cache.clear()
        code_list = codes.tolist()
        cache = self._sync_cache
        for c in set(code_list).difference(cache):
            cache[c] = self._sync(c)
        syncs = list(map(cache.__getitem__, code_list))

        var_cache = self._var_cache
        names = t.names
        nv = len(names)
        nodes: list[VarConfig] = []
        starts = (np.cumsum(pieces) - pieces).tolist()
        for v, is_part, n, ax, pos in zip(
            range(nv), partitioned.tolist(), pieces.tolist(), axis.tolist(), starts
        ):
            if not is_part:  # whole-variable configs recur across strategies: share them
                key = code_list[pos] * nv + v
                cfg = var_cache.get(key)
                if cfg is None:
                    cfg = _built(
                        VarConfig,
                        {"var_name": names[v], "synchronizer": syncs[pos], "partition": None},
                        _SET_SYNC,
                    )
                    var_cache[key] = cfg
            else:
                part = _built(
                    Partition,
                    {"axis": ax, "shards": n, "synchronizers": tuple(syncs[pos : pos + n])},
                    _SET_PARTITION,
                )
                cfg = _built(
                    VarConfig,
                    {"var_name": names[v], "synchronizer": None, "partition": part},
                    _SET_PARTITIONED,
                )
            nodes.append(cfg)

        return Strategy.model_construct(
            id=self._strategy_id(partitioned, axis, pieces, codes, k), kind="sampled",
            nodes=tuple(nodes)
        )

    def _strategy_id(self, partitioned: np.ndarray, axis: np.ndarray, pieces: np.ndarray,
                     codes: np.ndarray, k: int) -> str:
        h = hashlib.blake2b(digest_size=4)
        for arr in (partitioned, np.where(partitioned, axis, -1), pieces, codes):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
        return f"s{self.seed}-{k}-{h.hexdigest()}"


class SampledBatch(Sequence[Strategy]):
    """Strategies of one :meth:`StrategySampler.sample_batch` call, held as arrays.

    A read-only sequence of :class:`Strategy`: ``batch[i]`` builds the ``i``-th strategy on first
    access (and keeps it), ``batch[a:b]`` is a batch of the same arrays (no object is built),
    :attr:`ids` are the strategies' ids, computed without building them. Search and
    :func:`~autosync_transfer.recommend` score thousands of candidates and build only the ones
    they pick; :class:`~autosync_transfer.rankers.features.Featurizer` reads the arrays
    (``partitioned``/``axis``/``pieces`` ``[B, V]`` in forward variable order, one synchronizer
    code per piece in ``codes`` with ``offsets [B + 1]`` per strategy) without walking objects.
    """

    __slots__ = ("sampler", "first", "partitioned", "axis", "pieces", "codes", "offsets",
                 "_built", "_ids")

    def __init__(self, sampler: StrategySampler, first: int, partitioned: np.ndarray,
                 axis: np.ndarray, pieces: np.ndarray, codes: np.ndarray,
                 offsets: np.ndarray) -> None:
        self.sampler = sampler
        self.first = first
        self.partitioned = partitioned
        self.axis = axis
        self.pieces = pieces
        self.codes = codes
        self.offsets = offsets
        self._built: dict[int, Strategy] = {}
        self._ids: list[str] | None = None

    @property
    def domain(self) -> Domain:
        return self.sampler.domain

    def __len__(self) -> int:
        return int(self.pieces.shape[0])

    def __repr__(self) -> str:
        return (f"SampledBatch({len(self)} strategies of {self.domain.name!r}, sampler seed "
                f"{self.sampler.seed}, first index {self.first})")

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                return [self[k] for k in range(start, stop, step)]
            stop = max(start, stop)
            a, b = int(self.offsets[start]), int(self.offsets[stop])
            return SampledBatch(self.sampler, self.first + start, self.partitioned[start:stop],
                                self.axis[start:stop], self.pieces[start:stop],
                                self.codes[a:b], self.offsets[start: stop + 1] - a)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"SampledBatch indices must be integers or slices, got {i!r}")
        k = int(i) + n if i < 0 else int(i)
        if not 0 <= k < n:
            raise IndexError(f"strategy index {i} out of range for a batch of {n}")
        s = self._built.get(k)
        if s is None:
            s = self.sampler._assemble(*self._arrays(k), self.first + k)
            self._built[k] = s
        return s

    def __iter__(self) -> Iterator[Strategy]:
        n = len(self)
        for a in range(0, n, _BATCH):
            with _gc_paused():  # as sample_n: many small acyclic objects
                chunk = [self[k] for k in range(a, min(n, a + _BATCH))]
            yield from chunk

    def _arrays(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (self.partitioned[k], self.axis[k], self.pieces[k],
                self.codes[self.offsets[k]: self.offsets[k + 1]])

    @property
    def ids(self) -> list[str]:
        """The strategies' ids (as ``batch[i].id``), without building the strategies."""
        if self._ids is None:
            self._ids = [self.sampler._strategy_id(*self._arrays(k), self.first + k)
                         for k in range(len(self))]
        return self._ids

    def synchronizer_columns(self) -> dict[str, np.ndarray]:
        """Every piece's synchronizer as columns (pieces of all strategies, in order):
        ``is_ar`` (bool), ``node`` (PS server, index into the cluster's nodes; -1 for AR),
        ``replication`` (bool, PS), ``group`` (AR group id; -1 for PS), ``compressor`` (index
        into :data:`~autosync_transfer.strategies.types.COMPRESSORS`; -1 for PS) and
        ``powersgd_rank`` (0 unless PowerSGD)."""
        return {k: v[self.codes] for k, v in self.synchronizer_table().items()}

    def synchronizer_table(self) -> dict[str, np.ndarray]:
        """The columns of :meth:`synchronizer_columns` for every code ``0..max(codes)`` (a small
        table: ``synchronizer_table()[k][codes]`` is ``synchronizer_columns()[k]``)."""
        t = self.sampler._tab
        assert t is not None
        nodes2 = 2 * t.num_nodes
        c = np.arange(max(nodes2, int(self.codes.max()) + 1 if self.codes.size else 0),
                      dtype=np.int64)
        is_ar = c >= nodes2
        rest, rank_i = np.divmod(np.maximum(c - nodes2, 0), len(t.ranks))
        group, comp_i = np.divmod(rest, len(t.compressors))
        comp_of = np.array([COMPRESSORS.index(x) for x in t.compressors], np.int64)
        rank_of = np.array(t.ranks, np.int64)
        comp = comp_of[comp_i]
        return {
            "is_ar": is_ar,
            "node": np.where(is_ar, -1, c // 2),
            "replication": ~is_ar & (c % 2 == 1),
            "group": np.where(is_ar, group, -1),
            "compressor": np.where(is_ar, comp, -1),
            "powersgd_rank": np.where(is_ar & (comp == COMPRESSORS.index("powersgd")),
                                      rank_of[rank_i], 0),
        }


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while strategies are built, then restore its state.

    A batch creates hundreds of thousands of small acyclic objects; the collector's repeated scans
    of them took about half of the sampling time and could free nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- construction without re-validation ---------------------------------------------------------

_SET_SYNC = frozenset(("var_name", "synchronizer"))
_SET_PARTITIONED = frozenset(("var_name", "partition"))
_SET_PARTITION = frozenset(("axis", "shards", "synchronizers"))
_new = object.__new__
_setattr = object.__setattr__


def _built(cls: type[BaseModel], values: dict[str, Any], fields_set: frozenset[str]) -> Any:
    """An instance of ``cls`` holding ``values`` (every field, already valid), without validation.

    This is what ``cls.model_construct(**values)`` does, minus its per-call bookkeeping (defaults
    lookup, alias handling), which dominated sampling time; the tests check that such objects
    equal validated ones.
    """
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", set(fields_set))
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


# -- batched sequential kernels ----------------------------------------------------------------


def _pad(arrays: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """Stack 1-d arrays as the columns of a zero-padded (max length, count) matrix."""
    out = np.zeros((max(a.size for a in arrays), len(arrays)), dtype)
    for j, a in enumerate(arrays):
        out[: a.size, j] = a
    return out


def _balance(
    sizes: Sequence[np.ndarray],
    shares: np.ndarray,
    uniforms: Sequence[np.ndarray | None] | None,
    temperature: float,
) -> list[np.ndarray]:
    """Assign items to bins, one problem per entry of ``sizes``, all problems in lock step.

    Problem ``k`` has the bins ``b`` with ``shares[k, b] > 0`` (a bin with share 0 is unused).
    With ``total`` the bytes assigned so far including item ``j``, its gap to the target is
    ``gap_b = total * shares[k, b] - load_b``. Without ``uniforms`` item ``j`` goes to the bin with
    the largest gap (the least-loaded one when shares are equal; ties: the first bin); with
    ``uniforms`` (one U[0, 1) per item) it is drawn from ``softmax(gap_b / (temperature *
    total))`` by inverting the cumulative distribution. Returns the bin of every item.
    """
    size_mat = _pad(sizes, np.float64)  # (M, n)
    m, n = size_mat.shape
    nbins = shares.shape[1]
    mask = np.where(shares > 0, 0.0, -np.inf) if (shares <= 0).any() else None
    u_mat = None if uniforms is None else _pad([u for u in uniforms if u is not None], np.float64)
    if u_mat is not None and u_mat.shape[1] != n:
        raise ValueError("one uniform array per problem is needed")
    inv_scale = np.empty((n, 1))
    load = np.zeros((n, nbins))
    total = np.zeros(n)
    rows = np.arange(n)
    out = np.empty((m, n), np.int64)
    for j in range(m):
        b = size_mat[j]
        total += b
        score = total[:, None] * shares
        score -= load
        if mask is not None:
            score += mask
        if u_mat is None:
            c = score.argmax(axis=1)
        else:
            np.divide(1.0, temperature * np.maximum(total, 1.0)[:, None], out=inv_scale)
            score *= inv_scale
            score -= score.max(axis=1, keepdims=True)
            np.exp(score, out=score)
            cdf = np.cumsum(score, axis=1)
            c = (cdf < (u_mat[j] * cdf[:, -1])[:, None]).sum(axis=1)
        load[rows, c] += b
        out[j] = c
    return [out[: s.size, k] for k, s in enumerate(sizes)]


def _ordered_fill(sizes: Sequence[np.ndarray], num_groups: Sequence[int]) -> list[np.ndarray]:
    """Contiguous size-balanced groups: fill group g (in item order) until its bytes reach
    ``total / G``, then move on to g + 1; the last group takes the rest. Integer arithmetic."""
    size_mat = _pad(sizes, np.int64)  # (M, n)
    m, n = size_mat.shape
    total = np.array([int(s.sum()) for s in sizes], np.int64)
    groups_n = np.asarray(num_groups, np.int64)
    g = np.zeros(n, np.int64)
    load = np.zeros(n, np.int64)
    out = np.empty((m, n), np.int64)
    for j in range(m):
        out[j] = g
        load += size_mat[j]
        full = (load * groups_n >= total) & (g < groups_n - 1)
        g += full
        load[full] = 0
    return [out[: s.size, k] for k, s in enumerate(sizes)]
