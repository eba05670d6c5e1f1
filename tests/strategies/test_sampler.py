"""The strategy sampler: validity, determinism, knowledge constraints, heuristics, configuration."""

from __future__ import annotations

import gc
import itertools
import time
from collections import Counter

import numpy as np
import pytest

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.strategies.sampler import (
    MAX_INT32,
    PRESETS,
    SamplerConfig,
    StrategySampler,
    preset,
    preset_names,
)
from autosync_transfer.strategies.sampler.kernels import balance as _balance
from autosync_transfer.strategies.sampler.kernels import ordered_fill as _ordered_fill
from autosync_transfer.strategies.types import PS, AllReduce, Strategy
from autosync_transfer.strategies.validate import validate, violations
from autosync_transfer.testing import tiny_domain, tiny_strategies

DOMAINS: dict[str, Domain] = {
    "2x1": tiny_domain(2, 1),
    "2x2": tiny_domain(2, 2),
    "mixed": tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25]),
    "single": tiny_domain(1, 4),
    "dense4": tiny_domain(4, 1, sparse_embedding=False),
}

CONFIGS: dict[str, SamplerConfig] = {
    **{f"preset:{name}": preset(name) for name in PRESETS},
    **{
        f"{lb}/{ms}": SamplerConfig(
            ps_load_balancer=lb,  # type: ignore[arg-type]
            merge_scheme=ms,  # type: ignore[arg-type]
            compressors=("none", "fp16", "fp16_ef", "powersgd"),
            same_synchronizer_for_parts=(lb == "greedy"),
        )
        for lb, ms in itertools.product(
            ["random", "greedy", "sorted_greedy", "randomized_greedy", "sorted_randomized_greedy"],
            ["random", "by_chunk", "randomized_greedy", "ordered_balanced"],
        )
    },
    "by_size": SamplerConfig(maybe_partition_bounds=(500, 5000), maybe_partition_by_size=True),
    "num_nodes": SamplerConfig(num_partition_bounds=("num_nodes", "num_nodes")),
    "chunk3": SamplerConfig(merge_scheme="by_chunk", chunk_size=3),
    "mixture/all": SamplerConfig(knob_prior="mixture", compressors=("none", "fp16", "fp16_ef", "powersgd"),
                                 maybe_partition_bounds=(500, 5000), maybe_partition_by_size=True,
                                 same_synchronizer_for_parts=True),
}


def pieces(s: Strategy):
    """(var name, shard index or None, synchronizer) of every synchronized piece."""
    for cfg in s.nodes:
        for i, sync in cfg.items():
            yield cfg.var_name, i, sync


def ar_groups(s: Strategy) -> list[int]:
    return [sync.group for _, _, sync in pieces(s) if isinstance(sync, AllReduce)]


# ------------------------------------------------------------------------------------------------
# validity and determinism
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_name", list(CONFIGS))
@pytest.mark.parametrize("domain_name", list(DOMAINS))
def test_every_sample_validates(domain_name: str, config_name: str) -> None:
    domain = DOMAINS[domain_name]
    strategies = StrategySampler(domain, CONFIGS[config_name], seed=3).sample_n(30)
    assert len(strategies) == 30
    for s in strategies:
        assert violations(s, domain) == []
        assert s.kind == "sampled"
    assert len({s.id for s in strategies}) == 30


def test_objects_built_without_validation_equal_validated_ones() -> None:
    domain = DOMAINS["mixed"]
    for s in StrategySampler(domain, preset("compressed"), seed=5).sample_n(20):
        again = Strategy.model_validate(s.model_dump())
        assert again == s
        assert Strategy.from_json(s.to_json()) == s
        # the fields marked as set are those a normal construction would mark
        for obj in [s, *s.nodes, *(c.partition for c in s.nodes if c.partition is not None)]:
            rebuilt = type(obj)(**{f: getattr(obj, f) for f in obj.model_fields_set})
            assert rebuilt == obj
            assert rebuilt.model_fields_set == obj.model_fields_set
        assert hash(s.fingerprint) == hash(again.fingerprint)


def test_same_seed_same_strategies() -> None:
    domain = DOMAINS["mixed"]
    a = StrategySampler(domain, seed=7).sample_n(40)
    b = StrategySampler(domain, seed=7).sample_n(40)
    assert [s.id for s in a] == [s.id for s in b]
    assert a == b


