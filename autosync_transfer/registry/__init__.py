"""Registry: the only package that imports mlflow. Simulators are logged, versioned (one
registered model per domain, ``autosync-<domain>``), aliased (``champion``) and loaded by URI.

Names are imported lazily (mlflow is heavy): ``from autosync_transfer.registry import load_simulator``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "tracking_uri": "store",
    "client": "store",
    "registered_name": "models",
    "log_simulator": "models",
    "load_simulator": "models",
    "promote": "models",
    "promote_if_better": "models",
    "champion": "models",
    "list_models": "models",
    "describe_model": "models",
    "train_and_register": "models",
    "evaluate_registered": "models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
