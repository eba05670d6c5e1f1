"""``registry.searches.log_search`` on a temporary MLflow store: the run, its curve and hit-rate
metrics, figures, plot (artifact and chart image), best strategy, and the registered simulator.

Test double: the search summary is written by hand (no trial is run); the simulator is the
analytical one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow")


def test_log_search_records_the_run_and_registers_the_simulator(registry: Path,
                                                                 tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry.searches import log_search

    summary: dict[str, Any] = {
        "trials": 4, "failed": 1, "best_s": 0.05, "best_builder_s": 0.06, "ddp_s": 0.5,
        "speedup_vs_builder": 1.2, "speedup_vs_ddp": 10.0, "trials_to_1.1x": 3,
        "trials_to_1.2x": 4, "trials_to_1.3x": None,
        "curve": [None, 0.9, 1.1, 1.2], "hit_rate": [0.0, 1.0],
    }
    best = {"v": 1, "id": "s-best", "kind": "sampled", "vars": ["a:0"]}
    run_id, version = log_search(
        domain="ncf-A", run="autosync-cold-seed0", summary=summary,
        config={"method": "autosync", "budget": 4}, per_round=2, best_strategy=best,
        simulator=Simulator("analytical", {}, 1), tags={"launcher": "emulated"})
    c = MlflowClient()
    run = c.get_run(run_id)
    assert run.data.tags["kind"] == "search" and run.data.tags["launcher"] == "emulated"
    assert run.data.params["search.budget"] == "4"
    assert run.data.metrics["search.speedup_vs_builder"] == 1.2
    assert "search.trials_to_1.3x" not in run.data.metrics  # None is not logged
    curve = sorted((m.step, m.value) for m in c.get_metric_history(run_id,
                                                                   "best_speedup_vs_builder"))
    assert curve == [(2, 0.9), (3, 1.1), (4, 1.2)]
    hits = sorted((m.step, m.value) for m in c.get_metric_history(run_id, "hit_rate"))
    assert hits == [(2, 0.0), (4, 1.0)]
    arts = {a.path for a in c.list_artifacts(run_id, "search")}
    assert arts == {"search/search_summary.json", "search/best_strategy.json"}
    local = Path(c.download_artifacts(run_id, "search/best_strategy.json", str(tmp_path)))
    assert json.loads(local.read_text()) == best
    assert {a.path for a in c.list_artifacts(run_id, "plots")} >= {"plots/search_curve.png"}
    images = [a.path for a in c.list_artifacts(run_id, "images")]
    assert any(Path(p).name.startswith("search_curve+step+0") for p in images)
    assert version is not None and version.run_id == run_id
    assert version.tags["search"] == "autosync-cold-seed0" and version.tags["trial_count"] == "4"
