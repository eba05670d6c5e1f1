"""Registry: the only package that imports mlflow. Simulators are logged, versioned (one
registered model per domain, ``autosync-<domain>``), aliased (``champion``) and loaded by URI.

Modules, one job each: :mod:`~.store` (where the MLflow store lives), :mod:`~.versions` (names,
versions, aliases, listings), :mod:`~.flavor` (a simulator's save -> log -> load),
:mod:`~.workflows` (train and register, evaluate, promote the champion), :mod:`~.pyfunc` (the
MLflow pyfunc face), :mod:`~.searches` (search runs), :mod:`~.plots` (the PNG figures).

Names are imported lazily (mlflow is heavy): ``from autosync_transfer.registry import load_simulator``.
"""

from __future__ import annotations

from autosync_transfer._lazy import lazy_exports

_EXPORTS = {
    "tracking_uri": "store",
    "CHAMPION": "versions",
    "ModelVersionInfo": "versions",
    "registered_name": "versions",
    "resolve": "versions",
    "promote": "versions",
    "champion": "versions",
    "list_models": "versions",
    "describe_model": "versions",
    "compare_links": "versions",
    "log_simulator": "flavor",
    "load_simulator": "flavor",
    "load_domain": "flavor",
    "load_version": "flavor",
    "TrainReport": "workflows",
    "TrainedVersion": "workflows",
    "promote_if_better": "workflows",
    "train_and_register": "workflows",
    "evaluate_registered": "workflows",
}

__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
