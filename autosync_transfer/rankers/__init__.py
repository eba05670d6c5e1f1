"""Rankers: the analytical cost model, features, losses, metrics and learned ranking modules."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AnalyticalRanker": "costmodel",
    "CostModelConfig": "costmodel",
    "estimate": "costmodel",
    "FEATURE_SCHEMA_VERSION": "features",
    "Featurizer": "features",
    "featurize": "features",
    "RankerModule": "modules",
    "RANKERS": "modules",
    "build_ranker": "modules",
    "TrialDataModule": "datamodule",
    "ANALYTICAL": "simulator",
    "Simulator": "simulator",
    "train_simulator": "simulator",
    "evaluate_simulator": "simulator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
