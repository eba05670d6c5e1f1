"""Hypothesis strategies that generate valid domain objects (a test helper; needs ``hypothesis``).

Every generator here yields objects the pydantic types accept: :class:`Strategy` objects with
PS / all-reduce synchronizers and partitions, small :class:`Cluster` objects, and model graphs
that fit a given strategy. Integer fields stay within int32 so that the same objects can be
written as AutoDist protobuf.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.strategies.types import (
    COMPRESSORS,
    PS,
    AllReduce,
    Partition,
    Strategy,
    VarConfig,
)

__all__ = [
    "INT32_MAX",
    "text_values",
    "var_names",
    "node_names",
    "ps_synchronizers",
    "allreduce_synchronizers",
    "synchronizers",
    "partitions",
    "var_configs",
    "strategy_objects",
    "clusters",
    "autodist_strategies",
    "clusters_with_strategies",
    "graphs_for",
]

INT32_MAX = 2**31 - 1

_small_or_any_int32 = st.one_of(st.integers(0, 8), st.integers(0, INT32_MAX))


def text_values(min_size: int = 1, max_size: int = 16) -> SearchStrategy[str]:
    """Arbitrary text that UTF-8 can encode (no lone surrogates)."""
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


def var_names() -> SearchStrategy[str]:
    """TensorFlow-like variable names (``dense_1/kernel``), odd ones (``w:0``), and any text."""
    tf_like = st.from_regex(r"[a-z][a-z0-9_]{0,7}(/[a-z][a-z0-9_]{0,7}){0,3}", fullmatch=True)
    suffixed = tf_like.map(lambda s: s + ":0")
    return st.one_of(tf_like, tf_like, suffixed, text_values())


def node_names() -> SearchStrategy[str]:
    # the characters a Node name may use (a ':' would be ambiguous in compact strategy tokens)
    return st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True),
                     st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True))


def ps_synchronizers(destinations: Sequence[str] | None = None) -> SearchStrategy[PS]:
    """PS synchronizers; ``destinations`` restricts the destination names (any name if None)."""
    dest = st.sampled_from(list(destinations)) if destinations is not None else node_names()

    @st.composite
    def build(draw: st.DrawFn) -> PS:
        sync = draw(st.booleans())
        return PS(
            destination=draw(dest),
            local_replication=draw(st.booleans()),
            sync=sync,
            staleness=draw(_small_or_any_int32) if sync else 0,
        )

    return build()


def allreduce_synchronizers(*, powersgd_rank: int | None = None) -> SearchStrategy[AllReduce]:
    """All-reduce synchronizers; ``powersgd_rank`` fixes the rank (any of 1..64 if None)."""
    rank = st.just(powersgd_rank) if powersgd_rank is not None else st.integers(1, 64)
    return st.builds(
        AllReduce,
        group=_small_or_any_int32,
        compressor=st.sampled_from(COMPRESSORS),
        powersgd_rank=rank,
    )


def synchronizers(
    destinations: Sequence[str] | None = None, *, powersgd_rank: int | None = None
) -> SearchStrategy[PS | AllReduce]:
    return st.one_of(
        ps_synchronizers(destinations), allreduce_synchronizers(powersgd_rank=powersgd_rank)
    )


def partitions(
    destinations: Sequence[str] | None = None,
    *,
    powersgd_rank: int | None = None,
    min_shards: int = 2,
    max_shards: int = 5,
    max_axis: int = 3,
) -> SearchStrategy[Partition]:
    """Partitions with ``min_shards..max_shards`` shards along axis ``0..max_axis``."""

    @st.composite
    def build(draw: st.DrawFn) -> Partition:
        shards = draw(st.integers(min_shards, max_shards))
        syncs = draw(
            st.lists(
                synchronizers(destinations, powersgd_rank=powersgd_rank),
                min_size=shards,
                max_size=shards,
            )
        )
        axis = draw(st.integers(0, max_axis))
        return Partition(axis=axis, shards=shards, synchronizers=tuple(syncs))

    return build()


def var_configs(
    name: SearchStrategy[str] | None = None,
    destinations: Sequence[str] | None = None,
    *,
    powersgd_rank: int | None = None,
) -> SearchStrategy[VarConfig]:
    """One variable's config: a single synchronizer (about 2/3) or a partition."""
    names = name if name is not None else var_names()

    @st.composite
    def build(draw: st.DrawFn) -> VarConfig:
        var = draw(names)
        if draw(st.integers(0, 2)):
            sync = draw(synchronizers(destinations, powersgd_rank=powersgd_rank))
            return VarConfig(var_name=var, synchronizer=sync)
        return VarConfig(
            var_name=var, partition=draw(partitions(destinations, powersgd_rank=powersgd_rank))
        )

    return build()


