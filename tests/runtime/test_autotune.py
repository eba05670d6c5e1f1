"""Autotuning inside the job: candidates tried a few steps each, rank-consistent switches,
every tried strategy reported, the fastest locked in, training exact throughout (lossless
candidates), the choice resumable from the sync state, re-tuning on a schedule."""

from __future__ import annotations

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.testing.models import TinyNet, tiny_batches

STEPS, PER_CANDIDATE, LR = 20, 3, 0.5


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def _candidates(graph, cluster):  # noqa: ANN001, ANN202 - a proposer: (graph, cluster) -> strategies
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.strategies.builders import build

    d = Domain(name="tiny-t", model=graph, cluster=cluster)
    return [build("ps", d), build("all_reduce", d, compressor="powersgd"), build("ps_lb", d),
            build("ps", d)]  # a duplicate and a lossy one: both skipped


def _worker(rank: int, world: int) -> dict:
    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel

    tried: list = []
    torch.manual_seed(0)
    net = TinyNet()
    cfg = AutotuneConfig(candidates=_candidates, steps_per_candidate=PER_CANDIDATE,
                         on_trial=tried.append, retune_every=4)
    model = DistributedModel(net, None, _cluster(), autotune=cfg)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    kinds = []
    for step in tiny_batches(STEPS, world):
        opt.zero_grad()
        model(*step[rank]).backward()
        opt.step()
        kinds.append(model.strategy.kind)
    state = model.sync_state_dict()
    tuner = model._tuner

    # a resumed job: the locked choice is installed, no tuning
    resumed = DistributedModel(TinyNet(), None, _cluster(),
                               autotune=AutotuneConfig(candidates=_candidates,
                                                       steps_per_candidate=PER_CANDIDATE))
    resumed.load_sync_state_dict(state)
    resumed.load_state_dict(model.state_dict())
    resumed(*tiny_batches(1, world)[0][rank]).backward()
    return {
        "params": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "kinds": kinds,
        "tried": [(t.strategy.kind, len(t.result.iteration_times_s), t.round) for t in tried],
        "trial_times": [t.result.iteration_times_s for t in tuner.trials],
        "locked": tuner.locked.fingerprint, "locked_state": state["autotune"]["locked"] is not None,
        "resumed_strategy": resumed.strategy.fingerprint, "resumed_tuning": resumed._tuner.tuning,
    }


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return spawn_local(_worker, 2, timeout_s=240)


def test_every_candidate_is_tried_and_reported_on_rank_0(runs: list[dict]) -> None:
    # round 0: the initial (DDP builder), ps, ps_lb (lossy and duplicate skipped); then locked for
    # 4 steps, round 1 starts with the locked strategy
    tried = runs[0]["tried"]
    assert [k for k, _, r in tried if r == 0] == ["ddp", "ps", "ps_lb"]
    assert all(n == PER_CANDIDATE - 1 for _, n, _ in tried)  # the first step is a warm-up
    assert any(r == 1 for _, _, r in tried)
    assert runs[1]["tried"] == []  # reported on rank 0 only


def test_ranks_switch_together_and_lock_the_same_strategy(runs: list[dict]) -> None:
    assert runs[0]["kinds"] == runs[1]["kinds"]
    # the kind each step ran with (switches at step boundaries), then the locked one
    assert runs[0]["kinds"][:3 * PER_CANDIDATE] == \
        ["ddp"] * PER_CANDIDATE + ["ps"] * PER_CANDIDATE + ["ps_lb"] * PER_CANDIDATE
    assert runs[0]["locked"] == runs[1]["locked"]
    assert runs[0]["trial_times"] == runs[1]["trial_times"]  # max over ranks: identical


def test_training_is_exact_while_tuning(runs: list[dict]) -> None:
    torch.manual_seed(0)
    ref = TinyNet()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for step in tiny_batches(STEPS, 2):
        opt.zero_grad()
        ref(torch.cat([b[0] for b in step]), torch.cat([b[1] for b in step])).backward()
        opt.step()
    for rank in range(2):
        for k, v in ref.state_dict().items():
            assert torch.allclose(runs[rank]["params"][k], v, atol=1e-5, rtol=1e-4), (rank, k)


def test_the_locked_choice_resumes_without_tuning(runs: list[dict]) -> None:
    for r in runs:
        assert r["locked_state"]
        assert r["resumed_strategy"] == r["locked"] and not r["resumed_tuning"]


def test_config_is_checked() -> None:
    from pydantic import ValidationError

    from autosync_transfer.runtime.autotune import AutotuneConfig, is_lossless
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.testing.models import tiny_net_graph

    with pytest.raises(ValidationError, match="steps_per_candidate"):
        AutotuneConfig(steps_per_candidate=1)
    cands = _candidates(tiny_net_graph(), _cluster())
    assert [is_lossless(s) for s in cands] == [True, False, True, True]
    with pytest.raises(ConfigError, match="sync_on must be one of"):
        DistributedModel(TinyNet(), None, sync_on="later")
