"""``adapt``: one adaptation evaluated against zero-shot and from-scratch; ``learning_curve``.

Both evaluate on the target's held-out strategies (:func:`~autosync_transfer.adapt.data.
split_target`), which no adapter ever sees: the shots come from the rest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosync_transfer.adapt.base import Adapter, check_source
from autosync_transfer.adapt.data import (
    DEFAULT_HOLDOUT_FRACTION,
    METRIC_NAMES,
    TargetSplit,
    evaluate_on,
    split_target,
)
from autosync_transfer.adapt.methods import FineTune, FromScratch, Guarded, MultiSource, ZeroShot
from autosync_transfer.adapt.training import ShotTraining
from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.simulator import Simulator

__all__ = [
    "METHODS",
    "CURVE_SHOTS",
    "ROWS",
    "AdaptResult",
    "LearningCurve",
    "adapt",
    "learning_curve",
    "make_adapter",
    "resolve_method",
    "jsonable",
]

#: ``method`` values of :func:`adapt` ("auto": finetune with shots, else zero-shot)
METHODS: tuple[str, ...] = ("auto", "zero-shot", "finetune", "finetune-head", "multi-source",
                           "guarded")
#: the target-trial counts of a learning curve
CURVE_SHOTS: tuple[int, ...] = (0, 5, 10, 20, 50, 100, 200)
#: the rows of the comparison, in order
ROWS: tuple[str, ...] = ("zero-shot", "adapted", "from-scratch")


def resolve_method(method: str, shots: int) -> str:
    """``auto`` -> ``finetune`` when ``shots > 0``, else ``zero-shot``; other names checked."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r} (known: {', '.join(METHODS)})")
    if method == "auto":
        return "finetune" if shots > 0 else "zero-shot"
    return method


def make_adapter(method: str, *, training: ShotTraining | None = None,
                 pretrain_trials: pandas.DataFrame | None = None) -> Adapter:
    """The adapter of a resolved method name (``multi-source`` needs ``pretrain_trials``; its
    pretraining epochs are capped by ``training.max_epochs`` when ``training`` is given)."""
    if method == "zero-shot":
        return ZeroShot()
    if method == "finetune":
        return FineTune("full", training=training)
    if method == "finetune-head":
        return FineTune("head", training=training)
    if method == "guarded":
        return Guarded(training=training)
    if method == "multi-source":
        if pretrain_trials is None:
            raise ConfigError("multi-source needs the trials of the other domains "
                              "(pretrain_trials)")
        epochs = {"pretrain_epochs": training.max_epochs} if training is not None else {}
        return MultiSource(pretrain_trials, training=training, **epochs)
    raise ConfigError(f"unknown method {method!r} (known: {', '.join(METHODS[1:])})")


def _method_of(adapter: Adapter) -> str:
    return str(getattr(adapter, "method", adapter.name))


def _as_domain(domain: Domain | str) -> Domain:
    if isinstance(domain, str):
        from autosync_transfer.domains.catalog import get_domain

        return get_domain(domain)
    return domain


def _as_split(domain: Domain, trials: pandas.DataFrame | TargetSplit, split_seed: int,
              holdout_fraction: float) -> TargetSplit:
    if isinstance(trials, TargetSplit):
        if trials.domain.name != domain.name:
            raise ConfigError(f"the target split is of {trials.domain.name!r}, not "
                              f"{domain.name!r}")
        return trials
    return split_target(domain, trials, split_seed=split_seed, holdout_fraction=holdout_fraction)


@dataclass(frozen=True)
class AdaptResult:
    """One adaptation and its held-out evaluation.

    ``metrics[row]`` for ``row`` in :data:`ROWS` (``zero-shot``: the source as is; ``adapted``:
    the result of ``method``; ``from-scratch``: trained on the same shots only) holds
    ``pairwise_accuracy``, ``kendall_tau``, ``top1`` and ``regret`` on the ``holdout_ids``
    (``nan`` where there is no simulator). ``simulator`` is the adapted one.
    """

    source: str
    target: str
    method: str
    shots: int
    seed: int
    simulator: Simulator
    metrics: dict[str, dict[str, float]]
    shot_ids: tuple[str, ...]
    holdout_ids: tuple[str, ...]
    split_seed: int
    test_split: str
    dataset_fingerprint: str
    details: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One row per :data:`ROWS` entry: ``row``, ``trials`` (target trials trained on) and
        the metrics."""
        trials = {"zero-shot": 0, "adapted": self.shots, "from-scratch": self.shots}
        return [{"row": r, "trials": trials[r], **self.metrics[r]} for r in ROWS]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (``nan`` as None)."""
        return jsonable({"source": self.source, "target": self.target, "method": self.method,
                "shots": self.shots, "seed": self.seed, "metrics": self.metrics,
                "rows": self.rows(), "shot_ids": list(self.shot_ids),
                "holdout_ids": list(self.holdout_ids), "split_seed": self.split_seed,
                "test_split": self.test_split, "dataset_fingerprint": self.dataset_fingerprint,
                "details": self.details})


