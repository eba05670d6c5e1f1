"""The benchmark scripts' offline paths: predicting an earlier run's layouts again, and refusing
bad simulator options in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, str(ROOT / "research" / "probes" / "layout_probe.py"), "--domain",
         "bert-3l-heldout", "--store", str(ROOT / "benchmarks/results/heldout/bert-3l-heldout.jsonl")]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def _rows(text: str) -> dict[str, tuple[float, float]]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and not line.startswith("#") and parts[0] != "layout":
            out[parts[0]] = (float(parts[1]), float(parts[2]))
    return out


def test_layout_probe_rescores_an_earlier_run_with_a_simulator_option(tmp_path: Path) -> None:
    earlier = tmp_path / "probe.txt"
    earlier.write_text(
        "# a newer run first\n"
        "layout           measured    pred     log   ar_s   ps_s exposed  rounds\n"
        "AR16                528.2   446.6  +0.168  298.2   39.1   224.2  554 528 523\n"
        "PS_all              997.6   943.0  +0.056    0.0  697.1   724.3  1001 996 998\n"
        "# an older run\n"
        "AR16                900.0   446.6  +0.700  298.2   39.1   224.2  900 900 900\n")
    base = _run(PROBE + ["--sets", "buckets,mixes", "--rescore", str(earlier)])
    assert base.returncode == 0, base.stderr
    slowed = _run(PROBE + ["--sets", "buckets,mixes", "--rescore", str(earlier),
                           "--sim-option", "ring_slowed_while_computing=true"])
    assert slowed.returncode == 0, slowed.stderr
    b, s = _rows(base.stdout), _rows(slowed.stdout)
    assert set(b) == {"AR16", "PS_all"}  # only the layouts the file holds
    assert b["AR16"][0] == 528.0  # the newest row's rounds, median
    # the AR thread slowed during the backward pass: 16 buckets end later, no all-reduce no later
    assert s["AR16"][1] > b["AR16"][1]
    assert s["PS_all"][1] == b["PS_all"][1]


def test_bad_simulator_options_and_files_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for extra, needle in ((["--sim-option", "no_such_field=1"], "no_such_field"),
                          (["--sim-option", "ring_slowed_while_computing=maybe"], "true or false"),
                          (["--sim-option", "step_overhead_s=-1"], "step_overhead_s"),
                          (["--rescore", str(tmp_path / "missing.txt")], "missing.txt")):
        res = _run(PROBE + (["--rescore", str(tmp_path / "missing.txt")]
                            if extra[0] == "--sim-option" else []) + extra)
        assert res.returncode == 2, (extra, res.stderr)
        last = res.stderr.strip().splitlines()[-1]
        assert needle in last and "Traceback" not in res.stderr, (extra, res.stderr)
    sameday = _run([sys.executable, str(ROOT / "research" / "probes" / "stepsim_sameday.py"),
                    "--scratch", str(tmp_path / "s"), "--sim-option", "goodput=2"])
    assert sameday.returncode == 2 and "goodput" in sameday.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "s").exists()  # nothing written


def test_synthetic_steps_refuses_bad_cases_and_options_before_measuring() -> None:
    probe = [sys.executable, str(ROOT / "research" / "probes" / "synthetic_steps.py")]
    for extra, needle in ((["--cases", "64:1"], "--cases"),
                          (["--cases", "0:1:1"], "--cases"),
                          (["--sim-option", "ps_sliced_while_computing=maybe"], "true or false"),
                          (["--calibrations", "/nonexistent"], "no calibration")):
        res = _run(probe + extra)
        assert res.returncode == 2, (extra, res.stderr)
        assert needle in res.stderr.strip().splitlines()[-1], (extra, res.stderr)
