"""Every learned ranker passes the conformance suite; the analytical simulator behaves like the
cost model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.rankers.costmodel import AnalyticalRanker, CostModelConfig
from autosync_transfer.rankers.modules import RANKERS, build_ranker, ranker_hparams
from autosync_transfer.rankers.simulator import Simulator, train_simulator
from autosync_transfer.testing.conformance import (
    RankerConformance,
    relabelled_domain_pair,
    synthetic_triples,
)
from autosync_transfer.testing.tiny import tiny_domain, tiny_strategies


class TestLinear(RankerConformance):
    kind = "linear"
    hparams = {"hidden": 8}


class TestResidual(RankerConformance):
    kind = "residual"
    hparams = {"hidden": 8}


class TestRNN(RankerConformance):
    kind = "rnn"
    hparams = {"row_hidden": 32, "row_out": 16, "lstm_hidden": 16, "head_hidden": 16}


class TestGAT(RankerConformance):
    kind = "gat"
    hparams = {"hidden": 16, "heads": 2, "head_hidden": 16}


class TestTransformer(RankerConformance):
    kind = "transformer"
    hparams = {"d_model": 16, "nhead": 2, "dim_feedforward": 32, "head_hidden": 16}


class TestTransformerOverRows(RankerConformance):
    kind = "transformer"
    hparams = {"d_model": 16, "nhead": 2, "layers": 1, "dim_feedforward": 32,
               "head_hidden": 16, "tokens": "rows"}


def test_every_kind_has_a_conformance_test() -> None:
    tested = {c.kind for c in (TestLinear, TestResidual, TestRNN, TestGAT, TestTransformer)}
    assert tested == set(RANKERS)


def test_unknown_kind_and_hparam_are_config_errors() -> None:
    with pytest.raises(UnknownNameError, match="unknown ranker kind 'mlp'"):
        build_ranker("mlp")
    with pytest.raises(ConfigError, match="unknown hyper-parameter 'lstm_hiden'"):
        build_ranker("rnn", {"lstm_hiden": 3})
    with pytest.raises(ConfigError, match="divisible"):
        build_ranker("gat", {"hidden": 10, "heads": 3})
    assert ranker_hparams("rnn")["lstm_layers"] == 2
    assert ranker_hparams("rnn")["lr"] == 1e-3


def test_freeze_body_leaves_only_the_head_trainable() -> None:
    module = build_ranker("rnn", {"lstm_hidden": 8}, seed=0)
    module.freeze_body()
    trainable = {n.split(".")[0] for n, p in module.named_parameters() if p.requires_grad}
    assert trainable == {"head"}


# -- the analytical simulator ---------------------------------------------------------------------


def test_analytical_simulator_is_the_cost_model(tmp_path: Path) -> None:
    dom = tiny_domain(2, [1, 2])  # with a scalar variable
    strategies = tiny_strategies(dom, 12, seed=4)
    cm = CostModelConfig(intra_node_gbps=20.0)
    sim = Simulator("analytical", costmodel_config=cm)
    # the featurizer's float64 totals: the cost model up to float rounding
    np.testing.assert_allclose(sim.score(strategies, dom),
                               AnalyticalRanker(cm).score(strategies, dom), rtol=1e-12, atol=0)
    assert sim.state_dict() == {}
    (tmp_path / "c.json").write_text(json.dumps(sim.config()))
    loaded = Simulator.from_config(json.loads((tmp_path / "c.json").read_text()), {})
    assert loaded.costmodel_config == cm
    np.testing.assert_array_equal(loaded.score(strategies, dom), sim.score(strategies, dom))
    dom_a, strat_a, dom_b, strat_b = relabelled_domain_pair(graph=dom.model)
    np.testing.assert_allclose(sim.score(strat_b, dom_b), sim.score(strat_a, dom_a), rtol=1e-9)


def test_analytical_train_simulator_only_evaluates() -> None:
    triples = synthetic_triples(n=30, seed=1, noise=0.01)
    sim, result = train_simulator("analytical", triples, seed=0)
    assert sim.kind == "analytical" and result["epochs"] == 0
    assert result["test_pairwise_accuracy"] > 0.9  # runtimes are the cost model plus 1 % noise
    assert set(result["test_per_domain"]) == {d.name for d, _, _ in triples}


def test_unfitted_learned_simulator_raises() -> None:
    from autosync_transfer.errors import NotFittedError

    dom = tiny_domain()
    sim = Simulator("rnn")
    assert not sim.fitted
    with pytest.raises(NotFittedError):
        sim.score(tiny_strategies(dom, 2), dom)


def test_wrong_weights_are_a_config_error() -> None:
    module = build_ranker("linear", {"hidden": 4}, seed=0)
    config = Simulator.from_module(module).config()
    config["hparams"]["hidden"] = 5
    with pytest.raises(ConfigError, match="do not fit"):
        Simulator.from_config(config, {k: v for k, v in module.state_dict().items()})
    config["hparams"]["hidden"] = 4
    sd = dict(module.state_dict())
    sd["extra"] = torch.zeros(1)
    with pytest.raises(ConfigError, match="do not fit"):
        Simulator.from_config(config, sd)


def test_untrained_residual_ranker_orders_as_the_step_simulator() -> None:
    """Its correction starts at zero: the scores are the simulated step's log, scaled."""
    from autosync_transfer.rankers.features import FEATURE_SCHEMA, collate, featurize_many
    from autosync_transfer.rankers.stepsim import StepSimulator

    dom = tiny_domain()
    strategies = tiny_strategies(dom, 12, seed=4)
    module = build_ranker("residual", {"hidden": 8, "prior_scale": 3.0}, seed=0).eval()
    batch = collate(featurize_many(strategies, dom))
    with torch.no_grad():
        scores = module(batch).double().numpy()
    step = StepSimulator(dom).simulate(strategies)["step_s"]
    assert len(set(np.round(step, 12))) > 3  # the strategies differ in the simulation
    np.testing.assert_allclose(scores, 3.0 * np.log(1e-9 + step), rtol=1e-4, atol=1e-5)
    col = FEATURE_SCHEMA.agg_index("log10_sim_step_s")
    np.testing.assert_allclose(batch["agg"][:, col].double().numpy(),
                               np.log10(1e-9 + step), rtol=1e-5)
    # training moves it away from the simulation: the head is trainable
    module.train()
    module(batch).sum().backward()
    assert all(p.grad is not None for p in module.head.parameters())
    with pytest.raises(ConfigError, match="prior_scale must be > 0"):
        build_ranker("residual", {"prior_scale": 0.0})


