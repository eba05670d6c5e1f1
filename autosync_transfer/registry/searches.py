"""Search runs in MLflow: the best-speed-up-vs-trials curve, hit rates, the figures, the plot,
and (for the AutoSync loop) the final simulator registered as a new version of the domain's
model."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError
from autosync_transfer.registry.versions import ModelVersionInfo

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain

__all__ = ["KEY_TAG", "log_search", "search_key"]

#: the tag of a search's MLflow run that identifies the finished search (:func:`search_key`)
KEY_TAG = "search_key"

_FIGURES = ("speedup_vs_builder", "confirmed_speedup_vs_builder",
            "confirmed_speedup_vs_fp16_builder", "speedup_vs_fp16_builder", "speedup_vs_ddp",
            "trials_to_1.1x", "trials_to_1.2x", "trials_to_1.3x", "best_s", "best_builder_s",
            "ddp_s", "trials", "failed")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def log_search(*, domain: Domain | str, run: str, summary: Mapping[str, Any],
               config: Mapping[str, Any],
               per_round: int, best_strategy: Mapping[str, Any] | None = None,
               simulator: Any = None, lineage: Mapping[str, Any] | None = None,
               tags: Mapping[str, Any] | None = None) -> tuple[str, ModelVersionInfo | None]:
    """Log one search (an MLflow run named after it) and, with ``simulator``, register that
    simulator in the same run. Returns (run id, the new model version or None).

    Logging the same finished search again (:func:`search_key`: the same run, store, trials and
    best) returns the run and version logged before: nothing new is logged or registered. A
    store or server that fails is one :class:`ConfigError` line (the search's trials stay in
    its trial store).

    ``domain``: the searched :class:`~autosync_transfer.domains.domain.Domain` (a domain outside
    the catalog, a workload on a cluster file, registers with its graph and cluster), or the
    name of a catalog domain."""
    from mlflow.exceptions import MlflowException

    from autosync_transfer.registry import store
    from autosync_transfer.registry.flavor import _as_domain

    name = domain if isinstance(domain, str) else domain.name
    # an unknown name fails here, before anything is logged
    dom = _as_domain(domain) if simulator is not None else None
    c = store.client()
    exp_id = store.experiment_id(c)
    key = search_key(name, run, config, summary, best_strategy, tags)
    try:
        done = _logged(c, exp_id, key, registers=simulator is not None)
        if done is not None:
            return done
        return _log(c, exp_id, key, dom, name, run, summary, config, per_round, best_strategy,
                    simulator, lineage, tags)
    except MlflowException as e:
        raise ConfigError(f"cannot log search {run} of {name} to MLflow "
                          f"({store.tracking_uri()}): {' '.join(e.message.split())[:300]}"
                          ) from e
    except OSError as e:
        raise ConfigError(f"cannot log search {run} of {name} to MLflow "
                          f"({store.tracking_uri()}): {e}") from e


def search_key(name: str, run: str, config: Mapping[str, Any], summary: Mapping[str, Any],
               best_strategy: Mapping[str, Any] | None, tags: Mapping[str, Any] | None) -> str:
    """What makes two loggings of a search the same finished search: its domain, run, settings,
    store, number of trials, best time and best strategy (a digest, kept as the run's tag
    :data:`KEY_TAG`)."""
    import hashlib

    what = {"domain": name, "run": run, "config": dict(config),
            "store": str((tags or {}).get("store", "")), "trials": summary.get("trials"),
            "best_s": summary.get("best_s"),
            "best": (best_strategy or {}).get("id")}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _logged(c: Any, exp_id: str, key: str, registers: bool
            ) -> tuple[str, ModelVersionInfo | None] | None:
    """The run (and version) a search with ``key`` was logged as before, when it was logged
    whole: a finished run and, when the search registers a simulator, its version."""
    from autosync_transfer.registry.versions import version_info

    runs = c.search_runs([exp_id], filter_string=f"tags.{KEY_TAG} = '{key}'",
                         order_by=["attributes.start_time ASC"])
    for r in runs:
        if r.info.status != "FINISHED":
            continue
        if not registers:
            return r.info.run_id, None
        versions = c.search_model_versions(f"run_id = '{r.info.run_id}'")
        if versions:
            return r.info.run_id, version_info(min(versions, key=lambda v: int(v.version)))
    return None


def _log(c: Any, exp_id: str, key: str, dom: Domain | None, name: str, run: str,
         summary: Mapping[str, Any], config: Mapping[str, Any], per_round: int,
         best_strategy: Mapping[str, Any] | None, simulator: Any,
         lineage: Mapping[str, Any] | None, tags: Mapping[str, Any] | None
         ) -> tuple[str, ModelVersionInfo | None]:
    import mlflow

    from autosync_transfer.registry.flavor import log_chart_images, log_simulator
    from autosync_transfer.registry.plots import search_curves

    with tempfile.TemporaryDirectory(prefix="autosync-search-") as tmp:
        plot = search_curves({run: summary.get("curve", [])}, {run: summary.get("hit_rate", [])},
                             Path(tmp) / "search_curve.png", per_round=per_round,
                             title=f"search on {name}: {run}")
        table = Path(tmp) / "search_summary.json"
        table.write_text(json.dumps({"domain": name, "run": run, "config": dict(config),
                                     **dict(summary)}, indent=1, default=str))
        with mlflow.start_run(experiment_id=exp_id, run_name=f"search {name} {run}") as r:
            run_id = r.info.run_id
            mlflow.set_tags({"kind": "search", "domain": name, "search": run, KEY_TAG: key,
                             **{str(k): str(v) for k, v in (tags or {}).items()}})
            mlflow.log_params({f"search.{k}": v for k, v in config.items()})
            for i, v in enumerate(summary.get("curve", [])):
                if _num(v) is not None:
                    mlflow.log_metric("best_speedup_vs_builder", float(v), step=i + 1)
            for i, v in enumerate(summary.get("hit_rate", [])):
                mlflow.log_metric("hit_rate", float(v), step=(i + 1) * per_round)
            mlflow.log_metrics({f"search.{k}": _num(summary.get(k)) for k in _FIGURES  # type: ignore[misc]
                                if _num(summary.get(k)) is not None})
            mlflow.log_artifact(str(plot), artifact_path="plots")
            log_chart_images([plot])
            mlflow.log_artifact(str(table), artifact_path="search")
            if best_strategy is not None:
                best = Path(tmp) / "best_strategy.json"
                best.write_text(json.dumps(dict(best_strategy), indent=1))
                mlflow.log_artifact(str(best), artifact_path="search")
        version = None
        if simulator is not None:
            figures = {f"search_{k.replace('.', '_')}": _num(summary.get(k)) for k in _FIGURES}
            version = log_simulator(
                simulator, domain=dom,  # type: ignore[arg-type]
                metrics={k: v for k, v in figures.items() if v is not None},
                tags={"trial_count": summary.get("trials", 0), "test_split": "none (search)",
                      "search": run, **{str(k): v for k, v in (tags or {}).items()}},
                lineage=lineage, plots=[plot], logger_run_id=run_id)
    return run_id, version
