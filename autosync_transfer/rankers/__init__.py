"""Rankers: the analytical cost model, features, losses, metrics and learned ranking modules."""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "AnalyticalRanker": "costmodel",
    "CostModelConfig": "costmodel",
    "estimate": "costmodel",
    "FEATURE_SCHEMA_VERSION": "features",
    "Featurizer": "features",
    "RankerModule": "modules",
    "RANKERS": "modules",
    "build_ranker": "modules",
    "TrialDataModule": "datamodule",
    "RankerKind": "kinds",
    "kind_of": "kinds",
    "kind_names": "kinds",
    "StepSimulator": "stepsim",
    "StepSimConfig": "stepsim",
    "Simulator": "simulator",
    "train_simulator": "simulator",
    "evaluate_simulator": "simulator",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
