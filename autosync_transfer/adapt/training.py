"""Training on a few target shots: choosing the number of epochs, and full fine-tuning with an
L2 penalty toward the source weights.

:func:`fit_on_shots` wraps any training function (``train_simulator`` for from-scratch and
head-only fine-tuning, :func:`finetune_full` for full fine-tuning) with the epoch selection of
:class:`ShotTraining`:

* ``N >= cv_below`` (60): a validation set of ``val_fraction`` of the shots (at least 2) is carved
  out; training stops early on its pairwise accuracy and keeps the best epoch's weights (with
  ``refit``, that many epochs are then trained again on all N shots, as the search does: there a
  measured strategy left out of training is information thrown away);
* ``4 <= N < cv_below``: k-fold cross-validation (``k = min(folds, N // 2)``, so every fold holds
  at least 2 strategies to rank) with ``max_epochs`` and no early stopping; the epoch count with
  the best mean validation pairwise accuracy is then trained on all N shots;
* ``2 <= N < 4``: too few to validate; ``few_epochs`` epochs on all shots.

The validation strategies and folds come from a generator seeded by ``seed``. Below 60 shots a
single validation split is a handful of strategies (4 of 20), whose few pairs choose the epochs,
and whether to keep the source, noisily; cross-validation ranks every shot once, at ``k`` times
the training (``benchmarks/transfer_table.py --cv-below`` compares the two; see
``benchmarks/results/transfer_table.txt``).

:func:`finetune_full` trains the source's network with a Lightning ``Trainer`` on
:class:`L2SPFineTuning`, which wraps the ranker (``train_simulator`` trains the ranker module
itself and has no way to add a term to the loss): the ranker's own loss
(:func:`~autosync_transfer.rankers.losses.combined_loss` with the ranker's hyper-parameters) plus
``l2sp * sum ||w - w_source||^2`` over every parameter (the "L2-SP" regularizer, which keeps the
fine-tuned weights near the source's instead of near zero: no weight decay), Adam, the same
learning-rate schedule, gradient clipping and early stopping as ``train_simulator``, the input
statistics of the source kept.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L  # already imported with the rankers' data module
import numpy as np

from autosync_transfer.adapt.data import ShotDataModule, TargetData
from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.simulator import quiet_lightning

if TYPE_CHECKING:
    from autosync_transfer.rankers.costmodel import CostModelConfig
    from autosync_transfer.rankers.simulator import Simulator

__all__ = ["ShotTraining", "TrainFn", "fit_on_shots", "paired_gain", "shot_margin", "finetune_full",
           "L2SPFineTuning"]

#: ``(datamodule, max_epochs, patience, seed) -> (simulator, train_simulator-like output)``;
#: the output has ``epochs``, ``best_epoch``, ``best_val_pairwise_acc`` and ``history``
#: (per epoch, at least ``val_pairwise_acc``)
TrainFn = Callable[[ShotDataModule, int, "int | None", int], "tuple[Simulator, dict[str, Any]]"]


@dataclass(frozen=True)
class ShotTraining:
    """How to train on N target shots (see the module docstring): at most ``max_epochs``,
    early stopping after ``patience`` epochs without improvement (``None``: never),
    ``batch_size`` strategies per batch, ``val_fraction`` of the shots for validation when
    ``N >= cv_below``, else ``folds``-fold cross-validation, ``few_epochs`` when N < 4;
    ``refit``: after a validation split has chosen the epochs, train them on all shots;
    ``start_margin``: the label gap an epoch's gain over weights that already rank counts
    (``train_simulator(start_margin=)``; ``None``: the ranker's margin)."""

    max_epochs: int = 60
    patience: int | None = 10
    batch_size: int = 32
    val_fraction: float = 0.2
    cv_below: int = 60
    folds: int = 5
    few_epochs: int = 20
    refit: bool = False
    start_margin: float | None = None

    def __post_init__(self) -> None:
        if self.start_margin is not None and not self.start_margin >= 0:
            raise ConfigError(f"start_margin must be >= 0, got {self.start_margin}")
        if self.max_epochs < 1 or self.few_epochs < 1:
            raise ConfigError(f"max_epochs and few_epochs must be >= 1, got "
                              f"max_epochs={self.max_epochs}, few_epochs={self.few_epochs}")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"patience must be >= 1 or None, got {self.patience}")
        if self.batch_size < 2:
            raise ConfigError(f"batch_size must be >= 2, got {self.batch_size}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        if self.cv_below < 4 or self.folds < 2:
            raise ConfigError(f"cv_below must be >= 4 and folds >= 2, got "
                              f"cv_below={self.cv_below}, folds={self.folds}")


def fit_on_shots(train: TrainFn, shots: TargetData, config: ShotTraining, *, seed: int,
                 costmodel_config: CostModelConfig | None = None,
                 source: Simulator | None = None,
                 held_out: dict[str, tuple[int, float]] | None = None,
                 ) -> tuple[Simulator, dict[str, Any]]:
    """Train on ``shots`` with ``train``, choosing the epochs as :class:`ShotTraining` says.
    Returns the simulator and ``details`` (``selection``, ``epochs`` and the validation score
    that chose them). Fewer than 2 shots is a :class:`ConfigError`.

    ``source``: the simulator training starts from (fine-tuning). It is then a candidate of the
    selection too, as "epoch 0": the trained simulator replaces it only where it beats
    ``source`` on the validation strategies (with a validation split: where training moved
    from its starting weights at all, ``best_epoch >= 0``) and, out of fold, ranks the shots
    better than ``source`` with 95 % confidence: each fold's shots scored by a simulator trained anew for
    the chosen epochs without them (with a validation split, on ``k`` folds drawn for the
    purpose, ``gain_folds``; with cross-validation, its own folds)
    (:func:`~autosync_transfer.rankers.metrics.pairwise_gain`, reported as ``val_gain`` /
    ``val_gain_low`` or ``cv_gain`` / ``cv_gain_low``); otherwise ``source`` itself is returned
    and ``details`` says ``kept_source: True``. A best epoch of several noisy ones, or the
    best of a mean curve, is not a gain by itself.

    ``held_out``: a dict filled with ``{strategy id: (fold, score)}``: every shot scored out of
    fold by what is returned, ``source``'s own scores where it is kept, else each fold's by a
    simulator trained anew without it for the chosen epochs (with a validation split, on
    ``k``-fold splits drawn for the purpose, so that the best epoch's weights, chosen on the
    validation strategies, are not what scores them). These fold trainings are the gate's
    where it ran, else they run only when ``held_out`` is asked for. Two
    trainings with the same ``seed`` and shots draw the same folds, so their records pair up
    (:func:`paired_gain`); the epoch count itself was chosen on the same shots, a milder
    selection. Left empty below 4 shots (nothing is held out)."""
    n = len(shots)
    if held_out is not None:
        held_out.clear()
    if n < 2:
        raise ConfigError(f"training on target trials needs at least 2 of them, got {n}")
    ids = list(shots.strategy_ids)
    rng = np.random.default_rng([int(seed), 7919])

    def module(assignment: dict[str, str]) -> ShotDataModule:
        return ShotDataModule(shots, assignment, batch_size=config.batch_size, seed=seed,
                              costmodel_config=costmodel_config)

    if n >= config.cv_below:
        n_val = min(max(2, int(round(n * config.val_fraction))), n - 2)
        val = [ids[i] for i in rng.permutation(n)[:n_val]]
        dm = module({s: "val" for s in val})
        sim, out = train(dm, config.max_epochs, config.patience, seed)
        trained = _finite(out.get("best_val_pairwise_acc"))
        details: dict[str, Any] = {
            "selection": "validation", "val_strategies": n_val, "epochs": int(out["epochs"]),
            "best_epoch": int(out["best_epoch"]), "val_pairwise_acc": trained}
        cross = _record_folds(n, config, seed)
        epochs = max(1, int(out["best_epoch"]) + 1 if int(out["best_epoch"]) >= 0
                     else int(out["epochs"]))
        folds_trained = None
        if source is not None:
            kept = _source_accuracy(source, dm)
            details["source_val_pairwise_acc"] = _finite(kept)
            as_kept = [(source, [ids[i] for i in fold]) for fold in cross]
            if int(out["best_epoch"]) < 0 or (
                    math.isfinite(kept) and (trained is None or kept >= trained)):
                # training kept its starting weights (no epoch beat them), or no epoch beat
                # the source on the validation strategies
                _record(held_out, as_kept, shots)
                return source, {**details, "kept_source": True,
                                "val_pairwise_acc": _finite(kept)}
            # the best epoch's weights were chosen on the validation strategies, so their lead
            # there is not a gain by itself (nor is one where the source's accuracy there is
            # undefined): each of k folds, trained anew for the chosen epochs without it, is
            # judged against the source out of fold
            folds_trained = _fold_trainings(train, module, ids, cross, epochs, seed)
            gain, low = _gain_over_source(folds_trained, source, shots, config, seed)
            details.update(val_gain=gain, val_gain_low=low, gain_folds=len(cross))
            if not low > 0:  # the lead is not a confident one
                _record(held_out, as_kept, shots)
                return source, {**details, "kept_source": True,
                                "val_pairwise_acc": _finite(kept)}
            details["kept_source"] = False
        if held_out is not None:
            _record(held_out, folds_trained or _fold_trainings(train, module, ids, cross,
                                                               epochs, seed), shots)
        if config.refit:
            sim, _ = train(module({}), epochs, None, seed)
            details["refit_epochs"] = epochs
        return sim, details
    if n >= 4:
        k = max(2, min(config.folds, n // 2))
        folds = np.array_split(rng.permutation(n), k)
        curves = np.full((k, config.max_epochs), math.nan)
        at_source = np.full(k, math.nan)
        for j, fold in enumerate(folds):
            dm = module({ids[i]: "val" for i in fold})
            _, out = train(dm, config.max_epochs, None, seed)
            acc = [float(a) for a in out["history"].get("val_pairwise_acc", [])]
            curves[j, : len(acc)] = acc[: config.max_epochs]
            if source is not None:
                at_source[j] = _source_accuracy(source, dm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-nan epochs
            mean = np.nanmean(curves, axis=0)
            source_cv = float(np.nanmean(at_source)) if source is not None else math.nan
        if np.all(np.isnan(mean)):
            epochs, cv = min(config.few_epochs, config.max_epochs), math.nan
        else:
            best = int(np.nanargmax(mean))
            epochs, cv = best + 1, float(mean[best])
        details = {"selection": f"{k}-fold cross-validation", "folds": k, "epochs": epochs,
                   "cv_pairwise_acc": _finite(cv)}
        if source is not None:
            details["source_cv_pairwise_acc"] = _finite(source_cv)
            kept = {**details, "epochs": 0, "kept_source": True, "cv_pairwise_acc": source_cv}
            every_fold = [(source, [ids[i] for i in fold]) for fold in folds]
            if math.isfinite(source_cv) and (not math.isfinite(cv) or source_cv >= cv):
                _record(held_out, every_fold, shots)
                return source, kept
            if math.isfinite(source_cv):
                # the epoch count was chosen as the best of a mean curve: it replaces the
                # source only where, trained anew per fold, it ranks the folds' strategies
                # better out of fold with confidence
                trained_folds = _fold_trainings(train, module, ids, folds, epochs, seed)
                gain, low = _gain_over_source(trained_folds, source, shots, config, seed)
                details.update(cv_gain=gain, cv_gain_low=low)
                if not low > 0:
                    _record(held_out, every_fold, shots)
                    return source, {**kept, "cv_gain": gain, "cv_gain_low": low}
                _record(held_out, trained_folds, shots)
            details["kept_source"] = False
        if held_out is not None and not held_out:
            # out of fold, trained for the chosen epochs (the curves' fits ran max_epochs)
            _record(held_out, _fold_trainings(train, module, ids, folds, epochs, seed), shots)
        sim, _ = train(module({}), epochs, None, seed)
        return sim, details
    epochs = min(config.few_epochs, config.max_epochs)
    sim, _ = train(module({}), epochs, None, seed)
    return sim, {"selection": "fixed epochs (too few shots to validate)", "epochs": epochs}


def _gain_over_source(candidates: list[tuple[Simulator, list[str]]], source: Simulator,
                      shots: TargetData, config: ShotTraining, seed: int
                      ) -> tuple[float, float]:
    """The validation gain of trained simulators over the ``source`` they started from and its
    one-sided lower bound (:func:`paired_gain`). ``candidates`` are ``(trained, validation
    ids)``, each judged on its own validation strategies of ``shots`` (the folds of a
    cross-validation pooled, a pair counted only within one fold); pairs whose labels differ by
    less than ``config.start_margin`` (default: the source's margin) do not count."""
    new: dict[str, tuple[int, float]] = {}
    old: dict[str, tuple[int, float]] = {}
    _record(new, candidates, shots)
    _record(old, [(source, held) for _, held in candidates], shots)
    return paired_gain(new, old, shots, margin=shot_margin(config, source), seed=seed)


def shot_margin(config: ShotTraining, source: Simulator | None) -> float:
    """The label gap a pair of shots needs to count in a gain: ``config.start_margin``, else the
    ``source``'s loss margin (0 without one)."""
    if config.start_margin is not None:
        return float(config.start_margin)
    hparams = (source.config().get("hparams") or {}) if source is not None else {}
    return float(hparams.get("margin", 0.0) or 0.0)


def paired_gain(new: dict[str, tuple[int, float]], old: dict[str, tuple[int, float]],
                shots: TargetData, *, margin: float, seed: int) -> tuple[float, float]:
    """How much better the held-out scores ``new`` order ``shots`` than ``old`` (records of
    :func:`fit_on_shots`' ``held_out``), on the strategies both scored in the same fold, a pair
    counted only within one fold: ``(gain, low)`` with ``low`` the one-sided lower bound at
    :data:`~autosync_transfer.rankers.simulator.START_CONFIDENCE`
    (:func:`~autosync_transfer.rankers.metrics.pairwise_gain`: paired on the same pairs,
    bootstrap over strategies); ``(nan, nan)`` where no pair counts."""
    from autosync_transfer.rankers import metrics
    from autosync_transfer.rankers.simulator import START_CONFIDENCE

    both = [s for s in shots.strategy_ids if s in new and s in old and new[s][0] == old[s][0]]
    if len(both) < 2:
        return math.nan, math.nan
    y = np.asarray(shots.subset(both).runtimes_s, dtype=np.float64)
    return metrics.pairwise_gain(
        np.array([new[s][1] for s in both]), np.array([old[s][1] for s in both]), y,
        np.array([new[s][0] for s in both], dtype=np.int64), margin=margin,
        confidence=START_CONFIDENCE, seed=seed)


def _record_folds(n: int, config: ShotTraining, seed: int) -> list[np.ndarray]:
    """The ``k``-fold split of ``n`` shots on which a validation split's ``held_out`` record is
    scored (a generator of its own: the validation strategies chose the best epoch)."""
    k = max(2, min(config.folds, n // 2))
    return np.array_split(np.random.default_rng([int(seed), 7919, 1]).permutation(n), k)


def _fold_trainings(train: TrainFn, module: Callable[[dict[str, str]], ShotDataModule],
                    ids: list[str], folds: list[np.ndarray], epochs: int, seed: int
                    ) -> list[tuple[Simulator, list[str]]]:
    """Each fold's simulator, trained for ``epochs`` on the other shots, and the fold's ids.
    The fold is left out of training and of validation alike (the ``test`` split): a training
    that keeps its best validation epoch must not choose it on the strategies it is judged on."""
    out = []
    for fold in folds:
        held = [ids[i] for i in fold]
        out.append((train(module({s: "test" for s in held}), epochs, None, seed)[0], held))
    return out


def _record(held_out: dict[str, tuple[int, float]] | None,
            candidates: list[tuple[Simulator, list[str]]], shots: TargetData) -> None:
    """Fill ``held_out`` (when asked for) with each candidate's scores of its own strategies of
    ``shots``, the candidate's index as their fold."""
    if held_out is None:
        return
    for j, (sim, held_ids) in enumerate(candidates):
        held = shots.subset(held_ids)
        if len(held) == 0:
            continue
        if held.launcher is not None:
            sim = sim.with_launcher(held.launcher)
        scores = np.asarray(sim.score(list(held.strategies), held.domain), dtype=np.float64)
        held_out.update({s: (j, float(v)) for s, v in zip(held.strategy_ids, scores)})


def _source_accuracy(source: Simulator, dm: ShotDataModule) -> float:
    """``source``'s mean per-domain pairwise accuracy on ``dm``'s validation split, untrained,
    on the pairs its loss margin counts: as a trained epoch's ``val_pairwise_acc``, which it is
    weighed against."""
    from autosync_transfer.rankers import metrics

    dm.setup()
    module = source.module
    margin = float((getattr(module, "hparams", None) or {}).get("margin", 0.0) or 0.0)
    return _val_accuracy(module, dm, metrics, margin=margin)


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def finetune_full(
    source: Simulator,
    dm: ShotDataModule,
    *,
    max_epochs: int,
    patience: int | None,
    seed: int,
    l2sp: float,
    lr: float | None = None,
    gradient_clip_val: float = 0.25,
) -> tuple[Simulator, dict[str, Any]]:
    """Fine-tune every parameter of ``source``'s network on ``dm``'s train split with a Lightning
    ``Trainer`` (see the module docstring); with a validation split, keep the weights of the
    best validation pairwise accuracy and stop after ``patience`` epochs without improvement.
    ``lr``: Adam's learning rate (default: the source's). Returns the simulator and
    ``{"epochs", "best_epoch", "best_val_pairwise_acc", "fit_s", "history"}`` (history:
    ``train_loss``, ``val_pairwise_acc``, ``epoch_s`` per epoch)."""
    import torch
    from lightning.pytorch.callbacks import EarlyStopping

    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import Simulator

    if l2sp < 0:
        raise ConfigError(f"l2sp must be >= 0, got {l2sp}")
    if lr is not None and lr <= 0:
        raise ConfigError(f"lr must be > 0, got {lr}")
    dm.setup()
    if dm.split_size("train") < 2:
        raise ConfigError(f"need at least 2 training strategies, got {dm.split_size('train')}")
    hp = dict(source.config()["hparams"])
    has_val = dm.split_size("val") > 0
    tracker = _BestAndHistory()
    callbacks: list[Any] = [tracker]
    if has_val and patience is not None:
        callbacks.append(EarlyStopping(monitor="val_pairwise_acc", mode="max", patience=patience,
                                       check_finite=False))
    t0 = time.perf_counter()
    with quiet_lightning(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ranker = build_ranker(source.kind, hp)
        ranker.load_state_dict(source.state_dict(), strict=True)
        task = L2SPFineTuning(ranker, l2sp=l2sp, lr=float(lr if lr is not None else hp["lr"]))
        trainer = L.Trainer(
            accelerator="cpu", devices=1, max_epochs=max_epochs,
            gradient_clip_val=gradient_clip_val if gradient_clip_val > 0 else None,
            gradient_clip_algorithm="norm", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            limit_val_batches=1.0 if has_val else 0, callbacks=callbacks)
        trainer.fit(task, datamodule=dm)
    if tracker.best_state is not None:
        ranker.load_state_dict(tracker.best_state)
    ranker.eval()
    sim = Simulator.from_module(ranker, source.costmodel_config, physics=dm.physics)
    return sim, {"epochs": len(tracker.history["train_loss"]), "best_epoch": tracker.best_epoch,
                 "best_val_pairwise_acc": tracker.best if tracker.best_state is not None
                 else math.nan, "fit_s": time.perf_counter() - t0, "history": tracker.history}


class L2SPFineTuning(L.LightningModule):
    """Fine-tuning of a ranker (a :class:`~autosync_transfer.rankers.modules.RankerModule`, held
    as ``ranker``) with the ranker's own loss plus ``l2sp * sum ||w - w_start||^2`` over every
    parameter (the weights it starts from are the anchor), Adam at ``lr`` without weight decay
    and the ranker's learning-rate schedule. Validation records the mean per-domain pairwise
    accuracy (logged as ``val_pairwise_acc``; the exact value in :attr:`val_pairwise_acc`) and
    training the mean loss of the epoch (:attr:`train_loss`)."""

    def __init__(self, ranker: Any, *, l2sp: float, lr: float) -> None:
        super().__init__()
        self.ranker = ranker
        self.l2sp = float(l2sp)
        self.lr = float(lr)
        self.anchor = [p.detach().clone() for p in ranker.parameters()]
        self.val_pairwise_acc = math.nan
        self._loss_sum, self._loss_count = 0.0, 0
        self._val_outputs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    @property
    def train_loss(self) -> float:
        """Mean loss (without the penalty) over the strategies of this epoch's training."""
        return self._loss_sum / max(self._loss_count, 1)

    def forward(self, batch: dict[str, Any]) -> Any:  # type: ignore[override]
        return self.ranker(batch)

    def on_train_epoch_start(self) -> None:
        self._loss_sum, self._loss_count = 0.0, 0
        self.val_pairwise_acc = math.nan

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        from autosync_transfer.rankers import losses

        hp = self.ranker.hparams
        scores = self.ranker(batch)
        loss = losses.combined_loss(
            scores, batch["runtime"], domain_ids=batch["domain_id"],
            margin=float(hp["margin"]), listwise_weight=float(hp["listwise_weight"]),
            temperature=float(hp["temperature"]))
        penalty = sum(((p - a) ** 2).sum() for p, a in zip(self.ranker.parameters(), self.anchor))
        self._loss_sum += float(loss.detach()) * scores.numel()
        self._loss_count += scores.numel()
        return loss + self.l2sp * penalty

    def on_validation_epoch_start(self) -> None:
        self._val_outputs = []

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._val_outputs.append((self.ranker(batch).double().numpy(),
                                  batch["runtime"].double().numpy(), batch["domain_id"].numpy()))

    def on_validation_epoch_end(self) -> None:
        from autosync_transfer.rankers import metrics

        if not self._val_outputs:
            return
        o, y, d = (np.concatenate(t) for t in zip(*self._val_outputs))
        self._val_outputs = []
        self.val_pairwise_acc = float(metrics.per_domain(
            metrics.pairwise_accuracy, o, y, d, margin=float(self.ranker.hparams["margin"])))
        self.log("val_pairwise_acc", self.val_pairwise_acc)

    def configure_optimizers(self) -> Any:
        import torch

        hp = self.ranker.hparams
        opt = torch.optim.Adam(self.ranker.parameters(), lr=self.lr, weight_decay=0.0)
        max_epochs = int(self.trainer.max_epochs or 1)
        milestones = sorted({max(1, int(round(f * max_epochs))) for f in hp["lr_milestones"]})
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones,
                                                     gamma=float(hp["lr_gamma"]))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


class _BestAndHistory(L.Callback):
    """Per epoch of an :class:`L2SPFineTuning` fit: the history (``train_loss``,
    ``val_pairwise_acc``, ``epoch_s``) and the weights of the best validation accuracy."""

    def __init__(self) -> None:
        self.best, self.best_epoch = -math.inf, -1
        self.best_state: dict[str, Any] | None = None
        self.history: dict[str, list[float]] = {"train_loss": [], "val_pairwise_acc": [],
                                                "epoch_s": []}
        self._t0 = 0.0

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        acc = pl_module.val_pairwise_acc
        self.history["train_loss"].append(pl_module.train_loss)
        self.history["val_pairwise_acc"].append(acc)
        self.history["epoch_s"].append(time.perf_counter() - self._t0)
        if math.isfinite(acc) and acc > self.best:
            self.best, self.best_epoch = acc, int(trainer.current_epoch)
            self.best_state = {k: v.detach().clone()
                               for k, v in pl_module.ranker.state_dict().items()}


def _val_accuracy(module: Any, dm: ShotDataModule, metrics: Any, margin: float = 0.0) -> float:
    """Mean per-domain pairwise accuracy of ``module`` on ``dm``'s validation split (on the pairs
    whose labels differ by at least ``margin``)."""
    import torch

    module.eval()
    outs: list[tuple[Any, Any, Any]] = []
    with torch.inference_mode():
        for batch in dm.val_dataloader():
            outs.append((module(batch).double().numpy(), batch["runtime"].double().numpy(),
                         batch["domain_id"].numpy()))
    if not outs:
        return math.nan
    o, y, d = (np.concatenate(t) for t in zip(*outs))
    return float(metrics.per_domain(metrics.pairwise_accuracy, o, y, d, margin=margin))
