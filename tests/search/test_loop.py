"""The search loop on real trial workers (local launcher, two ranks, NCF): every method spends
its budget without measuring a strategy twice, references are measured in the same run, the
store is the state (resume), and a killed search continues without repeating trials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.trial import Protocol
from autosync_transfer.search.config import SearchConfig
from autosync_transfer.search.loop import Searcher
from autosync_transfer.search.references import FP16_REFERENCES
from autosync_transfer.search.resume import load_run
from autosync_transfer.search.summary import summarize
from autosync_transfer.strategies import TORCH_DDP
from autosync_transfer.strategies.builders import BUILDERS, build

#: the references a search measures first
REFS = [*BUILDERS, TORCH_DDP, *FP16_REFERENCES]
QUICK = Protocol(warmup=1, iters=2, timeout_s=60, startup_timeout_s=120)
SPEC = """nodes:
  - address: 10.77.0.1
    cpus: [0]
    network_bandwidth: 1
    chief: true
  - address: 10.77.0.2
    cpus: [0]
    network_bandwidth: 1
"""


def _domain(bandwidth_gbps: float = 1.0) -> Domain:
    cluster = Cluster(name="s2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.77.0.{i + 1}", workers=1, bandwidth_gbps=bandwidth_gbps,
             chief=i == 0) for i in range(2)))
    return Domain(name="ncf-s2x1", model=get_model("ncf"), cluster=cluster)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _journal_study(store: Path, run: str):  # noqa: ANN202 - optuna.Study
    """Run ``run``'s TPE study as its journal beside ``store`` holds it."""
    import optuna

    from autosync_transfer.search.proposers.tpe import journal_path

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal_path(store))))
    return optuna.load_study(study_name=run, storage=storage)


def _fingerprints(path: Path, d: Domain) -> list[str]:
    from autosync_transfer.strategies.compact import decode

    return [decode(r["strategy"], d.model).fingerprint for r in _records(path)
            if r["strategy"] is not None and "/reference/" not in r["id"]
            and "/confirm/" not in r["id"]]


