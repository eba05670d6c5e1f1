"""Registry: the only package that imports mlflow. Simulators are logged, versioned (one
registered model per domain, ``autosync-<domain>``), aliased (``champion``) and loaded by URI.

Names are imported lazily (mlflow is heavy): ``from autosync_transfer.registry import load_simulator``.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

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

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