def strategy_objects(
    destinations: Sequence[str] | None = None,
    *,
    powersgd_rank: int | None = None,
    kind: str | None = None,
    max_vars: int = 6,
) -> SearchStrategy[Strategy]:
    """Valid :class:`Strategy` objects with distinct variable names (0..``max_vars`` of them).

    ``destinations`` restricts PS destinations, ``powersgd_rank`` and ``kind`` fix those fields
    (arbitrary when None).
    """
    kinds = st.just(kind) if kind is not None else st.one_of(
        st.sampled_from(["user", "sampled", "ps_lb", "ddp", "autodist"]), text_values(max_size=8)
    )
    ids = st.one_of(st.from_regex(r"20[0-9]{6}T[0-9]{6}M[0-9]{6}", fullmatch=True), text_values())

    @st.composite
    def build(draw: st.DrawFn) -> Strategy:
        names = draw(st.lists(var_names(), max_size=max_vars, unique=True))
        nodes = tuple(
            draw(var_configs(st.just(n), destinations, powersgd_rank=powersgd_rank)) for n in names
        )
        return Strategy(id=draw(ids), kind=draw(kinds), nodes=nodes)

    return build()


@st.composite
def _addresses(draw: st.DrawFn, count: int) -> list[str]:
    pool = st.one_of(
        st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)).map(
            lambda t: f"10.{t[0]}.{t[1]}.{t[2]}"
        ),
        st.from_regex(r"host-[a-z0-9]{1,6}(\.[a-z]{2,5})?", fullmatch=True),
        st.integers(1, 0xFFFF).map(lambda i: f"fd00::{i:x}"),
    )
    return draw(st.lists(pool, min_size=count, max_size=count, unique=True))


def clusters(max_nodes: int = 4, max_workers: int = 4) -> SearchStrategy[Cluster]:
    """Small valid clusters: distinct names and non-loopback addresses, exactly one chief."""

    @st.composite
    def build(draw: st.DrawFn) -> Cluster:
        count = draw(st.integers(1, max_nodes))
        names = draw(st.lists(node_names(), min_size=count, max_size=count, unique=True))
        addresses = draw(_addresses(count))
        chief = draw(st.integers(0, count - 1))
        nodes = tuple(
            Node(
                name=names[i],
                address=addresses[i],
                workers=draw(st.integers(1, max_workers)),
                device=draw(st.sampled_from(["gpu", "cpu"])),
                bandwidth_gbps=draw(st.sampled_from([1.0, 10.0, 25.0, 100.0])),
                chief=i == chief,
            )
            for i in range(count)
        )
        name = draw(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True))
        return Cluster(name=name, nodes=nodes)

    return build()


def autodist_strategies(cluster: Cluster, max_vars: int = 6) -> SearchStrategy[Strategy]:
    """Strategies that survive an AutoDist round trip on ``cluster`` unchanged: destinations
    among its nodes, ``powersgd_rank=1``, ``kind="autodist"``."""
    return strategy_objects(cluster.node_names, powersgd_rank=1, kind="autodist", max_vars=max_vars)


def clusters_with_strategies(max_vars: int = 6) -> SearchStrategy[tuple[Cluster, Strategy]]:
    """(cluster, strategy) pairs for AutoDist round trips (see :func:`autodist_strategies`)."""
    return clusters().flatmap(lambda c: st.tuples(st.just(c), autodist_strategies(c, max_vars)))


def graphs_for(strategy: Strategy) -> SearchStrategy[ModelGraph]:
    """Model graphs holding every variable of ``strategy`` with a shape its partition fits
    (rank above the partition axis, the split dimension at least the shard count)."""

    @st.composite
    def build(draw: st.DrawFn) -> ModelGraph:
        variables = []
        for i, cfg in enumerate(strategy.nodes):
            p = cfg.partition
            rank = draw(st.integers(p.axis + 1 if p else 0, (p.axis if p else 0) + 3))
            shape = [draw(st.integers(1, 64)) for _ in range(rank)]
            if p is not None:
                shape[p.axis] = draw(st.integers(p.shards, 4 * p.shards))
            variables.append(Variable(name=cfg.var_name, shape=tuple(shape), order=i))
        if not variables:
            variables.append(Variable(name="unused", shape=(2,), order=0))
        return ModelGraph(name="generated", variables=tuple(variables))

    return build()
