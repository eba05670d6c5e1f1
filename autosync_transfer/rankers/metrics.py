"""Ranking metrics for simulators (plain functions on numpy arrays).

Every function takes ``scores`` (the ranker's output, **lower = predicted faster**; a slowness
score or predicted seconds) and ``runtimes`` (measured step times, seconds, lower = faster) of the
strategies of **one** domain; :func:`per_domain` averages a metric over several domains (runtimes of
different domains are never compared). Where there is nothing to measure (fewer than two
strategies, or all runtimes equal) a metric returns ``nan``.

Ties: a pair with equal scores counts as half agreeing (:func:`pairwise_accuracy`) or neither
concordant nor discordant (:func:`kendall_tau`); when several strategies share the lowest score,
the first of them (in input order) is "the predicted best"; top-k sets break ties by input order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "pairwise_accuracy",
    "kendall_tau",
    "top1_score",
    "topk_recall",
    "regret",
    "per_domain",
    "noise_ceiling",
    "pairwise_gain",
    "selected_pairwise_gain",
]

_BLOCK = 1024  # rows of the pair matrix handled at once (bounds memory to _BLOCK x n)


def _as_pair(scores: Any, runtimes: Any) -> tuple[np.ndarray, np.ndarray]:
    o = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(runtimes, dtype=np.float64).reshape(-1)
    if o.shape != y.shape:
        raise ValueError(
            f"scores and runtimes need one value per strategy, got {o.size} scores and "
            f"{y.size} runtimes"
        )
    return o, y


def _label_diff(ya: np.ndarray, yb: np.ndarray, margin: float) -> np.ndarray:
    """``ya[:, None] - yb[None, :]``, with the pairs within ``margin`` of the faster of the two
    set to 0 (tied): how every metric here counts a pair's labels."""
    diff = ya[:, None] - yb[None, :]
    if margin > 0:
        diff = np.where(np.abs(diff) < margin * np.minimum(ya[:, None], yb[None, :]), 0.0, diff)
    return diff


def _pair_counts(o: np.ndarray, y: np.ndarray, margin: float = 0.0
                 ) -> tuple[int, int, int, int, int]:
    """Over unordered pairs: (concordant, discordant, tied in scores only, tied in runtimes
    only, tied in both); with ``margin`` > 0, runtimes within ``margin`` of the faster of the
    two count as tied."""
    n = o.size
    conc = disc = tie_o = tie_y = tie_both = 0
    for a in range(0, n, _BLOCK):
        rows = np.arange(a, min(n, a + _BLOCK))
        upper = np.arange(n)[None, :] > rows[:, None]
        so = np.sign(o[rows, None] - o[None, :])[upper]
        sy = np.sign(_label_diff(y[rows], y, margin))[upper]
        prod = so * sy
        conc += int((prod > 0).sum())
        disc += int((prod < 0).sum())
        tie_o += int(((so == 0) & (sy != 0)).sum())
        tie_y += int(((sy == 0) & (so != 0)).sum())
        tie_both += int(((so == 0) & (sy == 0)).sum())
    return conc, disc, tie_o, tie_y, tie_both


