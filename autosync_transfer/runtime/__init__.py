"""Runtime: plan strategies, execute them on torch.distributed, measure trials, emulate clusters.

Names are imported lazily (torch is heavy): ``from autosync_transfer.runtime import WorkerPool``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "make_plan": "plan",
    "SyncPlan": "plan",
    "StrategyExecutor": "executor",
    "CommGroups": "executor",
    "Protocol": "trial",
    "TrialResult": "trial",
    "WorkerPool": "trial",
    "EmulatedCluster": "emulation",
    "spawn_local": "launch",
    "init_from_env": "launch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
