"""Training simulators on tiny synthetic data; the data module; saving and loading."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from autosync_transfer.dataset.loader import strategy_table
from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.rankers.datamodule import TrialDataModule
from autosync_transfer.rankers.features import FEATURE_SCHEMA_VERSION
from autosync_transfer.rankers.simulator import Simulator, evaluate_simulator, train_simulator
from autosync_transfer.testing.conformance import synthetic_triples

SMALL_RNN = {"row_hidden": 32, "row_out": 16, "lstm_hidden": 16, "head_hidden": 16}


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def triples() -> list[Any]:
    return synthetic_triples(n=60, seed=2)


@pytest.fixture(scope="module")
def trained(triples: list[Any]) -> tuple[Simulator, dict[str, Any]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_simulator("rnn", triples, hparams=SMALL_RNN, seed=0, max_epochs=15,
                               patience=None, batch_size=16)
    finally:
        torch.set_num_threads(threads)


# -- data module ----------------------------------------------------------------------------------


def test_datamodule_stores_until_setup(triples: list[Any]) -> None:
    dm = TrialDataModule(triples)
    with pytest.raises(NotFittedError):
        dm.splits()
    dm.setup()
    dm.setup()  # idempotent
    assert dm.domain_names == sorted(d.name for d, _, _ in triples)


def test_splits_are_seeded_disjoint_and_independent_of_input_order(triples: list[Any]) -> None:
    a = TrialDataModule(triples, split_seed=3)
    a.setup()
    shuffled = [(d, list(reversed(s)), list(reversed(r))) for d, s, r in reversed(triples)]
    b = TrialDataModule(shuffled, split_seed=3)
    b.setup()
    assert a.splits() == b.splits()
    c = TrialDataModule(triples[:1], split_seed=3)  # a domain's split ignores other domains
    c.setup()
    name = triples[0][0].name
    assert c.splits()["test"][name] == a.splits()["test"][name]
    d = TrialDataModule(triples, split_seed=4)
    d.setup()
    assert d.splits() != a.splits()
    for dom, strategies, _ in triples:
        ids = [a.splits()[s][dom.name] for s in ("train", "val", "test")]
        assert sum(map(len, ids)) == len({s.id for s in strategies})
        assert not set(ids[0]) & set(ids[1]) and not set(ids[0]) & set(ids[2])
        assert len(ids[1]) == round(0.15 * sum(map(len, ids)))


def test_training_batches_hold_one_domain_and_differ_per_seed(triples: list[Any]) -> None:
    dm = TrialDataModule(triples, batch_size=8, seed=1)
    dm.setup()
    batches = list(dm.train_dataloader())
    assert len(batches) == len(dm.train_dataloader())
    assert {int(b["domain_id"].unique().numel()) for b in batches} == {1}
    assert {int(d) for b in batches for d in b["domain_id"]} == {0, 1}
    assert all(b["runtime"].shape[0] >= 2 for b in batches)
    assert sum(b["runtime"].shape[0] for b in batches) == dm.split_size("train")
    again = list(dm.train_dataloader())  # a fresh loader repeats the first epoch's order
    assert all(torch.equal(x["runtime"], y["runtime"]) for x, y in zip(batches, again))
    mixed = TrialDataModule(triples, batch_size=8, domains_per_batch=2, seed=1)
    mixed.setup()
    assert max(int(b["domain_id"].unique().numel()) for b in mixed.train_dataloader()) == 2


def test_duplicate_strategies_are_merged_with_the_median(triples: list[Any]) -> None:
    dom, strategies, runtimes = triples[0]
    dm = TrialDataModule([(dom, [*strategies, strategies[0], strategies[0]],
                           [*runtimes, 10.0, 11.0])])
    dm.setup()
    data = dm.domain_data[0]
    assert len(data.strategy_ids) == len(strategies)
    i = data.strategy_ids.index(strategies[0].id)
    assert data.runtimes[i] == pytest.approx(10.0)  # median of (r, 10, 11)
    with pytest.raises(ConfigError, match="runtime"):
        TrialDataModule([(dom, strategies[:2], [1.0, -1.0])]).setup()


def _table(triples: list[Any], fingerprint: str | None = None) -> pd.DataFrame:
    rows = []
    for dom, strategies, runtimes in triples:
        for s, r in zip(strategies, runtimes):
            rows.append({
                "id": f"{dom.name}/{s.id}", "domain": dom.name, "model": dom.model.name,
                "cluster": dom.cluster.name, "model_fingerprint": dom.model.fingerprint,
                "cluster_fingerprint": fingerprint or dom.cluster.fingerprint,
                "strategy_id": s.id, "strategy_kind": s.kind,
                "strategy": json.dumps(s.model_dump(mode="json")), "status": "ok",
                "median_s": r, "reference": False,
            })
    return pd.DataFrame(rows)


def test_datamodule_reads_a_trials_table(triples: list[Any]) -> None:
    domains = {d.name: d for d, _, _ in triples}
    from_table = TrialDataModule(strategy_table(_table(triples)), domains=domains)
    from_table.setup()
    direct = TrialDataModule(triples)
    direct.setup()
    assert from_table.splits() == direct.splits()
    np.testing.assert_allclose(from_table.domain_data[0].runtimes, direct.domain_data[0].runtimes)
    bad = TrialDataModule(strategy_table(_table(triples, fingerprint="0123456789abcdef")),
                          domains=domains)
    with pytest.raises(ConfigError, match="cluster fingerprint"):
        bad.setup()


# -- training -------------------------------------------------------------------------------------


def test_training_ranks_better_than_chance(trained: tuple[Simulator, dict[str, Any]]) -> None:
    sim, result = trained
    assert result["best_val_pairwise_acc"] > 0.75
    assert result["test_pairwise_accuracy"] > 0.7
    assert result["epochs"] == 15 and len(result["history"]["val_pairwise_acc"]) == 15
    assert result["history"]["train_loss"][-1] < result["history"]["train_loss"][0]
    assert set(result["test_per_domain"]) == {"tiny-2x2", "tiny-3mixed"}
    for key in ("test_kendall_tau", "test_top1", "test_regret"):
        assert np.isfinite(result[key])


def test_returned_weights_are_the_best_validation_epoch(
        trained: tuple[Simulator, dict[str, Any]], triples: list[Any]) -> None:
    sim, result = trained
    dm = TrialDataModule(triples, batch_size=16, split_seed=0, seed=0)
    val = evaluate_simulator(sim, dm, "val")
    assert val["pairwise_accuracy"] == pytest.approx(result["best_val_pairwise_acc"], abs=1e-6)
    assert max(result["history"]["val_pairwise_acc"]) == pytest.approx(
        result["best_val_pairwise_acc"], abs=1e-6)


def test_save_load_round_trip(trained: tuple[Simulator, dict[str, Any]], triples: list[Any],
                              tmp_path: Path) -> None:
    sim, _ = trained
    config = sim.config()
    assert config["kind"] == "rnn" and config["schema_version"] == FEATURE_SCHEMA_VERSION
    assert config["hparams"]["lstm_hidden"] == 16 and config["feature_widths"]["row"] > 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch.save(sim.state_dict(), tmp_path / "weights.pt")
    loaded = Simulator.from_config(json.loads((tmp_path / "config.json").read_text()),
                                   torch.load(tmp_path / "weights.pt", weights_only=True))
    dom, strategies, _ = triples[1]
    np.testing.assert_array_equal(loaded.score(strategies, dom), sim.score(strategies, dom))
    # it records the physics of its features; one saved before that trained on the fallback's
    assert config["physics"] == "measured" and loaded.physics == "measured"
    del config["physics"]
    assert Simulator.from_config(config, sim.state_dict()).physics == "fallback"


def test_schema_version_mismatch_is_a_config_error(
        trained: tuple[Simulator, dict[str, Any]]) -> None:
    sim, _ = trained
    config = sim.config()
    config["schema_version"] = FEATURE_SCHEMA_VERSION + 1
    with pytest.raises(ConfigError, match="feature schema version mismatch.*"
                                          f"version {FEATURE_SCHEMA_VERSION + 1}"):
        Simulator.from_config(config, sim.state_dict())
    config = sim.config()
    config["feature_widths"]["row"] += 1
    with pytest.raises(ConfigError, match="feature widths mismatch"):
        Simulator.from_config(config, sim.state_dict())


def test_warm_start_and_head_only_fine_tuning(trained: tuple[Simulator, dict[str, Any]],
                                              triples: list[Any]) -> None:
    sim, _ = trained
    before = sim.state_dict()
    tuned, result = train_simulator("rnn", triples[1:], init_state=sim, freeze="body", seed=1,
                                    max_epochs=2, patience=None, batch_size=16)
    after = tuned.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert all(k.startswith("head.") for k in changed)  # the frozen body never moves
    # the starting weights are a candidate: an epoch is kept only where it validates better
    assert bool(changed) == (result["best_epoch"] >= 0)
    assert result["best_val_pairwise_acc"] >= 0.0
    assert torch.equal(before["row_mean"], after["row_mean"])  # the stored statistics stay
    with pytest.raises(ConfigError, match="freeze"):
        train_simulator("rnn", triples, init_state=sim, freeze="encoder", max_epochs=1)
    with pytest.raises(ConfigError, match="warm-start"):
        train_simulator("linear", triples, init_state=sim, max_epochs=1)


def test_training_leaves_global_state_alone(triples: list[Any]) -> None:
    rng_state = torch.get_rng_state()
    det = torch.are_deterministic_algorithms_enabled()
    level = logging.getLogger("lightning.pytorch").level
    _, result = train_simulator("linear", triples, hparams={"hidden": 0}, seed=3, max_epochs=2,
                                batch_size=16)
    assert torch.equal(torch.get_rng_state(), rng_state)
    assert torch.are_deterministic_algorithms_enabled() == det
    assert logging.getLogger("lightning.pytorch").level == level
    assert result["epochs"] == 2


def test_early_stopping_stops_before_max_epochs(triples: list[Any]) -> None:
    _, result = train_simulator("linear", triples, hparams={"hidden": 0}, seed=0,
                                max_epochs=200, patience=2, batch_size=16)
    assert result["epochs"] < 200
    assert result["best_epoch"] <= result["epochs"] - 1


@pytest.mark.parametrize("kind", ["linear", "rnn"])
def test_scoring_a_sampled_batch_equals_scoring_its_objects(kind: str) -> None:
    """Simulator.score reads a SampledBatch from its arrays (no strategy object is built) and a
    ranker on ``agg`` alone from :meth:`Featurizer.aggregates`; the scores are those of the
    collated full features."""
    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import _score_features
    from autosync_transfer.strategies.sampler import StrategySampler
    from autosync_transfer.testing import tiny_domain

    dom = tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25])
    torch.manual_seed(0)
    sim = Simulator.from_module(build_ranker(kind, {}, seed=0))
    batch = StrategySampler(dom, "dataset", seed=2).sample_batch(300)
    from_batch = sim.score(batch, dom)
    assert batch._built == {}  # noqa: SLF001
    objects = list(batch)
    from_objects = sim.score(objects, dom)
    reference = _score_features(sim.module, sim._featurizer_for(dom).featurize_many(objects), 64)
    np.testing.assert_allclose(from_batch, from_objects, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(from_batch, reference, rtol=1e-5, atol=1e-6)
    assert np.unique(from_batch).size > 10  # the scores do tell the strategies apart


@pytest.mark.parametrize("config", ["dataset", "default"])
def test_analytical_scores_are_the_cost_model_estimates(config: str) -> None:
    """The analytical simulator scores through the featurizer's float64 totals: the cost model's
    ``total_s`` of every strategy (from a batch without building it, or from objects), in a
    homogeneous, a heterogeneous and a dense domain."""
    from autosync_transfer.rankers.costmodel import estimate
    from autosync_transfer.strategies.sampler import StrategySampler
    from autosync_transfer.testing import tiny_domain

    sim = Simulator("analytical")
    for dom in (tiny_domain(2, [2, 1]), tiny_domain(3, [2, 1, 1], [1.0, 1.0, 0.25]),
                tiny_domain(4, 1, sparse_embedding=False)):
        batch = StrategySampler(dom, config, seed=5).sample_batch(120)
        got = sim.score(batch, dom)
        assert batch._built == {} and got.dtype == np.float64  # noqa: SLF001
        want = np.array([estimate(s, dom).total_s for s in batch])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(sim.score(list(batch), dom), got)
        assert sim.score([], dom).shape == (0,)
