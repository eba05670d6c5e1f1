"""Where the MLflow store of autosync-transfer lives: tracking URI, artifact root, experiment.

``$MLFLOW_TRACKING_URI`` names the store when set (a tracking server, or any backend URI).
Otherwise the store is local: ``sqlite:///<registry dir>/mlflow.db`` with artifacts under
``<registry dir>/artifacts``, where the registry dir is ``$AUTOSYNC_REGISTRY_DIR``, the
checkout's ``registry/`` folder, or ``registry/`` in the per-user data folder of an installed
package (:func:`autosync_transfer.paths.registry_dir`). ``$AUTOSYNC_REGISTRY_ARTIFACTS``
overrides the artifact root.
Artifact locations are always explicit (never the current directory).

mlflow is imported inside functions only, so importing this module is cheap.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer import paths
from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    from mlflow import MlflowClient

__all__ = [
    "EXPERIMENT_NAME",
    "REGISTRY_DIR_ENV",
    "ARTIFACT_ROOT_ENV",
    "registry_dir",
    "tracking_uri",
    "artifact_root",
    "configure",
    "client",
    "check_reachable",
    "experiment_id",
    "lightning_logger",
]

#: the experiment every simulator run is logged to
EXPERIMENT_NAME = "autosync-transfer"
#: environment variable that replaces the default registry folder
REGISTRY_DIR_ENV = paths.REGISTRY_DIR_ENV
#: environment variable that replaces ``<registry dir>/artifacts`` as the artifact root
ARTIFACT_ROOT_ENV = "AUTOSYNC_REGISTRY_ARTIFACTS"
_TRACKING_ENV = "MLFLOW_TRACKING_URI"


def registry_dir() -> Path:
    """``$AUTOSYNC_REGISTRY_DIR``, else the checkout's ``registry/``, else ``registry/`` in the
    per-user data folder (:func:`autosync_transfer.paths.registry_dir`)."""
    return paths.registry_dir()


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else the local sqlite store in :func:`registry_dir`."""
    env = os.environ.get(_TRACKING_ENV)
    if env:
        return env
    return f"sqlite:///{registry_dir() / 'mlflow.db'}"


def artifact_root() -> str:
    """Artifact root of new experiments: ``$AUTOSYNC_REGISTRY_ARTIFACTS``, else
    ``<registry dir>/artifacts`` (as a ``file://`` URI). For a tracking server without a local
    override, the server's own default is used (empty string)."""
    env = os.environ.get(ARTIFACT_ROOT_ENV)
    if env:
        return env if "://" in env else Path(env).expanduser().resolve().as_uri()
    uri = tracking_uri()
    if uri.startswith(("http://", "https://", "databricks")):
        return ""
    return (registry_dir() / "artifacts").as_uri()


def _local_paths() -> None:
    """Create the folders a local store needs (sqlite cannot create its parent folder)."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    root = artifact_root()
    if root.startswith("file://"):
        from urllib.parse import unquote, urlparse

        Path(unquote(urlparse(root).path)).mkdir(parents=True, exist_ok=True)


def configure() -> str:
    """Point mlflow's fluent API at the store (tracking and registry URI); returns the URI."""
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # creating a local database's tables is routine, not news (and would break one-line errors)
    # nor is an empty download (a missing artifact is reported by the caller, in one line)
    for name in ("mlflow.store.db.utils", "alembic.runtime.migration",
                 "mlflow.store.artifact.artifact_repo"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _local_paths()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return uri


def client() -> MlflowClient:
    """An ``MlflowClient`` on the store (tracking and registry); a tracking server that does
    not answer is a :class:`ConfigError` at once (:func:`check_reachable`), not minutes of
    retries and a traceback."""
    from mlflow import MlflowClient

    uri = configure()
    check_reachable(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


@functools.lru_cache(maxsize=8)
def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """For a tracking server (``http(s)://``): one request to its ``/health`` within
    ``timeout_s``; no connection is a :class:`ConfigError` naming the URI (any HTTP answer,
    even an error status, means that the server is there). Other stores pass."""
    import urllib.error
    import urllib.request

    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise ConfigError(f"the MLflow tracking server {uri} does not answer ({why}); start it "
                          f"or point MLFLOW_TRACKING_URI at another store") from None


def experiment_id(c: MlflowClient | None = None) -> str:
    """Id of the ``autosync-transfer`` experiment, created with an explicit artifact location
    when missing."""
    from mlflow.exceptions import MlflowException

    c = c or client()
    try:
        exp = c.get_experiment_by_name(EXPERIMENT_NAME)
    except MlflowException as e:
        raise ConfigError(f"cannot use the MLflow store {tracking_uri()}: "
                          f"{' '.join(e.message.split())[:300]}") from e
    if exp is not None:
        if exp.lifecycle_stage == "deleted":  # deleted in the UI: runs cannot start there
            c.restore_experiment(exp.experiment_id)
        return str(exp.experiment_id)
    root = artifact_root()
    try:
        return str(c.create_experiment(EXPERIMENT_NAME, artifact_location=root or None))
    except MlflowException as e:
        exp = c.get_experiment_by_name(EXPERIMENT_NAME)  # created concurrently
        if exp is None:
            raise ConfigError(f"cannot create experiment {EXPERIMENT_NAME!r} in "
                              f"{tracking_uri()}: {e.message}") from e
        return str(exp.experiment_id)


def lightning_logger(run_name: str | None = None, tags: dict[str, Any] | None = None) -> Any:
    """A Lightning ``MLFlowLogger`` writing to the store's experiment (a new run; its id is
    ``logger.run_id``; models are not logged by the logger)."""
    from lightning.pytorch.loggers import MLFlowLogger

    c = client()
    experiment_id(c)
    return MLFlowLogger(experiment_name=EXPERIMENT_NAME, run_name=run_name,
                        tracking_uri=tracking_uri(), tags=tags, log_model=False,
                        artifact_location=artifact_root() or None)
