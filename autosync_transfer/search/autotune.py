"""The search room's side of autotuning inside the job: a simulator proposes the candidates,
and every strategy the job tried becomes a trial in a store (so the job's own steps are training
data for the simulator).

    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.search.autotune import SimulatorProposer, TrialRecorder

    cfg = AutotuneConfig(candidates=SimulatorProposer("models:/autosync-bert-B@champion", k=4),
                         on_trial=TrialRecorder("trials/my-job.jsonl"))
    model = DistributedModel(net, None, cluster, autotune=cfg)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.autotune import AutotuneTrial, is_lossless
from autosync_transfer.strategies.types import Strategy

__all__ = ["SimulatorProposer", "TrialRecorder", "AUTOTUNE_LAUNCHER"]

log = logging.getLogger(__name__)

#: builders every autotuning job tries besides the simulator's picks: the DDP-equivalent
#: strategy (25 MB buckets) and one all-reduce group
DEFAULT_BASELINES: tuple[str, ...] = ("ddp", "all_reduce")

#: the ``launcher`` of trial records written from a job's autotuning steps
AUTOTUNE_LAUNCHER = "autotune"

#: sampled strategies scored at a time under a proposal's time limit
PROPOSAL_BATCH = 50


class SimulatorProposer:
    """Autotune candidates: ``proposer(graph, cluster)`` is the ``k`` strategies a simulator ranks
    fastest among the hand-optimized builders and ``candidates`` sampled ones (lossless only
    unless ``lossless=False``), then the ``baselines`` builders not among them. ``simulator``: a Simulator, a registry reference (loaded on the
    first call, i.e. by rank 0 at setup), or ``None`` for the step-time simulator.
    ``launcher``: what the job runs with; the step-simulator physics uses the cluster's
    calibration made with it (``None``: the simulator's own ``launcher``, by default any
    calibration, a non-emulated one preferred: a job runs on a real cluster)."""

    def __init__(self, simulator: Any = None, *, k: int = 4, candidates: int = 500, seed: int = 0,
                 lossless: bool = True, preset: str = "dataset",
                 baselines: tuple[str, ...] = DEFAULT_BASELINES,
                 launcher: str | None = None) -> None:
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        if candidates < 0:
            raise ConfigError(f"candidates must be >= 0, got {candidates}")
        self.simulator = simulator
        self.launcher = launcher
        self.k = k
        self.candidates = candidates
        self.seed = seed
        self.lossless = lossless
        self.preset = preset
        from autosync_transfer.strategies.builders import BUILDERS

        unknown = [b for b in baselines if b not in BUILDERS]
        if unknown:
            raise ConfigError(f"baselines: unknown builder {unknown[0]!r} (known: "
                              f"{', '.join(BUILDERS)})")
        self.baselines = tuple(baselines)
        #: sampled strategies the last call ranked (fewer than ``candidates`` under a limit)
        self.scored = 0

    def __call__(self, graph: ModelGraph, cluster: Cluster, *,
                 time_limit_s: float | None = None) -> list[Strategy]:
        """The candidates. ``time_limit_s``: the builders are ranked in any case, then sampled
        strategies in batches of :data:`PROPOSAL_BATCH` while the next batch (timed as the
        last one) fits in the limit; the ranking is over what was scored (:attr:`scored`)."""
        import time

        t0 = time.perf_counter()
        from autosync_transfer.rankers.simulator import Simulator
        from autosync_transfer.strategies.builders import BUILDERS, build
        from autosync_transfer.strategies.sampler import StrategySampler
        from autosync_transfer.strategies.sampler import preset as sampler_preset

        simulator = self.simulator
        if isinstance(simulator, str):
            from autosync_transfer.registry.models import load_simulator

            simulator = self.simulator = load_simulator(simulator)
        domain = Domain(name=f"{graph.name}-{cluster.name}", model=graph, cluster=cluster)
        builders = [build(b, domain) for b in BUILDERS]
        ranker = simulator if simulator is not None else Simulator("stepsim")
        if self.launcher is not None:
            ranker = ranker.with_launcher(self.launcher)
        parts = [np.asarray(ranker.score(builders, domain), dtype=float)]
        sampler = StrategySampler(domain, sampler_preset(self.preset), seed=self.seed)
        batches: list[Any] = []  # sampled batches (strategies built when indexed)
        n_sampled = 0
        step = self.candidates if time_limit_s is None else PROPOSAL_BATCH
        last = 0.0
        while n_sampled < self.candidates:
            if time_limit_s is not None and time.perf_counter() - t0 + last > time_limit_s:
                break
            tb = time.perf_counter()
            more = sampler.sample_batch(min(step, self.candidates - n_sampled))
            parts.append(np.asarray(ranker.score(more, domain), dtype=float))
            batches.append(more)
            n_sampled += len(more)
            last = time.perf_counter() - tb
        self.scored = n_sampled
        scores = np.concatenate(parts)
        starts = np.cumsum([len(builders)] + [len(b) for b in batches])

        def strategy(i: int) -> Strategy:
            if i < len(builders):
                return builders[i]
            j = int(np.searchsorted(starts, i, side="right")) - 1
            return batches[j][i - int(starts[j])]

        out: list[Strategy] = []
        seen: set[str] = set()
        for i in np.lexsort((np.arange(scores.size), scores)):
            s = strategy(int(i))
            if (self.lossless and not is_lossless(s)) or s.fingerprint in seen:
                continue
            seen.add(s.fingerprint)
            out.append(s)
            if len(out) == self.k:
                break
        # the job's own baselines are always tried too: the lock-in is never slower than what
        # the job measured of them (a simulator that ranks them low on this cluster is outvoted)
        for name in self.baselines:
            s = build(name, domain)
            if s.fingerprint not in seen and (is_lossless(s) or not self.lossless):
                seen.add(s.fingerprint)
                out.append(s)
        log.info("autotune candidates for %s: %s", domain.name, ", ".join(s.id for s in out))
        return out


class TrialRecorder:
    """An ``on_trial`` callback: appends every strategy the job tried as a trial record
    (launcher :data:`AUTOTUNE_LAUNCHER`, the job's step times, max over ranks) to ``store``
    (a :class:`~autosync_transfer.dataset.store.TrialStore` or its path)."""

    def __init__(self, store: Any) -> None:
        from autosync_transfer.dataset.store import TrialStore

        self.store = store if isinstance(store, TrialStore) else TrialStore(Path(store))
        self.records: list[Any] = []

    def __call__(self, trial: AutotuneTrial) -> None:
        from autosync_transfer.dataset.store import TrialRecord, machine_info

        domain = Domain(name=f"{trial.graph.name}-{trial.cluster.name}", model=trial.graph,
                        cluster=trial.cluster)
        record = TrialRecord.from_result(domain=domain, strategy=trial.strategy,
                                         result=trial.result, protocol=trial.protocol,
                                         launcher=AUTOTUNE_LAUNCHER, machine=machine_info())
        self.store.append(record)
        self.records.append(record)
