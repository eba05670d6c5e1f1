"""Autotuning inside the job: candidates compared with torch DDP in interleaved rounds of a few
steps each, rank-consistent switches, every tried strategy reported, a verdict locked in,
training exact throughout (lossless candidates), the choice and its record resumable from the
sync state, re-tuning on a schedule, a budget that can skip tuning."""

from __future__ import annotations

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.testing.models import TinyNet, tiny_batches

STEPS, PER_CANDIDATE, ROUNDS, LR = 60, 3, 3, 0.5


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


def _ps_only(graph, cluster):  # noqa: ANN001, ANN202 - a proposer of one candidate
    return _candidates(graph, cluster)[:1]


def _costly(rank: int, world: int, share: float | None, drop: float | None = None) -> tuple:
    """A candidate made 30 ms per step slower than DDP, 1,000 planned steps (a budget of 50):
    what the tuning round ran and locked in (``drop``: ``drop_slower``)."""
    import time

    from autosync_transfer.runtime.autotune import TORCH_DDP, AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel

    m = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=_ps_only, steps_per_candidate=3, min_rounds=3, max_rounds=6,
        planned_steps=1000, max_cost_share=share, drop_slower=drop))
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for step in tiny_batches(40, world):
        opt.zero_grad()
        m(*step[rank]).backward()
        opt.step()
        if m.backend != TORCH_DDP:
            time.sleep(0.03)
    rec = m._tuner.records[0]
    verdicts = [c["verdict"] for c in rec["comparison"]["candidates"][1:]]
    return (rec["steps"], rec["locked"], rec["reason"], rec["comparison"]["rounds"], verdicts,
            rec["dropped"])


def _two_lossless(graph, cluster):  # noqa: ANN001, ANN202 - ps first, then ps_lb
    return [_candidates(graph, cluster)[0], _candidates(graph, cluster)[2]]


def _screening(rank: int, world: int) -> dict:
    """300 planned steps (a budget of 15: one candidate compared over 3-step blocks, one more
    screened in the first round); the proposer's first candidate (``ps``) made 30 ms per step
    slower: the screen keeps the second (``ps_lb``) for the comparison."""
    import time

    from autosync_transfer.runtime.autotune import TORCH_DDP, AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel

    m = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=_two_lossless, planned_steps=300, drop_slower=None, max_cost_share=None))
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for step in tiny_batches(30, world):
        opt.zero_grad()
        m(*step[rank]).backward()
        opt.step()
        if m.backend != TORCH_DDP and m.strategy.kind == "ps":
            time.sleep(0.03)
    rec = m._tuner.records[0]
    return {"screened": rec["screened"],
            "tried": sorted((t.strategy.kind, len(t.result.iteration_times_s))
                            for t in m._tuner.trials)}


