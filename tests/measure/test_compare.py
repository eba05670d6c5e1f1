"""The comparison module on synthetic timings of known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosync_transfer.errors import ConfigError
from autosync_transfer.measure import (Design, Interleaved, Verdict, compare, detect_warmup,
                                       paired_speedup, upper_bound)
from autosync_transfer.measure.stats import RatioEstimate, verdict_for
from autosync_transfer.testing.timings import NoisyMachine


# -- warm-up ------------------------------------------------------------------------------------
def test_warmup_of_a_steady_series_is_nothing():
    rng = np.random.default_rng(0)
    assert detect_warmup(list(1.0 + 0.01 * rng.standard_normal(40))) == 0


@pytest.mark.parametrize("length", [3, 7, 15])
def test_warmup_of_any_length_is_found(length):
    rng = np.random.default_rng(length)
    x = list(1.0 + 0.01 * rng.standard_normal(40))
    for i in range(length):
        x[i] = 2.0 - i / (2 * length)  # 2.0 decaying to 1.5: far above the level
    assert detect_warmup(x) == length
    assert detect_warmup(x, window=5) in (length, length + 1, length + 2)


def test_smoothed_warmup_ignores_one_quick_step_and_one_outlier():
    x = [3.0, 2.8, 1.0, 2.5, 2.2, 2.0] + [1.0] * 30
    x[20] = 9.0  # an outlier late in the series is not warm-up
    assert detect_warmup(x) == 2  # the leading run stops at the quick step
    assert detect_warmup(x, window=5) == 6


def test_warmup_is_capped():
    assert detect_warmup([5.0] * 4 + [1.0] * 4, max_fraction=0.25) == 2
    assert detect_warmup([1.0, 2.0, 3.0]) == 0


# -- intervals and verdicts ---------------------------------------------------------------------
def test_paired_speedup_is_exact_on_a_constant_ratio():
    base = [0.020, 0.025, 0.022, 0.030]
    cand = [b / 1.25 for b in base]
    est = paired_speedup(cand, base)
    assert est.speedup == pytest.approx(1.25)
    assert est.low == pytest.approx(1.25) and est.high == pytest.approx(1.25)


def test_paired_speedup_needs_three_rounds_for_an_interval():
    est = paired_speedup([1.0, 1.0], [2.0, 2.0])
    assert est.low == 0.0 and math.isinf(est.high)
    assert verdict_for(est, 0.02) is Verdict.UNDECIDED


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_paired_speedup_interval_holds_the_truth(method):
    rng = np.random.default_rng(1)
    base = 0.02 * np.exp(0.05 * rng.standard_normal(30))
    cand = base / 1.1 * np.exp(0.03 * rng.standard_normal(30))
    est = paired_speedup(list(cand), list(base), method=method)
    assert est.low < 1.1 < est.high
    assert est.low > 1.0


def test_paired_speedup_t_interval_is_ttest_1samps():
    from scipy import stats

    from autosync_transfer.measure import paired_speedup

    rng = np.random.default_rng(7)
    for n in (3, 4, 7, 20):
        for confidence in (0.95, 0.99, 0.999):
            c, b = rng.lognormal(0, 0.1, n), rng.lognormal(0.05, 0.1, n)
            est = paired_speedup(c, b, confidence=confidence)
            ci = stats.ttest_1samp(np.log(b) - np.log(c), 0.0).confidence_interval(confidence)
            assert math.log(est.low) == pytest.approx(float(ci.low), rel=1e-9, abs=1e-12)
            assert math.log(est.high) == pytest.approx(float(ci.high), rel=1e-9, abs=1e-12)


def test_running_median_is_the_median_of_every_cut_window():
    from autosync_transfer.measure.stats import running_median

    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 3, 4, 5, 6, 9, 40):
        x = rng.normal(size=n)
        for window in (1, 2, 3, 4, 5, 8):
            half = window // 2
            naive = [np.median(x[max(0, i - half): i + half + 1]) for i in range(n)]
            assert np.allclose(running_median(x, window), naive), (n, window)


@pytest.mark.parametrize("low,high,margin,verdict", [
    (1.05, 1.2, 0.02, Verdict.FASTER), (0.8, 0.95, 0.02, Verdict.SLOWER),
    (0.99, 1.01, 0.02, Verdict.EQUIVALENT), (0.9, 1.1, 0.02, Verdict.UNDECIDED),
])
def test_verdicts(low, high, margin, verdict):
    assert verdict_for(RatioEstimate(1.0, low, high, 10, 0.95), margin) is verdict


def test_paired_speedup_rejects_bad_input():
    with pytest.raises(ValueError, match="same length"):
        paired_speedup([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        paired_speedup([1.0, 0.0, 1.0], [1.0, 1.0, 1.0])


def test_upper_bound_over_seeds():
    assert upper_bound([1.0, 1.0, 1.0]) == 1.0
    assert math.isinf(upper_bound([1.0, math.inf, 1.0]))
    assert math.isinf(upper_bound([1.0]))
    hi = upper_bound([1.0, 1.1, 1.2], log=True)
    assert hi > 1.2  # three seeds: the bound lies well above the mean
    assert upper_bound([0.0, 0.01, -0.01]) == pytest.approx(0.0169, abs=1e-3)


def test_seeds_to_show_is_the_count_at_which_the_bound_would_reach_the_limit():
    from autosync_transfer.measure import seeds_to_show

    gaps = [0.014, 0.025, 0.010]  # mean 1.6 %, sd 0.8 %: 3 seeds bound it at 3 %, not 2 %
    n = seeds_to_show(gaps, 0.02)
    assert upper_bound(gaps) > 0.02 and n is not None and n > 3
    # the same mean and spread over n values (a rescaled sample) is bounded at or under 2 %,
    # over n - 1 values not
    def sample(k: int) -> list[float]:
        z = np.linspace(-1, 1, k)
        return list(np.mean(gaps) + np.std(gaps, ddof=1) * z / np.std(z, ddof=1))
    assert upper_bound(sample(n)) <= 0.02 + 1e-12 < upper_bound(sample(n - 1))
    assert seeds_to_show([0.0, 0.001, -0.001], 0.02) == 3  # already shown
    assert seeds_to_show([0.077, -0.003, 0.013], 0.02) is None  # mean 2.9 %: never
    assert seeds_to_show([1.04, 1.05, 1.09], 1.10, log=True) == 4
    assert seeds_to_show([1.0, math.inf, 1.0], 1.10, log=True) is None
    assert seeds_to_show([0.01], 0.02) is None


# -- the interleaved design ---------------------------------------------------------------------
def test_design_rejects_bad_values():
    with pytest.raises(ConfigError, match="min_rounds must be >= 3, got 2"):
        Design(baseline="a", min_rounds=2)
    with pytest.raises(ConfigError, match="max_rounds"):
        Design(baseline="a", min_rounds=6, max_rounds=4)
    with pytest.raises(ConfigError, match="baseline 'z'"):
        Interleaved(["a", "b"], Design(baseline="z"))
    with pytest.raises(ConfigError, match="unique"):
        Interleaved(["a", "a"], Design(baseline="a"))


def test_rounds_are_shuffled_and_complete():
    cmp = Interleaved(["a", "b", "c"], Design(baseline="a", seed=3))
    orders = []
    for _ in range(6):
        order = cmp.next_round()
        assert order is not None and sorted(order) == ["a", "b", "c"]
        with pytest.raises(ConfigError, match="still waits"):
            cmp.next_round()
        for n in order:
            cmp.record(n, [0.01] * 3)
        orders.append(tuple(order))
    assert len(set(orders)) > 1
    with pytest.raises(ConfigError, match="no block pending"):
        Interleaved(["a", "b"], Design(baseline="a")).record("a", [1.0])


def test_record_rejects_non_finite_times():
    cmp = Interleaved(["a", "b"], Design(baseline="a"))
    cmp.next_round()
    with pytest.raises(ConfigError, match="positive and finite"):
        cmp.record("a", [0.01, float("nan")])


def test_a_clearly_faster_candidate_wins_early_and_a_slower_one_leaves():
    m = NoisyMachine({"base": 0.02, "fast": 0.015, "slow": 0.03}, seed=0, warmup_steps=20)
    c = compare(["base", "fast", "slow"], m.time_block, Design(baseline="base"))
    assert c["fast"].verdict is Verdict.FASTER
    assert c["slow"].verdict is Verdict.SLOWER
    assert c.best() == "fast"
    assert c.rounds == 6  # decided at the first look
    assert c["fast"].speedup.low < 0.02 / 0.015 < c["fast"].speedup.high
    assert "rounds" in c["fast"].format()
    d = c.to_dict()
    assert d["baseline"] == "base" and len(d["candidates"]) == 3


def test_identical_candidates_end_equivalent_or_undecided_and_the_baseline_stays():
    m = NoisyMachine({"a": 0.02, "b": 0.02}, seed=1, noise_cv=0.005, outlier_p=0.0, drift=0.0)
    c = compare(["a", "b"], m.time_block, Design(baseline="a", margin=0.02))
    assert c["b"].verdict is Verdict.EQUIVALENT
    assert c.best() == "a"


def test_a_stopped_comparison_keeps_the_verdicts_of_its_last_planned_look():
    """``stop`` ends the comparison between looks without adding one: the verdicts are those
    of the last planned look (undecided before the first), the intervals cover every round."""
    m = NoisyMachine({"base": 0.02, "fast": 0.015, "same": 0.02}, seed=4, noise_cv=0.01,
                     outlier_p=0.0, drift=0.0)
    early = Interleaved(["base", "fast"], Design(baseline="base", min_rounds=3, max_rounds=9))
    for _ in range(2):
        for n in early.next_round():
            early.record(n, m.time_block(n))
    early.stop()
    assert early.done and early.next_round() is None
    res = early.result()
    assert res.rounds == 2 and res["fast"].verdict is Verdict.UNDECIDED and res.best() == "base"

    cmp = Interleaved(["base", "fast", "same"],
                      Design(baseline="base", min_rounds=3, max_rounds=9, look_every=6))
    for _ in range(3):
        for n in cmp.next_round():
            cmp.record(n, m.time_block(n))
    at_look = {n: c.verdict for n, c in cmp.result().candidates.items()}
    assert at_look["fast"] is Verdict.FASTER and "fast" not in cmp.active  # decided, raced out
    assert at_look["same"] is Verdict.UNDECIDED
    for _ in range(5):  # rounds 4-8, before the next look (9): "same" now runs 3x slower
        for n in cmp.next_round():
            cmp.record(n, [0.06] * 4 if n == "same" else m.time_block(n))
    cmp.stop()
    res = cmp.result()
    assert {n: c.verdict for n, c in res.candidates.items()} == at_look
    assert res.rounds == 8 and res["same"].rounds == 8 and res.best() == "fast"
    assert res["same"].speedup.high < 1  # what a look now would call slower

    # stopped within a round (a block left unrun): the blocks it recorded were in no look
    part = Interleaved(["base", "slow", "other"],
                       Design(baseline="base", min_rounds=3, max_rounds=9, look_every=3, seed=4))
    slowdown = {"slow": [1.02, 1.06, 1.04, 1.05], "other": [0.99, 1.04, 1.02, 1.0]}
    for r in range(3):
        for n in part.next_round():
            part.record(n, [0.02 * (slowdown[n][r] if n != "base" else 1.0)] * 4)
    assert part.result()["slow"].verdict is Verdict.UNDECIDED
    order = part.next_round()
    assert order[-1] == "other"  # the seed's order: base and slow run, other is left
    for n in order[:2]:
        part.record(n, [0.02 * slowdown[n][3] if n != "base" else 0.02] * 4)
    part.stop()
    res = part.result()
    assert res.rounds == 3 and res["slow"].rounds == 4  # the interval covers the 4th block
    # a look with the 4th round's blocks would call it slower; the last planned look did not
    assert res["slow"].verdict is Verdict.UNDECIDED and res.best() == "base"


def test_a_dropped_candidate_runs_no_more_and_never_wins():
    """``drop`` takes a candidate out of the pool between its blocks or with its block pending
    (the round then ends without it); its verdict stays undecided; the comparison is over once
    the baseline is alone; the baseline and unknown names are refused."""
    m = NoisyMachine({"base": 0.02, "fast": 0.015, "slow": 0.03}, seed=5, noise_cv=0.01,
                     outlier_p=0.0, drift=0.0)
    cmp = Interleaved(["base", "fast", "slow"], Design(baseline="base", min_rounds=3, seed=2))
    for n in cmp.next_round():
        cmp.record(n, m.time_block(n))
    cmp.drop("slow")
    assert cmp.active == ["base", "fast"] and not cmp.done
    while (order := cmp.next_round()) is not None:
        assert sorted(order) == ["base", "fast"]
        for n in order:
            cmp.record(n, m.time_block(n))
    res = cmp.result()
    assert res["slow"].verdict is Verdict.UNDECIDED and res["slow"].rounds == 1
    assert res["fast"].verdict is Verdict.FASTER and res.best() == "fast"
    with pytest.raises(ConfigError, match="baseline 'base' cannot leave"):
        cmp.drop("base")
    with pytest.raises(ConfigError, match="unknown candidate 'x'"):
        cmp.drop("x")
    # with its block pending: the round ends without it, the baseline alone ends the comparison
    for seed in range(4):  # both orders of the round
        last = Interleaved(["base", "slow"], Design(baseline="base", min_rounds=3, seed=seed))
        order = last.next_round()
        last.record(order[0], m.time_block(order[0]))
        last.drop("slow")
        assert last.done and last.next_round() is None
        assert last.rounds == (1 if order[0] == "base" else 0)


def test_session_warmup_rounds_are_dropped():
    m = NoisyMachine({"a": 0.02, "b": 0.02 / 1.05}, seed=2, warmup_steps=40,
                     warmup_factor=4.0, drift=0.0)
    cmp = Interleaved(["a", "b"], Design(baseline="a", min_rounds=12, max_rounds=12))
    while (order := cmp.next_round()) is not None:
        for n in order:
            cmp.record(n, m.time_block(n))
    res = cmp.result()
    assert 1 <= res.warmup_rounds <= 4
    assert res["b"].speedup.low < 1.05 < res["b"].speedup.high


def _rates(diff: float, runs: int) -> tuple[float, float]:
    declared = found = 0
    for seed in range(runs):
        m = NoisyMachine({"a": 0.02, "b": 0.02 / diff}, seed=seed, session_steps=200,
                         warmup_steps=30)
        v = compare(["a", "b"], m.time_block, Design(baseline="a", seed=seed))["b"].verdict
        declared += v in (Verdict.FASTER, Verdict.SLOWER)
        found += v is Verdict.FASTER
    return declared / runs, found / runs


def test_false_positive_and_detection_rates():
    """1,000 seeded runs each, under 27 % drift, heavy-tailed outliers, a slow session warm-up
    and a cost at every switch (benchmarks/comparison_rates.py prints the same rates with their
    intervals)."""
    false_positive, _ = _rates(1.0, 1000)
    assert false_positive <= 0.05
    _, detected = _rates(1.05, 1000)
    assert detected >= 0.80
