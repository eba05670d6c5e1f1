"""Pure statistics over timings: warm-up detection, paired ratios with their intervals,
verdicts, and the one-sided non-inferiority bound used by convergence checks.

Everything here is a function of numbers (no clocks, no processes), so it is tested on synthetic
series of known truth. Intervals are :func:`scipy.stats.ttest_1samp`'s on paired log-ratios (its
t quantile from :data:`scipy.stats.t`, cached: a comparison evaluates them at every look) or
:func:`scipy.stats.bootstrap`'s, not hand-written estimators.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

__all__ = ["Verdict", "RatioEstimate", "detect_warmup", "block_level", "paired_speedup",
           "verdict_for", "seeds_to_show", "upper_bound"]


class Verdict(str, Enum):
    """What a comparison says of a candidate against the baseline."""

    FASTER = "faster"
    SLOWER = "slower"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class RatioEstimate:
    """A speed-up (baseline time / candidate time: > 1 is faster) with its interval, from
    ``n`` paired rounds, at ``confidence``."""

    speedup: float
    low: float
    high: float
    n: int
    confidence: float

    def format(self) -> str:
        return f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]"


def detect_warmup(times: Sequence[float], *, k: float = 3.0, max_fraction: float = 0.5,
                  window: int = 1) -> int:
    """How many leading values of ``times`` are warm-up. The steady level is the median of the
    series' second half and its spread 1.4826 MAD (at least 1 % of the level); a value is warm
    when it lies more than ``k`` spreads above the level. With ``window=1`` the warm-up is the
    leading run of warm values; with a wider ``window`` the series is first smoothed by a running
    median of that width (one outlier is not warm, one quick step does not end a slow start) and
    the warm-up ends after the last warm smoothed value. At most ``max_fraction`` of the series
    is dropped; a series of fewer than 4 values has no detectable warm-up (0). Not a fixed
    count: a series that starts at its steady level drops nothing."""
    x = np.asarray(times, dtype=float)
    n = len(x)
    if n < 4:
        return 0
    tail = x[n // 2:]
    level = float(np.median(tail))
    scale = max(1.4826 * float(np.median(np.abs(tail - level))), 0.01 * abs(level))
    limit = level + k * scale
    cap = int(n * max_fraction)
    if window <= 1:
        i = 0
        while i < cap and x[i] > limit:
            i += 1
        return i
    smooth = running_median(x, window)[:cap]
    warm = np.flatnonzero(smooth > limit)
    return int(warm[-1]) + 1 if len(warm) else 0


def running_median(x: Sequence[float], window: int) -> np.ndarray:
    """The median of ``x[i - window // 2 : i + window // 2 + 1]`` (cut at the ends) for every i."""
    from numpy.lib.stride_tricks import sliding_window_view

    x = np.asarray(x, dtype=float)
    n, half = len(x), max(window, 1) // 2
    width = 2 * half + 1
    out = np.empty(n)
    if n >= width:  # every full window at once
        out[half:n - half] = np.median(sliding_window_view(x, width), axis=1)
    for i in (*range(min(half, n)), *range(max(n - half, min(half, n)), n)):  # the cut ends
        out[i] = np.median(x[max(0, i - half): i + half + 1])
    return out


def block_level(times: Sequence[float], *, drop_warmup: bool = True) -> tuple[float, int]:
    """A block's steady time: the median of its steps after its detected warm-up; returns
    ``(level, dropped)``."""
    x = list(times)
    if not x:
        raise ValueError("a block needs at least one timed step, got none")
    dropped = detect_warmup(x) if drop_warmup else 0
    return float(np.median(x[dropped:])), dropped


def paired_speedup(candidate: Sequence[float], baseline: Sequence[float], *,
                   confidence: float = 0.95, method: str = "t", n_resamples: int = 2000,
                   seed: int = 0) -> RatioEstimate:
    """Speed-up of ``candidate`` over ``baseline`` from block levels paired by round
    (``candidate[r]`` and ``baseline[r]`` measured in the same round). The point estimate is
    exp(mean log-ratio) over the rounds (a geometric-mean ratio; block levels are medians
    already, robust to outlying steps). The interval: ``method="t"`` Student's t on the paired
    log-ratios (calibrated at the few rounds a comparison affords), ``"bootstrap"`` a BCa
    bootstrap over rounds (:func:`scipy.stats.bootstrap`; it undercovers below ~30 rounds:
    ``benchmarks/comparison_rates.py`` measures both)."""
    from scipy import stats

    c = np.asarray(candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if c.shape != b.shape:
        raise ValueError(f"paired blocks must have the same length, got {len(c)} and {len(b)}")
    if len(c) == 0:
        raise ValueError("a paired comparison needs at least one round, got none")
    if np.any(c <= 0) or np.any(b <= 0):
        raise ValueError("block times must be positive")
    if method not in ("t", "bootstrap"):
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    d = np.log(b) - np.log(c)  # log speed-up per round
    est = float(np.mean(d))
    n = len(d)
    if n < 3:  # too few rounds to say anything
        return RatioEstimate(math.exp(est), 0.0, math.inf, n, confidence)
    if float(np.ptp(d)) < 1e-12:  # every round agrees (to rounding)
        return RatioEstimate(math.exp(est), math.exp(est), math.exp(est), n, confidence)
    if method == "t":  # ttest_1samp's interval, with its t quantile computed once per (df, level)
        half = _t_quantile(n - 1, 0.5 + confidence / 2) * float(np.std(d, ddof=1)) / math.sqrt(n)
        lo, hi = est - half, est + half
    else:
        res = stats.bootstrap((d,), np.mean, confidence_level=confidence,
                              n_resamples=n_resamples, method="BCa", vectorized=True, axis=-1,
                              rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isfinite(lo) and math.isfinite(hi)):  # degenerate BCa: percentile
            res = stats.bootstrap((d,), np.mean, confidence_level=confidence,
                                  n_resamples=n_resamples, method="percentile",
                                  vectorized=True, axis=-1, rng=np.random.default_rng(seed))
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return RatioEstimate(math.exp(est), math.exp(lo), math.exp(hi), n, confidence)


@functools.lru_cache(maxsize=256)
def _t_quantile(df: int, q: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


def verdict_for(est: RatioEstimate, margin: float) -> Verdict:
    """The verdict of an interval: faster when its lower bound is above 1, slower when its upper
    bound is below 1, equivalent when it lies within ``[1/(1+margin), 1+margin]``, else
    undecided."""
    if est.low > 1.0:
        return Verdict.FASTER
    if est.high < 1.0:
        return Verdict.SLOWER
    if est.low >= 1.0 / (1.0 + margin) and est.high <= 1.0 + margin:
        return Verdict.EQUIVALENT
    return Verdict.UNDECIDED


def seeds_to_show(values: Sequence[float], limit: float, *, confidence: float = 0.95,
                  log: bool = False, most: int = 1000) -> int | None:
    """How many values :func:`upper_bound` would need to lie at or under ``limit`` if their
    mean and standard deviation held: the smallest ``n >= len(values)`` (at least 2) with
    ``mean + t(n - 1) * sd / sqrt(n) <= limit``; ``None`` when the mean is not under ``limit``
    (no number of values shows it), a value is not finite, or more than ``most`` are needed."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2 or not np.all(np.isfinite(x)) or (log and np.any(x <= 0)):
        return None
    if log:
        x, limit = np.log(x), math.log(limit)
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    if mean > limit or (mean == limit and sd > 0):
        return None
    for n in range(len(x), most + 1):
        if mean + float(stats.t.ppf(confidence, n - 1)) * sd / math.sqrt(n) <= limit:
            return n
    return None


def upper_bound(values: Sequence[float], *, confidence: float = 0.95, log: bool = False) -> float:
    """One-sided upper ``confidence`` bound on the mean of ``values`` (Student's t, the test
    MLPerf's convergence checker uses with few seeds); with ``log=True`` on the mean of their
    logarithms, returned as a ratio. ``inf`` when any value is infinite or fewer than 2 are
    given."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2 or not np.all(np.isfinite(x)):
        return math.inf
    if log:
        if np.any(x <= 0):
            raise ValueError("log bound needs positive values")
        x = np.log(x)
    if float(np.ptp(x)) == 0.0:
        hi = float(x[0])
    else:
        res = stats.ttest_1samp(x, popmean=0.0, alternative="less")
        hi = float(res.confidence_interval(confidence_level=confidence).high)
    return math.exp(hi) if log else hi
