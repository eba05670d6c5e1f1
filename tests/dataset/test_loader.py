"""Loading trial tables from stores, parquet files and folders; summaries per domain."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import autosync_transfer
from autosync_transfer.dataset import loader
from autosync_transfer.dataset.loader import (
    describe_domain,
    list_datasets,
    load_trials,
    strategies_and_runtimes,
)
from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.errors import ConfigError, SpecError, UnknownNameError
from autosync_transfer.strategies.types import AllReduce, Strategy, VarConfig


def strategy(sid: str) -> Strategy:
    return Strategy(id=sid, kind="sampled",
                    nodes=(VarConfig(var_name="w", synchronizer=AllReduce(group=0)),))


def record(rid: str, domain: str, sid: str | None, median: float | None, *, status: str = "ok",
           reference: bool = False) -> TrialRecord:
    s = strategy(sid) if sid is not None else None
    return TrialRecord(
        id=rid, domain=domain, model=domain.rsplit("-", 1)[0], cluster=domain.rsplit("-", 1)[1],
        model_fingerprint="m", cluster_fingerprint="c",
        strategy_id=sid or "torch_ddp", strategy_kind="sampled" if s else "torch_ddp",
        strategy=s.model_dump(mode="json") if s else None, status=status,  # type: ignore[arg-type]
        iteration_times_s=[median] * 3 if median else [], median_s=median,
        protocol={"warmup": 1, "iters": 3}, launcher="local", reference=reference,
        timestamp="2024-05-01T12:00:00+00:00", wall_s=1.0, machine={},
    )


@pytest.fixture
def data_dir(tmp_path) -> Path:
    d = tmp_path / "datasets"
    (d / "sub").mkdir(parents=True)
    a = TrialStore(d / "bert-A.jsonl")
    a.append(record("a1", "bert-A", "s1", 0.2))
    a.append(record("a2", "bert-A", "s2", 0.4))
    a.append(record("a3", "bert-A", "s1", 0.22, reference=True))
    a.append(record("a4", "bert-A", "s3", None, status="failed"))
    a.append(record("a5", "bert-A", None, 0.3))  # torch DDP
    b = TrialStore(tmp_path / "ncf-B.jsonl")
    b.append(record("b1", "ncf-B", "t1", 1.0))
    b.append(record("b2", "ncf-B", "t2", 3.0))
    b.append(record("b3", "ncf-B", "t3", None, status="timeout"))
    b.compact(d / "sub" / "ncf-B.parquet")
    a.compact(d / "sub" / "bert-A.parquet")  # same records as the store: read once
    return d


def test_load_filters_and_dedups(data_dir):
    ok = load_trials(data_dir)
    assert sorted(ok["id"]) == ["a1", "a2", "a3", "a5", "b1", "b2"]
    assert list(ok.columns)[-1] == "source"
    everything = load_trials(data_dir, status=None)
    assert len(everything) == 8 and len(load_trials(data_dir, status="all")) == 8
    assert sorted(load_trials(data_dir, domain="ncf-B", status=["failed", "timeout"])["id"]) == ["b3"]
    from_parquet = load_trials(data_dir / "sub" / "ncf-B.parquet", status=None)
    assert from_parquet.loc[0, "iteration_times_s"] == [1.0, 1.0, 1.0]
    with pytest.raises(ConfigError, match="status must be one of"):
        load_trials(data_dir, status="crashed")
    with pytest.raises(SpecError, match="no trial dataset at"):
        load_trials(data_dir / "missing")


def test_default_location(monkeypatch, data_dir, tmp_path):
    monkeypatch.delenv(loader.DATASETS_ENV, raising=False)
    repo = Path(autosync_transfer.__file__).resolve().parents[1]
    assert loader.default_datasets_dir() == repo / "datasets"
    monkeypatch.setenv(loader.DATASETS_ENV, str(data_dir))
    assert len(load_trials()) == 6
    monkeypatch.setenv(loader.DATASETS_ENV, str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    assert len(load_trials()) == 0 and len(list_datasets()) == 0


def test_list_datasets(data_dir):
    df = list_datasets(data_dir).set_index("domain")
    bert = df.loc["bert-A"]
    assert (bert["trials"], bert["ok"], bert["failed"], bert["timeout"]) == (5, 4, 1, 0)
    assert bert["strategies"] == 3 and bert["references"] == 1  # s1, s2, torch_ddp
    assert bert["best_s"] == pytest.approx(0.21) and bert["worst_s"] == pytest.approx(0.4)
    assert bert["median_s"] == pytest.approx(0.3)
    ncf = df.loc["ncf-B"]
    assert ncf["timeout"] == 1 and ncf["spread"] == pytest.approx(3.0)


def test_describe_domain(data_dir):
    info = describe_domain("bert-A", data_dir, top=2)
    assert info["counts"] == {"ok": 4, "failed": 1, "timeout": 0}
    assert [f["strategy_id"] for f in info["fastest"]] == ["s1", "torch_ddp"]
    assert info["fastest"][0]["measurements"] == 2
    assert info["protocols"] == [{"protocol": {"iters": 3, "warmup": 1}, "trials": 5}]
    noise = info["reference_noise"]
    assert noise["strategies"] == 1 and noise["max_relative_range"] == pytest.approx(0.02 / 0.21)
    assert noise["median_robust_cv"] == pytest.approx(1.4826 * 0.01 / 0.21)
    assert describe_domain("ncf-B", data_dir)["reference_noise"] is None
    with pytest.raises(UnknownNameError, match="no trials for domain 'gpt-A'.*bert-A"):
        describe_domain("gpt-A", data_dir)


def test_strategies_and_runtimes(data_dir):
    pairs = strategies_and_runtimes(load_trials(data_dir, domain="bert-A"))
    assert [(s.id, round(t, 6)) for s, t in pairs] == [("s1", 0.21), ("s2", 0.4)]
    assert all(isinstance(s, Strategy) and s.kind == "sampled" for s, _ in pairs)
    assert strategies_and_runtimes(load_trials(data_dir, domain="nothing")) == []
    with pytest.raises(ConfigError, match="not a trial table"):
        strategies_and_runtimes(load_trials(data_dir).drop(columns=["strategy"]))
    assert not math.isnan(pairs[0][1])


def test_missing_optional_dependency_is_a_config_error(monkeypatch):
    import sys

    from autosync_transfer.dataset.store import require

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ConfigError, match=r"autosync-transfer\[ml\]"):
        require("pandas")
