"""Persistent trial workers: many strategies per process group, failures become records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from autosync_transfer.domains.catalog import get_model
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.domain import Domain
from autosync_transfer.runtime.trial import Protocol, WorkerPool
from autosync_transfer.strategies.builders import build

QUICK = Protocol(warmup=1, iters=3, timeout_s=60, startup_timeout_s=120)


def _domain(nodes: int = 2, workers: int = 1, gbps: float = 1.0) -> Domain:
    cluster = Cluster(name=f"t{nodes}x{workers}", nodes=tuple(
        Node(name=f"n{i}", address=f"10.88.0.{i + 1}", workers=workers, bandwidth_gbps=gbps,
             chief=i == 0) for i in range(nodes)))
    return Domain(name=f"ncf-{cluster.name}", model=get_model("ncf"), cluster=cluster)


def test_local_pool_runs_many_and_survives_failures():
    d = _domain()
    with WorkerPool(d, "local", QUICK) as pool:
        ok1 = pool.run(build("parallax", d))
        assert ok1.ok, ok1.error
        assert len(ok1.iteration_times_s) == 3 and ok1.median_s > 0
        ddp = pool.run(None)  # torch DDP on the same process group
        assert ddp.ok, ddp.error
        after_ddp = pool.run(build("ps_lb", d))  # executor hooks work after DDP is gone
        assert after_ddp.ok, after_ddp.error
        assert pool.restarts == 0
        crash = pool.run(build("ps", d), fault={"fault": "crash", "fault_rank": 1})
        assert crash.status == "failed" and "exited" in crash.error
        hang = pool.run(build("ps", d), Protocol(warmup=1, iters=3, timeout_s=5),
                        fault={"fault": "hang", "fault_rank": 0})
        assert hang.status == "timeout"
        error = pool.run(build("ps", d), fault={"fault": "error", "fault_rank": 1})
        assert error.status == "failed" and "injected error" in error.error
        assert error.wall_s < QUICK.timeout_s / 2  # the others are not waited for until the watchdog
        again = pool.run(build("ddp", d))
        assert again.ok, again.error
        assert pool.restarts == 3


def _netns_ok() -> tuple[bool, str]:
    from autosync_transfer.runtime.emulation import available

    return available()


@pytest.mark.netns
def test_emulated_pool_measures_and_cleans_up():
    ok, why = _netns_ok()
    if not ok:
        pytest.skip(why)
    from autosync_transfer.runtime.emulation import list_namespaces

    d = _domain(nodes=2, gbps=0.5)
    with WorkerPool(d, "emulated", QUICK) as pool:
        ps = pool.run(build("ps", d))
        assert ps.ok, ps.error
        mine = set(pool.launcher._emu.namespaces)
        assert len(mine) == 3 and mine <= set(list_namespaces())  # two nodes + the bridge
        crash = pool.run(build("ps", d), fault={"fault": "crash", "fault_rank": 1})
        assert crash.status == "failed"
        ar = pool.run(build("all_reduce", d))  # workers restarted inside the same namespaces
        assert ar.ok, ar.error
        assert set(pool.launcher._emu.namespaces) == mine <= set(list_namespaces())
    assert not mine & set(list_namespaces())


def test_collection_survives_a_killed_worker(tmp_path):
    store = tmp_path / "trials.jsonl"
    env = dict(os.environ)
    argv = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "collect",
            "ncf-A", "--launcher", "local", "--count", "10", "--warmup", "1", "--iters", "2",
            "--reference-every", "4", "--store", str(store), "--seed", "1", "--max-foreign-cpu", "1"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if store.exists() and len(store.read_text().splitlines()) >= 3:
                break
            time.sleep(0.5)
        workers = subprocess.run(["pgrep", "-f", "autosync_transfer.runtime.worker"],
                                 capture_output=True, text=True).stdout.split()
        mine = [int(p) for p in workers if _parent(int(p)) == proc.pid]
        assert mine, "no worker found"
        os.kill(mine[-1], signal.SIGKILL)
        _, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err.decode()[-2000:]
    lines = store.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every committed line parses
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids))
    trials = [r for r in records if not r["reference"]]
    assert len(trials) == 10
    # the trial in flight when the worker died (if any) is a failed record; the rest measured
    assert sum(r["status"] == "ok" for r in trials) >= 9
    assert any(r["reference"] for r in records)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1
