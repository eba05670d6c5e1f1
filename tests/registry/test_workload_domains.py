"""A domain outside the catalog (a workload on a cluster file) travels with every registered
version: ``domain.json`` and tags, ``load_domain``/``load_version``, the pyfunc, and a search of
it registers without the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autosync_transfer.testing.workloads import embedding_classifier_source, resource_spec

pytest.importorskip("mlflow")

MODEL = embedding_classifier_source()

CLUSTER = resource_spec([(2, 1.0), (1, 0.3)])


@pytest.fixture
def workload_domain(tmp_path: Path) -> tuple[Any, str]:
    from autosync_transfer.domains.workload import workload_domain as make

    model = tmp_path / "tinywl.py"
    model.write_text(MODEL)
    cluster = tmp_path / "lab3.yml"
    cluster.write_text(CLUSTER)
    return make(str(model), str(cluster))


def test_a_version_carries_its_workload_domain(registry: Path, workload_domain: Any) -> None:
    import mlflow
    import pandas as pd

    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry.flavor import load_domain, load_version, log_simulator
    from autosync_transfer.strategies.builders import build

    domain, spec = workload_domain
    assert domain.name == "tinywl-lab3"
    info = log_simulator(Simulator("analytical", {}, 1), domain=domain, metrics={})
    assert info.name == "autosync-tinywl-lab3"
    assert info.tags["workload"] == spec and len(info.tags["workload_fingerprint"]) == 16
    assert info.tags["model_fingerprint"] == domain.model.fingerprint
    assert info.tags["cluster_fingerprint"] == domain.cluster.fingerprint
    assert load_domain(info.model_uri) == domain
    sim, dom, mv = load_version("models:/autosync-tinywl-lab3/1")
    assert dom == domain and mv.version == "1" and sim.kind == "analytical"
    strategies = [build(b, domain) for b in ("ps", "all_reduce", "parallax")]
    scores = mlflow.pyfunc.load_model(info.model_uri).predict(pd.DataFrame(
        {"domain": [domain.name] * 3, "strategy": [s.to_json() for s in strategies]}))
    assert list(scores) == pytest.approx(list(sim.score(strategies, domain)))


def test_a_search_of_a_workload_domain_registers(registry: Path, workload_domain: Any) -> None:
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry.flavor import load_domain
    from autosync_transfer.registry.searches import log_search

    domain, _ = workload_domain
    summary = {"trials": 2, "failed": 0, "best_s": 0.05, "curve": [1.0, 1.1], "hit_rate": [0.5]}
    _, version = log_search(domain=domain, run="autosync-cold-seed0", summary=summary,
                            config={"method": "autosync"}, per_round=2,
                            simulator=Simulator("analytical", {}, 1))
    assert version is not None and version.name == "autosync-tinywl-lab3"
    assert load_domain(version.model_uri) == domain


def test_a_search_by_an_unknown_name_logs_nothing(registry: Path) -> None:
    from autosync_transfer.errors import UnknownNameError
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry import store
    from autosync_transfer.registry.searches import log_search

    with pytest.raises(UnknownNameError):
        log_search(domain="tinywl-lab3", run="r", summary={}, config={}, per_round=1,
                   simulator=Simulator("analytical", {}, 1))
    c = store.client()
    assert not c.search_runs([store.experiment_id(c)])
