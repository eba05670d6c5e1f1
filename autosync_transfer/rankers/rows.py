"""What the step simulator and the analytical baseline share: strategies decoded into rows
(one per synchronized piece, vectorized over candidates: :class:`RowDecoder`), the bytes each row
puts on the wire (:func:`wire_bytes`), the network a cluster spec describes
(:func:`nominal_network`), its all-reduce ring (:func:`ring`) and its parameter-server byte
table (:func:`ps_byte_table`). One module, so both models read a strategy and a network alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, is_not, not_
from typing import Any, NamedTuple

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import StrategyValidationError
from autosync_transfer.strategies.sampler import SampledBatch, StrategyBatch
from autosync_transfer.strategies.types import COMPRESSORS, PS, AllReduce, Partition, Strategy
from autosync_transfer.strategies.validate import validate

__all__ = ["Columns", "Rows", "RowDecoder", "wire_bytes", "ps_byte_table", "nominal_network",
           "ring", "FP16_BYTES",
           "POWERSGD_FACTOR_BYTES", "MAX_POWERSGD_RANK"]

FP16_BYTES = 2
POWERSGD_FACTOR_BYTES = 4  # P and Q are float32
MAX_POWERSGD_RANK = 64  # AllReduce.powersgd_rank's upper bound
_ID_CACHE_LIMIT = 100_000  # synchronizer objects remembered by identity
_DECODE_ROWS_PER_BATCH = 1 << 16  # rows per decoded batch by default
_MAX_STRATEGIES_PER_BATCH = 4096

_var_name = attrgetter("var_name")
_partition = attrgetter("partition")
_synchronizer = attrgetter("synchronizer")
_synchronizers = attrgetter("synchronizers")
_axis = attrgetter("axis")
_shards = attrgetter("shards")


class Columns(NamedTuple):
    """A batch's strategies as columns: per variable config (all strategies, in their config
    order) and per partition row (configs' rows in order)."""

    counts: np.ndarray  # [B] configs per strategy
    cfg_var: np.ndarray  # [C] variable index (-1: unknown name)
    cfg_axis: np.ndarray  # [C] partition axis, -1 when not partitioned
    cfg_shards: np.ndarray  # [C] Partition.shards (1 when not partitioned)
    cfg_n: np.ndarray  # [C] rows of the config (synchronizers)
    codes: np.ndarray  # [R] synchronizer code of every row
    ctab: np.ndarray  # [6, codes] per code: is_ar, server node, replication, group,
    #                   compressor (index into COMPRESSORS), PowerSGD rank


class Rows(NamedTuple):
    """A batch's strategies decoded into rows (one per synchronized piece), in the strategies'
    config order (forward order for sampled batches): everything per row is ``[R]``."""

    num_strategies: int
    strat: np.ndarray  # strategy index
    var: np.ndarray  # variable index (forward order)
    shard: np.ndarray  # shard index (0 when not partitioned)
    shards: np.ndarray  # rows of the row's variable (1 when not partitioned)
    partitioned: np.ndarray  # bool
    codes: np.ndarray  # synchronizer code
    ctab: np.ndarray  # [6, codes]: is_ar, server node, replication, group, compressor, rank
    is_ar: np.ndarray
    server: np.ndarray  # PS server node (-1 for AR)
    replication: np.ndarray  # bool
    sparse: np.ndarray  # bool
    numel: np.ndarray  # elements of the piece
    d0: np.ndarray  # first dimension of the piece
    rows_total: np.ndarray  # rows of the piece (float)
    tensor_bytes: np.ndarray
    ordered: bool  # rows already in (strategy, variable, shard) order


class RowDecoder:
    """Strategies of one domain -> :class:`Rows`, validating them (the one place of the
    vectorized validity rules; a failure is explained by the validator's full report)."""

    def __init__(self, domain: Domain):
        self.domain = domain
        model = domain.model
        variables = model.variables
        self.num_vars = len(variables)
        self.var_index = {v.name: i for i, v in enumerate(variables)}
        self.node_index = {n.name: i for i, n in enumerate(domain.cluster.nodes)}
        self.ndim = np.array([len(v.shape) for v in variables], dtype=np.int64)
        maxdim = max(1, int(self.ndim.max()))
        self.dims = np.ones((self.num_vars, maxdim), dtype=np.int64)
        for i, v in enumerate(variables):
            self.dims[i, : len(v.shape)] = v.shape
        self.shape0 = self.dims[:, 0].copy()  # 1 for scalars
        self.num_el = np.array([v.num_elements for v in variables], dtype=np.int64)
        self.itemsize = np.array([v.itemsize for v in variables], dtype=np.float64)
        self.sparse = np.array([v.sparse for v in variables], dtype=bool)
        self._code_of_value: dict[tuple[Any, ...], int] = {}
        self._code_rows: list[tuple[int, int, int, int, int, int]] = []
        self._known_ids = np.zeros(0, dtype=np.int64)
        self._known_codes = np.zeros(0, dtype=np.int64)
        self._cache_keep: list[PS | AllReduce] = []

    # -- batching ---------------------------------------------------------------------------------
    def batches(self, strategies: Sequence[Strategy], rows_per_batch: int = _DECODE_ROWS_PER_BATCH
                ) -> Iterator[Sequence[Strategy]]:
        n = len(strategies)
        if n == 0:
            return
        if isinstance(strategies, SampledBatch):
            est_rows = max(1, int(strategies.arrays.pieces[0].sum()))
        else:
            est_rows = max(1, sum(1 if c.partition is None else c.partition.shards
                                  for c in strategies[0].nodes))
        per_batch = min(_MAX_STRATEGIES_PER_BATCH, max(1, rows_per_batch // est_rows))
        for start in range(0, n, per_batch):
            yield strategies[start : start + per_batch]

    # -- synchronizer codes -----------------------------------------------------------------------
    def _sync_codes(self, syncs: list[PS | AllReduce]) -> np.ndarray:
        """The code of every synchronizer (an index into ``self._code_rows``), looked up by
        identity (frozen objects a sampler shares between rows), by value on a miss."""
        ids = np.fromiter(map(id, syncs), dtype=np.int64, count=len(syncs))
        codes = _lookup(self._known_ids, self._known_codes, ids)
        miss = np.flatnonzero(codes < 0)
        if miss.size == 0:
            return codes
        uniq, first = np.unique(ids[miss], return_index=True)
        objs = [syncs[i] for i in miss[first].tolist()]
        new_codes = np.fromiter(map(self._value_code, objs), dtype=np.int64, count=len(objs))
        codes[miss] = _lookup(uniq, new_codes, ids[miss])
        if len(objs) <= _ID_CACHE_LIMIT:
            if len(self._cache_keep) + len(objs) > _ID_CACHE_LIMIT:
                self._cache_keep.clear()
                self._known_ids = np.zeros(0, dtype=np.int64)
                self._known_codes = np.zeros(0, dtype=np.int64)
            self._cache_keep.extend(objs)
            all_ids = np.concatenate((self._known_ids, uniq))
            order = np.argsort(all_ids, kind="stable")
            self._known_ids = all_ids[order]
            self._known_codes = np.concatenate((self._known_codes, new_codes))[order]
        return codes

    def _value_code(self, s: PS | AllReduce) -> int:
        if isinstance(s, PS):
            key: tuple[Any, ...] = ("ps", s.destination, s.local_replication)
        else:
            key = ("ar", s.group, s.compressor, s.powersgd_rank)
        code = self._code_of_value.get(key)
        if code is None:
            code = len(self._code_rows)
            self._code_of_value[key] = code
            if isinstance(s, PS):
                self._code_rows.append((0, self.node_index.get(s.destination, -1),
                                        int(s.local_replication), -1, -1, 0))
            else:
                self._code_rows.append((1, -1, 0, s.group, COMPRESSORS.index(s.compressor),
                                        s.powersgd_rank))
        return code

    def _columns_of_objects(self, strategies: Sequence[Strategy]) -> Columns:
        """Walk the strategy objects once (C-level maps; no per-row Python code)."""
        names: list[str] = []
        parts_all: list[Partition | None] = []
        syncs_all: list[PS | AllReduce | None] = []
        counts: list[int] = []
        for s in strategies:
            nodes = s.nodes
            counts.append(len(nodes))
            names.extend(map(_var_name, nodes))
            parts_all.extend(map(_partition, nodes))
            syncs_all.extend(map(_synchronizer, nodes))
        C = len(names)
        is_part_l = list(map(is_not, parts_all, repeat(None)))
        cfg_part = np.fromiter(is_part_l, dtype=bool, count=C)
        parts: list[Partition] = list(compress(parts_all, is_part_l))
        part_syncs = list(map(_synchronizers, parts))
        whole_syncs = list(compress(syncs_all, map(not_, is_part_l)))
        cfg_var = np.fromiter(map(self.var_index.get, names, repeat(-1)), dtype=np.int64, count=C)
        cfg_axis = np.full(C, -1, dtype=np.int64)
        cfg_axis[cfg_part] = np.fromiter(map(_axis, parts), dtype=np.int64, count=len(parts))
        cfg_shards = np.ones(C, dtype=np.int64)
        cfg_shards[cfg_part] = np.fromiter(map(_shards, parts), dtype=np.int64, count=len(parts))
        cfg_n = np.ones(C, dtype=np.int64)
        cfg_n[cfg_part] = np.fromiter(map(len, part_syncs), dtype=np.int64, count=len(parts))
        row_whole = np.repeat(~cfg_part, cfg_n)
        codes = np.empty(row_whole.size, dtype=np.int64)
        codes[row_whole] = self._sync_codes(whole_syncs)  # type: ignore[arg-type]
        codes[~row_whole] = self._sync_codes(list(chain.from_iterable(part_syncs)))
        ctab = np.array(self._code_rows, dtype=np.int64).reshape(-1, 6).T.copy()
        return Columns(np.array(counts, dtype=np.int64), cfg_var, cfg_axis, cfg_shards, cfg_n,
                       codes, ctab)

    def _columns_of_sampled(self, batch: SampledBatch) -> Columns:
        arrays: StrategyBatch = batch.arrays
        B, V = arrays.pieces.shape
        part = arrays.partitioned.reshape(-1)
        pieces = arrays.pieces.reshape(-1)
        sc = arrays.synchronizers
        ctab = np.stack([col.astype(np.int64) for col in (
            sc.is_ar, sc.node, sc.replication, sc.group, sc.compressor, sc.powersgd_rank)])
        return Columns(np.full(B, V, dtype=np.int64), np.tile(np.arange(V, dtype=np.int64), B),
                       np.where(part, arrays.axis.reshape(-1), -1), np.where(part, pieces, 1),
                       pieces.astype(np.int64), arrays.codes, ctab)

    def reads_arrays(self, strategies: Sequence[Strategy]) -> bool:
        """Whether :meth:`rows` decodes ``strategies`` from a sampler's arrays of this domain
        (no caches: safe on any thread) rather than walking objects (the identity cache)."""
        return isinstance(strategies, SampledBatch) and (
            strategies.domain is self.domain
            or strategies.domain.fingerprint == self.domain.fingerprint)

    def invalid(self, strategy: Strategy, why: str) -> StrategyValidationError:
        validate(strategy, self.domain)  # raises the full report when the validator finds it
        return StrategyValidationError([why])

    # -- decoding ---------------------------------------------------------------------------------
    def rows(self, strategies: Sequence[Strategy], order: bool = True) -> Rows:
        """Decode and validate one batch; with ``order`` the rows are sorted into (strategy,
        variable, shard) order when the configs are not already."""
        if self.reads_arrays(strategies):
            cols = self._columns_of_sampled(strategies)  # type: ignore[arg-type]
        else:
            cols = self._columns_of_objects(strategies)
        counts, cfg_var, cfg_axis, cfg_shards, cfg_n, codes, ctab = cols
        B, V = len(strategies), self.num_vars
        cfg_strat = np.repeat(np.arange(B), counts)

        bad = np.zeros(B, dtype=bool)
        bad[cfg_strat[cfg_var < 0]] = True
        var_ok = np.where(cfg_var < 0, 0, cfg_var)
        part = cfg_axis >= 0
        ndim = self.ndim[var_ok]
        axis_ok = np.where(part, cfg_axis, 0)
        axis_in = np.minimum(axis_ok, self.dims.shape[1] - 1)
        dim = np.where(part & (axis_ok < ndim), self.dims[var_ok, axis_in], 0)
        bad_part = part & (
            (cfg_axis >= ndim) | (self.sparse[var_ok] & (cfg_axis != 0)) | (cfg_shards > dim)
            | (cfg_n != cfg_shards)
        )
        bad[cfg_strat[bad_part]] = True
        seen = np.bincount(cfg_strat * V + var_ok, minlength=B * V).reshape(B, V)
        bad |= (seen != 1).any(axis=1) | (counts != V)
        row_cfg = np.repeat(np.arange(cfg_var.size), cfg_n)
        R = row_cfg.size
        row_strat = cfg_strat[row_cfg]
        row_var = var_ok[row_cfg]
        cfg_start = np.cumsum(cfg_n) - cfg_n
        shard_i = np.arange(R) - cfg_start[row_cfg]
        is_ar = (ctab[0] == 1)[codes]
        srv = ctab[1][codes]
        row_sparse = self.sparse[row_var]
        bad[row_strat[(~is_ar) & (srv < 0)]] = True
        bad[row_strat[is_ar & row_sparse]] = True
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise self.invalid(strategies[k], "the strategy does not fit the domain")

        ordered = not (np.diff(cfg_strat * V + var_ok) < 0).any()
        if order and not ordered:
            perm = np.lexsort((shard_i, row_var, row_strat))
            row_cfg, row_strat, row_var, shard_i = (
                row_cfg[perm], row_strat[perm], row_var[perm], shard_i[perm])
            codes, is_ar, srv, row_sparse = codes[perm], is_ar[perm], srv[perm], row_sparse[perm]
            ordered = True

        r_axis = cfg_axis[row_cfg]
        r_part = r_axis >= 0
        r_shards = cfg_n[row_cfg]
        r_dim = dim[row_cfg]
        safe_dim = np.where(r_part, r_dim, 1)
        base, rem = np.divmod(safe_dim, r_shards)
        size = base + (shard_i < rem)
        num_el_var = self.num_el[row_var]
        shape0 = self.shape0[row_var]
        n_el = np.where(r_part, (num_el_var // safe_dim) * size, num_el_var)
        d0 = np.where(r_part & (r_axis == 0), size, shape0)
        rows_total = np.where(r_part & (r_axis == 0), size, shape0).astype(np.float64)
        return Rows(
            num_strategies=B, strat=row_strat, var=row_var, shard=shard_i, shards=r_shards,
            partitioned=r_part, codes=codes, ctab=ctab, is_ar=is_ar, server=srv,
            replication=(ctab[2] == 1)[codes], sparse=row_sparse, numel=n_el, d0=d0,
            rows_total=rows_total, tensor_bytes=n_el * self.itemsize[row_var], ordered=ordered,
        )


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For every ``q`` of ``query``: ``values[i]`` where ``keys[i] == q`` (sorted keys), else -1."""
    if keys.size == 0:
        return np.full(query.size, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return np.where(keys[pos] == query, values[pos], -1)


def wire_bytes(rows: Rows, tokens: float, sparse_row_bytes: np.ndarray,
               var_rows: np.ndarray) -> tuple[
        np.ndarray, np.ndarray, np.ndarray]:
    """Bytes one worker puts on the wire for every row, the rows a sparse piece touches per
    worker, and whether the row is a PowerSGD matrix (two collectives).

    AR: ``none`` dtype bytes, ``fp16``/``fp16_ef`` 2 bytes per element, PowerSGD on a >= 2-D
    piece ``4 r' (d0 + rest)`` with ``r' = min(r, d0, rest)`` (1-D pieces uncompressed). PS:
    dense bytes, or a sparse piece's touched rows (``min(tokens x rows / R, rows)``) with their
    indices."""
    ctab, codes = rows.ctab, rows.codes
    comp = ctab[4][codes]
    half = rows.is_ar & ((comp == 1) | (comp == 2))
    wire = np.where(half, float(FP16_BYTES) * rows.numel, rows.tensor_bytes)
    psgd = np.zeros(wire.size, dtype=bool)
    maybe = np.flatnonzero(rows.is_ar & (comp == 3))
    if maybe.size:
        d0 = np.maximum(rows.d0[maybe], 1)
        rest = rows.numel[maybe] // d0
        ok = (d0 > 1) & (rest > 1)
        rank_eff = np.minimum(np.minimum(ctab[5][codes[maybe]], d0), rest)
        psgd[maybe[ok]] = True
        wire[maybe[ok]] = (float(POWERSGD_FACTOR_BYTES) * rank_eff * (d0 + rest))[ok]
    touched = rows.rows_total
    sp = np.flatnonzero(rows.sparse)  # PS rows only (the decoder refuses sparse all-reduce)
    if sp.size:
        touched = touched.copy()
        total = rows.rows_total[sp]
        touched[sp] = np.minimum(tokens * total / var_rows[rows.var[sp]], total)
        wire[sp] = touched[sp] * sparse_row_bytes[rows.var[sp]]
    return wire, touched, psgd



def ps_byte_table(workers: np.ndarray, nic: np.ndarray, intra: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A parameter-server piece on server node ``p`` with local replication ``r`` (0 or 1):
    ``gamma[p, r, k]``, the seconds node ``k`` spends per byte of the piece (its NIC carrying
    the pushes and pulls, ``nic`` bytes/s, plus the intra-node fan-in at ``intra`` bytes/s), and
    ``sources[p, r]``, the pushes the server gathers (remote workers, or remote nodes with
    replication, plus its node-mates)."""
    N = len(workers)
    W = float(workers.sum())
    eye = np.eye(N, dtype=bool)
    gamma = np.empty((N, 2, N))
    sources = np.empty((N, 2))
    for r in (0, 1):
        sent = np.ones(N) if r else workers.copy()  # bytes a remote node sends per piece byte
        remote_s = sent / nic + (r * (workers - 1.0)) / intra
        for p in range(N):
            server_s = (sent.sum() - sent[p]) / nic[p] + (workers[p] - 1.0) / intra
            gamma[p, r] = np.where(eye[p], server_s, remote_s)
            remote = (N - 1.0) if r else (W - workers[p])
            sources[p, r] = remote + workers[p] - 1.0
    return gamma, sources


def nominal_network(cluster: Any, *, goodput: float, default_latency_s: float,
                    intra_node_gbps: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The network a cluster spec describes, without measurements: per node its NIC rate in
    bytes/s (``bandwidth_gbps`` x ``goodput``) and its message latency in seconds
    (``latency_ms``, else ``default_latency_s``), and the intra-node rate in bytes/s."""
    nodes = cluster.nodes
    nic = np.array([n.bandwidth_gbps * 1e9 / 8 * goodput for n in nodes])
    lat = np.array([n.latency_ms / 1e3 if n.latency_ms > 0 else default_latency_s
                    for n in nodes])
    return nic, lat, intra_node_gbps * 1e9 / 8


def ring(workers: np.ndarray, nic: np.ndarray, intra: float) -> tuple[float, float]:
    """``(ring factor, ring bandwidth in bytes/s)`` of an all-reduce over every worker: the
    factor ``2 (W - 1) / W`` of the bytes each worker sends, at the slowest link of the ring
    (the slowest NIC, and the intra-node rate where a node holds two or more workers; one
    node: the intra-node rate)."""
    w = float(workers.sum())
    factor = 2.0 * (w - 1) / w if w > 1 else 0.0
    if len(workers) == 1:
        return factor, intra
    bw = float(nic.min())
    if workers.max() >= 2:
        bw = min(bw, intra)
    return factor, bw
