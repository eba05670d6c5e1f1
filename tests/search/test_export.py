"""Export refuses silently-lossy picks: a lossy strategy is exported only with a passed
convergence check or ``allow_lossy``; the probe's figures say how far off it is; lossless
strategies always pass."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.runtime.accuracy import ConvergenceCheck, is_lossless
from autosync_transfer.runtime.trial import Protocol, WorkerPool
from autosync_transfer.search.config import SearchConfig
from autosync_transfer.search.export import checks_of, refusal, search_choice
from autosync_transfer.search.loop import Searcher
from autosync_transfer.strategies.builders import build

QUICK = Protocol(warmup=1, iters=2, timeout_s=120, startup_timeout_s=120, fidelity_steps=2)


def _domain() -> Domain:
    cluster = Cluster(name="x2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.66.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    return Domain(name="ncf-x2x1", model=get_model("ncf"), cluster=cluster)


SPEC = """nodes:
  - address: 10.66.0.1
    cpus: [0]
    network_bandwidth: 1
    chief: true
  - address: 10.66.0.2
    cpus: [0]
    network_bandwidth: 1
"""
#: the search's settings, as flags of ``search`` (the CLI continues the stored run)
SEARCH_FLAGS = ["--launcher", "local", "--method", "random", "--budget", "2", "-k", "2",
                "--candidates", "20", "--seed", "3", "--confirm", "0", "--preset", "dataset",
                "--no-log", "--max-foreign-cpu", "1", "--objective", "step-time"]


def _check(sid: str, passed: bool) -> ConvergenceCheck:
    return ConvergenceCheck(strategy_id=sid, steps=100, target_loss=0.5,
                            steps_to_target=60 if passed else None, exact_steps_to_target=58,
                            final_loss=0.41 if passed else 0.9, exact_final_loss=0.40,
                            step_ratio=60 / 58 if passed else float("inf"),
                            final_gap=0.025 if passed else 1.25, passed=passed)


@pytest.fixture(scope="module")
def lossy_search(tmp_path_factory):  # noqa: ANN201
    """A search on real trial workers where the lossy strategies win on time (their measured
    times divided by 10: a slow network on which compression pays), so that the unchecked
    choice is lossy; its first pick is PowerSGD rank 1 on every dense variable, the strategy
    that damages training. The workers probe every lossy trial's gradient fidelity."""
    from autosync_transfer.search.proposers.random import RandomProposer

    from autosync_transfer.cli._common import resolve_domain

    folder = tmp_path_factory.mktemp("search")
    (folder / "spec.yml").write_text(SPEC)
    d = resolve_domain("ncf", str(folder / "spec.yml"))  # the domain the CLI resolves
    store = folder / "run.jsonl"
    psgd = build("all_reduce", d, compressor="powersgd",
                 powersgd_rank=1).model_copy(update={"id": "all_reduce+psgd1"})
    # step time is the objective: the unchecked fastest step is the lossy pick export must refuse
    # (time to loss would rank it by its probe and check it at the end)
    cfg = SearchConfig(method="random", budget=2, per_round=2, candidates=20, seed=3, confirm=0,
                       preset="dataset", objective="step-time")

    class PowerSGDFirst(RandomProposer):
        def propose(self, round_no, k, measured, history, parents=()):  # noqa: ANN001, ANN201
            rest = super().propose(round_no, k - 1, measured, history, parents)
            return [psgd, *rest] if round_no == 0 else rest

    with WorkerPool(d, "local", QUICK) as pool:
        def measure(strategy, record_id):  # noqa: ANN001, ANN202
            res = pool.run(strategy)
            if res.ok and strategy is not None and not is_lossless(strategy):
                scale = 100 if strategy.id == psgd.id else 10
                res = replace(res, iteration_times_s=[t / scale for t in res.iteration_times_s])
            return res, {}

        result = Searcher(d, store, cfg, proposer=PowerSGDFirst(d, cfg), launcher="local",
                          protocol=QUICK).run(measure)
    assert result.best.id == psgd.id
    return d, result, folder


