"""Strategy featurization: shapes, agreement with the cost model, invariances, transfer, collate."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import StrategyValidationError
from autosync_transfer.rankers.costmodel import estimate
from autosync_transfer.rankers.features import (
    FEATURE_SCHEMA,
    FEATURE_SCHEMA_VERSION,
    Featurizer,
    StrategyFeatures,
    collate,
    featurize,
    featurize_many,
    reference_time_s,
)
from autosync_transfer.strategies.sampler import SamplerConfig, StrategySampler
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing import tiny_cluster, tiny_domain, tiny_graph, tiny_strategies

SCHEMA = FEATURE_SCHEMA
#: every compressor, groups in random (non-contiguous) order
WIDE = SamplerConfig(compressors=("none", "fp16", "fp16_ef", "powersgd"), merge_scheme="random")


def col(f: StrategyFeatures, name: str) -> np.ndarray:
    return f.rows[:, SCHEMA.row_index(name)]


def map_syncs(strategy: Strategy, fn: Callable[[PS | AllReduce], PS | AllReduce]) -> Strategy:
    """The same strategy with every synchronizer replaced by ``fn(synchronizer)``."""
    nodes = []
    for c in strategy.nodes:
        if c.partition is None:
            assert c.synchronizer is not None
            nodes.append(VarConfig(var_name=c.var_name, synchronizer=fn(c.synchronizer)))
        else:
            p = c.partition
            nodes.append(VarConfig(var_name=c.var_name, partition=Partition(
                axis=p.axis, shards=p.shards, synchronizers=tuple(map(fn, p.synchronizers)))))
    return Strategy(id=strategy.id, kind=strategy.kind, nodes=tuple(nodes))


def assert_same_features(a: StrategyFeatures, b: StrategyFeatures, rtol: float = 1e-6) -> None:
    np.testing.assert_allclose(a.rows, b.rows, rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(a.agg, b.agg, rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(a.server_feats, b.server_feats, rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(a.group_feats, b.group_feats, rtol=rtol, atol=1e-7)
    for name in ("row_var", "row_server", "row_group"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


# -- schema and shapes --------------------------------------------------------------------------


def test_schema_lengths_and_description() -> None:
    assert SCHEMA.version == FEATURE_SCHEMA_VERSION == 12
    assert SCHEMA.num_row == len(SCHEMA.row_columns) == 36
    assert SCHEMA.num_agg == len(SCHEMA.agg_columns) == 34
    for cols in (SCHEMA.row_columns, SCHEMA.agg_columns, SCHEMA.server_columns,
                 SCHEMA.group_columns):
        assert len(set(cols)) == len(cols)
    text = SCHEMA.describe()
    for name in SCHEMA.row_columns + SCHEMA.agg_columns:
        assert name in text
    assert SCHEMA.to_dict()["row_columns"] == list(SCHEMA.row_columns)
    # no column identifies a particular server or group
    assert not any("id" in c.split("_") for c in SCHEMA.row_columns + SCHEMA.agg_columns)


def test_shapes_dtypes_and_indices() -> None:
    dom = tiny_domain(3, [2, 1, 2])  # the tiny graph holds a scalar and a sparse embedding
    strategies = tiny_strategies(dom, 12, seed=4)
    for s, f in zip(strategies, featurize_many(strategies, dom)):
        num_rows = sum(1 if c.partition is None else c.partition.shards for c in s.nodes)
        assert f.strategy_id == s.id
        assert f.rows.shape == (num_rows, SCHEMA.num_row) and f.rows.dtype == np.float32
        assert f.agg.shape == (SCHEMA.num_agg,) and f.agg.dtype == np.float32
        assert f.server_feats.shape[1] == SCHEMA.num_server
        assert f.group_feats.shape[1] == SCHEMA.num_group
        for a in (f.row_var, f.row_server, f.row_group):
            assert a.shape == (num_rows,) and a.dtype == np.int64
        assert f.num_vars == len(dom.model.variables)
        assert np.isfinite(f.rows).all() and np.isfinite(f.agg).all()
        # rows in forward order, every variable present
        assert (np.diff(f.row_var) >= 0).all()
        assert set(f.row_var.tolist()) == set(range(f.num_vars))
        # PS rows have a server and no group, AR rows the reverse
        is_ar = col(f, "kind_ar") == 1
        assert ((f.row_server == -1) == is_ar).all() and ((f.row_group == -1) == ~is_ar).all()
        # local indices are 0.. in order of first appearance
        for idx, count in ((f.row_server, f.num_servers), (f.row_group, f.num_groups)):
            seen = list(dict.fromkeys(idx[idx >= 0].tolist()))
            assert seen == list(range(count))
        # one-hots
        kinds = f.rows[:, [SCHEMA.row_index(c) for c in
                           ("kind_ps_dense", "kind_ps_sparse", "kind_ar")]]
        assert (kinds.sum(axis=1) == 1).all()
        comps = f.rows[:, SCHEMA.row_index("comp_none"): SCHEMA.row_index("comp_powersgd") + 1]
        np.testing.assert_array_equal(comps.sum(axis=1), is_ar)
        # shares
        assert col(f, "byte_share").sum() == pytest.approx(1.0, rel=1e-5)
        if f.num_servers:
            assert f.server_feats[:, SCHEMA.server_columns.index("load_share")].sum() == (
                pytest.approx(1.0, rel=1e-5))
        if f.num_groups:
            assert f.group_feats[:, SCHEMA.group_columns.index("byte_share")].sum() == (
                pytest.approx(1.0, rel=1e-5))


def test_deterministic_and_single_equals_many() -> None:
    dom = tiny_domain(2, [2, 1])
    strategies = tiny_strategies(dom, 6, seed=2)
    a = featurize_many(strategies, dom)
    fz = Featurizer(dom)
    b = fz.featurize_many(strategies)
    again = fz.featurize_many(strategies)  # synchronizers now known by identity
    # strategies read back from JSON share no objects: resolved by value
    copies = fz.featurize_many([Strategy.from_json(s.to_json()) for s in strategies])
    for fa, fb, fc, fd, s in zip(a, b, again, copies, strategies):
        for other in (fb, fc, fd, featurize(s, dom)):
            assert_same_features(fa, other, rtol=0)
    assert featurize_many([], dom) == []


def test_all_ps_all_ar_and_large_group_ids() -> None:
    dom = tiny_domain(2, 2, sparse_embedding=False)
    names = [v.name for v in dom.model.variables]
    all_ar = Strategy(id="ar", nodes=tuple(
        VarConfig(var_name=n, synchronizer=AllReduce(group=10**6 + 13 * i))
        for i, n in enumerate(names)))
    all_ps = Strategy(id="ps", nodes=tuple(
        VarConfig(var_name=n, synchronizer=PS(destination="n1")) for n in names))
    f_ar, f_ps = featurize_many([all_ar, all_ps], dom)
    assert f_ar.num_servers == 0 and f_ar.num_groups == len(names)
    assert f_ar.row_group.tolist() == list(range(len(names)))
    assert f_ps.num_servers == 1 and f_ps.num_groups == 0
    assert (f_ps.row_server == 0).all()
    for f in (f_ar, f_ps):
        assert np.isfinite(f.rows).all() and np.isfinite(f.agg).all()
    assert f_ps.server_feats[0, SCHEMA.server_columns.index("load_share")] == 1.0
    assert f_ar.agg[SCHEMA.agg_index("ps_wire_frac")] == 0.0
    assert f_ps.agg[SCHEMA.agg_index("ps_wire_frac")] == 1.0


@pytest.mark.parametrize("dom", [tiny_domain(2, [2, 1]), tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25]),
                                 tiny_domain(4, 1, sparse_embedding=False)],
                         ids=["2x[2,1]", "mixed", "dense4"])
@pytest.mark.parametrize("config", [WIDE, "dataset", "default"], ids=["wide", "dataset", "default"])
def test_sampled_batch_and_aggregates_equal_the_object_path(dom: Domain, config: object) -> None:
    """A SampledBatch is featurized from its arrays (no objects built), exactly as its strategy
    objects would be; ``aggregates`` is the ``agg`` table of ``featurize_many`` exactly."""
    batch = StrategySampler(dom, config, seed=11).sample_batch(60)  # type: ignore[arg-type]
    fz = Featurizer(dom)
    from_arrays = fz.featurize_many(batch)
    agg_arrays = fz.aggregates(batch)
    assert batch._built == {}  # noqa: SLF001 - nothing was built
    objects = list(batch)
    from_objects = Featurizer(dom).featurize_many(objects)
    assert [f.strategy_id for f in from_arrays] == [s.id for s in objects]
    for fa, fo in zip(from_arrays, from_objects):
        assert_same_features(fa, fo, rtol=0)
    expected = np.stack([f.agg for f in from_objects])
    assert agg_arrays.dtype == np.float32 and agg_arrays.shape == (60, SCHEMA.num_agg)
    np.testing.assert_array_equal(agg_arrays, expected)
    np.testing.assert_array_equal(Featurizer(dom).aggregates(objects), expected)
    # configs in another order: rows are re-sorted for full features, aggregates need no order
    shuffled = [Strategy(id=s.id, nodes=tuple(reversed(s.nodes))) for s in objects[:10]]
    np.testing.assert_allclose(Featurizer(dom).aggregates(shuffled), expected[:10], rtol=1e-6)
    assert fz.aggregates([]).shape == (0, SCHEMA.num_agg)


def test_aggregates_in_many_small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.rankers import features

    dom = tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25])
    batch = StrategySampler(dom, WIDE, seed=8).sample_batch(50)
    whole = Featurizer(dom).aggregates(batch)
    monkeypatch.setattr(features, "_AGG_ROWS_PER_BATCH", 16)  # a few strategies per batch
    np.testing.assert_array_equal(Featurizer(dom).aggregates(batch), whole)
    np.testing.assert_array_equal(Featurizer(dom).aggregates(list(batch)), whole)


def test_a_batch_of_another_domain_is_read_as_objects() -> None:
    """A batch sampled on one cluster, featurized for another (the same nodes listed in another
    order): its strategy objects are featurized, servers matched by name, not by position."""
    dom = tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25])
    c = dom.cluster
    reordered = c.model_copy(update={"name": "reordered", "nodes": tuple(reversed(c.nodes))})
    other = Domain(name="other", model=dom.model, cluster=reordered)
    batch = StrategySampler(dom, WIDE, seed=4).sample_batch(8)
    got = Featurizer(other).featurize_many(batch)
    want = Featurizer(other).featurize_many(list(batch))
    for a, b in zip(got, want):
        assert_same_features(a, b, rtol=0)
    # reading the codes by position would have put PS rows on other servers
    fz = Featurizer(other)
    by_position = fz._columns_of_sampled(batch)  # noqa: SLF001
    by_name = fz._columns_of_objects(list(batch))  # noqa: SLF001
    assert not np.array_equal(by_position.ctab[1][by_position.codes],
                              by_name.ctab[1][by_name.codes])


def test_bucket_counting_dense_and_sparse_agree() -> None:
    from autosync_transfer.rankers import costmodel

    rng = np.random.default_rng(0)
    n, groups = 5000, 300
    g_key = rng.integers(0, groups, n)
    kind = rng.choice([0, 1, 2, 4, 5, 7, 67], n)
    two = (kind >= 3) & (rng.random(n) < 0.5)
    dense = costmodel._buckets(g_key, kind, two, groups)
    sparse = costmodel._buckets(g_key, kind, two, 10**6)  # too many groups for dense bins
    np.testing.assert_array_equal(dense[0], sparse[0][:groups])
    np.testing.assert_array_equal(dense[1], sparse[1][:groups])
    assert not sparse[0][groups:].any()
    # by hand for the first groups
    for g in range(5):
        rows = g_key == g
        kinds = set(kind[rows].tolist())
        doubled = set(kind[rows & two].tolist())
        assert dense[0][g] == len(kinds) + len(doubled)
        assert dense[1][g] == bool(doubled)


# -- agreement with the analytical model --------------------------------------------------------


@pytest.mark.parametrize(
    "cluster",
    [
        tiny_cluster(2, [1, 2]),
        tiny_cluster(3, [2, 3, 1], [1.0, 2.0, 0.5]),
        tiny_cluster(1, 2),
        Cluster(name="lat", nodes=(
            Node(name="a", address="10.1.0.1", workers=2, bandwidth_gbps=1.0, latency_ms=0.5,
                 chief=True),
            Node(name="b", address="10.1.0.2", workers=1, bandwidth_gbps=4.0),
        )),
    ],
    ids=["2x[1,2]", "3-mixed", "single", "latency"],
)
def test_cost_terms_match_estimate(cluster: Cluster) -> None:
    """The featurizer puts the cost model's terms in the right places: every row's, every
    server's and every group's (in local order) and the strategy's, as ``estimate`` reports
    them per strategy."""
    dom = Domain(name="d", model=tiny_graph(), cluster=cluster)
    strategies = StrategySampler(dom, WIDE, seed=5).sample_n(25)
    fz = Featurizer(dom)
    ref = fz.reference_time_s
    assert ref == reference_time_s(dom) > 0
    for s, f in zip(strategies, fz.featurize_many(strategies)):
        e = estimate(s, dom)
        tr = np.array([r.transmission_s for r in e.rows])
        lat = np.array([r.latency_s for r in e.rows])
        np.testing.assert_allclose(col(f, "pre_transmission") * ref, tr, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(col(f, "pre_latency") * ref, lat, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(10 ** col(f, "log10_transmission_s") - 1e-9, tr, rtol=1e-4,
                                   atol=1e-9)
        assert f.agg[SCHEMA.agg_index("total")] * ref == pytest.approx(e.total_s, rel=1e-5)
        assert f.agg[SCHEMA.agg_index("sum")] * ref == pytest.approx(e.sum_s, rel=1e-5)
        assert f.agg[SCHEMA.agg_index("ar_time_sum")] * ref == pytest.approx(
            e.ar_total_s, rel=1e-5, abs=1e-12)
        servers = list(dict.fromkeys(r.server for r in e.rows if r.server is not None))
        groups = list(dict.fromkeys(r.group for r in e.rows if r.group is not None))
        np.testing.assert_allclose(
            f.server_feats[:, SCHEMA.server_columns.index("time")] * ref,
            [e.per_server[n] for n in servers], rtol=1e-5)
        np.testing.assert_allclose(
            f.server_feats[:, SCHEMA.server_columns.index("nic_time")] * ref,
            [e.per_node_nic_s[n] for n in servers], rtol=1e-5)
        np.testing.assert_allclose(
            f.group_feats[:, SCHEMA.group_columns.index("time")] * ref,
            [e.per_group[g] for g in groups], rtol=1e-5)


def test_reference_time_is_all_reduce_of_the_model() -> None:
    dom = tiny_domain(4, 1)  # 4 x 1 worker, 1 Gbit/s: ring factor 1.5
    model_bytes = dom.model.nbytes
    expected = model_bytes * 1.5 / (1e9 / 8) + 2 * 3 * 1e-4  # one collective of 2 (W - 1) msgs
    assert reference_time_s(dom) == pytest.approx(expected)
    assert reference_time_s(tiny_domain(1, 1)) > 0  # one worker: bytes / bandwidth


# -- invariances and transfer --------------------------------------------------------------------


def test_node_relabelling_leaves_features_unchanged() -> None:
    spec = [("n0", 2, 1.0), ("n1", 1, 2.0), ("n2", 2, 0.5)]
    graph = tiny_graph()

    def cluster(order: list[int], names: list[str]) -> Cluster:
        return Cluster(name="c", nodes=tuple(
            Node(name=names[i], address=f"10.2.0.{i + 1}", workers=spec[k][1],
                 bandwidth_gbps=spec[k][2], chief=(i == 0))
            for i, k in enumerate(order)
        ))

    dom_a = Domain(name="a", model=graph, cluster=cluster([0, 1, 2], ["n0", "n1", "n2"]))
    # the same machines listed in another order under other names
    dom_b = Domain(name="b", model=graph, cluster=cluster([2, 0, 1], ["x", "y", "z"]))
    rename = {"n2": "x", "n0": "y", "n1": "z"}

    def relabel(s: PS | AllReduce) -> PS | AllReduce:
        return s.model_copy(update={"destination": rename[s.destination]}) if isinstance(
            s, PS) else s

    strategies = StrategySampler(dom_a, WIDE, seed=7).sample_n(10)
    fa = featurize_many(strategies, dom_a)
    fb = featurize_many([map_syncs(s, relabel) for s in strategies], dom_b)
    for a, b in zip(fa, fb):
        assert_same_features(a, b)


def test_group_renumbering_leaves_features_unchanged() -> None:
    dom = tiny_domain(2, 2, sparse_embedding=False)

    def renumber(s: PS | AllReduce) -> PS | AllReduce:
        return s.model_copy(update={"group": 1000 - 7 * s.group}) if isinstance(
            s, AllReduce) else s

    strategies = StrategySampler(dom, WIDE, seed=3).sample_n(10)
    assert any(f.num_groups > 1 for f in featurize_many(strategies, dom))
    for a, b in zip(featurize_many(strategies, dom),
                    featurize_many([map_syncs(s, renumber) for s in strategies], dom)):
        assert_same_features(a, b, rtol=0)


def test_config_order_does_not_matter() -> None:
    dom = tiny_domain(2, [1, 2])
    strategies = tiny_strategies(dom, 5, seed=9)
    shuffled = [Strategy(id=s.id, nodes=tuple(reversed(s.nodes))) for s in strategies]
    for a, b in zip(featurize_many(strategies, dom), featurize_many(shuffled, dom)):
        assert_same_features(a, b, rtol=0)


@pytest.mark.parametrize("sparse", [False, True])
def test_model_scaled_twice_keeps_byte_shares(sparse: bool) -> None:
    g = tiny_graph(sparse_embedding=sparse)
    g64 = ModelGraph(  # every variable twice the bytes: float64 instead of float32
        name="tiny64",
        variables=tuple(v.model_copy(update={"dtype": "float64"}) for v in g.variables),
        batch_size=g.batch_size, seq_len=g.seq_len,
    )
    cluster = tiny_cluster(2, 2)
    dom32 = Domain(name="32", model=g, cluster=cluster)
    dom64 = Domain(name="64", model=g64, cluster=cluster)
    assert dom64.model.nbytes == 2 * dom32.model.nbytes
    strategies = StrategySampler(dom32, SamplerConfig(compressors=("none",)), seed=1).sample_n(8)
    # a sparse row also carries an 8-byte index per touched row, which does not double
    rtol = 0.1 if sparse else 1e-6
    for a, b in zip(featurize_many(strategies, dom32), featurize_many(strategies, dom64)):
        np.testing.assert_allclose(col(a, "byte_share"), col(b, "byte_share"), rtol=1e-6)
        for name in ("wire_share", "server_load_share", "group_byte_share", "ps_wire_frac"):
            np.testing.assert_allclose(col(a, name), col(b, name), rtol=rtol, atol=1e-7)


def test_same_strategy_on_a_larger_cluster_has_the_same_width() -> None:
    small = tiny_domain(4, 1)
    large = tiny_domain(8, 2, [1.0, 2.0] * 4)
    strategies = tiny_strategies(small, 6, seed=11)  # PS destinations n0..n3 exist in both
    for a, b in zip(featurize_many(strategies, small), featurize_many(strategies, large)):
        assert a.rows.shape == b.rows.shape
        assert a.agg.shape == b.agg.shape
        assert a.server_feats.shape == b.server_feats.shape
        assert a.group_feats.shape == b.group_feats.shape
        np.testing.assert_array_equal(a.row_var, b.row_var)
        # what the strategy does is unchanged; what the cluster is differs
        for name in ("kind_ar", "byte_share", "is_shard", "var_position"):
            np.testing.assert_array_equal(col(a, name), col(b, name))
        assert (col(b, "log2_nodes") == 3.0).all() and (col(a, "log2_nodes") == 2.0).all()
        assert np.isfinite(b.rows).all()


# -- invalid strategies -------------------------------------------------------------------------


def test_invalid_strategy_raises_the_validator_report() -> None:
    dom = tiny_domain(2, 1)
    s = tiny_strategies(dom, 1)[0]
    bad = map_syncs(s, lambda x: PS(destination="nowhere") if isinstance(x, PS) else x)
    with pytest.raises(StrategyValidationError, match="nowhere"):
        featurize(bad, dom)
    missing = Strategy(id="m", nodes=s.nodes[1:])
    with pytest.raises(StrategyValidationError):
        featurize_many([s, missing], dom)
    sparse_ar = map_syncs(s, lambda x: AllReduce())
    with pytest.raises(StrategyValidationError, match="sparse"):
        featurize(sparse_ar, dom)


# -- collate ------------------------------------------------------------------------------------


def test_collate_pads_and_masks() -> None:
    torch = pytest.importorskip("torch")
    dom = tiny_domain(2, [1, 2])
    feats = featurize_many(tiny_strategies(dom, 4, seed=6), dom)
    batch = collate(feats)
    B = len(feats)
    rmax = max(f.num_rows for f in feats)
    assert batch["rows"].shape == (B, rmax, SCHEMA.num_row)
    assert batch["rows"].dtype == torch.float32
    assert batch["agg"].shape == (B, SCHEMA.num_agg)
    assert batch["server_feats"].shape == (B, max(f.num_servers for f in feats), SCHEMA.num_server)
    assert batch["group_feats"].shape == (B, max(f.num_groups for f in feats), SCHEMA.num_group)
    for k, f in enumerate(feats):
        n = f.num_rows
        assert batch["row_mask"][k].sum().item() == n == batch["num_rows"][k].item()
        np.testing.assert_array_equal(batch["rows"][k, :n].numpy(), f.rows)
        assert (batch["rows"][k, n:] == 0).all()
        for name in ("row_var", "row_server", "row_group"):
            np.testing.assert_array_equal(batch[name][k, :n].numpy(), getattr(f, name))
            assert (batch[name][k, n:] == -1).all()
        assert batch["num_vars"][k].item() == f.num_vars
        assert batch["server_mask"][k].sum().item() == f.num_servers
        assert batch["group_mask"][k].sum().item() == f.num_groups
        np.testing.assert_array_equal(batch["server_feats"][k, : f.num_servers].numpy(),
                                      f.server_feats)
    with pytest.raises(ValueError):
        collate([])
