"""Fitted simulators: a ranker with its weights, as the search and the registry use it.

:class:`Simulator` is what a user holds: ``score(strategies, domain)`` gives slowness scores
(lower = predicted faster, like :class:`~autosync_transfer.rankers.costmodel.AnalyticalRanker`),
``config()`` + ``state_dict()`` describe it completely (a JSON-serializable dict and tensors) and
:meth:`Simulator.from_config` rebuilds it exactly. ``kind == "analytical"`` wraps the analytical
cost model (no weights).

:func:`train_simulator` fits a learned ranker (:data:`~autosync_transfer.rankers.modules.RANKERS`)
with Lightning on CPU and returns the simulator with its test metrics.

Randomness is owned: :func:`train_simulator` does not call ``lightning.seed_everything`` (which
seeds Python, numpy and torch globally). The initial weights and dropout come from
``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the caller's torch generator state
is restored on return), the batch order from the data module's own numpy generator, and the
Trainer runs with ``deterministic=True``; the global switches this sets
(``torch.use_deterministic_algorithms``, ``CUBLAS_WORKSPACE_CONFIG``, cudnn flags) and the
Lightning log levels are restored on return. Same data, hyper-parameters and seed give identical
weights.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from autosync_transfer.domains.profile import ClusterCalibration, WorkloadProfile
from autosync_transfer.errors import ConfigError, NotFittedError, UnknownNameError
from autosync_transfer.rankers import metrics
from autosync_transfer.rankers.costmodel import CostModelConfig
from autosync_transfer.rankers.features import (
    FEATURE_SCHEMA,
    FEATURE_SCHEMA_VERSION,
    Featurizer,
    StrategyFeatures,
    collate,
)
from autosync_transfer.rankers.physics import (
    FALLBACK,
    MEASURED,
    Physics,
    check_physics,
    physics_for,
)
from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimulator
from autosync_transfer.rankers.kinds import (ANALYTICAL, STEPSIM, RankerKind, is_learned, kind_names,
                                            kind_of)
from autosync_transfer.strategies.sampler import SampledBatch

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.rankers.datamodule import Triple, TrialDataModule
    from autosync_transfer.rankers.modules import RankerModule
    from autosync_transfer.strategies.types import Strategy

__all__ = ["Simulator", "train_simulator", "evaluate_simulator", "paired_comparison",
           "ANALYTICAL", "STEPSIM", "CONFIG_FORMAT", "quiet_lightning"]

#: version of the layout of :meth:`Simulator.config`
CONFIG_FORMAT = 1

_LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
                      "lightning_fabric")
_QUIET_WARNINGS = (
    r".*does not have many workers.*",
    r".*smaller than the logging interval.*",
    r".*GPU available but not used.*",
    r".*`training_step` returned `None`.*",
    r".*LeafSpec.*",  # torch's pytree deprecation, raised inside Lightning
)


def _feature_widths() -> dict[str, int]:
    return {"row": FEATURE_SCHEMA.num_row, "agg": FEATURE_SCHEMA.num_agg,
            "server": FEATURE_SCHEMA.num_server, "group": FEATURE_SCHEMA.num_group}


class Simulator:
    """A ranker of ``kind`` with hyper-parameters ``hparams``, trained on feature schema
    ``schema_version``, with weights ``state_dict`` (``None``: not fitted; ``analytical`` needs
    none). ``costmodel_config``: the cost-model constants used for the z_pre features (and by the
    analytical kind).

    The constructor only stores; the network is built (and the weights loaded) on first use.
    Scores are slowness scores: lower = predicted faster, comparable within one domain only.
    """

    lower_is_better: bool = True

    def __init__(
        self,
        kind: str,
        hparams: Mapping[str, Any] | None = None,
        schema_version: int = FEATURE_SCHEMA_VERSION,
        state_dict: Mapping[str, Tensor] | None = None,
        *,
        costmodel_config: CostModelConfig | None = None,
        profiles: Sequence[WorkloadProfile] = (),
        calibrations: Sequence[ClusterCalibration] = (),
        step_config: StepSimConfig | None = None,
        physics: str = MEASURED,
        launcher: str | None = None,
    ) -> None:
        self.kind = kind
        #: measured physics for the step simulator (its features and the stepsim kind), picked
        #: per domain by the model's and the cluster's fingerprint. Given here, only these are
        #: used; not given, ``physics="measured"`` finds the stored ones
        #: (:func:`~autosync_transfer.rankers.physics.measured_physics` with :attr:`launcher`)
        #: and ``physics="fallback"`` uses the step simulator's fallback constants
        self.profiles = tuple(profiles)
        self.calibrations = tuple(calibrations)
        self.step_config = step_config
        self.physics = check_physics(physics)
        #: the launcher the scored strategies would run with (picks the calibration; ``None``:
        #: any, a non-emulated one preferred)
        self.launcher = launcher
        self.hparams = dict(hparams or {})
        self.schema_version = int(schema_version)
        self._state = dict(state_dict) if state_dict is not None else None
        self.costmodel_config = costmodel_config or CostModelConfig()
        self._module: RankerModule | None = None
        self._featurizer: tuple[tuple[str, str], Featurizer] | None = None

    @property
    def learned(self) -> bool:
        """Whether this kind has weights (fitted by training, saved and loaded)."""
        return is_learned(self.kind)

    @property
    def spec(self) -> RankerKind:
        """The registered kind (:mod:`~autosync_transfer.rankers.kinds`); an unknown kind is an
        :class:`UnknownNameError`."""
        return kind_of(self.kind)

    def __repr__(self) -> str:
        fitted = "fitted" if self.fitted else "not fitted"
        return f"Simulator(kind={self.kind!r}, schema v{self.schema_version}, {fitted})"

    def with_launcher(self, launcher: str | None) -> Simulator:
        """This simulator scoring for strategies run with ``launcher`` (``self`` when it already
        does; else a shallow copy sharing the weights)."""
        if launcher == self.launcher:
            return self
        other = copy.copy(self)
        other.launcher = launcher
        other._featurizer = None
        return other

    # -- construction -----------------------------------------------------------------------------

    @property
    def fitted(self) -> bool:
        return not self.learned or self._module is not None or self._state is not None

    @classmethod
    def from_module(cls, module: RankerModule,
                    costmodel_config: CostModelConfig | None = None, *,
                    physics: str = MEASURED) -> Simulator:
        """The simulator of a trained ranker module (weights copied); ``physics``: what its
        step-simulator features were computed with in training."""
        sim = cls(module.kind, dict(module.hparams), FEATURE_SCHEMA_VERSION,
                  _copy_state(module.state_dict()), costmodel_config=costmodel_config,
                  physics=physics)
        sim._build()
        return sim

    @property
    def module(self) -> RankerModule:
        """The ranker network with its weights, in eval mode (built on first use)."""
        if not self.learned:
            raise ConfigError(f"the {self.kind} simulator has no network")
        if self._module is None:
            self._build()
        assert self._module is not None
        return self._module

    def _check(self) -> None:
        if self.kind not in kind_names():
            raise UnknownNameError(
                f"unknown simulator kind {self.kind!r} (known: {', '.join(kind_names())})")
        # the physics kinds have no weights: any schema version scores the same
        if self.learned and self.schema_version != FEATURE_SCHEMA_VERSION:
            raise ConfigError(
                f"the simulator was trained on feature schema version {self.schema_version}, "
                f"but this code featurizes with version {FEATURE_SCHEMA_VERSION}; retrain it "
                f"on the current features")

    def _build(self) -> None:
        from autosync_transfer.rankers.modules import build_ranker

        self._check()
        if self._state is None:
            raise NotFittedError(f"the {self.kind} simulator has no weights: train it with "
                                 f"train_simulator() or load it with Simulator.from_config()")
        module = build_ranker(self.kind, self.hparams, seed=0)
        try:
            module.load_state_dict(self._state, strict=True)
        except RuntimeError as e:
            first = str(e).strip().splitlines()
            raise ConfigError(f"the weights do not fit the {self.kind} ranker with these "
                              f"hyper-parameters: {' '.join(first[:3])}") from e
        module.eval()
        self._module = module

    # -- serialization ---------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """Everything but the weights, JSON-serializable: ``format``, ``kind``, ``hparams``
        (all of them, defaults included), ``schema_version``, ``feature_widths``,
        ``costmodel`` (the cost-model constants of the z_pre features) and ``physics`` (what
        the step-simulator features are computed with: ``measured`` or ``fallback``)."""
        hparams = dict(self.module.hparams) if self.learned and self.fitted else dict(
            self.hparams)
        return {
            "format": CONFIG_FORMAT,
            "kind": self.kind,
            "hparams": _jsonable(hparams),
            "schema_version": self.schema_version,
            "feature_widths": _feature_widths(),
            "costmodel": self.costmodel_config.model_dump(mode="json"),
            "physics": self.physics,
        }

    def state_dict(self) -> dict[str, Tensor]:
        """The weights (CPU tensors; ``{}`` for a kind without weights)."""
        if not self.learned:
            return {}
        return _copy_state(self.module.state_dict())

    @classmethod
    def from_config(cls, config: Mapping[str, Any],
                    state_dict: Mapping[str, Tensor] | None = None) -> Simulator:
        """Rebuild a simulator from :meth:`config` and :meth:`state_dict`.

        Raises :class:`ConfigError` naming the mismatch when the feature schema version or the
        feature widths differ from the current :data:`FEATURE_SCHEMA`, when the kind or a
        hyper-parameter is unknown, or when the weights do not fit.
        """
        for key in ("kind", "schema_version"):
            if key not in config:
                raise ConfigError(f"simulator config has no {key!r}")
        fmt = int(config.get("format", CONFIG_FORMAT))
        if fmt != CONFIG_FORMAT:
            raise ConfigError(f"simulator config format {fmt} is not supported (this code "
                              f"reads format {CONFIG_FORMAT})")
        widths = config.get("feature_widths")
        version = int(config["schema_version"])
        learned = is_learned(str(config["kind"]))
        if learned and version != FEATURE_SCHEMA_VERSION:
            raise ConfigError(
                f"feature schema version mismatch: the simulator was trained on version "
                f"{version}, this code featurizes with version {FEATURE_SCHEMA_VERSION}")
        if learned and widths is not None and dict(widths) != _feature_widths():
            raise ConfigError(f"feature widths mismatch: the simulator expects {dict(widths)}, "
                              f"the current schema has {_feature_widths()}")
        try:
            cm = CostModelConfig(**dict(config.get("costmodel") or {}))
        except Exception as e:  # pydantic ValidationError
            from autosync_transfer.errors import format_pydantic_error

            raise ConfigError(format_pydantic_error(e, "simulator costmodel config")) from e
        # a learned simulator saved without ``physics`` was trained on the fallback's features
        physics = check_physics(str(config.get("physics", FALLBACK if learned else MEASURED)))
        sim = cls(str(config["kind"]), dict(config.get("hparams") or {}), version,
                  None if state_dict is None else dict(state_dict), costmodel_config=cm,
                  physics=physics)
        sim._check()
        if sim.learned:
            if state_dict is None:
                raise ConfigError(f"the {sim.kind} simulator needs its state_dict")
            sim._build()
        return sim

    # -- scoring ----------------------------------------------------------------------------------

    def physics_of(self, domain: Domain) -> Physics:
        """The step simulator's inputs for ``domain``: the given ``profiles`` /
        ``calibrations`` when any were given, else the stored ones
        (:func:`~autosync_transfer.rankers.physics.measured_physics` with :attr:`launcher`), or
        none with ``physics="fallback"``; an explicit ``step_config`` is used as given."""
        if self.profiles or self.calibrations:
            profile = next((p for p in self.profiles
                            if p.fingerprint == domain.model.fingerprint), None)
            calibration = next((c for c in self.calibrations
                                if c.fingerprint == domain.cluster.fingerprint), None)
            return Physics(profile, calibration, self.step_config or StepSimConfig())
        found = physics_for(domain, self.physics, self.launcher, config=self.step_config)
        if self.step_config is not None:  # explicit constants win over the emulated host's
            found = found._replace(config=self.step_config)
        return found

    def _featurizer_for(self, domain: Domain) -> Featurizer:
        found = self.physics_of(domain)
        # stored physics is cached: the same objects while nothing changed on disk
        key = (domain.name, domain.fingerprint, id(found.profile), id(found.calibration),
               found.config)
        if self._featurizer is None or self._featurizer[0] != key:
            stepsim = StepSimulator(domain, *found)
            self._featurizer = (key, Featurizer(domain, self.costmodel_config, stepsim))
        return self._featurizer[1]

    def score(self, strategies: Sequence[Strategy], domain: Domain, *,
              batch_size: int = 64) -> np.ndarray:
        """Slowness scores (float64, one per strategy, in order) of ``strategies`` on
        ``domain``: lower = predicted faster. The analytical kind returns its predicted sync
        seconds (computed by the featurizer in float64: ``costmodel.estimate``'s ``total_s`` up to
        float rounding). Deterministic (eval mode, no gradients).

        ``strategies`` may be a :class:`~autosync_transfer.strategies.sampler.SampledBatch`
        (what search and ``recommend`` score): it is featurized from its arrays, without building
        its strategy objects. A ranker that reads only the ``agg`` table (``linear``) gets only
        that table computed (:meth:`Featurizer.aggregates`)."""
        if not isinstance(strategies, SampledBatch):
            strategies = list(strategies)
        if not self.learned:
            self._check()
        if not len(strategies):
            return np.zeros(0, dtype=np.float64)
        if self.learned:
            self.module  # noqa: B018 - builds the network (the kind's errors first)
        return self.spec.score(self, strategies, domain, batch_size)

    def score_features(self, features: Sequence[StrategyFeatures], *,
                       batch_size: int = 64) -> np.ndarray:
        """Slowness scores of already featurized strategies (of one domain). The analytical
        kind returns its bottleneck time divided by the domain's reference time (the ``total``
        aggregate: the same order as :meth:`score` within a domain)."""
        if not self.learned:
            self._check()
            return self.spec.score_features(self, list(features), batch_size)
        if not features:
            return np.zeros(0, dtype=np.float64)
        self.module  # noqa: B018 - builds the network (the kind's errors first)
        return self.spec.score_features(self, list(features), batch_size)


def _score_features(module: RankerModule, feats: Sequence[StrategyFeatures],
                    batch_size: int) -> np.ndarray:
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    order = np.argsort(np.array([f.num_rows for f in feats]), kind="stable")
    out = np.empty(len(feats), dtype=np.float64)
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            for a in range(0, len(order), batch_size):
                idx = order[a: a + batch_size]
                batch = collate([feats[i] for i in idx])
                out[idx] = module(batch).double().cpu().numpy()
    finally:
        module.train(was_training)
    return out


def _score_aggregates(module: RankerModule, agg: np.ndarray, batch_size: int) -> np.ndarray:
    """Scores of a ranker that reads only ``agg``, from the ``[n, F_agg]`` table (batches of at
    least 1,024 rows: the per-row work is one small MLP)."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    step = max(batch_size, 1024)
    out = np.empty(agg.shape[0], dtype=np.float64)
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            for a in range(0, agg.shape[0], step):
                batch = {"agg": torch.from_numpy(np.ascontiguousarray(agg[a: a + step]))}
                out[a: a + step] = module(batch).double().cpu().numpy()
    finally:
        module.train(was_training)
    return out


