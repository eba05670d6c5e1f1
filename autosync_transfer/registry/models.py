"""The names of the former ``registry.models`` module, kept importable for one release.

The module was split: the MLflow flavor (save -> log -> load) is
:mod:`autosync_transfer.registry.flavor`, names, versions, aliases and listings are
:mod:`autosync_transfer.registry.versions`, and training, evaluation and champion promotion are
:mod:`autosync_transfer.registry.workflows`. Import from those (or from
``autosync_transfer.registry``).

:func:`train_and_register` and :func:`evaluate_registered` here still take a trials table (the
format of :func:`~autosync_transfer.dataset.loader.load_trials`, one row per trial); the
workflows take the table of measured strategies that
:func:`~autosync_transfer.dataset.loader.strategy_table` makes of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import SpecError
from autosync_transfer.registry import workflows
from autosync_transfer.registry.flavor import (
    CONFIG_FILE,
    LINEAGE_KEYS,
    STANDARD_TAGS,
    WEIGHTS_FILE,
    flat_metrics,
    load_simulator,
    log_chart_images,
    log_simulator,
    read_simulator_files,
    write_simulator_files,
)
from autosync_transfer.registry.versions import (
    CHAMPION,
    REGISTERED_PREFIX,
    ModelVersionInfo,
    champion,
    compare_links,
    describe_model,
    list_models,
    promote,
    registered_name,
    resolve,
)
from autosync_transfer.registry.workflows import (
    LOWER_IS_BETTER,
    TrainedVersion,
    TrainReport,
    promote_if_better,
)

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain

__all__ = [
    "CHAMPION",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "LINEAGE_KEYS",
    "LOWER_IS_BETTER",
    "STANDARD_TAGS",
    "ModelVersionInfo",
    "registered_name",
    "compare_links",
    "log_chart_images",
    "log_simulator",
    "load_simulator",
    "read_simulator_files",
    "write_simulator_files",
    "resolve",
    "promote",
    "champion",
    "list_models",
    "describe_model",
    "promote_if_better",
    "flat_metrics",
    "TrainedVersion",
    "TrainReport",
    "train_and_register",
    "evaluate_registered",
]

#: former private name of :data:`~autosync_transfer.registry.versions.REGISTERED_PREFIX`
_PREFIX = REGISTERED_PREFIX


def train_and_register(
    kind: str,
    domain: Domain | str,
    trials: pandas.DataFrame,
    *,
    seeds: Iterable[int] = (0, 1, 2),
    max_epochs: int | None = None,
    metric: str = "pairwise_acc",
    split_seed: int = 0,
    trials_source: str = "",
    on_seed: Callable[[int, ModelVersionInfo, Mapping[str, Any]], None] | None = None,
) -> TrainReport:
    """:func:`~autosync_transfer.registry.workflows.train_and_register` on a trials table (the
    domain's ok trials; tag ``trial_count``: their number)."""
    dom = _as_domain(domain)
    table, count = _measured(trials, dom)
    return workflows.train_and_register(kind, dom, table, seeds=seeds, max_epochs=max_epochs,
                                        metric=metric, split_seed=split_seed,
                                        trials_source=trials_source, trial_count=count,
                                        on_seed=on_seed)


def evaluate_registered(uri_or_name: str, domain: Domain | str, trials: pandas.DataFrame
                        ) -> dict[str, float]:
    """:func:`~autosync_transfer.registry.workflows.evaluate_registered` on a trials table."""
    dom = _as_domain(domain)
    return workflows.evaluate_registered(uri_or_name, dom, _measured(trials, dom)[0])


def _as_domain(domain: Domain | str) -> Domain:
    if isinstance(domain, str):
        from autosync_transfer.domains.catalog import get_domain

        return get_domain(domain)
    return domain


def _measured(trials: pandas.DataFrame, dom: Domain) -> tuple[pandas.DataFrame, int]:
    """(one row per ok measurement of ``dom`` with a strategy: ``domain``,
    ``cluster_fingerprint``, ``strategy``, ``runtime_s``; the number of ok trials). The data
    module merges repeated strategies with the median, as ``dataset.loader.strategy_table``
    does; the registry cannot import the dataset room, so this reads the few columns itself
    until the callers pass converted tables."""
    import pandas as pd

    from autosync_transfer.strategies.compact import decode, is_compact
    from autosync_transfer.strategies.types import Strategy

    df = trials[trials["domain"] == dom.name] if len(trials) else trials
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    rows = []
    fps = df["cluster_fingerprint"] if "cluster_fingerprint" in df.columns else [""] * len(df)
    models = df["model_fingerprint"] if "model_fingerprint" in df.columns else [""] * len(df)
    for raw, runtime, fp, model_fp in zip(df["strategy"], df["median_s"], fps, models):
        if raw is None or runtime is None or (isinstance(raw, float) and math.isnan(raw)) \
                or math.isnan(float(runtime)):
            continue
        data = json.loads(raw) if isinstance(raw, str) else raw
        if not is_compact(data):
            strategy = Strategy.from_dict(data)
        elif model_fp == dom.model.fingerprint:
            strategy = decode(data, dom.model)
        else:
            raise SpecError(f"strategy {data.get('id')!r} is stored compactly but its model graph "
                            f"is unknown (not a catalog model, or a different fingerprint)")
        rows.append({"domain": dom.name, "cluster_fingerprint": fp or "", "strategy": strategy,
                     "runtime_s": float(runtime)})
    columns = ["domain", "cluster_fingerprint", "strategy", "runtime_s"]
    return pd.DataFrame(rows, columns=columns), len(df)
