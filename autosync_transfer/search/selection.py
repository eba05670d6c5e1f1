"""Picking k strategies from scored candidates: best scores, with diversity.

AutoSync's "expression" selection: a strategy is described per variable by its configuration
without placement and group numbers (synchronizer kind, shard count, compressor, local
replication); the novelty of a candidate is the share of variables whose configuration none of
the strategies picked so far has. Greedily pick ``argmax(-rank_score + diversity * novelty)``,
where ``rank_score`` is the candidate's score rank scaled to [0, 1] (0: best).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autosync_transfer.strategies.types import PS, AllReduce, Strategy

__all__ = ["POOL", "describe", "select_diverse"]

#: how many of the best-scored candidates :func:`select_diverse` considers by default
POOL = 200


def _sync_key(s: PS | AllReduce) -> tuple:
    if isinstance(s, PS):
        return ("ps", s.local_replication)
    return ("ar", s.compressor, s.powersgd_rank if s.compressor == "powersgd" else 0)


def describe(strategy: Strategy) -> list[tuple]:
    """Per variable (in strategy order): its configuration without placement or groups."""
    out = []
    for n in strategy.nodes:
        if n.partition is None:
            assert n.synchronizer is not None
            out.append((n.var_name, 1, _sync_key(n.synchronizer)))
        else:
            kinds = tuple(sorted({_sync_key(s) for s in n.partition.synchronizers}))
            out.append((n.var_name, n.partition.shards, kinds))
    return out


def select_diverse(candidates: Sequence[Strategy], scores: Sequence[float], k: int, *,
                   diversity: float = 0.3, pool: int = POOL,
                   seen: Sequence[Strategy] = ()) -> list[int]:
    """Indices of ``k`` candidates (lower score = predicted faster). Only the ``pool`` best-scored
    candidates are considered; ``seen``: strategies already measured, whose configurations count
    as known."""
    n = len(candidates)
    if k <= 0 or n == 0:
        return []
    s = np.asarray(scores, float)
    s = np.where(np.isfinite(s), s, np.inf)
    order = np.lexsort((np.arange(n), s))[: max(pool, k)]
    rank = np.empty(len(order))
    rank[:] = np.arange(len(order)) / max(len(order) - 1, 1)
    if diversity <= 0:
        return [int(i) for i in order[:k]]
    known: set[tuple] = set()
    for st in seen:
        known.update(describe(st))
    desc = [set(describe(candidates[int(i)])) for i in order]
    sizes = [max(len(d), 1) for d in desc]
    chosen: list[int] = []
    taken = np.zeros(len(order), bool)
    for _ in range(min(k, len(order))):
        best, best_val = -1, -np.inf
        for j in range(len(order)):
            if taken[j]:
                continue
            novelty = len(desc[j] - known) / sizes[j]
            val = -rank[j] + diversity * novelty
            if val > best_val:
                best, best_val = j, val
        taken[best] = True
        chosen.append(int(order[best]))
        known |= desc[best]
    return chosen
