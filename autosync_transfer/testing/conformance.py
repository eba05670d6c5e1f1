"""A conformance suite that every learned ranker's tests subclass, and synthetic runtimes.

Usage (in a test module)::

    from autosync_transfer.testing.conformance import RankerConformance

    class TestRNN(RankerConformance):
        kind = "rnn"
        hparams = {"lstm_hidden": 16}

The suite checks: one score per strategy (``[B]``, finite) and that a strategy's score does not
depend on the other strategies of its batch (padding); permuting the candidates permutes the
scores; the same seed gives identical initial and trained weights; ``config()`` +
``state_dict()`` saved to files (JSON and ``torch.save``) and loaded back
(``torch.load(weights_only=True)``) give identical scores; renaming and reordering the cluster's
nodes leaves the scores unchanged (the features promise it); a short fit lowers the training
loss.

Measured runtimes are replaced by a test double, :func:`synthetic_runtimes`: the analytical cost
model's bottleneck time with seeded multiplicative noise. A ranker that learns from it is only
shown to learn *something* consistent; it says nothing about real step times.

This module imports pytest and is meant for tests only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.rankers.costmodel import CostModelConfig
from autosync_transfer.rankers.features import FEATURE_SCHEMA, Featurizer, reference_time_s
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.tiny import tiny_domain, tiny_graph, tiny_strategies

__all__ = [
    "RankerConformance",
    "synthetic_runtimes",
    "synthetic_triples",
    "tiny_training_domains",
    "relabelled_domain_pair",
]


def synthetic_runtimes(
    strategies: Sequence[Strategy],
    domain: Domain,
    *,
    noise: float = 0.02,
    seed: int = 0,
    compute_s: float = 0.0,
    costmodel_config: CostModelConfig | None = None,
) -> np.ndarray:
    """A test double for measured step times (s): ``(compute_s + total_s) * exp(N(0, noise))``
    with a generator seeded by ``seed``, where ``total_s`` is the analytical model's bottleneck
    time (as in ``estimate(s).total_s``), taken from the featurizer's ``total`` aggregate times
    the domain's reference time: the same formulas, vectorized, and defined for scalar
    variables too."""
    rng = np.random.default_rng(seed)
    feats = Featurizer(domain, costmodel_config).featurize_many(list(strategies))
    col = FEATURE_SCHEMA.agg_index("total")
    ref = reference_time_s(domain, costmodel_config)
    total = np.array([float(f.agg[col]) * ref for f in feats])
    return (compute_s + total) * np.exp(rng.normal(0.0, noise, size=total.shape))


def tiny_training_domains() -> list[Domain]:
    """Two small domains with different clusters (2 x 2 workers; 3 uneven nodes)."""
    return [
        tiny_domain(2, 2, name="tiny-2x2"),
        tiny_domain(3, [1, 2, 1], [1.0, 2.0, 0.5], name="tiny-3mixed"),
    ]


def synthetic_triples(
    domains: Sequence[Domain] | None = None, n: int = 40, *, seed: int = 0, noise: float = 0.02
) -> list[tuple[Domain, list[Strategy], list[float]]]:
    """``(domain, strategies, runtimes_s)`` per domain: ``n`` sampled strategies (duplicates
    removed) with :func:`synthetic_runtimes`."""
    out = []
    for k, dom in enumerate(domains if domains is not None else tiny_training_domains()):
        seen: dict[str, Strategy] = {}
        for s in tiny_strategies(dom, n, seed=seed + 101 * k):
            seen.setdefault(s.id, s)
        strategies = list(seen.values())
        runtimes = synthetic_runtimes(strategies, dom, noise=noise, seed=seed + k)
        out.append((dom, strategies, [float(r) for r in runtimes]))
    return out


def _map_syncs(strategy: Strategy, fn: Any) -> Strategy:
    nodes = []
    for c in strategy.nodes:
        if c.partition is None:
            nodes.append(VarConfig(var_name=c.var_name, synchronizer=fn(c.synchronizer)))
        else:
            p = c.partition
            nodes.append(VarConfig(var_name=c.var_name, partition=Partition(
                axis=p.axis, shards=p.shards, synchronizers=tuple(map(fn, p.synchronizers)))))
    return Strategy(id=strategy.id, kind=strategy.kind, nodes=tuple(nodes))


def relabelled_domain_pair(
    n: int = 10, seed: int = 7, graph: ModelGraph | None = None
) -> tuple[Domain, list[Strategy], Domain, list[Strategy]]:
    """A 3-node domain (``graph``, default :func:`tiny_graph`) and the same machines listed in
    another order under other names, with ``n`` strategies of the first and the same strategies
    expressed for the second."""
    spec = [("n0", 2, 1.0), ("n1", 1, 2.0), ("n2", 2, 0.5)]
    graph = graph or tiny_graph()

    def cluster(order: list[int], names: list[str]) -> Cluster:
        return Cluster(name="relabel", nodes=tuple(
            Node(name=names[i], address=f"10.3.0.{i + 1}", workers=spec[k][1],
                 bandwidth_gbps=spec[k][2], chief=(i == 0))
            for i, k in enumerate(order)))

    dom_a = Domain(name="relabel-a", model=graph, cluster=cluster([0, 1, 2], ["n0", "n1", "n2"]))
    dom_b = Domain(name="relabel-b", model=graph, cluster=cluster([2, 0, 1], ["x", "y", "z"]))
    rename = {"n2": "x", "n0": "y", "n1": "z"}

    def relabel(s: PS | AllReduce) -> PS | AllReduce:
        if isinstance(s, PS):
            return s.model_copy(update={"destination": rename[s.destination]})
        return s

    strategies = tiny_strategies(dom_a, n, seed=seed)
    return dom_a, strategies, dom_b, [_map_syncs(s, relabel) for s in strategies]


class RankerConformance:
    """Base class of every learned ranker's tests; set ``kind`` (a key of ``RANKERS``) and,
    to keep tests fast, small ``hparams``. ``fit_epochs`` epochs of the short fit."""

    kind: ClassVar[str]
    hparams: ClassVar[dict[str, Any]] = {}
    fit_epochs: ClassVar[int] = 6
    batch_size: ClassVar[int] = 12

    # -- fixtures -------------------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _one_thread(self) -> Any:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(threads)

    @pytest.fixture(scope="class")
    def triples(self) -> list[tuple[Domain, list[Strategy], list[float]]]:
        return synthetic_triples(n=40, seed=0)

    @pytest.fixture(scope="class")
    def fitted(self, triples: Any) -> tuple[Any, dict[str, Any]]:
        from autosync_transfer.rankers.simulator import train_simulator

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return train_simulator(self.kind, triples, hparams=self.hparams, seed=0,
                                   max_epochs=self.fit_epochs, patience=None,
                                   batch_size=self.batch_size)
        finally:
            torch.set_num_threads(threads)

    def _module(self, seed: int = 0) -> Any:
        from autosync_transfer.rankers.modules import build_ranker

        return build_ranker(self.kind, self.hparams, seed=seed)

    # -- checks ---------------------------------------------------------------------------------

    def test_output_shape_and_batch_independence(self, triples: Any) -> None:
        from autosync_transfer.rankers.features import collate, featurize_many

        dom, strategies, _ = triples[1]
        feats = featurize_many(strategies[:7], dom)
        module = self._module().eval()
        with torch.no_grad():
            scores = module(collate(feats))
            alone = torch.cat([module(collate([f])) for f in feats])
        assert scores.shape == (7,)
        assert scores.dtype == torch.float32
        assert torch.isfinite(scores).all()
        torch.testing.assert_close(scores, alone, rtol=1e-5, atol=1e-5)

    def test_scores_reach_every_parameter(self, triples: Any) -> None:
        from autosync_transfer.rankers.features import collate, featurize_many

        dom, strategies, _ = triples[1]
        module = self._module()
        module(collate(featurize_many(strategies[:6], dom))).sum().backward()
        missing = [n for n, p in module.named_parameters() if p.grad is None]
        assert not missing, f"parameters without gradient: {missing}"

    def test_permuting_candidates_permutes_scores(self, fitted: Any, triples: Any) -> None:
        sim, _ = fitted
        dom, strategies, _ = triples[0]
        cands = strategies[:15]
        perm = np.random.default_rng(3).permutation(len(cands))
        a = sim.score(cands, dom, batch_size=4)
        b = sim.score([cands[i] for i in perm], dom, batch_size=4)
        assert a.shape == (len(cands),)
        np.testing.assert_allclose(b, a[perm], rtol=1e-5, atol=1e-6)

    def test_same_seed_same_weights(self, fitted: Any, triples: Any) -> None:
        from autosync_transfer.rankers.simulator import train_simulator

        a, b, c = self._module(seed=5), self._module(seed=5), self._module(seed=6)
        sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
        assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())
        sim, _ = fitted
        again, _ = train_simulator(self.kind, triples, hparams=self.hparams, seed=0,
                                   max_epochs=self.fit_epochs, patience=None,
                                   batch_size=self.batch_size)
        s1, s2 = sim.state_dict(), again.state_dict()
        assert s1.keys() == s2.keys()
        assert all(torch.equal(s1[k], s2[k]) for k in s1)
        dom, strategies, _ = triples[1]
        np.testing.assert_array_equal(sim.score(strategies, dom), again.score(strategies, dom))

    def test_save_load_gives_identical_scores(self, fitted: Any, triples: Any,
                                              tmp_path: Path) -> None:
        from autosync_transfer.rankers.simulator import Simulator

        sim, _ = fitted
        (tmp_path / "config.json").write_text(json.dumps(sim.config()))
        torch.save(sim.state_dict(), tmp_path / "weights.pt")
        config = json.loads((tmp_path / "config.json").read_text())
        state = torch.load(tmp_path / "weights.pt", weights_only=True)
        loaded = Simulator.from_config(config, state)
        assert loaded.config() == sim.config()
        for dom, strategies, _ in triples:
            np.testing.assert_array_equal(loaded.score(strategies, dom),
                                          sim.score(strategies, dom))

    def test_node_renaming_leaves_scores_unchanged(self, fitted: Any) -> None:
        sim, _ = fitted
        dom_a, strat_a, dom_b, strat_b = relabelled_domain_pair()
        np.testing.assert_allclose(sim.score(strat_b, dom_b), sim.score(strat_a, dom_a),
                                   rtol=1e-5, atol=1e-6)

    def test_short_fit_lowers_training_loss(self, fitted: Any) -> None:
        _, result = fitted
        losses = result["history"]["train_loss"]
        assert len(losses) == self.fit_epochs
        assert all(np.isfinite(losses))
        assert losses[-1] < losses[0]
