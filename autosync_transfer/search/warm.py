"""The simulator a warm-started search begins with: a registry URI, or a source domain's
champion (trained on the source's trials and registered first when it has none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autosync_transfer.errors import ConfigError, UnknownNameError

__all__ = ["warm_simulator", "warm_version"]


def warm_simulator(spec: str, *, trials: str | Path | None = None, seed: int = 0,
                   ranker: str = "rnn", max_epochs: int | None = None) -> tuple[Any, dict[str, Any]]:
    """``(simulator, lineage)`` for the warm-start source ``spec``: ``models:/NAME@ALIAS`` or
    ``models:/NAME/VERSION`` (or a registered name: its champion), else a domain name whose
    champion is used — trained with ``ranker`` on ``trials`` and registered when absent. A domain
    outside the catalog (a workload on a cluster file) is found by its registered model, or in
    the metadata of the trial stores of ``trials`` that hold it."""
    from autosync_transfer.registry import models

    if spec.startswith("models:/") or spec.startswith(models.REGISTERED_PREFIX):
        mv = models.resolve(spec)
        sim = models.load_simulator(mv.name, mv.version)
        return sim, {"source_model": mv.name, "source_version": str(mv.version)}
    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.domains.catalog import get_domain

    try:
        dom = get_domain(spec)
    except UnknownNameError as e:
        catalog_error = str(e)
        dom = None
    name = models.registered_name(spec) if dom is None else models.registered_name(dom.name)
    try:
        version = models.champion(name)
    except UnknownNameError:
        version = None
    if version is None:
        from autosync_transfer.dataset.loader import load_trials

        if dom is None:  # a domain outside the catalog: described by the stores of its trials
            try:
                dom = find_domain(spec, trials)
            except UnknownNameError:
                raise ConfigError(f"warm_start={spec!r} is neither a models:/ URI nor a "
                                  f"known domain ({catalog_error}; no trial store describes "
                                  f"it and {name} has no champion)") from None
        df = load_trials(trials)
        df = df[df["domain"] == dom.name] if len(df) else df
        if not len(df):
            raise ConfigError(f"warm_start={spec!r}: {name} has no champion and trials "
                              f"holds no trials of {dom.name!r} to train one")
        report = models.train_and_register(ranker, dom, df, seeds=(seed,), max_epochs=max_epochs)
        version = report.champion or report.best.version.version
    sim = models.load_simulator(name, version)
    if not sim.learned:
        raise ConfigError(f"warm_start={spec!r}: {name} version {version} is the "
                          f"{sim.kind} model (nothing to fine-tune); a search with "
                          f"method={sim.kind!r} and no warm start ranks with it")
    return sim, {"source_model": name, "source_version": str(version)}


def warm_version(lineage: dict[str, Any] | None) -> str | None:
    """``NAME/VERSION`` of the registered simulator a :func:`warm_simulator` lineage names."""
    return f"{lineage['source_model']}/{lineage['source_version']}" if lineage else None
