"""The measured physics of a domain: the step-time simulator's inputs, found by fingerprint.

:func:`measured_physics` returns what :class:`~autosync_transfer.rankers.stepsim.StepSimulator`
should simulate a domain with: a stored
:class:`~autosync_transfer.domains.profile.WorkloadProfile` of the model's graph fingerprint and
the newest stored :class:`~autosync_transfer.domains.profile.ClusterCalibration` of the cluster's
fingerprint (made with ``launcher`` when one is given; otherwise any, a non-emulated one
preferred over an emulated one) of one machine type: the newest profile whose processor has a
calibration of its own, with the newest such calibration. Where no machine type has both, the
newest profile of any type, with a calibration that does not record its processor, else
another type's (only when nothing else is stored). What was measured here comes before what
was shipped: at every step the written folders' files (``$AUTOSYNC_PROFILES_DIR`` /
``$AUTOSYNC_CALIBRATIONS_DIR``, else the user's cache and data folders) are taken before the
shipped ones, however new those are, newest first within each. With them comes the
:class:`~autosync_transfer.rankers.stepsim.StepSimConfig` that goes with them: a
calibration made with the ``emulated`` launcher ran every worker of the cluster on one host, so
the config says so (``host_processes`` = the world size, ``host_cores`` = the calibration's
``host_cores``). Stored files are searched where
:mod:`autosync_transfer.domains.physics` keeps them (shipped and written folders); a file that
does not parse is skipped, as is a calibration that does not name every node of the cluster.

Within :func:`physics_override` (e.g. a repeat run's physics, measured on the machine and at
the hour of its labels: :func:`~autosync_transfer.dataset.repeat.using_run_physics`), one
domain's model and cluster find the given profile and calibration instead, whatever launcher is
asked for; every other pair of model and cluster finds what it found before.

Lookups are cached per process, keyed by the fingerprints, the launcher and the folders with
their modification times (a file written or replaced there is seen by the next lookup).

Every place that featurizes or scores strategies with the step simulator (the simulators'
``_featurizer_for``, the rankers' training data module) calls this with the same arguments, so
features at training time and at scoring time come from the same physics. :data:`FALLBACK`
(``physics="fallback"`` of :class:`~autosync_transfer.rankers.simulator.Simulator` and
:class:`~autosync_transfer.rankers.datamodule.TrialDataModule`) forces the simulator's fallback
constants instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from autosync_transfer.domains import physics as stored
from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.stepsim import StepSimConfig

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain

__all__ = ["MEASURED", "FALLBACK", "PHYSICS_MODES", "EMULATED_LAUNCHER", "Physics",
           "measured_physics", "physics_for", "check_physics", "clear_physics_cache",
           "physics_override"]

log = logging.getLogger(__name__)

#: physics mode: the stored profile and calibration of the domain, found by fingerprint
MEASURED = "measured"
#: physics mode: the step simulator's fallback constants (the cluster spec and the graph only)
FALLBACK = "fallback"
PHYSICS_MODES: tuple[str, ...] = (MEASURED, FALLBACK)
#: the launcher whose workers all run on one host (an emulated cluster)
EMULATED_LAUNCHER = "emulated"


class Physics(NamedTuple):
    """A domain's step-simulator inputs (``None``: not measured, the fallback is used)."""

    profile: WorkloadProfile | None
    calibration: ClusterCalibration | None
    config: StepSimConfig


_lock = threading.Lock()
_cache: dict[tuple[object, ...], tuple[WorkloadProfile | None, ClusterCalibration | None]] = {}
#: (model fingerprint, cluster fingerprint) -> the physics :func:`physics_override` gives it
_overrides: dict[tuple[str, str], tuple[WorkloadProfile, ClusterCalibration]] = {}


def check_physics(physics: str) -> str:
    """``physics`` when it is one of :data:`PHYSICS_MODES`, else a :class:`ConfigError`."""
    if physics not in PHYSICS_MODES:
        raise ConfigError(f"physics must be one of {', '.join(PHYSICS_MODES)}, got {physics!r}")
    return physics


def clear_physics_cache() -> None:
    """Forget every cached lookup (the next one reads the folders again)."""
    with _lock:
        _cache.clear()
    _shipped_dirs.cache_clear()


@functools.lru_cache(maxsize=8)
def _shipped_dirs(profiles: Callable[[], Path], calibrations: Callable[[], Path]
                  ) -> tuple[Path, Path]:
    # keyed by the functions: the checkout does not move while the process runs
    return profiles(), calibrations()


def _folders_state() -> tuple[tuple[str, int | None], ...]:
    """The folders :mod:`~autosync_transfer.domains.physics` searches, with their mtimes."""
    shipped_p, shipped_c = _shipped_dirs(stored.shipped_profiles_dir,
                                         stored.shipped_calibrations_dir)
    out = []
    for d in (shipped_p, stored.profiles_dir(), shipped_c, stored.calibrations_dir()):
        try:
            mtime: int | None = Path(d).stat().st_mtime_ns
        except OSError:
            mtime = None
        out.append((str(d), mtime))
    return tuple(out)


def _written_first(find: Callable[..., list], fingerprint: str, launcher_or_worker: str | None,
                   written: Path, shipped: Path) -> list:
    """``find``'s files of ``fingerprint`` in the ``written`` folder, newest first, then the
    ``shipped`` folder's (one folder once where both are the same)."""
    out = list(find(fingerprint, launcher_or_worker, folder=written))
    if Path(shipped).resolve() != Path(written).resolve():
        out += find(fingerprint, launcher_or_worker, folder=shipped)
    return out


