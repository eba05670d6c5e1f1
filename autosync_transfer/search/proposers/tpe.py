"""TPE search: Optuna's TPE sampler over the knob encoding of the space
(:mod:`autosync_transfer.strategies.knobs`), told every measured runtime.

The study lives in an Optuna journal beside the store (``<store>.tpe.journal``, one study per run,
named after the run; written under an exclusive ``flock`` on the journal itself, a torn last line
cut off at the start, a complete malformed line an error naming it), so that a killed search resumes from the study itself: trials it had asked
for but never measured are marked failed, and one measured but not yet told is told from the
store. A store written before the journal, with TPE's knob assignments in the side file
``<store>.knobs.jsonl``, is read once into a new study.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync_transfer._files import FileLock, complete_lines, cut_torn_tail
from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.search.proposers.base import Proposer, uniform_knobs
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.dataset.store import TrialRecord, TrialStore
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.summary import SearchProgress

__all__ = ["TPEProposer", "journal_path", "legacy_knobs_path"]

#: user attribute of a study's trial: the id of the strategy it was measured as
STRATEGY_ID = "strategy_id"
#: the journal, as errors name it
JOURNAL = "TPE journal"


def journal_path(store_path: str | Path) -> Path:
    """The Optuna journal of the TPE runs stored in ``store_path``."""
    return Path(f"{store_path}.tpe.journal")


def legacy_knobs_path(store_path: str | Path) -> Path:
    """The side file of TPE's knob assignments of stores written before the journal."""
    return Path(f"{store_path}.knobs.jsonl")