def test_kth_strategy_depends_only_on_seed_and_k() -> None:
    domain = DOMAINS["2x2"]
    batch = StrategySampler(domain, seed=11).sample_n(5)
    one_by_one = StrategySampler(domain, seed=11)
    singles = [one_by_one.sample() for _ in range(3)] + one_by_one.sample_n(2)
    assert batch == singles
    assert one_by_one.num_sampled == 5


def test_different_seeds_differ() -> None:
    domain = DOMAINS["2x1"]
    a = StrategySampler(domain, seed=1).sample_n(10)
    b = StrategySampler(domain, seed=2).sample_n(10)
    assert {s.fingerprint for s in a}.isdisjoint({s.fingerprint for s in b})
    assert {s.id for s in a}.isdisjoint({s.id for s in b})


def test_ids_carry_seed_counter_and_content_hash() -> None:
    domain = DOMAINS["2x1"]
    strategies = StrategySampler(domain, seed=4).sample_n(3)
    for k, s in enumerate(strategies):
        seed_part, counter, digest = s.id.split("-")
        assert (seed_part, counter) == ("s4", str(k))
        assert len(digest) == 8
    # the content hash is a function of the content
    a = StrategySampler(domain, preset("ps_only", maybe_partition=(False,),
                                       ps_load_balancer="greedy"), seed=0).sample_n(3)
    assert len({s.id.split("-")[2] for s in a}) == 1


def test_tiny_strategies_helper() -> None:
    domain = DOMAINS["2x2"]
    strategies = tiny_strategies(domain, 4, seed=9)
    assert strategies == StrategySampler(domain, seed=9).sample_n(4)
    for s in strategies:
        validate(s, domain)


def test_sample_n_edge_cases_and_bad_arguments() -> None:
    domain = DOMAINS["2x1"]
    sampler = StrategySampler(domain)
    assert sampler.sample_n(0) == []
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="n must be"):
            sampler.sample_n(bad)  # type: ignore[arg-type]
    for bad_seed in (-3, 0.5, None):
        with pytest.raises(ConfigError, match="seed"):
            StrategySampler(domain, seed=bad_seed)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config must be"):
        StrategySampler(domain, {"compressors": ("none",)})  # type: ignore[arg-type]


def test_constructor_only_stores() -> None:
    sampler = StrategySampler(DOMAINS["2x1"], seed=0)
    assert sampler.num_sampled == 0 and sampler._tab is None


@pytest.mark.parametrize("enabled", [True, False])
def test_garbage_collector_state_is_restored(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        StrategySampler(DOMAINS["2x1"], seed=0).sample_n(3)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


# ------------------------------------------------------------------------------------------------
# knowledge constraints
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_name", ["preset:default", "preset:ar_only", "random/random"])
@pytest.mark.parametrize("domain_name", ["2x1", "mixed", "single"])
def test_knowledge_constraints(domain_name: str, config_name: str) -> None:
    domain = DOMAINS[domain_name]
    config = CONFIGS[config_name]
    variables = domain.model.by_name()
    plo, phi = config.resolved_bounds("num_partition_bounds", domain.cluster.num_nodes)
    for s in StrategySampler(domain, config, seed=13).sample_n(60):
        for cfg in s.nodes:
            var = variables[cfg.var_name]
            if cfg.partition is not None:
                p = cfg.partition
                assert var.shape, "scalars are never partitioned"
                assert var.shape[p.axis] > 1, "axes of length 1 are never partitioned"
                assert max(2, plo) <= p.shards <= min(var.shape[p.axis], phi)
                if var.sparse:
                    assert p.axis == 0
            for _, sync in cfg.items():
                if var.sparse:
                    assert isinstance(sync, PS), "a sparse variable is never all-reduced"
                if isinstance(sync, PS):
                    assert sync.sync is True and sync.staleness == 0
                    assert sync.destination in domain.cluster.node_names
                else:
                    assert sync.compressor in config.compressors


def test_scalar_and_length_one_axis() -> None:
    domain = DOMAINS["2x1"]
    config = SamplerConfig(maybe_partition=(True,))
    for s in StrategySampler(domain, config, seed=0).sample_n(30):
        by_var = s.by_var()
        assert by_var["head/temperature"].partition is None
        gate = by_var["head/gate"].partition
        assert gate is not None and gate.axis == 1  # shape (1, 16): only axis 1 splits


def test_local_replication_only_when_a_node_has_several_workers() -> None:
    def replication_values(domain: Domain) -> set[bool]:
        out = set()
        for s in StrategySampler(domain, seed=2).sample_n(40):
            out |= {sync.local_replication for _, _, sync in pieces(s) if isinstance(sync, PS)}
        return out

    assert replication_values(DOMAINS["2x1"]) == {False}
    assert replication_values(tiny_domain(4, 1, [1, 2, 3, 4])) == {False}
    assert replication_values(DOMAINS["2x2"]) == {True, False}
    assert replication_values(DOMAINS["mixed"]) == {True, False}
    only_true = SamplerConfig(local_replication=(True,))
    for s in StrategySampler(DOMAINS["2x1"], only_true, seed=0).sample_n(10):
        assert not any(sync.local_replication for _, _, sync in pieces(s) if isinstance(sync, PS))


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ((3, 5), (3, 5)),
        ((1, 4), (2, 4)),  # the lower bound is at least 2
        (("num_nodes", 40), (3, 40)),
        ((2, "num_nodes"), (2, 3)),
        (("num_nodes", "num_nodes"), (3, 3)),
    ],
)
def test_shard_counts_within_bounds(bounds: tuple, expected: tuple[int, int]) -> None:
    domain = DOMAINS["mixed"]  # 3 nodes
    config = SamplerConfig(num_partition_bounds=bounds, maybe_partition=(True,))
    assert config.resolved_bounds("num_partition_bounds", 3) == (
        3 if bounds[0] == "num_nodes" else bounds[0],
        3 if bounds[1] == "num_nodes" else bounds[1],
    )
    seen = Counter()
    variables = domain.model.by_name()
    for s in StrategySampler(domain, config, seed=1).sample_n(60):
        for cfg in s.nodes:
            if cfg.partition is not None:
                dim = variables[cfg.var_name].shape[cfg.partition.axis]
                assert expected[0] <= cfg.partition.shards <= min(dim, expected[1])
                seen[cfg.partition.shards] += 1
    assert min(seen) == expected[0]
    if expected[1] - expected[0] < 5:
        assert set(seen) == set(range(expected[0], expected[1] + 1))


