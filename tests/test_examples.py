"""The example scripts run as a user runs them: the local launcher, a few steps each, the
documented options. Each ends with its report; the Lightning one autotunes, and what it says
was chosen is what the job locked in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(*argv: str, timeout_s: float = 300) -> str:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    res = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout_s)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    return res.stdout


def test_the_plain_torch_loop_example_trains_with_identical_replicas() -> None:
    out = _run(str(EXAMPLES / "train_torch_loop.py"), "--launcher", "local", "--steps", "12",
               "--strategy", "all_reduce")
    assert re.search(r"final loss [0-9.]+ \(first [0-9.]+\); 12 steps", out), out
    assert "replicas identical: yes" in out


def test_the_own_workload_example_trains_on_a_cluster_file() -> None:
    out = _run(str(EXAMPLES / "train_workload.py"), "--model",
               str(EXAMPLES / "workloads" / "tiny_gpt.py") + ":lab", "--cluster-file",
               str(EXAMPLES / "clusters" / "lab.yml"), "--launcher", "local", "--steps", "6")
    assert "6 steps" in out and "replicas identical: yes" in out, out


def test_the_lightning_example_autotunes_and_reports_what_it_locked_in() -> None:
    pytest.importorskip("lightning")
    out = _run(str(EXAMPLES / "train_lightning.py"), "--launcher", "local", "--steps", "20",
               "--autotune", "--candidates", "20")
    locked = re.search(r"locked in (\S+)", out)
    chosen = re.search(r"AutoSync strategy chosen by autotuning in the job .*?: (\S+)", out)
    assert locked and chosen, out
    assert chosen.group(1) == locked.group(1)  # the job's strategy is the locked choice
    assert "final loss (last 20 steps)" in out
