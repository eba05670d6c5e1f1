"""Adaptation routines, the held-out split, ``adapt`` and ``learning_curve``.

Test double: the trial data here are synthetic. Runtimes are the analytical cost model's estimate
plus a fixed compute time and seeded noise (no measurement), on the small catalog domains ncf-A
(source) and ncf-B (target). Training runs a few epochs of small rankers on one thread.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from autosync_transfer.testing.synthetic import synthetic_trials

torch = pytest.importorskip("torch")

from autosync_transfer.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE, TARGET = "ncf-A", "ncf-B"
N_STRATEGIES = 40


@pytest.fixture(scope="module")
def domains() -> tuple[Any, Any]:
    from autosync_transfer.domains.catalog import get_domain

    return get_domain(SOURCE), get_domain(TARGET)


@pytest.fixture(scope="module")
def source_df(domains: Any) -> Any:
    return synthetic_trials(domains[0], seed=0)


@pytest.fixture(scope="module")
def target_df(domains: Any) -> Any:
    return synthetic_trials(domains[1], seed=1)


@pytest.fixture(scope="module")
def source_sim(source_df: Any) -> Any:
    """A linear simulator of ncf-A (a few epochs)."""
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.rankers.simulator import train_simulator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sim, _ = train_simulator("linear", strategy_table(source_df), seed=0, max_epochs=5,
                                 patience=None, batch_size=16)
    finally:
        torch.set_num_threads(threads)
    return sim


@pytest.fixture(scope="module")
def split(domains: Any, target_df: Any) -> Any:
    from autosync_transfer.adapt import split_target

    return split_target(domains[1], target_df)


def small() -> Any:
    from autosync_transfer.adapt import ShotTraining

    return ShotTraining(max_epochs=3, patience=2, few_epochs=2, cv_below=20)


def tiny_rnn_source() -> Any:
    """An untrained small RNN simulator (weights from seed 0): enough to test what moves."""
    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import Simulator

    hp = {"row_hidden": 8, "row_out": 4, "lstm_hidden": 4, "lstm_layers": 1, "head_hidden": 4}
    return Simulator.from_module(build_ranker("rnn", hp, seed=0))


# -- the held-out split ---------------------------------------------------------------------------


def test_holdout_is_the_registry_test_split_and_disjoint_from_the_pool(
        split: Any, domains: Any, target_df: Any) -> None:
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.rankers.datamodule import TrialDataModule

    dm = TrialDataModule(strategy_table(target_df), split_seed=0)  # train_and_register's 70/15/15 split
    dm.setup()
    assert sorted(split.holdout_ids) == dm.splits()["test"][TARGET]
    assert not set(split.holdout_ids) & set(split.pool_ids)
    assert len(split.holdout_ids) + len(split.pool_ids) == N_STRATEGIES
    assert split.available == N_STRATEGIES - len(split.holdout_ids)
    assert len(split.test_split) == 16


def test_shots_are_seeded_nested_and_never_held_out(split: Any) -> None:
    five, ten = split.shots(5, seed=3), split.shots(10, seed=3)
    assert set(five.strategy_ids) <= set(ten.strategy_ids)
    assert split.shots(5, seed=3).strategy_ids == five.strategy_ids
    assert split.shots(5, seed=4).strategy_ids != five.strategy_ids
    assert not set(ten.strategy_ids) & set(split.holdout_ids)
    with pytest.raises(ConfigError, match=r"shots=500 is more than the \d+ target trials"):
        split.shots(500, seed=0)
    with pytest.raises(ConfigError, match="held out for evaluation"):
        split.chosen([split.holdout_ids[0]])


def test_reserved_strategies_are_never_held_out(domains: Any, target_df: Any) -> None:
    from autosync_transfer.adapt import split_target

    base = split_target(domains[1], target_df)
    reserved = base.holdout_ids[:2]
    again = split_target(domains[1], target_df, reserved=reserved)
    assert not set(reserved) & set(again.holdout_ids)
    assert again.chosen(reserved).strategy_ids == tuple(sorted(reserved))


def test_too_few_target_strategies_for_a_holdout(domains: Any, target_df: Any) -> None:
    from autosync_transfer.adapt import split_target

    few = target_df[target_df["strategy_id"].isin(sorted(set(target_df["strategy_id"]))[:5])]
    with pytest.raises(ConfigError, match="at least 2 held-out strategies"):
        split_target(domains[1], few)


# -- adapt ----------------------------------------------------------------------------------------


def test_zero_shot_scores_the_target_with_the_source_as_is(source_sim: Any, split: Any,
                                                          domains: Any) -> None:
    from autosync_transfer.adapt import adapt
    from autosync_transfer.adapt.data import evaluate_on

    res = adapt(source_sim, domains[1], split, method="auto", shots=0)
    assert res.method == "zero-shot" and res.shots == 0 and res.simulator is source_sim
    expected = evaluate_on(source_sim, split.holdout())
    assert res.metrics["zero-shot"] == expected == res.metrics["adapted"]
    assert 0.0 <= expected["pairwise_accuracy"] <= 1.0
    assert 0.0 < expected["top1"] <= 1.0
    assert all(math.isnan(v) for v in res.metrics["from-scratch"].values())
    assert [r["row"] for r in res.rows()] == ["zero-shot", "adapted", "from-scratch"]
    assert res.holdout_ids == split.holdout_ids and res.test_split == split.test_split


def test_auto_finetunes_with_shots_and_compares_with_from_scratch(
        source_sim: Any, split: Any, domains: Any) -> None:
    from autosync_transfer.adapt import adapt

    res = adapt(source_sim, domains[1], split, method="auto", shots=6, seed=1, training=small())
    assert res.method == "finetune" and res.shots == 6
    kept = res.details["adapted"]["kept_source"]
    assert (res.simulator is source_sim) == kept and res.simulator.kind == "linear"
    if kept:  # cross-validation found no epoch better than the source: adapted == zero-shot
        assert res.metrics["adapted"] == res.metrics["zero-shot"]
    assert not set(res.shot_ids) & set(res.holdout_ids)
    for row in ("zero-shot", "adapted", "from-scratch"):
        assert 0.0 <= res.metrics[row]["pairwise_accuracy"] <= 1.0
    assert res.details["adapted"]["selection"] == "3-fold cross-validation"
    assert res.details["from-scratch"]["kind"] == "linear"
    again = adapt(source_sim, domains[1], split, method="finetune", shots=6, seed=1,
                  training=small())
    assert again.metrics == res.metrics and again.shot_ids == res.shot_ids


@pytest.mark.parametrize("n,selection", [(3, "fixed epochs"), (8, "4-fold cross-validation"),
                                         (20, "validation")])
def test_epochs_are_chosen_on_the_shots(source_sim: Any, split: Any, n: int,
                                        selection: str) -> None:
    from autosync_transfer.adapt import FineTune

    fitted = FineTune(training=small()).fit(source_sim, split.shots(n, seed=0), seed=0)
    assert fitted.details["selection"].startswith(selection)
    if fitted.details.get("kept_source"):  # selection may keep the source: "epoch 0"
        assert fitted.simulator is source_sim
    else:
        assert 1 <= fitted.details["epochs"] <= 3
    if n >= 20:
        assert fitted.details["val_strategies"] == 4


def test_cross_validation_up_to_sixty_shots_by_default(split: Any) -> None:
    from autosync_transfer.adapt.training import ShotTraining, fit_on_shots
    from autosync_transfer.rankers.simulator import Simulator

    other = Simulator("analytical", {}, 1)

    def train(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        return other, {"epochs": 2, "best_epoch": 1, "best_val_pairwise_acc": 0.5,
                       "history": {"val_pairwise_acc": [0.4, 0.5]}}

    assert ShotTraining().cv_below == 60
    n = min(40, split.available)
    _, details = fit_on_shots(train, split.shots(n, seed=0), ShotTraining(max_epochs=2), seed=0)
    assert details["selection"] == "5-fold cross-validation" and details["folds"] == 5
    _, details = fit_on_shots(train, split.shots(n, seed=0),
                              ShotTraining(max_epochs=2, cv_below=n), seed=0)
    assert details["selection"].startswith("validation")


@pytest.mark.parametrize("n", [8, 20])  # cross-validation, validation split
@pytest.mark.parametrize("trained_acc", [0.0, 1.5])
def test_the_source_is_kept_unless_training_beats_it_on_the_shots(
        source_sim: Any, split: Any, n: int, trained_acc: float) -> None:
    """The selection compares the untrained source ("epoch 0") with what training reports on the
    same validation strategies, then, where training reports more, compares the two on their
    scores, paired. Test double: the training function reports a fixed validation accuracy
    (0.0: no source can do worse; 1.5: no source can do as well) and returns a simulator of its
    own; the shots are labeled in the source's own order, so the source ranks every pair right
    and a reported lead is no gain."""
    import numpy as np

    from autosync_transfer.adapt.training import ShotTraining, fit_on_shots
    from autosync_transfer.rankers.simulator import Simulator

    other = Simulator("analytical", {}, 1)
    calls: list[int] = []

    def train(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        calls.append(max_epochs)
        return other, {"epochs": 2, "best_epoch": 1, "best_val_pairwise_acc": trained_acc,
                       "history": {"val_pairwise_acc": [trained_acc / 2, trained_acc]}}

    shots = split.shots(n, seed=0)
    scores = source_sim.with_launcher(shots.launcher).score(list(shots.strategies), shots.domain)
    shots = _relabeled(shots, 1.0 + np.argsort(np.argsort(scores)))
    config = ShotTraining(max_epochs=2, cv_below=20)
    sim, details = fit_on_shots(train, shots, config, seed=0, source=source_sim)
    assert details["kept_source"] is True and sim is source_sim
    key = "val_pairwise_acc" if n >= 20 else "cv_pairwise_acc"
    assert details[key] == details["source_" + key] == 1.0
    gain = "val_gain" if n >= 20 else "cv_gain"
    if trained_acc > 1.0:  # the reported lead was checked on the scores: none
        assert details[gain] <= 0.0 and not details[gain + "_low"] > 0.0
    else:
        assert gain not in details
    if n < 20:  # the folds, then (to check a reported lead) the folds again for its epochs
        assert len(calls) == details["folds"] * (2 if trained_acc > 1.0 else 1)
    # without a source there is nothing to keep: training's result, as before
    sim2, details2 = fit_on_shots(train, shots, config, seed=0)
    assert sim2 is other and "kept_source" not in details2


def test_a_lead_only_the_choosing_split_shows_does_not_replace_the_source(
        source_sim: Any, split: Any) -> None:
    """With a validation split, the trained weights are those of the epoch that validated best:
    on the strategies that chose them they lead by selection. Test double: a training that
    ranks its validation strategies perfectly and every other strategy backwards (a simulator
    that learned nothing but its selection). On its own validation split it leads the source
    with 95 % confidence; out of fold, trained anew without the fold, it loses, and the source
    is kept."""
    import numpy as np

    from autosync_transfer.adapt.training import ShotTraining, _gain_over_source, fit_on_shots

    n = min(40, split.available)
    assert n >= 30
    shots = split.shots(n, seed=0)
    scores = source_sim.with_launcher(shots.launcher).score(list(shots.strategies), shots.domain)
    noisy = np.argsort(np.argsort(scores)) + np.random.default_rng(1).normal(0, n / 2, n)
    shots = _relabeled(shots, 1.0 + np.argsort(np.argsort(noisy)))  # the source: mediocre
    label = dict(zip(map(id, shots.strategies), shots.runtimes_s))
    sid = dict(zip(map(id, shots.strategies), shots.strategy_ids))

    class Selected:
        def __init__(self, val: set[str]) -> None:
            self.val = val

        def with_launcher(self, launcher: Any) -> "Selected":
            return self

        def score(self, strategies: Any, domain: Any) -> Any:
            return np.array([label[id(x)] if sid[id(x)] in self.val else -label[id(x)]
                             for x in strategies])

    chosen: list[tuple[Selected, list[str]]] = []

    def train(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        val = sorted(s for s, where in dm.assignment.items() if where == "val")
        sim = Selected(set(val))
        if val:
            chosen.append((sim, val))
        return sim, {"epochs": 5, "best_epoch": 2, "best_val_pairwise_acc": 1.0,
                     "history": {"val_pairwise_acc": [0.5, 0.8, 1.0, 0.9, 0.9]}}

    config = ShotTraining(max_epochs=5, cv_below=20, val_fraction=0.4)
    held: dict[str, tuple[int, float]] = {}
    sim, details = fit_on_shots(train, shots, config, seed=0, source=source_sim, held_out=held)
    assert details["selection"].startswith("validation") and len(chosen) == 1
    in_sample = _gain_over_source(chosen, source_sim, shots, config, 0)
    assert in_sample[1] > 0, in_sample  # on the split that chose it: a confident-looking lead
    assert details["source_val_pairwise_acc"] < 1.0  # the source was behind on that split
    assert details["kept_source"] is True and sim is source_sim
    assert details["val_gain"] < 0 and not details["val_gain_low"] > 0
    assert details["gain_folds"] >= 2 and set(held) == set(shots.strategy_ids)

    # a training that has learned the order (it ranks every strategy right, in fold or not)
    # replaces the source; its gate's fold trainings are the held-out record, not trained twice
    calls: list[Any] = []

    class Learned(Selected):
        def score(self, strategies: Any, domain: Any) -> Any:
            return np.array([label[id(x)] for x in strategies])

    def learned(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        calls.append(dm)
        return Learned(set()), {"epochs": 5, "best_epoch": 2, "best_val_pairwise_acc": 1.0,
                                "history": {"val_pairwise_acc": [0.5, 0.8, 1.0, 0.9, 0.9]}}

    sim, details = fit_on_shots(learned, shots, config, seed=0, source=source_sim,
                                held_out=held)
    assert details["kept_source"] is False and isinstance(sim, Learned)
    assert details["val_gain_low"] > 0 and len(calls) == 1 + details["gain_folds"]
    assert {s: v for s, (_, v) in held.items()} == dict(zip(shots.strategy_ids, shots.runtimes_s))
    # where training kept its starting weights, nothing is judged: the source stays
    calls.clear()

    def stayed(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        calls.append(dm)
        return Learned(set()), {"epochs": 5, "best_epoch": -1, "best_val_pairwise_acc": 1.0,
                                "history": {"val_pairwise_acc": [0.5] * 5}}

    sim, details = fit_on_shots(stayed, shots, config, seed=0, source=source_sim)
    assert details["kept_source"] is True and sim is source_sim and len(calls) == 1
    # where the source's accuracy on the split is undefined (every label alike: no pair), a
    # trained lead is not taken as it is either: the gate finds no pair to gain on
    tied = _relabeled(shots, [1.0] * n)
    calls.clear()
    sim, details = fit_on_shots(learned, tied, config, seed=0, source=source_sim)
    assert details["source_val_pairwise_acc"] is None
    assert details["kept_source"] is True and sim is source_sim
    assert "val_gain" in details and len(calls) == 1 + details["gain_folds"]


def test_the_source_is_weighed_on_the_pairs_its_margin_counts(source_df: Any, split: Any) -> None:
    """A trained epoch's validation accuracy counts the pairs its loss margin counts; the source
    it is weighed against is scored on the same pairs. Labels the source orders right but for
    pairs 1 % apart, which it orders the other way: at its margin of 0.3 it ranks the split
    perfectly, though on every pair it does not."""
    import numpy as np

    from autosync_transfer.adapt.data import ShotDataModule
    from autosync_transfer.adapt.training import _source_accuracy
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.rankers.metrics import pairwise_accuracy
    from autosync_transfer.rankers.simulator import train_simulator

    source, _ = train_simulator("linear", strategy_table(source_df), seed=0, max_epochs=2,
                                patience=None, batch_size=16, hparams={"margin": 0.3})
    shots = split.shots(min(20, split.available), seed=0)
    scores = source.with_launcher(shots.launcher).score(list(shots.strategies), shots.domain)
    rank = np.argsort(np.argsort(scores))
    # pairs of neighbours share a level (levels 2x apart); within a pair, the one the source
    # puts first runs 1 % slower
    labels = [2.0 ** (r // 2) * (1.01 if r % 2 == 0 else 1.0) for r in rank]
    shots = _relabeled(shots, labels)
    assert pairwise_accuracy(scores, labels) < 0.95  # on every pair: the close ones wrong
    assert pairwise_accuracy(scores, labels, margin=0.3) == 1.0
    dm = ShotDataModule(shots, {s: "val" for s in shots.strategy_ids})
    assert _source_accuracy(source, dm) == 1.0


@pytest.mark.parametrize("n", [12, 24])  # cross-validation, validation split
def test_fine_tuning_replaces_the_source_where_it_ranks_the_shots_better_with_confidence(
        source_sim: Any, split: Any, n: int) -> None:
    """Shots labeled against the source's own order (it ranks every pair wrong): fine-tuning
    learns the order and replaces it, with the gain's lower bound above 0. The same fine-tuning
    on shots in the source's order keeps the source."""
    import numpy as np

    from autosync_transfer.adapt import FineTune, ShotTraining
    from autosync_transfer.adapt.data import evaluate_on

    shots = split.shots(n, seed=0)
    scores = source_sim.with_launcher(shots.launcher).score(list(shots.strategies), shots.domain)
    training = ShotTraining(max_epochs=40, patience=None, cv_below=20)
    reversed_ = _relabeled(shots, 1.0 + np.argsort(np.argsort(-np.asarray(scores))))
    out = FineTune("full", l2sp=0.0, lr=0.05, training=training).fit(source_sim, reversed_,
                                                                     seed=0)
    gain = "val_gain" if n >= 20 else "cv_gain"
    assert out.details["kept_source"] is False and out.simulator is not source_sim
    assert out.details[gain + "_low"] > 0.0 and out.details[gain] >= out.details[gain + "_low"]
    assert evaluate_on(source_sim, reversed_)["pairwise_accuracy"] == 0.0
    assert evaluate_on(out.simulator, reversed_)["pairwise_accuracy"] > 0.5
    same = _relabeled(shots, 1.0 + np.argsort(np.argsort(scores)))
    kept = FineTune("full", l2sp=0.0, lr=0.05, training=training).fit(source_sim, same, seed=0)
    assert kept.details["kept_source"] is True and kept.simulator is source_sim


