"""Import the AutoSync dataset (AutoDist strategies with measured runtimes) as trial records.

Layouts read (see the AutoSync code digest, section 7):

- v2 (released): ``<Model>/<cluster>/{resource_spec,runtime,strategies}/<ID>``; one resource
  spec per sample.
- v1: ``<model>/<cluster>/<experiment>/{<spec>.yml, runtimes/<ID>, strategies/<ID>}`` with one
  resource spec per experiment folder; also ``strategy/`` for ``strategies/``,
  ``resource_specs/<ID>`` and ``resource_spec_files/resource_spec.yml`` for the spec.

A *sample folder* is any folder with a ``strategies/`` (or ``strategy/``) subfolder. Its model is
the first folder below ``root`` and its cluster the remaining folder names joined by ``/``
(``bert_large/cluster-A`` -> model ``bert_large``, cluster ``cluster-A``); when ``root`` is a
model folder the model is ``root``'s name. Runtime files (``<ID>``, ``<ID>.yml``, ``<ID>.yaml``
or ``<ID>.json``; YAML or JSON) give ``average`` (s/iter, stored as ``median_s`` with
``protocol.statistic = "average"``) and ``runtime`` (per-iteration seconds). Samples whose
runtime is missing or unreadable, whose strategy cannot be parsed or whose resource spec is
missing or invalid are skipped and counted; a record already in the store is counted as a
duplicate. Record ids are ``autosync/<model>/<cluster>/<ID>``, so importing again adds nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.parsing import (MAX_JSON_BYTES, MAX_YAML_BYTES, load_json,
                                                load_yaml, read_bounded)
from autosync_transfer.errors import SpecError
from autosync_transfer.strategies.autodist import strategy_from_autodist

__all__ = ["ImportReport", "import_autosync", "find_sample_folders"]

_STRATEGY_DIRS = ("strategies", "strategy")
_RUNTIME_DIRS = ("runtime", "runtimes")
_SPEC_DIRS = ("resource_spec", "resource_specs")
_SUFFIXES = ("", ".yml", ".yaml", ".json")
_MAX_PROBLEMS = 20


@dataclass
class ImportReport:
    """What an import did. ``problems`` keeps the first few skip reasons, one line each."""

    folders: int = 0
    imported: int = 0
    duplicates: int = 0
    missing_runtime: int = 0
    bad_runtime: int = 0
    bad_strategy: int = 0
    bad_spec: int = 0
    per_domain: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return self.missing_runtime + self.bad_runtime + self.bad_strategy + self.bad_spec

    def _skip(self, counter: str, message: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(" ".join(message.split()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "folders": self.folders, "imported": self.imported, "duplicates": self.duplicates,
            "skipped": self.skipped, "missing_runtime": self.missing_runtime,
            "bad_runtime": self.bad_runtime, "bad_strategy": self.bad_strategy,
            "bad_spec": self.bad_spec, "per_domain": dict(self.per_domain),
            "problems": list(self.problems),
        }


def find_sample_folders(root: str | Path) -> list[Path]:
    """Every folder under ``root`` (``root`` included) that has a strategies folder."""
    base = Path(root)
    if not base.is_dir():
        raise SpecError(f"AutoSync dataset root {str(base)!r} is not a folder")
    found = [p.parent for name in _STRATEGY_DIRS for p in base.rglob(name) if p.is_dir()]
    return sorted(set(found))


def _names(root: Path, folder: Path) -> tuple[str, str]:
    parts = folder.relative_to(root).parts
    if len(parts) >= 2:
        return parts[0], "/".join(parts[1:])
    if len(parts) == 1:
        return root.name, parts[0]
    return root.parent.name, root.name


def _first_existing(folder: Path, dirs: tuple[str, ...], sample_id: str) -> Path | None:
    for d in dirs:
        for suffix in _SUFFIXES:
            p = folder / d / f"{sample_id}{suffix}"
            if p.is_file():
                return p
    return None


def _folder_spec(folder: Path) -> Path | None:
    """The one resource spec of a v1 experiment folder."""
    shared = folder / "resource_spec_files" / "resource_spec.yml"
    if shared.is_file():
        return shared
    specs = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix in (".yml", ".yaml") and not p.name.startswith("."))
    if len(specs) == 1:
        return specs[0]
    preferred = [p for p in specs if p.stem == "resource_spec"]
    return preferred[0] if preferred else None


def _read_runtime(path: Path) -> tuple[float, list[float]]:
    """(average, per-iteration times) of one runtime file."""
    try:
        text = read_bounded(path, MAX_YAML_BYTES, "runtime file").decode()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read runtime file {str(path)!r}: {e}") from e
    try:
        data = load_json(text, "runtime file")
    except SpecError:
        try:
            data = load_yaml(text, "runtime file")
        except SpecError as e:
            raise SpecError(f"runtime file {str(path)!r} is neither JSON nor YAML") from e
    if not isinstance(data, dict) or "average" not in data:
        raise SpecError(f"runtime file {str(path)!r} has no 'average'")
    avg = data["average"]
    if isinstance(avg, bool) or not isinstance(avg, (int, float)) or not math.isfinite(avg) \
            or avg <= 0:
        raise SpecError(f"runtime file {str(path)!r}: 'average' must be a number > 0, got {avg!r}")
    times = data.get("runtime") or []
    if not isinstance(times, list) or not all(
        isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0
        for t in times
    ):
        raise SpecError(f"runtime file {str(path)!r}: 'runtime' must be a list of seconds")
    return float(avg), [float(t) for t in times]


def import_autosync(
    root: str | Path, store: TrialStore | str | Path, *, launcher: str = "autosync"
) -> ImportReport:
    """Append every readable AutoSync sample under ``root`` to ``store`` (see the module
    docstring); returns the counts. Raises :class:`SpecError` when ``root`` holds no sample
    folder at all."""
    base = Path(root)
    target = store if isinstance(store, TrialStore) else TrialStore(store)
    folders = find_sample_folders(base)
    if not folders:
        raise SpecError(
            f"no AutoSync samples under {str(base)!r} (expected <Model>/<cluster>/strategies/)"
        )
    report = ImportReport(folders=len(folders))
    spec_cache: dict[tuple[str, str], Cluster | SpecError] = {}
    existing = target.ids()
    for folder in folders:
        model, cluster_name = _names(base, folder)
        domain = f"{model}-{cluster_name}"
        strategy_dir = next(folder / d for d in _STRATEGY_DIRS if (folder / d).is_dir())
        folder_spec = _folder_spec(folder)
        for strategy_file in sorted(strategy_dir.iterdir()):
            if not strategy_file.is_file() or strategy_file.name.startswith("."):
                continue
            sample_id = strategy_file.name
            where = f"{domain}/{sample_id}"
            runtime_file = _first_existing(folder, _RUNTIME_DIRS, sample_id)
            if runtime_file is None:
                report._skip("missing_runtime", f"{where}: no runtime file")
                continue
            try:
                average, times = _read_runtime(runtime_file)
            except SpecError as e:
                report._skip("bad_runtime", f"{where}: {e}")
                continue
            spec_file = _first_existing(folder, _SPEC_DIRS, sample_id) or folder_spec
            if spec_file is None:
                report._skip("bad_spec", f"{where}: no resource spec")
                continue
            cluster = _load_spec(spec_file, cluster_name, spec_cache)
            if isinstance(cluster, SpecError):
                report._skip("bad_spec", f"{where}: {cluster}")
                continue
            try:
                raw = read_bounded(strategy_file, MAX_JSON_BYTES, "strategy file")
                strategy = strategy_from_autodist(raw, cluster)
            except (SpecError, OSError) as e:
                report._skip("bad_strategy", f"{where}: {e}")
                continue
            record_id = f"autosync/{model}/{cluster_name}/{sample_id}"
            if record_id in existing:
                report.duplicates += 1
                continue
            mtime = runtime_file.stat().st_mtime
            record = TrialRecord(
                id=record_id,
                domain=domain,
                model=model,
                cluster=cluster_name,
                model_fingerprint="",
                cluster_fingerprint=cluster.fingerprint,
                strategy_id=strategy.id,
                strategy_kind="autodist",
                strategy=strategy.model_dump(mode="json"),
                status="ok",
                iteration_times_s=times,
                median_s=average,
                protocol={"source": "autosync", "statistic": "average", "iters": len(times)},
                launcher=launcher,
                timestamp=datetime.fromtimestamp(mtime, timezone.utc).isoformat(
                    timespec="seconds"),
                wall_s=0.0,
                machine={},
            )
            if target.append(record):
                existing.add(record_id)
                report.imported += 1
                report.per_domain[domain] = report.per_domain.get(domain, 0) + 1
            else:
                report.duplicates += 1
    return report


def _load_spec(
    path: Path, name: str, cache: dict[tuple[str, str], Cluster | SpecError]
) -> Cluster | SpecError:
    try:
        text = read_bounded(path, MAX_YAML_BYTES, "resource spec").decode()
    except (OSError, UnicodeDecodeError) as e:
        return SpecError(f"cannot read resource spec {str(path)!r}: {e}")
    except SpecError as e:
        return e
    key = (name, text)
    if key not in cache:  # v2 keeps a copy of the same spec next to every sample
        try:
            cache[key] = Cluster.from_yaml(text, name=name)
        except SpecError as e:
            cache[key] = SpecError(f"resource spec {str(path)!r}: {e}")
    return cache[key]
