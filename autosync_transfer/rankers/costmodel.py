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
    ``r`` on a tensor of >= 2 dims reshaped to ``(d0, rest)`` = ``4 * r' * (d0 + rest)`` bytes
    (fp32 factors P and Q, ``r' = min(r, d0, rest)``, the largest rank a factorization can have),
    sent as two all-reduces (P, then Q); 1-D tensors are sent uncompressed. A ring over all ``W``
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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import StrategyValidationError
from autosync_transfer.strategies.types import PS, AllReduce, Strategy
from autosync_transfer.strategies.validate import validate

__all__ = [
    "CostModelConfig",
    "RowCost",
    "CostBreakdown",
    "estimate",
    "AnalyticalRanker",
]

_FP16_BYTES = 2
_POWERSGD_FACTOR_BYTES = 4  # P and Q are float32


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


class _Var(NamedTuple):
    shape: tuple[int, ...]
    itemsize: int
    sparse: bool
    num_elements: int
    row_bytes: float  # bytes of one sparse row on the wire (values + index)


class _Context:
    """Everything :func:`estimate` needs from a domain, computed once per domain."""

    __slots__ = (
        "variables", "node_index", "node_names", "workers", "nic_bytes_per_s", "latency_s",
        "intra_bytes_per_s", "world_size", "num_nodes", "ring_factor", "ar_bytes_per_s",
        "ar_latency_per_collective_s", "tokens",
    )

    def __init__(self, domain: Domain, config: CostModelConfig):
        model, cluster = domain.model, domain.cluster
        self.variables: dict[str, _Var] = {
            v.name: _Var(
                shape=v.shape,
                itemsize=v.itemsize,
                sparse=v.sparse,
                num_elements=v.num_elements,
                row_bytes=float(v.row_elements * v.itemsize + config.sparse_index_bytes),
            )
            for v in model.variables
        }
        self.tokens = float(model.batch_size * model.seq_len)
        nodes = cluster.nodes
        self.node_names = [n.name for n in nodes]
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self.num_nodes = len(nodes)
        self.workers = np.array([n.workers for n in nodes], dtype=np.float64)
        self.nic_bytes_per_s = np.array([n.bandwidth_gbps * 1e9 / 8 for n in nodes])
        self.latency_s = np.array(
            [n.latency_ms / 1e3 if n.latency_ms > 0 else config.default_latency_s for n in nodes]
        )
        self.intra_bytes_per_s = config.intra_node_gbps * 1e9 / 8
        w = int(sum(n.workers for n in nodes))
        self.world_size = w
        self.ring_factor = 2.0 * (w - 1) / w
        if self.num_nodes == 1:
            self.ar_bytes_per_s = self.intra_bytes_per_s
        else:
            bw = float(self.nic_bytes_per_s.min())
            if int(self.workers.max()) >= 2:
                bw = min(bw, self.intra_bytes_per_s)
            self.ar_bytes_per_s = bw
        self.ar_latency_per_collective_s = 2.0 * (w - 1) * float(self.latency_s.max())


def _reject(strategy: Strategy, domain: Domain, why: str) -> StrategyValidationError:
    """Raise the validator's full report; ``why`` only if the validator finds nothing."""
    validate(strategy, domain)
    return StrategyValidationError([why])


def _estimate(strategy: Strategy, domain: Domain, ctx: _Context,
              with_rows: bool) -> CostBreakdown | float:
    """The model; with ``with_rows=False`` only ``total_s`` is computed and returned."""
    variables = ctx.variables
    node_index = ctx.node_index
    tokens = ctx.tokens

    # PS rows: (bytes per worker, server index, replication, sparse, touched rows per worker,
    # rows of the shard, bytes per sparse row); the numeric part of the model runs on them as
    # one (rows x 7) array
    ps: list[tuple[float, int, bool, bool, float, float, float]] = []
    # AR rows (bytes per worker, collectives, group), kept only for the per-row report
    ar: list[tuple[float, int, int]] = []
    group_bytes: dict[int, float] = {}
    # collectives of each group: one fused bucket per (compressor, PowerSGD rank), as the runtime
    # plans them; a PowerSGD bucket holding a matrix is two collectives (P, then Q)
    group_buckets: dict[int, dict[tuple[str, int], int]] = {}
    # every row in strategy order: (var name, shard, is_ps, index into ps / ar, sparse)
    order: list[tuple[str, int | None, bool, int, bool]] = []

    def add(name: str, shard: int | None, sync: PS | AllReduce, var: _Var, num_elements: int,
            d0: int, rows_total: int) -> None:
        if isinstance(sync, PS):
            p = node_index.get(sync.destination)
            if p is None:
                raise _reject(
                    strategy, domain, f"PS destination {sync.destination!r} is not a node"
                )
            if var.sparse:
                rows = min(tokens * rows_total / var.shape[0], float(rows_total))
                ps.append((rows * var.row_bytes, p, sync.local_replication, True, rows,
                           float(rows_total), var.row_bytes))
            else:
                ps.append((float(num_elements * var.itemsize), p, sync.local_replication, False,
                           0.0, 0.0, 0.0))
            if with_rows:
                order.append((name, shard, True, len(ps) - 1, var.sparse))
            return
        if var.sparse:
            raise _reject(strategy, domain, f"sparse variable {name!r} uses all-reduce")
        comp = sync.compressor
        msgs = 1
        if comp == "none" or (comp == "powersgd" and len(var.shape) < 2):
            nbytes = float(num_elements * var.itemsize)
        elif comp == "powersgd":
            rest = num_elements // d0
            rank = min(sync.powersgd_rank, d0, rest)
            nbytes = float(_POWERSGD_FACTOR_BYTES * rank * (d0 + rest))
            msgs = 2
        else:  # fp16, fp16_ef
            nbytes = float(num_elements * _FP16_BYTES)
        g = sync.group
        group_bytes[g] = group_bytes.get(g, 0.0) + nbytes
        buckets = group_buckets.setdefault(g, {})
        bkey = (comp, sync.powersgd_rank if comp == "powersgd" else 0)
        if msgs > buckets.get(bkey, 0):
            buckets[bkey] = msgs
        if with_rows:
            ar.append((nbytes, msgs, g))
            order.append((name, shard, False, len(ar) - 1, False))

    configs = strategy.nodes
    for cfg in configs:
        name = cfg.var_name
        var = variables.get(name)
        if var is None:
            raise _reject(strategy, domain, f"variable {name!r} is not a trainable variable")
        part = cfg.partition
        if part is None:
            rows = var.shape[0] if var.shape else 1  # a scalar is one row
            add(name, None, cfg.synchronizer, var, var.num_elements,  # type: ignore[arg-type]
                rows, rows)
            continue
        axis, shape = part.axis, var.shape
        if axis >= len(shape) or (var.sparse and axis != 0) or part.shards > shape[axis]:
            raise _reject(strategy, domain, f"variable {name!r}: invalid partition")
        dim = shape[axis]
        per_slice = var.num_elements // dim
        for i, (sync, size) in enumerate(zip(part.synchronizers, part.shard_sizes(dim))):
            d0 = size if axis == 0 else shape[0]
            add(name, i, sync, var, per_slice * size, d0, size)
    if len(configs) != len(variables) or len({c.var_name for c in configs}) != len(configs):
        raise _reject(strategy, domain, "every trainable variable needs exactly one synchronizer")

    # ---- all-reduce: fuse per group -----------------------------------------------------------
    ring_s_per_byte = ctx.ring_factor / ctx.ar_bytes_per_s
    lat_per_coll = ctx.ar_latency_per_collective_s
    per_group = {
        g: group_bytes[g] * ring_s_per_byte + sum(group_buckets[g].values()) * lat_per_coll
        for g in sorted(group_bytes)
    }
    ar_total_s = float(sum(per_group.values()))

    # ---- parameter servers: (rows x nodes) matrices --------------------------------------------
    n_nodes = ctx.num_nodes
    w = ctx.workers
    if ps:
        cols = np.array(ps, dtype=np.float64)
        b = cols[:, 0]
        srv = cols[:, 1].astype(np.intp)
        lr = cols[:, 2] > 0
        sparse = cols[:, 3] > 0
        on_server = srv[:, None] == np.arange(n_nodes)[None, :]
        b_col = b[:, None]
        per_worker_push = w[None, :] * b_col  # every worker of node k pushes b (no replication)
        aggregated = np.broadcast_to(b_col, on_server.shape)  # one push per node (replication)
        if (lr & sparse).any():
            touched = np.minimum(
                w[None, :] * cols[:, 4:5], cols[:, 5:6]
            ) * cols[:, 6:7]
            aggregated = np.where((lr & sparse)[:, None], touched, aggregated)
        # bytes a remote node's NIC sends in the push (and receives in the pull)
        sender = np.where(lr[:, None], aggregated, per_worker_push)
        sender = np.where(on_server, 0.0, sender)
        server_push_in = sender.sum(axis=1)  # incast on the server's ingress
        server_pull_out = server_push_in     # the pull mirrors the push
        ingress = np.where(on_server, server_push_in[:, None], sender)  # push in / pull in
        egress = np.where(on_server, server_pull_out[:, None], sender)  # pull out / push out
        # intra-node fan-in/out: the server node's other workers, and with replication every node
        local = (w - 1.0)[None, :] * b_col
        intra = np.where(on_server | lr[:, None], local, 0.0)
        # messages through each node: 2 per push/pull of each of its workers; the server handles
        # 2 per remote worker (or remote node with replication) and 2 per other local worker
        w_p = w[srv]
        remote = np.where(lr, n_nodes - 1.0, ctx.world_size - w_p)
        server_msgs = 2.0 * (remote + w_p - 1.0)
        msgs = np.where(on_server, server_msgs[:, None], 2.0 * w[None, :])
        node_time = (
            np.maximum(ingress, egress) / ctx.nic_bytes_per_s[None, :]
            + intra / ctx.intra_bytes_per_s
        )
        node_lat = msgs * ctx.latency_s[None, :]
        row_trans = node_time.max(axis=1)
        row_lat = node_lat.max(axis=1)
        node_ps = (
            np.maximum(ingress.sum(axis=0), egress.sum(axis=0)) / ctx.nic_bytes_per_s
            + intra.sum(axis=0) / ctx.intra_bytes_per_s  # fan-in and fan-out are equal
            + node_lat.sum(axis=0)
        )
        server_s = np.bincount(srv, weights=row_trans + row_lat, minlength=n_nodes)
        hosting = np.bincount(srv, minlength=n_nodes) > 0
    else:
        node_ps = np.zeros(n_nodes)
        server_s = np.zeros(n_nodes)
        hosting = np.zeros(n_nodes, dtype=bool)

    busiest = int(np.argmax(node_ps))
    total_s = ar_total_s + float(node_ps[busiest])
    if not with_rows:
        return total_s
    sum_s = float(server_s.sum()) + ar_total_s

    names = ctx.node_names
    rows: list[RowCost] = []
    if ps:
        trans_l = row_trans.tolist()
        lat_l = row_lat.tolist()
        smsgs_l = server_msgs.astype(np.int64).tolist()
    for name, shard, is_ps, j, is_sparse in order:
        if is_ps:
            rec = ps[j]
            rows.append(RowCost(
                name, shard, "ps", rec[0], names[rec[1]], None,
                trans_l[j], smsgs_l[j], lat_l[j], is_sparse,
            ))
        else:
            nbytes, msgs, g = ar[j]
            rows.append(RowCost(
                name, shard, "ar", nbytes, None, g,
                nbytes * ring_s_per_byte, msgs, msgs * lat_per_coll, False,
            ))
    return CostBreakdown(
        rows=tuple(rows),
        per_server={names[i]: float(server_s[i]) for i in range(n_nodes) if hosting[i]},
        per_group=per_group,
        per_node_nic_s={names[i]: float(node_ps[i]) for i in range(n_nodes)},
        ar_total_s=ar_total_s,
        total_s=total_s,
        sum_s=sum_s,
        bottleneck_node=names[busiest],
    )


def estimate(
    strategy: Strategy, domain: Domain, config: CostModelConfig | None = None
) -> CostBreakdown:
    """Per-row terms and the synchronization time per iteration of ``strategy`` on ``domain``.

    Raises :class:`~autosync_transfer.errors.StrategyValidationError` (listing every violation)
    when the strategy does not fit the domain.
    """
    ctx = _Context(domain, config or CostModelConfig())
    return cast(CostBreakdown, _estimate(strategy, domain, ctx, with_rows=True))


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
        return np.array(
            [float(_estimate(s, domain, ctx, with_rows=False)) for s in strategies],
            dtype=np.float64,
        )
