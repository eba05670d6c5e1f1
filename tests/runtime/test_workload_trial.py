"""A user's workload (the tiny GPT example, not a zoo model) measured by local trial workers."""

from __future__ import annotations

from pathlib import Path

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.workload import load_workload
from autosync_transfer.runtime.trial import Protocol, WorkerPool
from autosync_transfer.strategies.builders import build

TINY_GPT = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "tiny_gpt.py"


def test_tiny_gpt_workload_through_a_local_worker_pool(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    cluster = Cluster(name="duo", nodes=tuple(
        Node(name=f"n{i}", address=f"10.77.0.{i + 1}", workers=1, bandwidth_gbps=1.0, chief=i == 0)
        for i in range(2)))
    workload = load_workload(str(TINY_GPT))
    domain = workload.domain(cluster)
    assert domain.name == "tiny_gpt-duo"
    monkeypatch.chdir(tmp_path)  # the workers do not depend on the caller's folder
    proto = Protocol(warmup=1, iters=3, timeout_s=120, startup_timeout_s=120)
    with WorkerPool(domain, "local", proto, workload=workload, log_dir=tmp_path / "logs") as pool:
        for strategy in (build("ps_lb", domain), build("ddp", domain), None):
            res = pool.run(strategy)
            assert res.ok, (strategy and strategy.id, res.error)
            assert len(res.iteration_times_s) == 3 and res.median_s > 0
        assert pool.restarts == 0
