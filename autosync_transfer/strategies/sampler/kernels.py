"""The sampler's sequential passes, run batched: many independent problems in lock step
(numpy over the problems, a Python loop over the items)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["balance", "ordered_fill", "pad", "relabel_first_appearance"]


def relabel_first_appearance(groups: np.ndarray) -> np.ndarray:
    """Renumber group ids 0, 1, ... in order of first appearance."""
    if groups.size == 0:
        return groups
    uniq, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    new_id = np.empty(uniq.size, np.int64)
    new_id[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return new_id[inverse.reshape(-1)]


def pad(arrays: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """Stack 1-d arrays as the columns of a zero-padded (max length, count) matrix."""
    out = np.zeros((max(a.size for a in arrays), len(arrays)), dtype)
    for j, a in enumerate(arrays):
        out[: a.size, j] = a
    return out


def balance(
    sizes: Sequence[np.ndarray],
    shares: np.ndarray,
    uniforms: Sequence[np.ndarray | None] | None,
    temperature: float,
) -> list[np.ndarray]:
    """Assign items to bins, one problem per entry of ``sizes``, all problems in lock step.

    Problem ``k`` has the bins ``b`` with ``shares[k, b] > 0`` (a bin with share 0 is unused).
    With ``total`` the bytes assigned so far including item ``j``, its gap to the target is
    ``gap_b = total * shares[k, b] - load_b``. Without ``uniforms`` item ``j`` goes to the bin with
    the largest gap (the least-loaded one when shares are equal; ties: the first bin); with
    ``uniforms`` (one U[0, 1) per item) it is drawn from ``softmax(gap_b / (temperature *
    total))`` by inverting the cumulative distribution. Returns the bin of every item.
    """
    size_mat = pad(sizes, np.float64)  # (M, n)
    m, n = size_mat.shape
    nbins = shares.shape[1]
    mask = np.where(shares > 0, 0.0, -np.inf) if (shares <= 0).any() else None
    u_mat = None if uniforms is None else pad([u for u in uniforms if u is not None], np.float64)
    if u_mat is not None and u_mat.shape[1] != n:
        raise ValueError("one uniform array per problem is needed")
    inv_scale = np.empty((n, 1))
    load = np.zeros((n, nbins))
    total = np.zeros(n)
    rows = np.arange(n)
    out = np.empty((m, n), np.int64)
    for j in range(m):
        b = size_mat[j]
        total += b
        score = total[:, None] * shares
        score -= load
        if mask is not None:
            score += mask
        if u_mat is None:
            c = score.argmax(axis=1)
        else:
            np.divide(1.0, temperature * np.maximum(total, 1.0)[:, None], out=inv_scale)
            score *= inv_scale
            score -= score.max(axis=1, keepdims=True)
            np.exp(score, out=score)
            cdf = np.cumsum(score, axis=1)
            c = (cdf < (u_mat[j] * cdf[:, -1])[:, None]).sum(axis=1)
        load[rows, c] += b
        out[j] = c
    return [out[: s.size, k] for k, s in enumerate(sizes)]


def ordered_fill(sizes: Sequence[np.ndarray], num_groups: Sequence[int]) -> list[np.ndarray]:
    """Contiguous size-balanced groups: fill group g (in item order) until its bytes reach
    ``total / G``, then move on to g + 1; the last group takes the rest. Integer arithmetic."""
    size_mat = pad(sizes, np.int64)  # (M, n)
    m, n = size_mat.shape
    total = np.array([int(s.sum()) for s in sizes], np.int64)
    groups_n = np.asarray(num_groups, np.int64)
    g = np.zeros(n, np.int64)
    load = np.zeros(n, np.int64)
    out = np.empty((m, n), np.int64)
    for j in range(m):
        out[j] = g
        load += size_mat[j]
        full = (load * groups_n >= total) & (g < groups_n - 1)
        g += full
        load[full] = 0
    return [out[: s.size, k] for k, s in enumerate(sizes)]