@pytest.mark.parametrize("method", ["random", "tpe", "analytical", "autosync"])
def test_every_method_spends_its_budget_once(tmp_path: Path, method: str) -> None:
    d = _domain()
    store = tmp_path / "run.jsonl"
    cfg = SearchConfig(method=method, budget=5, per_round=2, candidates=60, min_train=4,
                       max_epochs=3, seed=1, confirm=2, objective="step-time")
    events = []
    result = Searcher(d, store, cfg, launcher="local", protocol=QUICK, max_foreign_cpu=1.0,
                      on_event=lambda p: events.append(p.done)).run()
    recs = _records(store)
    refs = [r for r in recs if "/reference/" in r["id"]]
    assert sorted(r["id"].rsplit("/", 1)[1] for r in refs) == sorted([*BUILDERS, TORCH_DDP,
                                                                       *FP16_REFERENCES])
    searched = [r for r in recs if "/reference/" not in r["id"] and "/confirm/" not in r["id"]]
    assert len(searched) == 5 and result.summary["trials"] == 5
    # the best found, the best builder, the best fp16 reference and torch DDP measured again,
    # every member once a round, in an order shuffled per round
    # (and the best lossless strategy found, when the best is lossy)
    from autosync_transfer.runtime.accuracy import is_lossless

    confirm = [r["id"].rsplit("/", 1)[1] for r in recs if "/confirm/" in r["id"]]
    members = sorted({c.split("-", 1)[1] for c in confirm})
    assert {"best", "builder", "ddp", "fp16"} <= set(members) <= {"best", "builder", "ddp",
                                                                   "fp16", "lossless"}
    assert "lossless" not in members or not is_lossless(result.best)
    n = len(members)
    assert len(confirm) == 2 * n
    for i in range(2):
        assert sorted(confirm[i * n:(i + 1) * n]) == [f"{i}-{m}" for m in members]
    assert result.summary["confirmed"]["ddp_s"] > 0
    assert result.summary["speedup_vs_ddp"] == result.summary["confirmed"]["speedup_vs_ddp"]
    assert result.summary["confirmed"]["fp16_builder"].endswith("+fp16")
    assert result.summary["confirmed_speedup_vs_fp16_builder"] > 0
    c = result.summary["confirmed"]
    assert c["best"] == result.best.id and c["builder"] == build(result.summary["best_builder"], d).id
    assert c["measurements"] == 2 and result.summary["confirmed_speedup_vs_builder"] > 0
    # the strategy to use: the fastest of the three by the confirmation's medians
    times = {"search": (c["best_s"], c["best"]),
             result.summary["best_builder"]: (c["builder_s"], c["builder"]),
             result.summary["best_fp16_builder"]: (c["fp16_builder_s"], c["fp16_builder"])}
    fastest = min(times, key=lambda k: times[k][0])
    assert (result.chosen_from, result.chosen.id) == (fastest, times[fastest][1])
    fps = _fingerprints(store, d)
    assert len(fps) == len(set(fps)) == 5
    assert all(r["status"] == "ok" for r in recs), [r["error"] for r in recs if r["error"]]
    assert result.best is not None and result.summary["best_s"] > 0
    assert len(result.summary["curve"]) == 5 and len(result.summary["hit_rate"]) == 3
    assert events[-1] == 5
    if method == "tpe":
        assert all(r["strategy_kind"] == "knobs" for r in searched)
        assert len(_journal_study(store, result.run).trials) >= 5
    if method == "autosync":
        assert result.simulator is not None  # trained once enough strategies were measured

    # the store alone gives the same figures, measuring nothing (search_table.py --report)
    progress, strategies = load_run(d, store, result.run, cfg.budget)
    assert summarize(progress.trials, progress.references, cfg.per_round,
                     progress.confirmations) == result.summary
    assert result.best.content_key in {s.content_key for s in strategies.values()}
    # ... and a store of the same domain name measured on another cluster is refused
    with pytest.raises(ConfigError, match="measured on a different model or cluster"):
        load_run(_domain(bandwidth_gbps=2.0), store, result.run, cfg.budget)

    # other settings do not continue it: one line, nothing measured
    with pytest.raises(ConfigError, match=r"per_round=2, not 3; continue it with the same"):
        Searcher(d, store, cfg.model_copy(update={"per_round": 3}), launcher="local",
                 protocol=QUICK, max_foreign_cpu=1.0).run()
    assert _records(store) == recs

    # a larger budget continues the stored run: nothing is measured twice
    more = Searcher(d, store, cfg.model_copy(update={"budget": 7}), launcher="local",
                    protocol=QUICK, max_foreign_cpu=1.0).run()
    assert more.summary["trials"] == 7
    assert len([r for r in _records(store) if "/reference/" in r["id"]]) == len(refs)
    fps = _fingerprints(store, d)
    assert len(fps) == len(set(fps)) == 7
    assert len([r for r in _records(store) if "/confirm/7/" in r["id"]]) in (8, 10)  # 2 rounds


def test_runs_sharing_a_store_keep_their_own_settings(tmp_path: Path) -> None:
    """Two runs in one store (here a collection's, with its own metadata): each continues with
    the settings it was started with, and the collection's metadata stays."""
    from autosync_transfer.dataset.store import TrialStore

    d = _domain()
    store = tmp_path / "shared.jsonl"
    TrialStore(store).write_meta({"sampler": "random", "seed": 0})
    kw = {"launcher": "local", "protocol": QUICK, "max_foreign_cpu": 1.0}
    a = SearchConfig(method="random", budget=2, per_round=2, candidates=30, seed=1, confirm=0,
                     objective="step-time")
    b = a.model_copy(update={"method": "analytical", "per_round": 1})
    Searcher(d, store, a, **kw).run()
    Searcher(d, store, b, **kw).run()
    more = Searcher(d, store, a.model_copy(update={"budget": 3}), **kw).run()
    assert more.summary["trials"] == 3
    with pytest.raises(ConfigError, match=r"analytical-seed1 run with per_round=1, not 2"):
        Searcher(d, store, b.model_copy(update={"per_round": 2}), **kw).run()
    meta = TrialStore(store).read_meta()
    assert meta["sampler"] == "random" and meta["seed"] == 0
    assert set(meta["searches"]) == {"random-seed1", "analytical-seed1"}
    assert meta["searches"]["analytical-seed1"]["config"]["per_round"] == 1