def _simulated_triple(n: int = 40, seed: int = 3):  # noqa: ANN202
    """One tiny domain's strategies labelled with the step simulator's own step times."""
    from autosync_transfer.rankers.stepsim import StepSimulator

    dom = tiny_domain()
    seen: dict[str, object] = {}
    for s in tiny_strategies(dom, n, seed=seed):
        seen.setdefault(s.id, s)
    strategies = list(seen.values())
    step = StepSimulator(dom).simulate(strategies)["step_s"]
    return dom, strategies, [float(x) for x in step]


def test_a_residual_ranker_never_validates_below_its_simulator_prior() -> None:
    """The starting weights (the simulator's order) are a candidate of the best-epoch choice:
    with labels the simulation already orders perfectly, no epoch validates better, so the
    trained ranker is the prior (best_epoch -1) and orders as the simulator."""
    from autosync_transfer.rankers.metrics import pairwise_accuracy

    dom, strategies, step = _simulated_triple()
    assert len(set(np.round(step, 12))) > 10
    sim, m = train_simulator("residual", [(dom, strategies, step)], seed=0, max_epochs=3,
                             hparams={"hidden": 8, "lr": 0.05})
    assert m["best_epoch"] == -1
    assert m["best_val_pairwise_acc"] == pytest.approx(1.0)
    assert pairwise_accuracy(sim.score(strategies, dom), step) == pytest.approx(1.0)
    # with labels that reverse the simulation an epoch validates above the prior (0), but on
    # six validation strategies a pair or two is no confident gain: the prior stays
    reversed_labels = [1.0 / x for x in step]
    _, m = train_simulator("residual", [(dom, strategies, reversed_labels)], seed=0,
                           max_epochs=5, hparams={"hidden": 8, "lr": 0.05})
    assert m["val_strategies"] == 6 and m["val_gain"] > 0
    assert m["best_epoch"] == -1 and m["val_gain_low"] <= 0
    assert m["best_val_pairwise_acc"] == pytest.approx(0.0)
    # a ranker that starts from random weights has no such candidate
    _, m = train_simulator("linear", [(dom, strategies, step)], seed=0, max_epochs=2,
                           hparams={"hidden": 8})
    assert m["best_epoch"] >= 0