def test_an_unchecked_lossy_pick_is_refused_at_export(lossy_search):
    d, result, _ = lossy_search
    assert result.chosen is not None and not is_lossless(result.chosen)  # the unchecked pick
    choice = search_choice(result, d)
    assert choice.strategy is not None and is_lossless(choice.strategy), choice
    assert not choice.error
    refused = {e.strategy_id.split(" ")[0]: e for e in choice.excluded}
    assert result.chosen.id in refused and choice.source in ("search", result.summary[
        "best_builder"])
    # the damaging strategy: the probe measured how far its gradients are, and the reason says so
    psgd = refused["all_reduce+psgd1"]
    assert "powersgd rank 1" in psgd.reason and "no convergence check" in psgd.reason
    assert "gradient error" in psgd.reason and psgd.check is None


def test_a_passed_check_or_allow_lossy_exports_it(lossy_search):
    d, result, _ = lossy_search
    lossy = result.chosen
    passed = search_choice(result, d, {lossy.id: _check(lossy.id, True)})
    assert passed.strategy == lossy and passed.source == result.chosen_from
    assert search_choice(result, d, allow_lossy=True).strategy == lossy
    failed = search_choice(result, d, {lossy.id: _check(lossy.id, False)})
    assert is_lossless(failed.strategy)
    why = {e.strategy_id: e for e in failed.excluded}[lossy.id]
    assert why.check is not None and "convergence check failed" in why.reason
    assert "never reached" in why.reason
    # the summary's checks (a search that ran them) count as given ones
    summary = {**result.summary, "convergence": {lossy.id: _check(lossy.id, True).model_dump()}}
    assert search_choice(replace(result, summary=summary), d).strategy == lossy
    assert checks_of(summary["convergence"])[lossy.id].passed


def test_lossless_strategies_always_pass():
    d = _domain()
    for name in ("all_reduce", "ddp", "ps", "parallax", "partitioned_ar"):
        assert refusal(build(name, d)) is None
    fp16 = build("ddp", d, compressor="fp16")
    assert refusal(fp16) is not None and refusal(fp16, allow_lossy=True) is None
    assert refusal(fp16, {fp16.id: _check(fp16.id, True)}) is None
    # a passed check of another strategy does not count
    assert refusal(fp16, {"other": _check("other", True)}) is not None


def test_recommend_passes_over_lossy_candidates():
    from autosync_transfer.search.recommendation import recommend, recommend_checked

    model, cluster = get_model("ncf"), _domain().cluster
    choice = recommend_checked(model, cluster, candidates=40, seed=0)
    assert is_lossless(choice.strategy)
    assert all("lossy" in e.reason for e in choice.excluded)
    assert recommend(model, cluster, candidates=40, seed=0) == choice.strategy
    anything = recommend(model, cluster, candidates=40, seed=0, allow_lossy=True)
    if choice.excluded:  # the cost model ranked a lossy candidate first: it is the pick now
        assert anything.id == choice.excluded[0].strategy_id
    else:
        assert anything == choice.strategy


def test_search_cli_export_refuses_unless_allowed(lossy_search, tmp_path: Path, cli) -> None:  # noqa: ANN001
    """``search --export-json`` (continuing the stored run: nothing left to measure) exports the
    lossless choice and names what it passed over; ``--allow-lossy`` exports the lossy pick."""
    import json

    from autosync_transfer.strategies.types import Strategy

    d, result, folder = lossy_search
    base = ["search", "ncf", "--cluster-file", str(folder / "spec.yml"), *SEARCH_FLAGS,
            "--store", str(folder / "run.jsonl")]
    safe = tmp_path / "safe.json"
    res = cli(*base, "--export-json", str(safe))
    assert res.code == 0, res.err
    exported = Strategy.from_json(safe.read_text())
    assert is_lossless(exported) and exported.id != result.chosen.id
    assert f"not chosen      {result.chosen.id}" in res.out and "no convergence check" in res.out
    assert f"chosen          {exported.id}" in res.out
    lossy = tmp_path / "lossy.json"
    res = cli(*base, "--allow-lossy", "--json", "--export-json", str(lossy))
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["chosen_strategy"] == result.chosen.id and summary["excluded"] == []
    assert Strategy.from_json(lossy.read_text()).id == result.chosen.id