def _copy_state(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


# -- evaluation ---------------------------------------------------------------------------------


def evaluate_simulator(simulator: Simulator, datamodule: TrialDataModule, split: str = "test",
                       *, batch_size: int = 64) -> dict[str, Any]:
    """Ranking metrics of ``simulator`` on a split of ``datamodule`` (set up on demand):
    ``pairwise_accuracy``, ``kendall_tau``, ``top1`` (best runtime / runtime of the predicted
    best), ``regret`` (runtime of the predicted best / best - 1), each the mean over domains
    (domains where a metric is undefined are left out), ``strategies`` and ``per_domain``
    (domain name -> the same metrics and ``strategies``). The strategies are featurized with the
    simulator's ``physics`` (a copy of the data module when it featurizes with another)."""
    datamodule.setup()
    if simulator.spec.reads_physics:  # the analytical model's do not depend on it
        datamodule = datamodule.with_physics(simulator.physics)
    items = datamodule.split_items(split)
    names = datamodule.domain_names
    per_domain: dict[str, dict[str, float]] = {}
    by_domain: dict[int, list[int]] = {}
    for i, (_, _, d) in enumerate(items):
        by_domain.setdefault(d, []).append(i)
    fns = {"pairwise_accuracy": metrics.pairwise_accuracy, "kendall_tau": metrics.kendall_tau,
           "top1": metrics.top1_score, "regret": metrics.regret}
    for d, idx in sorted(by_domain.items()):
        scores = simulator.score_features([items[i][0] for i in idx], batch_size=batch_size)
        runtimes = np.array([items[i][1] for i in idx])
        row = {k: float(fn(scores, runtimes)) for k, fn in fns.items()}
        row["strategies"] = float(len(idx))
        per_domain[names[d]] = row
    out: dict[str, Any] = {}
    for k in fns:
        vals = [r[k] for r in per_domain.values() if not math.isnan(r[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    out["strategies"] = len(items)
    out["per_domain"] = per_domain
    return out


def paired_comparison(new: Simulator, old: Simulator, datamodule: TrialDataModule,
                      split: str = "test", *, confidence: float = 0.95, seed: int = 0,
                      batch_size: int = 64) -> tuple[float, float]:
    """How much better ``new`` orders a split of ``datamodule`` than ``old``, paired on the same
    pairs: ``(gain, low)``, the mean over domains of the pairwise-accuracy difference and its
    one-sided lower ``confidence`` bound (:func:`~autosync_transfer.rankers.metrics.pairwise_gain`,
    a bootstrap over strategies). Each simulator featurizes with its own ``physics``, as
    :func:`evaluate_simulator` does."""
    datamodule.setup()
    columns = []
    for sim in (new, old):
        dm = datamodule.with_physics(sim.physics) if sim.spec.reads_physics else datamodule
        items = dm.split_items(split)
        columns.append((sim.score_features([x[0] for x in items], batch_size=batch_size),
                        np.array([x[1] for x in items]), np.array([x[2] for x in items])))
    (n_scores, runtimes, domains), (o_scores, o_runtimes, _) = columns
    if not np.array_equal(runtimes, o_runtimes):  # the two featurizations' splits must agree
        raise RuntimeError(f"the {split} split differs between the two simulators' physics")
    return metrics.pairwise_gain(n_scores, o_scores, runtimes, domains,
                                 confidence=confidence, seed=seed)


# -- training -----------------------------------------------------------------------------------


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's log levels at WARNING and its warnings that say nothing about a CPU fit on an
    in-memory data module ignored, both restored on exit (for every Trainer of the rankers and
    the adapters)."""
    levels = {n: logging.getLogger(n).level for n in _LIGHTNING_LOGGERS}
    try:
        for n in _LIGHTNING_LOGGERS:
            logging.getLogger(n).setLevel(logging.WARNING)
        with warnings.catch_warnings():
            for pattern in _QUIET_WARNINGS:
                warnings.filterwarnings("ignore", message=pattern)
            yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


@contextmanager
def _quiet_deterministic_cpu() -> Iterator[None]:
    """:func:`quiet_lightning`, and every global switch a deterministic Trainer sets is restored
    on exit."""
    det = torch.are_deterministic_algorithms_enabled()
    det_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    try:
        with quiet_lightning():
            yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=det_warn)
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn


def _callbacks() -> Any:
    import lightning as L

    class BestAndHistory(L.Callback):
        """Keeps the weights of the best validation pairwise accuracy (in memory) and the
        per-epoch history of the logged metrics and wall time."""

        def __init__(self) -> None:
            self.best = -math.inf
            self.best_epoch = -1
            self.best_state: dict[str, Tensor] | None = None
            self.initial: tuple[float, dict[str, Tensor]] | None = None
            self.initial_outputs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
            #: (gain, lower bound) of the best epoch's validation accuracy over the start's
            self.gain: tuple[float, float] | None = None
            #: ``(epoch, validation scores)`` of every epoch that validated, where the start is
            #: a candidate (the epochs the best is picked from, for the gate's bound)
            self.epoch_scores: list[tuple[int, np.ndarray]] = []
            self.history: dict[str, list[float]] = {
                "train_loss": [], "val_loss": [], "val_pairwise_acc": [], "epoch_s": []}
            self._t0 = 0.0

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._t0 = time.perf_counter()

        def consider_initial(self, module: Any, dm: Any) -> None:
            """The weights before the first epoch as a candidate (``best_epoch`` -1), with
            their validation outputs (what an epoch's gain is paired against)."""
            outputs = _validation_outputs(module, dm)
            acc = _validation_accuracy(module, outputs)
            if math.isfinite(acc):
                self.best, self.best_epoch = acc, -1
                self.best_state = _copy_state(module.state_dict())
                self.initial = (acc, self.best_state)
                self.initial_outputs = outputs

        def keep_initial(self) -> None:
            """Go back to the weights before the first epoch (``best_epoch`` -1)."""
            assert self.initial is not None
            self.best, self.best_state = self.initial
            self.best_epoch = -1

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking:
                return
            v = trainer.callback_metrics.get("val_pairwise_acc")
            if v is None:
                return
            acc = float(v)
            if math.isfinite(acc) and self.initial_outputs is not None:
                out = _validation_outputs(pl_module, trainer.datamodule)
                if out is not None:
                    self.epoch_scores.append((int(trainer.current_epoch), out[0]))
            if math.isfinite(acc) and acc > self.best:
                self.best, self.best_epoch = acc, int(trainer.current_epoch)
                self.best_state = _copy_state(pl_module.state_dict())

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            m = trainer.callback_metrics
            for key in ("train_loss", "val_loss", "val_pairwise_acc"):
                v = m.get(key)
                self.history[key].append(float(v) if v is not None else float("nan"))
            self.history["epoch_s"].append(time.perf_counter() - self._t0)

    return BestAndHistory()


def _validation_outputs(module: RankerModule, dm: TrialDataModule
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(scores, runtimes, domain ids)`` of ``module`` as it is on the validation split
    (``None`` where it is empty)."""
    outs = []
    was_training = module.training
    module.eval()
    with torch.no_grad():
        for batch in dm.val_dataloader():
            outs.append((module(batch).double().numpy(), batch["runtime"].double().numpy(),
                         batch["domain_id"].numpy()))
    module.train(was_training)
    if not outs:
        return None
    o, y, d = (np.concatenate(t) for t in zip(*outs))
    return o, y, d


def _validation_accuracy(module: RankerModule,
                         out: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> float:
    """``val_pairwise_acc`` of ``module``'s validation outputs ``out`` (the validation epoch's
    metric: mean over domains, on the pairs its ``margin`` counts)."""
    if out is None:
        return math.nan
    return float(metrics.per_domain(metrics.pairwise_accuracy, *out,
                                    margin=float(module.hparams["margin"])))


#: confidence with which a trained epoch must validate better than the weights it started from
#: to replace them (:func:`~autosync_transfer.rankers.metrics.pairwise_gain`)
START_CONFIDENCE = 0.95


def _gated_best(module: RankerModule, tracker: Any, dm: TrialDataModule, seed: int,
                margin: float | None = None) -> None:
    """Where the starting weights were a candidate and an epoch validated above them, keep the
    epoch only if it ranks the validation strategies better with :data:`START_CONFIDENCE`
    (paired on the same pairs, bootstrap over strategies), by a bound that holds although the
    epoch is the best of all the epochs that validated, on these same strategies
    (:func:`~autosync_transfer.rankers.metrics.selected_pairwise_gain`): the best of several
    noisy epochs is not a gain by itself. Otherwise the tracker goes back to the start.
    ``margin``: the label gap the comparison counts (default: the ranker's)."""
    old = tracker.initial_outputs
    if old is None or tracker.best_epoch < 0 or tracker.best_state is None:
        return
    module.load_state_dict(tracker.best_state)
    new = _validation_outputs(module, dm)
    if new is None:
        return
    epochs = [e for e, _ in tracker.epoch_scores]
    candidates = [x for _, x in tracker.epoch_scores]
    if tracker.best_epoch in epochs:
        chosen = epochs.index(tracker.best_epoch)
        candidates[chosen] = new[0]
    else:  # not recorded (cannot happen where the start is a candidate): the one epoch
        candidates, chosen = [new[0]], 0
    gain, low = metrics.selected_pairwise_gain(
        candidates, chosen, old[0], new[1], new[2],
        margin=float(module.hparams["margin"] if margin is None else margin),
        confidence=START_CONFIDENCE, seed=seed)
    tracker.gain = (gain, low)
    if not (math.isfinite(low) and low > 0):
        tracker.keep_initial()


def _as_datamodule(data: Any, *, seed: int, split_seed: int, batch_size: int,
                   costmodel_config: CostModelConfig | None) -> TrialDataModule:
    from autosync_transfer.rankers.datamodule import TrialDataModule

    if isinstance(data, TrialDataModule):
        return data
    return TrialDataModule(data, batch_size=batch_size, split_seed=split_seed, seed=seed,
                           costmodel_config=costmodel_config)


def _apply_freeze(module: RankerModule, freeze: str | Sequence[str]) -> None:
    if freeze == "body":
        module.freeze_body("head")
        return
    prefixes = (freeze,) if isinstance(freeze, str) else tuple(freeze)
    names = [n for n, _ in module.named_parameters()]
    for pre in prefixes:
        if not any(n.startswith(pre) for n in names):
            raise ConfigError(f"freeze: no parameter of the {module.kind} ranker starts with "
                              f"{pre!r} (top-level modules: "
                              f"{', '.join(sorted({n.split('.')[0] for n in names}))})")
    for name, p in module.named_parameters():
        if any(name.startswith(pre) for pre in prefixes):
            p.requires_grad_(False)


def train_simulator(
    kind: str,
    data: TrialDataModule | pandas.DataFrame | Sequence[Triple],
    *,
    hparams: Mapping[str, Any] | None = None,
    seed: int = 0,
    max_epochs: int = 100,
    patience: int | None = 15,
    batch_size: int = 32,
    split_seed: int | None = None,
    logger: Any = None,
    enable_progress_bar: bool = False,
    init_state: Simulator | Mapping[str, Tensor] | None = None,
    freeze: str | Sequence[str] | None = None,
    gradient_clip_val: float = 0.25,
    costmodel_config: CostModelConfig | None = None,
    start_margin: float | None = None,
) -> tuple[Simulator, dict[str, Any]]:
    """Train a simulator of ``kind`` and evaluate it on the test split.

    ``data``: a :class:`~autosync_transfer.rankers.datamodule.TrialDataModule` (used as given:
    its splits, batch size and shuffling seed), or a trials table / ``(domain, strategies,
    runtimes)`` triples, wrapped in one with ``batch_size``, ``split_seed`` (default ``seed``)
    and ``seed``. ``hparams``: the ranker's hyper-parameters
    (:func:`~autosync_transfer.rankers.modules.ranker_hparams`); the inputs are standardized
    with the training split's statistics. ``max_epochs`` with early stopping on
    ``val_pairwise_acc`` after ``patience`` epochs without improvement (``None``: never); the
    returned simulator has the weights of the best validation epoch. ``logger``: an optional
    Lightning logger (e.g. ``MLFlowLogger``; without one nothing is written). ``init_state``:
    weights to start from (a simulator of the same kind, whose hyper-parameters are used unless
    ``hparams`` is given, or a ``state_dict``): fine-tuning keeps the input statistics stored
    with them. ``freeze``: ``"body"`` trains only the ranker's ``head``; a parameter-name prefix
    (or several) freezes those parameters. ``kind="analytical"`` trains nothing and evaluates
    the cost model. ``start_margin``: the relative label gap below which a validation pair does
    not count when an epoch is weighed against the starting weights (default: the ranker's own
    ``margin``; e.g. the labels' noise band, :func:`~autosync_transfer.dataset.loader.label_margin`).

    Returns ``(simulator, metrics)``: ``test_pairwise_accuracy``, ``test_kendall_tau``,
    ``test_top1``, ``test_regret`` (means over domains), ``test_per_domain``,
    ``best_val_pairwise_acc``, ``best_epoch`` (-1: the starting weights, kept where they
    already rank and no epoch validated better with 95 % confidence, by a bound that holds for
    the best of all the epochs: ``metrics.selected_pairwise_gain``), ``val_gain`` /
    ``val_gain_low`` (the best epoch's validation gain over those starting weights and that
    lower bound; ``nan`` where not compared), ``epochs``, ``fit_s``, ``seconds_per_epoch``,
    ``history`` (per epoch: ``train_loss``, ``val_loss``, ``val_pairwise_acc``, ``epoch_s``)
    and the split sizes. See the module docstring for how randomness is seeded.
    """
    if max_epochs < 1:
        raise ConfigError(f"max_epochs must be >= 1, got {max_epochs}")
    if patience is not None and patience < 1:
        raise ConfigError(f"patience must be >= 1 or None, got {patience}")
    if start_margin is not None and not start_margin >= 0:
        raise ConfigError(f"start_margin must be >= 0, got {start_margin}")
    dm = _as_datamodule(data, seed=seed, split_seed=seed if split_seed is None else split_seed,
                        batch_size=batch_size, costmodel_config=costmodel_config)
    cm = dm.costmodel_config or costmodel_config
    dm.setup()
    sizes = {f"{s}_strategies": dm.split_size(s) for s in ("train", "val", "test")}
    if not is_learned(kind):
        return _evaluate_physics(kind, dm, cm, sizes, seed, logger)
    if sizes["train_strategies"] < 2:
        raise ConfigError(f"need at least 2 training strategies, got "
                          f"{sizes['train_strategies']}")
    hparams, init_sd = _initial_weights(kind, init_state, hparams)
    module, tracker, fit_s = _fit(kind, dm, hparams=hparams, init_sd=init_sd, freeze=freeze,
                                  seed=seed, max_epochs=max_epochs, patience=patience,
                                  logger=logger, enable_progress_bar=enable_progress_bar,
                                  gradient_clip_val=gradient_clip_val, start_margin=start_margin)
    sim = Simulator.from_module(module, cm, physics=dm.physics)
    test = evaluate_simulator(sim, dm, "test")
    epochs = len(tracker.history["train_loss"])
    out = _metrics(test, sizes)
    out.update(
        kind=kind,
        seed=seed,
        epochs=epochs,
        best_epoch=tracker.best_epoch,
        best_val_pairwise_acc=tracker.best if tracker.best_state is not None else float("nan"),
        val_gain=tracker.gain[0] if tracker.gain else float("nan"),
        val_gain_low=tracker.gain[1] if tracker.gain else float("nan"),
        fit_s=fit_s,
        seconds_per_epoch=fit_s / max(epochs, 1),
        history=copy.deepcopy(tracker.history),
    )
    if logger is not None:
        logger.log_metrics(_loggable(out))
        logger.save()
    return sim, out


def _evaluate_physics(kind: str, dm: TrialDataModule, cm: CostModelConfig | None,
                      sizes: Mapping[str, int], seed: int, logger: Any
                      ) -> tuple[Simulator, dict[str, Any]]:
    """``train_simulator`` for the analytical model or the step simulator: nothing to train,
    evaluated alike."""
    sim = Simulator(kind, costmodel_config=cm, physics=dm.physics)
    test = evaluate_simulator(sim, dm, "test")
    out = _metrics(test, sizes)
    out.update(kind=kind, seed=seed, epochs=0, best_epoch=-1,
               best_val_pairwise_acc=evaluate_simulator(sim, dm, "val")["pairwise_accuracy"],
               fit_s=0.0, seconds_per_epoch=0.0, history={})
    if logger is not None:
        logger.log_metrics(_loggable(out))
    return sim, out


def _initial_weights(kind: str, init_state: Simulator | Mapping[str, Tensor] | None,
                     hparams: Mapping[str, Any] | None
                     ) -> tuple[Mapping[str, Any] | None, Mapping[str, Tensor] | None]:
    """``(hparams, state_dict)`` to start from: a simulator's own, a given state_dict, or none."""
    if isinstance(init_state, Simulator):
        if init_state.kind != kind:
            raise ConfigError(f"init_state is a {init_state.kind} simulator, cannot warm-start "
                              f"a {kind} ranker")
        return (init_state.config()["hparams"] if hparams is None else hparams,
                init_state.state_dict())
    return hparams, init_state


def _fit(kind: str, dm: TrialDataModule, *, hparams: Mapping[str, Any] | None,
         init_sd: Mapping[str, Tensor] | None, freeze: str | Sequence[str] | None, seed: int,
         max_epochs: int, patience: int | None, logger: Any, enable_progress_bar: bool,
         gradient_clip_val: float, start_margin: float | None = None
         ) -> tuple[RankerModule, Any, float]:
    """Build the ranker (seeded), fit it on ``dm`` with early stopping on the validation
    pairwise accuracy; ``(module at its best epoch, in eval mode; the tracker; fit seconds)``."""
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping

    from autosync_transfer.rankers.modules import build_ranker

    has_val = dm.split_size("val") > 0
    with _quiet_deterministic_cpu(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_ranker(kind, hparams)
        if init_sd is not None:
            try:
                module.load_state_dict(dict(init_sd), strict=True)
            except RuntimeError as e:
                raise ConfigError(f"init_state does not fit the {kind} ranker: "
                                  f"{str(e).strip().splitlines()[0]}") from e
        else:
            module.set_feature_stats(dm.feature_stats("train"))
        if freeze is not None:
            _apply_freeze(module, freeze)
        tracker = _callbacks()
        if has_val and (init_sd is not None or module.starts_ranked):
            # the weights it starts from rank already (the simulator's prior, a source
            # ranker): they are a candidate like every epoch's, so training never returns a
            # ranker that validates worse than where it started
            tracker.consider_initial(module, dm)
        callbacks: list[Any] = [tracker]
        if has_val and patience is not None:
            callbacks.append(EarlyStopping(monitor="val_pairwise_acc", mode="max",
                                           patience=patience, check_finite=False))
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            deterministic=True,
            gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm="norm",
            logger=logger if logger is not None else False,
            enable_checkpointing=False,
            enable_progress_bar=enable_progress_bar,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=1.0 if has_val else 0,
            log_every_n_steps=1,
            callbacks=callbacks,
        )
        t0 = time.perf_counter()
        trainer.fit(module, datamodule=dm)
        _gated_best(module, tracker, dm, seed, start_margin)
        fit_s = time.perf_counter() - t0
    if tracker.best_state is not None:
        module.load_state_dict(tracker.best_state)
    module.eval()
    for p in module.parameters():
        p.requires_grad_(True)
    return module, tracker, fit_s


def _metrics(test: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {f"test_{k}": test[k] for k in
                           ("pairwise_accuracy", "kendall_tau", "top1", "regret")}
    out["test_per_domain"] = test["per_domain"]
    out.update(sizes)
    return out


def _loggable(out: Mapping[str, Any]) -> dict[str, float]:
    """The scalar, finite metrics of ``out`` (for a logger)."""
    keys = ("test_pairwise_accuracy", "test_kendall_tau", "test_top1", "test_regret",
            "best_val_pairwise_acc", "best_epoch", "val_gain", "val_gain_low", "epochs", "fit_s",
            "seconds_per_epoch")
    return {k: float(out[k]) for k in keys if k in out and math.isfinite(float(out[k]))}