def test_empty_shard_range_means_no_partition() -> None:
    # tiny widths: 16 and 32; with at least 20 shards only axes of length >= 20 can be split
    domain = DOMAINS["2x1"]
    config = SamplerConfig(num_partition_bounds=(20, 40), maybe_partition=(True,))
    variables = domain.model.by_name()
    for s in StrategySampler(domain, config, seed=0).sample_n(30):
        for cfg in s.nodes:
            var = variables[cfg.var_name]
            longest = max(var.shape, default=1)
            if longest < 20:
                assert cfg.partition is None, cfg.var_name
            else:
                assert cfg.partition is not None and var.shape[cfg.partition.axis] >= 20


def test_partitionable_axes_filter() -> None:
    domain = DOMAINS["2x1"]
    config = SamplerConfig(partitionable_axes=(1,), maybe_partition=(True,))
    for s in StrategySampler(domain, config, seed=0).sample_n(20):
        for cfg in s.nodes:
            var = domain.model.variable(cfg.var_name)
            if cfg.partition is not None:
                assert cfg.partition.axis == 1
            # the sparse table may only split along axis 0, which the filter excludes
            if var.sparse or len(var.shape) < 2:
                assert cfg.partition is None


def test_fixed_partition_choices() -> None:
    domain = DOMAINS["2x1"]
    never = StrategySampler(domain, SamplerConfig(maybe_partition=(False,)), seed=0).sample_n(20)
    assert all(cfg.partition is None for s in never for cfg in s.nodes)
    always = StrategySampler(domain, SamplerConfig(maybe_partition=(True,)), seed=0).sample_n(20)
    for s in always:
        for cfg in s.nodes:
            var = domain.model.variable(cfg.var_name)
            assert (cfg.partition is not None) == bool(var.partitionable_axes())


def test_partition_byte_bounds() -> None:
    domain = DOMAINS["2x1"]
    lb, ub = 200, 3000
    config = SamplerConfig(maybe_partition_bounds=(lb, ub))
    counts = Counter()
    for s in StrategySampler(domain, config, seed=0).sample_n(60):
        for cfg in s.nodes:
            var = domain.model.variable(cfg.var_name)
            if not var.partitionable_axes():
                continue
            if var.nbytes <= lb:
                assert cfg.partition is None
            elif var.nbytes >= ub:
                assert cfg.partition is not None
            else:
                counts[cfg.partition is not None] += 1
    assert counts[True] > 0 and counts[False] > 0  # in between: a coin


