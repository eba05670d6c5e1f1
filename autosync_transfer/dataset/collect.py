"""Collection: measure many strategies of one domain into an append-only trial store.

The plan of a collection is deterministic for a seed: the hand-optimized builders and torch DDP
first, then strategies from the sampler. A collection that is interrupted picks up where it
stopped (trial ids already in the store are skipped). Every ``reference_every`` trials a fixed
reference strategy is re-measured and stored with ``reference=True``: its drift tells noisy
periods apart.

Every trial also records the CPU share that processes outside the collection took while it ran
(``machine.foreign_cpu``, :mod:`autosync_transfer.runtime.cpuwatch`). A trial disturbed beyond
``max_foreign_cpu`` is measured again once the machine is quiet; if it stays disturbed after
``DISTURBED_ATTEMPTS`` attempts it is stored with ``machine.disturbed = True`` (the loader leaves
such trials out by default).

:func:`remeasure` measures such trials again: those stored as disturbed, and those measured
before the disturbance check existed (no ``machine.foreign_cpu``). The new record names the old
one in ``supersedes``; the store keeps both, the loader uses the new one once it is undisturbed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from autosync_transfer.dataset.store import TrialRecord, TrialStore, machine_info
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.launch import Launcher, as_launcher
from autosync_transfer.runtime.trial import Protocol, TrialPool, TrialResult
from autosync_transfer.strategies.types import TORCH_DDP, Strategy

__all__ = ["CollectProgress", "planned_strategies", "record_for", "collect", "REFERENCE_BUILDER",
           "TORCH_DDP", "measure_undisturbed", "MAX_FOREIGN_CPU", "REMEASURE_REASONS",
           "remeasure_candidates", "remeasure", "RESUME_PROTOCOL_KEYS", "check_same_measurement"]

log = logging.getLogger(__name__)

#: the strategy re-measured periodically as a drift reference
REFERENCE_BUILDER = "ddp"


@dataclass
class CollectProgress:
    done: int
    target: int
    last: TrialRecord | None
    best_s: float | None
    failures: int
    #: (re-measurement) trials that need it but were measured with another launcher or protocol
    skipped: int = 0


def planned_strategies(domain: Domain, sampler: str, seed: int, n: int,
                       preset: str = "dataset") -> Iterator[Strategy | str]:
    """The collection order: builders, torch DDP, then (``sampler='random'``) sampled strategies."""
    from autosync_transfer.strategies.builders import BUILDERS, build

    if sampler not in ("random", "builders"):
        raise ConfigError(f"--sampler must be 'random' or 'builders', got {sampler!r}")
    for name in BUILDERS:
        yield build(name, domain)
    yield TORCH_DDP
    if sampler == "random":
        from autosync_transfer.strategies.sampler import StrategySampler
        from autosync_transfer.strategies.sampler import preset as sampler_preset

        yield from StrategySampler(domain, sampler_preset(preset), seed=seed).sample_n(n)


def record_for(domain: Domain, strategy: Strategy | None, result: TrialResult, protocol: Protocol,
               launcher: str, *, seed: int, record_id: str, reference: bool = False,
               machine_start: dict | None = None, machine_extra: dict | None = None,
               supersedes: str | None = None) -> TrialRecord:
    """The trial record of one result, with the analytical estimate and the machine's load."""
    estimated = None
    if strategy is not None:
        from autosync_transfer.errors import StrategyValidationError
        from autosync_transfer.rankers.costmodel import estimate

        try:
            estimated = estimate(strategy, domain).total_s
        except StrategyValidationError:  # it does not fit the domain: a failed trial, no estimate
            estimated = None
    machine = machine_info()
    if machine_start is not None:
        machine["loadavg_1m_start"] = machine_start.get("loadavg_1m")
    if machine_extra:
        machine.update(machine_extra)
    return TrialRecord.from_result(
        domain=domain, strategy=strategy, result=result, protocol=protocol, launcher=launcher,
        machine=machine, seed=seed, reference=reference, estimated_sync_s=estimated,
        record_id=record_id, supersedes=supersedes,
    )


#: attempts of a trial whose failure is the environment's (workers did not start, ...)
INFRASTRUCTURE_ATTEMPTS = 3


#: measurements of a trial disturbed by foreign CPU load before it is stored as disturbed
DISTURBED_ATTEMPTS = 3
#: default tolerated foreign CPU share of the machine during a trial (a quiet machine shows
#: < 1 %; 14.6 % made a bert-12l-A reference 24 % slower)
MAX_FOREIGN_CPU = 0.05
#: longest wait for a quiet machine before measuring a disturbed trial again, seconds
QUIET_WAIT_S = 300.0


