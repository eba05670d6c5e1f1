"""Hand-computed cases for the analytical synchronization-time model."""

from __future__ import annotations

import numpy as np
import pytest

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.errors import StrategyValidationError
from autosync_transfer.rankers.costmodel import (
    AnalyticalRanker,
    CostModelConfig,
    RowCost,
    estimate,
)
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

GBPS_1 = 1e9 / 8  # bytes/s of a 1 Gbit/s NIC
INTRA = 10e9 / 8  # default intra-node bandwidth, bytes/s
ALPHA = 1e-4  # default per-message latency, s
MB_100 = 25_000_000  # float32 elements in 100 MB
MB_10 = 2_500_000  # float32 elements in 10 MB


def make_cluster(workers: list[int], gbps: list[float] | None = None,
                 latency_ms: list[float] | None = None) -> Cluster:
    gbps = gbps or [1.0] * len(workers)
    latency_ms = latency_ms or [0.0] * len(workers)
    nodes = tuple(
        Node(name=f"n{i}", address=f"10.0.0.{i + 1}", workers=w, bandwidth_gbps=g,
             latency_ms=lat, chief=(i == 0))
        for i, (w, g, lat) in enumerate(zip(workers, gbps, latency_ms))
    )
    return Cluster(name="test", nodes=nodes)


def make_domain(variables: list[tuple[str, tuple[int, ...]]] | list, cluster: Cluster,
                batch_size: int = 1, seq_len: int = 1) -> Domain:
    vs = []
    for i, spec in enumerate(variables):
        name, shape, *rest = spec
        sparse = bool(rest[0]) if rest else False
        vs.append(Variable(name=name, shape=shape, sparse=sparse, order=i))
    graph = ModelGraph(name="m", variables=tuple(vs), batch_size=batch_size, seq_len=seq_len)
    return Domain(name="d", model=graph, cluster=cluster)


def strat(**syncs: PS | AllReduce | Partition) -> Strategy:
    nodes = []
    for name, s in syncs.items():
        if isinstance(s, Partition):
            nodes.append(VarConfig(var_name=name, partition=s))
        else:
            nodes.append(VarConfig(var_name=name, synchronizer=s))
    return Strategy(id="s", nodes=tuple(nodes))


# -- all-reduce -------------------------------------------------------------------------------


def test_ring_factor_four_workers_100mb_on_1gbps() -> None:
    dom = make_domain([("w", (MB_100,))], make_cluster([1, 1, 1, 1]))
    out = estimate(strat(w=AllReduce()), dom)
    # 2 * 3/4 * 100e6 B * 8 / 1e9 = 1.2 s; one collective of 2 (W - 1) messages
    assert out.rows[0].transmission_s == pytest.approx(1.2)
    assert out.rows[0].latency_s == pytest.approx(6 * ALPHA)
    assert out.ar_total_s == pytest.approx(1.2 + 6 * ALPHA)
    assert out.total_s == pytest.approx(1.2 + 6 * ALPHA)
    assert out.per_group == {0: pytest.approx(1.2 + 6 * ALPHA)}
    assert out.per_server == {}


def test_ring_two_by_two_uses_nic_not_intra() -> None:
    dom = make_domain([("w", (MB_100,))], make_cluster([2, 2]))
    out = estimate(strat(w=AllReduce()), dom)
    assert out.ar_total_s == pytest.approx(1.2 + 6 * ALPHA)


def test_fp16_halves_the_bytes() -> None:
    dom = make_domain([("w", (MB_100,))], make_cluster([1, 1, 1, 1]))
    for comp in ("fp16", "fp16_ef"):
        out = estimate(strat(w=AllReduce(compressor=comp)), dom)
        assert out.rows[0].bytes_per_worker == 50e6
        assert out.rows[0].transmission_s == pytest.approx(0.6)


