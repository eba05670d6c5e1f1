"""Candidates near the best strategies measured so far (local search around the incumbents).

The sampler proposes strategies from the whole space; on clusters where the hand-optimized
builders are already good, few random strategies come near them. A *neighbour* of a measured
strategy keeps most of its variables' configurations and takes the rest from a donor (a freshly
sampled strategy): ``1 .. max(1, round(max_share * V))`` variables of ``V``, chosen at random.
Neighbours that break a constraint of the domain are dropped. A donor's all-reduce group numbers
are kept (a variable joins the parent's group of that number, or a new group of its own); the
neighbour's groups are then renumbered in order of first appearance
(:meth:`~autosync_transfer.strategies.types.Strategy.canonical`), so that two neighbours, or a
neighbour and its parent, that differ only in group numbers count as one strategy. The search
scores them beside the sampled candidates; only the simulator (or the cost model) decides which
are run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.types import Strategy

__all__ = ["NEIGHBOUR_KIND", "neighbours"]

#: ``Strategy.kind`` of a neighbour
NEIGHBOUR_KIND = "neighbour"


def neighbours(parents: Sequence[Strategy], donors: Sequence[Strategy], n: int, domain: Domain,
               *, seed: int = 0, max_share: float = 0.1) -> list[Strategy]:
    """Up to ``n`` distinct valid neighbours of ``parents`` (round-robin over them), each with
    some variables' configurations taken from one of ``donors``, in canonical form; none equals a
    parent (compared by :attr:`~autosync_transfer.strategies.types.Strategy.content_key`). Ids
    are ``nb-<fingerprint>``; deterministic for a seed."""
    from autosync_transfer.strategies.validate import violations

    if n < 0 or not 0.0 < max_share <= 1.0:
        raise ConfigError(f"neighbours needs n >= 0 and 0 < max_share <= 1, got n={n}, "
                          f"max_share={max_share}")
    if n == 0 or not parents or not donors:
        return []
    rng = np.random.default_rng(seed)
    donor_maps = [d.by_var() for d in donors]
    seen = {p.content_key for p in parents}
    out: list[Strategy] = []
    for attempt in range(4 * n):
        if len(out) >= n:
            break
        parent = parents[attempt % len(parents)]
        donor = donor_maps[int(rng.integers(len(donor_maps)))]
        v = len(parent.nodes)
        k = int(rng.integers(1, max(1, round(max_share * v)) + 1))
        chosen = set(rng.choice(v, size=min(k, v), replace=False).tolist())
        nodes = tuple(donor.get(c.var_name, c) if i in chosen else c
                      for i, c in enumerate(parent.nodes))
        s = Strategy(id="nb", kind=NEIGHBOUR_KIND, nodes=nodes).canonical()
        fp = s.fingerprint
        if fp in seen or violations(s, domain):
            continue
        seen.add(fp)
        out.append(s.model_copy(update={"id": f"nb-{fp}"}))
    return out
