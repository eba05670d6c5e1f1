"""Pure planning: strategy + model graph + cluster -> a typed synchronization plan.

No process group is needed: the plan says which tensors (or shards) are fused into which
all-reduce bucket, which parameter-server rank aggregates which piece, the order in which every
rank processes them, and how many bytes each rank sends and receives. The executor follows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.strategies.types import PS, AllReduce, Strategy
from autosync_transfer.strategies.validate import validate

__all__ = ["Piece", "ArBucket", "PsItem", "SyncPlan", "make_plan", "SPARSE_INDEX_BYTES"]

#: bytes of one row index (int64) in a sparse message
SPARSE_INDEX_BYTES = 8


@dataclass(frozen=True, slots=True)
class Piece:
    """A whole variable (``shard is None``) or one shard of it: ``narrow(axis, start, length)``."""

    var: str
    var_index: int
    shard: int | None
    axis: int
    start: int
    length: int
    shape: tuple[int, ...]  # shape of the piece
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, slots=True)
class ArBucket:
    """Pieces fused into one flat all-reduce (same group id and compressor)."""

    index: int
    group: int
    compressor: str
    powersgd_rank: int
    pieces: tuple[Piece, ...]

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.pieces)

    @property
    def wire_bytes(self) -> int:
        """Bytes each rank contributes to the collective(s) after compression."""
        if self.compressor in ("fp16", "fp16_ef"):
            return 2 * self.numel
        if self.compressor == "powersgd":
            total = 0
            r = self.powersgd_rank
            for p in self.pieces:
                if len(p.shape) >= 2:
                    n, m = p.shape[0], math.prod(p.shape[1:])
                    rr = min(r, n, m)
                    total += 4 * rr * (n + m)
                else:
                    total += 4 * p.numel
            return total
        return sum(p.nbytes for p in self.pieces)


@dataclass(frozen=True, slots=True)
class PsItem:
    """One piece aggregated on a parameter server (the first worker of the destination node)."""

    index: int
    piece: Piece
    server_rank: int
    server_node: str
    local_replication: bool
    sparse: bool
    rows_per_worker: int  # upper bound of rows one worker pushes (sparse only)
    row_bytes: int  # bytes of one row's values (sparse only)

    def push_bytes(self) -> int:
        """Bytes of one push (or of one pull, by symmetry of the upper bound)."""
        if self.sparse:
            return self.rows_per_worker * (self.row_bytes + SPARSE_INDEX_BYTES)
        return self.piece.nbytes


@dataclass(frozen=True)
class SyncPlan:
    """Everything the executor needs; identical on every rank."""

    world_size: int
    rank_nodes: tuple[str, ...]
    buckets: tuple[ArBucket, ...]
    ps_items: tuple[PsItem, ...]
    order: tuple[tuple[str, int], ...]  # ("ar", bucket index) | ("ps", item index), launch order
    sent_bytes: tuple[int, ...]
    recv_bytes: tuple[int, ...]
    var_tasks: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def leader(self, rank: int) -> int:
        """The first rank on ``rank``'s node (local aggregation goes through it)."""
        node = self.rank_nodes[rank]
        return self.rank_nodes.index(node)

    def node_members(self, node: str) -> list[int]:
        return [r for r, n in enumerate(self.rank_nodes) if n == node]

    def leaders(self) -> list[int]:
        seen: list[int] = []
        for r in range(self.world_size):
            if self.leader(r) == r:
                seen.append(r)
        return seen

    @property
    def total_bytes(self) -> int:
        return sum(self.sent_bytes)


def _pieces(strategy: Strategy, graph: ModelGraph) -> list[tuple[Piece, PS | AllReduce]]:
    out: list[tuple[Piece, PS | AllReduce]] = []
    by_var = strategy.by_var()
    for v in graph.variables:
        cfg = by_var[v.name]
        if cfg.partition is None:
            assert cfg.synchronizer is not None
            out.append((Piece(v.name, v.order, None, 0, 0, v.shape[0] if v.shape else 1,
                              v.shape, v.itemsize), cfg.synchronizer))
            continue
        p = cfg.partition
        start = 0
        for i, (length, sync) in enumerate(zip(p.shard_sizes(v.shape[p.axis]), p.synchronizers)):
            shape = tuple(length if a == p.axis else d for a, d in enumerate(v.shape))
            out.append((Piece(v.name, v.order, i, p.axis, start, length, shape, v.itemsize), sync))
            start += length
    return out