def _deferred(rank: int, world: int) -> dict:
    """A proposer that takes a time limit, 1,000 planned steps with the default cost bound: it
    is called once DDP's first steps (3-step blocks: 4 steps, the first left out) give the
    budget in seconds, with half of it; without a cost bound, at setup and without a limit."""
    import time

    from autosync_transfer.runtime.autotune import AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel

    calls: list = []

    def proposer(graph, cluster, *, time_limit_s=None):  # noqa: ANN001, ANN202
        calls.append(time_limit_s)
        return _ps_only(graph, cluster)

    m = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=proposer, planned_steps=1000, steps_per_candidate=3, min_rounds=3,
        max_rounds=3, drop_slower=None))
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    steps_before, backends = None, []
    for i, step in enumerate(tiny_batches(30, world)):
        if m._tuner is not None and m._tuner._probe is None and steps_before is None:
            steps_before = i  # the proposal was made during the previous step's forward
        opt.zero_grad()
        m(*step[rank]).backward()
        opt.step()
        backends.append(m.backend)  # what this step ran
    rec = m._tuner.records[0]
    calls_before = len(calls)
    u = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=proposer, planned_steps=1000, max_cost_share=None)).setup()
    unbounded = calls[calls_before:]
    calls_before = len(calls)
    # 300 planned steps: the default budget (0.5 % of them) leaves less than one step after
    # the proposal's half; without quick builders the job stays on DDP
    short = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=proposer, planned_steps=300, steps_per_candidate=3, min_rounds=3,
        max_rounds=3, quick_builders=()))
    opt = torch.optim.SGD(short.parameters(), lr=LR)
    for step in tiny_batches(8, world):
        opt.zero_grad()
        short(*step[rank]).backward()
        opt.step()
    srec = short._tuner.record
    # the same job with the default quick builders: they are compared instead of a proposal
    # (steps of about 20 ms, so that the budget pays a switch)
    calls_quick = len(calls)
    quick = DistributedModel(TinyNet(), None, _cluster(), autotune=AutotuneConfig(
        candidates=proposer, planned_steps=300, steps_per_candidate=3, min_rounds=3,
        max_rounds=3, drop_slower=None))
    opt = torch.optim.SGD(quick.parameters(), lr=LR)
    ran = []
    for step in tiny_batches(30, world):
        opt.zero_grad()
        quick(*step[rank]).backward()
        opt.step()
        ran.append(quick.backend if quick.backend == "torch_ddp" else quick.strategy.kind)
        time.sleep(0.02)
    qrec = quick._tuner.records[0]
    return {"short": (calls[calls_before:calls_quick], short.backend, short._tuner.tuning,
                      srec["locked"], srec["steps"], srec["reason"]),
            "quick": {"calls": calls[calls_quick:], "record": qrec, "ran": ran,
                      "candidates": [s.kind for s in quick._tuner._candidates]},
            "calls": calls[:calls_before - len(unbounded)], "steps_before": steps_before,
            "backends": backends[:4], "limit": rec["propose_limit_s"],
            "candidates": rec["candidates"], "propose_s": rec["propose_s"],
            "unbounded": unbounded, "unbounded_limit": u._tuner.propose_limit_s}


def _worker(rank: int, world: int) -> dict:
    from autosync_transfer.runtime.autotune import TORCH_DDP, AutotuneConfig
    from autosync_transfer.runtime.ddp import DistributedModel

    tried: list = []
    torch.manual_seed(0)
    net = TinyNet()
    cfg = AutotuneConfig(candidates=_candidates, steps_per_candidate=PER_CANDIDATE,
                         min_rounds=ROUNDS, max_rounds=ROUNDS, on_trial=tried.append,
                         retune_every=4, drop_slower=None)
    model = DistributedModel(net, None, _cluster(), autotune=cfg)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ran = []
    for step in tiny_batches(STEPS, world):
        opt.zero_grad()
        model(*step[rank]).backward()
        opt.step()
        ran.append(TORCH_DDP if model.backend == TORCH_DDP else model.strategy.kind)
    state = model.sync_state_dict()
    tuner = model._tuner
    first = tuner.records[0]
    locked = tuner.records[0]["locked"]

    # a resumed job: the locked choice is installed, no tuning
    resumed = DistributedModel(TinyNet(), None, _cluster(),
                               autotune=AutotuneConfig(candidates=_candidates,
                                                       steps_per_candidate=PER_CANDIDATE))
    resumed.load_sync_state_dict(state)
    resumed.load_state_dict(model.state_dict())
    resumed(*tiny_batches(1, world)[0][rank]).backward()

    # a budget too small for one candidate: no tuning, torch DDP
    small = DistributedModel(TinyNet(), None, _cluster(),
                             autotune=AutotuneConfig(candidates=_candidates, planned_steps=100))
    small(*tiny_batches(1, world)[0][rank]).backward()
    return {
        "params": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "ran": ran,
        "tried": [(t.strategy.kind, len(t.result.iteration_times_s), t.round) for t in tried],
        "trial_times": [t.result.iteration_times_s for t in tuner.trials],
        "first": first, "locked": locked, "state_records": len(state["autotune"]["records"]),
        "resumed_backend": resumed.backend, "resumed_kind": resumed.strategy.kind,
        "resumed_tuning": resumed._tuner.tuning, "locked_kind": (
            TORCH_DDP if first["locked"] == TORCH_DDP else None),
        "small": (small.backend, small._tuner.tuning, small._tuner.record["reason"]),
        "costly": {share: _costly(rank, world, share) for share in (0.01, None)},
        "dropped": _costly(rank, world, None, drop=0.05),
        "screening": _screening(rank, world),
        "deferred": _deferred(rank, world),
    }


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return spawn_local(_worker, 2, timeout_s=240)


