"""The search objective: time to target loss by default (lossy final candidates get a real
convergence run, stored beside the trial store, never trained twice; a failing strategy is
excluded), step time as before on request, and ``lossless`` proposals only from every method.
Trials are measured by a stand-in ``measure`` (lossy strategies made fast, so that they are the
final candidates); the convergence runs are real (two gloo processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosync_transfer.dataset.checks import CheckStore, checks_path
from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.workload import workload_domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.fidelity import FidelityModel, fit_ratio_constant, step_ratio
from autosync_transfer.runtime.accuracy import is_lossless
from autosync_transfer.runtime.trial import TrialResult
from autosync_transfer.search.config import SearchConfig, run_name
from autosync_transfer.search.loop import Searcher
from autosync_transfer.search.objective import OBJECTIVES, get_objective
from autosync_transfer.search.proposers import make_proposer
from autosync_transfer.strategies.builders import build
from autosync_transfer.strategies.compact import decode
from autosync_transfer.strategies.types import Strategy
from autosync_transfer.testing.workloads import write_cluster, write_workload


def _ncf(model: str = "ncf") -> Domain:
    cluster = Cluster(name="s2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.77.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    return Domain(name=f"{model}-s2x1", model=get_model(model), cluster=cluster)


def _fast_if_lossy(strategy: Strategy | None, record_id: str) -> tuple[TrialResult, dict[str, Any]]:
    """Lossy strategies 10 ms, lossless 20 ms (+ a little by content), torch DDP 30 ms."""
    if strategy is None:
        t = 0.03
    else:
        t = (0.02 if is_lossless(strategy) else 0.01) + int(strategy.content_key[:4], 16) / 1e8
    return TrialResult("ok", [t, t, t], wall_s=0.01), {}


def _random_run(tmp_path: Path, budget: int) -> tuple[Domain, Any, dict[str, Strategy], str]:
    """A random search of ncf-dense over compressed strategies, measured by
    :func:`_fast_if_lossy`: ``(domain, progress, strategies by record id, record prefix)``."""
    from autosync_transfer.search.resume import load_run, record_prefix

    d = _ncf("ncf-dense")
    cfg = SearchConfig(method="random", budget=budget, per_round=8, candidates=60, seed=2,
                       confirm=0, preset="compressed", objective="step-time")
    store = tmp_path / "run.jsonl"
    Searcher(d, store, cfg, launcher="local").run(_fast_if_lossy)
    name = run_name(cfg, False)
    progress, strategies = load_run(d, store, name, cfg.budget)
    return d, progress, strategies, record_prefix(d.name, name)


def _searched(store: Path, domain: Domain) -> list[Strategy]:
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    return [decode(r["strategy"], domain.model) for r in rows if r["strategy"] is not None
            and "/reference/" not in r["id"] and "/confirm/" not in r["id"]]


def test_objectives_are_a_registry() -> None:
    assert list(OBJECTIVES) == ["time-to-loss", "step-time"]
    assert SearchConfig().objective == "time-to-loss"
    with pytest.raises(ValueError, match="objective must be one of time-to-loss, step-time"):
        SearchConfig(objective="accuracy")
    with pytest.raises(ConfigError, match="objective must be one of"):
        get_objective("accuracy")
    d = _ncf("ncf-dense")  # every table all-reduced, so compressed
    lossy = build("all_reduce", d, compressor="powersgd", powersgd_rank=1)
    assert get_objective("step-time").ratio(lossy) == 1.0
    ttl = get_objective("time-to-loss")
    assert ttl.ratio(build("all_reduce", d)) == 1.0
    assert ttl.ratio(lossy, {"fidelity": {"rel_error": 0.5}}) == pytest.approx(1.25)
    assert ttl.ratio(lossy) == 1.0  # unknown: no probe, no model
    assert ttl.ratio(lossy, None, FidelityModel(), d.model) > 1.5  # the prior of PowerSGD r1


def test_the_fidelity_model_learns_the_error_of_a_compressor() -> None:
    d = _ncf("ncf-dense")
    fp16 = build("all_reduce", d, compressor="fp16")
    psgd = build("all_reduce", d, compressor="powersgd", powersgd_rank=4)
    exact = build("all_reduce", d)
    model = FidelityModel().fit([fp16, psgd], d.model, [0.002, 0.3])
    err = model.predict([exact, fp16, psgd], d.model)
    assert err[0] == 0.0 and err[1] < 0.01 and 0.2 < err[2] < 0.4
    assert np.all(model.ratio([exact, psgd], d.model) >= 1.0)
    assert step_ratio(0.0) == 1.0 and step_ratio(None) == 1.0
    assert fit_ratio_constant([0.5, 1.0], [1.5, 3.0]) == pytest.approx(2.0)
    assert fit_ratio_constant([], []) == 1.0


@pytest.mark.parametrize("method", ["random", "analytical", "tpe", "autosync"])
def test_lossless_proposes_only_lossless_strategies(tmp_path: Path, method: str) -> None:
    d = _ncf()
    cfg = SearchConfig(method=method, budget=6, per_round=3, candidates=40, seed=3, confirm=0,
                       preset="compressed", lossless=True, min_train=3, max_epochs=2,
                       knob_candidates=20 if method in ("analytical", "autosync") else 0)
    assert run_name(cfg, False).endswith("-lossless-seed3")
    store = tmp_path / "run.jsonl"
    Searcher(d, store, cfg, launcher="local").run(_fast_if_lossy)
    searched = _searched(store, d)
    assert len(searched) == 6 and all(is_lossless(s) for s in searched)
    # without it the same space has lossy strategies
    p = make_proposer(d, cfg.model_copy(update={"lossless": False}))
    if method in ("random", "analytical"):
        assert not all(is_lossless(p.candidates(0)[i]) for i in range(40))


def test_a_time_to_loss_search_checks_its_lossy_final_candidates(tmp_path: Path) -> None:
    model = write_workload(tmp_path, "user_model", batch_size=8)
    domain, spec = workload_domain(str(model), write_cluster(tmp_path))
    cfg = SearchConfig(method="random", budget=4, per_round=2, candidates=30, seed=1, confirm=1,
                       final_checks=2, check_steps=30)
    store = tmp_path / "run.jsonl"
    result = Searcher(domain, store, cfg, launcher="local", workload=spec).run(_fast_if_lossy)
    s = result.summary
    assert s["objective"] == "time-to-loss"
    checks = CheckStore(checks_path(store))
    rows = list(checks.rows())
    assert 1 <= len(rows) <= 2 and set(s["convergence"]) == {r["strategy_id"] for r in rows}
    assert all(not is_lossless(Strategy.from_dict(r["strategy"])) for r in rows)
    assert s["convergence_minutes"] > 0
    for sid, c in s["convergence"].items():
        assert (sid in s["excluded"]) == (not c["passed"])
    # the best found counts: lossless, or checked and passed; its time to loss is its step time
    # x its measured ratio; speed-ups are over the same run's builder and torch DDP
    assert result.best is not None
    ok = is_lossless(result.best) or s["convergence"][result.best.id]["passed"]
    assert ok and s["ttl_best"] == result.best.id
    assert s["ttl_speedup_vs_ddp"] == pytest.approx(0.03 / s["ttl_best_s"])
    assert result.chosen is not None
    assert is_lossless(result.chosen) or s["convergence"][result.chosen.id]["passed"]
    # continued, nothing is trained again
    again = Searcher(domain, store, cfg, launcher="local", workload=spec).run(_fast_if_lossy)
    assert len(list(checks.rows())) == len(rows)
    assert again.summary["convergence"] == s["convergence"]


def test_the_step_time_objective_checks_nothing(tmp_path: Path) -> None:
    model = write_workload(tmp_path, "user_model", batch_size=8)
    domain, spec = workload_domain(str(model), write_cluster(tmp_path))
    cfg = SearchConfig(method="random", budget=4, per_round=2, candidates=30, seed=1, confirm=1,
                       objective="step-time")
    store = tmp_path / "run.jsonl"
    result = Searcher(domain, store, cfg, launcher="local", workload=spec).run(_fast_if_lossy)
    assert not checks_path(store).exists() and "objective" not in result.summary
    assert not is_lossless(result.best)  # the fastest by step time, lossy as it is


def test_lossiness_orders_compressors_per_variable() -> None:
    from autosync_transfer.search.timetoloss import at_least_as_lossy, lossiness

    d = _ncf("ncf-dense")
    fp16 = lossiness(build("all_reduce", d, compressor="fp16"))
    ef = lossiness(build("all_reduce", d, compressor="fp16_ef"))
    r1 = lossiness(build("all_reduce", d, compressor="powersgd", powersgd_rank=1))
    r8 = lossiness(build("all_reduce", d, compressor="powersgd", powersgd_rank=8))
    assert lossiness(build("all_reduce", d)) == {} and set(fp16) == set(r1)
    assert at_least_as_lossy(r1, r8) and at_least_as_lossy(r8, fp16) and at_least_as_lossy(fp16, ef)
    assert not at_least_as_lossy(fp16, r1) and not at_least_as_lossy(r8, r1)
    one = {next(iter(r1)): r1[next(iter(r1))]}  # PowerSGD rank 1 on one variable only
    assert at_least_as_lossy(r1, one) and not at_least_as_lossy(one, fp16)
    assert not at_least_as_lossy(fp16, one)


def test_final_checks_go_on_with_less_lossy_candidates_when_a_round_fails(tmp_path: Path) -> None:
    """Round 1's candidates failed (their stored checks say so): round 2 offers the next best
    candidates that compress less, none as lossy as a failed one; one that passed ends it."""
    from autosync_transfer.runtime.convergence import ConvergenceConfig, ConvergenceRun, analyze
    from autosync_transfer.search.timetoloss import (at_least_as_lossy, check_final,
                                                     compression_family, final_candidates,
                                                     lossiness)

    d, progress, strategies, prefix = _random_run(tmp_path, budget=16)
    ttl = get_objective("time-to-loss")
    checks_file = tmp_path / "checks.jsonl"
    exact = [1.0 - 0.9 * i / 39 for i in range(40)]

    def record(s: Strategy, passed: bool) -> None:
        losses = exact if passed else [1.0] * 40
        CheckStore(checks_file).append(d.name, s, ConvergenceRun(
            analyze(s.id, losses, exact, ConvergenceConfig(steps=40, seed=0)), losses, exact))

    first = final_candidates(progress, strategies, prefix, ttl, 2)
    assert len(first) == 2
    for s in first:
        record(s, passed=False)
    checks, errors, unchecked = check_final(d, progress, strategies, prefix, ttl, checks_file,
                                            limit=2, rounds=3, steps=40, seed=0, train=False)
    assert errors == {} and set(checks) == {s.id for s in first}
    assert not any(c.passed for c in checks.values())
    assert unchecked and not {s.id for s in unchecked} & set(checks)
    assert not any(at_least_as_lossy(lossiness(s), lossiness(f)) for s in unchecked
                   for f in first)
    assert not {compression_family(s) for s in unchecked} & {compression_family(f) for f in first}
    # the second round's first candidate passed: no third round
    record(unchecked[0], passed=True)
    for s in unchecked[1:]:
        record(s, passed=False)
    checks, _, left = check_final(d, progress, strategies, prefix, ttl, checks_file, limit=2,
                                  rounds=3, steps=40, seed=0, train=False)
    assert left == [] and checks[unchecked[0].id].passed
    assert set(checks) == {s.id for s in first + unchecked}
    # with the fidelity model: no candidate of a later round has a gradient error (estimated)
    # at least that of a failed one
    model = FidelityModel()
    first_m = final_candidates(progress, strategies, prefix, ttl, 2, model, d.model)
    failed_error = min(model.predict(first_m, d.model))
    CheckStore(checks_file).path.unlink()
    for s in first_m:
        record(s, passed=False)
    _, _, later = check_final(d, progress, strategies, prefix, ttl, checks_file, limit=2,
                              rounds=2, steps=40, seed=0, model=model, graph=d.model,
                              train=False)
    assert later and not {s.id for s in later} & {s.id for s in first_m}
    assert all(model.predict(later, d.model) < failed_error)
    CheckStore(checks_file).path.unlink()
    for s in first:
        record(s, passed=False)
    # one round only: the second is never looked at
    checks, _, left = check_final(d, progress, strategies, prefix, ttl, checks_file, limit=2,
                                  rounds=1, steps=40, seed=0, train=False)
    assert set(checks) == {s.id for s in first} and left == []


def test_a_stored_check_is_judged_again_under_another_tolerance() -> None:
    from autosync_transfer.runtime.accuracy import ConvergenceTolerance
    from autosync_transfer.runtime.convergence import ConvergenceConfig, analyze

    exact = [1.0 - 0.9 * i / 39 for i in range(40)]
    # eight steps behind until step 30, then the same: later to the target, the same final loss
    slower = [exact[max(0, i - 8)] if i < 30 else exact[i] for i in range(40)]
    c = analyze("s", slower, exact, ConvergenceConfig(steps=40))
    assert c.step_ratio > 1.10 and not c.passed  # the default tolerance
    loose = c.judged(ConvergenceTolerance(max_step_ratio=1.5))
    assert loose.passed and loose.step_ratio == c.step_ratio and loose.tolerance.max_step_ratio == 1.5
    assert c.judged(c.tolerance) is c
    assert not c.judged(ConvergenceTolerance(max_step_ratio=1.15)).passed
    with pytest.raises(ValueError):
        SearchConfig(max_step_ratio=0.9)


def _fast_but_damaging(strategy: Strategy | None, record_id: str
                       ) -> tuple[TrialResult, dict[str, Any]]:
    """As :func:`_fast_if_lossy`, and every lossy strategy's probe says its averaged gradient
    is mostly error (relative error 1.3: about 2.7x the steps to a target loss)."""
    from autosync_transfer.runtime.accuracy import GradientFidelity

    res, facts = _fast_if_lossy(strategy, record_id)
    if strategy is not None and not is_lossless(strategy):
        res.fidelity = GradientFidelity(rel_error=1.3, cosine=0.1, steps=1)
    return res, facts


@pytest.mark.parametrize("objective, lossy_parents", [("time-to-loss", False),
                                                      ("step-time", True)])
def test_parents_of_a_time_to_loss_search_are_the_best_by_time_to_loss(
        tmp_path: Path, objective: str, lossy_parents: bool) -> None:
    """A lossy strategy twice as fast as the lossless ones whose probe says it trains 2.7x
    slower is no parent of local search when the objective is time to loss."""
    d = _ncf("ncf-dense")
    cfg = SearchConfig(method="random", budget=12, per_round=6, candidates=60, seed=3, confirm=0,
                       preset="compressed", objective=objective, final_checks=0)
    searcher = Searcher(d, tmp_path / "run.jsonl", cfg, launcher="local")
    searcher.run(_fast_but_damaging)
    from autosync_transfer.search.resume import load_run

    progress, strategies = load_run(d, tmp_path / "run.jsonl", run_name(cfg, False), cfg.budget)
    timed = searcher._timed(progress, strategies)
    assert any(not is_lossless(s) for s, _, _ in timed) and any(is_lossless(s) for s, _, _ in timed)
    parents = searcher._parents(timed)
    assert len(parents) == cfg.parents
    assert any(not is_lossless(p) for p in parents) == lossy_parents


class _UnitlessScores:
    """A learned simulator's slowness scores: increasing in the step time, no unit, negative."""

    kind = "rnn"

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    def score(self, strategies: Any, domain: Domain) -> np.ndarray:
        return np.array([3.0 * np.log(self.seconds[s.id]) - 40.0 for s in strategies])