def make_plan(strategy: Strategy, graph: ModelGraph, cluster: Cluster) -> SyncPlan:
    """Plan ``strategy`` for ``graph`` on ``cluster`` (validated first)."""
    from autosync_transfer.domains.domain import Domain

    validate(strategy, Domain(name="plan", model=graph, cluster=cluster))
    rank_nodes = tuple(cluster.rank_nodes())
    world = len(rank_nodes)
    node_first = {n.name: cluster.node_ranks(n.name)[0] for n in cluster.nodes}
    variables = graph.by_name()

    bucket_pieces: dict[tuple[int, str, int], list[Piece]] = {}
    ps_items: list[PsItem] = []
    for piece, sync in _pieces(strategy, graph):
        if isinstance(sync, AllReduce):
            rank = sync.powersgd_rank if sync.compressor == "powersgd" else 0
            bucket_pieces.setdefault((sync.group, sync.compressor, rank), []).append(piece)
        else:
            var = variables[piece.var]
            rows = min(graph.batch_size * graph.seq_len, piece.shape[0]) if var.sparse else 0
            ps_items.append(
                PsItem(
                    index=len(ps_items),
                    piece=piece,
                    server_rank=node_first[sync.destination],
                    server_node=sync.destination,
                    local_replication=sync.local_replication,
                    sparse=var.sparse,
                    rows_per_worker=rows,
                    row_bytes=var.row_elements * var.itemsize if var.sparse else 0,
                )
            )
    buckets = tuple(
        ArBucket(i, key[0], key[1], max(key[2], 1), tuple(pcs))
        for i, (key, pcs) in enumerate(sorted(bucket_pieces.items(), key=lambda kv: kv[0]))
    )

    # Gradients become ready in reverse forward order; a task is ready when its earliest
    # variable's gradient is. Launch tasks in that expected order (ties: AR before PS, index).
    def ready_key(kind: str, idx: int) -> tuple[int, int, int]:
        if kind == "ar":
            first = min(p.var_index for p in buckets[idx].pieces)
            return (-first, 0, idx)
        return (-ps_items[idx].piece.var_index, 1, idx)

    tasks = [("ar", b.index) for b in buckets] + [("ps", it.index) for it in ps_items]
    order = tuple(sorted(tasks, key=lambda t: ready_key(*t)))

    var_tasks: dict[str, list[tuple[str, int]]] = {}
    for b in buckets:
        for p in b.pieces:
            var_tasks.setdefault(p.var, []).append(("ar", b.index))
    for it in ps_items:
        var_tasks.setdefault(it.piece.var, []).append(("ps", it.index))

    sent = [0] * world
    recv = [0] * world
    if world > 1:
        for b in buckets:
            per_rank = 2 * (world - 1) * b.wire_bytes // world
            for r in range(world):
                sent[r] += per_rank
                recv[r] += per_rank
        members = {n: [r for r in range(world) if rank_nodes[r] == n] for n in set(rank_nodes)}
        for it in ps_items:
            b = it.push_bytes()
            s = it.server_rank
            for r in range(world):
                if r == s:
                    continue
                if it.local_replication and rank_nodes[r] != rank_nodes[s]:
                    leader = members[rank_nodes[r]][0]
                    if r != leader:  # member -> leader, leader -> member
                        sent[r] += b
                        recv[r] += b
                        sent[leader] += b
                        recv[leader] += b
                        continue
                sent[r] += b
                recv[r] += b
                sent[s] += b
                recv[s] += b
    return SyncPlan(
        world_size=world,
        rank_nodes=rank_nodes,
        buckets=buckets,
        ps_items=tuple(ps_items),
        order=order,
        sent_bytes=tuple(sent),
        recv_bytes=tuple(recv),
        # a variable with several shards in one bucket counts once for that bucket's readiness
        var_tasks={k: tuple(dict.fromkeys(v)) for k, v in var_tasks.items()},
    )
