"""Proposers: one class per search method behind one registry, each owning its state; TPE's
study lives in an Optuna journal, so that a killed search resumes from the study itself (and a
store written before the journal, from its side file). Trials are measured by a stand-in
``measure`` here (times from a hash of the strategy): no workers are started."""

from __future__ import annotations

import hashlib
import json
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.runtime.trial import TrialResult
from autosync_transfer.search.config import SearchConfig, run_name
from autosync_transfer.search.loop import Searcher
from autosync_transfer.search.proposers import (PROPOSERS, RANKED_METHODS, SEARCH_METHODS,
                                                AnalyticalProposer, AutoSyncProposer, Proposer,
                                                RandomProposer, StepSimProposer, TPEProposer,
                                                make_proposer)
from autosync_transfer.search.proposers.tpe import journal_path, legacy_knobs_path
from autosync_transfer.strategies.types import Strategy


def _domain() -> Domain:
    cluster = Cluster(name="s2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.77.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    return Domain(name="ncf-s2x1", model=get_model("ncf"), cluster=cluster)


def _fake(strategy: Strategy | None, record_id: str) -> tuple[TrialResult, dict[str, Any]]:
    """A deterministic stand-in for a trial: a time from the strategy's content, some failures."""
    key = "ddp" if strategy is None else strategy.content_key
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    if strategy is not None and "/reference/" not in record_id and h % 7 == 0:
        return TrialResult("failed", [], error="stand-in failure", wall_s=0.0), {}
    t = 0.01 + (h % 1000) / 1e5
    return TrialResult("ok", [t, t, t], error="", wall_s=0.1), {}


def _study(store: Path, run: str):  # noqa: ANN202 - optuna.Study
    import optuna

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal_path(store))))
    return optuna.load_study(study_name=run, storage=storage)


def _searched(store: Path) -> list[str]:
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    return [r["strategy_id"] for r in rows if "/reference/" not in r["id"]
            and "/confirm/" not in r["id"]]


TPE = SearchConfig(method="tpe", budget=8, per_round=4, seed=5, confirm=0, objective="step-time")


def test_one_registry_names_every_method() -> None:
    from autosync_transfer.adapt.core import METHODS as ADAPT_METHODS
    from autosync_transfer.search import loop

    assert SEARCH_METHODS == ("autosync", "random", "tpe", "analytical", "stepsim") == tuple(PROPOSERS)
    assert all(issubclass(cls, Proposer) and cls.method == m for m, cls in PROPOSERS.items())
    assert RANKED_METHODS == ("autosync", "analytical", "stepsim")
    # the config's type and the old name (one release) read the registry
    assert typing.get_args(SearchConfig.model_fields["method"].annotation) == SEARCH_METHODS
    assert loop.METHODS is SEARCH_METHODS and set(loop.METHODS).isdisjoint(ADAPT_METHODS)
    d = _domain()
    kinds = {m: type(make_proposer(d, SearchConfig(method=m, knob_candidates=None)))
             for m in SEARCH_METHODS}
    assert kinds == {"autosync": AutoSyncProposer, "random": RandomProposer, "tpe": TPEProposer,
                     "analytical": AnalyticalProposer, "stepsim": StepSimProposer}
    assert run_name(SearchConfig(method="autosync"), warm=True) == "autosync-warm-knobs200-seed0"
    assert run_name(SearchConfig(method="tpe", seed=2), warm=False) == "tpe-seed2"


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "tpe", "knob_candidates": 5}, "knob_candidates needs a ranked method "
                                              "(autosync, analytical, stepsim), got 'tpe'"),
    ({"method": "autosync", "ranker": "analytical"}, "ranker must be a learned ranker"),
    ({"method": "random", "preset": "odd"}, "unknown sampler preset 'odd'"),
])
def test_a_setting_a_method_cannot_search_with_is_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_proposer(_domain(), SearchConfig(**kwargs))


def test_only_a_warm_starting_method_takes_a_warm_simulator(tmp_path: Path) -> None:
    from autosync_transfer.rankers.simulator import Simulator

    d = _domain()
    with pytest.raises(ConfigError, match=r"warm_start needs method='autosync', got method='tpe'"):
        Searcher(d, tmp_path / "s.jsonl", TPE, warm=Simulator("rnn"), launcher="local")
    with pytest.raises(ConfigError, match="warm_start needs a learned simulator"):
        Searcher(d, tmp_path / "s.jsonl", SearchConfig(), warm=Simulator("analytical"),
                 launcher="local")
    with pytest.raises(ConfigError, match="launcher must be one of emulated, local, torchrun"):
        Searcher(d, tmp_path / "s.jsonl", TPE, launcher="ssh")


def test_a_searcher_takes_a_proposer_made_for_its_config(tmp_path: Path) -> None:
    d = _domain()
    tpe = TPEProposer(d, TPE, tries_per_pick=5)
    searcher = Searcher(d, tmp_path / "s.jsonl", TPE, proposer=tpe, launcher="local")
    assert searcher.proposer is tpe and searcher.name == "tpe-seed5"
    with pytest.raises(ConfigError, match="made for another domain or config"):
        Searcher(d, tmp_path / "s.jsonl", TPE.model_copy(update={"seed": 6}), proposer=tpe,
                 launcher="local")
    with pytest.raises(NotFittedError, match="needs bind"):
        TPEProposer(d, TPE).propose(0, 1, set(), [])


