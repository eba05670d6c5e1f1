"""Repeat runs of a store's strategies: stratified choice, resolved pairs, agreement, consensus
labels, the ranking figures on them, and a real run that is interrupted and continued."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from autosync_transfer._files import append_line
from autosync_transfer.dataset.repeat import (FIRST_RUN, META_PROCESSOR_KEY, REPEAT_SUFFIX,
                                              find_repeat_file, load_repeatability, measure_run,
                                              ranking_figures, repeat_path, repeat_processors,
                                              store_processor, stratified)
from autosync_transfer.errors import ConfigError


def test_repeat_file_sits_beside_the_store_and_is_not_a_trial_file(tmp_path: Path) -> None:
    from autosync_transfer.dataset.loader import dataset_files

    store = tmp_path / "bert-B.jsonl"
    assert repeat_path(store) == tmp_path / "bert-B.repeat.ndjson"
    store.write_text("")
    repeat_path(store).write_text("")
    assert dataset_files(tmp_path) == [store]


def test_stratified_spans_the_range() -> None:
    runtimes = {f"s{i:02d}": 1.0 + i / 10 for i in range(40)}
    picked = stratified(runtimes, 5)
    assert picked[0] == "s00" and picked[-1] == "s39" and len(picked) == 5
    assert picked == sorted(picked, key=runtimes.get)
    assert stratified(runtimes, 100) == sorted(runtimes)
    assert stratified({"a": 2.0, "b": 1.0}, 1) == ["b"]


def _write_run(path: Path, run: str, truth: dict[str, float], rounds: int, noise: float,
               seed: int, drift: float = 0.0, missing: tuple = (),
               processor: str | None = None, domain: str = "d") -> None:
    rng = np.random.default_rng(seed)
    ids = sorted(truth)
    machine = {} if processor is None else {"machine": {"processor": processor}}
    append_line(path, json.dumps({"kind": "plan", "run": run, "domain": domain, "strategy_ids": ids,
                                  "orders": [ids] * rounds, "protocol": {"iters": 3},
                                  "launcher": "local", "seed": seed, "created": "x",
                                  **machine}), "t")
    for k in range(rounds):
        level = 1.0 + drift * k  # the machine drifts from round to round
        for s in ids:
            if (k, s) in missing:
                continue
            m = truth[s] * level * math.exp(noise * rng.standard_normal())
            append_line(path, json.dumps({"kind": "measurement", "run": run, "round": k,
                                          "strategy_id": s, "status": "ok", "median_s": m,
                                          "wall_s": 2.0, "cpu": {}}), "t")


TRUTH = {"a": 1.00, "b": 1.50, "c": 1.52, "d": 2.50}


def test_resolved_pairs_agreement_and_consensus(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    _write_run(path, "r1", TRUTH, 3, 0.02, seed=1, drift=0.25)
    _write_run(path, "r2", TRUTH, 3, 0.02, seed=2, drift=-0.2, missing=((1, "d"),))
    rep = load_repeatability(store, "d")
    assert rep is not None and rep.runs == ["r1", "r2"]
    assert rep.complete_runs() == ["r1"]  # r2 lacks one measurement
    res = rep.resolved(["r1"])
    # 50 % apart under 25 % drift per round: resolved; 1.3 % apart at 2 % noise: not
    assert res[("a", "b")] == 1 and res[("a", "d")] == 1 and res[("b", "d")] == 1
    assert ("b", "c") not in res
    pooled = rep.resolved()
    assert set(res) <= set(pooled)
    agree, both = rep.agreement("r1", "r2")
    assert agree == 1.0 and both == 2  # d has only two rounds in r2: never resolved there
    labels = rep.consensus()
    assert sorted(labels, key=labels.get)[0] == "a" and sorted(labels, key=labels.get)[-1] == "d"
    assert labels["d"] / labels["a"] == pytest.approx(2.5, rel=0.05)  # drift cancelled
    ceiling, pairs = rep.noise_ceiling("r1", "r2")
    assert pairs == 6 and ceiling >= 5 / 6
    summary = rep.summary()
    assert summary["complete_runs"] == ["r1"] and summary["machine_s"] == pytest.approx(46.0)


def test_a_pair_one_run_orders_the_other_way_is_not_resolved_by_pooling(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    # run r1: x 10 % faster than y in every round; r2 (another machine state): y 1 % faster
    _write_run(path, "r1", {"x": 1.00, "y": 1.10, "z": 2.0}, 6, 0.002, seed=4)
    _write_run(path, "r2", {"x": 1.01, "y": 1.00, "z": 2.0}, 3, 0.002, seed=5)
    rep = load_repeatability(store, "d")
    assert rep.resolved(["r1"])[("x", "y")] == 1 and rep.resolved(["r2"])[("x", "y")] == -1
    from autosync_transfer.measure.stats import paired_speedup

    series = rep._rounds(["r1", "r2"])
    cells = sorted(series["x"])
    pooled = paired_speedup([series["x"][k] for k in cells], [series["y"][k] for k in cells])
    assert pooled.low > 1.0  # the nine pooled rounds alone would call x faster
    res = rep.resolved()
    assert ("x", "y") not in res  # but r2 orders it the other way
    assert res[("x", "z")] == 1 and res[("y", "z")] == 1  # every run agrees on these


def test_a_wider_run_pools_with_earlier_ones_pair_by_pair(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    wide = {**TRUTH, "e": 3.2, "f": 0.6}
    # r1 and r2 measure the four strategies of TRUTH; r3, later and at another level, all six
    _write_run(path, "r1", TRUTH, 3, 0.01, seed=1)
    _write_run(path, "r2", TRUTH, 3, 0.01, seed=2)
    _write_run(path, "r3", {s: 1.3 * t for s, t in wide.items()}, 3, 0.01, seed=3)
    rep = load_repeatability(store, "d")
    assert rep.complete_runs() == ["r1", "r2", "r3"]
    assert rep.strategy_ids() == sorted(wide)  # every strategy a run measured, not the four
    series = rep._rounds(rep.runs)
    assert len(series["a"]) == 9 and len(series["e"]) == 3
    res = rep.resolved()
    # a new strategy is judged on r3's rounds alone; the old pairs on all nine
    assert res[("a", "e")] == 1 and res[("a", "f")] == -1 and res[("e", "f")] == -1
    assert res[("a", "b")] == 1 and res[("b", "d")] == 1
    labels = rep.consensus()
    # one scale for all six: r3's level is taken out by its rounds' effects
    assert sorted(labels, key=labels.get) == sorted(wide, key=wide.get)
    assert labels["e"] / labels["a"] == pytest.approx(3.2, rel=0.05)
    figs = ranking_figures(dict(wide), rep)
    assert figs["pairs"] == 15 and figs["pairwise_resolved"] == 1.0
    assert rep.summary()["strategies"] == 6
    # the first two runs alone still give the four
    assert rep.strategy_ids(["r1", "r2"]) == sorted(TRUTH)


def test_runs_of_disjoint_strategy_sets_are_not_put_on_one_scale(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    _write_run(path, "r1", {"a": 1.0, "b": 2.0, "c": 3.0}, 3, 0.01, seed=1)
    _write_run(path, "r2", {"x": 0.5, "y": 0.7}, 3, 0.01, seed=2)  # no strategy in common
    rep = load_repeatability(store, "d")
    assert rep.strategy_ids() == ["a", "b", "c"]  # the larger linked group
    assert set(rep.consensus()) == {"a", "b", "c"}
    assert rep.strategy_ids(["r2"]) == ["x", "y"]


def test_runs_that_overlap_in_part_compare_only_the_pairs_measured_together(
        tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    # r1: a, b, c; r2, a third slower: c, d, e; linked through c alone
    _write_run(path, "r1", {"a": 1.0, "b": 1.6, "c": 2.4}, 4, 0.005, seed=1)
    _write_run(path, "r2", {"c": 2.4 * 1.33, "d": 3.0 * 1.33, "e": 0.7 * 1.33}, 4, 0.005, seed=2)
    # r3 plans a and x: a fails in every round, x runs; a, without a time in a run that
    # planned it, is left out (as a failed trial has no time), x is linked to nothing
    append_line(path, json.dumps({"kind": "plan", "run": "r3", "domain": "d",
                                  "strategy_ids": ["a", "x"], "orders": [["a", "x"]] * 3,
                                  "protocol": {}, "launcher": "local", "seed": 0,
                                  "created": "x"}), "t")
    for k in range(3):
        for sid, status in (("a", "failed"), ("x", "ok")):
            append_line(path, json.dumps({"kind": "measurement", "run": "r3", "round": k,
                                          "strategy_id": sid, "status": status,
                                          "median_s": 0.1 if status == "ok" else None,
                                          "wall_s": 1.0}), "t")
    rep = load_repeatability(store, "d")
    assert rep.strategy_ids(["r1", "r2", "r3"]) == ["b", "c", "d", "e"]
    assert rep.strategy_ids(["r1", "r2"]) == ["a", "b", "c", "d", "e"]
    assert rep.runs == ["r1", "r2", "r3"]
    rep.plans.pop("r3")  # the first two runs alone, as below
    assert rep.comparable_pairs() == 3 + 3  # within r1, within r2; (a, d) shares no round
    res = rep.resolved()
    assert set(res) == {("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("c", "e"), ("d", "e")}
    labels = rep.consensus()  # one scale through c: each run's level is its rounds' effect
    assert labels["d"] / labels["a"] == pytest.approx(3.0, rel=0.02)
    assert labels["e"] / labels["b"] == pytest.approx(0.7 / 1.6, rel=0.02)
    summary = rep.summary()
    assert summary["pairs"] == 6 and summary["resolved_pairs"] == 6
    assert summary["run_strategies"] == {"r1": 3, "r2": 3}


def _failed(path: Path, run: str, round_: int, sid: str) -> None:
    append_line(path, json.dumps({"kind": "measurement", "run": run, "round": round_,
                                  "strategy_id": sid, "status": "failed", "median_s": None,
                                  "wall_s": 1.0}), "t")


def test_a_pair_measured_together_in_fewer_than_min_rounds_is_not_compared(
        tmp_path: Path) -> None:
    from autosync_transfer.dataset.repeat import MIN_ROUNDS

    store = tmp_path / "d.jsonl"
    # three rounds, b's first one lost: b shares two rounds with every other strategy, far
    # apart as they are; the other pairs share three
    assert MIN_ROUNDS == 3
    _write_run(repeat_path(store), "r1", {"a": 1.0, "b": 3.0, "c": 5.0, "d": 9.0}, 3, 0.005,
               seed=4, missing=((0, "b"),))
    _failed(repeat_path(store), "r1", 0, "b")
    rep = load_repeatability(store, "d")
    assert rep.complete_runs() == ["r1"]
    assert rep.strategy_ids() == ["a", "b", "c", "d"]  # b was measured in the run
    assert rep.comparable_pairs() == 3
    assert set(rep.resolved()) == {("a", "c"), ("a", "d"), ("c", "d")}
    assert rep.summary()["pairs"] == 3
    # a fourth round gives b its third shared round with each: every pair compares
    _write_run(repeat_path(tmp_path / "e.jsonl"), "r1", {"a": 1.0, "b": 3.0, "c": 5.0, "d": 9.0},
               4, 0.005, seed=4, missing=((0, "b"),))
    _failed(repeat_path(tmp_path / "e.jsonl"), "r1", 0, "b")
    rep = load_repeatability(tmp_path / "e.jsonl", "d")
    assert rep.comparable_pairs() == 6 and len(rep.resolved()) == 6


def test_ranking_figures_count_resolved_pairs_and_regret(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    _write_run(repeat_path(store), "r1", TRUTH, 4, 0.01, seed=3)
    rep = load_repeatability(store, "d")
    perfect = ranking_figures(dict(TRUTH), rep)
    assert perfect["pairs"] == 6 and perfect["pairwise_resolved"] == 1.0
    assert perfect["top1_regret"] == pytest.approx(0.0)
    backwards = ranking_figures({s: -t for s, t in TRUTH.items()}, rep)
    assert backwards["pairwise_resolved"] == 0.0 and backwards["pick"] == "d"
    assert backwards["top1_regret"] == pytest.approx(1.5, rel=0.05)
    # a simulator that only confuses the unresolved pair loses nothing on resolved pairs
    swapped = ranking_figures({**TRUTH, "b": 1.53}, rep)
    assert swapped["pairwise_resolved"] == 1.0
    assert swapped["resolved_pairs"] == backwards["resolved_pairs"] == perfect["resolved_pairs"]
    # every resample orders every pair alike: the interval is the point
    assert (perfect["pairwise_resolved_low"], perfect["pairwise_resolved_high"]) == (1.0, 1.0)
    assert (backwards["pairwise_resolved_low"], backwards["pairwise_resolved_high"]) == (0.0, 0.0)


def test_folded_predictions_are_judged_within_their_folds(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    truth = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0, "f": 6.0}
    _write_run(repeat_path(store), "r1", truth, 4, 0.005, seed=5)
    rep = load_repeatability(store, "d")
    # two simulators, each right on its own fold, on scales that disagree across folds
    pred = {"a": 10.0, "c": 11.0, "e": 12.0, "b": 1.0, "d": 2.0, "f": 3.0}
    groups = {"a": 0, "c": 0, "e": 0, "b": 1, "d": 1, "f": 1}
    fig = ranking_figures(pred, rep, groups=groups)
    assert fig["pairs"] == fig["resolved_pairs"] == 6 and fig["pairwise_resolved"] == 1.0
    assert math.isnan(fig["top1_regret"]) and math.isnan(fig["top1_regret_resolved"])
    assert ranking_figures(pred, rep)["pairwise_resolved"] < 0.8  # across folds: wrong


def test_the_resolved_figure_carries_its_interval_over_strategies() -> None:
    from autosync_transfer.dataset.repeat import resolved_interval

    ids = [f"s{i:02d}" for i in range(20)]
    truth = {s: 1.0 + 0.1 * i for i, s in enumerate(ids)}
    resolved = {(a, b): 1 for a, b in itertools.combinations(ids, 2)}  # ids sort by speed
    # one strategy predicted slowest: its 19 pairs wrong, the other 171 right
    off = {**truth, "s00": 100.0}
    point = 171 / 190
    low, high = resolved_interval(off, resolved)
    assert 0.6 < low < point < high <= 1.0
    # the interval narrows with the number of strategies: 40 strategies, one misplaced
    ids40 = [f"t{i:02d}" for i in range(40)]
    res40 = {(a, b): 1 for a, b in itertools.combinations(ids40, 2)}
    off40 = {**{s: 1.0 + 0.1 * i for i, s in enumerate(ids40)}, "t00": 100.0}
    low40, high40 = resolved_interval(off40, res40)
    assert high40 - low40 < high - low
    # paired against a baseline: the gain over it, bounded; against itself exactly nothing
    gain = resolved_interval(truth, resolved, baseline=off)
    # one strategy of 20 misplaced: a gain no resample reverses, but not one away from 0
    assert gain[0] == 0.0 and 19 / 190 < gain[1] <= 0.4
    assert resolved_interval(off, resolved, baseline=off) == (0.0, 0.0)
    # seeded: the same interval twice; nothing resolved: no interval
    assert resolved_interval(off, resolved) == (low, high)
    assert all(math.isnan(v) for v in resolved_interval(truth, {}))


def test_regret_against_the_confidently_best_counts_only_resolved_picks(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    truth = {"a": 1.000, "a2": 1.001, "b": 1.5}  # a and a2 cannot be told apart
    _write_run(repeat_path(store), "r1", truth, 4, 0.01, seed=3)
    rep = load_repeatability(store, "d")
    assert ("a", "a2") not in rep.resolved() and rep.resolved()[("a", "b")] == 1
    twin = ranking_figures({"a": 2.0, "a2": 1.0, "b": 3.0}, rep)  # picks a2
    assert twin["pick"] == "a2" and not twin["pick_resolved_slower"]
    assert twin["top1_regret_resolved"] == 0.0
    assert twin["top1_regret"] == pytest.approx(0.0, abs=0.02)
    slow = ranking_figures({"a": 2.0, "a2": 3.0, "b": 1.0}, rep)  # picks b, 50 % slower
    assert slow["pick"] == "b" and slow["pick_resolved_slower"]
    assert slow["top1_regret_resolved"] == slow["top1_regret"] == pytest.approx(0.5, rel=0.05)
    right = ranking_figures(dict(truth), rep)
    assert right["top1_regret_resolved"] == 0.0 and not right["pick_resolved_slower"]


def test_disturbed_measurements_are_not_labels(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    _write_run(path, "r1", TRUTH, 3, 0.01, seed=4)
    append_line(path, json.dumps({"kind": "measurement", "run": "r1", "round": 0,
                                  "strategy_id": "a", "status": "ok", "median_s": 99.0,
                                  "wall_s": 1.0, "cpu": {"disturbed": True}}), "t")
    rep = load_repeatability(store, "d")
    assert rep.levels["r1"]["a"][0] < 2.0
    assert load_repeatability(tmp_path / "none.jsonl") is None


def _ncf_store(tmp_path: Path, n: int) -> tuple:
    """A two-node NCF domain and a store of ``n`` synthetic trials of it."""
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.domains.catalog import get_model
    from autosync_transfer.domains.cluster import Cluster, Node
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.testing.synthetic import synthetic_records

    cluster = Cluster(name="r2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.89.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    domain = Domain(name="ncf-r2x1", model=get_model("ncf"), cluster=cluster)
    store = tmp_path / "ncf-r2x1.jsonl"
    ts = TrialStore(store)
    records = synthetic_records(domain, n, 0)
    for r in records:
        ts.append(r)
    return domain, store, sorted({r.strategy_id for r in records})


def test_repeat_evaluation_scores_the_re_measured_strategies_outside_the_shots(
        tmp_path: Path) -> None:
    from autosync_transfer.dataset.repeat import repeat_evaluation

    domain, store, ids = _ncf_store(tmp_path, 8)
    truth = {s: 1.0 + 0.2 * i for i, s in enumerate(ids[:5])}
    _write_run(repeat_path(store), "r1", truth, 4, 0.01, seed=9, domain=domain.name)

    class Backwards:  # predicts the slowest fastest
        def score(self, strategies, dom):  # noqa: ANN001, ANN202
            assert dom is domain
            return [-truth[s.id] for s in strategies]

    got = repeat_evaluation(Backwards(), domain, store, exclude=[ids[0]])
    assert got["strategies"] == 4 and got["pairs"] == 6 and got["pairwise_resolved"] == 0.0
    assert got["pairwise_resolved_low"] == got["pairwise_resolved_high"] == 0.0
    assert got["pick"] == ids[4] and got["best"] == ids[1] and got["pick_resolved_slower"]
    assert got["top1_regret_resolved"] == got["top1_regret"] == pytest.approx(1.8 / 1.2 - 1,
                                                                              rel=0.05)
    (tmp_path / "empty").mkdir()
    assert repeat_evaluation(Backwards(), domain, tmp_path / "empty") is None


def test_a_run_is_measured_for_real_interrupted_and_continued(tmp_path: Path) -> None:
    domain, store, _ = _ncf_store(tmp_path, 6)
    seen: list[str] = []

    def stop_after_two(msg: str) -> None:
        seen.append(msg)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        measure_run(store, domain, run="r1", n=3, rounds=2, launcher="local",
                    max_foreign_cpu=1.0, progress=stop_after_two)
    rows = [json.loads(x) for x in repeat_path(store).read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["plan", "measurement", "measurement"]
    plan = rows[0]
    assert len(plan["strategy_ids"]) == 3 and len(plan["orders"]) == 2
    assert all(sorted(o) == sorted(plan["strategy_ids"]) for o in plan["orders"])
    measure_run(store, domain, run="r1", n=3, rounds=2, launcher="local", max_foreign_cpu=1.0)
    rows = [json.loads(x) for x in repeat_path(store).read_text().splitlines()]
    got = [(r["round"], r["strategy_id"]) for r in rows if r["kind"] == "measurement"]
    assert len(got) == len(set(got)) == 6  # nothing measured twice, nothing left out
    assert all(r["status"] == "ok" and r["median_s"] > 0 for r in rows[1:])
    rep = load_repeatability(store, domain.name)
    assert rep.complete_runs() == ["r1"] and len(rep.consensus()) == 3


def test_runs_of_two_machine_types_are_never_pooled(tmp_path: Path) -> None:
    store = tmp_path / "d.jsonl"
    path = repeat_path(store)
    _write_run(path, "r1", TRUTH, 3, 0.01, seed=5, processor="AMD EPYC")
    # another machine type orders b and d the other way round
    _write_run(path, "x1", {**TRUTH, "b": 3.0}, 3, 0.01, seed=6, processor="Intel Xeon")
    _write_run(path, "r2", TRUTH, 3, 0.01, seed=7, processor="AMD EPYC")
    _write_run(path, "u1", TRUTH, 3, 0.01, seed=8)  # a run that did not record its machine
    assert repeat_processors(store, "d") == ["AMD EPYC", "Intel Xeon", None]
    assert load_repeatability(store, "d", processor=None).runs == ["u1"]
    first = load_repeatability(store, "d")  # default: the machine type of the first run
    assert first.runs == ["r1", "r2"] and first.processor == "AMD EPYC"
    assert first.resolved()[("b", "d")] == 1
    other = load_repeatability(store, "d", processor="Intel Xeon")
    assert other.runs == ["x1"] and other.summary()["processor"] == "Intel Xeon"
    assert other.resolved()[("b", "d")] == -1
    assert other.summary()["machine_s"] == pytest.approx(24.0)  # x1's measurements only
    assert load_repeatability(store, "d", processor="ARM") is None


def test_a_twin_store_is_judged_by_the_runs_of_its_own_machine_type(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped"
    twins = tmp_path / "twins"
    shipped.mkdir()
    twins.mkdir()
    store = shipped / "d.jsonl"
    store.write_text(json.dumps({"id": "d/a", "machine": {"hostname": "vm"}}) + "\n")
    twin = twins / "d.jsonl"
    twin.write_text(json.dumps({"id": "d/a", "machine": {"hostname": "vm"}}) + "\n"
                    + json.dumps({"id": "d/b", "machine": {"processor": "Intel Xeon"}}) + "\n")
    path = repeat_path(store)
    _write_run(path, "r1", TRUTH, 3, 0.01, seed=5, processor="AMD EPYC")
    _write_run(path, "x1", {**TRUTH, "b": 3.0}, 3, 0.01, seed=6, processor="Intel Xeon")
    assert store_processor(store) is None and store_processor(twin) == "Intel Xeon"
    assert store_processor(twins / "missing.jsonl") is None
    # the shipped store records no machine type: the file's first run judges it
    assert load_repeatability(store, "d").runs == ["r1"]
    # nothing beside the twin; the repeats folders are searched, its own machine type picks
    assert find_repeat_file(twin, "d") is None and load_repeatability(twin, "d") is None
    assert find_repeat_file(twin, "d", [twins, shipped]) == path
    rep = load_repeatability(twin, "d", repeats=[shipped])
    assert rep.runs == ["x1"] and rep.resolved()[("b", "d")] == -1
    assert load_repeatability(twin, "d", repeats=[shipped], processor=FIRST_RUN).runs == ["r1"]
    # a repeat file beside the twin comes first
    _write_run(repeat_path(twin), "x2", TRUTH, 3, 0.01, seed=7, processor="Intel Xeon")
    assert load_repeatability(twin, "d", repeats=[shipped]).runs == ["x2"]


def test_a_store_whose_trials_predate_the_machine_type_is_judged_by_its_metadata(
        tmp_path: Path) -> None:
    from autosync_transfer.dataset.store import TrialStore

    store = tmp_path / "d.jsonl"
    store.write_text(json.dumps({"id": "d/a", "machine": {"hostname": "vm"}}) + "\n")
    path = repeat_path(store)
    # another machine type's runs come first in the file
    _write_run(path, "x1", {**TRUTH, "b": 3.0}, 3, 0.01, seed=6, processor="Intel Xeon")
    _write_run(path, "r1", TRUTH, 3, 0.01, seed=5, processor="AMD EPYC")
    assert store_processor(store) is None and load_repeatability(store, "d").runs == ["x1"]
    TrialStore(store).write_meta({META_PROCESSOR_KEY: "AMD EPYC"})
    assert store_processor(store) == "AMD EPYC"
    rep = load_repeatability(store, "d")
    assert rep.runs == ["r1"] and rep.resolved()[("b", "d")] == 1
    # a trial that records its machine type outranks the metadata
    with store.open("a") as f:
        f.write(json.dumps({"id": "d/b", "machine": {"processor": "Intel Xeon"}}) + "\n")
    assert store_processor(store) == "Intel Xeon"
    assert load_repeatability(store, "d").runs == ["x1"]
    # metadata that is not a machine type is ignored
    TrialStore(store.with_name("e.jsonl")).write_meta({META_PROCESSOR_KEY: 3})
    store.with_name("e.jsonl").write_text("")
    assert store_processor(store.with_name("e.jsonl")) is None


def test_a_run_is_not_continued_on_another_machine_type(tmp_path: Path) -> None:
    from autosync_transfer.errors import ConfigError

    domain, store, ids = _ncf_store(tmp_path, 4)
    ids = ids[:2]
    append_line(repeat_path(store), json.dumps({
        "kind": "plan", "run": "r1", "domain": domain.name, "strategy_ids": ids,
        "orders": [ids], "protocol": {"iters": 3, "warmup": 1}, "launcher": "local", "seed": 0,
        "created": "x", "machine": {"processor": "Some Other CPU"}}), "t")
    with pytest.raises(ConfigError, match="'r1' was measured on 'Some Other CPU'"):
        measure_run(store, domain, run="r1", n=2, rounds=1, launcher="local")
    assert len(repeat_path(store).read_text().splitlines()) == 1  # nothing written


def test_the_repeat_script_refuses_to_widen_a_run_and_a_bad_size() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = root / "benchmarks" / "repeatability.py"
    before = repeat_path(root / "datasets/trials/ncf-A.jsonl").read_bytes()
    for size, says in (("12", "run 'r1' of ncf-A exists with 30 strategies"),
                       ("all", "run 'r1' of ncf-A exists with 30 strategies"),
                       ("0", "--strategies must be a positive count or 'all', got '0'"),
                       ("many", "got 'many'")):
        out = subprocess.run([sys.executable, str(script), "--run", "r1", "--domains", "ncf-A",
                              "--strategies", size], capture_output=True, text=True, cwd=root,
                             timeout=120)
        assert out.returncode == 2, out.stderr
        assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, str(script), "--domains", "ncf-A", "--strategies", "5"],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 2 and "give --run too" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert repeat_path(root / "datasets/trials/ncf-A.jsonl").read_bytes() == before


def test_the_physics_of_a_run_is_measured_beside_it_and_kept(tmp_path: Path) -> None:
    from autosync_transfer.dataset.repeat import (PHYSICS_SUFFIX, measure_run_physics,
                                                  run_physics, run_physics_dir)
    from autosync_transfer.dataset.store import machine_info

    domain, store, ids = _ncf_store(tmp_path, 4)
    assert run_physics(store, domain, "r1") is None
    d = run_physics_dir(store, "r1")
    assert d == tmp_path / f"ncf-r2x1{PHYSICS_SUFFIX}" / "r1"
    # what an attempt that stopped before its first round left is replaced, not kept
    (d / "calibrations").mkdir(parents=True)
    (d / "calibrations" / "stale.json").write_text("{}")
    said: list[str] = []
    assert measure_run_physics(store, domain, "r1", launcher="local", progress=said.append) == d
    assert [m.split(":")[1].split()[0] for m in said] == ["calibrated", "profiled"]
    files = sorted(p.relative_to(d) for p in d.rglob("*.json"))
    assert [p.parts[0] for p in files] == ["calibrations", "profiles"]
    # the run's physics is read from beside its repeat file: none before the run exists
    assert run_physics(store, domain, "r1") is None
    here = machine_info().get("processor")
    truth = {s: 1.0 + 0.1 * i for i, s in enumerate(ids)}
    _write_run(repeat_path(store), "r1", truth, 3, 0.01, seed=1, processor=here,
               domain=domain.name)
    prof, cal = run_physics(store, domain, "r1")
    assert prof.fingerprint == domain.model.fingerprint
    assert cal.fingerprint == domain.cluster.fingerprint and cal.launcher == "local"
    # measured again (a run continued): the physics it started with is kept, nothing is added
    said.clear()
    measure_run_physics(store, domain, "r1", launcher="local", progress=said.append)
    assert not said and sorted(p.relative_to(d) for p in d.rglob("*.json")) == files
    # a run that started without complete physics, or on another machine type, is refused
    _write_run(repeat_path(store), "r2", truth, 3, 0.01, seed=2, processor=here,
               domain=domain.name)
    with pytest.raises(ConfigError, match="'r2' of ncf-r2x1 was started without complete"):
        measure_run_physics(store, domain, "r2", launcher="local")
    _write_run(repeat_path(store), "r3", truth, 3, 0.01, seed=3, processor="Other CPU",
               domain=domain.name)
    with pytest.raises(ConfigError, match="'r3' was measured on 'Other CPU'"):
        measure_run_physics(store, domain, "r3", launcher="local")
    assert not run_physics_dir(store, "r2").exists() and not run_physics_dir(store, "r3").exists()
    # physics of this machine type beside a run of another is not that run's
    import shutil

    shutil.copytree(d, run_physics_dir(store, "r3"))
    assert run_physics(store, domain, "r3") is None
    # a twin's runs whose repeat file sits in a `repeats` folder find their physics beside it
    twin = tmp_path / "twin"
    twin.mkdir()
    d.parent.rename(twin / f"{domain.name}{PHYSICS_SUFFIX}")
    repeat_path(store).rename(twin / f"{domain.name}{REPEAT_SUFFIX}")
    assert run_physics(store, domain, "r1") is None
    got = run_physics(store, domain, "r1", repeats=[twin])
    assert got is not None and got[1].created_at == cal.created_at


def test_the_repeat_script_gives_physics_only_to_a_run_of_its_hour() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = root / "benchmarks" / "repeatability.py"
    store = root / "datasets/trials/ncf-A.jsonl"
    before = repeat_path(store).read_bytes()
    out = subprocess.run([sys.executable, str(script), "--run", "r1", "--domains", "ncf-A",
                          "--physics"], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "run 'r1' of ncf-A was started without physics" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, str(script), "--physics"], capture_output=True,
                         text=True, cwd=root, timeout=120)
    assert out.returncode == 2 and "give --run too" in out.stderr
    assert repeat_path(store).read_bytes() == before
    assert not (root / "datasets/trials/ncf-A.physics/r1").exists()


def test_the_run_physics_footer_names_its_extremes_and_skips_undefined_figures() -> None:
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("stepsim_accuracy_script",
                                                  root / "benchmarks/stepsim_accuracy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    line = script._run_footer([(0.97, 0.0, "a p1"), (math.nan, math.nan, "b p1"),
                               (0.96, 0.133, "c p1"), (0.99, 0.02, "d p1")])
    assert line == ("# lowest 'by run' figure: 0.960 over 4 runs (c p1); highest 'by run' "
                    "top-1 regret against the confidently-best: 13.3% (c p1)\n")


def _ncf_a_store(tmp_path: Path) -> tuple:
    """An ncf-A store of 12 synthetic strategies in ``tmp_path``: ``(domain, store, its strategy
    table, the profile and calibration of record, that calibration with PS pieces 30x as
    costly, dated 2030)``."""
    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.testing.synthetic import synthetic_records

    domain = find_domain("ncf-A")
    store = tmp_path / "ncf-A.jsonl"
    ts = TrialStore(store)
    for r in synthetic_records(domain, 12, 3):
        ts.append(r)
    table = strategy_table(load_trials(store), normalize=False)
    prof = find_profile(domain.model.fingerprint)
    cal = find_calibration(domain.cluster.fingerprint)
    slow = cal.model_copy(update={"ps_piece_s": 30 * cal.ps_piece_s,
                                  "created_at": "2030-01-01T00:00:00+00:00"})
    return domain, store, table, prof, cal, slow


def test_the_step_simulator_report_judges_a_run_with_the_physics_measured_with_it(
        tmp_path: Path) -> None:
    """benchmarks/stepsim_accuracy.py's second table: a run measured where PS pieces cost 30x
    the physics of record's is ordered by the simulator with that run's physics, not the
    record's."""
    import subprocess
    import sys

    from autosync_transfer.dataset.repeat import run_physics_dir
    from autosync_transfer.domains.physics import save_calibration, save_profile
    from autosync_transfer.rankers.stepsim import StepSimulator

    root = Path(__file__).resolve().parents[2]
    domain, store, table, prof, cal, slow = _ncf_a_store(tmp_path)
    d = run_physics_dir(store, "p1")
    save_calibration(slow, folder=d / "calibrations")
    save_profile(prof, folder=d / "profiles")
    steps = StepSimulator(domain, prof, slow).simulate(list(table["strategy"]))["step_s"]
    truth = dict(zip(table["strategy_id"], map(float, steps)))
    record = StepSimulator(domain, prof, cal).simulate(list(table["strategy"]))["step_s"]
    rec = dict(zip(table["strategy_id"], map(float, record)))
    _write_run(repeat_path(store), "p1", truth, 3, 0.001, seed=4, processor=prof.processor,
               domain="ncf-A")
    rep = load_repeatability(store, "ncf-A", processor=prof.processor)
    assert ranking_figures(rec, rep)["pairwise_resolved"] < 0.9  # the record orders it worse
    out = subprocess.run([sys.executable, str(root / "benchmarks/stepsim_accuracy.py"),
                          "--datasets", str(tmp_path), "--domains", "ncf-A"],
                         capture_output=True, text=True, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr
    table_text = out.stdout.split("# the physics of the run")[1]
    row = next(x for x in table_text.splitlines() if x.startswith("ncf-A"))
    import re

    cells = row.split()
    assert cells[1] == "p1" and cells[2:4] == ["2030-01-01", "00:00"]
    assert float(cells[4]) == pytest.approx(1e6 * slow.ps_piece_s, abs=1)
    # by run and by all runs (one run here): the run's physics orders it right, the record not
    assert re.findall(r"(\d\.\d{3}) \[", row) == ["1.000", "1.000"]
    of_record = [float(m[2]) for m in re.findall(r"(\S+)%\s+(\S+)%\s+(\S+)", row)]
    assert of_record == [pytest.approx(ranking_figures(rec, rep, ["p1"])["pairwise_resolved"],
                                       abs=5e-4)] * 2
    assert "lowest 'by run' figure: 1.000 over 1 runs (ncf-A p1)" in out.stdout
    assert ("highest 'by run' top-1 regret against the confidently-best: 0.0% (ncf-A p1)"
            in out.stdout)


def _slow_run(tmp_path: Path, subset: int | None = None) -> tuple:
    """An ncf-A store of 12 strategies whose run p1 (of ``subset`` of them, default all) was
    measured where PS pieces cost 30x the physics of record's, with that physics beside it."""
    from autosync_transfer.dataset.repeat import run_physics_dir
    from autosync_transfer.domains.physics import save_calibration, save_profile
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator

    domain, store, table, prof, cal, slow = _ncf_a_store(tmp_path)
    # the run's own profile: another hour's compute, so that no other profile can pass for it
    prof = prof.model_copy(update={"forward_s": 1.5 * prof.forward_s,
                                   "created_at": "2030-01-01T00:00:00+00:00"})
    d = run_physics_dir(store, "p1")
    save_calibration(slow, folder=d / "calibrations")
    save_profile(prof, folder=d / "profiles")
    # as the lookup configures it for an emulated calibration (every worker on one host)
    config = StepSimConfig(host_processes=sum(n.workers for n in domain.cluster.nodes),
                           host_cores=slow.host_cores) if slow.launcher == "emulated" else None
    steps = StepSimulator(domain, prof, slow, config).simulate(list(table["strategy"]))["step_s"]
    truth = dict(zip(table["strategy_id"], map(float, steps)))
    if subset is not None:
        truth = dict(sorted(truth.items())[:subset])
    _write_run(repeat_path(store), "p1", truth, 3, 0.001, seed=4, processor=prof.processor,
               domain="ncf-A")
    return domain, store, prof, cal, slow


def test_within_a_run_s_physics_the_lookup_finds_it_for_its_domain_only(
        tmp_path: Path) -> None:
    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.dataset.repeat import using_run_physics
    from autosync_transfer.rankers.physics import measured_physics, physics_override

    domain, store, prof, cal, slow = _slow_run(tmp_path)
    # ncf-B shares the run's model, bert-A its cluster: neither is the run's domain
    others = [find_domain("ncf-B"), find_domain("bert-A")]
    before = measured_physics(domain)
    assert before.profile != prof and before.calibration == cal
    found = [measured_physics(o) for o in others]
    assert found[0].profile.fingerprint == prof.fingerprint
    assert found[1].calibration.fingerprint == cal.fingerprint
    with using_run_physics(store, domain, "p1") as (p, c):
        assert (p, c) == (prof, slow)
        for launcher in (None, "emulated", "local"):
            inside = measured_physics(domain, launcher)
            assert inside.profile == prof and inside.calibration == slow
        assert inside.config.host_processes == sum(n.workers for n in domain.cluster.nodes)
        assert [measured_physics(o)[:2] for o in others] == [f[:2] for f in found]
    assert measured_physics(domain) == before
    # left by an exception, the lookup is restored too
    with pytest.raises(RuntimeError, match="inside"):
        with using_run_physics(store, domain, "p1"):
            raise RuntimeError("inside")
    assert measured_physics(domain) == before
    with pytest.raises(ConfigError, match="run: 'p2' of ncf-A has no complete physics"):
        with using_run_physics(store, domain, "p2"):
            pass
    with pytest.raises(ConfigError, match="profile: fingerprint"):
        with physics_override(others[1], prof, cal):
            pass


@pytest.mark.parametrize("min_trials", [4, 5])
def test_the_ranker_table_judges_a_run_with_the_physics_measured_with_it(
        tmp_path: Path, min_trials: int) -> None:
    """benchmarks/ranker_table.py's physics-of-the-run rows: the step-time simulator scores the
    run's strategies with the run's physics and orders them as the run measured them. The run
    re-measures 8 of the store's 12 strategies: the 4 others train where --min-trials allows
    it (4); below (5), a 3-fold cross-validation over the 8, pairs within a fold, no pick."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    domain, store, prof, cal, slow = _slow_run(tmp_path, subset=8)
    out = subprocess.run([sys.executable, str(root / "benchmarks/ranker_table.py"),
                          "--tables", "resolved", "--stores", str(tmp_path),
                          "--min-trials", str(min_trials), "--seeds", "1", "--kinds", "stepsim"],
                         capture_output=True, text=True, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr
    first, runs = out.stdout.split("the physics of the run")
    folded = min_trials > 4
    notes = [x for x in out.stdout.splitlines() if "3-fold cross-validation over them" in x]
    assert len(notes) == (2 if folded else 0)
    assert all("leaving 4 to train on (fewer than --min-trials 5)" in x for x in notes)
    rows = [x for x in first.splitlines() if x.startswith("ncf-A ") and ":" not in x]
    by_run = [x for x in runs.splitlines() if x.startswith("ncf-A ") and ":" not in x][0]
    assert len(rows) == 1
    # all 28 pairs of the 8 in one test set; within three folds of 3, 3 and 2: 3 + 3 + 1
    assert by_run.split()[1:4] == ["p1", "8", "7" if folded else "28"]
    res = [float(x) for x in re.findall(r"/ (\d\.\d{3}) \[", by_run)]
    assert res == [1.0]
    assert ("nan / nan" in by_run) == folded
    if not folded:
        assert float(re.findall(r"/ (\d\.\d{3}) \[", rows[0])[0]) < 0.9


@pytest.mark.parametrize("other", [False, True])
def test_the_transfer_table_judges_a_run_with_the_physics_measured_with_it(
        tmp_path: Path, other: bool) -> None:
    """benchmarks/transfer_table.py's physics-of-the-run table: the target's strategies are
    simulated with the run's physics and judged on the pairs that run resolves. A run of
    another machine type than the target store's trials (``other``) is judged too, labelled
    ``p1*``, zero-shot and the simulator only, and not by the store-type table above."""
    import re
    import subprocess
    import sys

    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.testing.synthetic import synthetic_records

    root = Path(__file__).resolve().parents[2]
    _, store, *_ = _slow_run(tmp_path, subset=8)
    if other:
        TrialStore(store).write_meta({META_PROCESSOR_KEY: "Another CPU"})
    ts = TrialStore(tmp_path / "ncf-B.jsonl")
    for r in synthetic_records(find_domain("ncf-B"), 12, 3):
        ts.append(r)
    out = subprocess.run([sys.executable, str(root / "benchmarks/transfer_table.py"),
                          "--trials", str(tmp_path), "--settings", "ncf-B:ncf-A", "--seeds", "1",
                          "--epochs", "1", "--shots", "2", "--reference", "2",
                          "--ranker", "linear"],
                         capture_output=True, text=True, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr
    first, runs = out.stdout.split("the physics of the run")[0], out.stdout.split(
        "\nrun ")[1]
    record = [x for x in first.splitlines() if x.startswith("clusters  ncf-B -> ncf-A")][-1]
    by_run = next(x for x in runs.splitlines() if x.startswith("p1"))
    assert by_run.split()[:6] == ["p1*" if other else "p1", "ncf-B", "->", "ncf-A", "8", "28"]
    stepsim = r"(\d\.\d{3})/(\d\.\d{3})\[[^]]*\]/[^ ]*$"
    assert float(re.search(stepsim, by_run).group(2)) == 1.0
    assert ("- (other machine type)" in by_run) == other
    # the store-type table above has no runs to judge by where the only run is of another type
    assert (re.search(stepsim, record) is None) == other
    if not other:
        assert float(re.search(stepsim, record).group(2)) < 0.9
    assert "lowest zero-shot figure on the pairs a run resolves" in out.stdout
    assert ("(ncf-B -> ncf-A p1*)" in out.stdout) == other
