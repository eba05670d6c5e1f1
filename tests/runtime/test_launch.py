"""Launchers: one registry of names, process launchers for WorkerPool, the torchrun job queue."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from autosync_transfer.domains.catalog import get_domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.launch import (LAUNCHERS, EmulatedLauncher, Launcher, LocalLauncher,
                                              ProcessLauncher, TorchrunLauncher, as_launcher,
                                              get_launcher, open_pool)
from autosync_transfer.runtime.torchrun import STOP, TorchrunPool
from autosync_transfer.runtime.trial import Protocol, TrialPool, WorkerPool
from autosync_transfer.strategies.builders import build

DOMAIN = get_domain("ncf-A")


def test_one_registry_of_launchers() -> None:
    assert list(LAUNCHERS) == ["local", "emulated", "torchrun"]
    for name, cls in LAUNCHERS.items():
        assert issubclass(cls, Launcher) and cls.name == name and get_launcher(name) is cls
    assert issubclass(LocalLauncher, ProcessLauncher) and issubclass(EmulatedLauncher, ProcessLauncher)
    assert not issubclass(TorchrunLauncher, ProcessLauncher) and not TorchrunLauncher.runs_here
    with pytest.raises(ConfigError, match="launcher must be one of emulated, local, torchrun, got 'ssh'"):
        get_launcher("ssh")
    local = LocalLauncher()
    assert as_launcher(local) is local and isinstance(as_launcher("emulated"), EmulatedLauncher)


def test_pools_by_launcher_constructors_store_only(tmp_path: Path) -> None:
    pool = open_pool(DOMAIN, "local", Protocol(warmup=1, iters=2))
    assert isinstance(pool, WorkerPool) and pool.launcher_name == "local"
    assert pool.workload == "zoo:ncf" and pool._procs == []  # nothing started yet
    assert WorkerPool(DOMAIN, "emulated").launcher_name == "emulated"  # the string form
    with pytest.raises(ConfigError, match="launcher 'torchrun' does not start worker processes"):
        WorkerPool(DOMAIN, "torchrun")
    tr = open_pool(DOMAIN, "torchrun", state_path=tmp_path / "s.jsonl")
    assert isinstance(tr, TorchrunPool) and isinstance(tr, TrialPool) and tr.launcher_name == "torchrun"
    assert tr.queue == tmp_path / "s.jsonl.queue.jsonl" and not tr.queue.exists()
    with pytest.raises(ConfigError, match="needs queue and results paths"):
        open_pool(DOMAIN, "torchrun")
    cmd = TorchrunLauncher().worker_command(DOMAIN, Protocol(warmup=2, iters=3),
                                            state_path="s.jsonl")
    assert "-m autosync_transfer worker --torchrun --follow --domain ncf-A" in cmd
    assert "--strategies s.jsonl.queue.jsonl --results s.jsonl.results.jsonl --warmup 2 --iters 3" in cmd


def _follower(queue: Path, results: Path, stop: threading.Event, seen: list[dict]) -> None:
    """Plays rank 0 of the torchrun workers: one ok row per job, until ``stop``."""
    offset = 0
    while not stop.is_set():
        if queue.exists():
            data = queue.read_text()[offset:]
            lines = data.splitlines()
            offset += len(data)
            for line in lines:
                if line == STOP:
                    seen.append({"stop": True})
                    return
                job = json.loads(line)
                seen.append(job)
                with open(results, "a") as f:
                    f.write(json.dumps({"record_id": job["record_id"], "status": "ok", "error": "",
                                        "iteration_times_s": [0.5, 0.25], "wall_s": 1.0}) + "\n")
        time.sleep(0.02)


def test_torchrun_pool_writes_jobs_reads_results_and_resumes(tmp_path: Path) -> None:
    queue, results = tmp_path / "q.jsonl", tmp_path / "r.jsonl"
    seen: list[dict] = []
    stop = threading.Event()
    t = threading.Thread(target=_follower, args=(queue, results, stop, seen), daemon=True)
    t.start()
    try:
        with TorchrunPool(DOMAIN, queue, results, Protocol(warmup=1, iters=2), poll_s=0.02) as pool:
            res = pool.run(build("ps", DOMAIN), job_id="ncf-A/ps")
            assert res.ok and res.iteration_times_s == [0.5, 0.25] and res.median_s == 0.375
            ddp = pool.run(None, Protocol(warmup=0, iters=5))
            assert ddp.ok
        t.join(timeout=10)
    finally:
        stop.set()
    assert seen[0]["record_id"] == "ncf-A/ps" and seen[0]["warmup"] == 1 and seen[0]["iters"] == 2
    assert seen[1]["strategy"] == "torch_ddp" and seen[1]["iters"] == 5
    assert seen[-1] == {"stop": True}
    # a pool opened again continues the queue (the stop is dropped) and finds earlier results
    again = TorchrunPool(DOMAIN, queue, results, wait_s=1, poll_s=0.02)
    assert again.run(build("ps", DOMAIN), job_id="ncf-A/ps").ok
    assert STOP not in queue.read_text().splitlines()
    with pytest.raises(ConfigError, match="no result for 'ncf-A/new' from the torchrun workers"):
        again.run(None, job_id="ncf-A/new")


def _environment(rank: int, world: int, name: str) -> tuple[int, int, str | None, str, bool]:
    import sys

    return rank, world, os.environ.get(name), os.getcwd(), "torch._dynamo" in sys.modules


def test_spawn_local_processes_see_the_caller_s_environment_and_folder_at_each_call(
        tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001 - pytest's monkeypatch
    # the processes fork from a server started at the first call; each call's processes still
    # see the environment and working folder of that call, as spawned processes do
    from autosync_transfer.runtime.launch import spawn_local

    name = "AUTOSYNC_TEST_SPAWN_VALUE"
    monkeypatch.setenv(name, "first")
    first = spawn_local(_environment, 2, name, timeout_s=120)
    monkeypatch.setenv(name, "second")
    monkeypatch.chdir(tmp_path)
    second = spawn_local(_environment, 2, name, timeout_s=120)
    monkeypatch.delenv(name)
    third = spawn_local(_environment, 1, name, timeout_s=120)
    assert [r[:3] for r in first] == [(0, 2, "first"), (1, 2, "first")]
    assert [r[:4] for r in second] == [(0, 2, "second", str(tmp_path)),
                                       (1, 2, "second", str(tmp_path))]
    assert third[0][2] is None
    assert all(r[4] for r in first + second + third)  # torch's compiler modules came preloaded


_KILLED_CALLER = """
import os, sys, time
from pathlib import Path
from autosync_transfer.runtime.launch import spawn_local

def work(rank, world, folder):
    Path(folder, f"pid{rank}").write_text(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    spawn_local(work, 2, sys.argv[1], timeout_s=300)
"""


def test_spawn_local_processes_end_with_a_killed_caller(tmp_path: Path) -> None:
    """A caller killed with SIGKILL (no clean-up of its own) leaves no worker behind: the
    workers watch the caller itself (the forkserver outlives it while any of them lives)."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "caller.py"
    script.write_text(_KILLED_CALLER)
    caller = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid*"))) < 2:
            assert caller.poll() is None and time.monotonic() < deadline, "workers never started"
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
        caller.send_signal(signal.SIGKILL)
        caller.wait(timeout=30)
        deadline = time.monotonic() + 30
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in pids if _running(p)]
        assert not alive, f"workers {alive} outlived their killed caller"
    finally:
        caller.kill()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
