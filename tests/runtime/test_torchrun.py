"""The torchrun entry: rank 0 broadcasts the strategies, appends one record per trial, resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_torchrun_measures_and_resumes(tmp_path: Path):
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    from autosync_transfer.cli._common import resolve_domain
    from autosync_transfer.strategies.builders import build

    domain = resolve_domain("ncf", str(spec))
    strategies = tmp_path / "s.jsonl"
    strategies.write_text(build("ps_lb", domain).to_json() + "\ntorch_ddp\n")
    store = tmp_path / "out.jsonl"
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "autosync_transfer.runtime.worker",
            "--torchrun", "--domain", "ncf", "--cluster-file", str(spec), "--strategies", str(strategies),
            "--store", str(store), "--warmup", "1", "--iters", "2"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert [r["strategy_kind"] for r in records] == ["ps_lb", "torch_ddp"]
    assert all(r["status"] == "ok" and len(r["iteration_times_s"]) == 2 for r in records)
    assert records[0]["launcher"] == "torchrun"
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(store.read_text().splitlines()) == 2  # nothing measured twice
