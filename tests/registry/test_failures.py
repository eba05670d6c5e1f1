"""Registry failures a user survives: a tracking server that does not answer is one line at once
(and a search's measurements stay in its store), logging a finished search again is idempotent,
and ``registry promote`` refuses a version whose artifacts do not load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

pytest.importorskip("mlflow")

SUMMARY: dict[str, Any] = {"trials": 4, "failed": 0, "best_s": 0.05, "best_builder_s": 0.06,
                           "curve": [None, 1.0, 1.1, 1.2], "hit_rate": [0.0, 1.0]}
BEST = {"v": 1, "id": "s-best", "kind": "sampled", "vars": ["a:0"]}


def _log(**kw: Any) -> tuple[str, Any]:
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry.searches import log_search

    args: dict[str, Any] = dict(domain="ncf-A", run="autosync-cold-seed0", summary=SUMMARY,
                                config={"method": "autosync", "budget": 4}, per_round=2,
                                best_strategy=BEST, simulator=Simulator("analytical", {}, 1),
                                tags={"store": "/runs/a.jsonl"})
    args.update(kw)
    return log_search(**args)


def test_logging_a_finished_search_twice_is_idempotent(registry: Path) -> None:
    from mlflow import MlflowClient

    run1, v1 = _log()
    run2, v2 = _log()
    assert (run2, v2.version) == (run1, v1.version)
    c = MlflowClient()
    assert len(c.search_model_versions("name = 'autosync-ncf-A'")) == 1
    assert len(c.search_runs([c.get_run(run1).info.experiment_id],
                             "tags.kind = 'search'")) == 1
    # another finished search (more trials in the store) is logged and registered anew
    run3, v3 = _log(summary={**SUMMARY, "trials": 6})
    assert run3 != run1 and v3.version != v1.version


def test_a_server_that_does_not_answer_is_one_line_at_once(monkeypatch, tmp_path: Path) -> None:
    from autosync_transfer.errors import ConfigError

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"tracking server http://127.0.0.1:1 does not answer"):
        _log()
    assert time.monotonic() - t0 < 20


def _artifact_folder(version: Any) -> Path:
    """The local folder of a version's model artifacts."""
    from mlflow import MlflowClient

    src = MlflowClient().get_model_version(version.name, version.version).source
    if src.startswith("models:/"):  # logged model: its artifact location
        from mlflow import get_logged_model

        src = get_logged_model(src.split("/", 1)[1].lstrip("/")).artifact_location
    return Path(unquote(urlparse(src).path))


def test_promote_refuses_a_version_that_does_not_load(registry: Path, cli) -> None:
    from autosync_transfer.registry.versions import champion

    _, good = _log()
    _, bad = _log(summary={**SUMMARY, "trials": 5})
    folder = _artifact_folder(bad)
    assert folder.is_dir()
    shutil.rmtree(folder)
    res = cli("registry", "promote", "ncf-A", str(bad.version))
    assert res.code == 2
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"version {bad.version} of 'autosync-ncf-A' does not load" in \
        lines[0], res.err
    assert "missing" in lines[0]
    assert champion("autosync-ncf-A") != str(bad.version)
    res = cli("registry", "promote", "ncf-A", str(good.version))
    assert res.code == 0, res.err
    assert champion("autosync-ncf-A") == str(good.version)


def test_search_keeps_its_trials_when_mlflow_is_down_and_logs_once_later(
        tmp_path: Path, empty_store: Path) -> None:
    """A real search (local launcher) with the tracking server down: exit 2, one line, the
    trials in the store; run again with a store: nothing measured, logged once; again: the
    same run."""
    store = tmp_path / "run.jsonl"
    argv = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "search",
            "ncf-A", "--launcher", "local", "--method", "random", "--budget", "2",
            "--confirm", "0", "--warmup", "0", "--iters", "1", "--objective", "step-time",
            "--store", str(store),
            "--max-foreign-cpu", "1", "--json"]
    env = dict(os.environ, MLFLOW_TRACKING_URI="http://127.0.0.1:1")
    down = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    assert down.returncode == 2, down.stderr[-2000:]
    errors = [ln for ln in down.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and "does not answer" in errors[0] and "kept in" in errors[0]
    records = store.read_text().splitlines()
    assert len([r for r in records if "/reference/" not in r]) == 2
    assert json.loads(down.stdout)["trials"] == 2  # the result is reported all the same
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db",
               AUTOSYNC_REGISTRY_ARTIFACTS=str(tmp_path / "artifacts"))
    for _ in range(2):
        up = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
        assert up.returncode == 0, up.stderr[-2000:]
        assert store.read_text().splitlines() == records  # nothing measured again
    from mlflow import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = c.get_experiment_by_name("autosync-transfer")
    assert len(c.search_runs([exp.experiment_id], "tags.kind = 'search'")) == 1
