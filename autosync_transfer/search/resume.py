"""A search's store is its state: what a run holds (:func:`load_run`), the settings it was
started with (:func:`run_meta`, :func:`write_run_meta`), and whether it may continue with the
settings given now (:func:`check_resumable`).

A store may hold several runs (or be a collection's): every run's records have ids below
``<domain>/search/<run>/`` (:func:`record_prefix`) and its metadata sits under ``searches``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.dataset.store import TrialStore
from autosync_transfer.errors import ConfigError
from autosync_transfer.search.summary import SearchProgress
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.runtime.trial import Protocol
    from autosync_transfer.search.config import SearchConfig

__all__ = ["RESUMABLE", "check_resumable", "load_run", "record_prefix", "run_meta",
           "write_run_meta"]

#: settings a stored run may change when it continues (the objective ranks, it does not change
#: what was measured)
RESUMABLE = frozenset({"budget", "confirm", "objective", "final_checks", "final_rounds",
                       "check_steps", "max_step_ratio"})


def record_prefix(domain: str, run: str) -> str:
    """The prefix of the record ids of run ``run`` of ``domain``."""
    return f"{domain}/search/{run}/"


def _store(store: TrialStore | str | Path) -> TrialStore:
    return store if isinstance(store, TrialStore) else TrialStore(store)


def run_meta(store: TrialStore | str | Path, name: str) -> dict[str, Any]:
    """The metadata run ``name`` stored in ``store`` (configuration, launcher, warm source,
    cluster spec); ``{}`` when it stored none."""
    meta = _store(store).read_meta()
    searches = meta.get("searches")
    if isinstance(searches, dict) and isinstance(searches.get(name), dict):
        return dict(searches[name])
    # a store written before the metadata was kept per run holds one run's at the top level
    return dict(meta) if meta.get("search") == name else {}


def write_run_meta(store: TrialStore, name: str, meta: dict[str, Any]) -> None:
    """Record run ``name``'s metadata in ``store`` (under ``searches``, beside other runs' and
    a collection's own)."""
    searches = dict(store.read_meta().get("searches") or {})
    searches[name] = meta
    store.write_meta({"searches": searches})


def load_run(domain: Domain, store: TrialStore | str | Path, name: str, budget: int
             ) -> tuple[SearchProgress, dict[str, Strategy]]:
    """What run ``name`` of ``domain`` holds in ``store`` (measured trials, references and
    confirmations, and the strategies by record id), read without measuring anything; a store
    of the same domain on another model or cluster is refused (:class:`ConfigError`)."""
    from autosync_transfer.strategies.compact import decode, is_compact

    store = _store(store)
    prefix = record_prefix(domain.name, name)
    progress = SearchProgress(domain.name, name, budget)
    strategies: dict[str, Strategy] = {}  # record id -> strategy
    for r in store.records():
        if (r.domain != domain.name or not r.id.startswith(prefix)
                or r.supersedes is not None):  # a search measures each trial once
            continue
        if (r.model_fingerprint, r.cluster_fingerprint) != (domain.model.fingerprint,
                                                            domain.cluster.fingerprint):
            raise ConfigError(f"store {str(store.path)!r} holds trials of {domain.name} "
                              f"measured on a different model or cluster (trial {r.id!r}); "
                              f"use another store")
        if r.strategy is not None:
            s = r.strategy
            strategies[r.id] = decode(s, domain.model) if is_compact(s) else Strategy.from_dict(s)
        ref = r.id[len(prefix):]
        if ref.startswith("reference/"):
            progress.references[ref.split("/", 1)[1]] = r.median_s if r.status == "ok" else None
        elif ref.startswith("confirm/"):
            progress.confirmations[ref.split("/", 1)[1]] = r
        else:
            progress.trials.append(r)
    return progress, strategies


def check_resumable(store: TrialStore, name: str, prefix: str, config: SearchConfig, *,
                    warm: bool, warm_source: str | None, warm_version: str | None,
                    launcher: str | None = None, protocol: Protocol | None = None) -> None:
    """A stored run continues only with the settings it was started with (the budget and the
    number of confirmations aside), measured as it was (the same ``launcher`` and warm-up,
    timed iterations and timeout of ``protocol``) and, warm, from the same registered version
    (else the same source): one line naming the first difference, else nothing."""
    from autosync_transfer.dataset.collect import check_same_measurement

    meta = run_meta(store, name)
    stored = meta.get("config")
    mine = [r for r in store.records() if r.id.startswith(prefix)]
    if launcher is not None and protocol is not None:
        check_same_measurement(mine, protocol=protocol, launcher=launcher,
                               where=f"store {str(store.path)!r} holds a {name} run that")
    if not isinstance(stored, dict) or not mine:
        return
    current = config.model_dump(mode="json")
    for key in sorted(set(stored) & set(current) - RESUMABLE):
        if stored[key] != current[key]:
            raise ConfigError(f"store {str(store.path)!r} holds a {name} run with "
                              f"{key}={stored[key]!r}, not {current[key]!r}; continue it with "
                              f"the same settings or use another store")
    if not warm:
        return
    if warm_version is not None and meta.get("warm_version") is not None:
        # the version decides: an alias may have moved, another spelling may name it
        if meta["warm_version"] != warm_version:
            raise ConfigError(f"store {str(store.path)!r} holds a run warm-started from "
                              f"{meta['warm_version']}, but {warm_source!r} is {warm_version}; "
                              f"continue it with warm_source='models:/{meta['warm_version']}' "
                              f"or use another store")
    elif meta.get("warm_source") not in (None, warm_source) and warm_source:
        raise ConfigError(f"store {str(store.path)!r} holds a run warm-started from "
                          f"{meta['warm_source']!r}, not {warm_source!r}; use another store")
