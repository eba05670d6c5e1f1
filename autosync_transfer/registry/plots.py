"""PNG plots logged with a simulator (matplotlib, Agg backend; no display needed).

Each function writes one figure to ``path`` and returns the path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["rank_scatter", "score_histogram", "search_curves", "training_curves"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _ranks(values: np.ndarray) -> np.ndarray:
    """1 = smallest; ties share their mean rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        same = values == v
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    return ranks


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    _pyplot().close(fig)
    return path


def rank_scatter(scores: Sequence[float], runtimes_s: Sequence[float], path: str | Path, *,
                 title: str = "") -> Path:
    """Predicted rank (by score, lower = faster) against measured rank (by runtime) of the
    strategies of one domain; the diagonal is a perfect ranking."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(runtimes_s, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"one score per runtime, got {s.size} scores and {y.size} runtimes")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5))
    if s.size:
        rs, ry = _ranks(s), _ranks(y)
        ax.scatter(ry, rs, s=12, alpha=0.7)
        ax.plot([1, s.size], [1, s.size], color="grey", linewidth=1, linestyle="--")
    ax.set_xlabel("measured rank (1 = fastest)")
    ax.set_ylabel("predicted rank (1 = predicted fastest)")
    ax.set_title(title or f"predicted vs measured rank ({s.size} strategies)")
    return _save(fig, path)


def score_histogram(scores: Sequence[float], path: str | Path, *, title: str = "",
                    bins: int = 30) -> Path:
    """Histogram of the simulator's scores."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    s = s[np.isfinite(s)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    if s.size:
        ax.hist(s, bins=max(1, min(bins, s.size)))
    ax.set_xlabel("score (lower = predicted faster)")
    ax.set_ylabel("strategies")
    ax.set_title(title or f"score distribution ({s.size} strategies)")
    return _save(fig, path)


def training_curves(history: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[float]],
                    path: str | Path, *, title: str = "", x_key: str = "epoch") -> Path:
    """One line per metric of a training history: a list of rows (``[{'epoch': 0,
    'train_loss': 0.7, 'val_pairwise_acc': 0.6}, ...]``) or columns (``{'train_loss': [...],
    ...}``, x = position). Losses on the left axis, other metrics on the right; timing columns
    (``*_s``) are left out."""
    if isinstance(history, Mapping):
        n = max((len(v) for v in history.values()), default=0)
        history = [{x_key: i, **{k: v[i] for k, v in history.items() if i < len(v)}}
                   for i in range(n)]
    keys: list[str] = []
    for row in history:
        for k, v in row.items():
            if (k != x_key and k not in keys and not k.endswith("_s")
                    and isinstance(v, (int, float)) and not isinstance(v, bool)):
                keys.append(k)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    right = None
    for k in keys:
        pts = [(row.get(x_key, i), row[k]) for i, row in enumerate(history)
               if isinstance(row.get(k), (int, float)) and np.isfinite(row[k])]
        if not pts:
            continue
        xs, ys = zip(*pts)
        if "loss" in k:
            ax.plot(xs, ys, label=k)
        else:
            right = right or ax.twinx()
            right.plot(xs, ys, label=k, linestyle="--")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(x_key)
    ax.set_ylabel("loss")
    handles, labels = ax.get_legend_handles_labels()
    if right is not None:
        right.set_ylabel("metric")
        h2, l2 = right.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, fontsize="small", loc="best")
    ax.set_title(title or "training curves")
    return _save(fig, path)


def search_curves(curves: Mapping[str, Sequence[float | None]],
                  hit_rates: Mapping[str, Sequence[float]], path: str | Path, *,
                  per_round: int, title: str = "") -> Path:
    """AutoSync's Fig. 2: best-so-far speed-up over the best hand-optimized strategy vs the number
    of real trials, one line per search (top), and each search's hit rate per round (share of
    the round's trials faster than the best hand-optimized strategy) in its own panel below."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    for name, curve in curves.items():
        pts = [(i + 1, v) for i, v in enumerate(curve) if v is not None and np.isfinite(v)]
        if pts:
            xs, ys = zip(*pts)
            top.step(xs, ys, where="post", label=name)
    for level in (1.0, 1.1, 1.2):
        top.axhline(level, color="grey", linewidth=0.6, linestyle=":" if level > 1 else "-")
    top.set_ylabel("best speed-up over\nbest hand-optimized")
    top.legend(fontsize="small", loc="lower right")
    top.set_title(title or "search")
    n = max(len(hit_rates), 1)
    width = per_round / (n + 1)
    for j, (name, rates) in enumerate(hit_rates.items()):
        xs = [r * per_round + (j + 0.5) * width for r in range(len(rates))]
        bottom.bar(xs, list(rates), width=width, align="edge", label=name)
    bottom.set_ylim(0, 1)
    bottom.set_ylabel("hit rate\nper round")
    bottom.set_xlabel("real trials")
    return _save(fig, path)
