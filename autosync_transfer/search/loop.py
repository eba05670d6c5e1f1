"""The closed AutoSync loop and its baselines, in one harness.

A search spends a budget of real trials on one domain, in rounds of ``per_round``:

1. **reference**: every hand-optimized builder and torch DDP is measured first, in the same run
   (not counted in the budget) — the numbers the search has to beat; and, as a stricter
   reference reported beside them, the all-reduce builders with fp16 compression
   (:data:`FP16_REFERENCES`: the builders default to no compression, and on a slow link
   compression alone can explain much of a search's win);
2. **propose**: ``candidates`` strategies from the constrained sampler (a fresh seed per round;
   preset ``mixture``: the dataset's space, each candidate with its own knob probabilities, so
   that some are almost all PS, almost all all-reduce, compressed throughout, ...)
   and, for the ranked methods (``autosync`` once it has a simulator, ``analytical``),
   ``neighbours`` strategies near the ``parents`` fastest measured so far, builders included
   (:mod:`autosync_transfer.search.neighbours`: a few variables re-configured from a sampled
   donor), and ``knob_candidates`` whole-model strategies decoded from assignments drawn
   uniformly over the knob encoding (:mod:`autosync_transfer.strategies.knobs`: corners the
   per-variable sampler rarely reaches, such as one compressor on every dense variable);
3. **rank and pick** ``per_round`` of them, by method:

   - ``autosync``: the simulator's scores, best first with diversity
     (:func:`~autosync_transfer.search.selection.select_diverse`); the simulator is re-trained
     after every round on every trial of the run — fine-tuned from the warm-start simulator
     when there is one (``warm``), else trained from scratch once ``min_train`` strategies are
     measured (before that, a cold search picks at random: AutoSync without a simulator);
   - ``random``: the sampler's first candidates, unranked;
   - ``analytical``: the analytical cost model's scores, with diversity, never re-trained;
   - ``tpe``: Optuna's TPE sampler over the knob encoding of the space
     (:mod:`autosync_transfer.strategies.knobs`), told every measured runtime;

4. **run** the picks for real (:class:`~autosync_transfer.runtime.trial.WorkerPool`), append them
   to the run's trial store, and repeat until the budget is spent;
5. **confirm**: the best strategy found and the best builder are measured again ``confirm`` times
   each, interleaved (A B B A ...), so that drift cancels and the speed-up reported does not rest
   on the minimum of many noisy measurements against one of the builder (not counted in the
   budget).

The trial store is the state: a search that is interrupted continues from it, never measuring a
strategy twice (strategies are compared by content, all-reduce group numbers aside:
:attr:`~autosync_transfer.strategies.types.Strategy.content_key`). A stored run continues only
with the configuration it was started with (the budget may grow). TPE's knob assignments go to an
append-only side file ``<store>.knobs.jsonl``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.strategies.sampler import SampledBatch
    from autosync_transfer.runtime.trial import Protocol, TrialResult

__all__ = ["METHODS", "SearchConfig", "SearchProgress", "SearchResult", "Searcher", "run_name",
           "default_store_path", "load_run", "run_meta", "summarize"]

log = logging.getLogger(__name__)

#: the search methods
METHODS = ("autosync", "random", "tpe", "analytical")
#: marker of torch's own DDP among the reference measurements
TORCH_DDP = "torch_ddp"
#: reference name -> (builder, options): the all-reduce builders with fp16 compression
FP16_REFERENCES: dict[str, tuple[str, dict[str, Any]]] = {
    f"{name}+fp16": (name, {"compressor": "fp16"}) for name in ("all_reduce", "partitioned_ar", "ddp")
}


def is_builder(name: str) -> bool:
    """Whether reference ``name`` is a hand-optimized builder as it comes (not torch DDP, not
    an fp16 variant)."""
    return name != TORCH_DDP and name not in FP16_REFERENCES
#: default folder of search trial stores (below the current directory; kept apart from the
#: collected datasets, whose sampled strategies are unbiased: pass --store to put them there)
DEFAULT_SEARCH_DIR = "runs/search"

#: ``measure(strategy, record_id) -> (result, machine facts)``; ``strategy=None``: torch DDP
Measure = Callable[[Strategy | None, str], "tuple[TrialResult, dict[str, Any]]"]
#: searches run their trials on these launchers
LAUNCHERS = ("emulated", "local", "torchrun")


class SearchConfig(BaseModel):
    """How one search runs (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["autosync", "random", "tpe", "analytical"] = "autosync"
    budget: int = Field(default=200, ge=1)
    per_round: int = Field(default=10, ge=1)
    candidates: int = Field(default=1000, ge=1)
    seed: int = 0
    # the dataset's space (where every simulator was trained), with per-strategy knob
    # probabilities so that candidates reach its corners (sampler ``knob_prior``)
    preset: str = "mixture"
    diversity: float = Field(default=0.3, ge=0)
    min_train: int = Field(default=10, ge=2)
    ranker: str = "rnn"
    max_epochs: int = Field(default=30, ge=1)
    neighbours: int = Field(default=200, ge=0)
    parents: int = Field(default=3, ge=1)
    confirm: int = Field(default=3, ge=0)
    # ranked methods: whole-model candidates per round decoded from uniform knob assignments
    # (default: DEFAULT_KNOB_CANDIDATES for autosync and analytical, 0 for the others)
    knob_candidates: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _default_knob_candidates(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("knob_candidates") is None:
            ranked = data.get("method", "autosync") in RANKED_METHODS
            data = {**data, "knob_candidates": DEFAULT_KNOB_CANDIDATES if ranked else 0}
        return data


#: whole-model candidates per round a ranked search adds from the knob encoding by default
DEFAULT_KNOB_CANDIDATES = 200
#: the methods that rank candidates (and so can rank knob candidates too)
RANKED_METHODS = ("autosync", "analytical")


#: a trial is a *hit* when it is at least this much faster than the best builder (a margin of
#: the order of the trial-to-trial noise, so that a builder's near-copy does not count by luck)
HIT_MARGIN = 0.02
#: settings a stored run may change when it continues
_RESUMABLE = frozenset({"budget", "confirm"})


def run_name(config: SearchConfig, warm: bool) -> str:
    """The run's name: method, warm or cold (autosync), knob candidates when there are, seed."""
    tag = config.method + (("-warm" if warm else "-cold") if config.method == "autosync" else "")
    if config.knob_candidates and config.method in RANKED_METHODS:
        tag += f"-knobs{config.knob_candidates}"
    return f"{tag}-seed{config.seed}"


def uniform_knobs(rng: np.random.Generator) -> dict[str, Any]:
    """One assignment of every knob, each drawn uniformly from its choices or range."""
    from autosync_transfer.strategies.knobs import KNOBS

    return {kn.name: (kn.choices[int(rng.integers(len(kn.choices)))] if kn.categorical
                      else int(rng.integers(kn.low, kn.high + 1))) for kn in KNOBS}


def default_store_path(domain: str, name: str) -> Path:
    return Path(DEFAULT_SEARCH_DIR) / domain / f"{name}.jsonl"


@dataclass
class SearchProgress:
    """What a search has measured so far (``on_event`` receives it after every trial)."""

    domain: str
    run: str
    budget: int
    trials: list[TrialRecord] = field(default_factory=list)  # searched, in measuring order
    references: dict[str, float | None] = field(default_factory=dict)  # builder/ddp -> median s
    confirmations: dict[str, TrialRecord] = field(default_factory=dict)  # "<done>/<i>-<who>"
    round: int = 0
    message: str = ""

    @property
    def done(self) -> int:
        return len(self.trials)

    @property
    def best_builder_s(self) -> float | None:
        vals = [v for k, v in self.references.items() if is_builder(k) and v]
        return min(vals) if vals else None

    @property
    def ddp_s(self) -> float | None:
        return self.references.get(TORCH_DDP)

    @property
    def best_s(self) -> float | None:
        vals = [r.median_s for r in self.trials if r.status == "ok" and r.median_s]
        return min(vals) if vals else None


@dataclass(frozen=True)
class SearchResult:
    """The outcome: the best strategy found, the figures of :func:`summarize`, and the strategy
    to use (``chosen``): the fastest of the best found, the best builder and the best fp16
    reference, by the confirmation's medians when the run has one, else by their measurements
    (``chosen_from``: ``search``, or the reference's name)."""

    domain: str
    run: str
    config: SearchConfig
    store: Path
    best: Strategy | None
    summary: dict[str, Any]
    simulator: Any = None  # the final simulator (autosync only)
    chosen: Strategy | None = None
    chosen_from: str | None = None


def summarize(trials: Sequence[TrialRecord], references: dict[str, float | None],
              per_round: int, confirmations: dict[str, TrialRecord] | None = None
              ) -> dict[str, Any]:
    """Figures of a search: best-so-far speed-up over the best builder after every trial, trials
    needed to reach 1.1x / 1.2x, hit rate per round (share of its trials at least
    :data:`HIT_MARGIN` faster than the best builder), failures; with ``confirmations`` (of the
    current number of trials) the ``confirmed`` speed-up: median of the best strategy's
    re-measurements over the median of the best builder's (and of the best fp16 reference's,
    when the confirmation measured one)."""
    builders = [v for k, v in references.items() if is_builder(k) and v]
    fp16 = {k: v for k, v in references.items() if k in FP16_REFERENCES and v}
    best_builder = min(builders) if builders else None
    ddp = references.get(TORCH_DDP)
    best = math.inf
    curve: list[float | None] = []
    hits: list[bool] = []
    for r in trials:
        ok = r.status == "ok" and r.median_s is not None
        if ok:
            best = min(best, float(r.median_s))  # type: ignore[arg-type]
        curve.append(best_builder / best if best_builder and math.isfinite(best) else None)
        hits.append(bool(ok and best_builder
                         and r.median_s * (1 + HIT_MARGIN) < best_builder))  # type: ignore[operator]

    def first_reaching(x: float) -> int | None:
        for i, v in enumerate(curve):
            if v is not None and v >= x:
                return i + 1
        return None

    rounds = [hits[i:i + per_round] for i in range(0, len(hits), per_round)]
    best_s = best if math.isfinite(best) else None
    return {
        "trials": len(trials),
        "failed": sum(r.status != "ok" for r in trials),
        "best_s": best_s,
        "best_builder_s": best_builder,
        "best_builder": min((k for k, v in references.items() if is_builder(k) and v),
                            key=lambda k: references[k], default=None),  # type: ignore[arg-type,return-value]
        "best_fp16_builder": min(fp16, key=lambda k: fp16[k], default=None),
        "best_fp16_builder_s": min(fp16.values(), default=None),
        "speedup_vs_fp16_builder": (min(fp16.values()) / best_s if fp16 and best_s else None),
        "ddp_s": ddp,
        "speedup_vs_builder": best_builder / best_s if best_builder and best_s else None,
        "speedup_vs_ddp": ddp / best_s if ddp and best_s else None,
        "trials_to_1.1x": first_reaching(1.1),
        "trials_to_1.2x": first_reaching(1.2),
        "trials_to_1.3x": first_reaching(1.3),
        "curve": curve,
        "hit_rate": [sum(h) / len(h) for h in rounds],
        "confirmed": (confirmed := _confirmed(confirmations or {}, len(trials))),
        "confirmed_speedup_vs_builder": confirmed["speedup_vs_builder"] if confirmed else None,
        "confirmed_speedup_vs_fp16_builder": (confirmed or {}).get("speedup_vs_fp16_builder"),
    }


def _confirmed(confirmations: dict[str, TrialRecord], done: int) -> dict[str, Any] | None:
    """The confirmation of the run at ``done`` trials: medians of the ok re-measurements of the
    best strategy and of the best builder, and their ratio."""
    times: dict[str, list[float]] = {"best": [], "builder": [], "fp16": []}
    names: dict[str, str] = {}
    for key, r in confirmations.items():
        at, _, rest = key.partition("/")
        who = rest.rpartition("-")[2]
        if at != str(done) or who not in times:
            continue
        names[who] = r.strategy_id
        if r.status == "ok" and r.median_s:
            times[who].append(float(r.median_s))
    if not times["best"] or not times["builder"]:
        return None
    best, builder = float(np.median(times["best"])), float(np.median(times["builder"]))
    out = {"best": names.get("best"), "builder": names.get("builder"), "best_s": best,
           "builder_s": builder, "speedup_vs_builder": builder / best,
           "measurements": min(len(times["best"]), len(times["builder"]))}
    if times["fp16"]:
        fp16 = float(np.median(times["fp16"]))
        out.update(fp16_builder=names.get("fp16"), fp16_builder_s=fp16,
                   speedup_vs_fp16_builder=fp16 / best)
    return out


def run_meta(store: TrialStore | str | Path, name: str) -> dict[str, Any]:
    """The metadata run ``name`` stored in ``store`` (configuration, launcher, warm source,
    cluster spec); ``{}`` when it stored none."""
    store = store if isinstance(store, TrialStore) else TrialStore(store)
    meta = store.read_meta()
    searches = meta.get("searches")
    if isinstance(searches, dict) and isinstance(searches.get(name), dict):
        return dict(searches[name])
    # a store written before the metadata was kept per run holds one run's at the top level
    return dict(meta) if meta.get("search") == name else {}


def load_run(domain: Domain, store: TrialStore | str | Path, name: str, budget: int
             ) -> tuple[SearchProgress, dict[str, Strategy]]:
    """What run ``name`` of ``domain`` holds in ``store`` (measured trials, references and
    confirmations, and the strategies by record id), read without measuring anything; a store
    of the same domain on another model or cluster is refused (:class:`ConfigError`)."""
    from autosync_transfer.strategies.compact import decode, is_compact

    store = store if isinstance(store, TrialStore) else TrialStore(store)
    prefix = f"{domain.name}/search/{name}/"
    progress = SearchProgress(domain.name, name, budget)
    strategies: dict[str, Strategy] = {}  # record id -> strategy
    for r in store.records():
        if (r.domain != domain.name or not r.id.startswith(prefix)
                or r.supersedes is not None):  # a search measures each trial once
            continue
        if (r.model_fingerprint, r.cluster_fingerprint) != (domain.model.fingerprint,
                                                            domain.cluster.fingerprint):
            raise ConfigError(f"store {str(store.path)!r} holds trials of {domain.name} "
                              f"measured on a different model or cluster (trial {r.id!r}); "
                              f"use another --store")
        if r.strategy is not None:
            s = r.strategy
            strategies[r.id] = decode(s, domain.model) if is_compact(s) else Strategy.from_dict(s)
        ref = r.id[len(prefix):]
        if ref.startswith("reference/"):
            progress.references[ref.split("/", 1)[1]] = r.median_s if r.status == "ok" else None
        elif ref.startswith("confirm/"):
            progress.confirmations[ref.split("/", 1)[1]] = r
        else:
            progress.trials.append(r)
    return progress, strategies


class Searcher:
    """One search of ``config.method`` on ``domain``, stored in ``store_path``.

    ``measure(strategy)`` runs one trial (``None``: torch DDP) and returns the result and extra
    machine facts; :meth:`run` opens a :class:`WorkerPool` on ``launcher`` when none is given.
    ``warm``: the simulator to start from (``autosync`` only), ``warm_source`` what it came from
    (a domain or a models:/ URI; recorded, and a stored run continues only from the same source),
    ``warm_version`` the registered version it resolved to (``NAME/VERSION``; recorded, and a
    stored run continues only from the same version, so a moved alias is caught).
    """

    def __init__(self, domain: Domain, store_path: str | Path, config: SearchConfig, *,
                 warm: Simulator | None = None, warm_source: str | None = None,
                 warm_version: str | None = None, launcher: str = "emulated",
                 protocol: Protocol | None = None, max_foreign_cpu: float = 0.05,
                 on_event: Callable[[SearchProgress], None] | None = None,
                 log_dir: str | Path | None = None) -> None:
        if launcher not in LAUNCHERS:
            raise ConfigError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        if warm is not None and config.method != "autosync":
            raise ConfigError(f"--warm-start needs --method autosync, got {config.method!r}")
        if warm is not None and warm.kind == "analytical":
            raise ConfigError("--warm-start needs a learned simulator, got the analytical cost model")
        if config.knob_candidates and config.method not in RANKED_METHODS:
            raise ConfigError(f"--knob-candidates needs a ranked method (autosync, analytical), "
                              f"got {config.method!r}")
        from autosync_transfer.strategies.sampler import preset

        preset(config.preset)  # the name, before anything runs
        if config.method == "autosync" and warm is None:
            from autosync_transfer.rankers.simulator import _known_kinds

            if config.ranker not in _known_kinds() or config.ranker == "analytical":
                raise ConfigError(f"--ranker must be a learned ranker "
                                  f"({', '.join(k for k in _known_kinds() if k != 'analytical')}), "
                                  f"got {config.ranker!r}")
        self.domain = domain
        self.config = config
        self.warm = warm
        self.warm_source = warm_source if warm is not None else None
        self.warm_version = warm_version if warm is not None else None
        self.name = run_name(config, warm is not None)
        self.store = TrialStore(store_path)
        self.launcher = launcher
        self.protocol = protocol
        self.max_foreign_cpu = max_foreign_cpu
        self.on_event = on_event
        self.log_dir = log_dir
        self.simulator: Simulator | None = warm
        self._study: Any = None
        self._knobs: dict[str, dict[str, Any]] = {}

    # -- state from the store -------------------------------------------------------------------
    def _prefix(self) -> str:
        return f"{self.domain.name}/search/{self.name}/"

    def _load(self) -> tuple[SearchProgress, dict[str, Strategy]]:
        progress, strategies = load_run(self.domain, self.store, self.name, self.config.budget)
        knobs = Path(f"{self.store.path}.knobs.jsonl")
        if knobs.exists():
            for line in knobs.read_text().splitlines():
                try:
                    row = json.loads(line)
                    self._knobs[row["strategy_id"]] = row["params"]
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line
        return progress, strategies

    # -- measuring -------------------------------------------------------------------------------
    def _record(self, strategy: Strategy | None, res: TrialResult, facts: dict[str, Any],
                record_id: str) -> TrialRecord:
        from autosync_transfer.dataset.collect import record_for
        from autosync_transfer.runtime.trial import Protocol

        return record_for(self.domain, strategy, res, self.protocol or Protocol(), self.launcher,
                          seed=self.config.seed, record_id=record_id,
                          machine_start=facts.pop("_start", None), machine_extra=facts)

    # -- ranking ---------------------------------------------------------------------------------
    def _training_data(self, progress: SearchProgress, strategies: dict[str, Strategy]) -> Any:
        from autosync_transfer.adapt.data import TargetData

        by_fp: dict[str, tuple[Strategy, float]] = {}
        records = {r.id: r for r in self.store.records() if r.id in strategies}
        ok = {rid: float(r.median_s) for rid, r in records.items()
              if r.status == "ok" and r.median_s}
        # a failed or timed-out strategy is a slow one to the ranker: twice the slowest ok time
        # (as TPE is told), so that the simulator learns to avoid its region
        penalty = 2 * max(ok.values()) if ok else None
        for rid, r in records.items():
            t = ok.get(rid, penalty if r.status != "ok" else None)
            if t is not None:
                s = strategies[rid]
                by_fp.setdefault(s.content_key, (s, t))
        keyed = sorted((f"{s.id}#{fp[:8]}", s, t) for fp, (s, t) in by_fp.items())
        return TargetData(self.domain, tuple(k for k, _, _ in keyed),
                          tuple(s for _, s, _ in keyed), tuple(t for _, _, t in keyed))

    def _retrain(self, progress: SearchProgress, strategies: dict[str, Strategy]) -> None:
        from autosync_transfer.adapt.methods import FineTune, FromScratch
        from autosync_transfer.adapt.training import ShotTraining

        data = self._training_data(progress, strategies)
        # the epochs are chosen on held-out trials, then every trial trains the simulator
        training = ShotTraining(max_epochs=self.config.max_epochs, refit=True)
        if self.warm is not None:
            if len(data) >= 2:
                self.simulator = FineTune("full", training=training).fit(
                    self.warm, data, seed=self.config.seed).simulator
        elif len(data) >= self.config.min_train:
            self.simulator = FromScratch(self.config.ranker, training=training).fit(
                None, data, seed=self.config.seed).simulator

    def _round_seed(self, round_no: int) -> int:
        return (self.config.seed * 100003 + round_no * 7919 + 17) % (2**31 - 1)

    def _candidates(self, round_no: int) -> SampledBatch:
        from autosync_transfer.strategies.sampler import StrategySampler, preset

        return StrategySampler(self.domain, preset(self.config.preset),
                               seed=self._round_seed(round_no)).sample_batch(self.config.candidates)

    def _parents(self, progress: SearchProgress, strategies: dict[str, Strategy]
                 ) -> list[Strategy]:
        """The ``parents`` fastest strategies measured in this run, builders included."""
        timed = [(t, f"{self._prefix()}reference/{name}") for name, t in progress.references.items()
                 if t and name != TORCH_DDP]  # builders and their fp16 variants
        timed += [(r.median_s, r.id) for r in progress.trials if r.status == "ok" and r.median_s]
        timed.sort()
        return [strategies[rid] for _, rid in timed if rid in strategies][: self.config.parents]

    @staticmethod
    def _unmeasured(cands: SampledBatch, order: Iterable[int], measured: set[str], limit: int
                    ) -> list[int]:
        """Indices of the first ``limit`` candidates in ``order`` that are neither measured nor
        a repeat of an earlier one (only their strategy objects are built)."""
        seen: set[str] = set()
        out: list[int] = []
        for i in order:
            fp = cands[int(i)].content_key
            if fp in measured or fp in seen:
                continue
            seen.add(fp)
            out.append(int(i))
            if len(out) >= limit:
                break
        return out

    def _pick(self, round_no: int, k: int, measured: set[str], history: list[Strategy],
              parents: Sequence[Strategy] = ()) -> list[Strategy]:
        from autosync_transfer.search.neighbours import neighbours
        from autosync_transfer.search.selection import POOL, select_diverse

        method = self.config.method
        if method == "tpe":
            return self._tpe_ask(k, measured)
        sampled = self._candidates(round_no)
        if method == "random" or (method == "autosync" and self.simulator is None):
            return [sampled[i] for i in self._unmeasured(sampled, range(len(sampled)), measured, k)]
        if method == "analytical":
            from autosync_transfer.rankers.simulator import Simulator

            simulator = Simulator("analytical")
        else:
            assert self.simulator is not None
            simulator = self.simulator
        near: Sequence[Strategy] = neighbours(
            parents, sampled[: min(len(sampled), 64)], self.config.neighbours, self.domain,
            seed=self._round_seed(round_no) + 1)
        if self.config.knob_candidates:
            near = [*near, *self._knob_candidates(round_no)]
        cands: Sequence[Strategy] = _Joined(sampled, near)
        scores = np.concatenate([simulator.score(sampled, self.domain),
                                 simulator.score(near, self.domain)])
        scores = np.where(np.isfinite(scores), scores, np.inf)
        order = np.lexsort((np.arange(len(cands)), scores))
        # select_diverse considers only the best-scored unmeasured candidates (its pool), so only
        # their objects are built
        keep = self._unmeasured(cands, order, measured, max(POOL, k))
        best = [cands[i] for i in keep]
        idx = select_diverse(best, scores[keep].tolist(), k, diversity=self.config.diversity,
                             pool=max(POOL, k), seen=history)
        return [best[i] for i in idx]

    def _knob_candidates(self, round_no: int) -> list[Strategy]:
        """``knob_candidates`` distinct strategies of round ``round_no`` decoded from uniform
        knob assignments (deterministic per round)."""
        from autosync_transfer.strategies.knobs import decode

        rng = np.random.default_rng([self.config.seed, round_no, 2])
        out: dict[str, Strategy] = {}
        for _ in range(4 * self.config.knob_candidates):
            s = decode(uniform_knobs(rng), self.domain)
            out.setdefault(s.content_key, s)
            if len(out) >= self.config.knob_candidates:
                break
        return list(out.values())

    # -- TPE -------------------------------------------------------------------------------------
    def _tpe(self, progress: SearchProgress, strategies: dict[str, Strategy]) -> Any:
        import optuna

        from autosync_transfer.strategies.knobs import KNOBS, decode

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        dists: dict[str, Any] = {
            k.name: (optuna.distributions.CategoricalDistribution(list(k.choices)) if k.categorical
                     else optuna.distributions.IntDistribution(k.low, k.high)) for k in KNOBS}
        self._dists = dists
        sampler = optuna.samplers.TPESampler(seed=self.config.seed, n_startup_trials=10)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        ok = [r.median_s for r in progress.trials if r.status == "ok" and r.median_s]
        penalty = 2 * max(ok) if ok else 1e3
        for r in progress.trials:
            params = self._knobs.get(r.strategy_id)
            if params is None:
                continue
            value = float(r.median_s) if r.status == "ok" and r.median_s else penalty
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
            self._value_of[decode(params, self.domain).content_key] = value
        return study

    #: TPE proposals per pick before the rest of a round is drawn uniformly over the knobs
    tpe_tries_per_pick = 50

    def _tpe_ask(self, k: int, measured: set[str]) -> list[Strategy]:
        """``k`` new strategies from TPE. A proposal measured already (or picked twice) is told
        its known value and TPE is asked again; when TPE keeps proposing what is known (it
        concentrates where the knobs decode to few distinct strategies), the rest of the round
        is drawn uniformly over the knobs and enqueued, so that TPE is still told every result."""
        import optuna

        from autosync_transfer.strategies.knobs import decode

        out: list[Strategy] = []
        self._pending: dict[str, Any] = {}

        def new(params: Mapping[str, Any]) -> tuple[Strategy, bool]:
            """The decoded strategy and whether it is new (neither measured nor picked)."""
            s = decode(params, self.domain)
            key = s.content_key
            return s, not (key in measured or any(key == o.content_key for o in out))

        def accept(s: Strategy, trial: Any) -> None:
            self._pending[s.id] = trial
            with open(f"{self.store.path}.knobs.jsonl", "a") as f:
                f.write(json.dumps({"strategy_id": s.id, "params": trial.params}) + "\n")
                f.flush()
                os.fsync(f.fileno())
            out.append(s)

        tries = 0
        while len(out) < k and tries < self.tpe_tries_per_pick * k:
            tries += 1
            trial = self._study.ask(self._dists)
            s, fresh = new(trial.params)
            if not fresh:  # tell TPE what it knows, ask again
                known = self._value_of.get(s.content_key)
                if known is not None:
                    self._study.tell(trial, known)
                else:
                    self._study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            accept(s, trial)
        rng = np.random.default_rng([self.config.seed, len(measured), len(out)])
        tries = 0
        while len(out) < k and tries < 1000 * k:
            tries += 1
            params = uniform_knobs(rng)
            s, fresh = new(params)
            if not fresh:
                continue
            self._study.enqueue_trial(params)
            accept(s, self._study.ask(self._dists))
        return out

    def _tpe_tell(self, strategy: Strategy, rec: TrialRecord, penalty: float) -> None:
        trial = self._pending.pop(strategy.id, None)
        if trial is None:
            return
        value = float(rec.median_s) if rec.status == "ok" and rec.median_s else penalty
        self._value_of[strategy.content_key] = value
        self._study.tell(trial, value)

    # -- the loop --------------------------------------------------------------------------------
    @property
    def queue_path(self) -> Path:
        """``--launcher torchrun``: the job queue the torchrun workers follow."""
        return Path(f"{self.store.path}.queue.jsonl")

    @property
    def results_path(self) -> Path:
        """``--launcher torchrun``: where rank 0 of the torchrun workers writes results."""
        return Path(f"{self.store.path}.results.jsonl")

    def torchrun_command(self, cluster_file: str | None = None) -> str:
        """The command to start on every node (``--launcher torchrun``)."""
        from autosync_transfer.runtime.trial import Protocol

        proto = self.protocol or Protocol()
        spec = f" --cluster-file {cluster_file}" if cluster_file else ""
        domain = self.domain.model.name if cluster_file else self.domain.name
        return (f"torchrun --nnodes {self.domain.cluster.num_nodes} --node_rank <i> "
                f"--nproc_per_node <workers of node i> --master_addr <node 0> --master_port 29500 "
                f"-m autosync_transfer worker --torchrun --follow --domain {domain}{spec} "
                f"--strategies {self.queue_path} --results {self.results_path} "
                f"--warmup {proto.warmup} --iters {proto.iters} --timeout {proto.timeout_s:g}")

    def run(self, measure: Measure | None = None) -> SearchResult:
        """Search until the budget is spent (continuing a stored run) and return the result."""
        if measure is not None:
            return self._run(measure)
        if self.launcher == "torchrun":
            from autosync_transfer.search.remote import TorchrunQueue

            queue = TorchrunQueue(self.queue_path, self.results_path, self.protocol)
            result = self._run(queue.measure)
            queue.stop()  # only when done: after an error the workers keep waiting for more
            return result
        from autosync_transfer.dataset.collect import measure_undisturbed
        from autosync_transfer.runtime.trial import WorkerPool

        with WorkerPool(self.domain, self.launcher, self.protocol, seed=self.config.seed,
                        log_dir=self.log_dir) as pool:
            def measure_in_pool(strategy: Strategy | None, record_id: str
                                ) -> tuple[TrialResult, dict[str, Any]]:
                res, start, facts = measure_undisturbed(pool, strategy, self.max_foreign_cpu)
                return res, {**facts, "_start": start}

            return self._run(measure_in_pool)

    def _emit(self, progress: SearchProgress, message: str) -> None:
        progress.message = message
        if self.on_event:
            self.on_event(progress)

    def _run(self, measure: Measure) -> SearchResult:
        from autosync_transfer.strategies.builders import BUILDERS, build

        cfg = self.config
        self.store.path.parent.mkdir(parents=True, exist_ok=True)
        self._check_resumable()
        # per run, under "searches": a store may hold several runs, or be a collection's
        searches = dict(self.store.read_meta().get("searches") or {})
        searches[self.name] = {"domain": self.domain.name, "config": cfg.model_dump(mode="json"),
                               "launcher": self.launcher, "warm_source": self.warm_source,
                               "warm_version": self.warm_version,
                               "cluster_spec": self.domain.cluster.to_resource_spec()}
        self.store.write_meta({"searches": searches})
        progress, strategies = self._load()
        prefix = self._prefix()
        # 1. the references, measured in this run
        for name in [*BUILDERS, TORCH_DDP, *FP16_REFERENCES]:
            if name in progress.references:
                continue
            if name == TORCH_DDP:
                strategy = None
            elif name in FP16_REFERENCES:
                builder, options = FP16_REFERENCES[name]
                strategy = build(builder, self.domain, **options)
                strategy = strategy.model_copy(update={"id": f"{strategy.id}+fp16"})
            else:
                strategy = build(name, self.domain)
            self._emit(progress, f"measuring reference {name}")
            rid = f"{prefix}reference/{name}"
            res, facts = measure(strategy, rid)
            rec = self._record(strategy, res, facts, rid)
            self.store.append(rec)
            if strategy is not None:
                strategies[rec.id] = strategy
            progress.references[name] = rec.median_s if rec.status == "ok" else None
            self._emit(progress, f"reference {name}: {_ms(rec)}")
        measured = {s.content_key for s in strategies.values()}
        history = list(strategies.values())
        self._value_of: dict[str, float] = {}
        if cfg.method == "tpe":
            self._study = self._tpe(progress, strategies)
        # 2. rounds until the budget is spent
        while progress.done < cfg.budget:
            round_no = progress.done // cfg.per_round
            progress.round = round_no
            in_round = progress.done - round_no * cfg.per_round
            k = min(cfg.per_round - in_round, cfg.budget - progress.done)
            # (a cold search picks all of round 0 at random, also when it continues mid-round)
            if cfg.method == "autosync" and (round_no > 0 or self.warm is not None):
                self._emit(progress, f"round {round_no}: training the simulator on "
                                     f"{len(measured)} strategies")
                self._retrain(progress, strategies)
            picks = self._pick(round_no, k, measured, history,
                               self._parents(progress, strategies))
            if not picks:
                raise ConfigError(f"the sampler proposes no new strategy for {self.domain.name} "
                                  f"(every candidate of round {round_no} was measured already)")
            ok_times = [r.median_s for r in progress.trials if r.status == "ok" and r.median_s]
            penalty = 2 * max(ok_times) if ok_times else 1e3
            for s in picks:
                self._emit(progress, f"round {round_no}: measuring {s.id}")
                res, facts = measure(s, f"{prefix}{s.id}")
                rec = self._record(s, res, facts, f"{prefix}{s.id}")
                self.store.append(rec)
                strategies[rec.id] = s
                measured.add(s.content_key)
                history.append(s)
                progress.trials.append(rec)
                if cfg.method == "tpe":
                    self._tpe_tell(s, rec, penalty)
                self._emit(progress, f"round {round_no}: {s.id} {_ms(rec)}")
        if cfg.method == "autosync":
            self._retrain(progress, strategies)
        self._confirm(progress, strategies, measure)
        summary = summarize(progress.trials, progress.references, cfg.per_round,
                            progress.confirmations)
        best = None
        ok = [r for r in progress.trials if r.status == "ok" and r.median_s]
        if ok:
            best_rec = min(ok, key=lambda r: r.median_s)  # type: ignore[arg-type,return-value]
            best = strategies.get(best_rec.id)
        chosen, chosen_from = self._chosen(summary, strategies, best)
        return SearchResult(self.domain.name, self.name, cfg, self.store.path, best, summary,
                            self.simulator if cfg.method == "autosync" else None,
                            chosen, chosen_from)

    def _chosen(self, summary: dict[str, Any], strategies: dict[str, Strategy],
                best: Strategy | None) -> tuple[Strategy | None, str | None]:
        """The strategy to use and where it comes from (see :class:`SearchResult`)."""
        c = summary.get("confirmed") or {}
        builder, fp16 = summary["best_builder"], summary["best_fp16_builder"]
        if c:
            times = {"search": c["best_s"], builder: c["builder_s"], fp16: c.get("fp16_builder_s")}
        else:
            times = {"search": summary["best_s"], builder: summary["best_builder_s"],
                     fp16: summary["best_fp16_builder_s"]}
        options = []
        for i, (name, t) in enumerate(times.items()):
            s = best if name == "search" else strategies.get(f"{self._prefix()}reference/{name}")
            if name is not None and t and s is not None:
                options.append((t, i, name, s))
        if not options:
            return None, None
        _, _, name, s = min(options, key=lambda o: o[:2])
        return s, name


    def _check_resumable(self) -> None:
        """A stored run continues only with the settings it was started with (the budget and
        the number of confirmations aside): one line naming the first difference, else nothing."""
        meta = run_meta(self.store, self.name)
        stored = meta.get("config")
        if not isinstance(stored, dict) or not any(
                r.id.startswith(self._prefix()) for r in self.store.records()):
            return
        current = self.config.model_dump(mode="json")
        for key in sorted(set(stored) & set(current) - _RESUMABLE):
            if stored[key] != current[key]:
                raise ConfigError(f"store {str(self.store.path)!r} holds a {self.name} run with "
                                  f"{key}={stored[key]!r}, not {current[key]!r}; continue it with "
                                  f"the same settings or use another --store")
        if self.warm is None:
            return
        if self.warm_version is not None and meta.get("warm_version") is not None:
            # the version decides: an alias may have moved, another spelling may name it
            if meta["warm_version"] != self.warm_version:
                raise ConfigError(f"store {str(self.store.path)!r} holds a run warm-started from "
                                  f"{meta['warm_version']}, but {self.warm_source!r} is "
                                  f"{self.warm_version}; continue it with --warm-start "
                                  f"models:/{meta['warm_version']} or use another --store")
        elif meta.get("warm_source") not in (None, self.warm_source) and self.warm_source:
            raise ConfigError(f"store {str(self.store.path)!r} holds a run warm-started from "
                              f"{meta['warm_source']!r}, not {self.warm_source!r}; use another "
                              f"--store")

    def _confirm(self, progress: SearchProgress, strategies: dict[str, Strategy],
                 measure: Measure) -> None:
        """Measure the best strategy found, the best builder and the best fp16 reference
        ``confirm`` times each, interleaved (A B C, C B A, A B C, ...), as
        ``confirm/<trials>/<i>-best|builder|fp16``; those already stored are not measured
        again."""
        cfg = self.config
        ok = [r for r in progress.trials if r.status == "ok" and r.median_s]
        refs = {k: v for k, v in progress.references.items() if is_builder(k) and v}
        fp16_refs = {k: v for k, v in progress.references.items() if k in FP16_REFERENCES and v}
        if cfg.confirm == 0 or not ok or not refs:
            return
        from autosync_transfer.strategies.builders import build

        best_rec = min(ok, key=lambda r: r.median_s)  # type: ignore[arg-type,return-value]
        best = strategies.get(best_rec.id)
        builder_name = min(refs, key=lambda k: refs[k])  # type: ignore[arg-type,return-value]
        builder = strategies.get(f"{self._prefix()}reference/{builder_name}") \
            or build(builder_name, self.domain)
        if best is None:
            return
        group = [("best", best), ("builder", builder)]
        if fp16_refs:
            fp16_name = min(fp16_refs, key=lambda k: fp16_refs[k])  # type: ignore[arg-type,return-value]
            fp16 = strategies.get(f"{self._prefix()}reference/{fp16_name}")
            if fp16 is not None:
                group.append(("fp16", fp16))
        for i in range(cfg.confirm):
            for who, s in (group if i % 2 == 0 else group[::-1]):
                key = f"{progress.done}/{i}-{who}"
                if key in progress.confirmations:
                    continue
                rid = f"{self._prefix()}confirm/{key}"
                self._emit(progress, f"confirming: {who} {s.id} ({i + 1}/{cfg.confirm})")
                res, facts = measure(s, rid)
                rec = self._record(s, res, facts, rid)
                self.store.append(rec)
                progress.confirmations[key] = rec


class _Joined(Sequence[Strategy]):
    """Two sequences of strategies read as one (the sampled batch stays lazy)."""

    def __init__(self, first: Sequence[Strategy], second: Sequence[Strategy]) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, i: int) -> Strategy:  # type: ignore[override]
        n = len(self.first)
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i = i % len(self)
        return self.first[i] if i < n else self.second[i - n]


def _ms(rec: TrialRecord) -> str:
    return f"{rec.median_s * 1000:.1f} ms" if rec.status == "ok" and rec.median_s else rec.status