def test_partition_probability_by_size() -> None:
    domain = tiny_domain(2, 1, hidden=32, vocab=97)
    var = domain.model.variable("layer0/up/kernel")  # 32 x 64 x 4 bytes = 8192
    config = SamplerConfig(maybe_partition_bounds=(0, 4 * var.nbytes), maybe_partition_by_size=True)
    hits = sum(
        s.by_var()[var.name].partition is not None
        for s in StrategySampler(domain, config, seed=0).sample_n(400)
    )
    assert 0.15 < hits / 400 < 0.35  # expected 1/4


def test_same_synchronizer_for_parts() -> None:
    domain = DOMAINS["2x1"]
    config = SamplerConfig(same_synchronizer_for_parts=True, maybe_partition=(True,))
    mixed_seen = False
    for s in StrategySampler(domain, config, seed=0).sample_n(30):
        for cfg in s.nodes:
            if cfg.partition is not None:
                assert len({sync.kind for sync in cfg.partition.synchronizers}) == 1
    for s in StrategySampler(domain, SamplerConfig(maybe_partition=(True,)), seed=0).sample_n(30):
        for cfg in s.nodes:
            if cfg.partition is not None:
                mixed_seen |= len({sync.kind for sync in cfg.partition.synchronizers}) == 2
    assert mixed_seen


def test_ps_only_and_ar_only() -> None:
    domain = DOMAINS["mixed"]
    for s in StrategySampler(domain, "ps_only", seed=0).sample_n(20):
        assert all(isinstance(sync, PS) for _, _, sync in pieces(s))
    for s in StrategySampler(domain, "ar_only", seed=0).sample_n(20):
        for name, _, sync in pieces(s):
            assert isinstance(sync, PS) == domain.model.variable(name).sparse


def test_powersgd_ranks_come_from_the_config() -> None:
    domain = DOMAINS["2x1"]
    config = SamplerConfig(compressors=("powersgd",), powersgd_ranks=(2, 8))
    ranks = Counter()
    for s in StrategySampler(domain, config, seed=0).sample_n(20):
        for _, _, sync in pieces(s):
            if isinstance(sync, AllReduce):
                assert sync.compressor == "powersgd"
                ranks[sync.powersgd_rank] += 1
    assert set(ranks) == {2, 8}
    for s in StrategySampler(domain, SamplerConfig(compressors=("fp16",)), seed=0).sample_n(5):
        assert all(
            sync.powersgd_rank == 1 for _, _, sync in pieces(s) if isinstance(sync, AllReduce)
        )


# ------------------------------------------------------------------------------------------------
# AR grouping
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["random", "by_chunk", "randomized_greedy", "ordered_balanced"])
def test_groups_are_zero_based_and_numbered_by_first_appearance(scheme: str) -> None:
    domain = DOMAINS["dense4"]
    config = SamplerConfig(merge_scheme=scheme, num_group_bounds=(2, 6))  # type: ignore[arg-type]
    counts = Counter()
    for s in StrategySampler(domain, config, seed=0).sample_n(40):
        groups = ar_groups(s)
        if not groups:
            continue
        first_seen = list(dict.fromkeys(groups))
        assert first_seen == list(range(len(first_seen)))
        assert len(first_seen) <= 6
        counts[len(first_seen)] += 1
    assert len(counts) > 1


def test_random_merge_uses_exactly_the_drawn_number_of_groups() -> None:
    domain = DOMAINS["mixed"]  # 3 nodes
    config = SamplerConfig(merge_scheme="random", num_group_bounds=("num_nodes", "num_nodes"))
    for s in StrategySampler(domain, config, seed=0).sample_n(30):
        groups = ar_groups(s)
        assert len(set(groups)) == min(3, len(groups))


def test_ordered_balanced_groups_are_contiguous() -> None:
    domain = DOMAINS["dense4"]
    for s in StrategySampler(domain, SamplerConfig(num_group_bounds=(3, 3)), seed=0).sample_n(30):
        groups = ar_groups(s)
        assert groups == sorted(groups)
        assert len(set(groups)) <= 3


