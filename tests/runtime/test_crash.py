"""Crashes a user survives on an emulated cluster (as root): a collection or a search killed
with SIGKILL mid-trial loses no committed record, and its namespaces go at the next start (which
continues it); SIGINT mid-trial stores nothing for the trial in flight, exits 130 and leaves no
namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

CLI = [sys.executable, "-c", "from autosync_transfer.cli import main; main()"]
#: a tiny workload's trial takes about a second at 200 timed iterations
QUICK = ["--warmup", "1", "--iters", "200", "--timeout", "120", "--max-foreign-cpu", "1"]
#: two nodes of one worker each: the smallest emulated cluster
SPEC = """nodes:
  - address: 10.79.0.1
    cpus: [0]
    network_bandwidth: 1
    chief: true
  - address: 10.79.0.2
    cpus: [0]
    network_bandwidth: 1
"""


@pytest.fixture(scope="module", autouse=True)
def _netns() -> None:
    from autosync_transfer.runtime.emulation import available

    ok, why = available()
    if not ok:
        pytest.skip(why)


def _target(store: Path) -> list[str]:
    """A tiny workload (an embedding and a linear layer) on :data:`SPEC`."""
    from autosync_transfer.testing.workloads import write_workload

    spec = store.with_name("cluster.yml")
    spec.write_text(SPEC)
    model = write_workload(store.parent, "tiny", vocab=20, tokens=3, classes=2, batch_size=2)
    return ["--model", str(model), "--cluster-file", str(spec)]


def _collect(store: Path, count: int) -> list[str]:
    return [*CLI, "collect", *_target(store), "--launcher", "emulated", "-n", str(count),
            "--reference-every", "0", "--store", str(store), "--seed", "5", *QUICK]


def _search(store: Path) -> list[str]:
    return [*CLI, "search", *_target(store), "--launcher", "emulated", "--method", "random",
            "--budget", "3", "-k", "3", "--confirm", "0", "--no-log", "--store", str(store),
            "--seed", "5", *QUICK]


def _records(store: Path) -> list[dict]:
    text = store.read_text()
    assert not text or text.endswith("\n")  # every committed record is whole
    return [json.loads(line) for line in text.splitlines()]


def _owned(pid: int) -> list[str]:
    """The namespaces whose owner record names ``pid``."""
    from autosync_transfer.runtime.emulation import STATE_DIR

    names: list[str] = []
    for f in STATE_DIR.glob("*.json") if STATE_DIR.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("pid") == pid:
            names += rec.get("namespaces", [])
    return names


def _start_and_wait(argv: list[str], store: Path, records: int
                    ) -> tuple[subprocess.Popen, list[str]]:
    """Start ``argv``; return once ``store`` holds ``records`` committed records and the next
    trial is in flight, with the namespaces of the emulated cluster the process owns."""
    from autosync_transfer.runtime.emulation import list_namespaces

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    mine: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        mine |= set(_owned(proc.pid))
        if store.exists() and store.read_text().count("\n") >= records:
            break
        time.sleep(0.1)
    if proc.poll() is not None:
        raise AssertionError(proc.communicate()[1].decode()[-2000:])
    time.sleep(0.3)  # the next trial is in flight
    mine |= set(_owned(proc.pid))
    # the cluster's namespaces (the launcher's probe of a namespace is gone by now)
    return proc, sorted(mine & set(list_namespaces()))


def _sigkill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the controller; its workers run in their own session
    proc.wait(timeout=30)


def _check_resumed(argv: list[str], store: Path, committed: list[dict], dead_pid: int,
                   dead: list[str]) -> list[dict]:
    from autosync_transfer.runtime.emulation import list_namespaces

    assert dead and set(dead) <= set(list_namespaces())  # left behind by the kill ...
    res = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    after = _records(store)
    assert after[:len(committed)] == committed  # 0 committed records lost, none rewritten
    ids = [r["id"] for r in after]
    assert len(ids) == len(set(ids))
    assert not set(dead) & set(list_namespaces())  # ... and gone after the next start
    assert not _owned(dead_pid)
    return after


def test_sigkill_mid_collection_loses_nothing_and_the_next_start_cleans_up(tmp_path: Path
                                                                           ) -> None:
    store = tmp_path / "trials.jsonl"
    proc, mine = _start_and_wait(_collect(store, 30), store, 1)
    try:
        _sigkill(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    committed = _records(store)
    assert committed
    after = _check_resumed(_collect(store, len(committed) + 1), store, committed, proc.pid, mine)
    assert len(after) == len(committed) + 1 and all(r["status"] == "ok" for r in after)


def test_sigkill_mid_search_loses_nothing_and_the_next_start_cleans_up(tmp_path: Path) -> None:
    store = tmp_path / "run.jsonl"
    proc, mine = _start_and_wait(_search(store), store, 2)
    try:
        _sigkill(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    committed = _records(store)
    after = _check_resumed(_search(store), store, committed, proc.pid, mine)
    assert len([r for r in after if "/reference/" not in r["id"]]) == 3
    assert all(r["status"] == "ok" for r in after), [r["error"] for r in after]


def test_sigint_mid_search_is_not_recorded_and_leaves_no_namespace(tmp_path: Path) -> None:
    from autosync_transfer.runtime.emulation import list_namespaces

    store = tmp_path / "run.jsonl"
    proc, mine = _start_and_wait(_search(store), store, 1)
    try:
        committed = _records(store)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal's foreground group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err.decode()[-2000:]
    records = _records(store)
    assert records[:len(committed)] == committed
    assert all(r["status"] == "ok" for r in records)  # no `failed` record for the interruption
    assert mine and not set(mine) & set(list_namespaces())
    assert not _owned(proc.pid)
