"""The transfer routines: zero-shot, few-shot fine-tuning, multi-source, and from scratch.

* :class:`ZeroShot`: the source simulator scores target strategies as is (the features describe
  the target's model and cluster, so nothing needs retraining).
* :class:`FineTune`: start from the source's weights and train on the N target shots, either every
  parameter with an L2 penalty toward the source weights (``mode="full"``) or only the ranker's
  ``head`` (``mode="head"``, ``train_simulator(freeze="body")``).
* :class:`MultiSource`: pretrain one simulator on every available domain except the target, then
  fine-tune it on the shots like :class:`FineTune`.
* :class:`FromScratch`: a new simulator trained on the same N shots only: the control every
  adapted simulator is compared with.
* :class:`Guarded`: the source fine-tuned, or a new residual ranker on the target's physics
  where it orders the held-out shots better with confidence (the source's learned part is
  dropped when it hurts).

Epochs are chosen on the shots alone (:func:`~autosync_transfer.adapt.training.fit_on_shots`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from autosync_transfer.adapt.base import Adapted, Adapter, check_source
from autosync_transfer.adapt.training import (ShotTraining, finetune_full, fit_on_shots,
                                              paired_gain, shot_margin)
from autosync_transfer.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    import pandas

    from autosync_transfer.adapt.data import ShotDataModule, TargetData
    from autosync_transfer.rankers.simulator import Simulator

__all__ = ["ZeroShot", "FineTune", "MultiSource", "FromScratch", "Guarded", "ADAPTERS",
           "FINETUNE_MODES", "DEFAULT_KIND"]

log = logging.getLogger(__name__)

#: ``FineTune`` modes: every parameter (with L2-SP) or only the head
FINETUNE_MODES: tuple[str, ...] = ("full", "head")
#: ranker kind trained when the source gives none (it is the analytical cost model)
DEFAULT_KIND = "rnn"
#: the ranker ``guarded`` trains afresh on the target's physics when the source does not help
PHYSICS_START_KIND = "residual"


class ZeroShot(Adapter):
    """The source simulator, unchanged."""

    name: ClassVar[str] = "zero-shot"

    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        return Adapted(check_source(source, self.name), self.name, 0, {"epochs": 0})


class FineTune(Adapter):
    """Few-shot fine-tuning of the source simulator on the target shots.

    ``mode="full"``: every parameter, loss + ``l2sp * ||w - w_source||^2``, Adam with learning
    rate ``lr`` (default: the source's); ``mode="head"``: only the ``head``, with the source's
    optimizer settings. ``training``: epochs, validation / cross-validation
    (:class:`~autosync_transfer.adapt.training.ShotTraining`). No shots: the source as is.
    ``held_out``: also record the shots' out-of-fold scores (:attr:`Adapted.held_out`: the
    fold trainings that judged a replaced source, else the source's own scores; without a
    judged source, the folds are trained once more for them).
    """

    name: ClassVar[str] = "finetune"

    def __init__(self, mode: str = "full", *, l2sp: float = 0.01, lr: float | None = None,
                 training: ShotTraining | None = None, held_out: bool = False) -> None:
        if mode not in FINETUNE_MODES:
            raise ConfigError(f"fine-tuning mode must be one of {', '.join(FINETUNE_MODES)}, "
                              f"got {mode!r}")
        if l2sp < 0:
            raise ConfigError(f"l2sp must be >= 0, got {l2sp}")
        if lr is not None and lr <= 0:
            raise ConfigError(f"lr must be > 0, got {lr}")
        self.mode = mode
        self.l2sp = float(l2sp)
        self.lr = lr
        self.training = training or ShotTraining()
        self.held_out = bool(held_out)

    @property
    def method(self) -> str:
        return self.name if self.mode == "full" else f"{self.name}-head"

    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        src = check_source(source, self.method, learned=True)
        if len(shots) == 0:
            return Adapted(src, self.method, 0, {"epochs": 0, "mode": self.mode})
        if len(shots) < 2:
            raise ConfigError(f"fine-tuning needs at least 2 target trials, got {len(shots)} "
                              f"(use shots=0 for zero-shot)")
        train = self._train_fn(src)
        held_out: dict[str, tuple[int, float]] | None = {} if self.held_out else None
        sim, details = fit_on_shots(train, shots, self.training, seed=seed,
                                    costmodel_config=src.costmodel_config, source=src,
                                    held_out=held_out)
        details = {"mode": self.mode, **details}
        if self.mode == "full":
            details["l2sp"] = self.l2sp
        return Adapted(sim, self.method, len(shots), details, held_out=held_out)

    def _train_fn(self, src: Simulator) -> Any:
        from autosync_transfer.rankers.simulator import train_simulator

        def full(dm: ShotDataModule, max_epochs: int, patience: int | None, seed: int
                 ) -> tuple[Simulator, dict[str, Any]]:
            return finetune_full(src, dm, max_epochs=max_epochs, patience=patience, seed=seed,
                                 l2sp=self.l2sp, lr=self.lr)

        def head(dm: ShotDataModule, max_epochs: int, patience: int | None, seed: int
                 ) -> tuple[Simulator, dict[str, Any]]:
            return train_simulator(src.kind, dm, seed=seed, max_epochs=max_epochs,
                                   patience=patience, init_state=src, freeze="body",
                                   start_margin=self.training.start_margin)

        return full if self.mode == "full" else head


class FromScratch(Adapter):
    """A new ``kind`` simulator (default: the source's kind, or :data:`DEFAULT_KIND` when the
    source is analytical or absent) trained on the shots alone, with ``hparams`` (default: the
    ranker's defaults). Fewer than 2 shots: nothing to train (``simulator=None``).
    ``held_out``: also record the held-out shots' scores (:attr:`Adapted.held_out`; this
    trains every fold once more, for the chosen epochs)."""

    name: ClassVar[str] = "from-scratch"
    uses_source: ClassVar[bool] = False

    def __init__(self, kind: str | None = None, *, hparams: Mapping[str, Any] | None = None,
                 training: ShotTraining | None = None, held_out: bool = False) -> None:
        self.kind = kind
        self.hparams = dict(hparams) if hparams is not None else None
        self.training = training or ShotTraining()
        self.held_out = bool(held_out)

    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        from autosync_transfer.rankers.simulator import train_simulator

        kind = self.kind or _learned_kind(source)
        if len(shots) < 2:
            return Adapted(None, self.name, len(shots),
                           {"kind": kind, "reason": "fewer than 2 target trials"})
        cm = source.costmodel_config if source is not None else None

        def train(dm: ShotDataModule, max_epochs: int, patience: int | None, seed: int
                  ) -> tuple[Simulator, dict[str, Any]]:
            return train_simulator(kind, dm, hparams=self.hparams, seed=seed,
                                   max_epochs=max_epochs, patience=patience,
                                   start_margin=self.training.start_margin)

        held_out: dict[str, tuple[int, float]] | None = {} if self.held_out else None
        sim, details = fit_on_shots(train, shots, self.training, seed=seed, costmodel_config=cm,
                                    held_out=held_out)
        return Adapted(sim, self.name, len(shots), {"kind": kind, **details}, held_out=held_out)


class MultiSource(Adapter):
    """Pretrain a ``kind`` simulator (default: the source's kind) on the trials of every domain
    in ``pretrain_trials`` except the target (domains not in the catalog, or measured on another
    cluster, are left out), then fine-tune it on the shots with ``finetune`` (default:
    ``FineTune("full")`` with the same ``training``). Pretraining uses ``train_simulator`` with a
    70/15/15 split per domain, ``pretrain_epochs`` and early stopping."""

    name: ClassVar[str] = "multi-source"

    def __init__(self, pretrain_trials: pandas.DataFrame, *, kind: str | None = None,
                 hparams: Mapping[str, Any] | None = None, pretrain_epochs: int = 100,
                 patience: int | None = 15, finetune: FineTune | None = None,
                 training: ShotTraining | None = None) -> None:
        if pretrain_epochs < 1:
            raise ConfigError(f"pretrain_epochs must be >= 1, got {pretrain_epochs}")
        self.pretrain_trials = pretrain_trials
        self.kind = kind
        self.hparams = dict(hparams) if hparams is not None else None
        self.pretrain_epochs = pretrain_epochs
        self.patience = patience
        self.finetune = finetune or FineTune("full", training=training)
        # (target, seed, kind) -> pretrained simulator and its training output: a learning
        # curve fine-tunes the same pretrained simulator for every N
        self._pretrained: dict[tuple[str, int, str], tuple[Simulator, dict[str, Any]]] = {}

    def __repr__(self) -> str:
        return (f"MultiSource({len(self.pretrain_trials)} pretrain trials, kind={self.kind!r}, "
                f"pretrain_epochs={self.pretrain_epochs}, finetune={self.finetune!r})")

    def pretrain_domains(self, target: str) -> list[Any]:
        """The catalog domains of ``pretrain_trials`` other than ``target`` whose trials were
        measured on the catalog cluster (sorted by name)."""
        from autosync_transfer.domains.catalog import get_domain

        df = self.pretrain_trials
        if not len(df):
            return []
        if "status" in df.columns:
            df = df[df["status"] == "ok"]
        out = []
        for name in sorted({str(n) for n in df["domain"]} - {target}):
            try:
                dom = get_domain(name)
            except UnknownNameError:
                log.info("multi-source: leaving out %s (not a catalog domain)", name)
                continue
            fps = {str(f) for f in df.loc[df["domain"] == name, "cluster_fingerprint"] if f}
            if fps and fps != {dom.cluster.fingerprint}:
                log.info("multi-source: leaving out %s (measured on another cluster)", name)
                continue
            out.append(dom)
        return out

    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        from autosync_transfer.dataset.loader import strategy_table
        from autosync_transfer.rankers.datamodule import TrialDataModule
        from autosync_transfer.rankers.simulator import train_simulator

        target = shots.domain.name
        domains = self.pretrain_domains(target)
        if not domains:
            raise ConfigError(f"multi-source needs trials of at least one domain other than "
                              f"{target!r} to pretrain on, found none")
        kind = self.kind or _learned_kind(source)
        names = [d.name for d in domains]
        key = (target, int(seed), kind)
        if key not in self._pretrained:
            df = self.pretrain_trials
            df = df[df["domain"].isin(names)].reset_index(drop=True)
            cm = source.costmodel_config if source is not None else None
            dm = TrialDataModule(strategy_table(df), split_seed=seed, seed=seed,
                                 domains={d.name: d for d in domains}, costmodel_config=cm)
            self._pretrained[key] = train_simulator(
                kind, dm, hparams=self.hparams, seed=seed, max_epochs=self.pretrain_epochs,
                patience=self.patience)
        pretrained, out = self._pretrained[key]
        adapted = self.finetune.fit(pretrained, shots, seed=seed)
        details = {"pretrain_domains": names, "pretrain_epochs": int(out["epochs"]),
                   "pretrain_test_pairwise_acc": out.get("test_pairwise_accuracy"),
                   "kind": kind, **adapted.details}
        return Adapted(adapted.simulator, self.name, len(shots), details,
                       held_out=adapted.held_out)


class Guarded(Adapter):
    """Fine-tuning guarded against negative transfer: the source's learned part is kept only
    when the target's own shots say it helps.

    Two simulators are trained on the shots with the same seed, hence the same validation
    strategies or folds (:func:`~autosync_transfer.adapt.training.fit_on_shots`): the source
    fine-tuned as by :class:`FineTune`, and a new ``residual`` ranker (the step-time simulator
    with the target's own physics plus a correction that starts at zero; the source's
    hyper-parameters when it is a residual ranker itself). The residual ranker replaces the
    fine-tuned source only where it orders the shots out of fold (each line's folds trained
    anew without them for its chosen epochs; a kept source scores them as is) better with
    confidence: paired on the same pairs, the one-sided 95 % lower
    bound of its gain above 0 (:func:`~autosync_transfer.adapt.training.paired_gain`, reported
    as ``physics_gain`` / ``physics_gain_low``); otherwise the source is kept. ``shots_pairwise``
    reports both lines' validation (or cross-validation) pairwise accuracy. Fewer than
    ``min_shots`` shots (too few pairs to judge): plain fine-tuning, or the source as is with no
    shots.
    """

    name: ClassVar[str] = "guarded"

    def __init__(self, finetune: FineTune | None = None, *, min_shots: int = 5,
                 training: ShotTraining | None = None) -> None:
        if min_shots < 2:
            raise ConfigError(f"min_shots must be >= 2, got {min_shots}")
        finetune = finetune or FineTune("full", training=training)
        # the fine-tuned line is judged on its out-of-fold scores: it records them
        self.finetune = finetune if finetune.held_out else FineTune(
            finetune.mode, l2sp=finetune.l2sp, lr=finetune.lr, training=finetune.training,
            held_out=True)
        self.min_shots = int(min_shots)

    def fit(self, source: Simulator | None, shots: TargetData, *, seed: int = 0) -> Adapted:
        src = check_source(source, self.name, learned=True)
        tuned = self.finetune.fit(src, shots, seed=seed)
        if len(shots) < self.min_shots:
            return Adapted(tuned.simulator, self.name, len(shots),
                           {"start": "source", "reason": f"fewer than {self.min_shots} shots",
                            **tuned.details}, held_out=tuned.held_out)
        hparams = src.hparams if src.kind == PHYSICS_START_KIND else None
        training = self.finetune.training
        fresh = FromScratch(PHYSICS_START_KIND, hparams=hparams, training=training,
                            held_out=True).fit(src, shots, seed=seed)
        judged = {"source": _shot_score(tuned.details), "physics": _shot_score(fresh.details)}
        gain, low = paired_gain(fresh.held_out or {}, tuned.held_out or {}, shots,
                                margin=shot_margin(training, src), seed=seed)
        verdict = {"shots_pairwise": judged, "physics_gain": _finite_or_none(gain),
                   "physics_gain_low": _finite_or_none(low)}
        if fresh.simulator is not None and low > 0:
            return Adapted(fresh.simulator, self.name, len(shots),
                           {"start": "physics", **verdict, **fresh.details},
                           held_out=fresh.held_out)
        return Adapted(tuned.simulator, self.name, len(shots),
                       {"start": "source", **verdict, **tuned.details}, held_out=tuned.held_out)


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _shot_score(details: Mapping[str, Any]) -> float | None:
    """The validation (or cross-validation) pairwise accuracy ``fit_on_shots`` reported."""
    for key in ("val_pairwise_acc", "cv_pairwise_acc"):
        value = details.get(key)
        if value is not None:
            return float(value)
    return None


def _learned_kind(source: Simulator | None) -> str:
    if source is None or not source.learned:
        return DEFAULT_KIND
    return source.kind


#: method name -> adapter class
ADAPTERS: dict[str, type[Adapter]] = {
    ZeroShot.name: ZeroShot, FineTune.name: FineTune, MultiSource.name: MultiSource,
    FromScratch.name: FromScratch, Guarded.name: Guarded,
}
