"""Figures of a search and the diverse pick, on hand-computed cases."""

from __future__ import annotations

import pytest

from autosync_transfer.dataset.store import TrialRecord
from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.search.summary import summarize
from autosync_transfer.search.selection import describe, select_diverse
from autosync_transfer.strategies.builders import build
from autosync_transfer.strategies.sampler import StrategySampler, preset


def _rec(i: int, median: float | None, status: str = "ok") -> TrialRecord:
    return TrialRecord(id=f"d/{i}", domain="d", model="m", cluster="c", model_fingerprint="f",
                       cluster_fingerprint="g", strategy_id=f"s{i}", strategy_kind="sampled",
                       strategy=None, status=status, iteration_times_s=[median] if median else [],
                       median_s=median, protocol={}, launcher="local",
                       timestamp="2026-01-01T00:00:00Z", wall_s=1.0, machine={})


def test_summary_by_hand() -> None:
    refs = {"ps": 2.0, "ddp": 1.2, "torch_ddp": 1.5}
    trials = [_rec(0, 1.3), _rec(1, None, "failed"), _rec(2, 1.0), _rec(3, 1.1), _rec(4, 0.9)]
    s = summarize(trials, refs, per_round=2)
    assert s["best_builder"] == "ddp" and s["best_builder_s"] == 1.2
    assert s["curve"] == pytest.approx([1.2 / 1.3, 1.2 / 1.3, 1.2, 1.2, 1.2 / 0.9])
    assert s["trials_to_1.1x"] == 3 and s["trials_to_1.2x"] == 3 and s["trials_to_1.3x"] == 5
    assert s["hit_rate"] == [0.0, 1.0, 1.0]  # rounds: (1.3, fail), (1.0, 1.1), (0.9)
    assert s["speedup_vs_builder"] == pytest.approx(1.2 / 0.9)
    # vs torch DDP only from a confirmation; the search's own figure is kept apart
    assert s["speedup_vs_ddp"] is None
    assert s["unconfirmed_speedup_vs_ddp"] == pytest.approx(1.5 / 0.9)
    assert s["failed"] == 1 and s["trials"] == 5


def test_hits_need_the_margin_and_confirmations_give_the_confirmed_speedup() -> None:
    from autosync_transfer.search.summary import HIT_MARGIN

    refs = {"ps": 1.0, "torch_ddp": 3.0, "all_reduce+fp16": 0.97, "ddp+fp16": None}
    trials = [_rec(0, 0.99), _rec(1, 1.0 / (1 + HIT_MARGIN) - 1e-3), _rec(2, 0.95)]
    s = summarize(trials, refs, per_round=3)
    assert s["hit_rate"] == [pytest.approx(2 / 3)]  # 0.99 is within the noise margin
    # the fp16 variants are a reference of their own, not hand-optimized builders
    assert s["best_builder"] == "ps" and s["best_fp16_builder"] == "all_reduce+fp16"
    assert s["speedup_vs_fp16_builder"] == pytest.approx(0.97 / 0.95)
    assert s["confirmed"] is None and s["confirmed_speedup_vs_builder"] is None

    def conf(key: str, median: float | None, sid: str) -> TrialRecord:
        r = _rec(0, median, "ok" if median else "failed")
        return r.model_copy(update={"id": f"d/confirm/{key}", "strategy_id": sid})

    confirmations = {
        "3/0-best": conf("3/0-best", 0.96, "s2"), "3/0-builder": conf("3/0-builder", 1.02, "ps"),
        "3/1-builder": conf("3/1-builder", 0.98, "ps"), "3/1-best": conf("3/1-best", None, "s2"),
        "3/2-best": conf("3/2-best", 1.00, "s2"), "3/2-builder": conf("3/2-builder", 1.04, "ps"),
        "2/0-best": conf("2/0-best", 0.5, "s1"),  # of an earlier, shorter run: not counted
        "3/0-fp16": conf("3/0-fp16", 0.97, "ar+fp16"), "3/1-fp16": conf("3/1-fp16", 0.99, "ar+fp16"),
    }
    s = summarize(trials, refs, per_round=3, confirmations=confirmations)
    c = s["confirmed"]
    assert (c["best"], c["builder"], c["measurements"]) == ("s2", "ps", 2)
    assert c["best_s"] == pytest.approx(0.98) and c["builder_s"] == pytest.approx(1.02)
    # paired by round (rounds 0 and 2: round 1's best failed): the geometric mean of the ratios
    paired = ((1.02 / 0.96) * (1.04 / 1.00)) ** 0.5
    assert s["confirmed_speedup_vs_builder"] == pytest.approx(paired)
    assert c["speedup_vs_builder_rounds"] == 2 and c["speedup_vs_builder_low"] == 0.0
    assert c["speedup_vs_builder_high"] is None  # 2 rounds: no interval
    assert c["speedup_vs_builder_verdict"] == "undecided"
    assert c["fp16_builder"] == "ar+fp16" and c["fp16_builder_s"] == pytest.approx(0.98)
    assert s["confirmed_speedup_vs_fp16_builder"] == pytest.approx(0.97 / 0.96)  # round 0 only
    assert s["speedup_vs_ddp"] is None  # DDP was not in this confirmation


