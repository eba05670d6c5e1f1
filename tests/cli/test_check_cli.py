"""``autosync-transfer strategies check``: a convergence run from the command line on the user's
own workload; the check stored with --store is found again (not trained twice); a failing check
exits 1; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autosync_transfer.testing.workloads import write_cluster, write_workload


def test_check_a_strategy_of_a_user_workload(cli: Any, tmp_path: Path) -> None:
    model = write_workload(tmp_path, "user_model", batch_size=8)
    cluster = write_cluster(tmp_path)
    store = tmp_path / "checks.jsonl"
    argv = ["strategies", "check", "--model", str(model), "--cluster-file", str(cluster),
            "--strategy", "all_reduce", "--steps", "20", "--store", str(store)]
    r = cli(*argv, "--json")
    assert r.code == 0, r.err
    check = json.loads(r.out)
    assert check["passed"] and check["step_ratio"] == 1.0 and check["steps"] == 20
    assert len(store.read_text().splitlines()) == 1
    again = cli(*argv)  # found in the store: nothing trained
    assert again.code == 0 and "convergence check passed" in again.out
    assert len(store.read_text().splitlines()) == 1


def test_bad_check_input_is_one_line(cli: Any, tmp_path: Path) -> None:
    r = cli("strategies", "check", "ncf-A", "--strategy", "all_reduce", "--lr", "0")
    assert r.code == 2 and "--lr must be > 0, got 0" in r.err
    r = cli("strategies", "check", "ncf-A", "--strategy", str(tmp_path / "none.json"))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