def test_tpe_fills_a_round_over_the_knobs_when_it_proposes_only_known_strategies(
        tmp_path: Path) -> None:
    """When TPE's proposals are all measured already (it concentrates where the knobs decode to
    few strategies), the round is drawn uniformly over the knobs: new, distinct, and enqueued in
    the study so that TPE is told their results."""
    from autosync_transfer.search.summary import SearchProgress
    from autosync_transfer.strategies.knobs import decode

    d = _domain()
    searcher = Searcher(d, tmp_path / "run.jsonl", SearchConfig(method="tpe", seed=3),
                        launcher="local")
    tpe = searcher.proposer
    tpe.bind(searcher.store, searcher.name, SearchProgress(d.name, searcher.name, 10), {})
    tpe.tries_per_pick = 0  # no TPE proposal: every pick from the fallback
    first = tpe.propose(0, 4, set(), [])
    measured = {s.content_key for s in first}
    assert len(measured) == 4
    second = tpe.propose(0, 4, measured, [])
    assert len({s.content_key for s in second} - measured) == 4
    assert len(tpe.study.trials) == 8
    for s in second:
        assert decode(tpe.pending[s.id].params, d).content_key == s.content_key
    assert len(_journal_study(tmp_path / "run.jsonl", searcher.name).trials) == 8


def test_a_warm_run_continues_only_from_the_version_it_started_from(tmp_path: Path) -> None:
    """A warm run records the registered version its source resolved to: continuing it after
    the alias moved is refused in one line naming both versions; the same version under
    another spelling (``models:/NAME/VERSION``) continues it."""
    from autosync_transfer.dataset.store import TrialRecord, TrialStore
    from autosync_transfer.rankers.simulator import Simulator

    d = _domain()
    store = tmp_path / "run.jsonl"
    cfg = SearchConfig(method="autosync", budget=2, seed=1, objective="step-time")

    def searcher(source: str, version: str) -> Searcher:
        return Searcher(d, store, cfg, warm=Simulator("rnn"), warm_source=source,
                        warm_version=version, launcher="local")

    first = searcher("models:/autosync-ncf-A@champion", "autosync-ncf-A/3")
    TrialStore(store).write_meta({"searches": {first.name: {
        "config": cfg.model_dump(mode="json"), "warm_source": first.warm_source,
        "warm_version": first.warm_version}}})
    TrialStore(store).append(TrialRecord(
        id=f"{first._prefix()}reference/ddp", domain=d.name, model=d.model.name,
        cluster=d.cluster.name, model_fingerprint=d.model.fingerprint,
        cluster_fingerprint=d.cluster.fingerprint, strategy_id="ddp", strategy_kind="ddp",
        strategy=None, status="failed", error="x", iteration_times_s=[], median_s=None,
        protocol={}, launcher="local", timestamp="2026-11-23T00:00:00Z", wall_s=0.0, machine={}))
    first._check_resumable()
    searcher("models:/autosync-ncf-A/3", "autosync-ncf-A/3")._check_resumable()
    with pytest.raises(ConfigError, match=r"warm-started from autosync-ncf-A/3, but "
                       r"'models:/autosync-ncf-A@champion' is autosync-ncf-A/4; continue it "
                       r"with warm_source='models:/autosync-ncf-A/3'"):
        searcher("models:/autosync-ncf-A@champion", "autosync-ncf-A/4")._check_resumable()


