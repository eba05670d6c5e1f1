"""Hand-optimized builders: semantics on tiny domains, options, errors, validity on the catalog."""

from __future__ import annotations

import pytest

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.strategies.builders import (
    BUILDERS,
    MIB,
    build,
    builder_names,
    ddp,
    smallest_divisor,
)
from autosync_transfer.strategies.types import PS, AllReduce, Strategy
from autosync_transfer.strategies.validate import validate, violations
from autosync_transfer.testing import tiny_domain, tiny_graph

DOMAINS: dict[str, Domain] = {
    "2x1": tiny_domain(2, 1),
    "2x2": tiny_domain(2, 2),
    "mixed": tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25]),
    "single": tiny_domain(1, 4),
    "dense4": tiny_domain(4, 1, sparse_embedding=False),
}

NAMES = ["ps", "ps_lb", "partitioned_ps", "all_reduce", "partitioned_ar", "parallax", "ddp"]
PS_FAMILY = ["ps", "ps_lb", "partitioned_ps"]


def pieces(s: Strategy):
    for cfg in s.nodes:
        for i, sync in cfg.items():
            yield cfg.var_name, i, sync


def server_loads(domain: Domain, s: Strategy) -> dict[str, int]:
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for cfg in s.nodes:
        var = domain.model.variable(cfg.var_name)
        if cfg.partition is None:
            assert isinstance(cfg.synchronizer, PS)
            loads[cfg.synchronizer.destination] += var.nbytes
        else:
            row = var.nbytes // var.shape[cfg.partition.axis]
            sizes = cfg.partition.shard_sizes(var.shape[cfg.partition.axis])
            for size, sync in zip(sizes, cfg.partition.synchronizers):
                assert isinstance(sync, PS)
                loads[sync.destination] += size * row
    return loads


# ------------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------------


def test_registry_names() -> None:
    assert builder_names() == NAMES == list(BUILDERS)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("domain_name", list(DOMAINS))
def test_every_builder_validates_with_kind_and_id(name: str, domain_name: str) -> None:
    domain = DOMAINS[domain_name]
    s = build(name, domain)
    assert violations(s, domain) == []
    assert s.kind == name
    assert s.id == f"{name}-{domain.name}"
    assert build(name, domain) == s  # deterministic
    assert [cfg.var_name for cfg in s.nodes] == [v.name for v in domain.model.variables]


def test_unknown_builder_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match="unknown strategy builder 'horovod'") as info:
        build("horovod", DOMAINS["2x1"])
    for name in NAMES:
        assert name in str(info.value)