def test_full_finetuning_is_pulled_toward_the_source_weights(split: Any) -> None:
    from autosync_transfer.adapt.data import ShotDataModule
    from autosync_transfer.adapt.training import finetune_full

    src = tiny_rnn_source()
    shots = split.shots(8, seed=0)

    def distance(l2sp: float) -> float:
        sim, out = finetune_full(src, ShotDataModule(shots), max_epochs=4, patience=None,
                                 seed=0, l2sp=l2sp, lr=0.05)
        assert out["epochs"] == 4 and len(out["history"]["train_loss"]) == 4
        a, b = src.state_dict(), sim.state_dict()
        return float(sum(((a[k] - b[k]) ** 2).sum() for k in a))

    free, held = distance(0.0), distance(50.0)
    assert free > 0 and held < free
    assert distance(0.0) == free  # seeded: the same weights


def test_head_finetuning_moves_only_the_head(split: Any) -> None:
    from autosync_transfer.adapt import FineTune

    src = tiny_rnn_source()
    # 3 shots: too few to validate, so the head is trained (no selection can keep the source)
    fitted = FineTune("head", training=small()).fit(src, split.shots(3, seed=0), seed=0)
    assert fitted.method == "finetune-head"
    before, after = src.state_dict(), fitted.simulator.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith("head.") for k in moved)


