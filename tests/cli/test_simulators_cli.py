"""``autosync-transfer train|evaluate|ui`` and ``autosync-transfer registry list|show|promote``
on a temporary MLflow store.

Test double: the trials are synthetic. Runtimes are the analytical cost model's estimate plus a
fixed compute time and seeded noise (no measurement), on the small catalog domain ncf-A.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.testing.cli import assert_one_line_error

pytest.importorskip("mlflow")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("one_thread")

DOMAIN = "ncf-A"
NAME = "autosync-ncf-A"


@pytest.fixture(scope="module")
def trials_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trial store of 40 synthetic ncf-A trials (test double, see the module docstring)."""
    from autosync_transfer.testing.synthetic import write_synthetic_store

    path = tmp_path_factory.mktemp("trials") / f"{DOMAIN}.jsonl"
    write_synthetic_store(path, DOMAIN, 40, 0)
    return path


def test_command_surface(cli: Any) -> None:
    from typer.main import get_command

    from autosync_transfer.cli import app

    root = get_command(app)
    assert {"train", "evaluate", "ui", "registry"} <= set(root.commands)  # type: ignore[attr-defined]
    assert {"list", "show", "promote"} <= set(root.commands["registry"].commands)  # type: ignore[attr-defined]


def test_ui_dry_run_prints_the_command(cli: Any, registry: Path) -> None:
    res = cli("ui", "--dry-run", "--port", "5123")
    assert res.code == 0, res.err
    cmd = res.out.strip()
    assert "mlflow ui" in cmd and "--host 127.0.0.1" in cmd and "--port 5123" in cmd
    assert f"--backend-store-uri sqlite:///{registry}/mlflow.db" in cmd
    assert f"--default-artifact-root {(registry / 'artifacts').as_uri()}" in cmd


def test_ui_compare_needs_a_model_with_two_versions(cli: Any, registry: Path) -> None:
    assert_one_line_error(cli("ui", "--dry-run", "--compare", "ncf-Z"),
                          "no registered model 'autosync-ncf-Z'")
    assert_one_line_error(cli("ui", "--dry-run", "--versions", "1,2"), "needs --compare MODEL")


@pytest.mark.parametrize("argv,needle", [
    (("train", "ncf-Z"), "no cluster 'Z'"),
    (("train", "gpt-A"), "no model 'gpt'"),
    (("train", DOMAIN, "--kind", "forest"), "unknown ranker 'forest'"),
    (("train", "ncf-B", "--kind", "linear"), "no ok trials for domain 'ncf-B'"),
    (("train", DOMAIN, "--metric", "accuracy"), "unknown metric 'accuracy'"),
    (("evaluate", DOMAIN, "--simulator", "autosync-nope"), "no registered model 'autosync-nope'"),
    (("evaluate", "ncf-Z", "--simulator", f"models:/{NAME}@champion"), "no cluster 'Z'"),
    (("registry", "show", "autosync-nope"), "no registered model 'autosync-nope'"),
    (("registry", "promote", NAME, "3"), "no registered model"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_input_is_one_line_and_registers_nothing(cli: Any, registry: Path, trials_file: Path,
                                                     argv: tuple[str, ...], needle: str) -> None:
    res = cli(*argv, "--data", str(trials_file)) if argv[0] in ("train", "evaluate") else cli(*argv)
    assert_one_line_error(res, needle)
    listed = cli("registry", "list", "--json")
    assert listed.code == 0 and json.loads(listed.out) == []


def test_missing_trials_file(cli: Any, registry: Path, tmp_path: Path) -> None:
    res = cli("train", DOMAIN, "--data", str(tmp_path / "none.jsonl"))
    assert_one_line_error(res, "no trial dataset")


def test_train_evaluate_show_promote(cli: Any, registry: Path, trials_file: Path) -> None:
    res = cli("train", DOMAIN, "--kind", "linear", "--seeds", "2", "--epochs", "2",
              "--data", str(trials_file))
    assert res.code == 0, res.err
    assert "pairwise_acc" in res.out and "±" in res.out and "promoted to champion" in res.out

    res = cli("train", DOMAIN, "--kind", "analytical", "--seeds", "1", "--data",
              str(trials_file), "--json")
    assert res.code == 0, res.err
    report = json.loads(res.out)
    assert report["versions"][0]["version"] == "3" and report["ranker"] == "analytical"
    assert report["summary"]["pairwise_acc"]["n"] == 1

    desc = json.loads(cli("registry", "show", DOMAIN, "--json").out)
    versions = {v["version"]: v for v in desc["versions"]}
    assert set(versions) == {"1", "2", "3"}
    # every seed's metrics are on one test split, so they compare
    assert len({v["tags"]["test_split"] for v in versions.values()}) == 1
    assert {v["tags"]["seed"] for v in versions.values()} == {"0", "1"}
    assert versions["1"]["tags"]["trial_count"] == "40"
    assert versions["1"]["tags"]["ranker_kind"] == "linear"
    champion = desc["aliases"]["champion"]
    # the first training promoted its better seed (there was no champion); the second replaces
    # it only with a confident paired gain on the same test split, recorded on its version
    first = max(("1", "2"), key=lambda k: versions[k]["metrics"]["pairwise_acc"])
    tags = versions["3"]["tags"]
    assert tags["promotion_against"] == first
    assert champion == ("3" if float(tags["promotion_gain_low"]) > 0 else first)
    gain = float(tags["promotion_gain"])
    lead = versions["3"]["metrics"]["pairwise_acc"] - versions[first]["metrics"]["pairwise_acc"]
    assert gain == pytest.approx(lead)  # the same pairs as the test metrics

    res = cli("registry", "list")
    assert res.code == 0 and NAME in res.out
    res = cli("registry", "show", NAME)
    assert res.code == 0 and "champion" in res.out

    res = cli("registry", "promote", NAME, "1")
    assert res.code == 0, res.err
    assert json.loads(cli("registry", "show", NAME, "--json").out)["aliases"] == {"champion": "1"}

    res = cli("evaluate", DOMAIN, "--simulator", f"models:/{NAME}@champion", "--data",
              str(trials_file), "--json")
    assert res.code == 0, res.err
    metrics = json.loads(res.out)["metrics"]
    assert metrics["strategies"] == 40 and 0.0 <= metrics["pairwise_acc"] <= 1.0
    res = cli("evaluate", DOMAIN, "--simulator", DOMAIN, "--data", str(trials_file))
    assert res.code == 0 and "kendall_tau" in res.out
    assert_one_line_error(cli("evaluate", DOMAIN, "--simulator", f"models:/{NAME}/9", "--data",
                              str(trials_file)), "has no version 9")
    assert_one_line_error(cli("registry", "promote", NAME, "9"), "has no version 9")
