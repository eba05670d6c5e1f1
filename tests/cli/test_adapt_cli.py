"""``autosync-transfer adapt`` on a temporary MLflow store.

Test double: the trials are synthetic. Runtimes are the analytical cost model's estimate plus a
fixed compute time and seeded noise (no measurement), on the small catalog domains ncf-A (source)
and ncf-B (target); ncf-C has no trials. Training is capped at a few epochs (``--epochs``) of the
linear ranker. ``--collect`` is tested only up to its refusal: no cluster is emulated here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.testing.cli import assert_one_line_error

from autosync_transfer.testing.synthetic import write_synthetic_store

pytest.importorskip("mlflow")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE, TARGET = "ncf-A", "ncf-B"
FAST = ("--epochs", "2", "--kind", "linear")


@pytest.fixture(scope="module")
def trials_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 synthetic trials each of ncf-A and ncf-B (test double, see the module docstring)."""
    folder = tmp_path_factory.mktemp("adapt-trials")
    write_synthetic_store(folder / f"{SOURCE}.jsonl", SOURCE, 40, seed=0)
    write_synthetic_store(folder / f"{TARGET}.jsonl", TARGET, 40, seed=1)
    return folder


def holdout(trials_dir: Path) -> Any:
    from autosync_transfer.adapt import split_target
    from autosync_transfer.dataset.loader import load_trials
    from autosync_transfer.domains.catalog import get_domain

    return split_target(get_domain(TARGET), load_trials(trials_dir, domain=TARGET))


def registered(cli: Any) -> dict[str, int]:
    res = cli("registry", "list", "--json")
    assert res.code == 0, res.err
    return {r["name"]: r["versions"] for r in json.loads(res.out)}


def test_command_surface() -> None:
    from typer.main import get_command

    from autosync_transfer.cli import app

    cmd = get_command(app).commands["adapt"]  # type: ignore[attr-defined]
    opts = {o for p in cmd.params for o in p.opts}
    assert {"--source", "--target", "--method", "--shots", "--collect", "--seed", "--curve",
            "--data", "--epochs", "--kind", "--json"} <= opts


def test_finetune_trains_the_source_registers_with_lineage_and_promotes(
        cli: Any, registry: Path, trials_dir: Path) -> None:
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "10",
              "--data", str(trials_dir), *FAST)
    assert res.code == 0, res.err
    for needle in ("zero-shot", "adapted (finetune)", "from scratch", "pairwise_acc", "top1",
                   "trained and registered now", "promoted to champion",
                   "autosync-transfer ui", "Models > autosync-ncf-B > version 1"):
        assert needle in res.out, (needle, res.out)
    assert registered(cli) == {"autosync-ncf-A": 1, "autosync-ncf-B": 1}

    show = cli("registry", "show", TARGET, "--json")
    version = json.loads(show.out)["versions"][0]
    tags, split = version["tags"], holdout(trials_dir)
    assert tags["source_model"] == "autosync-ncf-A" and tags["source_version"] == "1"
    assert tags["method"] == "finetune" and tags["shots"] == "10"
    assert tags["test_split"] == split.test_split
    assert tags["dataset_fingerprint"] == split.data.fingerprint
    assert tags["trial_count"] == "10" and tags["holdout_strategies"] == str(
        len(split.holdout_ids))
    assert version["aliases"] == ["champion"]
    for key in ("pairwise_acc", "top1", "zero_shot.pairwise_acc", "from_scratch.pairwise_acc"):
        assert 0.0 <= version["metrics"][key] <= 1.0
    assert "autosync-ncf-A/1 finetune 10" in cli("registry", "show", TARGET).out
    assert list(registry.rglob("rank_scatter_heldout.png"))


