"""An interrupted trial is never data: SIGINT / SIGTERM mid-trial record nothing for the trial in
flight, tear the workers down and exit 130 / 143; resuming measures that strategy again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosync_transfer.errors import Interrupted, interrupt_exit_code


def test_interrupted_exit_codes() -> None:
    assert Interrupted(signal.SIGINT).exit_code == 130
    assert Interrupted(signal.SIGTERM).exit_code == 143
    assert isinstance(Interrupted(signal.SIGTERM), KeyboardInterrupt)
    assert not isinstance(Interrupted(), Exception)  # never caught as a failure
    assert interrupt_exit_code(KeyboardInterrupt()) == 130


def _collect_argv(store: Path, count: int) -> list[str]:
    return [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "collect",
            "ncf-A", "--launcher", "local", "-n", str(count), "--warmup", "1", "--iters", "60",
            "--reference-every", "0", "--store", str(store), "--seed", "3",
            "--max-foreign-cpu", "1"]


def _records(store: Path) -> list[dict]:
    text = store.read_text()
    assert not text or text.endswith("\n")  # every committed record complete
    return [json.loads(line) for line in text.splitlines()]


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return kids


@pytest.mark.parametrize("sig, code, group", [
    (signal.SIGINT, 130, False), (signal.SIGTERM, 143, False),
    (signal.SIGINT, 130, True),  # Ctrl-C in a terminal: the whole foreground process group
])
def test_signal_mid_trial_is_not_recorded(tmp_path: Path, sig: int, code: int, group: bool
                                          ) -> None:
    store = tmp_path / "trials.jsonl"
    proc = subprocess.Popen(_collect_argv(store, 30), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if store.exists() and store.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        time.sleep(0.5)  # the next trial is in flight
        committed = _records(store)
        workers = _children(proc.pid)
        assert workers, "no trial workers"
        t0 = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)  # the controller only, as a supervisor would
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err.decode()[-2000:]
    assert took < 30
    assert "interrupted" in err.decode()
    records = _records(store)
    assert [r["id"] for r in records[: len(committed)]] == [r["id"] for r in committed]
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    assert not [p for p in workers if Path(f"/proc/{p}").exists()
                and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    if sig == signal.SIGTERM or group:
        return
    # resuming measures the interrupted strategy: one more trial, no duplicate id
    target = len([r for r in records if not r["reference"]]) + 1
    res = subprocess.run(_collect_argv(store, target), capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    again = _records(store)
    ids = [r["id"] for r in again]
    assert len(ids) == len(set(ids)) == len(records) + 1
    assert all(r["status"] == "ok" for r in again)


def _owned_namespaces(pid: int) -> list[str]:
    """The namespaces whose owner record names ``pid`` (emulation's state under /run)."""
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


@pytest.mark.netns
def test_sigint_mid_trial_on_emulated_cluster(tmp_path: Path) -> None:
    from autosync_transfer.runtime.emulation import available, list_namespaces

    ok, why = available()
    if not ok:
        pytest.skip(why)
    store = tmp_path / "trials.jsonl"
    argv = [a if a != "local" else "emulated" for a in _collect_argv(store, 30)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    mine: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if store.exists() and store.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        # the cluster's own namespaces (the availability probe's come and go before it is built)
        mine = [n for n in _owned_namespaces(proc.pid) if not re.search(r"-pr\d{4}-br$", n)]
        assert mine and set(mine) <= set(list_namespaces())
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert all(r["status"] == "ok" for r in _records(store))
    assert not set(mine) & set(list_namespaces())
    assert not _owned_namespaces(proc.pid)


def test_sigterm_mid_search_is_not_recorded(tmp_path: Path) -> None:
    store = tmp_path / "run.jsonl"
    argv = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "search",
            "ncf-A", "--launcher", "local", "--method", "random", "--budget", "20",
            "--confirm", "0", "--no-log", "--warmup", "1", "--iters", "60", "--store", str(store),
            "--max-foreign-cpu", "1", "--objective", "step-time"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if store.exists() and store.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err.decode()[-2000:]
    records = _records(store)
    assert records and all(r["status"] == "ok" for r in records)
