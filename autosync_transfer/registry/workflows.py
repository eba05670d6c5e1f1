"""Workflows on the registry: train and register a domain's simulators, evaluate a registered
one, promote the best version to champion.

:func:`train_and_register` trains one simulator per seed on a domain's measured strategies (the
table :func:`~autosync_transfer.dataset.loader.strategy_table` makes of its trials), logs and
registers each (:func:`~autosync_transfer.registry.flavor.log_simulator`, with plots) and
promotes the best seed if it beats the champion (:func:`promote_if_better`: on pairwise accuracy
only where it orders the same test strategies better with 95 % confidence, paired,
:func:`~autosync_transfer.rankers.simulator.paired_comparison`; another metric by its number on
the same test split, re-scoring the champion when the splits differ).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.registry.flavor import flat_metrics, load_simulator, log_simulator
from autosync_transfer.registry.versions import (
    CHAMPION,
    ModelVersionInfo,
    champion,
    model_version,
    registered_name,
    version_by_alias,
    version_info,
)

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.rankers.simulator import Simulator

__all__ = [
    "LOWER_IS_BETTER",
    "promote_if_better",
    "TrainedVersion",
    "TrainReport",
    "train_and_register",
    "evaluate_registered",
]

#: metrics where a smaller value is better (all others: larger is better)
LOWER_IS_BETTER: frozenset[str] = frozenset({"regret"})


def _better(metric: str, candidate: float, incumbent: float) -> bool:
    if math.isnan(candidate):
        return False
    if math.isnan(incumbent):
        return True
    return candidate < incumbent if metric in LOWER_IS_BETTER else candidate > incumbent


def promote_if_better(
    name: str,
    version: str | int,
    metric: str = "pairwise_acc",
    *,
    alias: str = CHAMPION,
    rescore: Callable[[Simulator], float] | None = None,
    judge: Callable[[Simulator, Simulator], tuple[float, float]] | None = None,
) -> bool:
    """Make ``version`` the ``alias`` (champion) if it beats the current one on ``metric``
    (:data:`LOWER_IS_BETTER` metrics: smaller wins; ties keep the incumbent); returns whether it
    promoted. With no champion it promotes.

    Metrics are compared only on the same test split (tag ``test_split``). When the champion's
    split differs, ``rescore`` (a function giving a simulator's ``metric`` on the candidate's test
    split) re-scores the champion (a champion this code cannot load, e.g. of an older feature
    schema, loses); without it the versions are not comparable and nothing changes.

    ``judge``: a paired comparison that decides instead of the two numbers. ``judge(candidate,
    champion)`` gives ``(gain, low)``, the candidate's gain on the same strategies and its
    one-sided lower confidence bound (:func:`~autosync_transfer.rankers.simulator.
    paired_comparison`); the candidate is promoted only where ``low > 0``, a lead within the
    noise of a few held-out strategies being no reason to replace a champion. Both are recorded
    on the candidate version (tags ``promotion_gain``, ``promotion_gain_low``,
    ``promotion_against``). A champion this code cannot load loses.
    """
    from autosync_transfer.registry import store

    c = store.client()
    cand = version_info(model_version(c, name, version))
    if metric not in cand.metrics:
        raise ConfigError(f"{name} version {cand.version} has no metric {metric!r} "
                          f"(metrics: {', '.join(sorted(cand.metrics)) or 'none'})")
    cur = version_by_alias(c, name, alias)
    if cur is None:
        c.set_registered_model_alias(name, alias, cand.version)
        return True
    incumbent = version_info(cur)
    if incumbent.version == cand.version:
        return False
    if judge is not None:
        try:
            inc_sim = load_simulator(name, incumbent.version)
        except ConfigError:  # e.g. an older feature schema: this code cannot use it
            c.set_registered_model_alias(name, alias, cand.version)
            return True
        gain, low = judge(load_simulator(name, cand.version), inc_sim)
        for key, value in (("promotion_gain", f"{gain:.6g}"), ("promotion_gain_low", f"{low:.6g}"),
                           ("promotion_against", str(incumbent.version))):
            c.set_model_version_tag(name, str(cand.version), key, value)
        if low > 0:
            c.set_registered_model_alias(name, alias, cand.version)
            return True
        return False
    same_split = incumbent.tags.get("test_split", "") == cand.tags.get("test_split", "")
    if same_split and metric in incumbent.metrics:
        inc_value = incumbent.metrics[metric]
    elif rescore is not None:
        try:
            inc_sim = load_simulator(name, incumbent.version)
        except ConfigError:  # e.g. an older feature schema: this code cannot use it
            inc_value = math.nan
        else:
            inc_value = float(rescore(inc_sim))
    else:
        return False
    if _better(metric, cand.metrics[metric], inc_value):
        c.set_registered_model_alias(name, alias, cand.version)
        return True
    return False


def promotion_note(name: str, version: str | int) -> str:
    """What the judge of :func:`promote_if_better` recorded on ``version``, in words (``""``
    where no paired comparison ran)."""
    from autosync_transfer.registry import store

    tags = version_info(model_version(store.client(), name, version)).tags
    if "promotion_gain_low" not in tags:
        return ""
    return (f"its pairwise-accuracy gain over version {tags.get('promotion_against', '?')} on the "
            f"same held-out strategies {float(tags['promotion_gain']):+.3f}, 95 % lower bound "
            f"{float(tags['promotion_gain_low']):+.3f}: it replaces the champion only above 0")


# -- train, log, register -------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainedVersion:
    """One seed of :func:`train_and_register`: its registered version and training output
    (``train_simulator``'s metrics without the history)."""

    seed: int
    version: ModelVersionInfo
    metrics: dict[str, Any]


@dataclass(frozen=True)
class TrainReport:
    """What :func:`train_and_register` did."""

    domain: str
    kind: str
    name: str
    metric: str
    runs: tuple[TrainedVersion, ...]
    best: TrainedVersion
    promoted: bool
    champion: str | None
    test_split: str

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean, standard deviation (sample; 0 for one seed) and count over seeds of each test
        metric (registry names)."""
        import statistics

        keys: list[str] = []
        for r in self.runs:
            keys += [k for k in r.version.metrics if "." not in k and k not in keys]
        out: dict[str, dict[str, float]] = {}
        for k in keys:
            vals = [r.version.metrics[k] for r in self.runs if k in r.version.metrics]
            vals = [v for v in vals if not math.isnan(v)]
            if vals:
                out[k] = {"mean": statistics.fmean(vals),
                          "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                          "n": float(len(vals))}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "ranker": self.kind, "registered_model": self.name,
                "metric": self.metric, "test_split": self.test_split,
                "versions": [{"seed": r.seed, "version": r.version.version,
                              "run_id": r.version.run_id, "metrics": r.version.metrics}
                             for r in self.runs],
                "best_version": self.best.version.version, "promoted": self.promoted,
                "champion": self.champion, "summary": self.summary()}


def _digest(obj: Any) -> str:
    import hashlib

    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


#: registry metric name -> key of ``evaluate_simulator``'s result
_EVAL_KEYS = {"pairwise_acc": "pairwise_accuracy"}


def _simulator_plots(sim: Simulator, dm: Any, out: Mapping[str, Any], folder: Path,
                     title: str) -> list[Path]:
    import numpy as np

    from autosync_transfer.registry import plots

    paths: list[Path] = []
    test = dm.split_items("test")
    if test:
        scores = sim.score_features([f for f, _, _ in test])
        runtimes = np.array([r for _, r, _ in test])
        paths.append(plots.rank_scatter(scores, runtimes, folder / "rank_scatter_test.png",
                                        title=f"{title}: test split"))
    every = [f for split in ("train", "val", "test") for f, _, _ in dm.split_items(split)]
    if every:
        paths.append(plots.score_histogram(sim.score_features(every), folder / "scores.png",
                                           title=f"{title}: scores of all strategies"))
    history = out.get("history") or {}
    if any(len(v) for v in history.values()):
        paths.append(plots.training_curves(history, folder / "training_curves.png", title=title))
    return paths


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
    trial_count: int | None = None,
    on_seed: Callable[[int, ModelVersionInfo, Mapping[str, Any]], None] | None = None,
) -> TrainReport:
    """Train a ``kind`` simulator of ``domain`` once per seed on the domain's measured strategies
    in ``trials`` (a table of measured strategies, as
    :func:`~autosync_transfer.dataset.loader.strategy_table` makes of a trials table; rows of
    other domains are ignored), log each run with Lightning's ``MLFlowLogger`` in the store,
    register each as a version of ``autosync-<domain>`` (with plots), then
    :func:`promote_if_better` the best seed.

    Every seed uses the same 70/15/15 split (``split_seed``) so their test metrics compare; the
    version tag ``test_split`` identifies it. ``trial_count`` (tag): the number of trials behind
    the table (default: the sum of its ``measurements`` column). The data are checked before
    anything is logged: no strategies of the domain is an
    :class:`~autosync_transfer.errors.UnknownNameError`.
    """
    from autosync_transfer.rankers.kinds import kind_of
    from autosync_transfer.rankers.simulator import evaluate_simulator, paired_comparison
    from autosync_transfer.registry import store

    kind_of(kind)  # an unknown kind is an UnknownNameError naming the known ones
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ConfigError("need at least one seed")
    dom = _as_domain(domain)
    df = _of_domain(trials, dom)
    dm = _split_module(df, dom, split_seed=split_seed, seed=seeds[0])
    data = dm.domain_data[0]
    test_split = _digest({"split_seed": split_seed, "test": dm.splits()["test"]})
    common_tags = {
        "trial_count": _trial_count(df) if trial_count is None else int(trial_count),
        "strategies": len(data.strategy_ids),
        "test_split": test_split,
        "split_seed": split_seed,
        "dataset_fingerprint": _digest([data.strategy_ids, [f"{r:.6g}" for r in data.runtimes]]),
        "trials_source": trials_source,
    }
    name = registered_name(dom.name)
    runs: list[TrainedVersion] = []
    for seed in seeds:
        dm.seed = seed  # the batch order of this seed (the split stays the same)
        run, out = _train_seed(kind, dom, dm, seed, max_epochs, common_tags, store)
        runs.append(run)
        if on_seed is not None:
            on_seed(seed, run.version, out)
    best = max(runs, key=lambda r: _rank_key(metric, r.version.metrics.get(metric, math.nan)))
    eval_key = _EVAL_KEYS.get(metric, metric)

    def rescore(champion_sim: Simulator) -> float:
        return float(evaluate_simulator(champion_sim, dm, "test")[eval_key])

    def judge(candidate: Simulator, champion_sim: Simulator) -> tuple[float, float]:
        return paired_comparison(candidate, champion_sim, dm, "test")

    # pairwise accuracy is compared paired, with confidence; another metric by its number
    promoted = promote_if_better(name, best.version.version, metric, rescore=rescore,
                                 judge=judge if metric == "pairwise_acc" else None)
    return TrainReport(domain=dom.name, kind=kind, name=name, metric=metric, runs=tuple(runs),
                       best=best, promoted=promoted, champion=champion(name),
                       test_split=test_split)


def evaluate_registered(uri_or_name: str, domain: Domain | str, trials: pandas.DataFrame
                        ) -> dict[str, float]:
    """Test metrics (registry names, as :func:`flat_metrics` gives them: ``pairwise_acc``,
    ``kendall_tau``, ``top1``, ``regret``, ``strategies``, ``per_domain.<domain>.*``) of a
    registered simulator on every measured strategy of ``domain`` in ``trials`` (a table of
    measured strategies, :func:`~autosync_transfer.dataset.loader.strategy_table`), computed
    like the test metrics of training (``evaluate_simulator``)."""
    from autosync_transfer.rankers.datamodule import TrialDataModule
    from autosync_transfer.rankers.simulator import evaluate_simulator

    dom = _as_domain(domain)
    df = _of_domain(trials, dom)
    sim = load_simulator(uri_or_name)
    dm = TrialDataModule(df, fractions=(0.0, 0.0, 1.0), domains={dom.name: dom})
    return flat_metrics(evaluate_simulator(sim, dm, "test"))


def _as_domain(domain: Domain | str) -> Domain:
    if isinstance(domain, str):
        from autosync_transfer.domains.catalog import get_domain

        return get_domain(domain)
    return domain


def _of_domain(trials: pandas.DataFrame, dom: Domain) -> pandas.DataFrame:
    """The rows of ``dom`` in a table of measured strategies; none is an UnknownNameError."""
    df = trials[trials["domain"] == dom.name] if len(trials) else trials
    if not len(df):
        raise UnknownNameError(f"no ok trials for domain {dom.name!r}")
    return df.reset_index(drop=True)


def _trial_count(df: pandas.DataFrame) -> int:
    return int(df["measurements"].sum()) if "measurements" in df.columns else len(df)


def _split_module(df: pandas.DataFrame, dom: Domain, *, split_seed: int, seed: int
                  ) -> TrialDataModule:
    """The set-up data module of ``dom``'s strategies (70/15/15 with ``split_seed``); a test split
    of fewer than 2 strategies is a ConfigError."""
    from autosync_transfer.rankers.datamodule import TrialDataModule

    dm = TrialDataModule(df, split_seed=split_seed, seed=seed, domains={dom.name: dom})
    dm.setup()
    if dm.split_size("test") < 2:
        raise ConfigError(f"domain {dom.name!r} has {len(dm.domain_data[0].strategy_ids)} "
                          f"measured strategies; the test split needs at least 2 (about 14 "
                          f"strategies)")
    return dm


def _train_seed(kind: str, dom: Domain, dm: TrialDataModule, seed: int, max_epochs: int | None,
                common_tags: Mapping[str, Any], store: Any
                ) -> tuple[TrainedVersion, dict[str, Any]]:
    """Train, log (with plots) and register one seed; returns it and the training output."""
    from autosync_transfer.rankers.simulator import train_simulator

    run_name = f"{kind}-{dom.name}-seed{seed}"
    logger = store.lightning_logger(run_name=run_name)
    kwargs: dict[str, Any] = {} if max_epochs is None else {"max_epochs": max_epochs}
    sim, out = train_simulator(kind, dm, seed=seed, logger=logger, **kwargs)
    test_metrics = {k: v for k, v in out.items()
                    if k.startswith("test_") and k != "test_strategies"}  # a size: a tag
    tags = {**common_tags, "seed": seed,
            **{k: out[k] for k in ("train_strategies", "val_strategies", "test_strategies",
                                   "epochs", "best_epoch") if k in out}}
    with tempfile.TemporaryDirectory(prefix="autosync-plots-") as tmp:
        figs = _simulator_plots(sim, dm, out, Path(tmp), f"{kind} on {dom.name}, seed {seed}")
        info = log_simulator(sim, domain=dom, metrics=test_metrics, tags=tags, plots=figs,
                             run_name=run_name, logger_run_id=logger.run_id)
    return TrainedVersion(seed, info, {k: v for k, v in out.items() if k != "history"}), out


def _rank_key(metric: str, value: float) -> float:
    """Larger is better for every metric (NaN last)."""
    return -math.inf if math.isnan(value) else (-value if metric in LOWER_IS_BETTER else value)
