"""Analytical model of the gradient-synchronization time of one training iteration.

Given a :class:`~autosync_transfer.domains.domain.Domain` (model graph + cluster) and a
:class:`~autosync_transfer.strategies.types.Strategy`, :func:`estimate` returns one
:class:`RowCost` per partition row (a variable, or one shard of a partitioned variable) and the
iteration's synchronization time in two forms. It models **synchronization only**: compute and its
overlap with communication are ignored, so the numbers are a lower bound on the step time and a
ranking signal, not a step-time prediction.

Notation: ``N`` nodes, node ``i`` with ``w_i`` workers, NIC bandwidth ``B_i`` (bytes/s, full duplex)
and per-message latency ``a_i`` (``latency_ms``, or ``CostModelConfig.default_latency_s`` when 0);
``W = sum(w_i)`` workers; ``B_intra`` the intra-node (loopback / PCIe) bandwidth.

All-reduce (AR)
    Every tensor or shard with the same ``group`` is fused. Bytes per tensor after compression:
    ``none`` = dtype bytes; ``fp16`` / ``fp16_ef`` = 2 bytes per element; ``powersgd`` with rank
    ``r`` on a tensor reshaped to ``(d0, rest)`` with ``d0 > 1`` and ``rest > 1`` (the tensors the
    runtime factorizes) = ``4 * r' * (d0 + rest)`` bytes (fp32 factors P and Q,
    ``r' = min(r, d0, rest)``, the largest rank a factorization can have), sent as two
    all-reduces (P, then Q); other tensors (1-D, or a dimension of 1) are sent uncompressed. A ring over all ``W``
    workers (ranks numbered node by node) moves ``2 (W - 1) / W * bytes`` over every ring link, so
    each NIC carries that much in each direction; the ring runs at its slowest link: the slowest
    NIC, or ``B_intra`` when that is slower and some node holds >= 2 workers. A single-node cluster
    runs over ``B_intra`` only. A group issues one collective per fused bucket (one bucket per
    compressor and PowerSGD rank in the group, as the runtime plans them), two for a PowerSGD bucket (2
    if it holds a PowerSGD tensor, else 1), each costing ``2 (W - 1) * max_i a_i`` of latency.
    Groups run one after another and every NIC carries every group, so the AR time is shared by
    all nodes: ``ar_total_s = sum over groups``.

Parameter server (PS)
    Per item (variable or shard) of ``b`` bytes per worker, placed on node ``p``. The server runs
    in a worker process of ``p``, so that worker's own gradient does not move; the other
    ``w_p - 1`` workers of ``p`` push and pull over ``B_intra``.

    * without local replication every worker not on ``p`` pushes ``b`` to ``p`` and pulls ``b``
      back: ``p``'s NIC carries ``(W - w_p) * b`` in (incast) and out, a remote node ``k``'s NIC
      carries ``w_k * b`` out and in;
    * with local replication each remote node ``k`` first aggregates its workers' gradients over
      ``B_intra`` (``(w_k - 1) * b`` in, the same out for the fan-out after the pull) and then
      pushes and pulls once: ``b_k`` bytes on its NIC, ``sum_k b_k`` on ``p``'s NIC.

    Sparse (row-sparse, embedding) gradients: rows touched per worker
    ``rows = min(batch_size * seq_len * R_s / R, R_s)`` for a shard of ``R_s`` of the variable's
    ``R`` rows: every looked-up token is counted as a distinct row (an upper bound on unique rows,
    exact when lookups do not repeat), spread over the rows uniformly;
    ``b = rows * (row_width * dtype_bytes + sparse_index_bytes)`` (values plus an int64 index per
    row). A node aggregating ``w_k`` workers' rows (local replication) sends
    ``min(w_k * rows, R_s)`` rows. The pull returns the rows each worker looked up, so it carries
    the same bytes as the push.

    Every push and every pull is one message costing ``a_i`` at each node it passes.

Combining
    Each row's standalone time is the maximum over the nodes it touches of
    ``max(ingress, egress) / B_i + intra / B_intra`` (its ``transmission_s``) plus the maximum of
    ``messages * a_i`` (its ``latency_s``). Per node, the PS time sums every row's bytes through
    that node: ``max(ingress_bytes, egress_bytes) / B_i + max(intra_in, intra_out) / B_intra +
    messages * a_i`` (``per_node_nic_s``). The bottleneck form is
    ``total_s = max_i (ar_total_s + per_node_nic_s[i])``: servers and groups work in parallel and
    the busiest NIC decides. The sum form ``sum_s = sum(per_server) + sum(per_group)`` runs every
    row one after another; ``sum_s >= total_s`` always holds.

Implementation
    One implementation, vectorized over a batch of candidates: :func:`terms` evaluates the model
    on the rows the step-time simulator's :class:`~autosync_transfer.rankers.rows.RowDecoder`
    decodes (the same validity rules) with the simulator's byte formulas
    (:func:`~autosync_transfer.rankers.stepsim.wire_bytes`). :func:`estimate` (one strategy, per
    row), :class:`AnalyticalRanker` and the featurizer's ``pre_*`` columns and aggregates all read
    it. The model stays as a baseline and as features; the step-time prediction is the
    simulator's (:mod:`~autosync_transfer.rankers.stepsim`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.domains.domain import Domain
from autosync_transfer.rankers.rows import (MAX_POWERSGD_RANK, RowDecoder, Rows, nominal_network,
                                           ps_byte_table, ring, wire_bytes)
from autosync_transfer.strategies.types import Strategy

__all__ = [
    "CostModelConfig",
    "RowCost",
    "CostBreakdown",
    "Terms",
    "terms",
    "estimate",
    "AnalyticalRanker",
]


class CostModelConfig(BaseModel):
    """Constants of the analytical model that a cluster spec does not give."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    intra_node_gbps: float = Field(
        default=10.0,
        gt=0,
        description="bandwidth between workers of one node (loopback / PCIe), Gbit/s",
    )
    default_latency_s: float = Field(
        default=1e-4,
        ge=0,
        description="per-message latency used for nodes whose latency_ms is 0, seconds",
    )
    sparse_index_bytes: int = Field(
        default=8, ge=0, description="bytes of the row index sent with every sparse row (int64)"
    )