def test_powersgd_formula_and_two_collectives() -> None:
    dom = make_domain(
        [("m", (1000, 2500)), ("t", (10, 20, 30)), ("b", (1000,)), ("thin", (3, 1000))],
        make_cluster([1, 1, 1, 1]),
    )
    s = strat(
        m=AllReduce(group=0, compressor="powersgd", powersgd_rank=4),
        t=AllReduce(group=1, compressor="powersgd", powersgd_rank=2),
        b=AllReduce(group=2, compressor="powersgd", powersgd_rank=4),
        thin=AllReduce(group=3, compressor="powersgd", powersgd_rank=8),
    )
    rows = {r.var_name: r for r in estimate(s, dom).rows}
    assert rows["m"].bytes_per_worker == 4 * 4 * (1000 + 2500)
    assert rows["m"].messages == 2
    assert rows["m"].transmission_s == pytest.approx(1.5 * 56_000 / GBPS_1)
    assert rows["m"].latency_s == pytest.approx(2 * 6 * ALPHA)
    assert rows["t"].bytes_per_worker == 4 * 2 * (10 + 600)  # reshaped to (10, 20*30)
    assert rows["b"].bytes_per_worker == 4000  # 1-D: uncompressed
    assert rows["b"].messages == 1
    assert rows["thin"].bytes_per_worker == 4 * 3 * (3 + 1000)  # rank capped at min(d0, rest)


def test_powersgd_sends_a_tensor_with_a_dimension_of_one_uncompressed() -> None:
    # the runtime factorizes only matrices with both sides > 1 (a (1, n) row is sent as it is)
    dom = make_domain([("row", (1, 1000)), ("col", (1000, 1, 1))], make_cluster([1, 1, 1, 1]))
    s = strat(row=AllReduce(group=0, compressor="powersgd", powersgd_rank=4),
              col=AllReduce(group=1, compressor="powersgd", powersgd_rank=4))
    out = estimate(s, dom)
    rows = {r.var_name: r for r in out.rows}
    assert rows["row"].bytes_per_worker == rows["col"].bytes_per_worker == 4000
    assert rows["row"].messages == rows["col"].messages == 1
    assert out.per_group[0] == pytest.approx(1.5 * 4000 / GBPS_1 + 6 * ALPHA)


def test_group_fusion_counts_latency_once_per_group() -> None:
    dom = make_domain([("a", (MB_10,)), ("b", (1000, 2500))], make_cluster([1, 1, 1, 1]))
    trans = 1.5 * 20e6 / GBPS_1  # both tensors: 2 * 3/4 * 20 MB
    fused = estimate(strat(a=AllReduce(group=3), b=AllReduce(group=3)), dom)
    assert fused.per_group == {3: pytest.approx(trans + 6 * ALPHA)}
    split = estimate(strat(a=AllReduce(group=0), b=AllReduce(group=1)), dom)
    assert split.ar_total_s == pytest.approx(trans + 2 * 6 * ALPHA)
    # compressors are fused separately (one bucket each, as the runtime plans them), and a
    # PowerSGD bucket needs two collectives: 1 (none) + 2 (PowerSGD) here
    mixed = estimate(
        strat(a=AllReduce(group=0), b=AllReduce(group=0, compressor="powersgd")), dom
    )
    assert mixed.per_group[0] == pytest.approx(1.5 * (10e6 + 4 * 3500) / GBPS_1 + 3 * 6 * ALPHA)
    halves = estimate(strat(a=AllReduce(group=0), b=AllReduce(group=0, compressor="fp16")), dom)
    assert halves.per_group[0] == pytest.approx(1.5 * (10e6 + 5e6) / GBPS_1 + 2 * 6 * ALPHA)


# -- parameter server -------------------------------------------------------------------------


def test_ps_incast_three_remote_workers() -> None:
    dom = make_domain([("w", (MB_10,))], make_cluster([1, 1, 1, 1]))
    out = estimate(strat(w=PS(destination="n0")), dom)
    row = out.rows[0]
    assert (row.kind, row.server, row.group, row.messages) == ("ps", "n0", None, 6)
    assert row.transmission_s == pytest.approx(3 * 10e6 / GBPS_1)  # 0.24 s: 3x bytes into n0
    assert row.latency_s == pytest.approx(6 * ALPHA)
    assert out.per_node_nic_s["n0"] == pytest.approx(0.24 + 6 * ALPHA)
    for k in ("n1", "n2", "n3"):  # each sender pushes and pulls b once
        assert out.per_node_nic_s[k] == pytest.approx(0.08 + 2 * ALPHA)
    assert out.total_s == pytest.approx(0.24 + 6 * ALPHA)
    assert out.bottleneck_node == "n0"
    assert out.per_server == {"n0": pytest.approx(0.24 + 6 * ALPHA)}