def test_multi_source_pretrains_on_the_other_domains(source_sim: Any, split: Any,
                                                     domains: Any, source_df: Any,
                                                     target_df: Any) -> None:
    import pandas as pd

    from autosync_transfer.adapt import adapt

    both = pd.concat([source_df, target_df], ignore_index=True)
    res = adapt(source_sim, domains[1], split, method="multi-source", shots=4, seed=0,
                pretrain_trials=both, training=small())
    assert res.method == "multi-source"
    assert res.details["adapted"]["pretrain_domains"] == [SOURCE]
    assert 0.0 <= res.metrics["adapted"]["pairwise_accuracy"] <= 1.0
    with pytest.raises(ConfigError, match="at least one domain other than 'ncf-B'"):
        adapt(source_sim, domains[1], split, method="multi-source", shots=4,
              pretrain_trials=target_df, training=small())
    # the fine-tuning's out-of-fold record is the adapter's, as for FineTune itself
    from autosync_transfer.adapt import FineTune, MultiSource

    shots = split.shots(8, seed=0)
    out = MultiSource(both, pretrain_epochs=2,
                      finetune=FineTune("full", training=small(), held_out=True)).fit(
        source_sim, shots, seed=0)
    assert out.held_out is not None and set(out.held_out) == set(shots.strategy_ids)


