"""The ``autosync-transfer adapt`` workflow: source champion -> adapt -> evaluate -> register.

:func:`adapt_and_register` loads the source simulator from the registry (a domain's ``champion``,
trained and registered first when the source has none but has trials, or any registered version
named by its ``models:/`` URI), optionally measures N new target
trials on the emulated target cluster (:func:`collect_target`), adapts and evaluates on the
target's held-out strategies (:func:`~autosync_transfer.adapt.core.adapt`), registers the result
as a new version of ``autosync-<target>`` with lineage tags, and promotes it to ``champion`` only
if it beats the current champion on the same held-out strategies. With ``curve`` it also runs
the learning curve and logs its plot with the new version.

Every check a user can fail (unknown domains or method, no source simulator and no source data,
too many shots, an incompatible feature schema, ``collect`` without root or emulation) runs
before anything is trained or registered.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.adapt.core import (
    CURVE_SHOTS,
    AdaptResult,
    LearningCurve,
    adapt,
    jsonable,
    learning_curve,
    resolve_method,
)
from autosync_transfer.adapt.data import DEFAULT_HOLDOUT_FRACTION, TargetSplit, split_target
from autosync_transfer.adapt.training import ShotTraining
from autosync_transfer.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.registry.versions import ModelVersionInfo
    from autosync_transfer.rankers.simulator import Simulator

__all__ = ["DEFAULT_SHOTS", "AdaptReport", "adapt_and_register", "check_collect",
           "collect_store_path", "collect_target"]

#: target trials used when the number is not given (fewer when fewer are available)
DEFAULT_SHOTS = 20
_METRIC = "pairwise_acc"


@dataclass(frozen=True)
class AdaptReport:
    """What :func:`adapt_and_register` did: the evaluation, the source version it started from
    (``source_trained``: trained and registered by this call), the registered target version,
    whether it was promoted, the target's champion afterwards, the learning curve (or None) and
    the store."""

    result: AdaptResult
    source_model: str
    source_version: str
    source_trained: bool
    version: ModelVersionInfo
    promoted: bool
    champion: str | None
    curve: LearningCurve | None
    collected: tuple[str, ...]
    tracking_uri: str
    experiment: str
    #: the source (``zero_shot``) and the adapted simulator (``adapted``) on the target's
    #: re-measured strategies outside the shots, against its repeat runs (None without them):
    #: :func:`~autosync_transfer.dataset.repeat.ranking_figures`
    repeat: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (``nan`` as None)."""
        return jsonable({"source_model": self.source_model, "source_version": self.source_version,
                "source_trained": self.source_trained, "registered_model": self.version.name,
                "version": self.version.version, "run_id": self.version.run_id,
                "promoted": self.promoted, "champion": self.champion,
                "collected": list(self.collected), "tracking_uri": self.tracking_uri,
                "experiment": self.experiment, "result": self.result.to_dict(),
                "repeat": self.repeat,
                "curve": self.curve.to_dict() if self.curve is not None else None})


# -- collection ----------------------------------------------------------------------------------


def check_collect(launcher: str = "emulated") -> None:
    """A :class:`ConfigError` unless trials can be measured here with ``launcher``: the emulated
    launcher needs root and working network namespaces with ``tc``."""
    if launcher not in ("emulated", "local"):
        raise ConfigError(f"launcher must be 'emulated' or 'local', got {launcher!r}")
    if launcher != "emulated":
        return
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None or geteuid() != 0:
        raise ConfigError("collect=True measures trials on an emulated cluster, which needs root "
                          "(network namespaces and tc); run as root, or measure with "
                          "`autosync-transfer collect` where that works")
    from autosync_transfer.runtime.emulation import available

    ok, reason = available()
    if not ok:
        raise ConfigError(f"collect=True: the emulated launcher is unavailable here: {reason}")