def test_an_epoch_replaces_the_prior_only_when_it_validates_better_with_confidence() -> None:
    """The best of several noisy epochs is not a gain by itself: an epoch replaces the starting
    weights only where its validation gain over them has a lower 95 % bound above 0
    (``val_gain_low``); on labels that reverse the simulation it has, on noisy labels an epoch
    that validates as the start does not replace it."""
    dom, strategies, step = _simulated_triple(n=120)
    rng = np.random.default_rng(0)
    noisy = [x * float(np.exp(rng.normal(0.0, 0.2))) for x in step]
    _, m = train_simulator("residual", [(dom, strategies, noisy)], seed=0, max_epochs=2,
                           hparams={"hidden": 8, "lr": 1e-3})
    assert m["best_epoch"] == -1
    assert not (m["val_gain_low"] > 0)  # nan (never compared) or no confident gain
    reversed_labels = [1.0 / x for x in step]
    _, m = train_simulator("residual", [(dom, strategies, reversed_labels)], seed=0,
                           max_epochs=5, hparams={"hidden": 8, "lr": 0.05})
    assert m["best_epoch"] >= 0
    assert 0 < m["val_gain_low"] <= m["val_gain"]
    assert m["val_gain"] == pytest.approx(m["best_val_pairwise_acc"], abs=1e-6)  # from 0
    # a ranker that starts from random weights is never compared
    _, m = train_simulator("linear", [(dom, strategies, step)], seed=0, max_epochs=2,
                           hparams={"hidden": 8})
    assert math.isnan(m["val_gain"]) and m["best_epoch"] >= 0


def test_the_start_gate_counts_only_the_pairs_its_margin_leaves() -> None:
    """``start_margin`` is the label gap the gate counts, apart from the loss's margin: the same
    training on labels that reverse the simulation replaces the prior with the default (the
    ranker's margin, 0) and keeps it where ``start_margin`` is wider than every label gap (no
    pair is left to show a gain); a negative one is a ConfigError naming it."""
    dom, strategies, step = _simulated_triple(n=120)
    reversed_labels = [1.0 / x for x in step]
    hp = {"hidden": 8, "lr": 0.05}
    _, m = train_simulator("residual", [(dom, strategies, reversed_labels)], seed=0,
                           max_epochs=5, hparams=hp)
    assert m["best_epoch"] >= 0 and m["val_gain_low"] > 0
    _, m0 = train_simulator("residual", [(dom, strategies, reversed_labels)], seed=0,
                            max_epochs=5, hparams=hp, start_margin=1e6)
    assert m0["best_epoch"] == -1 and not (m0["val_gain_low"] > 0)
    assert m0["epochs"] == m["epochs"]  # trained alike; only the choice differs
    with pytest.raises(ConfigError, match="start_margin must be >= 0, got -0.1"):
        train_simulator("residual", [(dom, strategies, step)], seed=0, max_epochs=1,
                        hparams=hp, start_margin=-0.1)


def test_the_margin_drops_near_ties_from_validation() -> None:
    """With ``margin``, the validation accuracy that picks the epoch counts only the pairs whose
    labels differ by more than it: a prior that misorders only near-ties validates at 1."""
    dom, strategies, step = _simulated_triple()
    rng = np.random.default_rng(0)
    noisy = [x * float(rng.uniform(0.98, 1.02)) for x in step]  # near-ties misordered
    _, m0 = train_simulator("residual", [(dom, strategies, noisy)], seed=0, max_epochs=1,
                            hparams={"hidden": 8, "lr": 1e-6})
    _, m = train_simulator("residual", [(dom, strategies, noisy)], seed=0, max_epochs=1,
                           hparams={"hidden": 8, "lr": 1e-6, "margin": 0.05})
    assert m["best_val_pairwise_acc"] == pytest.approx(1.0)
    assert m["best_val_pairwise_acc"] >= m0["best_val_pairwise_acc"]