def test_by_chunk_with_a_fixed_chunk_size() -> None:
    domain = DOMAINS["dense4"]
    config = SamplerConfig(merge_scheme="by_chunk", chunk_size=3)
    for s in StrategySampler(domain, config, seed=0).sample_n(20):
        groups = ar_groups(s)
        assert groups == [i // 3 for i in range(len(groups))]


def test_ordered_fill_hand_computed() -> None:
    # total 40, 4 groups -> target 10 bytes per group
    sizes = np.array([9, 9, 9, 1, 1, 1, 10], np.int64)
    (groups,) = _ordered_fill([sizes], [4])
    # g0: 9, 9 (18 >= 10: close); g1: 9, 1 (10: close); g2: 1, 1, 10; group 3 stays empty
    assert groups.tolist() == [0, 0, 1, 1, 2, 2, 2]
    # one huge item first: it fills group 0 alone; never more groups than asked
    (groups,) = _ordered_fill([np.array([100, 1, 1, 1], np.int64)], [2])
    assert groups.tolist() == [0, 1, 1, 1]
    (groups,) = _ordered_fill([np.array([1, 1, 1, 1, 1], np.int64)], [5])
    assert groups.tolist() == [0, 1, 2, 3, 4]


def test_ordered_fill_batches_independently() -> None:
    a, b = np.array([5, 5, 5, 5], np.int64), np.array([1, 2, 3, 4, 5, 6, 7], np.int64)
    together = _ordered_fill([a, b], [2, 3])
    assert [g.tolist() for g in together] == [
        _ordered_fill([a], [2])[0].tolist(),
        _ordered_fill([b], [3])[0].tolist(),
    ]


# ------------------------------------------------------------------------------------------------
# PS placement
# ------------------------------------------------------------------------------------------------


def test_greedy_balance_hand_computed() -> None:
    shares = np.full((1, 2), 0.5)
    (assigned,) = _balance([np.array([5.0, 3.0, 3.0, 1.0])], shares, None, 0.1)
    # 5 -> bin0; 3 -> bin1 (0 < 5); 3 -> bin1 (3 < 5); 1 -> bin0 (5 < 6)
    assert assigned.tolist() == [0, 1, 1, 0]
    # a bin with share 0 is unused
    shares3 = np.array([[0.5, 0.0, 0.5]])
    (assigned,) = _balance([np.array([1.0, 1.0, 1.0])], shares3, None, 0.1)
    assert 1 not in assigned.tolist()


def test_randomized_balance_hand_computed() -> None:
    shares = np.full((1, 2), 0.5)
    sizes = np.array([1.0, 1.0])
    # item 0: both gaps 0.5 -> p = (1/2, 1/2); item 1 (after bin 0 got 1 byte): gaps (0, 1),
    # logits (0, 1) / (0.1 * 2) = (0, 5) -> p(bin 1) = e^5 / (1 + e^5) = 0.9933
    p1 = np.exp(5) / (1 + np.exp(5))
    cases = [((0.49, 0.5), [0, 1]), ((0.51, 0.5), [1, 0]), ((0.2, 1 - p1 - 1e-6), [0, 0])]
    for (u0, u1), expected in cases:
        (assigned,) = _balance([sizes], shares, [np.array([u0, u1])], 0.1)
        assert assigned.tolist() == expected
    # a very low temperature is the greedy choice
    sizes = np.array([5.0, 3.0, 3.0, 1.0])
    (assigned,) = _balance([sizes], shares, [np.full(4, 0.3)], 1e-9)
    assert assigned.tolist() == [0, 1, 1, 0]


def _placements(domain: Domain, balancer: str, n: int, seed: int = 0) -> list[tuple[str, ...]]:
    config = SamplerConfig(
        ps_load_balancer=balancer,  # type: ignore[arg-type]
        synchronizer_types=("ps",),
        maybe_partition=(False,),
    )
    return [
        tuple(sync.destination for _, _, sync in pieces(s))  # type: ignore[union-attr]
        for s in StrategySampler(domain, config, seed=seed).sample_n(n)
    ]


def _loads(domain: Domain, placement: tuple[str, ...]) -> dict[str, int]:
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for var, dest in zip(domain.model.variables, placement):
        loads[dest] += var.nbytes
    return loads


@pytest.mark.parametrize("balancer", ["greedy", "sorted_greedy"])
def test_greedy_placement_is_deterministic_and_balanced(balancer: str) -> None:
    domain = DOMAINS["dense4"]
    placements = set(_placements(domain, balancer, 5, seed=0)) | set(
        _placements(domain, balancer, 5, seed=99)
    )
    assert len(placements) == 1
    loads = _loads(domain, placements.pop())
    largest = max(v.nbytes for v in domain.model.variables)
    assert max(loads.values()) - min(loads.values()) <= largest


def test_sorted_greedy_is_longest_processing_time_first() -> None:
    domain = DOMAINS["dense4"]
    (placement,) = set(_placements(domain, "sorted_greedy", 2))
    order = sorted(domain.model.variables, key=lambda v: -v.nbytes)  # stable: forward order
    dest = dict(zip((v.name for v in domain.model.variables), placement))
    loads = dict.fromkeys(domain.cluster.node_names, 0)
    for v in order:
        expected = min(loads, key=loads.__getitem__)
        assert dest[v.name] == expected
        loads[expected] += v.nbytes


@pytest.mark.parametrize("balancer", ["randomized_greedy", "sorted_randomized_greedy"])
def test_randomized_placement_is_random_and_bandwidth_aware(balancer: str) -> None:
    domain = tiny_domain(2, 1, [1.0, 0.25], sparse_embedding=False, layers=4)
    placements = _placements(domain, balancer, 200, seed=0)
    assert len(set(placements)) > 20, "the randomized balancers must really sample"
    share_fast = np.mean([_loads(domain, p)["n0"] / domain.model.nbytes for p in placements])
    assert 0.65 < share_fast < 0.95  # target 0.8 = 1 / (1 + 0.25)


def test_random_placement_uses_every_node() -> None:
    domain = DOMAINS["dense4"]
    used = Counter(d for p in _placements(domain, "random", 50) for d in p)
    assert set(used) == set(domain.cluster.node_names)


def test_single_node_places_everything_on_it() -> None:
    domain = DOMAINS["single"]
    for s in StrategySampler(domain, seed=0).sample_n(10):
        assert {sync.destination for _, _, sync in pieces(s) if isinstance(sync, PS)} <= {"n0"}


# ------------------------------------------------------------------------------------------------
# configuration and presets
# ------------------------------------------------------------------------------------------------


def test_defaults_are_the_product_preset() -> None:
    c = SamplerConfig()
    assert c.synchronizer_types == ("ps", "ar")
    assert c.compressors == ("none", "fp16")
    assert c.local_replication == (True, False)
    assert c.ps_load_balancer == "sorted_randomized_greedy"
    assert c.merge_scheme == "ordered_balanced"
    assert c.num_group_bounds == (1, 20)
    assert c.num_partition_bounds == (2, 40)
    assert c.maybe_partition_bounds == (0, MAX_INT32)
    assert preset("default") == c == preset("product")


def test_presets() -> None:
    assert {"default", "product", "ps_only", "ar_only"} <= set(preset_names())
    assert preset("ps_only").synchronizer_types == ("ps",)
    assert preset("ar_only").synchronizer_types == ("ar",)
    assert preset("autosync_default").ps_load_balancer == "random"
    assert preset("ps_only", compressors=("fp16",)).compressors == ("fp16",)
    with pytest.raises(UnknownNameError, match="unknown sampler preset 'nope'.*ps_only"):
        preset("nope")
    with pytest.raises(UnknownNameError, match="ar_only"):
        StrategySampler(DOMAINS["2x1"], "nope")


def test_config_is_frozen() -> None:
    c = SamplerConfig()
    with pytest.raises(ValueError):
        c.compressors = ("none",)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("synchronizer_types", ()),
        ("synchronizer_types", ("ps", "ps")),
        ("synchronizer_types", ("nccl",)),
        ("compressors", ("zip",)),
        ("compressors", ()),
        ("powersgd_ranks", (0,)),
        ("powersgd_ranks", (65,)),
        ("local_replication", ()),
        ("maybe_partition", ()),
        ("partitionable_axes", (-1,)),
        ("partitionable_axes", (0, 0)),
        ("ps_load_balancer", "best"),
        ("merge_scheme", "by_size"),
        ("balance_temperature", 0.0),
        ("balance_temperature", float("nan")),
        ("chunk_size", 0),
        ("num_group_bounds", (0, 5)),
        ("num_group_bounds", (6, 5)),
        ("num_group_bounds", ("nodes", 5)),
        ("num_group_bounds", (True, 5)),
        ("num_partition_bounds", (2, 1)),
        ("num_partition_bounds", (1, 1)),
        ("num_partition_bounds", (2,)),
        ("maybe_partition_bounds", (10, 5)),
        ("maybe_partition_bounds", (-1, 5)),
        ("same_synchronizer_for_parts", "maybe"),
        ("unknown_field", 1),
    ],
)
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SamplerConfig(**{field: value})