def pairwise_accuracy(scores: Any, runtimes: Any, margin: float = 0.0) -> float:
    """Over all pairs of strategies with different runtimes, the fraction whose order the scores
    get right (AutoSync's ranking accuracy); a pair with equal scores counts 1/2. With
    ``margin`` > 0 only the pairs whose runtimes differ by at least ``margin`` relative to the
    faster of the two count (the pairs the ranking loss trains on with that margin)."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    o, y = _as_pair(scores, runtimes)
    conc, disc, tie_o, _, _ = _pair_counts(o, y, margin)
    total = conc + disc + tie_o
    if total == 0:
        return float("nan")
    return (conc + 0.5 * tie_o) / total


def kendall_tau(scores: Any, runtimes: Any) -> float:
    """Kendall's tau-b between scores and runtimes: ``(C - D) / sqrt((C + D + T_o) (C + D +
    T_y))`` with ``T_o`` / ``T_y`` the pairs tied only in scores / only in runtimes; 1 = same
    order, -1 = reversed."""
    o, y = _as_pair(scores, runtimes)
    conc, disc, tie_o, tie_y, _ = _pair_counts(o, y)
    denom = float(np.sqrt(float(conc + disc + tie_o) * float(conc + disc + tie_y)))
    if denom == 0:
        return float("nan")
    return (conc - disc) / denom


def top1_score(scores: Any, runtimes: Any) -> float:
    """``best runtime / runtime of the strategy with the lowest score``: 1.0 when the predicted
    best is the true best, 0.5 when it takes twice as long."""
    o, y = _as_pair(scores, runtimes)
    if o.size == 0:
        return float("nan")
    return float(y.min() / y[int(np.argmin(o))])


def regret(scores: Any, runtimes: Any) -> float:
    """``runtime of the strategy with the lowest score / best runtime - 1``: 0 when the predicted
    best is the true best, 0.25 when it is 25 % slower."""
    o, y = _as_pair(scores, runtimes)
    if o.size == 0:
        return float("nan")
    return float(y[int(np.argmin(o))] / y.min() - 1.0)


def topk_recall(scores: Any, runtimes: Any, k: int) -> float:
    """The fraction of the ``k`` truly fastest strategies that are among the ``k`` with the lowest
    scores (``k`` is capped at the number of strategies)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    o, y = _as_pair(scores, runtimes)
    if o.size == 0:
        return float("nan")
    k = min(k, o.size)
    pred = np.argsort(o, kind="stable")[:k]
    true = np.argsort(y, kind="stable")[:k]
    return len(np.intersect1d(pred, true)) / k


def per_domain(
    metric: Callable[..., float],
    scores: Any,
    runtimes: Any,
    domains: Any,
    **kwargs: Any,
) -> float:
    """The mean over domains of ``metric(scores_d, runtimes_d, **kwargs)`` computed on each
    domain's strategies alone; domains where the metric is ``nan`` (e.g. a single strategy) are
    left out (``nan`` if all are)."""
    o, y = _as_pair(scores, runtimes)
    d = np.asarray(domains).reshape(-1)
    if d.size != o.size:
        raise ValueError(f"domains needs one id per strategy ({o.size}), got {d.size}")
    values = []
    for dom in np.unique(d):
        sel = d == dom
        v = metric(o[sel], y[sel], **kwargs)
        if not np.isnan(v):
            values.append(v)
    return float(np.mean(values)) if values else float("nan")


def noise_ceiling(runtimes: Any, rel_sigma: float) -> float:
    """The pairwise accuracy a perfect simulator can expect against measured ``runtimes`` when
    each measurement carries a relative noise of ``rel_sigma`` (the coefficient of variation of
    repeated measurements of one strategy).

    A pair whose runtimes differ by ``d = |ln y_i - ln y_j|`` keeps its order in a new
    measurement of both with probability ``Phi(d / (rel_sigma * sqrt(2)))`` (log-normal noise);
    the ceiling is the mean over pairs with different runtimes. The measured ``d`` stands for the
    true one, which noise widens on average, so this is an optimistic bound: a ranker evaluated
    on such measurements cannot be expected to score above it. ``nan`` for fewer than two
    distinct runtimes; 1.0 when ``rel_sigma`` is 0.
    """
    import math

    y = np.asarray(runtimes, dtype=np.float64).reshape(-1)
    if rel_sigma < 0 or not math.isfinite(rel_sigma):
        raise ValueError(f"rel_sigma must be a finite number >= 0, got {rel_sigma}")
    if (y <= 0).any():
        raise ValueError("runtimes must be > 0")
    ly = np.log(y)
    d = np.abs(ly[:, None] - ly[None, :])[np.triu_indices(y.size, 1)]
    d = d[d > 0]
    if d.size == 0:
        return float("nan")
    if rel_sigma == 0:
        return 1.0
    z = d / (rel_sigma * math.sqrt(2.0))
    erf = np.frompyfunc(math.erf, 1, 1)
    return float(np.mean(0.5 * (1.0 + erf(z / math.sqrt(2.0)).astype(np.float64))))