def _covers(calibration: ClusterCalibration, domain: Domain) -> bool:
    names = {n.name for n in calibration.nodes}
    missing = [n.name for n in domain.cluster.nodes if n.name not in names]
    if missing:
        log.warning("skipping the %s calibration of cluster %s: node %r is not calibrated",
                    calibration.launcher, calibration.cluster, missing[0])
    return not missing


def _pick_calibration(domain: Domain, launcher: str | None,
                      processor: str | None = None) -> ClusterCalibration | None:
    found = [c for c in _written_first(stored.find_calibrations, domain.cluster.fingerprint,
                                       launcher, stored.calibrations_dir(),
                                       stored.shipped_calibrations_dir())
             if _covers(c, domain)]  # written, then shipped; newest first within each
    if processor is not None:
        # the machine type of the profile first, then calibrations that do not say theirs;
        # another machine type's only when nothing else is stored
        same = [c for c in found if c.processor == processor]
        unknown = [c for c in found if c.processor is None]
        found = same or unknown or found
    if launcher is None:  # within that, a real cluster before an emulated one
        real = [c for c in found if c.launcher != EMULATED_LAUNCHER]
        found = real or found
    return found[0] if found else None


def _pick_pair(domain: Domain, launcher: str | None
               ) -> tuple[WorkloadProfile | None, ClusterCalibration | None]:
    """The newest profile whose machine type has a calibration of its own, with that
    calibration; else the newest profile of any type with :func:`_pick_calibration`'s choice."""
    profiles = _written_first(stored.find_profiles, domain.model.fingerprint, None,
                              stored.profiles_dir(), stored.shipped_profiles_dir())
    for profile in profiles:
        if profile.processor is None:
            continue
        calibration = _pick_calibration(domain, launcher, profile.processor)
        if calibration is not None and calibration.processor == profile.processor:
            return profile, calibration
    profile = profiles[0] if profiles else None
    return profile, _pick_calibration(domain, launcher,
                                      profile.processor if profile is not None else None)


@contextlib.contextmanager
def physics_override(domain: Domain, profile: WorkloadProfile,
                     calibration: ClusterCalibration) -> Iterator[None]:
    """Within the block, :func:`measured_physics` of ``domain``'s model and cluster (this pair
    of fingerprints, any launcher) returns ``profile`` and ``calibration``; other domains, even
    of the same model or the same cluster, find what they found before. Blocks nest; the
    override is process-wide (every thread sees it). A profile of another model or a
    calibration of another cluster is a :class:`ConfigError`."""
    if profile.fingerprint != domain.model.fingerprint:
        raise ConfigError(f"profile: fingerprint {profile.fingerprint!r} is not the model "
                          f"{domain.model.name!r}'s ({domain.model.fingerprint!r})")
    if calibration.fingerprint != domain.cluster.fingerprint:
        raise ConfigError(f"calibration: fingerprint {calibration.fingerprint!r} is not the "
                          f"cluster {domain.cluster.name!r}'s ({domain.cluster.fingerprint!r})")
    key = (domain.model.fingerprint, domain.cluster.fingerprint)
    with _lock:
        before = _overrides.get(key)
        _overrides[key] = (profile, calibration)
    try:
        yield
    finally:
        with _lock:
            if before is None:
                _overrides.pop(key, None)
            else:
                _overrides[key] = before


def measured_physics(domain: Domain, launcher: str | None = None, *,
                     config: StepSimConfig | None = None) -> Physics:
    """The measured physics of ``domain`` (see the module docstring): a profile and a
    calibration (by ``launcher``, or any, non-emulated preferred) of one machine type where such
    a pair is stored, else the newest profile and its best calibration, and ``config`` (default
    ``StepSimConfig()``) with ``host_processes`` / ``host_cores`` set for an emulated calibration
    (unless ``config`` sets ``host_processes`` itself). Never raises on a stored file."""
    with _lock:
        hit = _overrides.get((domain.model.fingerprint, domain.cluster.fingerprint))
    key = (domain.model.fingerprint, domain.cluster.fingerprint, launcher,
           tuple(n.name for n in domain.cluster.nodes), _folders_state())
    if hit is None:
        with _lock:
            hit = _cache.get(key)
    if hit is None:
        hit = _pick_pair(domain, launcher)
        with _lock:
            _cache[key] = hit
    profile, calibration = hit
    config = config or StepSimConfig()
    if (calibration is not None and calibration.launcher == EMULATED_LAUNCHER
            and config.host_processes is None):
        world = sum(n.workers for n in domain.cluster.nodes)
        config = config.model_copy(update={
            "host_processes": world,
            "host_cores": config.host_cores or calibration.host_cores})
    return Physics(profile, calibration, config)


def physics_for(domain: Domain, physics: str = MEASURED, launcher: str | None = None, *,
                config: StepSimConfig | None = None) -> Physics:
    """:func:`measured_physics` for ``physics="measured"``; for ``"fallback"`` no profile, no
    calibration and ``config`` as given."""
    if check_physics(physics) == FALLBACK:
        return Physics(None, None, config or StepSimConfig())
    return measured_physics(domain, launcher, config=config)