def test_every_candidate_is_compared_with_ddp_and_reported_on_rank_0(runs: list[dict]) -> None:
    # ps and ps_lb (the lossy candidate and the duplicate skipped), ROUNDS rounds each, the
    # first step of each block dropped as the switch
    tried = runs[0]["tried"]
    assert sorted(k for k, _, r in tried if r == 0) == ["ps", "ps_lb"]
    assert all(n == ROUNDS * (PER_CANDIDATE - 1) for _, n, r in tried if r == 0)
    assert any(r == 1 for _, _, r in tried)  # retune_every: a second round
    assert runs[1]["tried"] == []  # reported on rank 0 only
    cmp = runs[0]["first"]["comparison"]
    assert cmp["baseline"] == "torch_ddp" and cmp["rounds"] == ROUNDS
    names = [c["name"] for c in cmp["candidates"]]
    assert names[0] == "torch_ddp" and len(names) == 3
    for c in cmp["candidates"][1:]:
        assert c["low"] <= c["speedup"] <= c["high"]
        assert c["verdict"] in ("faster", "slower", "equivalent", "undecided")
    assert runs[0]["first"]["steps"] == ROUNDS * 3 * PER_CANDIDATE
    assert runs[0]["state_records"] >= 1


def test_rounds_are_interleaved_blocks_and_ranks_switch_together(runs: list[dict]) -> None:
    assert runs[0]["ran"] == runs[1]["ran"]
    ran = runs[0]["ran"]  # the first block starts at the first step
    blocks = [ran[i:i + PER_CANDIDATE] for i in range(0, ROUNDS * 3 * PER_CANDIDATE, PER_CANDIDATE)]
    assert all(len(set(b)) == 1 for b in blocks)
    rounds = [[b[0] for b in blocks[i:i + 3]] for i in range(0, len(blocks), 3)]
    assert all(sorted(r) == ["ps", "ps_lb", "torch_ddp"] for r in rounds)
    assert runs[0]["first"]["locked"] == runs[1]["first"]["locked"]
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
        assert not r["resumed_tuning"]
        assert r["resumed_backend"] in ("torch_ddp", "executor", "ddp_reducer")


def test_a_budget_too_small_keeps_torch_ddp(runs: list[dict]) -> None:
    for r in runs:
        backend, tuning, reason = r["small"]
        assert backend == "torch_ddp" and not tuning
        assert "budget of 5 steps cannot decide on one candidate" in reason


def test_a_round_that_costs_more_than_its_share_stops_and_keeps_torch_ddp(runs: list[dict]) -> None:
    """At 1 % of 1,000 planned steps (ten of DDP's steps of a few ms) the candidate's first
    block (30 ms a step slower) takes the round past its share: it stops in its first round
    (after that block, or after DDP's block too: 3 or 6 steps), with DDP and no verdict;
    unbounded it runs to its first look (round 3, 5 or 6: it runs until the candidate is
    decided, slower)."""
    for r in runs:
        steps, locked, reason, rounds, verdicts, _ = r["costly"][0.01]
        assert steps in (3, 6) and (locked, rounds) == ("torch_ddp", int(steps == 6))
        assert verdicts in ([], ["undecided"])
        assert "max_cost_share=0.01" in reason and f"stopped after {steps} steps" in reason
        steps, locked, reason, rounds, verdicts, _ = r["costly"][None]
        assert rounds in (3, 5, 6) and steps == 6 * rounds  # its looks (3, 5, 6)
        assert (locked, reason) == ("torch_ddp", "") and verdicts[0] in ("slower", "undecided")