@dataclass(frozen=True, slots=True)
class RowCost:
    """The cost of one partition row: a whole variable (``shard is None``) or one shard.

    ``bytes_per_worker``: bytes one worker puts on the wire for this row (after compression; for a
    sparse row, its touched rows with their indices). ``transmission_s``: the row's own time at
    the bandwidth that bounds it (AR: its share of the ring at the ring's bandwidth; PS: its
    busiest node). ``messages``: collectives (AR) or pushes + pulls the server handles (PS).
    ``latency_s``: the row's per-message latency if it ran alone.
    """

    var_name: str
    shard: int | None
    kind: Literal["ps", "ar"]
    bytes_per_worker: float
    server: str | None
    group: int | None
    transmission_s: float
    messages: int
    latency_s: float
    is_sparse: bool


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """The model's terms for one strategy on one domain (see the module docstring).

    ``per_server``: node -> seconds of the PS rows it hosts (only nodes hosting a PS row).
    ``per_group``: AR group -> seconds. ``per_node_nic_s``: node -> its PS time (as server and as
    sender; every node). ``total_s``: bottleneck form. ``sum_s``: sequential form.
    """

    rows: tuple[RowCost, ...]
    per_server: Mapping[str, float]
    per_group: Mapping[int, float]
    per_node_nic_s: Mapping[str, float]
    ar_total_s: float
    total_s: float
    sum_s: float
    bottleneck_node: str


class _Context:
    """The model's per-domain tables (network, per-variable sizes, PS tables), computed once per
    domain; :func:`terms` evaluates the model on decoded rows with them."""

    def __init__(self, domain: Domain, config: CostModelConfig):
        model, cluster = domain.model, domain.cluster
        variables = model.variables
        self.tokens = float(model.batch_size * model.seq_len)
        self.sparse_row_bytes = np.array(
            [v.row_elements * v.itemsize + config.sparse_index_bytes for v in variables],
            dtype=np.float64)
        self.var_rows = np.array([float(v.shape[0]) if v.shape else 1.0 for v in variables])
        nodes = cluster.nodes
        self.node_names = [n.name for n in nodes]
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self.num_nodes = len(nodes)
        self.workers = np.array([n.workers for n in nodes], dtype=np.float64)
        # the sync-only baseline charges nominal line rates (no goodput)
        self.nic_bytes_per_s, self.latency_s, self.intra_bytes_per_s = nominal_network(
            cluster, goodput=1.0, default_latency_s=config.default_latency_s,
            intra_node_gbps=config.intra_node_gbps)
        w = int(sum(n.workers for n in nodes))
        self.world_size = w
        self.ring_factor, self.ar_bytes_per_s = ring(self.workers, self.nic_bytes_per_s,
                                                     self.intra_bytes_per_s)
        self.ring_s_per_byte = self.ring_factor / self.ar_bytes_per_s
        self.ar_latency_per_collective_s = 2.0 * (w - 1) * float(self.latency_s.max())
        self._ps_tables()

    def _ps_tables(self) -> None:
        """PS terms per (server p, replication r), for rows of ``b`` bytes whose time is linear
        in ``b`` (all but sparse rows with replication).

        ``ps_gamma[p, r, k]``: seconds per byte at node ``k`` (NIC push/pull plus intra-node
        fan-in); ``ps_gamma_max[p, r]`` its max over nodes (the row's transmission_s per byte);
        ``ps_lat[p, r, k]``: per-message latency at node ``k``, ``ps_lat_max`` its max (the row's
        latency_s); ``ps_server_msgs[p, r]``: pushes + pulls the server handles.
        """
        n, w = self.num_nodes, self.workers
        eye = np.eye(n, dtype=bool)
        gamma, sources = ps_byte_table(w, self.nic_bytes_per_s, self.intra_bytes_per_s)
        msgs = 2.0 * sources  # a push and a pull per source
        lat = np.empty((n, 2, n))
        for r in (0, 1):
            for p in range(n):
                lat[p, r] = np.where(eye[p], msgs[p, r] * self.latency_s[p],
                                     2.0 * w * self.latency_s)
        self.ps_gamma = gamma
        self.ps_gamma_max = gamma.max(axis=2)
        self.ps_lat = lat
        self.ps_lat_max = lat.max(axis=2)
        self.ps_server_msgs = msgs