def _run_with_retries(pool: TrialPool, strategy: Strategy | None, job_id: str | None = None
                      ) -> TrialResult:
    """Measure; a failure of the environment is retried and, if it persists, stops the collection
    without recording anything against the strategy. An interruption (``KeyboardInterrupt``,
    :class:`~autosync_transfer.errors.Interrupted`) is not retried: it propagates, and nothing
    is recorded for the trial in flight."""
    for _ in range(INFRASTRUCTURE_ATTEMPTS):
        res = pool.run(strategy) if job_id is None else pool.run(strategy, job_id=job_id)
        if not res.infrastructure:
            return res
        log.warning("trial environment failed, retrying: %s", res.error)
    raise ConfigError(f"the trial workers fail to run ({INFRASTRUCTURE_ATTEMPTS} attempts): {res.error}")


def measure_undisturbed(pool: TrialPool, strategy: Strategy | None, max_foreign_cpu: float,
                        *, job_id: str | None = None) -> tuple[TrialResult, dict, dict]:
    """Measure ``strategy``; while foreign CPU load disturbs the measurement, wait for a quiet
    machine and measure again. Returns (result, machine facts at the start, disturbance facts).

    On a launcher whose trials do not run on this machine only (``runs_here`` False: torchrun)
    the CPU of this machine says nothing: the trial is measured once, as ``job_id``."""
    from autosync_transfer.runtime.cpuwatch import CpuWatch, wait_until_quiet

    launcher = getattr(pool, "launcher", None)
    if not getattr(launcher, "runs_here", True):
        start = machine_info()
        return _run_with_retries(pool, strategy, job_id), start, {}

    facts: dict = {}
    waited = 0.0
    for attempt in range(1, DISTURBED_ATTEMPTS + 1):
        start = machine_info()
        with CpuWatch() as watch:
            res = _run_with_retries(pool, strategy)
        facts = {"foreign_cpu": None if watch.foreign is None else round(watch.foreign, 4),
                 "attempts": attempt, "max_foreign_cpu": max_foreign_cpu}
        if waited:
            facts["waited_quiet_s"] = round(waited, 1)
        if watch.foreign is None or watch.foreign <= max_foreign_cpu or res.status != "ok":
            return res, start, facts
        log.warning("trial disturbed (foreign CPU %.0f%% of the machine), measuring again when quiet",
                    watch.foreign * 100)
        w, _ = wait_until_quiet(max_foreign_cpu, max_wait_s=QUIET_WAIT_S)
        waited += w
    facts["disturbed"] = True
    return res, start, facts


#: the protocol settings a stored collection or search run continues only with
RESUME_PROTOCOL_KEYS: tuple[str, ...] = ("warmup", "iters", "timeout_s")


def check_same_measurement(records: Iterator[TrialRecord] | list[TrialRecord], *,
                           protocol: Protocol, launcher: str, where: str) -> None:
    """Trials continue a stored collection or run only as they were measured: with the same
    ``launcher`` and the same :data:`RESUME_PROTOCOL_KEYS` of ``protocol`` as its last stored
    trial (``records``, in store order; re-measurements aside). One line naming the setting,
    the stored and the given value (:class:`ConfigError`), else nothing."""
    last: TrialRecord | None = None
    for r in records:
        if r.supersedes is None:
            last = r
    if last is None:
        return
    want = protocol.model_dump(mode="json")
    stored = [("launcher", last.launcher, launcher)]
    stored += [(k, last.protocol[k], want[k]) for k in RESUME_PROTOCOL_KEYS if k in last.protocol]
    for key, old, new in stored:
        if old != new and not (isinstance(old, (int, float)) and isinstance(new, (int, float))
                               and float(old) == float(new)):
            raise ConfigError(f"{where} was measured with {key}={old!r}, not {new!r}; continue "
                              f"it with the same settings or use another store")


def _existing(domain: Domain, store: TrialStore, store_path: str | Path) -> dict[str, TrialRecord]:
    """The store's records of ``domain`` by id; records of another model or cluster under the
    same domain name are a :class:`ConfigError`."""
    existing = {r.id: r for r in store.records() if r.domain == domain.name}
    for r in existing.values():
        if (r.model_fingerprint, r.cluster_fingerprint) != (domain.model.fingerprint,
                                                             domain.cluster.fingerprint):
            raise ConfigError(
                f"store {str(store_path)!r} holds trials of {domain.name} measured on a different "
                f"{'model' if r.model_fingerprint != domain.model.fingerprint else 'cluster'} "
                f"(trial {r.id!r}); use another --store"
            )
    return existing