#: strategies of one domain a bootstrap resample of :func:`pairwise_gain` draws from at most
#: (a seeded subset beyond it; the point gain uses every strategy)
_GAIN_STRATEGIES = 300


def _pair_correct(o: np.ndarray, y: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """``(correct, counted)`` n x n: 1 / 0.5 / 0 where the scores order pair (i, j) as the
    runtimes do / tie it / reverse it, and which pairs count (runtimes apart by more than
    ``margin``; the upper triangle only)."""
    diff = _label_diff(y, y, margin)
    counted = np.triu(diff != 0, 1)
    so, sy = np.sign(o[:, None] - o[None, :]), np.sign(diff)
    correct = np.where(so == 0, 0.5, (so == sy).astype(np.float64))
    return np.where(counted, correct, 0.0), counted


def pairwise_gain(new: Any, old: Any, runtimes: Any, domains: Any, *, margin: float = 0.0,
                  confidence: float = 0.95, n_resamples: int = 999, seed: int = 0
                  ) -> tuple[float, float]:
    """How much better ``new`` scores order the strategies than ``old`` ones, paired on the same
    pairs: ``(gain, low)`` with ``gain`` the mean over domains of ``pairwise_accuracy(new) -
    pairwise_accuracy(old)`` (pairs counted as :func:`pairwise_accuracy` counts them with
    ``margin``) and ``low`` its one-sided lower ``confidence`` bound from a percentile bootstrap
    over strategies, resampled within each domain (:func:`scipy.stats.bootstrap`; pairs sharing
    a strategy are not independent, so the strategy is the unit). ``low > 0``: ``new`` ranks
    better with that confidence. ``(nan, nan)`` where no pair counts; ``low = gain`` where
    ``gain <= 0`` (nothing to bound) or every resample gives the same gain."""
    from scipy.stats import bootstrap

    per_domain, blocks = _gain_blocks([new], old, runtimes, domains, margin, confidence,
                                      np.random.default_rng(seed))
    if per_domain is None:
        return float("nan"), float("nan")
    gain = float(np.mean(per_domain[:, 0]))
    deltas = [(delta[0], counted) for delta, counted in blocks]
    if gain <= 0:
        return gain, gain

    def stat(*samples: np.ndarray) -> float:
        values = []
        for (delta, counted), idx in zip(deltas, samples):
            # both symmetric with a zero diagonal: a strategy drawn twice pairs with itself
            # nowhere, and the factor 2 of taking every ordered pair cancels
            idx = idx.astype(int)
            c = counted[np.ix_(idx, idx)].sum()
            if c:
                values.append(delta[np.ix_(idx, idx)].sum() / c)
        return float(np.mean(values)) if values else 0.0

    data = tuple(np.arange(delta.shape[0], dtype=np.float64) for delta, _ in deltas)
    if any(x.size < 2 for x in data):
        return gain, float("nan")
    res = bootstrap(data, stat, n_resamples=n_resamples, vectorized=False, paired=False,
                    confidence_level=confidence, alternative="greater", method="percentile",
                    rng=np.random.default_rng(seed))
    low = float(res.confidence_interval.low)
    return gain, (gain if not np.isfinite(low) else low)


def _gain_blocks(candidates: Sequence[Any], old: Any, runtimes: Any, domains: Any,
                 margin: float, confidence: float, rng: np.random.Generator
                 ) -> tuple[np.ndarray | None, list[tuple[np.ndarray, np.ndarray]]]:
    """What :func:`pairwise_gain` and :func:`selected_pairwise_gain` resample: ``(per_domain,
    blocks)`` with ``per_domain[k, c]`` candidate ``c``'s gain over ``old`` on the k-th domain
    where a pair counts (``None`` where none does) and per such domain a block ``(delta,
    counted)``: ``delta[c]`` the candidate's right-minus-old pair matrix and ``counted`` the
    pairs that count, both symmetric with a zero diagonal (a strategy drawn k times weighs its
    pairs k-fold and pairs with its own copies nowhere), on a subset drawn with ``rng`` of at
    most :data:`_GAIN_STRATEGIES` strategies."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    news = [_as_pair(c, old)[0] for c in candidates]
    o_, y = _as_pair(old, runtimes)
    d = np.asarray(domains).reshape(-1)
    if d.size != y.size:
        raise ValueError(f"domains needs one id per strategy ({y.size}), got {d.size}")
    gains: list[np.ndarray] = []
    blocks: list[tuple[np.ndarray, np.ndarray]] = []
    for dom in np.unique(d):
        sel = np.flatnonzero(d == dom)
        co, counted = _pair_correct(o_[sel], y[sel], margin)
        if not counted.any():
            continue
        delta = np.stack([_pair_correct(n[sel], y[sel], margin)[0] - co for n in news])
        gains.append(delta.sum(axis=(1, 2)) / counted.sum())
        if sel.size > _GAIN_STRATEGIES:
            keep = np.sort(rng.choice(sel.size, _GAIN_STRATEGIES, replace=False))
            delta, counted = delta[:, keep][:, :, keep], counted[np.ix_(keep, keep)]
        blocks.append((delta + delta.transpose(0, 2, 1),
                       (counted | counted.T).astype(np.float64)))
    if not gains:
        return None, blocks
    return np.stack(gains), blocks


def selected_pairwise_gain(candidates: Sequence[Any], chosen: int, old: Any, runtimes: Any,
                           domains: Any, *, margin: float = 0.0, confidence: float = 0.95,
                           n_resamples: int = 999, seed: int = 0) -> tuple[float, float]:
    """:func:`pairwise_gain` of ``candidates[chosen]`` over ``old`` where ``chosen`` was picked
    among ``candidates`` (e.g. the best of a training run's epochs) on these same strategies.

    The best of several noisy candidates scores above ``old`` by chance more often than any one
    of them does, so the bound must hold for whichever candidate is picked: ``low = gain - q``,
    with ``q`` the ``confidence`` quantile, over bootstrap resamples of the strategies
    (within each domain, as :func:`pairwise_gain` resamples them), of the largest amount by which
    any candidate's resampled gain exceeds its own gain (a simultaneous, max-type bootstrap
    bound). With one candidate it is the basic bootstrap bound of its gain. Returns
    ``(gain, low)``; ``(nan, nan)`` where no pair counts; ``low = gain`` where ``gain <= 0``
    (nothing to bound); ``low`` is ``nan`` where a domain has fewer than 2 strategies."""
    if not len(candidates):
        raise ValueError("candidates must not be empty")
    if not 0 <= chosen < len(candidates):
        raise ValueError(f"chosen must index the {len(candidates)} candidates, got {chosen}")
    rng = np.random.default_rng(seed)
    per_domain, blocks = _gain_blocks(candidates, old, runtimes, domains, margin, confidence,
                                      rng)
    if per_domain is None:
        return float("nan"), float("nan")
    g = np.mean(per_domain, axis=0)
    gain = float(g[chosen])
    if gain <= 0:
        return gain, gain
    if any(c.shape[0] < 2 for _, c in blocks):
        return gain, float("nan")
    total = np.zeros((n_resamples, len(candidates)))
    used = np.zeros(n_resamples)
    for delta, counted in blocks:
        n = counted.shape[0]
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(np.float64)
        den = np.einsum("bi,ij,bj->b", w, counted, w)
        num = np.stack([np.einsum("bi,ij,bj->b", w, m, w) for m in delta], axis=1)
        ok = den > 0
        total[ok] += num[ok] / den[ok, None]
        used += ok
    keep_b = used > 0
    resampled = total[keep_b] / used[keep_b, None]
    q = float(np.quantile((resampled - g).max(axis=1), confidence))
    return gain, gain - q