def test_zero_shot_is_reported_and_the_champion_kept_unless_beaten(
        cli: Any, registry: Path, trials_dir: Path) -> None:
    """The champion is replaced only where the adapted simulator orders the held-out
    strategies better with confidence, judged on both simulators' rankings, whatever number
    the champion was logged with."""
    from autosync_transfer.dataset.loader import load_trials, strategy_table
    from autosync_transfer.rankers.simulator import Simulator, train_simulator
    from autosync_transfer.registry import models

    split = holdout(trials_dir)

    def incumbent(sim: Simulator, acc: float) -> str:
        info = models.log_simulator(sim, domain=TARGET, metrics={"test_pairwise_accuracy": acc},
                                    tags={"test_split": split.test_split})
        models.promote(info.name, info.version)
        return info.version

    # the cost model ranks the synthetic runtimes (its own estimate plus noise) all but
    # perfectly: not beaten, though it was logged with a low number
    champ = incumbent(Simulator("analytical"), 0.0)
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--method", "zero-shot",
              "--data", str(trials_dir), "--json", *FAST)
    assert res.code == 0, res.err
    report = json.loads(res.out)
    zero = report["result"]["metrics"]["zero-shot"]
    assert 0.0 <= zero["pairwise_accuracy"] <= 1.0
    assert report["result"]["metrics"]["adapted"] == zero
    assert report["result"]["method"] == "zero-shot" and report["result"]["shots"] == 0
    assert not report["promoted"] and report["champion"] == champ
    assert models.describe_model("autosync-ncf-B")["versions"][0]["tags"]["method"] == "zero-shot"

    tags = models.describe_model("autosync-ncf-B")["versions"][0]["tags"]
    assert tags["promotion_against"] == champ and not float(tags["promotion_gain_low"]) > 0
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--method", "zero-shot",
              "--data", str(trials_dir), *FAST)
    assert res.code == 0, res.err
    said = " ".join(res.out.split())
    assert f"champion stays version {champ}" in said and "95 % lower bound" in said

    # a champion that ranks the target the other way round, logged with a high number: beaten
    table = strategy_table(load_trials(trials_dir, domain=TARGET))
    table["runtime_s"] = 1.0 / table["runtime_s"]
    backwards, _ = train_simulator("linear", table, seed=0, max_epochs=40, patience=None)
    from autosync_transfer.adapt.data import evaluate_on

    assert evaluate_on(backwards, split.holdout())["pairwise_accuracy"] < 0.5
    weak = incumbent(backwards, 1.0)
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--method", "zero-shot",
              "--data", str(trials_dir), "--json", *FAST)
    report = json.loads(res.out)
    assert report["promoted"] and report["champion"] == report["version"] != weak
    tags = models.describe_model("autosync-ncf-B")["versions"][0]["tags"]
    assert tags["promotion_against"] == weak and float(tags["promotion_gain_low"]) > 0


def test_guarded_judges_the_source_on_the_shots_and_registers_the_method(
        cli: Any, registry: Path, trials_dir: Path) -> None:
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--method", "guarded",
              "--shots", "10", "--data", str(trials_dir), "--json", *FAST)
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert report["result"]["method"] == "guarded" and report["result"]["shots"] == 10
    details = report["result"]["details"]["adapted"]
    judged = details["shots_pairwise"]
    # the physics replaces the source only with a confident gain on the held-out shots
    low = details["physics_gain_low"]
    assert details["start"] == ("physics" if low is not None and low > 0 else "source")
    assert 0.0 <= judged["source"] <= 1.0 and 0.0 <= judged["physics"] <= 1.0
    version = json.loads(cli("registry", "show", TARGET, "--json").out)["versions"][0]
    assert version["tags"]["method"] == "guarded" and version["tags"]["shots"] == "10"
    # the table says which start the shots chose
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--method", "guarded",
              "--shots", "10", "--data", str(trials_dir), *FAST)
    assert res.code == 0, res.err
    said = "kept the fine-tuned source" if details["start"] == "source" else "dropped the source"
    assert f"guarded: {said}" in res.out and "pairwise accuracy on the shots" in res.out
    assert "95 % lower bound" in res.out


def test_curve_prints_the_table_and_logs_the_plot(cli: Any, registry: Path,
                                                  trials_dir: Path) -> None:
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "5", "--curve",
              "--data", str(trials_dir), "--epochs", "1", "--kind", "linear")
    assert res.code == 0, res.err
    assert "learning curve on ncf-B" in res.out and "±" in res.out
    assert "skipped N = 50, 100, 200" in res.out
    plots = list(registry.rglob("learning_curve.png"))
    assert len(plots) == 1 and plots[0].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv,needle", [
    (("--source", SOURCE, "--target", "ncf-Z"), "no cluster 'Z'"),
    (("--source", "gpt-A", "--target", TARGET), "no model 'gpt'"),
    (("--source", "ncf-C", "--target", TARGET), "no simulator of the source 'ncf-C'"),
    (("--source", SOURCE, "--target", "ncf-C"), "no ok trials of the target 'ncf-C'"),
    (("--source", SOURCE, "--target", TARGET, "--shots", "500"),
     "--shots 500 is more than the 34 target trials available"),
    (("--source", SOURCE, "--target", TARGET, "--shots", "1"), "needs at least 2 target trials"),
    (("--source", SOURCE, "--target", TARGET, "--method", "transfer"), "unknown method"),
    (("--source", SOURCE, "--target", SOURCE), "same domain"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_input_is_one_line_and_registers_nothing(cli: Any, registry: Path,
                                                     trials_dir: Path, argv: tuple[str, ...],
                                                     needle: str) -> None:
    res = cli("adapt", *argv, "--data", str(trials_dir), *FAST)
    assert_one_line_error(res, needle)
    assert registered(cli) == {}


def test_incompatible_feature_schema_is_one_line(cli: Any, registry: Path, trials_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.rankers import simulator as simulator_module
    from autosync_transfer.rankers.modules import build_ranker
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry import models

    # a learned simulator registered by a release whose features were one version older
    hparams = {"row_hidden": 8, "row_out": 8, "lstm_hidden": 8, "head_hidden": 8}
    weights = build_ranker("rnn", hparams, seed=0).state_dict()
    info = models.log_simulator(Simulator("rnn", hparams, state_dict=weights), domain=SOURCE,
                                metrics={"test_pairwise_accuracy": 0.9})
    models.promote(info.name, info.version)
    monkeypatch.setattr(simulator_module, "FEATURE_SCHEMA_VERSION",
                        simulator_module.FEATURE_SCHEMA_VERSION + 1)
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--data", str(trials_dir),
              *FAST)
    assert_one_line_error(res, "feature schema version mismatch")
    assert registered(cli) == {"autosync-ncf-A": 1}


def test_collect_is_refused_without_root(cli: Any, registry: Path, trials_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "5", "--collect",
              "--data", str(trials_dir), *FAST)
    assert_one_line_error(res, "--collect measures trials on an emulated cluster, which needs root")
    assert registered(cli) == {}


def test_collect_is_refused_without_the_emulated_launcher(
        cli: Any, registry: Path, trials_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autosync_transfer.runtime import emulation

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulation, "available", lambda prefix="ast": (False, "no tc here"))
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "5", "--collect",
              "--data", str(trials_dir), *FAST)
    assert_one_line_error(res, "the emulated launcher is unavailable here: no tc here")
    assert registered(cli) == {}