def test_a_candidate_whose_block_runs_past_drop_slower_leaves_the_round(runs: list[dict]) -> None:
    """30 ms a step slower than DDP's few milliseconds: once a block of each has run (in
    either order), the candidate leaves, the round is over after 6 steps and DDP stays; the
    candidate's verdict is not "slower" (leaving is a cost rule, not a verdict)."""
    for r in runs:
        steps, locked, reason, rounds, verdicts, dropped = r["dropped"]
        assert (steps, locked, rounds) == (6, "torch_ddp", 1)
        assert reason.startswith("every candidate left: a block ran more than drop_slower=0.05")
        assert verdicts == ["undecided"]
        [(name, ratio)] = dropped.items()
        assert name.startswith("0:") and ratio > 1.05


def test_a_small_budget_screens_one_more_candidate_in_the_first_round(runs: list[dict]) -> None:
    """A budget of 15 steps: the proposer's first candidate (30 ms a step slower) and its
    second run a 3-step block each in the first round; the slower leaves the comparison after
    it (named in the record with its ratio to DDP's block), and the second goes on through
    the comparison's rounds: without the screen it would never have run."""
    for r in runs:
        sc = r["screening"]
        [(name, ratio)] = sc["screened"].items()
        assert name.startswith("0:ps-") and ratio > 1.5
        # timed steps: each block's first (the switch) left out; ps_lb ran the 4 rounds
        assert sc["tried"] == [("ps", 2), ("ps_lb", 8)]


def test_with_a_cost_bound_the_proposal_waits_for_ddps_steps_and_gets_a_time_limit(
        runs: list[dict]) -> None:
    """The proposer runs on rank 0 only, after 4 steps on torch DDP (they run anyway: the job
    starts on DDP), with half the cost budget those steps give (0.5 % of 1,000 planned steps of
    DDP's median step); its time counts in the record. Without a cost bound there is no
    budget in seconds: it is called at setup, without a limit."""
    r0, r1 = runs[0]["deferred"], runs[1]["deferred"]
    assert len(r0["calls"]) == 1 and r1["calls"] == []
    [limit] = r0["calls"]
    assert limit is not None and 0 < limit < 5.0  # 0.5 x 0.005 x 1,000 x a step of ms
    for r in (r0, r1):
        assert r["steps_before"] == 5  # four step times: the fifth forward proposes
        assert r["backends"] == ["torch_ddp"] * 4  # the steps before the proposal
        assert r["limit"] == pytest.approx(limit) and r["candidates"] == 1
        assert r["propose_s"] > 0
        assert r["unbounded_limit"] is None
    assert r0["unbounded"] == [None] and r1["unbounded"] == []
    for r in (r0, r1):  # a job too short to pay a switch after the proposal: none is made
        calls, backend, tuning, locked, steps, reason = r["short"]
        assert calls == [] and (backend, tuning, locked, steps) == ("torch_ddp", False,
                                                                    "torch_ddp", 0)
        assert reason.startswith("nothing proposed: a cost budget of ")
        assert "max_cost_share=0.005 of 300 planned steps" in reason


