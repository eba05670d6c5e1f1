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
    strategies.write_text(build("ps_lb", domain).to_json() + "\ntorch_ddp\n"
                          + build("ddp", domain, compressor="fp16").to_json() + "\n")
    store = tmp_path / "out.jsonl"
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "autosync_transfer", "worker",
            "--torchrun", "--domain", "ncf", "--cluster-file", str(spec), "--strategies", str(strategies),
            "--store", str(store), "--warmup", "1", "--iters", "2"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert [r["strategy_kind"] for r in records] == ["ps_lb", "torch_ddp", "ddp"]
    assert all(r["status"] == "ok" and len(r["iteration_times_s"]) == 2 for r in records)
    assert records[0]["launcher"] == "torchrun"
    # the lossy one (fp16) carries its gradient-fidelity probe, the lossless ones none
    assert records[0]["fidelity"] is None and records[1]["fidelity"] is None
    assert records[2]["fidelity"]["steps"] == 3 and 0 < records[2]["fidelity"]["rel_error"] < 0.01
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(store.read_text().splitlines()) == 3  # nothing measured twice


def _torchrun(tmp_path: Path, strategies: list[str], *extra: str) -> tuple[list[str], dict]:
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(strategies) + "\n")
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--standalone", "--nproc_per_node=2", *extra,
            "-m", "autosync_transfer", "worker", "--torchrun", "--domain", "ncf",
            "--cluster-file", str(spec), "--strategies", str(path),
            "--store", str(tmp_path / "out.jsonl")]
    return argv, dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


def test_a_strategy_that_raises_is_a_failed_trial(tmp_path: Path):
    from autosync_transfer.cli._common import resolve_domain
    from autosync_transfer.strategies.builders import build

    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    domain = resolve_domain("ncf", str(spec))
    argv, env = _torchrun(tmp_path, [build("ps_lb", domain).to_json(), "torch_ddp"])
    # every rank raises in every trial: each is stored as failed, with the error, and the job
    # goes on to the next one
    proc = subprocess.run([*argv, "--warmup", "1", "--iters", "2", "--timeout", "60"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(env, AUTOSYNC_TEST_FAULT="error"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = _records(tmp_path)
    assert [r["strategy_kind"] for r in records] == ["ps_lb", "torch_ddp"]
    for r in records:
        assert r["status"] == "failed" and r["iteration_times_s"] == []
        assert r["error"] == "RuntimeError: injected error"


def test_a_bad_strategies_file_is_one_line_and_nothing_written(tmp_path: Path):
    from autosync_transfer.cli._common import resolve_domain
    from autosync_transfer.strategies.builders import build

    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    good = build("ps_lb", resolve_domain("ncf", str(spec)))
    bad = json.loads(good.to_json())
    bad["nodes"][0]["var_name"] = "no.such.variable"
    argv, env = _torchrun(tmp_path, [good.to_json(), json.dumps(bad)])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "line 2" in errors[0] and "no.such.variable" in errors[0], \
        proc.stderr[-2000:]
    assert "exitcode  : 2" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


def test_a_trial_past_the_timeout_is_recorded_and_torchrun_restarts_past_it(tmp_path: Path):
    """Rank 0's watchdog records the trial as ``timeout`` and exits with 124; torchrun
    (``--max-restarts``) restarts the workers, which skip it and go on with the next one."""
    from autosync_transfer.cli._common import resolve_domain
    from autosync_transfer.runtime.worker import TIMEOUT_EXIT
    from autosync_transfer.strategies.builders import build

    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    lines = [build("ps_lb", resolve_domain("ncf", str(spec))).to_json(), "torch_ddp"]
    # every trial (thousands of iterations) outlives a 0.5 s watchdog
    argv, env = _torchrun(tmp_path, lines)
    slow = ["--warmup", "1", "--iters", "5000", "--timeout", "0.5"]
    once = subprocess.run(argv + slow, env=env, capture_output=True, text=True, timeout=300)
    assert once.returncode != 0 and f"exitcode  : {TIMEOUT_EXIT}" in once.stderr, \
        once.stderr[-2000:]
    (first,) = _records(tmp_path)
    assert first["strategy_kind"] == "ps_lb" and first["status"] == "timeout"
    assert "timeout after 0.5 s" in first["error"]
    argv, env = _torchrun(tmp_path, lines, "--max-restarts", "1")
    # restarted workers must not share the rendezvous store of the failed attempt (stale group
    # addresses): see docs/torchrun.md
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    again = subprocess.run(argv + slow, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    records = _records(tmp_path)
    assert [(r["strategy_kind"], r["status"]) for r in records] == [
        ("ps_lb", "timeout"), ("torch_ddp", "timeout")]


def test_torchrun_measures_a_workload_spec(tmp_path: Path):
    """A user's workload (not in the zoo) under torchrun: every rank imports it from its spec."""
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.strategies.builders import build

    spec = tmp_path / "duo.yml"
    spec.write_text("nodes:\n  - address: localhost\n    cpus: [0, 1]\n")
    gpt = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "tiny_gpt.py"
    domain = load_workload(str(gpt)).domain(Cluster.from_file(spec))
    strategies = tmp_path / "s.jsonl"
    strategies.write_text(build("ps_lb", domain).to_json() + "\ntorch_ddp\n")
    store = tmp_path / "out.jsonl"
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "autosync_transfer", "worker",
            "--torchrun", "--model", str(gpt), "--cluster-file", str(spec), "--strategies",
            str(strategies), "--store", str(store), "--warmup", "1", "--iters", "2"]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert [(r["domain"], r["strategy_kind"], r["status"]) for r in records] == [
        ("tiny_gpt-duo", "ps_lb", "ok"), ("tiny_gpt-duo", "torch_ddp", "ok")]
    assert records[0]["model_fingerprint"] == domain.model.fingerprint
    # a workload that cannot be imported: one line, exit 2, nothing measured
    bad = [*argv[:argv.index("--model") + 1], str(tmp_path / "missing.py"),
           *argv[argv.index("--model") + 2:]]
    failed = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    errors = [ln for ln in failed.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "no such file" in errors[0], failed.stderr[-2000:]
    assert "exitcode  : 2" in failed.stderr
