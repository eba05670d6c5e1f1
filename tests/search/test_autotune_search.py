"""The search side of autotuning: a simulator proposes lossless candidates, and every strategy
a job tried is appended to a trial store."""

from __future__ import annotations

import pytest

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.autotune import AutotuneTrial, is_lossless
from autosync_transfer.runtime.trial import Protocol, TrialResult
from autosync_transfer.testing.models import tiny_net_graph


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def test_simulator_proposes_k_distinct_lossless_candidates() -> None:
    from autosync_transfer.search.autotune import SimulatorProposer

    graph = tiny_net_graph()
    got = SimulatorProposer(k=3, candidates=50, seed=1, baselines=())(graph, _cluster())
    assert len(got) == 3 and len({s.fingerprint for s in got}) == 3
    assert all(is_lossless(s) for s in got)
    assert SimulatorProposer(k=3, candidates=50, seed=1, baselines=())(graph, _cluster()) == got
    assert len(SimulatorProposer(k=40, candidates=50, seed=1, lossless=False,
                                 baselines=())(graph, _cluster())) == 40


def test_a_time_limit_ranks_the_builders_and_what_was_sampled_by_then() -> None:
    """Under ``time_limit_s`` the builders are ranked in any case and sampled strategies in
    batches while the next fits: no time ranks the builders alone, ample time every sample
    (the same picks as without a limit: the batches continue one stream)."""
    from autosync_transfer.search.autotune import SimulatorProposer
    from autosync_transfer.strategies.builders import BUILDERS

    graph = tiny_net_graph()
    p = SimulatorProposer(k=3, candidates=120, seed=1, baselines=())
    unlimited = p(graph, _cluster())
    assert p.scored == 120
    none = p(graph, _cluster(), time_limit_s=0.0)
    assert p.scored == 0 and len(none) == 3
    assert all(s.id.split("-")[0] in BUILDERS for s in none)
    assert p(graph, _cluster(), time_limit_s=60.0) == unlimited and p.scored == 120


def test_the_jobs_baselines_are_always_candidates() -> None:
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.search.autotune import SimulatorProposer

    graph = tiny_net_graph()
    picks = SimulatorProposer(k=3, candidates=50, seed=1, baselines=())(graph, _cluster())
    got = SimulatorProposer(k=3, candidates=50, seed=1)(graph, _cluster())
    assert got[:3] == picks  # the simulator's picks first, in its order
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.strategies.builders import build

    domain = Domain(name="tiny-c", model=graph, cluster=_cluster())
    # the same synchronization counts once (on a tiny model ddp's one bucket is all_reduce)
    assert {build(b, domain).fingerprint for b in ("ddp", "all_reduce")} <= \
        {s.fingerprint for s in got}
    assert len({s.fingerprint for s in got}) == len(got) <= 5
    with pytest.raises(ConfigError, match="baselines: unknown builder 'nope'"):
        SimulatorProposer(baselines=("nope",))


def test_the_lightning_strategy_samples_what_the_tuning_budget_can_try() -> None:
    """The job waits for the proposal: its sampled strategies scale with the candidates the
    budget can try (100 each), within the strategy's ``candidates`` and 500."""
    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.search.lightning import PROPOSAL_SAMPLES, AutoSyncStrategy

    graph, cluster = tiny_net_graph(), _cluster()
    strategy = AutoSyncStrategy(None, cluster, autotune=AutotuneConfig())
    cfg = AutotuneConfig(planned_steps=300)  # one compared, one screened
    fit, _, _, screen = cfg.schedule(cfg.max_candidates)
    assert (fit, screen) == (1, 1)
    proposer = strategy.autotune_candidates(graph, cluster, tries=fit + screen)
    assert proposer.candidates == 2 * PROPOSAL_SAMPLES == 200
    assert strategy.autotune_candidates(graph, cluster, tries=8).candidates == 500
    assert strategy.autotune_candidates(graph, cluster).candidates == 500  # no budget known
    few = AutoSyncStrategy(None, cluster, candidates=150, autotune=AutotuneConfig())
    assert few.autotune_candidates(graph, cluster, tries=3).candidates == 150


def test_trial_recorder_appends_the_jobs_steps_as_trials(tmp_path) -> None:
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.search.autotune import AUTOTUNE_LAUNCHER, SimulatorProposer, TrialRecorder

    graph = tiny_net_graph()
    strategy = SimulatorProposer(k=1, candidates=10)(graph, _cluster())[0]
    trial = AutotuneTrial(strategy=strategy, result=TrialResult(status="ok",
                                                                iteration_times_s=[0.2, 0.1, 0.3]),
                          protocol=Protocol(warmup=1, iters=3), first_step=4, round=0,
                          graph=graph, cluster=_cluster())
    TrialRecorder(tmp_path / "trials.jsonl")(trial)
    records = list(TrialStore(tmp_path / "trials.jsonl").records())
    assert len(records) == 1
    r = records[0]
    assert r.launcher == AUTOTUNE_LAUNCHER and r.strategy_id == strategy.id
    assert r.median_s == 0.2 and r.domain == "tinynet-t" and r.status == "ok"