def test_a_job_too_short_for_a_proposal_compares_the_builders_that_differ_from_ddp(
        runs: list[dict]) -> None:
    """300 planned steps, the default cost bound: instead of a proposal, the quick builders
    (the `ddp` and `all_reduce` builders: TinyNet's embedding on a parameter server, which DDP's
    reducer cannot run) are the first round's candidates; the proposer is never called, the
    first candidate's block runs after DDP's first steps, and the record says the round was
    a quick one."""
    for r in runs:
        q = r["deferred"]["quick"]
        assert q["calls"] == []
        # the `all_reduce` builder is the same strategy as the `ddp` builder on this model
        # (one bucket) and is not compared twice
        assert q["candidates"] == ["ddp"]
        rec = q["record"]
        assert rec["quick"] is True and rec["candidates"] == 1
        assert rec["propose_limit_s"] is None and rec["propose_s"] > 0
        assert q["ran"][:4] == ["torch_ddp"] * 4  # the steps that give DDP's step time
        assert "ddp" in q["ran"][4:]  # the first candidate ran a block
        names = [c["name"] for c in rec["comparison"]["candidates"]]
        assert names[0] == "torch_ddp" and [n.split("-")[0] for n in names[1:]] == ["0:ddp"]
    # every rank switched alike
    assert runs[0]["deferred"]["quick"]["ran"] == runs[1]["deferred"]["quick"]["ran"]


def test_without_sparse_variables_no_quick_builder_differs_from_ddp() -> None:
    """A model without sparse variables: the `ddp` and `all_reduce` builders are plans DDP's
    reducer runs (all-reduce buckets only), so a short job has no quick candidate."""
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.runtime.torch_ddp import ddp_bucket_caps
    from autosync_transfer.strategies.builders import build

    mlp = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    sparse = TinyNet()
    for module, differs in ((mlp, False), (sparse, True)):
        graph = ModelGraph.from_torch(module, name="m")
        d = Domain(name="m-t", model=graph, cluster=_cluster())
        for name in ("ddp", "all_reduce"):
            plan = make_plan(build(name, d), graph, _cluster())
            assert (ddp_bucket_caps(plan) is None) is differs, (name, differs)


def test_a_quick_builder_that_cannot_be_built_is_skipped(monkeypatch) -> None:  # noqa: ANN001
    """A builder that fails on the job's model or cluster is left out of the quick round (a
    warning), never an error that stops the job; the others are still compared."""
    from types import SimpleNamespace

    from autosync_transfer.runtime.autotune import AutotuneConfig, Autotuner
    from autosync_transfer.runtime.plan import make_plan
    from autosync_transfer.strategies import builders
    from autosync_transfer.testing.models import tiny_net_graph

    real = builders.build

    def build(name, domain, **kw):  # noqa: ANN001, ANN003, ANN202
        if name == "ddp":
            raise ValueError("no such layout on this cluster")
        return real(name, domain, **kw)

    monkeypatch.setattr(builders, "build", build)
    graph, cluster = tiny_net_graph(), _cluster()
    tuner = Autotuner.__new__(Autotuner)
    tuner.config = AutotuneConfig()
    tuner.model = SimpleNamespace(_configured=None, graph=graph, cluster=cluster,
                                  plan_for=lambda s: make_plan(s, graph, cluster))
    assert [s.kind for s in tuner._quick_candidates()] == ["all_reduce"]


def test_quick_builders_must_be_known_builders() -> None:
    from pydantic import ValidationError

    from autosync_transfer.runtime.autotune import AutotuneConfig

    with pytest.raises(ValidationError, match=r"(?s)quick_builders.*unknown builder 'dpp'"):
        AutotuneConfig(quick_builders=("ddp", "dpp"))