def test_a_killed_tpe_search_resumes_from_its_journal(tmp_path: Path) -> None:
    """The study is the journal's: after a kill mid-round, the trial asked for but never
    measured is failed, nothing is measured twice, and TPE keeps every result it was told."""
    d = _domain()
    store = tmp_path / "run.jsonl"
    calls: list[str] = []

    def killed(strategy: Strategy | None, record_id: str) -> tuple[TrialResult, dict[str, Any]]:
        if "/reference/" not in record_id and len(calls) == 6:
            raise KeyboardInterrupt  # mid round 1: two of its trials measured
        if "/reference/" not in record_id:
            calls.append(record_id)
        return _fake(strategy, record_id)

    with pytest.raises(KeyboardInterrupt):
        Searcher(d, store, TPE, launcher="local").run(measure=killed)
    run = "tpe-seed5"
    states = Counter(t.state.name for t in _study(store, run).trials)
    told = states["COMPLETE"]
    assert states["RUNNING"] == 2 and told >= 6
    result = Searcher(d, store, TPE, launcher="local").run(measure=_fake)
    assert result.summary["trials"] == 8
    ids = _searched(store)
    assert len(ids) == len(set(ids)) == 8
    study = _study(store, run)
    by_id = {t.user_attrs.get("strategy_id"): t for t in study.trials
             if t.state.name == "COMPLETE" and "strategy_id" in t.user_attrs}
    assert set(ids) <= set(by_id)  # every measured trial told, with the store's time
    assert Counter(t.state.name for t in study.trials)["FAIL"] == 2
    assert not any(t.state.name == "RUNNING" for t in study.trials)
    assert not legacy_knobs_path(store).exists()


def test_a_store_from_before_the_journal_resumes_from_its_side_file(tmp_path: Path) -> None:
    """A store whose TPE knob assignments are in ``<store>.knobs.jsonl`` (no journal): read once
    into the run's study, which then goes on in the journal."""
    d = _domain()
    store = tmp_path / "run.jsonl"
    Searcher(d, store, TPE, launcher="local").run(measure=_fake)
    study = _study(store, "tpe-seed5")
    side = [json.dumps({"strategy_id": t.user_attrs["strategy_id"], "params": t.params})
            for t in study.trials if "strategy_id" in t.user_attrs]
    legacy_knobs_path(store).write_text("\n".join(side) + "\n{\"strategy_id\": \"to")  # torn
    journal_path(store).unlink()

    more = TPE.model_copy(update={"budget": 12})
    Searcher(d, store, more, launcher="local").run(measure=_fake)
    ids = _searched(store)
    assert len(ids) == len(set(ids)) == 12
    replayed = _study(store, "tpe-seed5").trials
    assert [t.user_attrs["strategy_id"] for t in replayed[:8]] == ids[:8]
    assert all(t.state.name == "COMPLETE" for t in replayed[:8])
    # the side file is read only while the journal has no study of the run
    legacy_knobs_path(store).write_text("not json\n")
    Searcher(d, store, TPE.model_copy(update={"budget": 13}), launcher="local").run(measure=_fake)
    assert len(_searched(store)) == 13


def test_a_journal_ahead_of_its_store_is_refused(tmp_path: Path) -> None:
    d = _domain()
    store = tmp_path / "run.jsonl"
    Searcher(d, store, TPE, launcher="local").run(measure=_fake)
    store.unlink()
    with pytest.raises(ConfigError, match="holds TPE trials of run tpe-seed5 that store"):
        Searcher(d, store, TPE, launcher="local").run(measure=_fake)


def test_the_ranked_methods_score_with_the_calibration_of_the_searchs_launcher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.domains.physics import save_calibration
    from autosync_transfer.domains.profile import ClusterCalibration, NodeCalibration
    from autosync_transfer.rankers.physics import clear_physics_cache
    from autosync_transfer.rankers.simulator import Simulator

    monkeypatch.setenv("AUTOSYNC_CALIBRATIONS_DIR", str(tmp_path / "calibrations"))
    clear_physics_cache()
    d = _domain()
    for launcher, created in (("local", "2026-01-01"), ("emulated", "2026-02-01")):
        save_calibration(ClusterCalibration(
            cluster=d.cluster.name, fingerprint=d.cluster.fingerprint, launcher=launcher,
            nodes=tuple(NodeCalibration(name=n.name, bandwidth_gbps=0.5, latency_s=1e-4)
                        for n in d.cluster.nodes),
            intra_bandwidth_gbps=1.0, created_at=created))
    cfg = SearchConfig(method="stepsim", knob_candidates=None)
    stepsim = Searcher(d, tmp_path / "s.jsonl", cfg, launcher="local").proposer
    assert stepsim.launcher == "local"
    scorer = stepsim.scorer()
    assert scorer.launcher == "local" and stepsim.scorer() is scorer  # kept between rounds
    assert scorer.physics_of(d).calibration.launcher == "local"
    warm = Simulator("rnn")
    autosync = Searcher(d, tmp_path / "a.jsonl", SearchConfig(knob_candidates=None), warm=warm,
                        launcher="local").proposer
    assert autosync.scorer().launcher == "local" and autosync.warm is warm
    assert warm.launcher is None and warm.physics_of(d).calibration.launcher == "local"  # any: real
    clear_physics_cache()
