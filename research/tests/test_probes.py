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


def test_variant_scan_scores_the_held_out_store_and_refuses_unknown_physics() -> None:
    probe = [sys.executable, str(ROOT / "research" / "probes" / "variant_scan.py"),
             "--domains", "bert-3l-heldout"]
    res = _run(probe + ["--physics", "comm_scale=2.0"])
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if "bert-3l-heldout" in line
            and not line.startswith("#")]
    assert rows, res.stdout  # the Intel runs of the held-out cluster's BERT-3 store
    cells = [c.strip() for c in " ".join(rows[0][3:]).split("|")]
    # the Intel calibration's time slicing is 2.0: setting it again changes nothing
    assert len(cells) == 2 and cells[0] == cells[1], res.stdout
    assert 0.0 <= float(cells[0].split("/")[0]) <= 1.0
    for extra, needle in ((["--physics", "no_such_number=1"], "no_such_number"),
                          (["--physics", "comm_scale=fast"], "NAME=NUMBER"),
                          (["--machine", "x"], "TYPE=PROFILES:CALIBRATIONS")):
        bad = _run(probe + extra)
        assert bad.returncode == 2 and needle in bad.stderr.strip().splitlines()[-1], bad.stderr


def test_physics_sets_refuses_a_folder_without_physics_and_an_unknown_store(tmp_path: Path) -> None:
    probe = [sys.executable, str(ROOT / "research" / "probes" / "physics_sets.py")]
    for extra, needle in (([str(tmp_path)], "profiles/ and calibrations/"),
                          (["--domains", "no-such-store", str(ROOT / "benchmarks/results/machines/"
                                                             "intel-xeon")], "no-such-store")):
        res = _run(probe + extra)
        assert res.returncode == 2, (extra, res.stderr)
        assert needle in res.stderr.strip().splitlines()[-1], (extra, res.stderr)
    ok = _run(probe + ["--domains", "bert-3l-B",
                       str(ROOT / "benchmarks/results/machines/intel-xeon")])
    assert ok.returncode == 0, ok.stderr
    row = next(line for line in ok.stdout.splitlines() if line.startswith("bert-3l-B"))
    assert "resolved:" in row and "range" in row


def test_trial_trace_refuses_an_unknown_store_or_strategy_before_measuring() -> None:
    probe = [sys.executable, str(ROOT / "research" / "probes" / "trial_trace.py")]
    bad = _run(probe + ["--domain", "no-such-store", "--strategies", "ps-bert-3l-B"])
    assert bad.returncode == 2 and "--domain: 'no-such-store'" in bad.stderr, bad.stderr
    bad = _run(probe + ["--domain", "bert-3l-B", "--strategies", "ps-bert-3l-B,s0-nope"])
    assert bad.returncode == 2 and "--strategies: 's0-nope': not a strategy" in bad.stderr, bad.stderr