class TPEProposer(Proposer):
    """Optuna's TPE over the knob encoding: ``n_startup_trials`` random trials first, seeded by
    the run's seed; :attr:`study` and :attr:`pending` (the asked trials not told yet, by strategy
    id) are set by :meth:`bind`."""

    method = "tpe"

    def __init__(self, domain: Domain, config: SearchConfig, *, n_startup_trials: int = 10,
                 tries_per_pick: int = 50) -> None:
        super().__init__(domain, config)
        self.n_startup_trials = n_startup_trials
        #: TPE proposals per pick before the rest of a round is drawn uniformly over the knobs
        self.tries_per_pick = tries_per_pick
        self.study: Any = None
        self.pending: dict[str, Any] = {}
        self._values: dict[str, float] = {}  # content key -> the value TPE was told
        self._dists: dict[str, Any] = {}

    # -- the study ------------------------------------------------------------------------------
    def bind(self, store: TrialStore, run: str, progress: SearchProgress,
             strategies: Mapping[str, Strategy]) -> None:
        """Open run ``run``'s study in the journal beside ``store`` (created, from the legacy side
        file when there is one, if the journal has none) and bring it in step with the store."""
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        from autosync_transfer.strategies.knobs import KNOBS

        super().bind(store, run, progress, strategies)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        def choices(k: Any) -> list[Any]:
            return ["none"] if self.lossless and k.name == "compressor" else list(k.choices)

        self._dists = {
            k.name: (optuna.distributions.CategoricalDistribution(choices(k)) if k.categorical
                     else optuna.distributions.IntDistribution(k.low, k.high)) for k in KNOBS}
        path = journal_path(store.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path, JOURNAL)  # the journal's own flock, like the store's
        with lock as fd:
            _check_journal(fd, path)
        storage = JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
        known = any(s.study_name == run for s in storage.get_all_studies())
        sampler = optuna.samplers.TPESampler(seed=self.seed,
                                             n_startup_trials=self.n_startup_trials)
        self.study = optuna.create_study(storage=storage, study_name=run, direction="minimize",
                                         sampler=sampler, load_if_exists=True)
        self.pending = {}
        self._values = {}
        if known:
            self._resume(progress)
        else:
            self._replay_legacy(progress)

    def _resume(self, progress: SearchProgress) -> None:
        """Finish the trials a killed search left running (told from the store when it measured
        them, else failed) and learn the values TPE was told."""
        from optuna.trial import TrialState

        from autosync_transfer.strategies.knobs import decode

        measured = {r.strategy_id: r for r in progress.trials}
        penalty = progress.failure_penalty_s
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            rec = measured.get(t.user_attrs.get(STRATEGY_ID))
            if rec is None:
                self.study.tell(t.number, state=TrialState.FAIL)
            else:
                self.study.tell(t.number, _value(rec, penalty))
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            sid = t.user_attrs.get(STRATEGY_ID)
            if sid is None:
                continue
            if sid not in measured:
                raise ConfigError(
                    f"{str(journal_path(self.store.path))!r} holds TPE trials of run {self.run} "  # type: ignore[union-attr]
                    f"that store {str(self.store.path)!r} does not (strategy {sid!r}); remove the "  # type: ignore[union-attr]
                    f"journal or use another store")
            self._values[decode(t.params, self.domain).content_key] = float(t.value)

    def _replay_legacy(self, progress: SearchProgress) -> None:
        """A store written before the journal: its measured trials with their knob assignments
        from the side file, added to the new study."""
        import optuna

        from autosync_transfer.strategies.knobs import decode

        side = legacy_knobs_path(self.store.path)  # type: ignore[union-attr]
        if not side.exists():
            return
        knobs: dict[str, dict[str, Any]] = {}
        lines, _ = complete_lines(side, "TPE knobs file")  # a torn last line is left out
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                knobs[row["strategy_id"]] = row["params"]
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"TPE knobs file {str(side)!r}: line {no} is not a knob "
                                  f"assignment; move it away or use another store") from None
        penalty = progress.failure_penalty_s
        for r in progress.trials:
            params = knobs.get(r.strategy_id)
            if params is None:
                continue
            value = _value(r, penalty)
            self.study.add_trial(optuna.trial.create_trial(
                params=params, distributions=self._dists, value=value,
                user_attrs={STRATEGY_ID: r.strategy_id}))
            self._values[decode(params, self.domain).content_key] = value

    # -- asking and telling ---------------------------------------------------------------------
    def propose(self, round_no: int, k: int, measured: set[str], history: Sequence[Strategy],
                parents: Sequence[Strategy] = ()) -> list[Strategy]:
        """``k`` new strategies from TPE. A proposal measured already (or picked twice) is told
        its known value and TPE is asked again; when TPE keeps proposing what is known (it
        concentrates where the knobs decode to few distinct strategies), the rest of the round
        is drawn uniformly over the knobs and enqueued, so that TPE is still told every result."""
        import optuna

        from autosync_transfer.strategies.knobs import decode

        if self.study is None:
            raise NotFittedError("TPEProposer.propose needs bind(store, run, ...) first")
        out: list[Strategy] = []
        self.pending = {}

        def new(params: Mapping[str, Any]) -> tuple[Strategy, bool]:
            """The decoded strategy and whether it is new (neither measured nor picked)."""
            s = decode(params, self.domain)
            key = s.content_key
            return s, not (key in measured or any(key == o.content_key for o in out))

        def accept(s: Strategy, trial: Any) -> None:
            trial.set_user_attr(STRATEGY_ID, s.id)
            self.pending[s.id] = trial
            out.append(s)

        tries = 0
        while len(out) < k and tries < self.tries_per_pick * k:
            tries += 1
            trial = self.study.ask(self._dists)
            s, fresh = new(trial.params)
            if not fresh:  # tell TPE what it knows, ask again
                known = self._values.get(s.content_key)
                if known is not None:
                    self.study.tell(trial, known)
                else:
                    self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            accept(s, trial)
        rng = np.random.default_rng([self.seed, len(measured), len(out)])
        tries = 0
        while len(out) < k and tries < 1000 * k:
            tries += 1
            params = uniform_knobs(rng, lossless=self.lossless)
            s, fresh = new(params)
            if not fresh:
                continue
            self.study.enqueue_trial(params)
            accept(s, self.study.ask(self._dists))
        return out

    def tell(self, strategy: Strategy, record: TrialRecord, penalty: float) -> None:
        trial = self.pending.pop(strategy.id, None)
        if trial is None:
            return
        value = self.value(strategy, record, penalty)
        self._values[strategy.content_key] = value
        self.study.tell(trial, value)


def _value(record: TrialRecord, penalty: float) -> float:
    """What TPE is told of a measurement: its median time, ``penalty`` when it failed."""
    return float(record.median_s) if record.status == "ok" and record.median_s else penalty


def _check_journal(fd: int, path: Path) -> None:
    """Under the journal's lock: cut a last line a killed writer left without its newline (the
    journal would not read past it once more lines follow); a complete line that is not JSON is
    a :class:`ConfigError` naming it (never deleted)."""
    cut_torn_tail(fd)
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    for no, line in enumerate(data.split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError:
            raise ConfigError(f"{JOURNAL} {str(path)!r}: line {no} is not a journal entry; move "
                              f"the journal away (the study starts afresh) or use another "
                              f"store") from None