def test_the_cost_bound_counts_what_the_next_block_cost_the_last_time() -> None:
    """Before each block: the cost so far plus that block's cost when it last ran, against the
    budget (here 1.2 % of 1,000 steps of DDP's 10 ms median: 0.12 s); a candidate not run yet
    adds one median step (its switch), DDP nothing; in the first round, before DDP's first
    block, the steps on DDP before the proposal are the reference."""
    from autosync_transfer.runtime.autotune import TORCH_DDP, AutotuneConfig, Autotuner

    tuner = Autotuner.__new__(Autotuner)  # the rule alone, without a model or processes
    tuner.config = AutotuneConfig(planned_steps=1000, max_cost_share=0.012)
    tuner.round, tuner.propose_s, tuner._probe_ref, tuner._quick = 0, 0.0, [], ""
    tuner._cmp, tuner._step = None, 0  # no comparison object: no credit for a faster one
    ddp, slow = [0.02, 0.01, 0.01, 0.01], [0.035, 0.03, 0.03, 0.03]  # first steps: switches
    tuner._blocks = {TORCH_DDP: [], "0:slow": [], "1:new": []}
    tuner._choices = dict.fromkeys(tuner._blocks)
    tuner._round_steps = []
    assert tuner._over_cost("0:slow") == ""  # no reference for DDP's step yet
    tuner._probe_ref = [0.01, 0.01, 0.012]  # DDP's steps before the proposal: 10 ms
    tuner.propose_s = 0.115
    reason = tuner._over_cost("0:slow")  # the proposal's 0.115 s + one step's 0.01 s
    assert "stopped after 0 steps: tuning cost 0.12 s over torch DDP's median step with the " \
        "proposal (and 0.01 s expected of the next block)" in reason
    tuner._quick = "nothing proposed"  # a quick round: its first candidate block runs anyway
    assert tuner._over_cost("0:slow") == "" and tuner._over_cost("1:new") == ""
    assert tuner._over_cost(TORCH_DDP) == ""
    tuner._blocks["1:new"].append(slow)  # once one has run, the bound applies again
    assert "stopped after 0 steps" in tuner._over_cost("0:slow")
    tuner._blocks["1:new"], tuner._quick = [], ""
    assert tuner._over_cost(TORCH_DDP) == ""  # DDP's block adds nothing
    tuner.propose_s = 0.0
    tuner._blocks[TORCH_DDP].append(ddp)
    tuner._round_steps = list(ddp)
    assert tuner._over_cost("0:slow") == ""  # 0.01 s so far + 0.01 s for its switch
    tuner._blocks["0:slow"].append(slow)
    tuner._round_steps += slow  # 0.095 s so far
    assert tuner._over_cost("1:new") == ""  # 0.095 s + 0.01 s for its switch: 0.105 s
    assert tuner._over_cost(TORCH_DDP) == ""  # DDP's last block cost 0.01 s: 0.105 s
    reason = tuner._over_cost("0:slow")  # 0.095 s + its last block's 0.085 s
    assert "stopped after 8 steps" in reason and "0.09 s expected of the next block" in reason
    # the first round's cost includes the proposal: 0.095 s + 0.02 s + 0.01 s is past 0.12 s
    tuner.propose_s = 0.02
    reason = tuner._over_cost("1:new")
    assert "stopped after 8 steps: tuning cost 0.12 s over torch DDP's median step with the " \
        "proposal (and 0.01 s expected of the next block)" in reason
    tuner.round = 1  # a later round (retune_every) did not propose
    assert tuner._over_cost("1:new") == ""
    tuner.round, tuner._blocks[TORCH_DDP] = 1, []  # no DDP block in a later round: no reference
    assert tuner._over_cost("0:slow") == ""
    tuner.config = AutotuneConfig(planned_steps=1000, max_cost_share=None)
    assert tuner._over_cost("0:slow") == ""  # unbounded