def test_summary_without_successes() -> None:
    s = summarize([_rec(0, None, "timeout")], {"ddp": 1.0}, per_round=4)
    assert s["best_s"] is None and s["speedup_vs_builder"] is None and s["curve"] == [None]
    assert s["trials_to_1.1x"] is None


def test_without_diversity_the_best_scores_win() -> None:
    d = get_domain("bert-3l-A")
    cands = StrategySampler(d, preset("default"), seed=3).sample_n(30)
    scores = [float((i * 7) % 30) for i in range(30)]
    picked = select_diverse(cands, scores, 5, diversity=0.0)
    assert [scores[i] for i in picked] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_diversity_trades_score_for_novelty() -> None:
    d = get_domain("bert-3l-A")
    ddp = build("ddp", d)
    same = [ddp.model_copy(update={"id": f"ddp-{i}"}) for i in range(4)]  # identical configs
    other = build("partitioned_ps", d)
    cands = [*same, other]
    scores = [0.0, 0.1, 0.2, 0.3, 0.9]  # the novel one is ranked last
    assert select_diverse(cands, scores, 2, diversity=0.0) == [0, 1]
    assert select_diverse(cands, scores, 2, diversity=5.0) == [0, 4]
    # what was measured already counts as known: the copies of ddp bring nothing new
    assert select_diverse(cands, scores, 1, diversity=5.0, seen=[ddp]) == [4]
    assert len(describe(other)) == len(d.model.variables)


def test_the_simulator_learns_failures_as_slow_and_each_strategy_once(tmp_path) -> None:  # noqa: ANN001
    """Training data of a search round: ok trials at their time, a failed one at twice the
    slowest ok time, a strategy measured twice (a confirmation) once, at its first time."""
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.loop import Searcher
    from autosync_transfer.search.summary import SearchProgress

    d = get_domain("ncf-C")
    s = StrategySampler(d, "dataset", seed=5).sample_n(3)
    store = tmp_path / "run.jsonl"
    recs = [_rec(0, 0.2), _rec(1, 0.5), _rec(2, None, "failed"), _rec(3, 0.1)]
    strategies = {"d/0": s[0], "d/1": s[1], "d/2": s[2], "d/3": s[0]}
    TrialStore(store).extend(recs)
    searcher = Searcher(d, store, SearchConfig(method="autosync"), launcher="local")
    searcher.proposer.bind(searcher.store, searcher.name, SearchProgress("d", "r", 10), strategies)
    data = searcher.proposer.training_data(strategies)
    got = dict(zip((x.id for x in data.strategies), data.runtimes_s))
    assert got == {s[0].id: 0.2, s[1].id: 0.5, s[2].id: 1.0}


def test_confirmation_gives_intervals_and_the_speedup_vs_ddp() -> None:
    refs = {"ps": 1.0, "torch_ddp": 1.2}
    trials = [_rec(0, 0.8)]

    def conf(key: str, median: float, sid: str) -> TrialRecord:
        return _rec(0, median).model_copy(update={"id": f"d/confirm/{key}", "strategy_id": sid})

    confirmations = {}
    for i in range(10):
        drift = 1.0 + 0.03 * i  # the machine slows down: paired rounds cancel it
        confirmations[f"1/{i}-best"] = conf(f"1/{i}-best", 0.80 * drift * (1 + 0.01 * (i % 3)), "s")
        confirmations[f"1/{i}-builder"] = conf(f"1/{i}-builder", 1.00 * drift, "ps")
        confirmations[f"1/{i}-ddp"] = conf(f"1/{i}-ddp", 1.20 * drift, "torch_ddp")
    s = summarize(trials, refs, per_round=1, confirmations=confirmations)
    c = s["confirmed"]
    assert c["speedup_vs_builder_rounds"] == 10
    assert c["speedup_vs_builder_low"] < 1.25 / 1.01 < c["speedup_vs_builder_high"]
    assert c["speedup_vs_builder_verdict"] == "faster"
    assert s["speedup_vs_ddp"] == pytest.approx(c["speedup_vs_ddp"])
    assert 1.45 < c["speedup_vs_ddp_low"] <= s["speedup_vs_ddp"] <= c["speedup_vs_ddp_high"] < 1.52
    from autosync_transfer.search.summary import format_speedup

    assert format_speedup(c, "speedup_vs_ddp").endswith(", 10 rounds")