def test_local_replication_on_two_by_two() -> None:
    dom = make_domain([("w", (MB_10,))], make_cluster([2, 2]))
    b = 10e6
    plain = estimate(strat(w=PS(destination="n0")), dom)
    # n0: two remote pushes on the NIC, one local worker over intra, 2 * 3 messages
    assert plain.per_node_nic_s["n0"] == pytest.approx(2 * b / GBPS_1 + b / INTRA + 6 * ALPHA)
    assert plain.per_node_nic_s["n1"] == pytest.approx(2 * b / GBPS_1 + 4 * ALPHA)
    assert plain.rows[0].messages == 6
    repl = estimate(strat(w=PS(destination="n0", local_replication=True)), dom)
    # one push/pull per remote node; each node fans its other worker in and out over intra
    assert repl.per_node_nic_s["n0"] == pytest.approx(b / GBPS_1 + b / INTRA + 4 * ALPHA)
    assert repl.per_node_nic_s["n1"] == pytest.approx(b / GBPS_1 + b / INTRA + 4 * ALPHA)
    assert repl.rows[0].messages == 4
    assert repl.total_s < plain.total_s


def test_sparse_rows_formula() -> None:
    # 10000 x 64 float32 embedding, batch 8 x seq 16 = 128 touched rows per worker
    dom = make_domain([("emb", (10000, 64), True)], make_cluster([1, 1]), batch_size=8,
                      seq_len=16)
    out = estimate(strat(emb=PS(destination="n0")), dom)
    row = out.rows[0]
    assert row.is_sparse
    assert row.bytes_per_worker == 128 * (64 * 4 + 8)
    assert row.transmission_s == pytest.approx(128 * 264 / GBPS_1)
    # shards get rows in proportion to their share of axis 0 (shard sizes 51 and 50)
    dom = make_domain([("emb", (101, 8), True)], make_cluster([1, 1]), batch_size=10)
    part = Partition(axis=0, shards=2,
                     synchronizers=(PS(destination="n0"), PS(destination="n1")))
    rows = estimate(strat(emb=part), dom).rows
    assert [r.shard for r in rows] == [0, 1]
    assert rows[0].bytes_per_worker == pytest.approx(10 * 51 / 101 * (8 * 4 + 8))
    assert rows[1].bytes_per_worker == pytest.approx(10 * 50 / 101 * (8 * 4 + 8))


def test_sparse_rows_capped_by_rows_of_the_variable() -> None:
    dom = make_domain([("emb", (100, 64), True)], make_cluster([1, 1]), batch_size=8,
                      seq_len=16)
    row = estimate(strat(emb=PS(destination="n0")), dom).rows[0]
    assert row.bytes_per_worker == 100 * 264


def test_sparse_local_replication_aggregates_unique_rows() -> None:
    cl = make_cluster([2, 2])
    s = strat(emb=PS(destination="n0", local_replication=True))
    # 128 rows per worker; node n1 sends min(2 * 128, 10000) = 256 rows
    dom = make_domain([("emb", (10000, 64), True)], cl, batch_size=8, seq_len=16)
    b = 128 * 264
    out = estimate(s, dom)
    assert out.per_node_nic_s["n1"] == pytest.approx(256 * 264 / GBPS_1 + b / INTRA + 4 * ALPHA)
    # a 200-row table: at most 200 distinct rows leave the node
    dom = make_domain([("emb", (200, 64), True)], cl, batch_size=8, seq_len=16)
    out = estimate(s, dom)
    assert out.per_node_nic_s["n1"] == pytest.approx(200 * 264 / GBPS_1 + b / INTRA + 4 * ALPHA)