def test_a_candidate_faster_than_ddp_extends_the_cost_budget_by_a_share_of_its_gain() -> None:
    """gain_share (0.25) of what the fastest candidate still compared would save over the
    planned steps left: 1,000 planned steps, 100 run, DDP's median 10 ms, a candidate whose
    two blocks run at 8 ms: 0.25 x 2 ms x 900 = 0.45 s more; a slower candidate, one with a
    single block or one no longer compared adds nothing."""
    from types import SimpleNamespace

    from autosync_transfer.runtime.autotune import TORCH_DDP, AutotuneConfig, Autotuner

    tuner = Autotuner.__new__(Autotuner)
    tuner.config = AutotuneConfig(planned_steps=1000, max_cost_share=0.005)
    tuner.round, tuner.propose_s, tuner._probe_ref, tuner._quick, tuner._step = 1, 0.0, [], "", 100
    fast, slow = [0.02, 0.008, 0.008], [0.03, 0.012, 0.012]
    tuner._blocks = {TORCH_DDP: [[0.02, 0.01, 0.01]] * 2, "0:fast": [fast, fast],
                     "1:slow": [slow, slow], "2:once": [[0.004] * 3]}
    tuner._choices = dict.fromkeys(tuner._blocks)
    tuner._cmp = SimpleNamespace(active=list(tuner._blocks))
    assert tuner._credit(0.01) == pytest.approx(0.25 * 0.002 * 900)
    tuner._cmp.active = [TORCH_DDP, "1:slow", "2:once"]  # the fast one left the comparison
    assert tuner._credit(0.01) == 0.0
    tuner._cmp.active = list(tuner._blocks)
    # a round 0.3 s over DDP: past 0.005 x 1,000 x 10 ms = 0.05 s, within 0.05 + 0.45 s
    tuner._round_steps = [0.01] * 10 + [0.31]
    assert tuner._over_cost(TORCH_DDP) == ""
    tuner.config = AutotuneConfig(planned_steps=1000, max_cost_share=0.005, gain_share=0.0)
    reason = tuner._over_cost(TORCH_DDP)
    assert "stopped after 11 steps" in reason and "gain_share" not in reason
    tuner.config = AutotuneConfig(planned_steps=1000, max_cost_share=0.005)
    tuner._round_steps = [0.01] * 10 + [0.61]  # 0.6 s: past both
    reason = tuner._over_cost(TORCH_DDP)
    assert "and gain_share=0.25 of what the fastest candidate would save (0.45 s)" in reason


def _locked_rate(ratio: float, config, runs: int = 1000) -> float:  # noqa: ANN001
    """How often a 300-step job's comparison (one candidate, 3-step blocks, DDP the baseline)
    declares a candidate ``ratio`` times DDP's speed faster, over seeded synthetic sessions:
    27 % drift, heavy-tailed outliers, a slow step at every switch."""
    from autosync_transfer.measure import Verdict, compare
    from autosync_transfer.runtime.autotune import TORCH_DDP
    from autosync_transfer.testing.timings import NoisyMachine

    design = config.design(2)
    found = 0
    for seed in range(runs):
        m = NoisyMachine({TORCH_DDP: 0.09, "c": 0.09 / ratio}, block_steps=config.block_steps(),
                         session_steps=300, seed=seed)
        found += compare([TORCH_DDP, "c"], m.time_block, design)["c"].verdict is Verdict.FASTER
    return found / runs


def test_the_lock_in_is_a_one_sided_decision_at_95_percent() -> None:
    """Locking in is decided on "faster" alone: the default two-sided 0.9 interval is a one-sided
    95 % test. A candidate as fast as DDP is locked in about 5 % of the time (harmless), one
    2 % slower far less often; a 15 % faster one is found more often than at 0.95."""
    from autosync_transfer.runtime.autotune import AutotuneConfig

    cfg = AutotuneConfig(planned_steps=300)
    assert cfg.confidence == 0.9
    design = cfg.design(2)
    assert design is not None and design.confidence == 0.9
    assert (design.min_rounds, design.max_rounds, design.looks) == (4, 4, [4])
    assert AutotuneConfig(planned_steps=100).design(2) is None  # too small to decide
    assert _locked_rate(1.0, cfg) <= 0.06
    assert _locked_rate(1 / 1.02, cfg) <= 0.02
    found = _locked_rate(1.15, cfg)
    assert found >= 0.85
    assert found > _locked_rate(1.15, AutotuneConfig(planned_steps=300, confidence=0.95))