def test_from_scratch_needs_two_shots(split: Any) -> None:
    from autosync_transfer.adapt import FromScratch

    assert FromScratch("linear").fit(None, split.shots(1, seed=0)).simulator is None
    fitted = FromScratch("linear", training=small()).fit(None, split.shots(2, seed=0))
    assert fitted.simulator is not None and fitted.shots == 2


@pytest.mark.parametrize("kwargs,needle", [
    ({"method": "transfer", "shots": 5}, "unknown method 'transfer'"),
    ({"method": "finetune", "shots": 1}, "fine-tuning needs at least 2 target trials"),
    ({"method": "finetune", "shots": 999}, "shots=999 is more than"),
])
def test_bad_arguments(source_sim: Any, split: Any, domains: Any, kwargs: dict[str, Any],
                       needle: str) -> None:
    from autosync_transfer.adapt import adapt

    with pytest.raises(ConfigError, match=re.escape(needle)):
        adapt(source_sim, domains[1], split, training=small(), **kwargs)


def test_incompatible_feature_schema_and_weightless_sources(split: Any, domains: Any) -> None:
    from autosync_transfer.adapt import adapt
    from autosync_transfer.rankers.simulator import Simulator

    old = Simulator("analytical", {}, schema_version=0)
    with pytest.raises(ConfigError, match="incompatible feature schema"):
        adapt(old, domains[1], split, method="zero-shot")
    with pytest.raises(ConfigError, match="the analytical model \(no weights\)"):
        adapt(Simulator("analytical"), domains[1], split, method="finetune", shots=4)


