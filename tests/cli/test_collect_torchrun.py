"""``collect --launcher torchrun`` of a workload: the command to start on every node is printed,
and torchrun workers running the workload spec measure the collection's job queue (one node,
two CPU workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from autosync_transfer.testing.workloads import embedding_classifier_source

MODEL = embedding_classifier_source(vocab=20, tokens=3, classes=2, batch_size=2)


def test_collect_a_workload_through_torchrun_workers(tmp_path: Path) -> None:
    model = tmp_path / "wl.py"
    model.write_text(MODEL)
    spec = tmp_path / "pair.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    store = tmp_path / "trials.jsonl"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    collect = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "collect",
               "--model", str(model), "--cluster-file", str(spec), "--launcher", "torchrun",
               "-n", "3", "--warmup", "1", "--iters", "2", "--store", str(store), "--json"]
    torchrun = Path(sys.executable).with_name("torchrun")
    workers = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "autosync_transfer",
               "worker", "--torchrun", "--follow", "--model", str(model), "--cluster-file",
               str(spec), "--strategies", f"{store}.queue.jsonl", "--results",
               f"{store}.results.jsonl", "--warmup", "1", "--iters", "2"]
    w = subprocess.Popen(workers, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        c = subprocess.run(collect, env=env, capture_output=True, text=True, timeout=400)
        assert c.returncode == 0, c.stderr[-3000:]
        _, werr = w.communicate(timeout=120)  # the collection's "stop" ends the workers
        assert w.returncode == 0, werr[-3000:]
    finally:
        if w.poll() is None:
            w.kill()
    # the command to start on every node names the workload and the cluster file
    printed = " ".join(c.stderr.split())
    assert "--torchrun --follow --model" in printed and str(model) in printed
    assert f"--cluster-file {spec}" in printed
    report = json.loads(c.stdout)
    assert report["domain"] == "wl-pair" and report["collected"]["trials"] == 3
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert len(records) == 4  # a drift reference, then 3 trials
    assert all(r["launcher"] == "torchrun" and r["status"] == "ok" for r in records)
    assert all(r["domain"] == "wl-pair" for r in records)
    meta = json.loads(Path(f"{store}.meta.json").read_text())
    assert meta["domains"]["wl-pair"]["workload"] == str(model)