def test_config_is_checked() -> None:
    from pydantic import ValidationError

    from autosync_transfer.runtime.autotune import AutotuneConfig, is_lossless
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.testing.models import tiny_net_graph

    with pytest.raises(ValidationError, match="steps_per_candidate"):
        AutotuneConfig(steps_per_candidate=1)
    with pytest.raises(ValidationError, match="budget_share"):
        AutotuneConfig(budget_share=0.0)
    assert AutotuneConfig(planned_steps=1000).budget_steps() == 50
    assert AutotuneConfig(planned_steps=100_000).budget_steps() == 300
    assert AutotuneConfig(planned_steps=1000).cost_budget_s(0.02) == pytest.approx(0.1)  # 0.5 %
    assert AutotuneConfig(planned_steps=1000, max_cost_share=None).cost_budget_s(0.02) is None
    assert AutotuneConfig().cost_budget_s(0.02) is None  # no planned steps: unbounded
    with pytest.raises(ValidationError, match="max_cost_share"):
        AutotuneConfig(max_cost_share=0.0)
    with pytest.raises(ValidationError, match="drop_slower"):
        AutotuneConfig(drop_slower=0.0)
    with pytest.raises(ValidationError, match="confidence"):
        AutotuneConfig(confidence=1.0)
    # the budget goes to as many candidates as it gives target_rounds (default min_rounds, 4)
    # rounds each; the rounds it leaves are run too, looked at no more than three times
    # (compared, max rounds, rounds between looks, screened)
    assert AutotuneConfig(planned_steps=1000).schedule(3) == (3, 4, 1, 0)
    assert AutotuneConfig(planned_steps=100_000).schedule(20) == (8, 9, 3, 0)
    assert AutotuneConfig(planned_steps=100_000).schedule(2) == (2, 12, 4, 0)
    # a budget of 20 steps: one candidate for 4 rounds of 4 steps, and the 4 steps left screen
    # a second one in the first round (the rounds are those of the one compared)
    assert AutotuneConfig(planned_steps=400).schedule(3) == (1, 4, 1, 1)
    assert AutotuneConfig(planned_steps=400).schedule(1) == (1, 5, 1, 0)
    # 30 steps: one compared, three screened (12 steps), 4 rounds
    assert AutotuneConfig(planned_steps=600).schedule(5) == (1, 4, 1, 3)
    assert AutotuneConfig(planned_steps=600, max_candidates=2).schedule(5) == (1, 6, 1, 1)
    # a budget too small for 4 blocks of 4 steps shortens them, to no fewer than 3 steps
    assert AutotuneConfig(planned_steps=400).block_steps() == 4
    assert AutotuneConfig(planned_steps=300).block_steps() == 3  # budget 15
    assert AutotuneConfig(planned_steps=300).schedule(3) == (1, 4, 1, 1)
    assert AutotuneConfig(planned_steps=300).schedule(1) == (1, 5, 1, 0)
    assert AutotuneConfig(planned_steps=239).schedule(3) == (0, 0, 0, 0)  # 11 < 4 rounds x 3
    assert AutotuneConfig(steps_per_candidate=2, planned_steps=160).block_steps() == 2
    assert AutotuneConfig(steps_per_candidate=10, planned_steps=600).block_steps() == 7
    # fewer candidates, more rounds each: at 1,000 planned steps one candidate for 10 rounds,
    # two screened
    assert AutotuneConfig(target_rounds=8, planned_steps=1000).schedule(3) == (1, 10, 3, 2)
    cands = _candidates(tiny_net_graph(), _cluster())
    assert [is_lossless(s) for s in cands] == [True, False, True, True]
    with pytest.raises(ConfigError, match="sync_on must be one of"):
        DistributedModel(TinyNet(), None, sync_on="later")
