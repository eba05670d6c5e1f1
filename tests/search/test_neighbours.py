"""Neighbours of measured strategies: valid, distinct, near their parent, deterministic; the
ranked search methods consider them beside the sampled candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.search.config import SearchConfig
from autosync_transfer.search.loop import Searcher
from autosync_transfer.search.neighbours import NEIGHBOUR_KIND, neighbours
from autosync_transfer.strategies.builders import build
from autosync_transfer.strategies.sampler import StrategySampler
from autosync_transfer.strategies.validate import violations


@pytest.mark.parametrize("name", ["ncf-C", "bert-3l-B"])
def test_neighbours_are_valid_distinct_and_near_their_parent(name: str) -> None:
    d = get_domain(name)
    parents = [build("ps_lb", d), build("all_reduce", d)]
    donors = list(StrategySampler(d, "dataset", seed=3).sample_batch(20))
    near = neighbours(parents, donors, 60, d, seed=7, max_share=0.1)
    assert len(near) >= 50
    fps = [s.fingerprint for s in near]
    assert len(set(fps)) == len(fps) and not set(fps) & {p.content_key for p in parents}
    v = len(parents[0].nodes)
    for i, s in enumerate(near):
        assert s.kind == NEIGHBOUR_KIND and s.id == f"nb-{s.fingerprint}"
        assert not violations(s, d)
        assert s.canonical() is s  # groups numbered in order of first appearance
        changed = min(sum(a != b for a, b in zip(_ungrouped(p), _ungrouped(s))) for p in parents)
        assert changed <= max(1, round(0.1 * v))
    again = neighbours(parents, donors, 60, d, seed=7, max_share=0.1)
    assert [s.fingerprint for s in again] == fps
    assert neighbours(parents, donors, 0, d) == [] and neighbours([], donors, 5, d) == []
    with pytest.raises(ConfigError, match="max_share"):
        neighbours(parents, donors, 5, d, max_share=0)


def _ungrouped(s):  # noqa: ANN001, ANN202
    """The strategy's variable configurations with all-reduce group numbers blanked."""
    def blank(sync):  # noqa: ANN001, ANN202
        return sync.model_copy(update={"group": 0}) if sync.kind == "ar" else sync

    return [n.model_copy(update={"synchronizer": blank(n.synchronizer)}) if n.partition is None
            else n.model_copy(update={"partition": n.partition.model_copy(
                update={"synchronizers": tuple(map(blank, n.partition.synchronizers))})})
            for n in s.nodes]


def test_a_neighbour_that_only_renumbers_groups_is_its_parent() -> None:
    """A donor whose all-reduce groups are the parent's under other numbers adds nothing new
    when it re-configures every variable: that neighbour is the parent and is dropped; the
    others are in canonical form and differ from the parent in their grouping."""
    from autosync_transfer.strategies.types import AllReduce

    d = get_domain("bert-3l-B")
    parent = build("all_reduce", d).canonical()
    donor = parent.model_copy(update={"nodes": tuple(
        n.model_copy(update={"synchronizer": AllReduce(group=n.synchronizer.group + 7)})
        if isinstance(n.synchronizer, AllReduce) else n for n in parent.nodes)})
    assert donor.fingerprint != parent.fingerprint and donor.content_key == parent.content_key
    assert donor.canonical().fingerprint == parent.fingerprint
    near = neighbours([parent], [donor], 40, d, seed=1, max_share=1.0)
    assert near and all(s.content_key != parent.content_key for s in near)
    assert all(s.canonical() is s for s in near)


def test_ranked_search_picks_among_neighbours(tmp_path: Path) -> None:
    """With few sampled candidates, the cost model prefers neighbours of the builder it rates
    best; with ``neighbours=0`` only sampled strategies can be picked."""
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.builders import BUILDERS

    d = get_domain("bert-3l-C")
    builders = [build(n, d) for n in BUILDERS]
    best = builders[int(Simulator("analytical").score(builders, d).argmin())]
    picks = {}
    for n in (0, 100):
        cfg = SearchConfig(method="analytical", candidates=8, neighbours=n, seed=2,
                           knob_candidates=0)
        s = Searcher(d, tmp_path / f"run{n}.jsonl", cfg, launcher="local")
        picks[n] = s.proposer.propose(0, 4, set(), [], [best])
    assert {p.kind for p in picks[0]} == {"sampled"}
    assert NEIGHBOUR_KIND in {p.kind for p in picks[100]}