class Terms(NamedTuple):
    """The model's terms of a batch of decoded rows (:class:`~autosync_transfer.rankers.rows.Rows`),
    seconds unless said otherwise. ``[R]`` per row, ``[B]`` per strategy, ``[B, N]`` per node."""

    wire: np.ndarray  # [R] bytes one worker puts on the wire (after compression; sparse: rows)
    touched: np.ndarray  # [R] rows a sparse piece touches per worker (dense: its rows)
    transmission: np.ndarray  # [R] the row's transmission_s
    latency: np.ndarray  # [R] the row's latency_s
    messages: np.ndarray  # [R] AR: collectives (1, or 2 for a PowerSGD matrix); PS: pushes +
    #                       pulls the server handles
    replication: np.ndarray  # [R] bool
    compressor: np.ndarray  # [R] index into COMPRESSORS (AR rows)
    powersgd_rank: np.ndarray  # [R]
    powersgd: np.ndarray  # [R] bool: a PowerSGD matrix (two collectives)
    node_ps: np.ndarray  # [B, N] per_node_nic_s
    per_server: np.ndarray  # [B, N] summed row times of the PS rows each node hosts
    hosting: np.ndarray  # [B, N] bool: the node hosts a PS row
    group_key: np.ndarray  # [AR rows] strategy x groups_width + compact group id
    groups_width: int
    group_bytes: np.ndarray  # [B x groups_width] wire bytes per group
    group_collectives: np.ndarray  # [B x groups_width]
    group_two: np.ndarray  # [B x groups_width] bool: holds a PowerSGD matrix
    group_time: np.ndarray  # [B x groups_width] (0 where absent)
    ar_total: np.ndarray  # [B]
    total: np.ndarray  # [B] bottleneck form
    sum: np.ndarray  # [B] sequential form


