"""Canonical all-reduce group numbers: the same strategy whatever numbers its groups carry."""

from __future__ import annotations

from autosync_transfer.strategies.sampler import StrategySampler
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig


def _strategy(groups: list[int | tuple[int, int]]) -> Strategy:
    nodes = []
    for i, g in enumerate(groups):
        if isinstance(g, tuple):  # a variable in two shards
            nodes.append(VarConfig(var_name=f"v{i}", partition=Partition(
                axis=0, shards=2, synchronizers=(AllReduce(group=g[0], compressor="fp16"),
                                                 AllReduce(group=g[1])))))
        elif g < 0:
            nodes.append(VarConfig(var_name=f"v{i}", synchronizer=PS(destination="n1")))
        else:
            nodes.append(VarConfig(var_name=f"v{i}", synchronizer=AllReduce(group=g)))
    return Strategy(id="x", nodes=tuple(nodes))


def _groups(s: Strategy) -> list[int]:
    return [sync.group for n in s.nodes for _, sync in n.items() if isinstance(sync, AllReduce)]


def test_groups_are_renumbered_by_first_appearance() -> None:
    s = _strategy([5, -1, 2, (5, 9), 2])
    c = s.canonical()
    assert _groups(c) == [0, 1, 0, 2, 1]
    assert c.nodes[1] == s.nodes[1]  # a PS variable is left alone
    assert c.nodes[3].partition.synchronizers[0].compressor == "fp16"
    assert c.content_key == s.content_key == c.fingerprint != s.fingerprint
    assert (c.id, c.kind) == (s.id, s.kind)


def test_canonical_strategies_are_returned_as_they_are() -> None:
    s = _strategy([0, 1, -1, 0, (2, 1)])
    assert s.canonical() is s and s.content_key == s.fingerprint


def test_other_groupings_stay_apart() -> None:
    # same numbers, different fusion: not the same strategy
    assert _strategy([0, 0, 1]).content_key != _strategy([0, 1, 1]).content_key
    assert _strategy([3, 3, 7]).content_key == _strategy([0, 0, 1]).content_key


def test_the_sampler_numbers_groups_canonically() -> None:
    from autosync_transfer.domains.catalog import get_domain

    for s in StrategySampler(get_domain("bert-3l-C"), "dataset", seed=4).sample_n(20):
        assert s.canonical() is s