# -- learning curve -------------------------------------------------------------------------------


def test_learning_curve_table_and_plot(source_sim: Any, split: Any, domains: Any,
                                       tmp_path: Any) -> None:
    from autosync_transfer.adapt import learning_curve
    from autosync_transfer.adapt.plots import learning_curve_plot

    curve = learning_curve(source_sim, domains[1], split, shots=(0, 4, 10, 500), seeds=2,
                           training=small())
    assert curve.shots == (0, 4, 10) and curve.skipped == (500,) and curve.seeds == (0, 1)
    assert len(curve.points) == 6
    rows = {r["shots"]: r for r in curve.table()}
    zero = curve.zero_shot["pairwise_accuracy"]
    assert rows[0]["adapted_mean"] == pytest.approx(zero) and rows[0]["adapted_std"] == 0.0
    assert math.isnan(rows[0]["scratch_mean"])
    for n in (4, 10):
        assert 0.0 <= rows[n]["adapted_mean"] <= 1.0 and rows[n]["adapted_std"] >= 0.0
        assert 0.0 <= rows[n]["scratch_mean"] <= 1.0 and rows[n]["seeds"] == 2
    assert curve.to_dict()["table"]["top1"][0]["shots"] == 0
    # the regret of the pick on the held-out strategies, per N, besides pairwise accuracy
    regrets = {r["shots"]: r for r in curve.table("regret")}
    assert regrets[0]["adapted_mean"] == pytest.approx(curve.zero_shot["regret"])
    for n in (4, 10):
        assert regrets[n]["adapted_mean"] >= 0.0 and regrets[n]["scratch_mean"] >= 0.0
    assert curve.to_dict()["table"]["regret"][1]["shots"] == 4
    png = learning_curve_plot(curve, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refit_trains_the_chosen_epochs_on_every_shot(split: Any) -> None:
    """With ``refit`` (the search's setting) the validation split only chooses the epochs: a
    second training runs that many epochs on all shots, with no validation strategy."""
    from autosync_transfer.adapt.training import ShotTraining, fit_on_shots
    from autosync_transfer.rankers.simulator import Simulator

    first, final = Simulator("analytical", {}, 1), Simulator("analytical", {}, 2)
    calls: list[tuple[int, int]] = []

    def train(dm: Any, max_epochs: int, patience: Any, seed: int) -> Any:
        calls.append((max_epochs, sum(v == "val" for v in dm.assignment.values())))
        return (first if len(calls) == 1 else final), {
            "epochs": 5, "best_epoch": 2, "best_val_pairwise_acc": 0.7,
            "history": {"val_pairwise_acc": [0.5, 0.6, 0.7, 0.6, 0.6]}}

    shots = split.shots(min(30, split.available), seed=0)
    sim, details = fit_on_shots(train, shots, ShotTraining(max_epochs=9, cv_below=20), seed=0)
    assert sim is first and len(calls) == 1 and "refit_epochs" not in details
    calls.clear()
    sim, details = fit_on_shots(train, shots, ShotTraining(max_epochs=9, cv_below=20, refit=True),
                                seed=0)
    assert sim is final and details["refit_epochs"] == 3
    assert calls[0][0] == 9 and calls[0][1] > 0 and calls[1] == (3, 0)


# -- guarded fine-tuning --------------------------------------------------------------------------


def _relabeled(shots: Any, runtimes: Any) -> Any:
    """The same target strategies with other runtimes (labels a test chooses)."""
    from autosync_transfer.adapt.data import TargetData

    return TargetData(shots.domain, shots.strategy_ids, shots.strategies,
                      tuple(float(r) for r in runtimes), shots.launcher)


@pytest.fixture(scope="module")
def misled_sources(source_df: Any) -> dict[str, Any]:
    """A linear and a residual simulator of ncf-A trained on runtimes the other way round from
    the step-time simulator's (a few epochs): their learned parts rank against the physics (the
    residual one has a weak prior)."""
    from autosync_transfer.dataset.loader import strategy_table
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.rankers.simulator import Simulator, train_simulator

    table = strategy_table(source_df)
    physics = Simulator("stepsim", launcher=str(table["launcher"].iloc[0]))
    table["runtime_s"] = 1.0 / physics.score(list(table["strategy"]), get_domain(SOURCE))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # epochs enough for the residual's learned part to validate above its prior with
        # confidence (an epoch replaces the prior only then)
        return {kind: train_simulator(kind, table, hparams=hp, seed=0, max_epochs=12,
                                      patience=None, batch_size=16)[0]
                for kind, hp in (("linear", None), ("residual", {"prior_scale": 0.1}))}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("n", [12, 24])  # cross-validation, validation split
def test_guarded_keeps_the_fine_tuned_source_when_it_validates_best(
        source_sim: Any, split: Any, n: int) -> None:
    import numpy as np

    from autosync_transfer.adapt.methods import Guarded

    shots = split.shots(n, seed=0)
    # with the shots' launcher: the physics (and the features) the shots are scored with
    scores = source_sim.with_launcher(shots.launcher).score(list(shots.strategies), shots.domain)
    # runtimes in the source's own order: nothing validates better than the source
    labeled = _relabeled(shots, 1.0 + np.argsort(np.argsort(scores)))
    out = Guarded(training=small()).fit(source_sim, labeled, seed=0)
    assert out.method == "guarded" and out.shots == n
    judged = out.details["shots_pairwise"]
    assert out.details["start"] == "source" and judged["source"] == 1.0
    assert judged["physics"] is not None and judged["physics"] <= 1.0
    assert out.simulator is not None and out.simulator.kind == source_sim.kind
    assert out.details["kept_source"] is True  # what fine-tuning reports
    low = out.details["physics_gain_low"]
    assert low is None or low <= 0
    # the kept source's own scores of every shot, each in one fold
    assert out.held_out is not None and set(out.held_out) == set(labeled.strategy_ids)


def test_a_lead_on_the_held_out_shots_is_a_gain_only_with_confidence(split: Any) -> None:
    """``paired_gain``: paired on the strategies both records scored in the same fold."""
    from autosync_transfer.adapt.training import paired_gain

    shots = split.shots(20, seed=0)
    ids, y = list(shots.strategy_ids), list(shots.runtimes_s)
    right = {s: (i % 4, r) for i, (s, r) in enumerate(zip(ids, y))}  # scores: predicted runtimes
    wrong = {s: (f, -v) for s, (f, v) in right.items()}  # every pair the other way round
    gain, low = paired_gain(right, wrong, shots, margin=0.0, seed=0)
    assert gain == pytest.approx(1.0) and low > 0
    # one pair of one fold won, the rest tied: a lead, not a confident one
    fold0 = [s for s in ids if right[s][0] == 0]
    a, b = sorted(fold0[:2], key=lambda s: y[ids.index(s)])
    one_off = dict(right)
    one_off[a], one_off[b] = (0, right[b][1]), (0, right[a][1])
    gain, low = paired_gain(right, one_off, shots, margin=0.0, seed=0)
    assert gain > 0 and not low > 0
    # strategies scored in different folds never pair: nothing to compare
    moved = {s: (f + 1, v) for s, (f, v) in wrong.items()}
    assert all(math.isnan(v) for v in paired_gain(right, moved, shots, margin=0.0, seed=0))
    # a margin larger than every label gap leaves no pair either
    assert all(math.isnan(v) for v in paired_gain(right, wrong, shots, margin=1e9, seed=0))


@pytest.mark.parametrize("which", ["linear", "residual"])
def test_guarded_drops_the_learned_part_when_the_physics_validates_better(
        misled_sources: Any, split: Any, which: str) -> None:
    """12 shots: 5-fold cross-validation, every shot validated once (a validation split of a
    few strategies can miss what the source gets wrong)."""
    from autosync_transfer.adapt.methods import Guarded
    from autosync_transfer.rankers.metrics import pairwise_accuracy
    from autosync_transfer.rankers.simulator import Simulator

    source = misled_sources[which]
    shots = split.shots(12, seed=0)
    strategies = list(shots.strategies)
    # runtimes the step simulator predicts: the target's physics ranks them perfectly
    physics = Simulator("stepsim", launcher=shots.launcher).score(strategies, shots.domain)
    labeled = _relabeled(shots, physics)
    misled = source.with_launcher(shots.launcher).score(strategies, shots.domain)
    assert pairwise_accuracy(misled, labeled.runtimes_s) < 1.0
    out = Guarded(training=small()).fit(source, labeled, seed=0)
    judged = out.details["shots_pairwise"]
    assert out.details["start"] == "physics" and judged["physics"] > judged["source"]
    assert out.details["physics_gain_low"] > 0  # a confident gain on the held-out shots
    assert out.simulator is not None and out.simulator.kind == "residual"
    assert out.simulator is not source
    # the source's architecture for a residual source, the defaults otherwise
    assert out.simulator.hparams.get("prior_scale", 10.0) == (0.1 if which == "residual"
                                                               else 10.0)
    got = out.simulator.with_launcher(shots.launcher).score(strategies, shots.domain)
    assert pairwise_accuracy(got, labeled.runtimes_s) >= 0.9


def test_guarded_with_too_few_shots_to_judge_fine_tunes(source_sim: Any, split: Any) -> None:
    from autosync_transfer.adapt.methods import Guarded

    out = Guarded(min_shots=5, training=small()).fit(source_sim, split.shots(3, seed=0), seed=0)
    assert out.details["start"] == "source" and "fewer than 5" in out.details["reason"]
    assert "shots_pairwise" not in out.details
    zero = Guarded(training=small()).fit(source_sim, split.shots(0, seed=0), seed=0)
    assert zero.simulator is source_sim and zero.shots == 0
    with pytest.raises(ConfigError, match="min_shots must be >= 2"):
        Guarded(min_shots=1)
    from autosync_transfer.rankers.simulator import Simulator

    with pytest.raises(ConfigError, match="the analytical model \(no weights\)"):
        Guarded().fit(Simulator("analytical"), split.shots(8, seed=0), seed=0)


@pytest.mark.parametrize("field,value,message", [
    ("start_margin", -0.05, "start_margin must be >= 0, got -0.05"),
    ("start_margin", math.nan, "start_margin must be >= 0, got nan"),
    ("max_epochs", 0, "max_epochs and few_epochs must be >= 1"),
    ("val_fraction", 1.0, "val_fraction must be in (0, 1), got 1.0"),
    ("cv_below", 3, "cv_below must be >= 4"),
])
def test_shot_training_names_the_bad_field(field: str, value: Any, message: str) -> None:
    from autosync_transfer.adapt import ShotTraining

    with pytest.raises(ConfigError, match=re.escape(message)):
        ShotTraining(**{field: value})
    assert ShotTraining(start_margin=0.1).start_margin == 0.1