def test_a_learned_simulators_scores_become_seconds_before_a_ratio_multiplies_them() -> None:
    from autosync_transfer.search.proposers.ranked import RankedProposer

    d = _ncf("ncf-dense")
    names = ["ps", "all_reduce", "partitioned_ar", "parallax"]
    strategies = [build(n, d) for n in names]
    seconds = {s.id: t for s, t in zip(strategies, (0.4, 0.2, 0.25, 0.3))}
    proposer = make_proposer(d, SearchConfig(method="analytical", seed=0))
    assert isinstance(proposer, RankedProposer)
    sim = _UnitlessScores(seconds)
    scores = sim.score(strategies, d)
    assert (scores < 0).all()  # multiplied by a ratio > 1, these would look faster
    proposer.timed = [(s, seconds[s.id]) for s in strategies[:3]]
    got = proposer.seconds(sim, scores)  # type: ignore[arg-type]
    assert got == pytest.approx([seconds[s.id] for s in strategies], rel=1e-6)
    # a ratio now penalizes: 0.2 s x 2.7 is slower than 0.3 s x 1
    assert got[1] * 2.7 > got[3] * 1.0
    # scores that do not rise with the measured times: mapped by quantiles, still positive and
    # in the scores' order
    proposer.timed = [(s, t) for s, t in zip(strategies[:3], (0.4, 0.3, 0.2))]
    flat = proposer.seconds(sim, scores)  # type: ignore[arg-type]
    assert (flat > 0).all() and list(np.argsort(flat)) == list(np.argsort(scores))
    proposer.timed = []
    assert list(np.argsort(proposer.seconds(sim, scores))) == list(np.argsort(scores))  # type: ignore[arg-type]


def test_final_checks_go_to_found_strategies_before_fp16_builders(tmp_path: Path) -> None:
    """The fp16 references (builders) are final candidates only in the slots the run's own
    lossy trials leave: a check spent on a builder cannot make the search's pick count."""
    from autosync_transfer.search.timetoloss import final_candidates

    _, progress, strategies, prefix = _random_run(tmp_path, budget=8)
    refs = {s.content_key for rid, s in strategies.items() if "/reference/" in rid}
    ranked = final_candidates(progress, strategies, prefix, get_objective("time-to-loss"), 100)
    kinds = [s.content_key in refs for s in ranked]
    assert any(kinds) and not all(kinds)
    assert kinds == sorted(kinds)  # every trial before every reference, whatever their times
