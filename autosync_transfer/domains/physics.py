"""Where workload profiles and cluster calibrations are kept, and how they are found.

Both are JSON files (one :class:`~autosync_transfer.domains.profile.WorkloadProfile` or
:class:`~autosync_transfer.domains.profile.ClusterCalibration` each) in two kinds of folder:

* shipped with the project (:func:`~autosync_transfer.paths.shipped_profiles_dir`,
  :func:`~autosync_transfer.paths.shipped_calibrations_dir`: the checkout's
  ``datasets/profiles`` and ``datasets/calibrations``), read only;
* written here (:func:`~autosync_transfer.paths.profiles_dir`, a cache, and
  :func:`~autosync_transfer.paths.calibrations_dir`, per-user data).

A profile is found by (model graph fingerprint, worker type) and a calibration by (cluster
fingerprint, launcher): a changed model or cluster has another fingerprint, so nothing stale is
ever found. Calibrations are versioned: calibrating again writes the next version beside the
older ones. Among everything that matches, :func:`find_profile` and :func:`find_calibration`
take the newest (``created_at``), shipped or not; the step simulator's lookup
(:mod:`autosync_transfer.rankers.physics`) takes what was written here before what was shipped.
Files that do not parse are skipped (with a warning).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

from pydantic import ValidationError

from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
from autosync_transfer.paths import (
    calibrations_dir,
    profiles_dir,
    shipped_calibrations_dir,
    shipped_profiles_dir,
)

__all__ = ["profile_file_name", "find_profile", "find_profiles", "save_profile",
           "find_calibration", "find_calibrations", "save_calibration", "calibration_stem"]

log = logging.getLogger(__name__)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def profile_file_name(fingerprint: str, worker_type: str, workload: str = "") -> str:
    """``<workload>-<fingerprint>-<hash of the worker type>.json``."""
    wt = hashlib.sha256(worker_type.encode()).hexdigest()[:8]
    head = f"{_safe(workload)}-" if workload else ""
    return f"{head}{fingerprint}-{wt}.json"


def _read(path: Path, kind: type) -> object | None:
    try:
        return kind.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError) as e:
        log.warning("skipping %s: %s", path, " ".join(str(e).split())[:200])
        return None


def _folders(folder: str | Path | None, shipped: Path, written: Path) -> list[Path]:
    if folder is not None:
        return [Path(folder)]
    return [shipped, written]


def find_profiles(fingerprint: str | None = None, worker_type: str | None = None, *,
                  folder: str | Path | None = None) -> list[WorkloadProfile]:
    """Every stored profile matching ``fingerprint`` and ``worker_type`` (``None``: any), newest
    first; ``folder``: only that folder (default: the shipped profiles and the cache)."""
    found: list[WorkloadProfile] = []
    for d in _folders(folder, shipped_profiles_dir(), profiles_dir()):
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.json")):
            p = _read(path, WorkloadProfile)
            if not isinstance(p, WorkloadProfile):
                continue
            if fingerprint is not None and p.fingerprint != fingerprint:
                continue
            if worker_type is not None and p.worker_type != worker_type:
                continue
            found.append(p)
    return sorted(found, key=lambda p: p.created_at, reverse=True)


def find_profile(fingerprint: str, worker_type: str | None = None, *,
                 folder: str | Path | None = None) -> WorkloadProfile | None:
    """The newest stored profile of the graph ``fingerprint`` on ``worker_type`` (``None``: on
    any worker type), or ``None``."""
    found = find_profiles(fingerprint, worker_type, folder=folder)
    return found[0] if found else None


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)  # whole or not at all
    return path


def save_profile(profile: WorkloadProfile, *, folder: str | Path | None = None) -> Path:
    """Write ``profile`` to ``folder`` (default :func:`~autosync_transfer.paths.profiles_dir`),
    replacing the profile of the same key; returns the file."""
    d = Path(folder) if folder is not None else profiles_dir()
    name = profile_file_name(profile.fingerprint, profile.worker_type, profile.workload)
    return _write(d / name, profile.model_dump_json(indent=1) + "\n")


def calibration_stem(cluster: str, fingerprint: str, launcher: str) -> str:
    """``<cluster>-<fingerprint>-<launcher>``: the versions of one calibration are
    ``<stem>.v<N>.json``."""
    return f"{_safe(cluster)}-{fingerprint}-{_safe(launcher)}"


def find_calibrations(fingerprint: str | None = None, launcher: str | None = None, *,
                      folder: str | Path | None = None) -> list[ClusterCalibration]:
    """Every stored calibration of the cluster ``fingerprint`` made with ``launcher``
    (``None``: any), newest first."""
    found: list[ClusterCalibration] = []
    for d in _folders(folder, shipped_calibrations_dir(), calibrations_dir()):
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.json")):
            c = _read(path, ClusterCalibration)
            if not isinstance(c, ClusterCalibration):
                continue
            if fingerprint is not None and c.fingerprint != fingerprint:
                continue
            if launcher is not None and c.launcher != launcher:
                continue
            found.append(c)
    return sorted(found, key=lambda c: c.created_at, reverse=True)


def find_calibration(fingerprint: str, launcher: str | None = None, *,
                     folder: str | Path | None = None) -> ClusterCalibration | None:
    """The newest calibration of the cluster ``fingerprint`` (by ``launcher``, or any), or
    ``None``."""
    found = find_calibrations(fingerprint, launcher, folder=folder)
    return found[0] if found else None


def save_calibration(calibration: ClusterCalibration, *, folder: str | Path | None = None
                     ) -> Path:
    """Write ``calibration`` as the next version in ``folder`` (default
    :func:`~autosync_transfer.paths.calibrations_dir`); older versions stay. Returns the file."""
    d = Path(folder) if folder is not None else calibrations_dir()
    stem = calibration_stem(calibration.cluster, calibration.fingerprint, calibration.launcher)
    versions = [int(m.group(1)) for p in d.glob(f"{stem}.v*.json")
                if (m := re.fullmatch(re.escape(stem) + r"\.v(\d+)\.json", p.name))]
    n = max(versions, default=0) + 1
    return _write(d / f"{stem}.v{n}.json", json.dumps(
        json.loads(calibration.model_dump_json()), indent=1) + "\n")