def adapt(
    source_sim: Simulator | None,
    target_domain: Domain | str,
    target_trials_df: pandas.DataFrame | TargetSplit,
    *,
    method: str = "auto",
    shots: int = 0,
    seed: int = 0,
    split_seed: int = 0,
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
    shot_ids: Collection[str] | None = None,
    pretrain_trials: pandas.DataFrame | None = None,
    training: ShotTraining | None = None,
    adapter: Adapter | None = None,
    control: Adapter | None = None,
    source_name: str = "",
) -> AdaptResult:
    """Adapt ``source_sim`` to ``target_domain`` with ``shots`` target trials and evaluate it.

    ``target_trials_df``: the target's trials (or an already made :class:`TargetSplit`); the
    held-out split is drawn with ``split_seed`` / ``holdout_fraction``, the shots from the rest
    with ``seed`` (or given as ``shot_ids``). ``method``: one of :data:`METHODS`; ``adapter``
    replaces it with a configured :class:`Adapter`, ``control`` the default
    :class:`FromScratch` (both with ``training``). ``pretrain_trials``: the trials
    ``multi-source`` pretrains on (the target's are left out).

    Raises :class:`ConfigError` for an unknown method, more shots than the target has outside
    the held-out split, or a source simulator of another feature schema.
    """
    domain = _as_domain(target_domain)
    split = _as_split(domain, target_trials_df, split_seed, holdout_fraction)
    if shot_ids is not None:
        shot_data = split.chosen(shot_ids)
    else:
        split.check_shots(shots)
        shot_data = split.shots(shots, seed)
    n = len(shot_data)
    if adapter is None:
        resolved = resolve_method(method, n)
        adapter = make_adapter(resolved, training=training, pretrain_trials=pretrain_trials)
    resolved = _method_of(adapter)
    if resolved == "zero-shot" and n > 0:
        raise ConfigError(f"zero-shot uses no target trials, got {n}")
    if source_sim is not None or adapter.uses_source:
        check_source(source_sim, resolved)
    control = control or FromScratch(training=training)
    holdout = split.holdout()
    zero = evaluate_on(source_sim, holdout)
    fitted = adapter.fit(source_sim, shot_data, seed=seed)
    if fitted.simulator is None:
        raise ConfigError(f"{resolved} produced no simulator from {n} target trials")
    adapted = zero if fitted.simulator is source_sim else evaluate_on(fitted.simulator, holdout)
    scratch = control.fit(source_sim, shot_data, seed=seed)
    return AdaptResult(
        source=source_name, target=domain.name, method=resolved, shots=n, seed=seed,
        simulator=fitted.simulator,
        metrics={"zero-shot": zero, "adapted": adapted,
                 "from-scratch": evaluate_on(scratch.simulator, holdout)},
        shot_ids=shot_data.strategy_ids, holdout_ids=split.holdout_ids,
        split_seed=split.split_seed, test_split=split.test_split,
        dataset_fingerprint=split.data.fingerprint,
        details={"adapted": fitted.details, "from-scratch": scratch.details},
    )


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, numpy scalars as Python numbers and non-finite floats as
    None (strict JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# -- learning curve ------------------------------------------------------------------------------


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0


@dataclass(frozen=True)
class LearningCurve:
    """Held-out metrics of the adapted and the from-scratch simulator for each number of
    target trials (``shots``) and seed. ``points``: one entry per (N, seed) with ``shots``,
    ``seed``, ``adapted`` and ``from-scratch`` (metric dicts); ``skipped``: the requested N
    larger than the target's non-held-out strategies; ``zero_shot``: the source as is."""

    target: str
    method: str
    shots: tuple[int, ...]
    seeds: tuple[int, ...]
    skipped: tuple[int, ...]
    available: int
    zero_shot: dict[str, float]
    points: tuple[dict[str, Any], ...]
    test_split: str

    def table(self, metric: str = "pairwise_accuracy") -> list[dict[str, float]]:
        """Per N: ``shots``, ``adapted_mean``, ``adapted_std``, ``scratch_mean``,
        ``scratch_std`` of ``metric`` over the seeds (sample std; 0 for one seed) and
        ``seeds``."""
        if metric not in METRIC_NAMES:
            raise ConfigError(f"unknown metric {metric!r} (known: {', '.join(METRIC_NAMES)})")
        rows = []
        for n in self.shots:
            pts = [p for p in self.points if p["shots"] == n]
            a_mean, a_std = _mean_std([p["adapted"][metric] for p in pts])
            s_mean, s_std = _mean_std([p["from-scratch"][metric] for p in pts])
            rows.append({"shots": n, "adapted_mean": a_mean, "adapted_std": a_std,
                         "scratch_mean": s_mean, "scratch_std": s_std, "seeds": len(pts)})
        return rows

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (``nan`` as None)."""
        return jsonable({"target": self.target, "method": self.method, "shots": list(self.shots),
                "seeds": list(self.seeds), "skipped": list(self.skipped),
                "available": self.available, "zero_shot": self.zero_shot,
                "test_split": self.test_split,
                "table": {m: self.table(m) for m in ("pairwise_accuracy", "top1", "regret")},
                "points": list(self.points)})


def learning_curve(
    source_sim: Simulator | None,
    target: Domain | str,
    df: pandas.DataFrame | TargetSplit,
    shots: Iterable[int] = CURVE_SHOTS,
    seeds: int | Iterable[int] = 3,
    *,
    method: str = "finetune",
    split_seed: int = 0,
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
    pretrain_trials: pandas.DataFrame | None = None,
    training: ShotTraining | None = None,
    adapter: Adapter | None = None,
    control: Adapter | None = None,
    on_point: Callable[[Mapping[str, Any]], None] | None = None,
) -> LearningCurve:
    """Held-out accuracy against the number of target trials N, adapted (``method``, or
    ``adapter``) and from scratch, over ``seeds`` (a count: seeds 0..k-1). Every (N, seed) uses
    the seed's first N shots (so the shots of a smaller N are among those of a larger one) and
    the same held-out split. N larger than the non-held-out strategies are skipped (listed in
    ``skipped``); N = 0 adapts without target trials (zero-shot for fine-tuning)."""
    domain = _as_domain(target)
    split = _as_split(domain, df, split_seed, holdout_fraction)
    seed_list = tuple(range(seeds)) if isinstance(seeds, int) else tuple(int(s) for s in seeds)
    if not seed_list:
        raise ConfigError("a learning curve needs at least one seed")
    requested = sorted({int(n) for n in shots})
    if any(n < 0 for n in requested):
        raise ConfigError(f"shots must be >= 0, got {requested[0]}")
    done = tuple(n for n in requested if n <= split.available)
    skipped = tuple(n for n in requested if n > split.available)
    if not done:
        raise ConfigError(f"no requested number of target trials fits: {domain.name!r} has "
                          f"{split.available} outside the held-out split")
    if adapter is None:
        adapter = make_adapter(resolve_method(method, 1), training=training,
                               pretrain_trials=pretrain_trials)
    if source_sim is not None or adapter.uses_source:
        check_source(source_sim, _method_of(adapter))
    control = control or FromScratch(training=training)
    holdout = split.holdout()
    zero = evaluate_on(source_sim, holdout)
    points: list[dict[str, Any]] = []
    for n in done:
        for seed in seed_list:
            shot_data = split.shots(n, seed)
            fitted = adapter.fit(source_sim, shot_data, seed=seed)
            adapted = (zero if fitted.simulator is source_sim
                       else evaluate_on(fitted.simulator, holdout))
            scratch = control.fit(source_sim, shot_data, seed=seed)
            point = {"shots": n, "seed": seed, "adapted": adapted,
                     "from-scratch": evaluate_on(scratch.simulator, holdout)}
            points.append(point)
            if on_point is not None:
                on_point(point)
    return LearningCurve(target=domain.name, method=_method_of(adapter), shots=done,
                         seeds=seed_list, skipped=skipped, available=split.available,
                         zero_shot=zero, points=tuple(points), test_split=split.test_split)
