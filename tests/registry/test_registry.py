"""The simulator registry on a temporary MLflow store: log -> register -> load round trips,
aliases, promote_if_better, pyfunc scoring from ``models:/...@champion``, weights never unpickled.

Test double: the trial data here are synthetic. Runtimes are the analytical cost model's estimate
plus a fixed compute time and seeded noise (no measurement), on the small catalog domain ncf-A.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosync_transfer.dataset.loader import strategy_table
from autosync_transfer.testing.synthetic import synthetic_trials

pytest.importorskip("mlflow")
torch = pytest.importorskip("torch")

from autosync_transfer.errors import ConfigError, SpecError, UnknownNameError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

DOMAIN = "ncf-A"
NAME = "autosync-ncf-A"


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def domain() -> Any:
    from autosync_transfer.domains.catalog import get_domain

    return get_domain(DOMAIN)


@pytest.fixture(scope="module")
def strategies(domain: Any) -> list[Any]:
    from autosync_transfer.strategies.sampler import StrategySampler

    return StrategySampler(domain, seed=7).sample_n(12)


@pytest.fixture(scope="module")
def trained_linear(domain: Any) -> tuple[Any, dict[str, Any]]:
    """A tiny trained linear simulator (a few epochs on the synthetic trials)."""
    from autosync_transfer.rankers.simulator import train_simulator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_simulator("linear", strategy_table(synthetic_trials(domain)), seed=0,
                               max_epochs=3, patience=None, batch_size=16)
    finally:
        torch.set_num_threads(threads)


def analytical() -> Any:
    from autosync_transfer.rankers.simulator import Simulator

    return Simulator("analytical", {}, 1)


def log(sim: Any, pairwise_acc: float = 0.8, split: str = "split-a", **kw: Any) -> Any:
    from autosync_transfer import registry as models

    tags = {"trial_count": 40, "test_split": split, **kw.pop("tags", {})}
    return models.log_simulator(sim, domain=DOMAIN,
                                metrics={"test_pairwise_accuracy": pairwise_acc,
                                         "test_regret": 0.1, "test_per_domain": {
                                             DOMAIN: {"pairwise_accuracy": pairwise_acc}}},
                                tags=tags, **kw)


# -- store ----------------------------------------------------------------------------------------


def test_store_defaults_to_the_registry_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    from autosync_transfer.registry import store

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("AUTOSYNC_REGISTRY_ARTIFACTS", raising=False)
    monkeypatch.delenv("AUTOSYNC_REGISTRY_DIR", raising=False)
    repo = Path(store.__file__).resolve().parents[2]
    assert store.tracking_uri() == f"sqlite:///{repo / 'registry' / 'mlflow.db'}"
    assert store.artifact_root() == (repo / "registry" / "artifacts").as_uri()
    monkeypatch.setenv("AUTOSYNC_REGISTRY_DIR", str(tmp_path / "reg"))
    assert store.tracking_uri() == f"sqlite:///{tmp_path / 'reg' / 'mlflow.db'}"
    assert store.artifact_root() == (tmp_path / "reg" / "artifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert store.tracking_uri() == "http://127.0.0.1:5999"


def test_experiment_has_an_explicit_artifact_location(registry: Path) -> None:
    from autosync_transfer.registry import store

    c = store.client()
    exp = c.get_experiment(store.experiment_id(c))
    assert exp.name == store.EXPERIMENT_NAME
    assert exp.artifact_location == (registry / "artifacts").as_uri()
    assert store.experiment_id(c) == exp.experiment_id  # found, not created again


def test_registered_name() -> None:
    from autosync_transfer.registry import registered_name

    assert registered_name("bert-B") == "autosync-bert-B"
    assert registered_name("autosync-bert-B") == "autosync-bert-B"
    with pytest.raises(ConfigError):
        registered_name("bert B'")


# -- round trips ----------------------------------------------------------------------------------


def test_analytical_round_trip_and_version_tags(registry: Path, domain: Any,
                                                strategies: list[Any]) -> None:
    from autosync_transfer import registry as models

    sim = analytical()
    t0 = time.perf_counter()
    info = log(sim, tags={"seed": 3})
    elapsed = time.perf_counter() - t0
    assert (info.name, info.version) == (NAME, "1")
    t = info.tags
    assert t["domain"] == DOMAIN and t["model"] == "ncf" and t["cluster"] == "A"
    assert t["model_fingerprint"] == domain.model.fingerprint
    assert t["cluster_fingerprint"] == domain.cluster.fingerprint
    assert t["feature_schema_version"] == "1"
    assert t["ranker_kind"] == "analytical"
    assert t["trial_count"] == "40" and t["test_split"] == "split-a" and t["seed"] == "3"
    assert t["run_id"] == info.run_id
    assert info.metrics == {"pairwise_acc": 0.8, "regret": 0.1,
                            f"per_domain.{DOMAIN}.pairwise_acc": 0.8}
    assert elapsed < 30, elapsed

    expected = sim.score(strategies, domain)
    for ref in (NAME, DOMAIN, f"models:/{NAME}/1"):
        loaded = models.load_simulator(ref, version=None if ref.startswith("models:") else 1)
        assert loaded.kind == "analytical"
        np.testing.assert_array_equal(loaded.score(strategies, domain), expected)


def test_trained_linear_round_trip(registry: Path, domain: Any, strategies: list[Any],
                                   trained_linear: tuple[Any, dict[str, Any]]) -> None:
    from autosync_transfer import registry as models

    sim, metrics = trained_linear
    info = models.log_simulator(sim, domain=domain,
                                metrics={k: v for k, v in metrics.items() if k.startswith("test_")},
                                tags={"trial_count": 40, "test_split": "s"})
    assert info.tags["ranker_kind"] == "linear"
    assert "pairwise_acc" in info.metrics and "kendall_tau" in info.metrics
    models.promote(NAME, info.version)
    loaded = models.load_simulator(f"models:/{NAME}@champion")
    np.testing.assert_array_equal(loaded.score(strategies, domain), sim.score(strategies, domain))
    for k, v in sim.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)


def test_weights_are_a_plain_state_dict_read_with_weights_only(
        registry: Path, trained_linear: tuple[Any, dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    from autosync_transfer import registry as models
    from autosync_transfer.registry.flavor import CONFIG_FILE, WEIGHTS_FILE

    info = log(trained_linear[0])
    calls: list[dict[str, Any]] = []
    real_load = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    models.load_simulator(NAME, version=info.version)
    assert calls and all(c.get("weights_only") is True for c in calls)

    # the run artifact is a state dict file: loadable with weights_only, tensors only
    folder = MlflowClient().download_artifacts(info.run_id, "simulator", str(registry / "dl"))
    state = real_load(Path(folder) / WEIGHTS_FILE, weights_only=True)
    assert isinstance(state, dict) and state
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    config = json.loads((Path(folder) / CONFIG_FILE).read_text())
    assert config["kind"] == "linear" and config["trained_on"] == DOMAIN


class _Boom:
    def __reduce__(self) -> Any:
        return (os.system, ("echo pwned",))


def test_pickled_code_in_weights_is_refused(tmp_path: Path,
                                            trained_linear: tuple[Any, dict[str, Any]]) -> None:
    from autosync_transfer.registry.flavor import read_simulator_files, write_simulator_files

    config, weights = write_simulator_files(trained_linear[0], tmp_path)
    with open(weights, "wb") as f:
        pickle.dump({"w": _Boom()}, f, protocol=2)
    with pytest.raises(SpecError, match="plain state_dict"):
        read_simulator_files(config, weights)


# -- aliases --------------------------------------------------------------------------------------


def test_a_judge_promotes_only_a_confident_gain_and_records_it(registry: Path) -> None:
    from autosync_transfer import registry as models

    sim = analytical()
    v1 = log(sim, 0.70)
    assert models.promote_if_better(NAME, v1.version) is True
    seen: list[tuple[str, str]] = []

    def judge(result: tuple[float, float]) -> Any:
        def compare(candidate: Any, champion_sim: Any) -> tuple[float, float]:
            seen.append((candidate.kind, champion_sim.kind))  # both loaded from the registry
            return result
        return compare

    v2 = log(sim, 0.99)  # a higher number is not a reason by itself
    assert models.promote_if_better(NAME, v2.version, judge=judge((0.29, -0.01))) is False
    assert models.champion(NAME) == "1" and seen == [("analytical", "analytical")]
    tags = models.describe_model(NAME)["versions"][0]["tags"]
    assert (tags["promotion_gain"], tags["promotion_gain_low"], tags["promotion_against"]) == (
        "0.29", "-0.01", "1")
    v3 = log(sim, 0.10)  # nor a lower one against it: the judge decides
    assert models.promote_if_better(NAME, v3.version, judge=judge((0.05, 0.01))) is True
    assert models.champion(NAME) == "3"
    # a judge with nothing to compare (no pair counts) keeps the champion
    v4 = log(sim, 0.80)
    assert models.promote_if_better(NAME, v4.version,
                                    judge=judge((math.nan, math.nan))) is False
    assert models.champion(NAME) == "3"


def test_champion_and_promote_if_better(registry: Path) -> None:
    from autosync_transfer import registry as models

    sim = analytical()
    v1 = log(sim, 0.70)
    assert models.champion(NAME) is None
    assert models.promote_if_better(NAME, v1.version) is True  # no champion yet
    assert models.champion(NAME) == "1"
    v2 = log(sim, 0.60)
    assert models.promote_if_better(NAME, v2.version) is False
    v3 = log(sim, 0.90)
    assert models.promote_if_better(NAME, v3.version) is True
    assert models.champion(NAME) == "3"
    assert models.promote_if_better(NAME, v3.version) is False  # already champion
    # regret: lower is better (v1..v3 all 0.1: a tie keeps the incumbent)
    assert models.promote_if_better(NAME, v1.version, metric="regret") is False
    # another test split: not comparable without re-scoring the champion on the candidate's
    v4 = log(sim, 0.95, split="split-b")
    assert models.promote_if_better(NAME, v4.version) is False
    assert models.promote_if_better(NAME, v4.version, rescore=lambda s: 0.99) is False
    assert models.promote_if_better(NAME, v4.version, rescore=lambda s: 0.5) is True
    assert models.champion(NAME) == "4"
    with pytest.raises(ConfigError, match="no metric 'top9'"):
        models.promote_if_better(NAME, v4.version, metric="top9")
    # manual promotion, and what the registry shows
    models.promote(NAME, 2)
    desc = models.describe_model(NAME)
    assert desc["aliases"] == {"champion": "2"}
    assert [v["version"] for v in desc["versions"]] == ["4", "3", "2", "1"]
    v2_row = next(v for v in desc["versions"] if v["version"] == "2")
    assert v2_row["aliases"] == ["champion"] and v2_row["metrics"]["pairwise_acc"] == 0.6
    rows = models.list_models()
    assert [(r["name"], r["versions"], r["champion"]) for r in rows] == [(NAME, 4, "2")]


def test_unknown_names_are_one_line_errors(registry: Path) -> None:
    from autosync_transfer import registry as models

    with pytest.raises(UnknownNameError, match="no registered model 'autosync-nope'"):
        models.load_simulator("autosync-nope")
    log(analytical())
    with pytest.raises(UnknownNameError, match="has no version 7"):
        models.load_simulator(NAME, version=7)
    with pytest.raises(UnknownNameError, match="no version with alias 'champion'"):
        models.load_simulator(f"models:/{NAME}@champion")
    with pytest.raises(UnknownNameError, match="has no version 9"):
        models.promote(NAME, 9)
    with pytest.raises(UnknownNameError, match="a model version is a number"):
        models.promote(NAME, "latest")
    with pytest.raises(UnknownNameError):
        models.describe_model("autosync-nope")


def test_bad_input_registers_nothing(registry: Path, tmp_path: Path) -> None:
    from autosync_transfer import registry as models

    with pytest.raises(ConfigError, match="unknown lineage key"):
        log(analytical(), lineage={"parent": "x"})
    with pytest.raises(ConfigError, match="does not exist"):
        log(analytical(), plots=[tmp_path / "missing.png"])
    with pytest.raises(UnknownNameError):
        models.log_simulator(analytical(), domain="ncf-Z", metrics={})
    assert models.list_models() == []


def test_lineage_and_plots(registry: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from autosync_transfer.registry import plots

    scores, runtimes = np.arange(8.0), np.arange(8.0)[::-1] + 1
    figs = [
        plots.rank_scatter(scores, runtimes, tmp_path / "scatter.png"),
        plots.score_histogram(scores, tmp_path / "hist.png"),
        plots.training_curves({"train_loss": [0.7, 0.6], "val_pairwise_acc": [0.5, 0.6],
                               "epoch_s": [1.0, 1.0]}, tmp_path / "curves.png"),
        plots.training_curves([{"epoch": 0, "train_loss": 0.7}], tmp_path / "rows.png"),
    ]
    for f in figs:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = log(analytical(), plots=figs, lineage={
        "source_model": "autosync-bert-A", "source_version": 3, "method": "finetune",
        "shots": 32, "dataset_fingerprint": "abc"})
    t = info.tags
    assert (t["source_model"], t["source_version"], t["method"], t["shots"]) == (
        "autosync-bert-A", "3", "finetune", "32")
    assert t["dataset_fingerprint"] == "abc"
    listed = {a.path for a in MlflowClient().list_artifacts(info.run_id, "plots")}
    assert listed == {f"plots/{f.name}" for f in figs}
    # the same plots as keyed images: the UI's chart view shows one image card per plot
    images = [a.path for a in MlflowClient().list_artifacts(info.run_id, "images")]
    keys = {Path(p).name.split("+")[0] for p in images if p.endswith(".png")}
    assert keys == {f.stem for f in figs}


def test_compare_links(registry: Path) -> None:
    import json as _json
    import urllib.parse

    from autosync_transfer.errors import ConfigError, UnknownNameError
    from autosync_transfer import registry as models

    first = log(analytical())
    with pytest.raises(ConfigError, match="comparing needs two"):
        models.compare_links(NAME)
    second = log(analytical(), 0.9)
    links = models.compare_links(NAME, base_url="http://127.0.0.1:5077/")
    v = urllib.parse.unquote(links["versions"])
    assert v.startswith("http://127.0.0.1:5077/#/compare-model-versions?name=")
    name_q, runs_q = v.split("?", 1)[1].split("&runs=")
    assert name_q == f'name="{NAME}"'
    assert _json.loads(runs_q) == {first.version: first.run_id, second.version: second.run_id}
    c = urllib.parse.unquote(links["charts"])
    assert "compareRunsMode=CHART" in c
    assert f"attributes.run_id IN ('{first.run_id}', '{second.run_id}')" in c
    assert models.compare_links(NAME, [second.version, first.version])["versions"] != links[
        "versions"]
    with pytest.raises(UnknownNameError, match="has no version '9'"):
        models.compare_links(NAME, [first.version, 9])


# -- pyfunc ---------------------------------------------------------------------------------------


def test_pyfunc_scores_strategies_from_the_champion(registry: Path, domain: Any,
                                                    strategies: list[Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow.pyfunc
    import pandas as pd

    from autosync_transfer import registry as models
    from autosync_transfer.registry import store

    sim = analytical()
    info = log(sim)
    models.promote(NAME, info.version)
    store.configure()
    # the model is "from code": loading it unpickles nothing
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "false")
    model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    df = pd.DataFrame({"domain": [DOMAIN] * len(strategies),
                       "strategy": [s.to_json() for s in strategies]})
    got = np.asarray(model.predict(df))
    np.testing.assert_allclose(got, sim.score(strategies, domain))
    with pytest.raises(Exception, match="unknown domain 'ncf-Z'"):
        model.predict(pd.DataFrame({"domain": ["ncf-Z"], "strategy": [strategies[0].to_json()]}))


def test_train_and_register_rescores_a_champion_of_another_split(registry: Path,
                                                                 domain: Any) -> None:
    from autosync_transfer import registry as models

    champ = log(analytical(), 0.1, split="an-older-split")  # a low number on another split
    models.promote(NAME, champ.version)
    seen: list[int] = []
    measured = strategy_table(synthetic_trials(domain))
    report = models.train_and_register("linear", domain, measured, seeds=[0, 1],
                                       max_epochs=2, on_seed=lambda s, i, o: seen.append(s))
    assert seen == [0, 1] and [r.version.version for r in report.runs] == ["2", "3"]
    assert len({r.version.tags["test_split"] for r in report.runs}) == 1
    # the champion is re-scored on the new split (the cost model ranks its own synthetic
    # runtimes almost perfectly), so its 0.1 from another split does not decide
    assert report.promoted is False and report.champion == "1"
    summary = report.summary()
    assert summary["pairwise_acc"]["n"] == 2 and "kendall_tau" in summary
    with pytest.raises(UnknownNameError, match="no ok trials for domain 'ncf-B'"):
        models.train_and_register("linear", "ncf-B", measured, seeds=[0])
    with pytest.raises(UnknownNameError, match="unknown ranker 'forest'"):
        models.train_and_register("forest", domain, measured, seeds=[0])
    assert [v["version"] for v in models.describe_model(NAME)["versions"]] == ["3", "2", "1"]