def test_knob_candidates_are_ranked_with_the_sampled_ones(tmp_path: Path) -> None:
    """``knob_candidates`` whole-model strategies per round, decoded from uniform knob
    assignments: distinct, valid, the same for a round when asked again, part of the pool the
    ranker picks from, and named in the run (a run without them is another run)."""
    from autosync_transfer.strategies.validate import validate

    d = _domain()
    cfg = SearchConfig(method="analytical", candidates=1, neighbours=0, knob_candidates=30, seed=2)
    s = Searcher(d, tmp_path / "run.jsonl", cfg, launcher="local")
    assert s.name == "analytical-knobs30-seed2"
    assert Searcher(d, tmp_path / "run.jsonl", cfg.model_copy(update={"knob_candidates": 0}),
                    launcher="local").name == "analytical-seed2"
    # by default: 200 for the ranked methods, none for the others
    assert SearchConfig(method="autosync").knob_candidates == 200
    assert SearchConfig(method="random").knob_candidates == 0
    assert SearchConfig(method="tpe", knob_candidates=None).knob_candidates == 0
    knobbed = s.proposer.knob_candidates(0)
    keys = [k.content_key for k in knobbed]
    assert len(set(keys)) == len(keys) == 30
    assert [k.content_key for k in s.proposer.knob_candidates(0)] == keys
    assert [k.content_key for k in s.proposer.knob_candidates(1)] != keys
    for k in knobbed:
        validate(k, d)
    picks = s.proposer.propose(0, 5, set(), [])
    assert len(picks) == 5 and sum(p.content_key in set(keys) for p in picks) >= 4


def test_a_killed_search_continues_without_repeating(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yml"
    spec.write_text(SPEC)
    store = tmp_path / "run.jsonl"
    argv = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "search", "ncf",
            "--cluster-file", str(spec), "--launcher", "local", "--method", "random", "--budget", "6",
            "-k", "3", "--candidates", "40", "--warmup", "1", "--iters", "2", "--no-log",
            "--max-foreign-cpu", "1", "--store", str(store), "--objective", "step-time",
            "--confirm", "2"]  # the confirmation's own behaviour: test_every_method_spends_...
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if store.exists() and len(store.read_text().splitlines()) >= len(REFS) + 4:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)  # mid-round: round 1 has started
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = _records(store)
    done = [r for r in before if "/reference/" not in r["id"]]
    assert 4 <= len(done) < 6
    chosen = tmp_path / "chosen.json"
    again = subprocess.run(argv + ["--json", "--export-json", str(chosen)], capture_output=True,
                           text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    assert summary["trials"] == 6
    # the strategy to use is exported: valid on the domain, the one the summary names
    from autosync_transfer.strategies.types import Strategy
    from autosync_transfer.strategies.validate import validate

    exported = Strategy.from_json(chosen.read_text())
    assert exported.id == summary["chosen_strategy"] and summary["chosen_from"]
    validate(exported, _domain())
    after = _records(store)
    assert after[:len(before)] == before  # append-only
    ids = [r["id"] for r in after]
    assert len(ids) == len(set(ids))
    assert len([r for r in after if "/reference/" in r["id"]]) == len(REFS)
    d = Domain(name="ncf-s2x1", model=get_model("ncf"), cluster=_domain().cluster)
    fps = _fingerprints(store, d)
    assert len(fps) == len(set(fps)) == 6


@pytest.mark.parametrize("argv, message", [
    (["search", "ncf-A", "--method", "grid"], "unknown method 'grid' (known: autosync, random, tpe, analytical, stepsim)"),
    (["search", "ncf-A", "--launcher", "ssh"], "--launcher must be one of emulated, local, torchrun, got 'ssh'"),
    (["search", "ncf-A", "--method", "tpe", "--simulator", "ncf-B"], "--simulator needs --method autosync, got 'tpe'"),
    (["search", "nope-A", "--launcher", "local"], "unknown domain 'nope-A'"),
    (["search", "ncf-A", "--launcher", "local", "--preset", "odd"], "unknown sampler preset 'odd'"),
    (["search", "ncf-A", "--launcher", "local", "--simulator", "zzz"], "--simulator 'zzz' is neither a models:/ URI nor a known domain"),
    (["search", "ncf-A", "--launcher", "local", "--method", "tpe", "--knob-candidates", "50"], "--knob-candidates needs a ranked method (autosync, analytical, stepsim), got 'tpe'"),
])
def test_bad_search_input_is_one_line(cli, registry, tmp_path: Path, argv: list[str], message: str) -> None:
    from autosync_transfer.testing.cli import assert_one_line_error

    res = cli(*argv, "--store", str(tmp_path / "s.jsonl"))
    assert_one_line_error(res, message)
    assert not (tmp_path / "s.jsonl").exists()
