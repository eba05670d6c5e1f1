"""The closed AutoSync loop and its baselines, in one harness (:class:`Searcher`), and
:func:`search`, the one call that runs it (``autosync_transfer.search``).

A search spends a budget of real trials on one domain, in rounds of ``per_round``:

1. **reference**: every hand-optimized builder and torch DDP is measured first, in the same run
   (not counted in the budget), with the all-reduce builders with fp16 compression as a stricter
   reference (:mod:`autosync_transfer.search.references`);
2. **propose**: the run's :class:`~autosync_transfer.search.proposers.Proposer` (the method:
   ``autosync``, ``random``, ``tpe`` or ``analytical``, :mod:`autosync_transfer.search.proposers`)
   is asked for the round's strategies, after learning from every trial so far when it learns
   (``autosync`` re-trains its simulator);
3. **run** the picks for real (:class:`~autosync_transfer.runtime.trial.WorkerPool`), append them
   to the run's trial store, tell the proposer each result, and repeat until the budget is spent;
4. **check** (objective ``time-to-loss``, the default): the lossy final candidates get a
   convergence run against exact synchronization (:mod:`autosync_transfer.search.timetoloss`);
   one that fails is excluded, and the best found is the best by time to the target loss (step
   time x measured steps-to-target ratio; lossless: 1.0);
5. **confirm**: the best strategy found, the best lossless one, the best builder, the best fp16
   reference and torch DDP are measured again together, ``confirm`` rounds of every member in an
   order shuffled per round, so that drift hits all alike and the speed-ups reported do not rest
   on the minimum of many noisy measurements (not counted in the budget); each speed-up is a
   ratio paired by round with its 95 % interval
   (:func:`~autosync_transfer.search.summary.summarize`): "vs torch DDP" comes only from it.

The trial store is the state (:mod:`autosync_transfer.search.resume`): a search that is
interrupted continues from it, never measuring a strategy twice (strategies are compared by
content, all-reduce group numbers aside:
:attr:`~autosync_transfer.strategies.types.Strategy.content_key`). A stored run continues only
with the configuration it was started with (the budget may grow). TPE's study is kept in an
Optuna journal beside the store (:mod:`autosync_transfer.search.proposers.tpe`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.search.config import (DEFAULT_KNOB_CANDIDATES, DEFAULT_SEARCH_DIR,
                                             SearchConfig, default_store_path, run_name)
from autosync_transfer.search.objective import get_objective
from autosync_transfer.search.proposers import (PROPOSERS, RANKED_METHODS, SEARCH_METHODS,
                                                Proposer, make_proposer, uniform_knobs)
from autosync_transfer.search.references import (FP16_REFERENCES, choose, confirmation_group,
                                                 is_builder, reference_names, reference_strategy)
from autosync_transfer.search.resume import (check_resumable, load_run, record_prefix, run_meta,
                                             write_run_meta)
from autosync_transfer.search.summary import (HIT_MARGIN, SearchProgress, SearchResult,
                                              summarize)
from autosync_transfer.strategies.types import TORCH_DDP, Strategy

if TYPE_CHECKING:
    from autosync_transfer.rankers.fidelity import FidelityModel
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.runtime.launch import Launcher
    from autosync_transfer.runtime.trial import Protocol, TrialResult

__all__ = ["LAUNCHERS", "Measure", "Searcher", "search",
           # moved to their own modules; importable from here for one release
           "DEFAULT_KNOB_CANDIDATES", "DEFAULT_SEARCH_DIR", "FP16_REFERENCES", "HIT_MARGIN",
           "METHODS", "RANKED_METHODS", "TORCH_DDP", "SearchConfig", "SearchProgress",
           "SearchResult", "default_store_path", "is_builder", "load_run", "run_meta", "run_name",
           "summarize", "uniform_knobs"]

log = logging.getLogger(__name__)

#: ``measure(strategy, record_id) -> (result, machine facts)``; ``strategy=None``: torch DDP
Measure = Callable[[Strategy | None, str], "tuple[TrialResult, dict[str, Any]]"]
#: searches run their trials on these launchers (the names of runtime.launch.LAUNCHERS)
LAUNCHERS = ("emulated", "local", "torchrun")

#: the search methods, for one release (use
#: :data:`~autosync_transfer.search.proposers.SEARCH_METHODS`; unrelated to
#: ``adapt.core.METHODS``, the adaptation methods)
METHODS = SEARCH_METHODS


class Searcher:
    """One search of ``config.method`` on ``domain``, stored in ``store_path``.

    ``proposer``: the method's :class:`~autosync_transfer.search.proposers.Proposer` (default: the
    one ``config.method`` names, made with ``warm``); ``measure(strategy)`` runs one trial
    (``None``: torch DDP) and returns the result and extra machine facts; :meth:`run` opens a
    :class:`WorkerPool` on ``launcher`` when none is given. ``warm``: the simulator to start from
    (``autosync`` only), ``warm_source`` what it came from (a domain or a models:/ URI; recorded,
    and a stored run continues only from the same source), ``warm_version`` the registered
    version it resolved to (``NAME/VERSION``; recorded, and a stored run continues only from the
    same version, so a moved alias is caught).
    """

    def __init__(self, domain: Domain, store_path: str | Path, config: SearchConfig, *,
                 proposer: Proposer | None = None,
                 warm: Simulator | None = None, warm_source: str | None = None,
                 warm_version: str | None = None, launcher: str | Launcher = "emulated",
                 workload: str | None = None,
                 protocol: Protocol | None = None, max_foreign_cpu: float = 0.05,
                 on_event: Callable[[SearchProgress], None] | None = None,
                 log_dir: str | Path | None = None) -> None:
        from autosync_transfer.runtime.launch import as_launcher

        runner = as_launcher(launcher)
        if proposer is None:
            proposer = make_proposer(domain, config, warm=warm)
        else:
            if warm is not None and warm is not proposer.warm:
                raise ConfigError("warm goes to the proposer when one is given, not to Searcher")
            if proposer.config != config or proposer.domain != domain:
                raise ConfigError(f"proposer {type(proposer).__name__} was made for another "
                                  f"domain or config than this search's (method={config.method!r})")
            type(proposer).check(config, proposer.warm)
        self.domain = domain
        self.config = config
        self.proposer = proposer
        self.warm_source = warm_source if proposer.warm is not None else None
        self.warm_version = warm_version if proposer.warm is not None else None
        self.name = run_name(config, proposer.warm is not None)
        self.store = TrialStore(store_path)
        #: the launcher that opens the pool; :attr:`launcher` is its name (recorded)
        self.runner = runner
        self.launcher = runner.name
        #: the workload spec the workers import (None: the zoo model of ``domain``)
        self.workload = workload
        self.protocol = protocol
        self.max_foreign_cpu = max_foreign_cpu
        self.on_event = on_event
        self.log_dir = log_dir
        #: what the search minimizes (search.objective)
        self.objective = get_objective(config.objective)
        #: predicts candidates' gradient error (time to loss), fitted on the run's probes
        self.fidelity: FidelityModel | None = None
        if self.objective.checks_convergence:
            from autosync_transfer.rankers.fidelity import FidelityModel

            self.fidelity = FidelityModel()
        proposer.fidelity = self.fidelity
        proposer.launcher = self.launcher
        #: the final candidates' convergence checks (by strategy id) and failed runs
        self.checks: dict[str, Any] = {}
        self.check_errors: dict[str, str] = {}

    @property
    def warm(self) -> Simulator | None:
        """The simulator the search started from."""
        return self.proposer.warm

    @property
    def simulator(self) -> Simulator | None:
        """The proposer's simulator as it stands (``autosync``), else ``None``."""
        return self.proposer.simulator

    # -- state from the store -------------------------------------------------------------------
    def _prefix(self) -> str:
        return record_prefix(self.domain.name, self.name)

    def _check_resumable(self) -> None:
        check_resumable(self.store, self.name, self._prefix(), self.config,
                        warm=self.warm is not None, warm_source=self.warm_source,
                        warm_version=self.warm_version, launcher=self.launcher,
                        protocol=self._protocol())

    def _protocol(self) -> Protocol:
        from autosync_transfer.runtime.trial import Protocol

        return self.protocol or Protocol()

    def _start(self) -> tuple[SearchProgress, dict[str, Strategy]]:
        """Check that the stored run may continue, record its settings, read it, and bind the
        proposer to it."""
        self.store.path.parent.mkdir(parents=True, exist_ok=True)
        self._check_resumable()
        write_run_meta(self.store, self.name, {
            "domain": self.domain.name, "config": self.config.model_dump(mode="json"),
            "launcher": self.launcher, "protocol": self._protocol().model_dump(mode="json"),
            "warm_source": self.warm_source,
            "warm_version": self.warm_version,
            "cluster_spec": self.domain.cluster.to_resource_spec()})
        self.store.record_domain(self.domain)  # the domain travels with its trials
        progress, strategies = load_run(self.domain, self.store, self.name, self.config.budget)
        self.proposer.bind(self.store, self.name, progress, strategies)
        return progress, strategies

    # -- measuring -------------------------------------------------------------------------------
    def _record(self, strategy: Strategy | None, res: TrialResult, facts: dict[str, Any],
                record_id: str) -> TrialRecord:
        from autosync_transfer.dataset.collect import record_for
        from autosync_transfer.runtime.trial import Protocol

        return record_for(self.domain, strategy, res, self.protocol or Protocol(), self.launcher,
                          seed=self.config.seed, record_id=record_id,
                          machine_start=facts.pop("_start", None), machine_extra=facts)

    def _measure(self, measure: Measure, strategy: Strategy | None, record_id: str
                 ) -> TrialRecord:
        """Measure ``strategy`` as ``record_id`` and append its record to the store. An
        interruption propagates from ``measure``: nothing is appended, and a resumed run
        measures the trial again."""
        res, facts = measure(strategy, record_id)
        rec = self._record(strategy, res, facts, record_id)
        self.store.append(rec)
        return rec

    def _emit(self, progress: SearchProgress, message: str) -> None:
        progress.message = message
        if self.on_event:
            self.on_event(progress)

    # -- the loop --------------------------------------------------------------------------------
    def run(self, measure: Measure | None = None) -> SearchResult:
        """Search until the budget is spent (continuing a stored run) and return the result.

        Without ``measure`` the trials run in a pool of the search's launcher (local, emulated,
        or torchrun workers following a job queue next to the store)."""
        if measure is not None:
            return self._run(measure)
        from autosync_transfer.dataset.collect import measure_undisturbed

        runner = self.runner
        with runner.pool(self.domain, self.protocol, seed=self.config.seed, log_dir=self.log_dir,
                         workload=self.workload, state_path=self.store.path) as pool:
            def measure_in_pool(strategy: Strategy | None, record_id: str
                                ) -> tuple[TrialResult, dict[str, Any]]:
                res, start, facts = measure_undisturbed(pool, strategy, self.max_foreign_cpu,
                                                        job_id=record_id)
                # a trial elsewhere (torchrun) has no facts of this machine to record
                return res, ({**facts, "_start": start} if runner.runs_here else {})

            return self._run(measure_in_pool)

    def _run(self, measure: Measure) -> SearchResult:
        progress, strategies = self._start()
        self._references(progress, strategies, measure)
        self._rounds(progress, strategies, measure)
        self.proposer.fit(progress, strategies)
        self._check(progress, strategies)
        self._confirm(progress, strategies, measure)
        return self._result(progress, strategies)

    def _references(self, progress: SearchProgress, strategies: dict[str, Strategy],
                    measure: Measure) -> None:
        """Measure the references the run does not hold yet."""
        for name in reference_names():
            if name in progress.references:
                continue
            strategy = reference_strategy(name, self.domain)
            self._emit(progress, f"measuring reference {name}")
            rec = self._measure(measure, strategy, f"{self._prefix()}reference/{name}")
            if strategy is not None:
                strategies[rec.id] = strategy
            progress.references[name] = rec.median_s if rec.status == "ok" else None
            self._emit(progress, f"reference {name}: {_ms(rec)}")

    def _rounds(self, progress: SearchProgress, strategies: dict[str, Strategy],
                measure: Measure) -> None:
        """Rounds of proposing and measuring until the budget is spent."""
        cfg = self.config
        measured = {s.content_key for s in strategies.values()}
        history = list(strategies.values())
        while progress.done < cfg.budget:
            round_no = progress.done // cfg.per_round
            progress.round = round_no
            in_round = progress.done - round_no * cfg.per_round
            k = min(cfg.per_round - in_round, cfg.budget - progress.done)
            if self.proposer.refits_before(round_no):
                self._emit(progress, f"round {round_no}: training the simulator on "
                                     f"{len(measured)} strategies")
                self.proposer.fit(progress, strategies)
            if self.fidelity is not None:
                from autosync_transfer.search.timetoloss import fit_fidelity

                fit_fidelity(self.fidelity, progress.trials, strategies, self.domain.model)
            timed = self._timed(progress, strategies)
            self.proposer.timed = [(st, t) for st, t, _ in timed]
            picks = self.proposer.propose(round_no, k, measured, history,
                                          self._parents(timed))
            if not picks:
                raise ConfigError(f"the sampler proposes no new strategy for {self.domain.name} "
                                  f"(every candidate of round {round_no} was measured already)")
            penalty = progress.failure_penalty_s
            for s in picks:
                self._emit(progress, f"round {round_no}: measuring {s.id}")
                rec = self._measure(measure, s, f"{self._prefix()}{s.id}")
                strategies[rec.id] = s
                measured.add(s.content_key)
                history.append(s)
                progress.trials.append(rec)
                self.proposer.tell(s, rec, penalty)
                self._emit(progress, f"round {round_no}: {s.id} {_ms(rec)}")

    def _timed(self, progress: SearchProgress, strategies: dict[str, Strategy]
               ) -> list[tuple[Strategy, float, TrialRecord | None]]:
        """Every strategy measured ok in this run, builders and their fp16 variants included:
        ``(strategy, median seconds, its trial record or None for a reference)``."""
        out: list[tuple[Strategy, float, TrialRecord | None]] = []
        for name, t in progress.references.items():
            s = strategies.get(f"{self._prefix()}reference/{name}")
            if t and name != TORCH_DDP and s is not None:
                out.append((s, float(t), None))
        out += [(strategies[r.id], float(r.median_s), r) for r in progress.trials
                if r.status == "ok" and r.median_s and r.id in strategies]
        return out

    def _parents(self, timed: list[tuple[Strategy, float, TrialRecord | None]]
                 ) -> list[Strategy]:
        """The ``parents`` best strategies measured in this run, builders included, by the
        objective: step time, or step time x the estimated steps-to-target ratio (a fast
        strategy whose gradients train badly is no parent for time to loss)."""
        obj, graph = self.proposer.objective, self.domain.model
        ranked = sorted(((obj.score(t, obj.ratio(s, rec, self.fidelity, graph)), i)
                         for i, (s, t, rec) in enumerate(timed)))
        return [timed[i][0] for _, i in ranked][: self.config.parents]

    def _check(self, progress: SearchProgress, strategies: dict[str, Strategy]) -> None:
        """Time to loss: convergence runs of the lossy final candidates (stored beside the trial
        store; those stored already are not trained again)."""
        if (not self.objective.checks_convergence or not self.config.final_checks
                or self.config.lossless):  # lossless: nothing lossy can be chosen
            return
        from autosync_transfer.runtime.accuracy import ConvergenceTolerance
        from autosync_transfer.search.timetoloss import check_final, final_candidates

        if self.fidelity is not None:
            from autosync_transfer.search.timetoloss import fit_fidelity

            fit_fidelity(self.fidelity, progress.trials, strategies, self.domain.model)
        cands = final_candidates(progress, strategies, self._prefix(), self.objective,
                                 self.config.final_checks, self.fidelity, self.domain.model)
        if not cands:
            return
        self._emit(progress, f"checking convergence of {len(cands)} final candidates")
        from autosync_transfer.dataset.checks import checks_path

        self.checks, self.check_errors, _ = check_final(
            self.domain, progress, strategies, self._prefix(), self.objective,
            checks_path(self.store.path), limit=self.config.final_checks,
            rounds=self.config.final_rounds, steps=self.config.check_steps,
            seed=self.config.seed, model=self.fidelity, graph=self.domain.model,
            workload=self.workload, on_message=lambda m: self._emit(progress, m),
            tolerance=ConvergenceTolerance(max_step_ratio=self.config.max_step_ratio))
        for sid, c in self.checks.items():
            self._emit(progress, f"{sid}: {c.summary()}")

    def _ttl(self, strategies: dict[str, Strategy]) -> Callable[[TrialRecord], float] | None:
        """Time to loss: a trial's step time x its measured ratio (``inf``: a lossy strategy
        not checked, or failed); ``None`` for the step-time objective."""
        if not self.objective.checks_convergence:
            return None
        from autosync_transfer.runtime.accuracy import is_lossless

        def key(r: TrialRecord) -> float:
            s = strategies.get(r.id)
            if s is None or not r.median_s:
                return float("inf")
            if is_lossless(s):
                return float(r.median_s)
            c = self.checks.get(s.id)
            return float(r.median_s) * c.step_ratio if c is not None and c.passed else float("inf")

        return key

    def _confirm(self, progress: SearchProgress, strategies: dict[str, Strategy],
                 measure: Measure) -> None:
        """Measure the confirmation group (the best strategy found, the best lossless one when
        the best is lossy, the best builder, the best fp16 reference and torch DDP) ``confirm``
        rounds, every member once a round in an order shuffled per round (randomized
        interleaved trials), as ``confirm/<trials>/<round>-<who>``; those already stored are not
        measured again (the shuffle is seeded: a resumed run keeps the order)."""
        import random

        cfg = self.config
        if not cfg.confirm:
            return
        group = confirmation_group(progress, strategies, self.domain, self._prefix(),
                                   key=self._ttl(strategies))
        for i in range(cfg.confirm):
            order = list(group)
            random.Random(f"{cfg.seed}/{progress.done}/{i}").shuffle(order)
            for who, s in order:
                key = f"{progress.done}/{i}-{who}"
                if key in progress.confirmations:
                    continue
                name = s.id if s is not None else TORCH_DDP
                self._emit(progress, f"confirming: {who} {name} ({i + 1}/{cfg.confirm})")
                rec = self._measure(measure, s, f"{self._prefix()}confirm/{key}")
                progress.confirmations[key] = rec

    def _result(self, progress: SearchProgress, strategies: dict[str, Strategy]) -> SearchResult:
        cfg = self.config
        summary = summarize(progress.trials, progress.references, cfg.per_round,
                            progress.confirmations)
        best = None
        ok = [r for r in progress.trials if r.status == "ok" and r.median_s]
        ttl = self._ttl(strategies)
        if ttl is not None:
            ok = [r for r in ok if ttl(r) < float("inf")]
        if ok:
            best_rec = min(ok, key=ttl or (lambda r: r.median_s))  # type: ignore[arg-type,return-value]
            best = strategies.get(best_rec.id)
        if ttl is not None:
            from autosync_transfer.search.timetoloss import time_to_loss_figures

            summary = {**summary, "objective": self.objective.name,
                       **time_to_loss_figures(progress, strategies, self._prefix(), self.checks,
                                              summary, self.check_errors)}
        chosen, chosen_from = choose(summary, strategies, best, self._prefix())
        if chosen is not None and (ttl is not None or self.config.lossless) \
                and not self._counts(chosen):
            # a lossy reference that failed (or missed) its check: the faster, by time to
            # loss, of the best found that counts and the best builder
            builder = summary.get("best_builder")
            ref = strategies.get(f"{self._prefix()}reference/{builder}") if builder else None
            b_s = summary.get("best_builder_s")
            t_s = summary.get("ttl_best_s", summary.get("best_s"))
            if best is not None and t_s and (ref is None or not b_s or t_s < b_s):
                chosen, chosen_from = best, "search"
            else:
                chosen, chosen_from = ref, builder
        return SearchResult(self.domain.name, self.name, cfg, self.store.path, best, summary,
                            self.proposer.simulator, chosen, chosen_from)

    def _counts(self, strategy: Strategy) -> bool:
        """Time to loss: whether ``strategy`` may be used (lossless, or checked and passed)."""
        from autosync_transfer.runtime.accuracy import is_lossless

        if is_lossless(strategy):
            return True
        c = self.checks.get(strategy.id)
        return not self.config.lossless and c is not None and c.passed

    # -- the torchrun launcher: workers that follow a job queue -----------------------------------
    @property
    def queue_path(self) -> Path:
        """``launcher="torchrun"``: the job queue the torchrun workers follow."""
        return self._torchrun().paths(self.store.path)[0]

    @property
    def results_path(self) -> Path:
        """``launcher="torchrun"``: where rank 0 of the torchrun workers writes results."""
        return self._torchrun().paths(self.store.path)[1]

    def torchrun_command(self, cluster_file: str | None = None) -> str:
        """The command to start on every node (``launcher="torchrun"``)."""
        return self._torchrun().worker_command(self.domain, self.protocol,
                                               state_path=self.store.path,
                                               cluster_file=cluster_file,
                                               workload=self.workload, seed=self.config.seed)

    def _torchrun(self) -> Any:
        from autosync_transfer.runtime.launch import TorchrunLauncher

        return self.runner if isinstance(self.runner, TorchrunLauncher) else TorchrunLauncher()