def terms(ctx: _Context, rows: Rows, *, totals_only: bool = False) -> Terms | np.ndarray:
    """The model on decoded rows, vectorized over a batch of strategies (the one implementation
    of its formulas: :func:`estimate`, :class:`AnalyticalRanker` and the featurizer's ``pre_*``
    columns read it). With ``totals_only`` only the bottleneck times ``[B]`` are returned."""
    B, N = rows.num_strategies, ctx.num_nodes
    row_strat, codes, ctab = rows.strat, rows.codes, rows.ctab
    is_ar, srv, row_sparse = rows.is_ar, rows.server, rows.sparse
    rows_total = rows.rows_total
    R = row_strat.size
    wire, touched, psgd = wire_bytes(rows, ctx.tokens, ctx.sparse_row_bytes, ctx.var_rows)
    lr = rows.replication
    comp = ctab[4][codes]
    rank = ctab[5][codes]
    # ---- parameter-server rows --------------------------------------------------------------
    trans = np.zeros(R)
    lat = np.zeros(R)
    msgs = np.zeros(R)
    ps_idx = np.flatnonzero(~is_ar)
    # every PS row's time at node k is bytes x gamma[server, replication, k] (linear in its
    # bytes), except sparse rows with replication, whose node aggregates are capped by the
    # shard's rows: those few get the (rows x nodes) form
    b = wire[ps_idx]
    p = srv[ps_idx]
    plr = lr[ps_idx].astype(np.int64)
    pl = p * 2 + plr  # (server, replication) code
    lat[ps_idx] = ctx.ps_lat_max.ravel()[pl]
    msgs[ps_idx] = ctx.ps_server_msgs.ravel()[pl]
    trans[ps_idx] = b * ctx.ps_gamma_max.ravel()[pl]
    key = row_strat[ps_idx] * (2 * N) + pl
    nonlinear = np.flatnonzero(row_sparse[ps_idx] & (plr == 1))
    b_lin = b
    if nonlinear.size:
        b_lin = b.copy()
        b_lin[nonlinear] = 0.0
    node_ps = (
        np.bincount(key, weights=b_lin, minlength=B * 2 * N).reshape(B, 2 * N)
        @ ctx.ps_gamma.reshape(2 * N, N)
        + np.bincount(key, minlength=B * 2 * N).reshape(B, 2 * N)
        @ ctx.ps_lat.reshape(2 * N, N)
    )
    if nonlinear.size:
        rows_nl = ps_idx[nonlinear]
        w = ctx.workers
        on_server = p[nonlinear][:, None] == np.arange(N)[None, :]
        sender = (np.minimum(w[None, :] * touched[rows_nl, None], rows_total[rows_nl, None])
                  * ctx.sparse_row_bytes[rows.var[rows_nl], None])
        sender[on_server] = 0.0
        ingress = np.where(on_server, sender.sum(axis=1)[:, None], sender)
        intra = (w - 1.0)[None, :] * b[nonlinear, None]  # fan-in on every node (replication)
        node_time = ingress / ctx.nic_bytes_per_s[None, :] + intra / ctx.intra_bytes_per_s
        trans[rows_nl] = node_time.max(axis=1)
        keys = (row_strat[rows_nl, None] * N + np.arange(N)[None, :]).ravel()
        node_ps += np.bincount(keys, weights=node_time.ravel(), minlength=B * N).reshape(B, N)

    # ---- all-reduce rows: fused per group, one bucket per (compressor, PowerSGD rank) ---------
    collectives = np.where(psgd, 2.0, 1.0)
    trans = np.where(is_ar, wire * ctx.ring_s_per_byte, trans)
    lat = np.where(is_ar, collectives * ctx.ar_latency_per_collective_s, lat)
    msgs = np.where(is_ar, collectives, msgs)
    ar_idx = np.flatnonzero(is_ar)
    g_ids = ctab[3][codes[ar_idx]]
    if g_ids.size and B * (int(g_ids.max()) + 1) > 4 * g_ids.size + 4096:
        # sparse numbering (large group ids): number the batch's distinct ids 0.. first
        g_ids = np.unique(g_ids, return_inverse=True)[1].reshape(-1)
    GM = int(g_ids.max()) + 1 if g_ids.size else 1
    KG = B * GM
    g_key = row_strat[ar_idx] * GM + g_ids
    grp_bytes = np.bincount(g_key, weights=wire[ar_idx], minlength=KG)
    ar_comp = comp[ar_idx]
    grp_coll, grp_two = _buckets(
        g_key, np.where(ar_comp == 3, 3 + np.minimum(rank[ar_idx], MAX_POWERSGD_RANK), ar_comp),
        psgd[ar_idx], KG)
    grp_time = np.where(grp_coll > 0, grp_bytes * ctx.ring_s_per_byte
                        + grp_coll * ctx.ar_latency_per_collective_s, 0.0)
    ar_total = grp_time.reshape(B, GM).sum(axis=1)
    total = ar_total + node_ps.max(axis=1)
    if totals_only:
        return total
    s_key = row_strat[ps_idx] * N + p
    per_server = np.bincount(s_key, weights=trans[ps_idx] + lat[ps_idx],
                             minlength=B * N).reshape(B, N)
    hosting = np.bincount(s_key, minlength=B * N).reshape(B, N) > 0
    return Terms(
        wire=wire, touched=touched, transmission=trans, latency=lat, messages=msgs,
        replication=lr, compressor=comp, powersgd_rank=rank, powersgd=psgd, node_ps=node_ps,
        per_server=per_server, hosting=hosting, group_key=g_key, groups_width=GM,
        group_bytes=grp_bytes, group_collectives=grp_coll, group_two=grp_two,
        group_time=grp_time, ar_total=ar_total, total=total,
        sum=per_server.sum(axis=1) + ar_total,
    )