def collect(
    domain: Domain,
    store_path: str | Path,
    *,
    trials: int,
    launcher: str | Launcher = "emulated",
    sampler: str = "random",
    preset: str = "dataset",
    seed: int = 0,
    protocol: Protocol | None = None,
    reference_every: int = 25,
    on_trial: Callable[[CollectProgress], None] | None = None,
    log_dir: str | Path | None = None,
    max_foreign_cpu: float = MAX_FOREIGN_CPU,
    workload: str | None = None,
) -> CollectProgress:
    """Measure until the store holds ``trials`` (non-reference) trials of ``domain``.

    ``launcher``: a name (``emulated``, ``local``, ``torchrun``) or a
    :class:`~autosync_transfer.runtime.launch.Launcher`; ``workload``: the spec the workers
    import (default: the zoo model named like ``domain.model``)."""
    runner = as_launcher(launcher)
    launcher = runner.name
    if not 0.0 < max_foreign_cpu <= 1.0:
        raise ConfigError(f"max_foreign_cpu must be in (0, 1], got {max_foreign_cpu}")
    if trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {trials}")
    if reference_every < 0:
        raise ConfigError(f"reference_every must be >= 0, got {reference_every}")
    protocol = protocol or Protocol()
    store = TrialStore(store_path)
    existing = _existing(domain, store, store_path)
    check_same_measurement(existing.values(), protocol=protocol, launcher=launcher,
                           where=f"store {str(store_path)!r} of {domain.name}")
    firsts = [r for r in existing.values() if not r.reference and r.supersedes is None]
    done = len(firsts)
    refs = sum(1 for r in existing.values() if r.reference)
    failures = sum(1 for r in firsts if r.status != "ok")
    oks = [r.median_s for r in firsts if r.status == "ok" and r.median_s]
    best = min(oks) if oks else None
    last: TrialRecord | None = None
    store.write_meta({
        "domain": domain.name,
        "cluster_spec": domain.cluster.to_resource_spec(),
        "model_config": domain.model.config,
        "protocol": protocol.model_dump(),
        "launcher": launcher,
        "sampler": sampler,
        "sampler_preset": preset,
        "seed": seed,
        "reference_strategy": REFERENCE_BUILDER,
        "reference_every": reference_every,
    })
    store.record_domain(domain)  # the domain travels with its trials (no catalog needed)
    progress = CollectProgress(done, trials, None, best, failures)
    if done >= trials:
        return progress
    from autosync_transfer.strategies.builders import build

    reference = build(REFERENCE_BUILDER, domain)
    # sampled candidates needed: enough to reach the target even if every builder is already in
    plan = planned_strategies(domain, sampler, seed, max(trials, 1), preset)
    with runner.pool(domain, protocol, seed=seed, log_dir=log_dir, workload=workload,
                     state_path=store_path) as pool:
        since_ref = done % reference_every if reference_every else 0
        for item in plan:
            if done >= trials:
                break
            strategy = None if item == TORCH_DDP else item
            assert strategy is None or isinstance(strategy, Strategy)
            rid = f"{domain.name}/{TORCH_DDP if strategy is None else strategy.id}"
            if rid in existing:
                continue
            if reference_every and (since_ref >= reference_every or refs == 0):
                ref_id = f"{domain.name}/reference-{refs}"
                res, start, facts = measure_undisturbed(pool, reference, max_foreign_cpu,
                                                        job_id=ref_id)
                ref_rec = record_for(domain, reference, res, protocol, launcher, seed=seed,
                                     record_id=ref_id, reference=True,
                                     machine_start=start, machine_extra=facts)
                store.append(ref_rec)
                refs += 1
                since_ref = 0
            res, start, facts = measure_undisturbed(pool, strategy, max_foreign_cpu, job_id=rid)
            rec = record_for(domain, strategy, res, protocol, launcher, seed=seed, record_id=rid,
                             machine_start=start, machine_extra=facts)
            if store.append(rec):
                done += 1
                since_ref += 1
                if rec.status != "ok":
                    failures += 1
                elif rec.median_s is not None and (best is None or rec.median_s < best):
                    best = rec.median_s
            last = rec
            progress = CollectProgress(done, trials, last, best, failures)
            if on_trial:
                on_trial(progress)
    return progress


#: why a stored trial is measured again: ``unchecked`` (no foreign-CPU record) or ``disturbed``
#: (stored as disturbed, or with more foreign CPU than the threshold now in force)
REMEASURE_REASONS: tuple[str, ...] = ("unchecked", "disturbed")


def _needs_remeasure(r: TrialRecord, reasons: set[str], max_foreign_cpu: float) -> bool:
    foreign = r.machine.get("foreign_cpu")
    if "disturbed" in reasons and (r.machine.get("disturbed") or (
            isinstance(foreign, (int, float)) and foreign > max_foreign_cpu)):
        return True
    return "unchecked" in reasons and r.status == "ok" and "foreign_cpu" not in r.machine