def test_dense_shard_sizes_follow_partition() -> None:
    dom = make_domain([("w", (10, 100))], make_cluster([1, 1]))
    part = Partition(axis=0, shards=3, synchronizers=(
        PS(destination="n0"), PS(destination="n1"), AllReduce(group=2)))
    rows = estimate(strat(w=part), dom).rows
    assert [r.bytes_per_worker for r in rows] == [1600, 1200, 1200]
    assert [r.kind for r in rows] == ["ps", "ps", "ar"]
    assert isinstance(rows[0], RowCost)


# -- heterogeneity, combination, single node --------------------------------------------------


def test_heterogeneous_bandwidth_bottleneck() -> None:
    cl = make_cluster([1, 1, 1], gbps=[1.0, 10.0, 10.0])
    dom = make_domain([("w", (MB_10,))], cl)
    b = 10e6
    # the ring runs at the slowest NIC: 2 * 2/3 * b / 1 Gbit/s
    ar = estimate(strat(w=AllReduce()), dom)
    assert ar.ar_total_s == pytest.approx(4 / 3 * b / GBPS_1 + 4 * ALPHA)
    slow = estimate(strat(w=PS(destination="n0")), dom)
    assert slow.total_s == pytest.approx(2 * b / GBPS_1 + 4 * ALPHA)
    fast = estimate(strat(w=PS(destination="n1")), dom)
    # the fast server takes 2b at 10 Gbit/s; the slow sender n0 (b at 1 Gbit/s) is the bottleneck
    assert fast.per_node_nic_s["n1"] == pytest.approx(2 * b / (10 * GBPS_1) + 4 * ALPHA)
    assert fast.total_s == pytest.approx(b / GBPS_1 + 2 * ALPHA)
    assert fast.bottleneck_node == "n0"
    assert fast.rows[0].transmission_s == pytest.approx(b / GBPS_1)


def test_bottleneck_max_versus_sum() -> None:
    dom = make_domain([("a", (MB_10,)), ("b", (MB_10,)), ("c", (MB_10,))],
                      make_cluster([1, 1, 1]))
    out = estimate(strat(a=PS(destination="n0"), b=PS(destination="n1"), c=AllReduce()), dom)
    b = 10e6
    ar = 4 / 3 * b / GBPS_1 + 4 * ALPHA
    assert out.ar_total_s == pytest.approx(ar)
    # n0 serves a (2b in) and sends for b (b out): 3b, 4 + 2 messages
    assert out.per_node_nic_s["n0"] == pytest.approx(3 * b / GBPS_1 + 6 * ALPHA)
    assert out.per_node_nic_s["n2"] == pytest.approx(2 * b / GBPS_1 + 4 * ALPHA)
    assert out.per_server == {"n0": pytest.approx(2 * b / GBPS_1 + 4 * ALPHA),
                              "n1": pytest.approx(2 * b / GBPS_1 + 4 * ALPHA)}
    assert out.total_s == pytest.approx(ar + 3 * b / GBPS_1 + 6 * ALPHA)
    assert out.sum_s == pytest.approx(ar + 2 * (2 * b / GBPS_1 + 4 * ALPHA))
    assert out.sum_s >= out.total_s


def test_single_node_uses_intra_node_bandwidth() -> None:
    dom = make_domain([("w", (MB_100,))], make_cluster([4]))
    ar = estimate(strat(w=AllReduce()), dom)
    assert ar.ar_total_s == pytest.approx(1.5 * 100e6 / INTRA + 6 * ALPHA)  # 0.12 s
    ps = estimate(strat(w=PS(destination="n0")), dom)
    assert ps.total_s == pytest.approx(3 * 100e6 / INTRA + 6 * ALPHA)
    cfg = CostModelConfig(intra_node_gbps=20.0, default_latency_s=0.0)
    assert estimate(strat(w=AllReduce()), dom, cfg).total_s == pytest.approx(0.06)


def test_single_worker_has_nothing_to_synchronize() -> None:
    dom = make_domain([("w", (MB_10,))], make_cluster([1]))
    assert estimate(strat(w=AllReduce()), dom).total_s == 0.0
    assert estimate(strat(w=PS(destination="n0")), dom).total_s == 0.0