def test_collect_store_path(tmp_path: Path) -> None:
    from autosync_transfer.adapt.workflow import collect_store_path
    from autosync_transfer.errors import ConfigError

    assert collect_store_path(tmp_path, TARGET) == tmp_path / f"{TARGET}.jsonl"
    (tmp_path / "trials").mkdir()
    assert collect_store_path(tmp_path, TARGET) == tmp_path / "trials" / f"{TARGET}.jsonl"
    assert collect_store_path(tmp_path / "b.jsonl", TARGET) == tmp_path / "b.jsonl"
    with pytest.raises(ConfigError, match="JSON Lines"):
        collect_store_path(tmp_path / "b.parquet", TARGET)


def test_adapt_judges_both_simulators_on_the_re_measured_strategies_with_an_interval(
        cli: Any, registry: Path, trials_dir: Path, tmp_path: Path) -> None:
    """A target store with repeat runs beside it: the printout, the report and the registered
    version give the resolved-pair figure with its 95 % interval."""
    import shutil

    import numpy as np

    from autosync_transfer._files import append_line
    from autosync_transfer.dataset.loader import load_trials, strategy_table
    from autosync_transfer.dataset.repeat import repeat_path

    folder = tmp_path / "trials"
    shutil.copytree(trials_dir, folder)
    table = strategy_table(load_trials(folder, domain=TARGET)).sort_values("runtime_s")
    ids = list(table["strategy_id"])[::3][:10]  # ten strategies spanning the store
    truth = dict(zip(table["strategy_id"], table["runtime_s"]))
    path = repeat_path(folder / f"{TARGET}.jsonl")
    rng = np.random.default_rng(0)
    append_line(path, json.dumps({"kind": "plan", "run": "r1", "domain": TARGET,
                                  "strategy_ids": ids, "orders": [ids] * 4,
                                  "protocol": {"iters": 3}, "launcher": "local", "seed": 0,
                                  "created": "x"}), "t")
    for k in range(4):
        for s in ids:
            append_line(path, json.dumps({
                "kind": "measurement", "run": "r1", "round": k, "strategy_id": s,
                "status": "ok",
                "median_s": truth[s] * float(np.exp(0.002 * rng.standard_normal())),
                "wall_s": 1.0, "cpu": {}}), "t")
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "5",
              "--data", str(folder), "--json", *FAST)
    assert res.code == 0, res.err
    report = json.loads(res.out)
    for who in ("adapted", "zero_shot"):
        fig = report["repeat"][who]
        assert fig["resolved_pairs"] > 0
        low, high = fig["pairwise_resolved_low"], fig["pairwise_resolved_high"]
        assert low <= fig["pairwise_resolved"] <= high
    version = json.loads(cli("registry", "show", TARGET, "--json").out)["versions"][0]
    logged = {k: v for k, v in version["metrics"].items() if k.startswith("repeat_adapted")}
    assert any(k.endswith("pairwise_resolved_low") for k in logged), logged
    res = cli("adapt", "--source", SOURCE, "--target", TARGET, "--shots", "5",
              "--data", str(folder), *FAST)
    assert res.code == 0, res.err
    assert "re-measured strategies" in res.out and "pairs the repeat runs resolve" in res.out
    assert "[" in res.out.split("re-measured strategies")[1].split("pairs the repeat")[0]
