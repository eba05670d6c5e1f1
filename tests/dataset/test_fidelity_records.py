"""Gradient fidelity travels from the trial workers into the trial record, the parquet copy and
the loader's per-strategy tables; stores written before it keep loading."""

from __future__ import annotations

import json
import math

from autosync_transfer.dataset.collect import record_for
from autosync_transfer.dataset.loader import load_trials, strategy_runtimes, strategy_table
from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.runtime.trial import Protocol, WorkerPool
from autosync_transfer.strategies.builders import build

QUICK = Protocol(warmup=1, iters=2, timeout_s=120, startup_timeout_s=120, fidelity_steps=2)


def _domain() -> Domain:
    cluster = Cluster(name="t2x1", nodes=tuple(
        Node(name=f"n{i}", address=f"10.88.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    return Domain(name=f"ncf-{cluster.name}", model=get_model("ncf"), cluster=cluster)


def test_local_trials_record_fidelity_of_lossy_strategies(tmp_path):
    d = _domain()
    exact = build("all_reduce", d).model_copy(update={"id": "all_reduce"})
    fp16 = build("all_reduce", d, compressor="fp16").model_copy(update={"id": "ar+fp16"})
    psgd = build("all_reduce", d, compressor="powersgd",
                 powersgd_rank=1).model_copy(update={"id": "ar+psgd1"})
    store = TrialStore(tmp_path / "t.jsonl")
    results = {}
    with WorkerPool(d, "local", QUICK) as pool:
        for s in (exact, fp16, psgd, None):
            res = pool.run(s)
            assert res.ok, res.error
            assert len(res.iteration_times_s) == QUICK.iters  # the probe steps are not timed
            results[s.id if s else "ddp"] = res
            store.append(record_for(d, s, res, QUICK, "local", seed=0,
                                    record_id=f"{d.name}/{s.id if s else 'ddp'}"))
        off = pool.run(psgd, QUICK.model_copy(update={"fidelity_steps": 0}))
        assert off.ok and off.fidelity is None
    assert results["all_reduce"].fidelity is None and results["ddp"].fidelity is None
    small, large = results["ar+fp16"].fidelity, results["ar+psgd1"].fidelity
    assert small is not None and large is not None and small.steps == large.steps == 2
    assert 0 < small.rel_error < 5e-3 and small.cosine > 0.9999
    assert large.rel_error > small.rel_error and large.cosine < small.cosine
    names = {v.name for v in d.model.variables}
    assert set(large.per_variable) == names
    # the dense layers PowerSGD rank 1 compresses are far off; the embeddings (exact, on
    # parameter servers) are not
    assert large.per_variable["mlp.0.weight"] > 0.5 > 0.05 > small.per_variable["mlp.0.weight"]
    assert all(large.per_variable[v.name] == 0 for v in d.model.variables if v.sparse)

    rec = {r.strategy_id: r for r in store.records()}
    assert rec["all_reduce"].fidelity is None
    assert rec["ar+psgd1"].fidelity == large.model_dump(mode="json")
    assert json.loads(store.path.read_text().splitlines()[2])["fidelity"]["rel_error"] \
        == large.rel_error

    table = strategy_table(load_trials(store.path))
    by_id = table.set_index("strategy_id")
    assert math.isnan(by_id.loc["all_reduce", "fidelity_rel_error"])
    assert math.isnan(by_id.loc["all_reduce", "fidelity_cosine"])
    assert by_id.loc["ar+psgd1", "fidelity_rel_error"] == large.rel_error
    assert by_id.loc["ar+fp16", "fidelity_cosine"] == small.cosine

    # the parquet copy keeps it
    parquet = store.compact(tmp_path / "t.parquet")
    again = strategy_table(load_trials(parquet)).set_index("strategy_id")
    assert again.loc["ar+psgd1", "fidelity_rel_error"] == large.rel_error


def _old_record(i: int, fidelity: dict | None = None) -> dict:
    data = dict(id=f"r{i}", domain="bert-A", model="bert", cluster="A",
                model_fingerprint="m" * 16, cluster_fingerprint="c" * 16, strategy_id="s",
                strategy_kind="sampled", strategy={"id": "s", "kind": "sampled", "nodes": []},
                status="ok", iteration_times_s=[0.1, 0.2], median_s=0.15,
                protocol={"warmup": 1, "iters": 2}, launcher="local",
                timestamp="2026-01-01T00:00:00+00:00", wall_s=1.0, machine={},
                schema_version=2)
    if fidelity is not None:
        data.update(fidelity=fidelity, schema_version=3)
    return data


def test_stores_without_fidelity_keep_loading_and_the_worst_trial_counts(tmp_path):
    path = tmp_path / "old.jsonl"
    worst = {"rel_error": 0.4, "cosine": 0.8, "per_variable": {"w": 0.4}, "steps": 2}
    rows = [_old_record(1), _old_record(2, {"rel_error": 0.1, "cosine": 0.99,
                                             "per_variable": {}, "steps": 2}),
            _old_record(3, worst)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = list(TrialStore(path).records())
    assert recs[0].fidelity is None and recs[2].fidelity["per_variable"] == {"w": 0.4}
    per = strategy_runtimes(load_trials(path))
    assert per.loc[0, "fidelity_rel_error"] == 0.4 and per.loc[0, "fidelity_cosine"] == 0.8
    # a store with no fidelity anywhere: NaN
    only_old = tmp_path / "older.jsonl"
    only_old.write_text(json.dumps(_old_record(1)) + "\n")
    per = strategy_runtimes(load_trials(only_old))
    assert math.isnan(per.loc[0, "fidelity_rel_error"])


def test_record_rejects_a_malformed_fidelity():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="rel_error"):
        TrialRecord.model_validate(_old_record(1, {"rel_error": -1, "cosine": 1, "steps": 1}))