def test_node_latency_overrides_default() -> None:
    dom = make_domain([("w", (10,))], make_cluster([1, 1], latency_ms=[2.0, 0.0]))
    out = estimate(strat(w=PS(destination="n1")), dom)
    assert out.per_node_nic_s["n0"] == pytest.approx(40 / GBPS_1 + 2 * 2e-3)
    assert out.per_node_nic_s["n1"] == pytest.approx(40 / GBPS_1 + 2 * ALPHA)
    ar = estimate(strat(w=AllReduce()), dom)  # the ring waits for the slowest hop
    assert ar.ar_total_s == pytest.approx(40 / GBPS_1 + 2 * 2e-3)


def test_sum_form_never_below_bottleneck_form() -> None:
    cl = make_cluster([2, 1, 3], gbps=[1.0, 5.0, 2.0], latency_ms=[0.0, 0.5, 0.0])
    dom = make_domain([("emb", (500, 16), True), ("w", (64, 300)), ("b", (300,))], cl,
                      batch_size=4, seq_len=32)
    syncs = [PS(destination=n, local_replication=lr) for n in ("n0", "n1", "n2")
             for lr in (False, True)]
    ars = [AllReduce(group=g, compressor=c) for g in (0, 1) for c in ("none", "powersgd")]
    for i, ps in enumerate(syncs):
        emb = Partition(axis=0, shards=2, synchronizers=(ps, syncs[(i + 1) % len(syncs)]))
        for j, ar in enumerate(ars):
            w = Partition(axis=1, shards=3, synchronizers=(ar, ps, ars[(j + 1) % len(ars)]))
            out = estimate(strat(emb=emb, w=w, b=ps if j % 2 else ar), dom)
            assert out.sum_s >= out.total_s > 0
            nic = max(out.per_node_nic_s.values())
            assert out.total_s == pytest.approx(out.ar_total_s + nic)
            assert out.sum_s == pytest.approx(
                sum(out.per_server.values()) + sum(out.per_group.values()))


# -- validation and the ranker ----------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    strat(w=AllReduce(), ghost=AllReduce()),
    strat(w=PS(destination="nowhere")),
    Strategy(id="empty", nodes=()),
    strat(w=Partition(axis=2, shards=2, synchronizers=(AllReduce(), AllReduce()))),
    strat(w=Partition(axis=0, shards=11, synchronizers=(AllReduce(),) * 11)),
])
def test_invalid_strategies_raise(bad: Strategy) -> None:
    dom = make_domain([("w", (10, 10))], make_cluster([1, 1]))
    with pytest.raises(StrategyValidationError):
        estimate(bad, dom)


def test_sparse_all_reduce_is_rejected() -> None:
    dom = make_domain([("emb", (10, 4), True)], make_cluster([1, 1]))
    with pytest.raises(StrategyValidationError, match="parameter server"):
        estimate(strat(emb=AllReduce()), dom)


def test_ranker_scores_are_bottleneck_seconds_lower_is_faster() -> None:
    dom = make_domain([("a", (MB_10,)), ("b", (MB_10,))], make_cluster([1, 1, 1, 1]))
    cands = [
        strat(a=PS(destination="n0"), b=PS(destination="n0")),
        strat(a=PS(destination="n0"), b=PS(destination="n1")),
        strat(a=AllReduce(), b=AllReduce(compressor="fp16")),
    ]
    ranker = AnalyticalRanker()
    scores = ranker.score(cands, dom)
    assert isinstance(scores, np.ndarray) and scores.shape == (3,)
    np.testing.assert_allclose(scores, [estimate(s, dom).total_s for s in cands])
    assert ranker.lower_is_better
    assert int(np.argmin(scores)) == 2
    assert scores[1] < scores[0]
    np.testing.assert_allclose(ranker.score(cands[::-1], dom), scores[::-1])


def test_scalar_variables_are_one_row():
    from autosync_transfer.rankers.costmodel import estimate
    from autosync_transfer.strategies.builders import build
    from autosync_transfer.testing.tiny import tiny_domain

    d = tiny_domain()
    assert any(v.shape == () for v in d.model.variables)
    for b in ("ps", "all_reduce", "parallax"):
        assert estimate(build(b, d), d).total_s > 0
