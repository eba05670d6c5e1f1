"""The learning-curve plot (matplotlib, Agg backend; no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from autosync_transfer.adapt.core import LearningCurve

__all__ = ["learning_curve_plot"]

_LABELS = {"pairwise_accuracy": "pairwise accuracy", "top1": "top-1 score",
           "kendall_tau": "Kendall's tau", "regret": "regret"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def learning_curve_plot(curve: LearningCurve, path: str | Path, *,
                        metric: str = "pairwise_accuracy", title: str = "") -> Path:
    """Held-out ``metric`` against the number of target trials: the adapted and the
    from-scratch simulator (mean over seeds, with a ±1 std band) and the zero-shot level as a
    dashed line. Writes a PNG to ``path`` and returns it."""
    rows = curve.table(metric)
    x = np.array([r["shots"] for r in rows], dtype=np.float64)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, color in (("adapted", f"adapted ({curve.method})", "tab:blue"),
                              ("scratch", "from scratch", "tab:orange")):
        mean = np.array([r[f"{key}_mean"] for r in rows], dtype=np.float64)
        std = np.nan_to_num(np.array([r[f"{key}_std"] for r in rows], dtype=np.float64))
        ok = np.isfinite(mean)
        if ok.any():
            ax.plot(x[ok], mean[ok], marker="o", label=label, color=color)
            ax.fill_between(x[ok], mean[ok] - std[ok], mean[ok] + std[ok], alpha=0.2,
                            color=color, linewidth=0)
    zero = curve.zero_shot.get(metric, math.nan)
    if math.isfinite(zero):
        ax.axhline(zero, color="grey", linestyle="--", linewidth=1, label="zero-shot")
    if len(x) and x.max() > 10:
        ax.set_xscale("symlog", linthresh=5)
    ax.set_xticks(x)
    ax.set_xticklabels([str(int(v)) for v in x])
    ax.set_xlabel("target trials (N)")
    ax.set_ylabel(f"held-out {_LABELS.get(metric, metric)}")
    ax.set_title(title or f"{curve.target}: {_LABELS.get(metric, metric)} vs target trials "
                          f"({len(curve.seeds)} seeds)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
