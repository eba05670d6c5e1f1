"""The sampler: per strategy, independent decisions drawn in a few vectorized calls (phase 1),
then the sequential placement and grouping passes batched over the strategies (phase 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.sampler.batch import SampledBatch, StrategyBatch, build_all
from autosync_transfer.strategies.sampler.codes import SynchronizerCodes
from autosync_transfer.strategies.sampler.config import SamplerConfig, preset
from autosync_transfer.strategies.sampler.kernels import (
    balance,
    ordered_fill,
    relabel_first_appearance,
)
from autosync_transfer.strategies.sampler.objects import StrategyBuilder
from autosync_transfer.strategies.sampler.space import DomainSpace, domain_space
from autosync_transfer.strategies.types import Strategy

__all__ = ["StrategySampler"]

# strategies whose sequential passes run batched together (bounds the padded work arrays)
_BATCH = 256


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
        self._tab: DomainSpace | None = None  # the space on the domain, computed on first use
        self._codes: SynchronizerCodes | None = None
        self._builder: StrategyBuilder | None = None

    @property
    def num_sampled(self) -> int:
        """How many strategies this sampler has produced."""
        return self._count

    def sample(self) -> Strategy:
        """One strategy."""
        return self.sample_n(1)[0]

    def sample_n(self, n: int) -> list[Strategy]:
        """``n`` strategies (ids unique within this sampler)."""
        return build_all(self.sample_batch(n))

    def sample_batch(self, n: int) -> SampledBatch:
        """``n`` strategies as a :class:`SampledBatch`: their decisions held as arrays, each
        :class:`Strategy` object built only when it is indexed. The batch's ``i``-th strategy is
        the one ``sample_n`` would have returned in its place (same id, same content), and
        :class:`~autosync_transfer.rankers.features.Featurizer` reads the arrays directly."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ConfigError(f"n must be a non-negative integer, got {n!r}")
        n = int(n)
        space, codes_of, builder = self._setup()
        nv = space.nbytes.size
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
                codes.append(self._piece_codes(d, codes_of))
        first = self._count
        self._count += n
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(pieces.sum(axis=1), out=offsets[1:])
        flat = np.concatenate(codes) if codes else np.zeros(0, np.int64)
        arrays = StrategyBatch(self.domain, part, axis, pieces, offsets, flat,
                               codes_of.table(flat))
        return SampledBatch(builder, first, arrays)

    def _setup(self) -> tuple[DomainSpace, SynchronizerCodes, StrategyBuilder]:
        if self._tab is None or self._codes is None or self._builder is None:
            space = domain_space(self.domain, self.config)
            self._codes = SynchronizerCodes(tuple(space.node_names), tuple(space.compressors),
                                            tuple(space.ranks))
            self._builder = StrategyBuilder(space.names, self._codes, self.seed)
            self._tab = space
        return self._tab, self._codes, self._builder

    @staticmethod
    def _piece_codes(d: _Draft, codes_of: SynchronizerCodes) -> np.ndarray:
        """One synchronizer code per piece (see :mod:`.codes`)."""
        codes = np.empty(d.is_ps.size, np.int64)
        codes[d.ps_items] = codes_of.ps_codes(d.destination, d.replication[d.ps_items])
        codes[d.ar_items] = codes_of.ar_codes(d.group, d.compressor[d.ar_items],
                                              d.rank[d.ar_items])
        return codes

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

        self._draw_placement(d, rng)
        self._draw_grouping(d, rng)
        return d

    def _draw_placement(self, d: _Draft, rng: np.random.Generator) -> None:
        """PS placement: random now; the greedy kinds get their order (and uniforms) here."""
        t = self._tab
        assert t is not None
        ps_items, piece_bytes = d.ps_items, d.piece_bytes
        nps, nodes = ps_items.size, t.num_nodes
        lb = self.config.ps_load_balancer
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

    def _draw_grouping(self, d: _Draft, rng: np.random.Generator) -> None:
        """All-reduce grouping: the number of groups, then what the scheme draws."""
        t = self._tab
        assert t is not None
        cfg = self.config
        ar_items, piece_bytes = d.ar_items, d.piece_bytes
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
                d.group = relabel_first_appearance(groups)
            elif scheme == "by_chunk":
                d.group = np.arange(nar) // math.ceil(nar / g)
            elif scheme == "randomized_greedy":
                d.ar_order = np.argsort(-piece_bytes[ar_items], kind="stable")
                d.ar_uniform = rng.random(nar)
            # ordered_balanced is deterministic given the number of groups

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
            todo, balance(sizes, shares, uniforms, self.config.balance_temperature)
        ):
            assert d.ps_order is not None
            d.destination[d.ps_order] = assigned

    def _group_ar(self, drafts: list[_Draft]) -> None:
        scheme = self.config.merge_scheme
        todo = [d for d in drafts if d.num_groups > 1]
        if scheme == "ordered_balanced" and todo:
            sizes = [d.piece_bytes[d.ar_items] for d in todo]
            for d, groups in zip(todo, ordered_fill(sizes, [d.num_groups for d in todo])):
                d.group = groups
        elif scheme == "randomized_greedy" and todo:
            sizes = [d.piece_bytes[d.ar_items][d.ar_order] for d in todo]
            width = max(d.num_groups for d in todo)
            shares = np.zeros((len(todo), width))
            for i, d in enumerate(todo):
                shares[i, : d.num_groups] = 1.0 / d.num_groups
            uniforms = [d.ar_uniform for d in todo]
            for d, assigned in zip(
                todo, balance(sizes, shares, uniforms, self.config.balance_temperature)
            ):
                assert d.ar_order is not None
                groups = np.empty_like(assigned)
                groups[d.ar_order] = assigned
                d.group = relabel_first_appearance(groups)
