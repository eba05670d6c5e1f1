"""The simulator's second head: how much a strategy's compression distorts the averaged gradient.

A step-time simulator ranks by seconds per step; a lossy strategy may need more steps to reach
the same loss. :class:`FidelityModel` predicts a strategy's gradient error (the relative error
``||g - g_exact|| / ||g_exact||`` a trial's fidelity probe measures,
:class:`~autosync_transfer.runtime.accuracy.GradientFidelity`) from what the strategy compresses,
and :func:`step_ratio` turns an error into the expected ratio of steps to a target loss.

Features (:func:`fidelity_features`, versioned by :data:`FIDELITY_FEATURES_VERSION`): the share of
the model's gradient bytes that each compressor handles (``fp16``, ``fp16_ef``, ``powersgd`` at
rank 1, 2, 4, higher) and the share of embedding (row-sparse) bytes compressed at all. The model is
a ridge regression of the error on them (no intercept: a lossless strategy has error 0), fitted on
the probes of measured trials; before it is fitted it predicts a prior per compressor
(:data:`PRIOR_ERROR`).

:func:`step_ratio` is ``1 + k * rel_error**2`` (``k`` = 1 by default: for an error orthogonal to
the exact gradient that is ``1 / cos**2``, the factor by which the useful part of a step shrinks);
:func:`fit_ratio_constant` fits ``k`` from convergence checks (least squares through the origin of
``ratio - 1`` on ``rel_error**2``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autosync_transfer.errors import NotFittedError

if TYPE_CHECKING:
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.strategies.types import Strategy

__all__ = ["FIDELITY_FEATURES", "FIDELITY_FEATURES_VERSION", "PRIOR_ERROR", "FidelityModel",
           "fidelity_features", "fit_ratio_constant", "step_ratio"]

FIDELITY_FEATURES_VERSION = 1

#: the features, in order
FIDELITY_FEATURES: tuple[str, ...] = ("fp16", "fp16_ef", "powersgd_r1", "powersgd_r2",
                                      "powersgd_r4", "powersgd_rhigh", "sparse_compressed")

#: relative gradient error of a strategy compressing everything with one compressor, before any
#: probe was measured (fp16: rounding ~1e-3; PowerSGD: a low-rank approximation of each step)
PRIOR_ERROR: dict[str, float] = {"fp16": 1e-3, "fp16_ef": 1e-3, "powersgd_r1": 0.9,
                                 "powersgd_r2": 0.8, "powersgd_r4": 0.7, "powersgd_rhigh": 0.5,
                                 "sparse_compressed": 0.3}


def _compressor_key(sync: object) -> str | None:
    from autosync_transfer.strategies.types import AllReduce

    if not isinstance(sync, AllReduce) or sync.compressor == "none":
        return None
    if sync.compressor != "powersgd":
        return sync.compressor
    r = sync.powersgd_rank
    return f"powersgd_r{r}" if r in (1, 2, 4) else "powersgd_rhigh"


def fidelity_features(strategy: Strategy, graph: ModelGraph) -> np.ndarray:
    """The features of ``strategy`` on ``graph`` (:data:`FIDELITY_FEATURES`)."""
    x = np.zeros(len(FIDELITY_FEATURES))
    index = {name: i for i, name in enumerate(FIDELITY_FEATURES)}
    by_var = {v.name: v for v in graph.variables}
    total = float(sum(v.nbytes for v in graph.variables)) or 1.0
    sparse_total = float(sum(v.nbytes for v in graph.variables if v.sparse)) or 1.0
    for node in strategy.nodes:
        var = by_var.get(node.var_name)
        if var is None:
            continue
        items = list(node.items())
        for _, sync in items:
            key = _compressor_key(sync)
            if key is None:
                continue
            share = var.nbytes / len(items)
            x[index[key]] += share / total
            if var.sparse:
                x[index["sparse_compressed"]] += share / sparse_total
    return x


def step_ratio(rel_error: float | None, k: float = 1.0) -> float:
    """Expected steps to a target loss relative to exact synchronization for a gradient error
    ``rel_error`` (``None`` or 0: 1.0)."""
    if rel_error is None or not math.isfinite(rel_error):
        return 1.0 if rel_error is None else math.inf
    return 1.0 + k * float(rel_error) ** 2


def fit_ratio_constant(rel_errors: Sequence[float], ratios: Sequence[float],
                       default: float = 1.0) -> float:
    """``k`` of :func:`step_ratio` fitted on convergence checks (finite ratios only); ``default``
    without any informative pair."""
    pairs = [(e * e, r - 1.0) for e, r in zip(rel_errors, ratios)
             if math.isfinite(r) and math.isfinite(e) and e > 0]
    den = sum(x * x for x, _ in pairs)
    if not pairs or den <= 0:
        return default
    return max(0.0, sum(x * y for x, y in pairs) / den)


class FidelityModel:
    """Ridge regression (no intercept, ``alpha``) of the relative gradient error on
    :func:`fidelity_features`; :meth:`predict` gives the error, :meth:`ratio` the step ratio.
    Unfitted, it predicts from :data:`PRIOR_ERROR`."""

    def __init__(self, alpha: float = 1e-2, k: float = 1.0) -> None:
        self.alpha = alpha
        self.k = k
        self.coef_: np.ndarray | None = None
        self.n_fit_ = 0

    @property
    def fitted(self) -> bool:
        return self.coef_ is not None

    def fit(self, strategies: Sequence[Strategy], graph: ModelGraph,
            rel_errors: Sequence[float]) -> FidelityModel:
        """Fit on measured probes (at least one); returns ``self``."""
        if not strategies or len(strategies) != len(rel_errors):
            raise NotFittedError(f"FidelityModel.fit needs as many errors as strategies (> 0), "
                                 f"got {len(strategies)} and {len(rel_errors)}")
        x = np.stack([fidelity_features(s, graph) for s in strategies])
        y = np.asarray(rel_errors, dtype=float)
        prior = np.array([PRIOR_ERROR[f] for f in FIDELITY_FEATURES])
        # shrink towards the prior (ridge around it), so unseen compressors keep theirs
        a = x.T @ x + self.alpha * np.eye(len(prior))
        b = x.T @ y + self.alpha * prior
        self.coef_ = np.maximum(np.linalg.solve(a, b), 0.0)
        self.n_fit_ = len(y)
        return self

    def predict(self, strategies: Sequence[Strategy], graph: ModelGraph) -> np.ndarray:
        """Predicted relative gradient error of every strategy (0 for a lossless one)."""
        coef = self.coef_ if self.coef_ is not None else np.array(
            [PRIOR_ERROR[f] for f in FIDELITY_FEATURES])
        if not len(strategies):
            return np.zeros(0)
        x = np.stack([fidelity_features(s, graph) for s in strategies])
        return x @ coef

    def ratio(self, strategies: Sequence[Strategy], graph: ModelGraph) -> np.ndarray:
        """Predicted steps-to-target ratio of every strategy (:func:`step_ratio`)."""
        return np.array([step_ratio(float(e), self.k) for e in self.predict(strategies, graph)])
