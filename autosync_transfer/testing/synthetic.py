"""Synthetic trial records for tests of the learning code.

A test double for measured trials: the runtime of a strategy is a fixed compute time plus the
analytical cost model's synchronization estimate, with seeded multiplicative noise. Nothing here
is a measurement; the shipped datasets hold those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["synthetic_records", "synthetic_trials", "write_synthetic_store"]


def synthetic_records(domain: Any, n: int = 40, seed: int = 0, *, noise: float = 0.05,
                      compute_s: float = 0.05) -> list[Any]:
    """``n`` sampled strategies of ``domain`` as ``TrialRecord``s with cost-model runtimes."""
    import numpy as np

    from autosync_transfer.dataset.store import TrialRecord
    from autosync_transfer.rankers.costmodel import AnalyticalRanker
    from autosync_transfer.strategies.sampler import StrategySampler

    strategies = StrategySampler(domain, seed=seed).sample_n(n)
    estimates = AnalyticalRanker().score(strategies, domain)
    rng = np.random.default_rng(seed)
    out = []
    for i, (s, e) in enumerate(zip(strategies, estimates)):
        t = float(compute_s + e * (1 + noise * rng.standard_normal()))
        out.append(TrialRecord(
            id=f"{domain.name}/synthetic/{i}", domain=domain.name, model=domain.model.name,
            cluster=domain.cluster.name, model_fingerprint=domain.model.fingerprint,
            cluster_fingerprint=domain.cluster.fingerprint, strategy_id=s.id,
            strategy_kind=s.kind, strategy=s.model_dump(mode="json"), status="ok",
            iteration_times_s=[t] * 3, median_s=t, protocol={"warmup": 0, "iters": 3},
            launcher="synthetic", timestamp="2024-05-01T12:00:00+00:00", wall_s=0.0,
            machine={}, estimated_sync_s=float(e)))
    return out


def synthetic_trials(domain: Any, n: int = 40, seed: int = 0) -> Any:
    """The records of :func:`synthetic_records` as a trials DataFrame (loader format)."""
    import pandas as pd

    return pd.DataFrame([r.to_row() for r in synthetic_records(domain, n, seed)])


def write_synthetic_store(path: str | Path, domain_name: str, n: int, seed: int) -> None:
    """Append :func:`synthetic_records` of catalog domain ``domain_name`` to a trial store."""
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.domains.catalog import get_domain

    store = TrialStore(path)
    for r in synthetic_records(get_domain(domain_name), n, seed):
        store.append(r)