_BUCKET_KINDS = 4 + MAX_POWERSGD_RANK  # none, fp16, fp16_ef, then PowerSGD ranks 0..64


def _buckets(g_key: np.ndarray, kind: np.ndarray, two: np.ndarray, num_groups: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Collectives per group and whether it holds a two-collective bucket.

    A group's rows fuse into one bucket per ``kind`` (compressor, and the rank for PowerSGD,
    ``0 <= kind < _BUCKET_KINDS``); a bucket with a ``two`` row (a PowerSGD matrix) is two
    collectives. Returns ``(collectives [num_groups] float64, two [num_groups] bool)``.
    """
    key = g_key * _BUCKET_KINDS + kind
    size = num_groups * _BUCKET_KINDS
    if size <= 8 * key.size + (1 << 20):  # dense: one bin per (group, kind)
        present = np.bincount(key, minlength=size) > 0
        doubled = np.bincount(key[two], minlength=size) > 0
        coll = (present.reshape(num_groups, _BUCKET_KINDS).sum(axis=1)
                + doubled.reshape(num_groups, _BUCKET_KINDS).sum(axis=1))
        return coll.astype(np.float64), doubled.reshape(num_groups, _BUCKET_KINDS).any(axis=1)
    b_keys, b_inv = np.unique(key, return_inverse=True)
    b_two = np.bincount(b_inv.reshape(-1), weights=two, minlength=b_keys.size) > 0
    b_group = b_keys // _BUCKET_KINDS
    coll = np.bincount(b_group, weights=np.where(b_two, 2.0, 1.0), minlength=num_groups)
    return coll, np.bincount(b_group, weights=b_two, minlength=num_groups) > 0


def estimate(
    strategy: Strategy, domain: Domain, config: CostModelConfig | None = None
) -> CostBreakdown:
    """Per-row terms and the synchronization time per iteration of ``strategy`` on ``domain``.

    Raises :class:`~autosync_transfer.errors.StrategyValidationError` (listing every violation)
    when the strategy does not fit the domain.
    """
    ctx = _Context(domain, config or CostModelConfig())
    rows = RowDecoder(domain).rows([strategy], order=False)
    t = cast(Terms, terms(ctx, rows))
    names = ctx.node_names
    var_names = [v.name for v in domain.model.variables]
    group_ids = rows.ctab[3][rows.codes]
    is_ar = rows.is_ar
    ar_pos = np.cumsum(is_ar) - 1  # position of an AR row among the AR rows
    out: list[RowCost] = []
    per_group: dict[int, float] = {}
    for i in range(rows.strat.size):
        shard = int(rows.shard[i]) if rows.partitioned[i] else None
        if is_ar[i]:
            g = int(group_ids[i])
            per_group[g] = float(t.group_time[t.group_key[ar_pos[i]]])
            out.append(RowCost(var_names[rows.var[i]], shard, "ar", float(t.wire[i]), None, g,
                               float(t.transmission[i]), int(t.messages[i]),
                               float(t.latency[i]), False))
        else:
            out.append(RowCost(var_names[rows.var[i]], shard, "ps", float(t.wire[i]),
                               names[rows.server[i]], None, float(t.transmission[i]),
                               int(t.messages[i]), float(t.latency[i]), bool(rows.sparse[i])))
    node_ps = t.node_ps[0]
    return CostBreakdown(
        rows=tuple(out),
        per_server={names[i]: float(t.per_server[0, i]) for i in range(ctx.num_nodes)
                    if t.hosting[0, i]},
        per_group={g: per_group[g] for g in sorted(per_group)},
        per_node_nic_s={names[i]: float(node_ps[i]) for i in range(ctx.num_nodes)},
        ar_total_s=float(t.ar_total[0]),
        total_s=float(t.total[0]),
        sum_s=float(t.sum[0]),
        bottleneck_node=names[int(np.argmax(node_ps))],
    )


class AnalyticalRanker:
    """Ranks strategies by the analytical model's bottleneck time; nothing to fit.

    :meth:`score` returns predicted synchronization seconds per iteration: **lower is faster**.
    """

    lower_is_better: bool = True

    def __init__(self, config: CostModelConfig | None = None):
        self.config = config

    def score(self, strategies: Iterable[Strategy], domain: Domain) -> np.ndarray:
        """Predicted sync seconds (``CostBreakdown.total_s``) of each strategy, in order."""
        ctx = _Context(domain, self.config or CostModelConfig())
        decoder = RowDecoder(domain)
        parts = [cast(np.ndarray, terms(ctx, decoder.rows(batch, order=False), totals_only=True))
                 for batch in decoder.batches(list(strategies))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
