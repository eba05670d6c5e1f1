"""benchmarks/autotune_table.py: which stored runs make which row, what a row still lacks, and
the table it prints (the measuring itself is the benchmark's, run as root)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tbl():
    spec = importlib.util.spec_from_file_location(
        "autotune_table", ROOT / "benchmarks" / "autotune_table.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["autotune_table"] = mod  # its dataclass looks its module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("autotune_table", None)


def _run(tbl, key: str, version: str, auto: list[float], ddp: list[float], *, extra=(),
         locked=None) -> dict:
    row = next(r for r in tbl.ROWS if r.key == key)
    argv = row.argv(len(auto), "x.jsonl")
    argv[-4:-4] = list(extra)

    def fits(ws):
        return [{"fit_s": w, "median_step_ms": w, "late_step_ms": w * 3, "final_loss": 0.1}
                for w in ws]

    return {"version": version, "date": "2026-11-28T12:00:00Z", "argv": argv,
            "steps": row.steps, "hidden": tbl.WORKLOADS[row.workload], "rounds": len(auto),
            "fits": {"AutoSync autotune": fits(auto), "Lightning DDP": fits(ddp)},
            "tuning": [{"locked": (locked or "torch_ddp")} for _ in auto]}


def test_a_run_belongs_to_the_row_whose_arguments_it_has_exactly(tbl):
    run = _run(tbl, "lab/1000/bandwidth", "v1", [1.0] * 3, [1.0] * 3)
    assert tbl.row_of(run) == "lab/1000/bandwidth"
    assert tbl.row_of(_run(tbl, "B/300/short", "v1", [1.0], [1.0])) == "B/300/short"
    # another configuration of the benchmark is not a row of the table
    assert tbl.row_of(_run(tbl, "B/300/short", "v1", [1.0], [1.0],
                           extra=["--target-rounds", "8"])) is None
    assert tbl.row_of({"argv": ["--cluster", "A", "--steps", "300"]}) is None


def test_a_row_lacks_the_planned_rounds_it_has_not_at_this_version(tbl):
    row = next(r for r in tbl.ROWS if r.key == "A/300/short")
    runs = [_run(tbl, "A/300/short", "v1", [1.0] * 5, [1.0] * 5),
            _run(tbl, "A/300/short", "v2", [1.0] * 5, [1.0] * 5),
            _run(tbl, "B/300/short", "v2", [1.0] * 5, [1.0] * 5)]
    assert tbl.missing(runs, row, "v2") == row.rounds - 5
    assert tbl.missing(runs, row, "v3") == row.rounds
    full = [_run(tbl, "A/300/short", "v2", [1.0] * row.rounds, [1.0] * row.rounds)]
    assert tbl.missing(full, row, "v2") == 0


def test_the_table_pools_this_versions_rounds_and_marks_an_older_version(tbl):
    runs = [_run(tbl, "C/300/short", "v1", [2.0, 2.1, 2.0], [2.0, 2.0, 2.0]),
            _run(tbl, "C/300/short", "v2", [1.0, 1.1, 1.0], [1.2, 1.3, 1.2], locked="ddp-x"),
            _run(tbl, "C/300/short", "v2", [1.0, 1.0], [1.2, 1.2], locked="ddp-x"),
            _run(tbl, "A/300/short", "v1", [1.0, 1.02, 0.99], [1.0, 1.0, 1.0])]
    rows = [r for r in tbl.ROWS if r.key in ("C/300/short", "A/300/short", "B/300/short")]
    out = tbl.table(runs, "v2", rows)
    c = next(line for line in out.splitlines() if line.startswith("| C/300/short"))
    assert "| 5 (20, 60) |" in c and "5 of 5 |" in c and "measuring (5 of 20)" in c
    assert "version" not in c
    a = next(line for line in out.splitlines() if line.startswith("| A/300/short"))
    assert "(version v1)" in a and "0 of 3 |" in a and "[too few rounds]" not in a
    b = next(line for line in out.splitlines() if line.startswith("| B/300/short"))
    assert "not measured" in b
    s = tbl.summarize([runs[1], runs[2]], 20)
    assert s["rounds"] == 5 and s["wall"].low > 1.1


def test_a_line_cut_short_is_skipped_and_a_wrong_row_is_one_line_exit_2(tbl, tmp_path):
    store = tmp_path / "s.jsonl"
    good = _run(tbl, "B/300/short", "v1", [1.0] * 3, [1.0] * 3)
    store.write_text(json.dumps(good) + "\n" + json.dumps(good)[:40])
    assert len(tbl.read_store(str(store))) == 1
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "autotune_table.py"),
                        "--rows", "B/300/tiny", "--store", str(store)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: --rows: unknown row 'B/300/tiny' (rows are "
                                "cluster/steps/workload, e.g. A/300/short)")
    assert r.stdout == ""


def test_two_looks_decide_a_row_and_only_an_undecided_one_runs_on(tbl):
    rng = __import__("numpy").random.default_rng(0)
    first = 20
    ddp = list(1.0 + 0.01 * rng.standard_normal(3 * first))
    # clearly at DDP's speed: met at the first look, nothing more to run
    same = [d * (1 + 0.002 * e) for d, e in zip(ddp, rng.standard_normal(3 * first))]
    d = tbl.decide(same[:first], ddp[:first], first)
    assert (d["verdict"], d["look"], d["target"]) == ("met", first, first)
    assert d["estimate"].confidence == 0.975 and d["estimate"].n == first
    # clearly slower than the floor: not met at the first look
    slow = [d * 1.05 for d in ddp]
    assert tbl.decide(slow[:first], ddp[:first], first)["verdict"] == "not met"
    # 1 % slower with a 3 % spread: undecided at the first look, so it runs to the second
    noisy = [d * 1.01 * (1 + 0.03 * e) for d, e in zip(ddp, rng.standard_normal(3 * first))]
    d = tbl.decide(noisy[:first], ddp[:first], first)
    assert (d["verdict"], d["look"], d["target"]) == (None, None, 3 * first)
    d = tbl.decide(noisy, ddp, first)
    assert d["look"] == 3 * first and d["verdict"] in ("met", "undecided")
    assert d["verdict"] == ("met" if d["estimate"].low >= tbl.FLOOR else "undecided")
    # an interval that still holds the floor at the second look is undecided, not "not met"
    wide = [d * 1.01 * __import__("math").exp(0.06 * (-1) ** i) for i, d in enumerate(ddp)]
    w = tbl.decide(wide, ddp, first)
    assert w["estimate"].low < tbl.FLOOR <= w["estimate"].high and w["verdict"] == "undecided"
    # rounds past the deciding look do not change the figure
    assert tbl.decide(noisy + noisy[:5], ddp + ddp[:5], first)["estimate"] == d["estimate"]
