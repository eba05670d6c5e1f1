"""A search on torchrun workers that follow its job queue (one node, two CPU workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from autosync_transfer.search.loop import FP16_REFERENCES
from autosync_transfer.strategies.builders import BUILDERS


def test_search_through_torchrun_workers(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    store = tmp_path / "run.jsonl"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    search = [sys.executable, "-c", "from autosync_transfer.cli import main; main()", "search", "ncf",
              "--cluster-file", str(spec), "--launcher", "torchrun", "--method", "random",
              "--budget", "3", "-k", "3", "--candidates", "20", "--warmup", "1", "--iters", "2",
              "--confirm", "1", "--no-log", "--store", str(store), "--json",
              "--objective", "step-time"]
    torchrun = Path(sys.executable).with_name("torchrun")
    workers = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m",
               "autosync_transfer", "worker", "--torchrun", "--follow", "--domain", "ncf",
               "--cluster-file", str(spec), "--strategies", f"{store}.queue.jsonl",
               "--results", f"{store}.results.jsonl", "--warmup", "1", "--iters", "2"]
    w = subprocess.Popen(workers, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        s = subprocess.run(search, env=env, capture_output=True, text=True, timeout=400)
        assert s.returncode == 0, s.stderr[-3000:]
        _, werr = w.communicate(timeout=120)  # the search's "stop" ends the workers
        assert w.returncode == 0, werr[-3000:]
    finally:
        if w.poll() is None:
            w.kill()
    assert "--torchrun --follow" in s.stderr  # the command to start was printed
    summary = json.loads(s.stdout)
    assert summary["trials"] == 3 and summary["best_s"] > 0
    records = [json.loads(line) for line in store.read_text().splitlines()]
    # references (builders, DDP, fp16 variants), 3 trials, then one confirmation round: the
    # best, the best builder, the best fp16 variant, torch DDP (and the best lossless strategy
    # when the best is lossy)
    confirm = {r["id"].rsplit("-", 1)[1] for r in records if "/confirm/" in r["id"]}
    assert {"best", "builder", "fp16", "ddp"} <= confirm <= {"best", "builder", "fp16", "ddp",
                                                            "lossless"}
    assert len(records) == len(BUILDERS) + 1 + len(FP16_REFERENCES) + 3 + len(confirm)
    assert summary["confirmed"]["measurements"] == 1
    assert summary["confirmed"]["ddp_s"] > 0
    assert all(r["launcher"] == "torchrun" and r["status"] == "ok" for r in records)
    assert all(len(r["iteration_times_s"]) == 2 for r in records)
    # the torchrun workers probe the lossy references' gradient fidelity (job queue -> results
    # row -> trial record); the lossless builders have none
    by_id = {r["id"].split("/reference/", 1)[-1]: r for r in records if "/reference/" in r["id"]}
    assert all(by_id[name]["fidelity"]["steps"] == 3 for name in FP16_REFERENCES)
    assert all(by_id[name]["fidelity"] is None for name in BUILDERS)
    results = [json.loads(line) for line in Path(f"{store}.results.jsonl").read_text().splitlines()]
    assert sorted(r["record_id"] for r in results) == sorted(r["id"] for r in records)
    assert Path(f"{store}.queue.jsonl").read_text().splitlines()[-1] == "stop"