def search(domain: str | Domain, *, budget: int = 200, method: str = "autosync",
           simulator: str | Simulator | None = None, store: str | Path | None = None,
           launcher: str | Launcher = "local", protocol: Protocol | None = None,
           trials: str | Path | None = None,
           on_event: Callable[[SearchProgress], None] | None = None,
           **settings: Any) -> SearchResult:
    """Search ``domain``'s synchronization strategies with ``budget`` real trials and return the
    :class:`SearchResult` (``autosync-transfer search``, without its printing, export and MLflow
    logging): a :class:`Searcher` of a :class:`SearchConfig`, run to the end.

    ``domain``: a catalog domain name (``"bert-B"``) or a
    :class:`~autosync_transfer.domains.domain.Domain`, e.g. your workload on your cluster
    (:func:`~autosync_transfer.domains.workload.workload_domain`; the workers run the workload
    its graph was traced from). ``method``: a name of
    :data:`~autosync_transfer.search.proposers.PROPOSERS` (``autosync``, ``random``, ``tpe``,
    ``stepsim``, ``analytical``). ``simulator``: the simulator an ``autosync`` search starts from
    and fine-tunes every round: a registry reference (``models:/NAME@ALIAS``), a domain name (its
    champion, trained on ``trials`` and registered first when it has none) or a
    :class:`~autosync_transfer.rankers.simulator.Simulator`; ``None``: a cold start.
    ``store``: the run's trial store (default: :func:`default_store_path`); a stored run is
    continued, nothing measured twice. ``launcher``: ``local`` (every worker on this machine),
    ``emulated`` (the cluster's nodes in network namespaces: needs root) or ``torchrun``, or a
    :class:`~autosync_transfer.runtime.launch.Launcher`. ``protocol``: warm-up, timed iterations
    and timeout of a trial (default ``Protocol()``). ``on_event`` is called with the
    :class:`SearchProgress` as trials finish. ``settings``: the other fields of
    :class:`SearchConfig` (``per_round``, ``candidates``, ``seed``, ``objective``, ``lossless``,
    ``confirm``, ...).

    The strategy to use is ``result.exportable(domain).strategy`` (a lossy one only with a
    passed convergence check).
    """
    from pydantic import ValidationError

    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.domains.workload import workload_of
    from autosync_transfer.errors import format_pydantic_error

    dom = get_domain(domain) if isinstance(domain, str) else domain
    try:
        config = SearchConfig(method=method, budget=budget, **settings)
    except ValidationError as e:
        raise ConfigError(format_pydantic_error(e, "search settings")) from e
    warm = source = version = None
    if simulator is not None:
        if not PROPOSERS[config.method].warm_starts:
            words = " or ".join(repr(m) for m, p in PROPOSERS.items() if p.warm_starts)
            raise ConfigError(f"simulator needs method={words}, got method={config.method!r}")
        if isinstance(simulator, str):
            from autosync_transfer.search.warm import warm_simulator, warm_version

            warm, lineage = warm_simulator(simulator, trials=trials, seed=config.seed,
                                           max_epochs=config.max_epochs)
            source, version = simulator, warm_version(lineage)
        else:
            warm = simulator
    name = run_name(config, warm is not None)
    path = Path(store) if store is not None else default_store_path(dom.name, name)
    searcher = Searcher(dom, path, config, warm=warm, warm_source=source, warm_version=version,
                        launcher=launcher, workload=workload_of(dom)[0], protocol=protocol,
                        on_event=on_event, log_dir=path.parent / "logs" / name)
    return searcher.run()


def _ms(rec: TrialRecord) -> str:
    return f"{rec.median_s * 1000:.1f} ms" if rec.status == "ok" and rec.median_s else rec.status
