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
         locked=None, protocol=None, foreign=None) -> dict:
    """A stored run as the benchmark writes it; ``protocol`` None: the table's current one;
    ``foreign``: per round, the other processes' CPU share during its autotuned fit."""
    row = next(r for r in tbl.ROWS if r.key == key)
    argv = row.argv(len(auto), "x.jsonl")
    argv[-4:-4] = list(extra)
    foreign = foreign or [0.0] * len(auto)

    def fits(ws, shares):
        return [{"fit_s": w, "median_step_ms": w, "late_step_ms": w * 3, "final_loss": 0.1,
                 "foreign_cpu": f} for w, f in zip(ws, shares)]

    run = {"version": version, "date": "2026-11-28T12:00:00Z", "argv": argv,
           "steps": row.steps, "hidden": tbl.WORKLOADS[row.workload], "rounds": len(auto),
           "fits": {"AutoSync autotune": fits(auto, foreign),
                    "Lightning DDP": fits(ddp, [0.0] * len(ddp))},
           "tuning": [{"locked": (locked or "torch_ddp")} for _ in auto]}
    if protocol != 1:
        run["protocol"] = protocol or tbl.PROTOCOL
    return run


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
    assert f"(version v1, protocol {tbl.PROTOCOL})" in a and "0 of 3 |" in a
    assert "[too few rounds]" not in a
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


def test_a_disturbed_round_is_counted_measured_again_and_not_pooled(tbl):
    row = next(r for r in tbl.ROWS if r.key == "B/1000/short")  # first stage 6, most 18
    over = tbl.MAX_FOREIGN_CPU + 0.01
    # the third round's autotuned fit shared the machine: 5.0 s, not what the job costs
    run = _run(tbl, row.key, "v1", [1.0, 1.0, 5.0, 1.0], [1.0] * 4,
               foreign=[0.0, tbl.MAX_FOREIGN_CPU, over, None])
    rounds, bad = tbl.rounds_of([run])
    assert bad == 1 and [r["auto"]["fit_s"] for r in rounds] == [1.0, 1.0, 1.0]
    # steal counts with other processes: 3 % + 3 % is over a 5 % threshold
    run["fits"]["Lightning DDP"][1].update(foreign_cpu=0.03, steal_cpu=0.03)
    assert tbl.rounds_of([run])[1] == 2
    run["fits"]["Lightning DDP"][1].update(steal_cpu=0.0)
    assert tbl.missing([run], row, "v1") == row.rounds - 3
    line = next(x for x in tbl.table([run], "v1", [row]).splitlines() if x.startswith("| B/"))
    assert line.startswith(f"| {row.key} | 3 ({row.rounds}, {3 * row.rounds}) | 1 |")
    # a row whose disturbed rounds reach its most rounds stops, and says why
    busy = _run(tbl, row.key, "v1", [1.0] * 18, [1.0] * 18, foreign=[over] * 18)
    assert tbl.missing([busy], row, "v1") == 0
    line = next(x for x in tbl.table([busy], "v1", [row]).splitlines() if x.startswith("| B/"))
    assert "| 18 |" in line and "too disturbed" in line
    assert tbl.missing([_run(tbl, row.key, "v1", [1.0] * 17, [1.0] * 17,
                             foreign=[over] * 17)], row, "v1") == row.rounds


def test_rounds_of_an_earlier_protocol_are_shown_not_pooled(tbl):
    row = next(r for r in tbl.ROWS if r.key == "A/1000/short")
    old = _run(tbl, row.key, "v1", [1.0] * 6, [1.0] * 6, protocol=1)
    del old["fits"]["AutoSync autotune"][0]["foreign_cpu"]  # protocol 1 did not watch
    assert tbl.missing([old], row, "v1") == row.rounds
    line = next(x for x in tbl.table([old], "v1", [row]).splitlines() if x.startswith("| A/"))
    assert "(version v1, protocol 1)" in line and "| not watched |" in line
    # the benchmark is told the protocol, and a run told so is still the row's
    argv = row.run_argv(2, "x.jsonl", "v1")
    assert argv[-2:] == ["--protocol", str(tbl.PROTOCOL)]
    assert tbl.row_of({"argv": argv}) == row.key
