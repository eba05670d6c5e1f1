"""Where autosync-transfer reads its shipped data and keeps what it writes: one place.

Two layouts, told apart by :func:`checkout_root`: the package imported from a source checkout
(an editable install included) or installed from a wheel.

- Data read by default (:func:`datasets_dir`): the checkout's ``datasets/``; installed, the
  parquet files shipped inside the package (``autosync_transfer/shipped/``, the checkout's
  ``datasets/parquet`` and README). Reading parquet needs pandas and pyarrow (the ``ml`` extra,
  which every command that reads trials needs anyway).
- The registry, the local MLflow store (:func:`registry_dir`): the checkout's ``registry/``;
  installed, ``$XDG_DATA_HOME/autosync-transfer/registry`` (default
  ``~/.local/share/autosync-transfer/registry``), one per user.
- Stores that commands write by default: trial stores of ``collect`` (:func:`trials_dir`) in the
  checkout's ``datasets/trials/``, parquet files of ``datasets compact`` (:func:`parquet_dir`) in
  ``datasets/parquet/``, search runs (:func:`search_dir`) in ``runs/search/``; installed, below
  ``autosync-runs/`` in the current directory: ``autosync-runs/trials/``,
  ``autosync-runs/parquet/``, ``autosync-runs/search/``.

- Measured physics (the step-time simulator's inputs): workload profiles are a cache
  (:func:`profiles_dir`: ``$XDG_CACHE_HOME/autosync-transfer/profiles``, default
  ``~/.cache/autosync-transfer/profiles``), cluster calibrations are data kept per user
  (:func:`calibrations_dir`: ``calibrations/`` in :func:`user_data_dir`); the ones the project
  measured ship in ``datasets/profiles`` and ``datasets/calibrations`` (installed:
  ``autosync_transfer/shipped/profiles`` and ``.../calibrations``) and are read too.

Environment variables override: ``$AUTOSYNC_DATASETS`` names the datasets folder in use (read
by default; ``collect`` and ``datasets compact`` then write to its ``trials/`` and
``parquet/``), ``$AUTOSYNC_REGISTRY_DIR`` the registry folder (``$MLFLOW_TRACKING_URI`` replaces
the whole store, see :mod:`autosync_transfer.registry.store`), ``$AUTOSYNC_PROFILES_DIR`` and
``$AUTOSYNC_CALIBRATIONS_DIR`` the folders profiles and calibrations are written to. Every command also takes the
path it reads or writes as an option (``--data``, ``--store``, ``--out``).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

__all__ = [
    "CALIBRATIONS_DIR_ENV",
    "DATASETS_ENV",
    "PROFILES_DIR_ENV",
    "PROJECT_NAME",
    "REGISTRY_DIR_ENV",
    "RUNS_DIR_NAME",
    "calibrations_dir",
    "checkout_root",
    "datasets_dir",
    "parquet_dir",
    "profiles_dir",
    "registry_dir",
    "search_dir",
    "shipped_calibrations_dir",
    "shipped_datasets_dir",
    "shipped_profiles_dir",
    "trials_dir",
    "user_cache_dir",
    "user_data_dir",
]

#: the distribution's name (pyproject.toml ``[project] name``; also the user data folder's name)
PROJECT_NAME = "autosync-transfer"
#: environment variable naming the datasets folder in use
DATASETS_ENV = "AUTOSYNC_DATASETS"
#: environment variable naming the registry folder
REGISTRY_DIR_ENV = "AUTOSYNC_REGISTRY_DIR"
#: environment variable naming the folder of cached workload profiles
PROFILES_DIR_ENV = "AUTOSYNC_PROFILES_DIR"
#: environment variable naming the folder of cluster calibrations
CALIBRATIONS_DIR_ENV = "AUTOSYNC_CALIBRATIONS_DIR"
#: folder below the current directory that an installed package writes its stores to
RUNS_DIR_NAME = "autosync-runs"

_PACKAGE = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The source checkout the package is imported from (the folder whose ``pyproject.toml``
    names this project, beside the package), or None for an installed package."""
    root = _PACKAGE.parent
    try:
        with open(root / "pyproject.toml", "rb") as f:
            name = tomllib.load(f).get("project", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if name == PROJECT_NAME else None


def shipped_datasets_dir() -> Path:
    """The measured datasets inside the installed package (``datasets/`` of the checkout,
    packaged as ``autosync_transfer/shipped``: its README and ``parquet/``)."""
    return _PACKAGE / "shipped"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def datasets_dir() -> Path:
    """The trial data read by default: ``$AUTOSYNC_DATASETS``, else the checkout's
    ``datasets/``, else the datasets shipped in the package."""
    env = _env_path(DATASETS_ENV)
    if env is not None:
        return env
    root = checkout_root()
    return root / "datasets" if root is not None else shipped_datasets_dir()


def user_data_dir() -> Path:
    """The per-user data folder: ``$XDG_DATA_HOME/autosync-transfer`` (when set to an absolute
    path), else ``~/.local/share/autosync-transfer``."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / PROJECT_NAME


def registry_dir() -> Path:
    """The local MLflow store's folder: ``$AUTOSYNC_REGISTRY_DIR``, else the checkout's
    ``registry/``, else ``registry/`` in :func:`user_data_dir`."""
    env = _env_path(REGISTRY_DIR_ENV)
    if env is not None:
        return env.resolve()
    root = checkout_root()
    return root / "registry" if root is not None else user_data_dir() / "registry"


def trials_dir() -> Path:
    """Default folder of the trial stores ``collect`` writes (``<domain>.jsonl``):
    ``$AUTOSYNC_DATASETS/trials``, else the checkout's ``datasets/trials``, else
    ``./autosync-runs/trials``."""
    env = _env_path(DATASETS_ENV)
    if env is not None:
        return env / "trials"
    root = checkout_root()
    return root / "datasets" / "trials" if root is not None else Path.cwd() / RUNS_DIR_NAME / "trials"


def parquet_dir() -> Path:
    """Default folder ``datasets compact`` writes parquet files to: ``parquet/`` beside
    :func:`trials_dir`."""
    return trials_dir().parent / "parquet"


def search_dir() -> Path:
    """Default folder of search runs (``<domain>/<run>.jsonl``): the checkout's
    ``runs/search``, else ``./autosync-runs/search``."""
    root = checkout_root()
    return root / "runs" / "search" if root is not None else Path.cwd() / RUNS_DIR_NAME / "search"


def user_cache_dir() -> Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/autosync-transfer`` (when set to an absolute
    path), else ``~/.cache/autosync-transfer``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / PROJECT_NAME


def profiles_dir() -> Path:
    """Where measured workload profiles are cached: ``$AUTOSYNC_PROFILES_DIR``, else
    ``profiles/`` in :func:`user_cache_dir` (checkout or installed alike: a profile is a property
    of the machine, not of the checkout)."""
    env = _env_path(PROFILES_DIR_ENV)
    return env if env is not None else user_cache_dir() / "profiles"


def calibrations_dir() -> Path:
    """Where cluster calibrations are written: ``$AUTOSYNC_CALIBRATIONS_DIR``, else
    ``calibrations/`` in :func:`user_data_dir`."""
    env = _env_path(CALIBRATIONS_DIR_ENV)
    return env if env is not None else user_data_dir() / "calibrations"


def _shipped(kind: str) -> Path:
    root = checkout_root()
    return root / "datasets" / kind if root is not None else shipped_datasets_dir() / kind


def shipped_profiles_dir() -> Path:
    """The profiles the project measured: the checkout's ``datasets/profiles``, installed
    ``autosync_transfer/shipped/profiles``."""
    return _shipped("profiles")


def shipped_calibrations_dir() -> Path:
    """The cluster calibrations the project measured: the checkout's ``datasets/calibrations``,
    installed ``autosync_transfer/shipped/calibrations``."""
    return _shipped("calibrations")