def test_bound_messages_state_the_rule() -> None:
    with pytest.raises(ValueError, match=r"lower <= upper, got \(6, 5\)"):
        SamplerConfig(num_group_bounds=(6, 5))
    with pytest.raises(ValueError, match="at least 2 shards"):
        SamplerConfig(num_partition_bounds=(1, 1))


# ------------------------------------------------------------------------------------------------
# catalog domains (built by the model zoo)
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bert_large_2000_candidates_validate_and_reproduce() -> None:
    catalog = pytest.importorskip("autosync_transfer.domains.catalog")
    domain = catalog.get_domain("bert-large-B")
    start = time.perf_counter()
    strategies = StrategySampler(domain, seed=1).sample_n(2000)
    elapsed = time.perf_counter() - start
    assert len({s.id for s in strategies}) == 2000
    for s in strategies:
        validate(s, domain)
    again = StrategySampler(domain, seed=1).sample_n(2000)
    assert [s.id for s in again] == [s.id for s in strategies]
    assert again[::97] == strategies[::97]
    assert elapsed < 60, f"sampling 2000 strategies took {elapsed:.1f} s"


# -- columnar batches ----------------------------------------------------------------------------


def _synchronizers(strategy: Strategy) -> list[PS | AllReduce]:
    out: list[PS | AllReduce] = []
    for c in strategy.nodes:
        if c.partition is None:
            assert c.synchronizer is not None
            out.append(c.synchronizer)
        else:
            out.extend(c.partition.synchronizers)
    return out


