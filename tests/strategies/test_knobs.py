"""The fixed-length knob encoding of the strategy space."""

from __future__ import annotations

import random

import pytest

from autosync_transfer.domains.catalog import get_domain as catalog_domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.knobs import KNOBS, decode
from autosync_transfer.strategies.types import PS, AllReduce
from autosync_transfer.strategies.validate import validate


def _random_params(rng: random.Random) -> dict:
    return {k.name: rng.choice(k.choices) if k.categorical else rng.randint(k.low, k.high) for k in KNOBS}


@pytest.mark.parametrize("name", ["bert-3l-A", "ncf-B", "vgg16-s-C"])
def test_every_assignment_decodes_to_a_valid_strategy(name: str) -> None:
    d = catalog_domain(name)
    rng = random.Random(0)
    for _ in range(40):
        params = _random_params(rng)
        s = decode(params, d)
        validate(s, d)
        assert decode(params, d) == s  # deterministic


def test_all_reduce_everything_in_one_group() -> None:
    d = catalog_domain("bert-3l-A")
    params = {"large_bytes_log2": 26, "large_sync": "ar", "small_sync": "ar", "large_shards": 1,
              "sparse_shards": 1, "ar_groups": 1, "compressor": "fp16", "powersgd_rank": 1,
              "ps_placement": "bytes", "local_replication": False}
    s = decode(params, d)
    by = d.model.by_name()
    for n in s.nodes:
        assert n.partition is None
        if by[n.var_name].sparse:
            assert isinstance(n.synchronizer, PS)
        else:
            assert n.synchronizer == AllReduce(group=0, compressor="fp16")


def test_partitioned_ps_spreads_shards_over_distinct_nodes() -> None:
    d = catalog_domain("bert-3l-A")  # 4 nodes
    params = {"large_bytes_log2": 12, "large_sync": "ps", "small_sync": "ps", "large_shards": 4,
              "sparse_shards": 4, "ar_groups": 3, "compressor": "none", "powersgd_rank": 1,
              "ps_placement": "bandwidth", "local_replication": True}
    s = decode(params, d)
    parts = [n.partition for n in s.nodes if n.partition is not None]
    assert parts
    for p in parts:
        dests = [x.destination for x in p.synchronizers]
        assert len(set(dests)) == len(dests) == min(4, len(d.cluster.nodes))
        # one worker per node on cluster A: local replication does nothing and stays off
        assert not any(x.local_replication for x in p.synchronizers)


def test_groups_are_contiguous_and_bounded() -> None:
    d = catalog_domain("bert-A")
    params = {"large_bytes_log2": 30 - 4, "large_sync": "ar", "small_sync": "ar", "large_shards": 2,
              "sparse_shards": 1, "ar_groups": 5, "compressor": "none", "powersgd_rank": 1,
              "ps_placement": "bytes", "local_replication": False}
    s = decode(params, d)
    groups = []
    for n in s.nodes:
        syncs = n.partition.synchronizers if n.partition else (n.synchronizer,)
        groups += [x.group for x in syncs if isinstance(x, AllReduce)]
    assert groups == sorted(groups) and set(groups) == set(range(5))


@pytest.mark.parametrize("bad, msg", [
    ({"ar_groups": 0}, "knob ar_groups must be an integer in [1, 20], got 0"),
    ({"compressor": "zip"}, "knob compressor must be one of"),
    ({"colour": 1}, "unknown knob 'colour'"),
])
def test_bad_assignments_name_the_knob(bad: dict, msg: str) -> None:
    params = {**_random_params(random.Random(1)), **bad}
    with pytest.raises(ConfigError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        decode(params, catalog_domain("ncf-A"))