def remeasure_candidates(records: dict[str, TrialRecord] | list[TrialRecord],
                         reasons: set[str] | tuple[str, ...],
                         max_foreign_cpu: float = MAX_FOREIGN_CPU) -> list[TrialRecord]:
    """The first measurements of a collection among ``records`` (not references, not
    re-measurements, not a search run's trials) that need measuring again for one of
    ``reasons`` and that no valid re-measurement supersedes yet
    (:func:`~autosync_transfer.dataset.loader.valid_remeasurement`, the loader's rule), in store
    order."""
    from autosync_transfer.dataset.loader import valid_remeasurement

    reasons = set(reasons)
    bad = sorted(reasons - set(REMEASURE_REASONS))
    if bad:
        raise ConfigError(f"--remeasure must be among {', '.join(REMEASURE_REASONS)}, got {bad[0]!r}")
    recs = list(records.values()) if isinstance(records, dict) else list(records)
    replaced = {r.supersedes for r in recs
                if r.supersedes and valid_remeasurement(r.status, r.machine)}
    return [r for r in recs if not r.reference and r.supersedes is None and r.id not in replaced
            and not r.id.startswith(f"{r.domain}/search/")  # a search run's store is its state
            and _needs_remeasure(r, reasons, max_foreign_cpu)]


def remeasure(
    domain: Domain,
    store_path: str | Path,
    *,
    reasons: set[str] | tuple[str, ...] = REMEASURE_REASONS,
    launcher: str | Launcher = "emulated",
    seed: int = 0,
    protocol: Protocol | None = None,
    on_trial: Callable[[CollectProgress], None] | None = None,
    log_dir: str | Path | None = None,
    max_foreign_cpu: float = MAX_FOREIGN_CPU,
    limit: int | None = None,
    workload: str | None = None,
) -> CollectProgress:
    """Measure again the stored trials of ``domain`` that need it (:func:`remeasure_candidates`,
    at most ``limit``), with the disturbance check, and append each new measurement with
    ``supersedes`` = the old record's id. Only trials measured with this ``launcher`` and the
    same warm-up and timed iterations as ``protocol`` are measured again; the others are
    counted in ``skipped``. A drift reference is measured at the start. Interrupted, it resumes
    with the trials still to do."""
    from autosync_transfer.dataset.loader import strategy_from_record
    from autosync_transfer.runtime.trial import Protocol as _Protocol
    from autosync_transfer.strategies.builders import build

    runner = as_launcher(launcher)
    launcher = runner.name
    if not 0.0 < max_foreign_cpu <= 1.0:
        raise ConfigError(f"max_foreign_cpu must be in (0, 1], got {max_foreign_cpu}")
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    protocol = protocol or _Protocol()
    store = TrialStore(store_path)
    existing = _existing(domain, store, store_path)
    want = protocol.model_dump(mode="json")
    needed = remeasure_candidates(existing, reasons, max_foreign_cpu)
    alike = [r for r in needed if r.launcher == launcher
             and all(r.protocol.get(k) == want[k] for k in ("warmup", "iters"))]
    todo, skipped = alike[:limit], len(needed) - len(alike)
    progress = CollectProgress(0, len(todo), None, None, 0, skipped)
    if not todo:
        return progress
    refs = sum(1 for r in existing.values() if r.reference)
    attempts: dict[str, int] = {}
    for r in existing.values():
        if r.supersedes:
            attempts[r.supersedes] = attempts.get(r.supersedes, 0) + 1
    reference = build(REFERENCE_BUILDER, domain)
    with runner.pool(domain, protocol, seed=seed, log_dir=log_dir, workload=workload,
                     state_path=store_path) as pool:
        ref_id = f"{domain.name}/reference-{refs}"
        res, start, facts = measure_undisturbed(pool, reference, max_foreign_cpu, job_id=ref_id)
        store.append(record_for(domain, reference, res, protocol, launcher, seed=seed,
                                record_id=ref_id, reference=True,
                                machine_start=start, machine_extra=facts))
        for old in todo:
            strategy = (None if old.strategy is None
                        else strategy_from_record(old.strategy, domain.model))
            n = attempts.get(old.id, 0) + 1
            attempts[old.id] = n
            res, start, facts = measure_undisturbed(pool, strategy, max_foreign_cpu,
                                                    job_id=f"{old.id}@{n}")
            rec = record_for(domain, strategy, res, protocol, launcher, seed=old.seed,
                             record_id=f"{old.id}@{n}", machine_start=start, machine_extra=facts,
                             supersedes=old.id)
            if not store.append(rec):  # another process measured it meanwhile
                continue
            failures = progress.failures + (rec.status != "ok")
            best = progress.best_s
            if rec.status == "ok" and rec.median_s is not None and (best is None or rec.median_s < best):
                best = rec.median_s
            progress = CollectProgress(progress.done + 1, len(todo), rec, best, failures, skipped)
            if on_trial:
                on_trial(progress)
    return progress