@pytest.mark.parametrize("name", ["2x2", "mixed", "single"])
@pytest.mark.parametrize("config", ["preset:dataset", "preset:default", "random/random"])
def test_sample_batch_holds_what_sample_n_returns(name: str, config: str) -> None:
    domain, cfg = DOMAINS[name], CONFIGS[config]
    objects = StrategySampler(domain, cfg, seed=7).sample_n(45)
    sampler = StrategySampler(domain, cfg, seed=7)
    first, rest = sampler.sample_batch(5), sampler.sample_batch(40)
    assert sampler.num_sampled == 45 and (len(first), len(rest)) == (5, 40)
    built = list(first) + list(rest)
    assert [s.id for s in built] == [s.id for s in objects[:45]]
    assert all(a == b for a, b in zip(built, objects))
    assert first.ids + rest.ids == [s.id for s in built]
    for s in built:
        validate(s, domain)  # raises on an invalid strategy
    # arrays: one row per strategy over the variables, one code per piece
    names = [v.name for v in domain.model.variables]
    cols = rest.synchronizer_columns()
    for i, s in enumerate(list(rest)):
        by_name = {c.var_name: c for c in s.nodes}
        for v, name_ in enumerate(names):
            c = by_name[name_]
            assert bool(rest.partitioned[i, v]) == (c.partition is not None)
            assert int(rest.pieces[i, v]) == (1 if c.partition is None else c.partition.shards)
            if c.partition is not None:
                assert int(rest.axis[i, v]) == c.partition.axis
        a, b = int(rest.offsets[i]), int(rest.offsets[i + 1])
        for j, sync in zip(range(a, b), _synchronizers(s)):
            if isinstance(sync, PS):
                assert not cols["is_ar"][j] and cols["group"][j] == -1
                assert domain.cluster.node_names[cols["node"][j]] == sync.destination
                assert bool(cols["replication"][j]) == sync.local_replication
            else:
                assert cols["is_ar"][j] and cols["node"][j] == -1
                assert cols["group"][j] == sync.group
                assert ("none", "fp16", "fp16_ef", "powersgd")[cols["compressor"][j]] == \
                    sync.compressor
                assert cols["powersgd_rank"][j] == (
                    sync.powersgd_rank if sync.compressor == "powersgd" else 0)


def test_sampled_batch_indexing_and_slices() -> None:
    domain = DOMAINS["mixed"]
    batch = StrategySampler(domain, preset("dataset"), seed=3).sample_batch(12)
    assert batch[3] is batch[3]  # built once, then kept
    assert batch[-1].id == batch.ids[11]
    part = batch[4:9]
    assert len(part) == 5 and part.ids == batch.ids[4:9]
    assert [s.id for s in part] == batch.ids[4:9] and part[0] == batch[4]
    assert [s.id for s in batch[::4]] == batch.ids[::4]
    assert len(batch[9:4]) == 0
    with pytest.raises(IndexError):
        batch[12]
    with pytest.raises(TypeError):
        batch["3"]  # type: ignore[index]
    assert len(StrategySampler(domain, seed=0).sample_batch(0)) == 0
    with pytest.raises(ConfigError, match="n must be a non-negative integer"):
        StrategySampler(domain, seed=0).sample_batch(-1)