def collect_store_path(trials: str | Path | None, domain: str) -> Path:
    """Where ``collect`` appends the target's trials: ``trials`` itself when it is a JSON Lines
    store, ``<folder>/trials/<domain>.jsonl`` for a datasets folder (the default one when
    ``trials`` is None)."""
    from autosync_transfer.paths import trials_dir

    if trials is None:  # where collect writes by default (the checkout's datasets/trials)
        return trials_dir() / f"{domain}.jsonl"
    path = Path(trials)
    if path.is_dir():
        sub = path / "trials"
        return (sub if sub.is_dir() else path) / f"{domain}.jsonl"
    if path.suffix != ".jsonl":
        raise ConfigError(f"collect=True appends to a JSON Lines trial store; "
                          f"trials={str(path)!r} is not one (pass a .jsonl store or a datasets "
                          f"folder)")
    return path


def collect_target(domain: Domain, store_path: str | Path, n: int, *, seed: int = 0,
                   launcher: str = "emulated") -> tuple[str, ...]:
    """Measure ``n`` more trials of ``domain`` on its (emulated) cluster with
    :func:`~autosync_transfer.dataset.collect.collect`, appending them to ``store_path``;
    returns the ids of the newly measured strategies that ran ok (torch's own DDP, which has
    no strategy, and failed trials are not returned). The workers run the workload the
    domain's graph was traced from (a user's workload), else the zoo model of its name; a
    domain the store holds trials of is measured with their warm-up, timed iterations and
    timeout (the library's ``Protocol()`` otherwise)."""
    from autosync_transfer.dataset.collect import RESUME_PROTOCOL_KEYS, collect
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.domains.workload import workload_of
    from autosync_transfer.runtime.trial import Protocol

    if n < 1:
        raise ConfigError(f"n (trials to collect) must be >= 1, got {n}")
    path = Path(store_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    store = TrialStore(path)
    before = store.ids()  # a store that does not exist yet is empty
    mine = [r for r in store.records() if r.domain == domain.name and r.supersedes is None]
    done = sum(1 for r in mine if not r.reference)
    # more trials of a stored domain are measured as its stored ones were
    kept = {k: mine[-1].protocol[k] for k in RESUME_PROTOCOL_KEYS
            if mine and k in mine[-1].protocol}
    collect(domain, path, trials=done + n, launcher=launcher, seed=seed,
            protocol=Protocol(**kept), log_dir=path.parent / "logs" / domain.name,
            workload=workload_of(domain)[0])
    new = {r.strategy_id for r in store.records()
           if r.id not in before and r.domain == domain.name and not r.reference
           and r.status == "ok" and r.strategy is not None and r.strategy_id}
    return tuple(sorted(new))


# -- the workflow --------------------------------------------------------------------------------


def _source_champion(name: str) -> str | None:
    from autosync_transfer.registry.versions import champion

    try:
        return champion(name)
    except UnknownNameError:
        return None


def _ok_trials(df: pandas.DataFrame, domain: str) -> pandas.DataFrame:
    sub = df[df["domain"] == domain] if len(df) else df
    if "status" in sub.columns:
        sub = sub[sub["status"] == "ok"]
    return sub.reset_index(drop=True)


def _sources(trials: str | Path | None) -> str | Path | list[Path] | None:
    """What ``load_trials`` reads: ``trials``, else the default datasets plus, when it lies
    elsewhere (an installed package), the folder ``collect`` writes to by default."""
    if trials is not None:
        return trials
    from autosync_transfer.paths import datasets_dir, trials_dir

    data, written = datasets_dir(), trials_dir()
    if not written.is_dir() or written.resolve().is_relative_to(data.resolve()):
        return None
    return [data, written]


def _where(trials: str | Path | None) -> str:
    from autosync_transfer.dataset.loader import default_datasets_dir

    return str(trials) if trials is not None else str(default_datasets_dir())


def _finite(d: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def adapt_and_register(
    source: str,
    target: str | Domain,
    *,
    trials: str | Path | None = None,
    method: str = "auto",
    shots: int | None = None,
    seed: int = 0,
    split_seed: int = 0,
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
    collect: bool = False,
    launcher: str = "emulated",
    curve: bool = False,
    curve_shots: Iterable[int] = CURVE_SHOTS,
    curve_seeds: int = 3,
    max_epochs: int | None = None,
    source_ranker: str = "rnn",
    on_status: Callable[[str], None] | None = None,
) -> AdaptReport:
    """Adapt the ``source`` simulator to ``target`` and register the result.

    ``source``: a domain (its champion: the catalog's domains, and any domain with a registered
    model or described by the trial stores of ``trials``) or a registered version
    (``models:/NAME@ALIAS``, ``models:/NAME/VERSION``); ``target``: a domain name, or a
    :class:`~autosync_transfer.domains.domain.Domain` (a user's workload on a cluster file:
    :func:`~autosync_transfer.domains.workload.workload_domain`), whose trials are in ``trials``.
    ``trials``: a trial store, parquet file or folder (default: the shipped datasets; for a
    target outside the catalog, a source without a champion whose trials are not in ``trials``
    is trained on the shipped datasets' trials of it);
    ``shots``: target trials to adapt on (default :data:`DEFAULT_SHOTS`, or all available when
    fewer; none for zero-shot); ``collect``: measure them first on the emulated target cluster
    and append them to the target's store (they become the shots); ``max_epochs``: cap on the
    training epochs of the source (when it has to be trained) and of the adaptation;
    ``source_ranker``: the ranker kind trained when the source has no champion; ``curve``: also
    run :func:`~autosync_transfer.adapt.core.learning_curve` over ``curve_shots`` x
    ``curve_seeds`` and log its plot with the new version. ``on_status`` receives short progress
    lines.
    """
    from autosync_transfer.dataset.loader import load_trials
    from autosync_transfer.registry import store
    from autosync_transfer.registry.versions import champion, registered_name

    say = on_status or (lambda _line: None)
    tgt_dom = _domain(target, trials)
    src_uri = _is_uri(source)
    src_dom = None if src_uri else _domain(source, trials, registered=True)
    _check_arguments(source, src_dom or tgt_dom, tgt_dom, method, shots, curve_seeds,
                     max_epochs, collect, same_ok=src_uri)
    store_path: Path | None = None
    if collect:
        check_collect(launcher)
        store_path = collect_store_path(trials, tgt_dom.name)
    training = ShotTraining(max_epochs=max_epochs) if max_epochs is not None else None

    say("reading trials")
    df = load_trials(_sources(trials))
    tgt_name = registered_name(tgt_dom.name)
    if src_dom is None:
        src = _Source.named(source, say)
        src_dom = src.domain
    else:
        src = _Source.find(registered_name(src_dom.name), src_dom,
                           _ok_trials(df, src_dom.name), trials, say,
                           shipped=trials is not None and not _in_catalog(tgt_dom))
    src_name = src.name

    collected: tuple[str, ...] = ()
    if store_path is not None:
        n_collect = shots if shots is not None else DEFAULT_SHOTS
        say(f"measuring {n_collect} trials of {tgt_dom.name} ({launcher})")
        collected = collect_target(tgt_dom, store_path, n_collect, seed=seed, launcher=launcher)
        df = load_trials(_sources(trials))

    tgt_df = _ok_trials(df, tgt_dom.name)
    split, n, shot_ids = _target_split(tgt_dom, tgt_df, trials, split_seed, holdout_fraction,
                                       collected if collect else None, method, shots)
    resolved = _check_method(method, n, df, tgt_dom, src, trials)

    source_sim, src_version = src.simulator(source_ranker, seed, max_epochs, trials, say)
    say(f"adapting {src_dom.name} -> {tgt_dom.name}: {resolved}, {n} target trials")
    result = adapt(source_sim, tgt_dom, split, method=resolved, shots=n, seed=seed,
                   shot_ids=shot_ids, pretrain_trials=df, training=training,
                   source_name=f"{src_name}/{src_version}")
    repeat = _repeat_figures(result, source_sim, tgt_dom, trials)
    lc, info = _register(result, source_sim, split, tgt_df, df, resolved=resolved, n=n,
                         seed=seed, curve=curve, curve_shots=curve_shots,
                         curve_seeds=curve_seeds, training=training, collected=collected,
                         source_domain=src_dom.name,
                         lineage={"source_model": src_name, "source_version": src_version,
                                  "source_uri": source},
                         trials=trials, say=say, repeat=repeat)
    promoted = _promote(info, tgt_name, split)
    return AdaptReport(result=result, source_model=src_name, source_version=str(src_version),
                       source_trained=src.trained, version=info, promoted=promoted,
                       champion=champion(tgt_name), curve=lc, collected=collected,
                       tracking_uri=store.tracking_uri(), experiment=store.EXPERIMENT_NAME,
                       repeat=repeat)


def _repeat_figures(result: AdaptResult, source_sim: Simulator, domain: Domain,
                    trials: str | Path | None) -> dict[str, Any] | None:
    """The source and the adapted simulator on the target's re-measured strategies outside the
    shots (:func:`~autosync_transfer.dataset.repeat.repeat_evaluation`), or None."""
    from autosync_transfer.dataset.repeat import repeat_evaluation

    sources = _sources(trials)
    adapted = repeat_evaluation(result.simulator, domain, sources, exclude=result.shot_ids)
    if adapted is None:
        return None
    return {"adapted": adapted,
            "zero_shot": repeat_evaluation(source_sim, domain, sources, exclude=result.shot_ids)}


def _target_split(tgt_dom: Domain, tgt_df: pandas.DataFrame, trials: str | Path | None,
                  split_seed: int, holdout_fraction: float, collected: tuple[str, ...] | None,
                  method: str, shots: int | None
                  ) -> tuple[TargetSplit, int, tuple[str, ...] | None]:
    """(the target's held-out split, the number of shots, the shot ids when ``collected``)."""
    if not len(tgt_df):
        raise UnknownNameError(
            f"no ok trials of the target {tgt_dom.name!r} in {_where(trials)}: adaptation is "
            f"evaluated on held-out target trials (measure some with `autosync-transfer collect "
            f"{tgt_dom.name}`, or pass collect=True)")
    split = split_target(tgt_dom, tgt_df, split_seed=split_seed,
                         holdout_fraction=holdout_fraction, reserved=collected or ())
    if collected is not None:
        return split, len(collected), collected
    default = 0 if method == "zero-shot" else min(DEFAULT_SHOTS, split.available)
    n = shots if shots is not None else default
    split.check_shots(n)
    return split, n, None


def _in_catalog(domain: Domain) -> bool:
    """Whether ``domain`` is the catalog's domain of its name (not a workload or cluster file)."""
    from autosync_transfer.domains.catalog import get_domain

    try:
        return get_domain(domain.name).fingerprint == domain.fingerprint
    except UnknownNameError:
        return False


def _is_uri(source: str) -> bool:
    """Whether ``source`` names a registered version (``models:/...``), not a domain."""
    return isinstance(source, str) and source.startswith("models:/")


def _domain(name: str | Domain, trials: str | Path | None, *, registered: bool = False
            ) -> Domain:
    """``name`` itself (a Domain), the catalog domain it names, or one the trial stores of
    ``trials`` describe (a workload domain); with ``registered``, also the domain of its
    registered model's champion."""
    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.domains.catalog import get_domain

    if not isinstance(name, str):
        return name
    try:
        return get_domain(name)
    except UnknownNameError as e:
        catalog_error = str(e)
    try:
        return find_domain(name, trials)
    except UnknownNameError:
        if not registered:
            raise
    from autosync_transfer.registry.flavor import load_domain
    from autosync_transfer.registry.versions import registered_name

    try:
        return load_domain(registered_name(name))
    except UnknownNameError:
        raise UnknownNameError(
            f"{catalog_error}; no trial store in {_where(trials)} describes it, and "
            f"{registered_name(name)} has no champion (or name a registered version: "
            f"models:/NAME@ALIAS)") from None


def _check_arguments(source: str, src_dom: Domain, tgt_dom: Domain, method: str,
                     shots: int | None, curve_seeds: int, max_epochs: int | None,
                     collect: bool, same_ok: bool = False) -> None:
    if src_dom.name == tgt_dom.name and not same_ok:
        raise ConfigError(f"source and target are the same domain ({source!r})")
    if shots is not None and shots < 0:
        raise ConfigError(f"shots must be >= 0, got {shots}")
    resolve_method(method, 1)  # the name, before anything runs
    if curve_seeds < 1:
        raise ConfigError(f"the learning curve needs at least 1 seed, got {curve_seeds}")
    if max_epochs is not None and max_epochs < 1:
        raise ConfigError(f"max_epochs must be >= 1, got {max_epochs}")
    if collect and (method == "zero-shot" or shots == 0):
        raise ConfigError("collect=True measures the target trials to adapt on; "
                          "method='zero-shot' and shots=0 use none")


class _Source:
    """The source simulator: the champion of ``name`` when there is one (loaded at once, so an
    incompatible feature schema fails before anything runs), else trained and registered from
    the source's ok trials when :meth:`simulator` is first called."""

    def __init__(self, name: str, domain: Domain, ok_trials: pandas.DataFrame,
                 version: str | None, sim: Simulator | None) -> None:
        self.name, self.domain, self.ok_trials = name, domain, ok_trials
        self.version, self.sim, self.trained = version, sim, False
        #: its trials to train on come from the shipped datasets (not the workflow's trials)
        self.shipped = False

    @classmethod
    def named(cls, uri: str, say: Callable[[str], None]) -> _Source:
        """The registered version ``uri`` names (its domain travels with it)."""
        from autosync_transfer.registry.flavor import load_version

        say(f"loading {uri}")
        import pandas as pd

        sim, domain, mv = load_version(uri)
        return cls(mv.name, domain, pd.DataFrame(), mv.version, sim)

    @classmethod
    def find(cls, name: str, domain: Domain, ok_trials: pandas.DataFrame,
             trials: str | Path | None, say: Callable[[str], None], *,
             shipped: bool = False) -> _Source:
        """The champion of ``name``, else the source's ok trials to train one on (with
        ``shipped``, those of the shipped datasets when ``trials`` holds none)."""
        from autosync_transfer.registry.flavor import load_simulator

        version = _source_champion(name)
        if version is not None:
            say(f"loading {name}@champion (version {version})")
            return cls(name, domain, ok_trials, version, load_simulator(name, version))
        if not len(ok_trials) and shipped:
            from autosync_transfer.dataset.loader import load_trials

            say(f"reading the trials of {domain.name} from the shipped datasets")
            ok_trials = _ok_trials(load_trials(None), domain.name)
            if len(ok_trials):
                source = cls(name, domain, ok_trials, None, None)
                source.shipped = True
                return source
        if not len(ok_trials):
            raise ConfigError(
                f"no simulator of the source {domain.name!r}: {name} has no champion in the "
                f"registry and {_where(trials)} has no trials of {domain.name!r} to train one "
                f"(train one with `autosync-transfer train {domain.name}` or measure it with "
                f"`autosync-transfer collect {domain.name}`)")
        return cls(name, domain, ok_trials, None, None)

    def simulator(self, ranker: str, seed: int, max_epochs: int | None,
                  trials: str | Path | None, say: Callable[[str], None]
                  ) -> tuple[Simulator, str]:
        """(the source simulator, its version), training and registering it if needed."""
        if self.sim is None:
            from autosync_transfer.dataset.loader import strategy_table
            from autosync_transfer.registry.flavor import load_simulator
            from autosync_transfer.registry.workflows import train_and_register

            say(f"training a {ranker} simulator of {self.domain.name} (no champion yet)")
            where = None if self.shipped else trials
            report = train_and_register(ranker, self.domain, strategy_table(self.ok_trials),
                                        seeds=(seed,), max_epochs=max_epochs,
                                        trials_source=_where(where),
                                        trial_count=len(self.ok_trials))
            self.version = report.champion or report.best.version.version
            self.sim = load_simulator(self.name, self.version)
            self.trained = True
        assert self.version is not None
        return self.sim, self.version


def _check_method(method: str, n: int, df: pandas.DataFrame, tgt_dom: Domain, src: _Source,
                  trials: str | Path | None) -> str:
    """The adaptation method ``method`` names for ``n`` shots, checked against the data."""
    resolved = resolve_method(method, n)
    if resolved == "zero-shot" and n > 0:
        raise ConfigError(f"method='zero-shot' uses no target trials, got shots={n} (use "
                          f"shots=0, or method='finetune')")
    if n == 1 and resolved != "zero-shot":
        raise ConfigError(f"{resolved} needs at least 2 target trials, got shots=1 "
                          f"(use shots=0 for zero-shot)")
    if resolved == "multi-source":
        from autosync_transfer.adapt.methods import MultiSource

        if not MultiSource(df).pretrain_domains(tgt_dom.name):
            raise ConfigError(f"multi-source needs trials of at least one domain other than "
                              f"{tgt_dom.name!r} to pretrain on; {_where(trials)} has none")
    if src.sim is not None and resolved in ("finetune", "finetune-head", "guarded") \
            and not src.sim.learned:
        raise ConfigError(f"{src.name} version {src.version} is the {src.sim.kind} model (no "
                          f"weights to fine-tune); use method='zero-shot' or 'multi-source'")
    return resolved


def _register(result: AdaptResult, source_sim: Simulator, split: TargetSplit,
              tgt_df: pandas.DataFrame, df: pandas.DataFrame, *, resolved: str, n: int,
              seed: int, curve: bool, curve_shots: Iterable[int], curve_seeds: int,
              training: ShotTraining | None, collected: tuple[str, ...], source_domain: str,
              lineage: dict[str, Any], trials: str | Path | None, say: Callable[[str], None],
              repeat: dict[str, Any] | None = None
              ) -> tuple[LearningCurve | None, ModelVersionInfo]:
    """Log the adapted simulator (held-out scatter plot, learning curve when ``curve``) as a new
    version of the target's model, with its metrics, tags and lineage."""
    from autosync_transfer.registry.flavor import log_simulator
    from autosync_transfer.registry.versions import registered_name

    tgt_dom, src_dom = split.domain, source_domain
    lc: LearningCurve | None = None
    with tempfile.TemporaryDirectory(prefix="autosync-adapt-") as tmp:
        plots: list[Path] = []
        holdout = split.holdout()
        if len(holdout):
            from autosync_transfer.registry import plots as registry_plots

            plots.append(registry_plots.rank_scatter(
                result.simulator.score(list(holdout.strategies), tgt_dom),
                list(holdout.runtimes_s), Path(tmp) / "rank_scatter_heldout.png",
                title=f"{resolved} {src_dom} -> {tgt_dom.name}, {n} trials: held-out"))
        if curve:
            from autosync_transfer.adapt.plots import learning_curve_plot

            curve_method = resolved if resolved not in ("zero-shot",) else "finetune"
            say(f"learning curve ({curve_method}, {curve_seeds} seeds)")
            lc = learning_curve(source_sim, tgt_dom, split, curve_shots, curve_seeds,
                                method=curve_method, pretrain_trials=df, training=training)
            plots.append(learning_curve_plot(
                lc, Path(tmp) / "learning_curve.png",
                title=f"{src_dom} -> {tgt_dom.name}: held-out pairwise accuracy"))
        shot_set = set(result.shot_ids)
        details = result.details.get("adapted", {})
        tags = {"trial_count": int(tgt_df["strategy_id"].isin(shot_set).sum()) if shot_set else 0,
                "strategies": n, "test_split": result.test_split,
                "split_seed": result.split_seed, "seed": seed,
                "holdout_strategies": len(result.holdout_ids), "trials_source": _where(trials),
                "epochs": details.get("epochs", ""), "selection": details.get("selection", ""),
                "collected": len(collected)}
        if details.get("pretrain_domains"):
            tags["pretrain_domains"] = ",".join(details["pretrain_domains"])
        say(f"registering a version of {registered_name(tgt_dom.name)}")
        info = log_simulator(
            result.simulator, domain=tgt_dom, metrics=_metrics(result, lc, repeat), tags=tags,
            lineage={**lineage, "method": resolved, "shots": n,
                     "dataset_fingerprint": result.dataset_fingerprint},
            plots=plots, run_name=f"adapt-{src_dom}-to-{tgt_dom.name}-{resolved}-{n}-seed{seed}")
    return lc, info


def _metrics(result: AdaptResult, lc: LearningCurve | None,
             repeat: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metrics logged with an adapted simulator: held-out ``test_*``, the zero-shot and
    from-scratch comparisons, the learning curve's means and, where the target has repeat runs,
    the figures on its re-measured strategies (``repeat_*``: all pairs, resolved pairs and their
    counts, the resolved figure's 95 % interval, top-1 regret against the consensus-fastest and the confidently-best)."""
    metrics: dict[str, Any] = {
        f"test_{k}": v for k, v in _finite(result.metrics["adapted"]).items()}
    metrics["zero_shot"] = _finite(result.metrics["zero-shot"])
    metrics["from_scratch"] = _finite(result.metrics["from-scratch"])
    if repeat is not None:
        for who, figs in repeat.items():
            if figs:
                metrics[f"repeat_{who}"] = {
                    k: float(figs[k]) for k in ("pairs", "pairwise", "resolved_pairs",
                                                "pairwise_resolved", "pairwise_resolved_low",
                                                "pairwise_resolved_high", "top1_regret",
                                                "top1_regret_resolved")
                    if isinstance(figs.get(k), (int, float)) and math.isfinite(figs[k])}
    if lc is not None:
        metrics["curve"] = {
            f"{key}_n{r['shots']}": r[f"{key}_mean"] for r in lc.table()
            for key in ("adapted", "scratch") if math.isfinite(r[f"{key}_mean"])}
    return metrics


def _promote(info: ModelVersionInfo, tgt_name: str, split: TargetSplit) -> bool:
    """Promote the adapted version if it orders the held-out split better than the target's
    champion with 95 % confidence (paired on the same pairs; with no champion, it promotes)."""
    from autosync_transfer.registry.workflows import promote_if_better

    if _METRIC not in info.metrics or not math.isfinite(info.metrics[_METRIC]):
        return False
    holdout = split.holdout()

    def rescore(champion_sim: Simulator) -> float:
        from autosync_transfer.adapt.data import evaluate_on

        return evaluate_on(champion_sim, holdout)["pairwise_accuracy"]

    def judge(candidate: Simulator, champion_sim: Simulator) -> tuple[float, float]:
        import numpy as np

        from autosync_transfer.rankers import metrics

        def scores(sim: Simulator) -> Any:
            if holdout.launcher is not None:
                sim = sim.with_launcher(holdout.launcher)
            return np.asarray(sim.score(list(holdout.strategies), holdout.domain), dtype=float)

        return metrics.pairwise_gain(scores(candidate), scores(champion_sim),
                                     np.asarray(holdout.runtimes_s, dtype=float),
                                     np.zeros(len(holdout), dtype=np.int64))

    return promote_if_better(tgt_name, info.version, _METRIC, rescore=rescore, judge=judge)