def test_unknown_option_is_a_config_error() -> None:
    message = "'ps'.*unexpected keyword.*chunk_size.*local_replication"
    with pytest.raises(ConfigError, match=message):
        build("ps", DOMAINS["2x1"], chunk_size=3)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("all_reduce", {"chunk_size": 0}, "chunk_size must be"),
        ("parallax", {"chunk_size": -1}, "chunk_size must be"),
        ("partitioned_ar", {"chunk_size": 1.5}, "chunk_size must be"),
        ("all_reduce", {"compressor": "zip"}, "compressor must be one of"),
        ("ddp", {"powersgd_rank": 0, "compressor": "powersgd"}, "powersgd_rank"),
        ("ddp", {"bucket_cap_mb": 0}, "bucket_cap_mb must be"),
        ("ddp", {"first_bucket_mb": -1.0}, "first_bucket_mb must be"),
        ("partitioned_ps", {"max_shards": 0}, "max_shards must be"),
        ("partitioned_ar", {"max_shards": True}, "max_shards must be"),
    ],
)
def test_bad_option_values(name: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(name, DOMAINS["2x1"], **options)


def test_smallest_divisor() -> None:
    assert [smallest_divisor(n) for n in (0, 1, 2, 3, 4, 9, 15, 49, 97, 1024)] == [
        1, 1, 2, 3, 2, 3, 3, 7, 97, 2,
    ]


# ------------------------------------------------------------------------------------------------
# PS family
# ------------------------------------------------------------------------------------------------


def test_ps_puts_everything_on_the_chief() -> None:
    nodes = tuple(
        Node(name=f"n{i}", address=f"10.0.0.{i + 1}", workers=1, bandwidth_gbps=1.0, chief=(i == 1))
        for i in range(3)
    )
    cluster = Cluster(name="chief-second", nodes=nodes)
    domain = Domain(name="tiny-chief", model=tiny_graph(), cluster=cluster)
    s = build("ps", domain)
    assert {sync.destination for _, _, sync in pieces(s)} == {"n1"}
    validate(s, domain)


@pytest.mark.parametrize("name", PS_FAMILY)
def test_local_replication_only_when_a_node_has_several_workers(name: str) -> None:
    def flags(domain: Domain, **options: object) -> set[bool]:
        s = build(name, domain, **options)
        return {sync.local_replication for _, _, sync in pieces(s) if isinstance(sync, PS)}

    assert flags(DOMAINS["2x2"]) == {False}  # default off
    assert flags(DOMAINS["2x2"], local_replication=True) == {True}
    assert flags(DOMAINS["mixed"], local_replication=True) == {True}
    assert flags(DOMAINS["2x1"], local_replication=True) == {False}  # one worker per node


def test_ps_lb_greedy_in_forward_order() -> None:
    domain = DOMAINS["mixed"]
    s = build("ps_lb", domain)
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for var, cfg in zip(domain.model.variables, s.nodes):
        expected = min(loads, key=loads.__getitem__)  # first node on ties
        assert isinstance(cfg.synchronizer, PS) and cfg.synchronizer.destination == expected
        loads[expected] += var.nbytes
    largest = max(v.nbytes for v in domain.model.variables)
    final = server_loads(domain, s)
    assert final == loads
    assert max(final.values()) - min(final.values()) <= largest


def test_partitioned_ps_shards() -> None:
    domain = DOMAINS["mixed"]  # 3 servers
    s = build("partitioned_ps", domain)
    by_var = s.by_var()
    # embedding 97 x 16: 97 is prime -> capped at #servers = 3 (uneven shards)
    emb = by_var["embedding/table"].partition
    assert emb is not None and (emb.axis, emb.shards) == (0, 3)
    # 16 x 32 kernel: smallest divisor 2
    kernel = by_var["layer0/up/kernel"].partition
    assert kernel is not None and (kernel.axis, kernel.shards) == (0, 2)
    # scalar and (1, 16) gate stay whole
    assert by_var["head/temperature"].partition is None
    assert by_var["head/gate"].partition is None
    for cfg in s.nodes:
        if cfg.partition is not None:
            dests = [s.destination for s in cfg.partition.synchronizers]  # type: ignore[union-attr]
            assert len(set(dests)) == len(dests), "shards of one variable on distinct servers"
    loads = server_loads(domain, s)
    assert max(loads.values()) - min(loads.values()) <= max(
        v.nbytes for v in domain.model.variables
    )


def test_partitioned_ps_shards_go_to_least_loaded_servers() -> None:
    domain = DOMAINS["dense4"]
    s = build("partitioned_ps", domain)
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for var, cfg in zip(domain.model.variables, s.nodes):
        order = sorted(loads, key=loads.__getitem__)
        if cfg.partition is None:
            assert cfg.synchronizer.destination == order[0]  # type: ignore[union-attr]
            loads[order[0]] += var.nbytes
            continue
        sizes = cfg.partition.shard_sizes(var.shape[0])
        row = var.nbytes // var.shape[0]
        for k, (size, sync) in enumerate(zip(sizes, cfg.partition.synchronizers)):
            assert sync.destination == order[k]  # type: ignore[union-attr]
            loads[order[k]] += size * row


def test_partitioned_ps_single_server_and_max_shards() -> None:
    single = build("partitioned_ps", DOMAINS["single"], max_shards=4)
    assert all(cfg.partition is None for cfg in single.nodes)
    assert {sync.destination for _, _, sync in pieces(single)} == {"n0"}
    two = build("partitioned_ps", DOMAINS["2x1"])
    assert two.by_var()["embedding/table"].partition.shards == 2  # type: ignore[union-attr]
    more = build("partitioned_ps", DOMAINS["2x1"], max_shards=5)
    assert more.by_var()["embedding/table"].partition.shards == 5  # type: ignore[union-attr]
    validate(more, DOMAINS["2x1"])


# ------------------------------------------------------------------------------------------------
# all-reduce family
# ------------------------------------------------------------------------------------------------


def test_all_reduce_groups_and_sparse_on_ps() -> None:
    domain = DOMAINS["mixed"]
    s = build("all_reduce", domain, chunk_size=2, compressor="fp16")
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for i, (var, cfg) in enumerate(zip(domain.model.variables, s.nodes)):
        sync = cfg.synchronizer
        if var.sparse:
            assert isinstance(sync, PS) and not sync.local_replication
            expected = min(loads, key=loads.__getitem__)
            assert sync.destination == expected
            loads[expected] += var.nbytes
        else:
            assert isinstance(sync, AllReduce)
            assert (sync.group, sync.compressor) == (i // 2, "fp16")
    default = build("all_reduce", domain)
    assert {s.group for _, _, s in pieces(default) if isinstance(s, AllReduce)} == {0}
    assert {s.compressor for _, _, s in pieces(default) if isinstance(s, AllReduce)} == {"none"}
    psgd = build("all_reduce", domain, compressor="powersgd", powersgd_rank=4)
    assert {
        (s.compressor, s.powersgd_rank) for _, _, s in pieces(psgd) if isinstance(s, AllReduce)
    } == {("powersgd", 4)}


def test_partitioned_ar() -> None:
    domain = DOMAINS["2x1"]
    s = build("partitioned_ar", domain, chunk_size=3)
    counter = 0
    for var, cfg in zip(domain.model.variables, s.nodes):
        if not var.shape or var.shape[0] < 2:
            assert cfg.partition is None
            n = 1
        else:
            assert cfg.partition is not None and cfg.partition.axis == 0
            n = cfg.partition.shards
            assert n == min(smallest_divisor(var.shape[0]), 8)
        for k, (_, sync) in enumerate(cfg.items()):
            if var.sparse:
                assert isinstance(sync, PS)
            else:
                assert isinstance(sync, AllReduce) and sync.group == (counter + k) // 3
        counter += n
    # the prime vocabulary (97) is capped at max_shards
    assert s.by_var()["embedding/table"].partition.shards == 8  # type: ignore[union-attr]
    capped = build("partitioned_ar", domain, max_shards=2)
    assert capped.by_var()["embedding/table"].partition.shards == 2  # type: ignore[union-attr]


def test_parallax() -> None:
    domain = DOMAINS["2x2"]
    s = build("parallax", domain, chunk_size=4)
    for i, (var, cfg) in enumerate(zip(domain.model.variables, s.nodes)):
        sync = cfg.synchronizer
        if var.sparse:
            assert isinstance(sync, PS) and sync.local_replication is False
        else:
            assert isinstance(sync, AllReduce) and sync.group == i // 4
            assert sync.compressor == "none"


# ------------------------------------------------------------------------------------------------
# DDP
# ------------------------------------------------------------------------------------------------


def _buckets(domain: Domain, s: Strategy) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name, _, sync in pieces(s):
        if isinstance(sync, AllReduce):
            out.setdefault(sync.group, []).append(name)
    return out


def _check_ddp(domain: Domain, s: Strategy, first_cap: float, cap: float) -> dict[int, list[str]]:
    nbytes = {v.name: v.nbytes for v in domain.model.variables}
    order = [v.name for v in domain.model.variables if not v.sparse]
    buckets = _buckets(domain, s)
    assert sorted(buckets) == list(range(len(buckets)))
    # reverse order: group ids never increase along the forward order; group 0 holds the last var
    groups = [s.by_var()[n].synchronizer.group for n in order]  # type: ignore[union-attr]
    assert groups == sorted(groups, reverse=True)
    assert groups[-1] == 0
    for g, names in buckets.items():
        size = sum(nbytes[n] for n in names)
        limit = first_cap if g == 0 else cap
        assert size <= limit or len(names) == 1, (g, size, limit)
        # a bucket is closed only when the next tensor (in reverse order) does not fit
        if g + 1 in buckets:
            position = {n: i for i, n in enumerate(order)}
            following = max(buckets[g + 1], key=position.__getitem__)
            assert size + nbytes[following] > limit
    return buckets


def test_ddp_default_buckets_on_a_larger_model() -> None:
    # kernels of 1024 x 2048 fp32 = 8 MiB: several 25 MiB buckets
    graph = tiny_graph("wide", hidden=1024, layers=4, vocab=97)
    domain = Domain(name="wide-2x1", model=graph, cluster=DOMAINS["2x1"].cluster)
    s = build("ddp", domain)
    validate(s, domain)
    buckets = _check_ddp(domain, s, 1 * MIB, 25 * MIB)
    assert len(buckets) >= 3
    assert sum(domain.model.variable(n).nbytes for n in buckets[0]) <= MIB


def test_ddp_oversize_tensors_get_their_own_bucket() -> None:
    graph = tiny_graph("wide", hidden=1024, layers=2, vocab=97)
    domain = Domain(name="wide-2x1", model=graph, cluster=DOMAINS["2x1"].cluster)
    s = ddp(domain, bucket_cap_mb=4, first_bucket_mb=0.5)
    buckets = _check_ddp(domain, s, 0.5 * MIB, 4 * MIB)
    for names in buckets.values():
        if any(domain.model.variable(n).nbytes > 4 * MIB for n in names):
            assert len(names) == 1


def test_ddp_exact_buckets_hand_computed() -> None:
    domain = DOMAINS["2x1"]  # the last variables: gate (16 floats = 64 B), scalar (4 B), ...
    cap_mb = 200 / MIB  # 200 bytes
    s = ddp(domain, bucket_cap_mb=cap_mb, first_bucket_mb=cap_mb)
    nbytes = {v.name: v.nbytes for v in domain.model.variables}
    expected: dict[str, int] = {}
    group, filled = 0, 0
    for v in reversed(domain.model.variables):
        if v.sparse:
            continue
        if filled and filled + v.nbytes > 200:
            group, filled = group + 1, 0
        expected[v.name] = group
        filled += v.nbytes
    got = {n: sync.group for n, _, sync in pieces(s) if isinstance(sync, AllReduce)}
    assert got == expected
    assert got["head/temperature"] == got["head/gate"] == 0  # 4 + 64 bytes share bucket 0
    assert nbytes["layer1/down/bias"] == 64
    sparse = s.by_var()["embedding/table"].synchronizer
    assert isinstance(sparse, PS)


# ------------------------------------------------------------------------------------------------
# catalog domains (built by the model zoo)
# ------------------------------------------------------------------------------------------------


def test_every_builder_validates_on_every_catalog_domain() -> None:
    catalog = pytest.importorskip("autosync_transfer.domains.catalog")
    names = catalog.domain_names()
    assert names
    for domain_name in names:
        domain = catalog.get_domain(domain_name)
        for name in NAMES:
            s = build(name, domain)
            assert violations(s, domain) == [], (domain_name, name)
        for s in (build("ddp", domain),):
            _check_ddp(domain, s, 1 * MIB, 25 * MIB)