# ------------------------------------------------------------------------------------------------
# knob priors
# ------------------------------------------------------------------------------------------------


def test_the_uniform_prior_still_samples_the_shipped_strategies() -> None:
    """The shipped dataset's sampled strategies are the sampler's, seed 0, in order: a
    collection that resumes skips exactly what it measured."""
    from autosync_transfer.domains.catalog import get_domain

    got = [s.id for s in StrategySampler(get_domain("ncf-C"), "dataset", seed=0).sample_n(3)]
    assert got[:2] == ["s0-0-5217dcf0", "s0-1-6496cd17"]


def test_the_mixture_prior_reaches_the_corners_of_the_space() -> None:
    """Uniform choices make every strategy of a 200-variable model about half PS; per-strategy
    knobs give strategies that are almost all PS, almost all all-reduce, or compressed
    throughout, still valid and deterministic for a seed."""
    import numpy as np

    from autosync_transfer.domains.catalog import get_domain

    d = get_domain("bert-12l-B")

    def shares(name: str) -> tuple[np.ndarray, np.ndarray]:
        ps, fp16 = [], []
        for s in StrategySampler(d, name, seed=5).sample_n(200):
            syncs = [sync for _, _, sync in pieces(s)]
            ar = [x for x in syncs if isinstance(x, AllReduce)]
            ps.append(1 - len(ar) / len(syncs))
            fp16.append(sum(x.compressor == "fp16" for x in ar) / max(1, len(ar)))
        return np.array(ps), np.array(fp16)

    ps_u, fp16_u = shares("dataset")
    ps_m, fp16_m = shares("mixture")
    assert 0.35 < ps_u.min() and ps_u.max() < 0.65  # uniform: all alike
    assert (ps_m < 0.1).sum() >= 10 and (ps_m > 0.9).sum() >= 10
    assert (fp16_m > 0.9).sum() >= 10 and (fp16_m < 0.1).sum() >= 10
    assert 0.3 < fp16_u.min() and fp16_u.max() < 0.7
    first = [s.id for s in StrategySampler(d, "mixture", seed=5).sample_n(5)]
    assert first == [s.id for s in StrategySampler(d, "mixture", seed=5).sample_n(5)]
    for s in StrategySampler(d, "mixture", seed=6).sample_n(20):
        assert violations(s, d) == []


def test_strategy_batch_is_the_typed_read_only_form_of_a_sampled_batch() -> None:
    import dataclasses
    import gc

    from autosync_transfer.strategies.sampler import StrategyBatch, SynchronizerTable

    domain = DOMAINS["mixed"]
    batch = StrategySampler(domain, preset("dataset"), seed=3).sample_batch(10)
    arrays = batch.arrays
    assert isinstance(arrays, StrategyBatch) and isinstance(arrays.synchronizers, SynchronizerTable)
    assert arrays.domain is domain and len(arrays) == 10
    nv = len(domain.model.variables)
    assert arrays.partitioned.shape == arrays.axis.shape == arrays.pieces.shape == (10, nv)
    assert arrays.offsets.shape == (11,) and arrays.codes.shape == (int(arrays.offsets[-1]),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        arrays.codes = arrays.codes  # type: ignore[misc]
    with pytest.raises(ValueError):
        arrays.codes[0] = 0
    part = batch[2:6].arrays
    np.testing.assert_array_equal(part.codes, arrays.codes[arrays.offsets[2]: arrays.offsets[6]])
    cols = arrays.synchronizer_columns()
    assert list(cols) == ["is_ar", "node", "replication", "group", "compressor", "powersgd_rank"]
    for k, v in cols.items():
        np.testing.assert_array_equal(v, getattr(arrays.synchronizers, k)[arrays.codes])
    # building leaves the collector as it was: enabled, nothing frozen
    assert gc.isenabled() and gc.get_freeze_count() == 0
    StrategySampler(domain, preset("dataset"), seed=3).sample_n(600)
    assert gc.isenabled() and gc.get_freeze_count() == 0
