"""The "never slower than DDP" table: autotune in a Lightning job against Lightning DDP, every row.

One command measures what the table still lacks and prints it. Rows: clusters A, B, C and the
cluster files of ``examples/clusters/`` x 300 and 1,000 planned steps x two workloads of the
demo classifier (``autosync_transfer.demos``): ``short`` (hidden width 512, 1.7 MB of gradients,
an 18-85 ms step) and ``bandwidth`` (hidden width 1024, 5 MB: moving gradients is most of the
step). Each row runs ``benchmarks/autotune_lightning.py --builders ''`` (AutoSync autotune and
Lightning DDP, interleaved, in an order shuffled per round) in chunks of a few rounds. Each row
is decided by a two-look design fixed in advance (``PLAN``, ``LOOKS``): after its first-stage
rounds the floor is looked at with a 97.5 % interval (the 95 % of the design spent over its
two looks, Bonferroni); a row whose interval lies above the floor (met) or below it (not met)
stops there, an undecided one runs to ``LOOKS`` x its first stage and is looked at once more
(met, not met, or still undecided: the machine's noise between fits is wider than the margin). No re-running until a figure looks good: the rounds a row gets depend only on this
rule. Every chunk appends one line to the store (``--store``, append-only; a killed run
loses at most its chunk in flight), so a later start resumes where the last one stopped.

A round disturbed by others is measured again, as the project's trial collection does
(``PROTOCOL`` 2): every fit records the CPU share other processes took while it ran
(``runtime.cpuwatch``, the table's process tree being ours) and the share the hypervisor
stole; a round where a fit's two shares together exceed ``MAX_FOREIGN_CPU`` (the collection's
and search's threshold) is kept in the store, counted in the table, and not pooled. Each chunk
starts once the machine is quiet. A row whose disturbed rounds reach its most rounds (``LOOKS``
x its first stage) stops: the machine was too busy to measure it.

Rows pool the rounds of the package's current version (the last commit that changed
``autosync_transfer/``) and of the table's current protocol; a row with none there shows its
newest earlier version's or protocol's figure, marked. Printed per row: the disturbed rounds,
the wall time of ``fit`` (from its start: proposal, tuning and switches included) as a
speed-up over Lightning DDP paired by round with the t-interval of its deciding look and the
rounds, whether the interval's lower bound meets the 0.98 floor, the second half's median step
(what the job runs at once tuned) the same way, the fits that locked in a candidate, and the
final losses.

    sudo .venv/bin/python benchmarks/autotune_table.py                  # measure what is missing, print
    sudo .venv/bin/python benchmarks/autotune_table.py --rows B/300/short,A/1000/short
    python benchmarks/autotune_table.py --show                          # print only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STORE = os.path.join(HERE, "results", "autotune_table.jsonl")
FLOOR = 0.98

CLUSTERS = {"A": ["--cluster", "A"], "B": ["--cluster", "B"], "C": ["--cluster", "C"],
            "lab": ["--cluster-file", "examples/clusters/lab.yml"],
            "heldout": ["--cluster-file", "examples/clusters/heldout.yml"]}
WORKLOADS = {"short": 512, "bandwidth": 1024}
# first-stage rounds per row, fixed before measuring; chunk: rounds per run of the benchmark
PLAN = {("short", 300): (20, 5), ("short", 1000): (6, 3),
        ("bandwidth", 300): (6, 3), ("bandwidth", 1000): (4, 2)}
LOOKS = 3  # an undecided row's second look: after this many times its first stage
PROTOCOL = 2  # 1: every round pooled; 2: rounds with a fit disturbed by other processes re-measured
MAX_FOREIGN_CPU = 0.05  # share of the machine; the trial collection's and search's threshold
QUIET_WAIT_S = 600.0  # before a chunk, at most this long for a quiet machine
CONFIDENCE = 0.95  # of the whole design; each of its two looks: 1 - (1 - CONFIDENCE) / 2


@dataclass(frozen=True)
class Row:
    cluster: str
    steps: int
    workload: str

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.steps}/{self.workload}"

    @property
    def rounds(self) -> int:
        return PLAN[(self.workload, self.steps)][0]

    @property
    def chunk(self) -> int:
        return PLAN[(self.workload, self.steps)][1]

    def argv(self, rounds: int, store: str) -> list[str]:
        return [*CLUSTERS[self.cluster], "--steps", str(self.steps),
                "--hidden", str(WORKLOADS[self.workload]), "--builders", "",
                "--rounds", str(rounds), "--json-out", store]

    def run_argv(self, rounds: int, store: str, version: str) -> list[str]:
        return [*self.argv(rounds, store), "--version", version, "--protocol", str(PROTOCOL)]


ROWS = [Row(c, s, w) for w in WORKLOADS for s in (300, 1000) for c in CLUSTERS]


def package_version() -> str:
    """The last commit that changed the package (``autosync_transfer/``), ``+dirty`` when it has
    uncommitted changes: runs of one version measure the same code, whatever else changed."""

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        commit = git("log", "-1", "--format=%h", "--", "autosync_transfer")
        dirty = git("status", "--porcelain", "--", "autosync_transfer")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def parse_rows(text: str | None) -> list[Row]:
    """``--rows``: comma-separated ``cluster/steps/workload`` keys, in the order to measure."""
    if not text:
        return list(ROWS)
    by_key = {r.key: r for r in ROWS}
    rows = []
    for key in (k.strip() for k in text.split(",") if k.strip()):
        if key not in by_key:
            raise ValueError(f"--rows: unknown row {key!r} (rows are cluster/steps/workload, "
                             f"e.g. {ROWS[0].key})")
        rows.append(by_key[key])
    return rows


def read_store(path: str) -> list[dict]:
    """The store's runs; a line cut short by a killed write is skipped."""
    if not os.path.exists(path):
        return []
    runs = []
    with open(path) as fh:
        for line in fh:
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return runs


def row_of(run: dict) -> str | None:
    """The table row a stored run belongs to: its arguments, less ``--rounds``,
    ``--json-out``, ``--version`` and ``--protocol``, are exactly that row's (None: a run of
    another shape)."""
    argv, rest = list(run.get("argv", [])), []
    while argv:
        a = argv.pop(0)
        if a in ("--rounds", "--json-out", "--version", "--protocol"):
            argv[:1] = []
        else:
            rest.append(a)
    return next((r.key for r in ROWS if r.argv(0, "")[:-4] == rest), None)


def measured_as(run: dict) -> tuple[str, int]:
    """(package version, protocol) of a stored run; runs from before protocols are 1."""
    return run.get("version", "unrecorded"), run.get("protocol", 1)


def pooled(runs: list[dict], key: str, version: str) -> tuple[tuple[str, int] | None, list[dict]]:
    """The runs of row ``key`` at ``version`` and the current ``PROTOCOL``, else at the newest
    (version, protocol) the store has for it: ``(that pair or None, its runs)``."""
    mine = [r for r in runs if row_of(r) == key]
    at = [r for r in mine if measured_as(r) == (version, PROTOCOL)]
    if at or not mine:
        return ((version, PROTOCOL) if at else None), at
    newest = measured_as(mine[-1])
    return newest, [r for r in mine if measured_as(r) == newest]


def disturbed(fits: list[dict]) -> bool:
    """Whether others took more than ``MAX_FOREIGN_CPU`` of the machine during a fit of this
    round: other processes (``foreign_cpu``) and the hypervisor's other guests (``steal_cpu``)
    together; a fit measured without a watch is not."""
    return any((f.get("foreign_cpu") or 0.0) + (f.get("steal_cpu") or 0.0) > MAX_FOREIGN_CPU
               for f in fits)


def rounds_of(runs: list[dict]) -> tuple[list[dict], int]:
    """The undisturbed rounds of ``runs`` in the order they were measured, each
    ``{"auto": fit, "ddp": fit, "tuning": record}``, and how many rounds were disturbed."""
    kept, bad = [], 0
    for run in runs:
        tuning = run.get("tuning") or []
        for i, (a, d) in enumerate(zip(run["fits"]["AutoSync autotune"],
                                       run["fits"]["Lightning DDP"])):
            if disturbed([a, d]):
                bad += 1
            else:
                kept.append({"auto": a, "ddp": d, "tuning": tuning[i] if i < len(tuning) else None})
    return kept, bad


def _pairs(rounds: list[dict], what: str) -> tuple[list[float], list[float]]:
    """(autotune, DDP) of ``rounds``, in their order."""
    return [r["auto"][what] for r in rounds], [r["ddp"][what] for r in rounds]


def decide(auto: list[float], ddp: list[float], first: int) -> dict:
    """The two-look rule on paired fit times: ``{"target": rounds the row needs, "look": the
    rounds its figure is taken on (None: not yet at a look), "verdict": "met" | "not met" |
    "undecided" (after the second look) | None, "estimate": RatioEstimate at the look, or on what there is}``."""
    from autosync_transfer.measure import paired_speedup

    conf = 1.0 - (1.0 - CONFIDENCE) / 2
    n = len(auto)
    for look in (first, LOOKS * first):
        if n < look:
            est = paired_speedup(auto, ddp, confidence=conf) if n else None
            return {"target": look, "look": None, "verdict": None, "estimate": est}
        est = paired_speedup(auto[:look], ddp[:look], confidence=conf)
        if est.low >= FLOOR:
            return {"target": look, "look": look, "verdict": "met", "estimate": est}
        if est.high < FLOOR:
            return {"target": look, "look": look, "verdict": "not met", "estimate": est}
        if look == LOOKS * first:  # the floor inside the interval: not shown either way
            return {"target": look, "look": look, "verdict": "undecided", "estimate": est}
    raise AssertionError("unreachable")


def summarize(runs: list[dict], first: int) -> dict | None:
    """One row's figures from its runs (rounds paired within each run), on the rounds of its
    deciding look (all of them while it is still measuring)."""
    from autosync_transfer.measure import paired_speedup

    rounds, bad = rounds_of(runs)
    auto, ddp = _pairs(rounds, "fit_s")
    if not auto:
        return None
    d = decide(auto, ddp, first)
    k = d["look"] or len(auto)
    late_a, late_d = _pairs(rounds, "late_step_ms")
    loss_a, loss_d = _pairs(rounds, "final_loss")
    tuning = [r["tuning"] for r in rounds][:k]
    locked = sum(1 for t in tuning if t and t.get("locked") not in (None, "torch_ddp"))
    return {"rounds": k, "decision": d, "wall": d["estimate"],
            "late": paired_speedup(late_a[:k], late_d[:k], confidence=d["estimate"].confidence),
            "fit_auto": statistics.median(auto[:k]), "fit_ddp": statistics.median(ddp[:k]),
            "locked": locked, "fits": len(tuning), "disturbed": bad,
            "loss_auto": statistics.median(loss_a[:k]), "loss_ddp": statistics.median(loss_d[:k]),
            "dates": sorted({r["date"][:10] for r in runs})}


def _ratio(est) -> str:  # noqa: ANN001 - a RatioEstimate
    return est.format() if math.isfinite(est.high) else f"{est.speedup:.3f}x [too few rounds]"


def table(runs: list[dict], version: str, rows: list[Row]) -> str:
    lines = [f"Package version {version}, protocol {PROTOCOL} (a round in which other processes "
             f"and the hypervisor's steal took more than {MAX_FOREIGN_CPU:.0%} of the machine "
             f"during a fit is measured again). Wall time of fit (proposal, tuning and switches "
             f"included) and the second half's median step, AutoSync autotune over Lightning "
             f"DDP, paired by round, t-intervals at the confidence of a look "
             f"({1 - (1 - CONFIDENCE) / 2:.3f}: the design's {CONFIDENCE:.2f} over two looks); "
             f"floor: the wall time's lower bound >= {FLOOR}.", "",
             "| row (cluster/steps/workload) | rounds (looks) | disturbed rounds, measured "
             "again | median fit, autotune / DDP | wall time vs DDP | floor | 2nd half's step "
             "vs DDP | fits that locked in a candidate | final loss, autotune / DDP | measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        at, mine = pooled(runs, row.key, version)
        s = summarize(mine, row.rounds) if mine else None
        looks = f"{row.rounds}, {LOOKS * row.rounds}"
        bad = rounds_of(mine)[1]
        watched = "" if at is None else str(bad) if at[1] >= 2 else "not watched"
        if s is None:
            what = "too disturbed" if bad >= LOOKS * row.rounds else "not measured"
            lines.append(f"| {row.key} | 0 ({looks}) | {watched} | | {what} | | | | | |")
            continue
        d = s["decision"]
        floor = d["verdict"] or ("too disturbed" if bad >= LOOKS * row.rounds else
                                 f"measuring ({s['rounds']} of {d['target']})")
        where = ", ".join(s["dates"]) + ("" if at == (version, PROTOCOL) else
                                         f" (version {at[0]}, protocol {at[1]})")
        lines.append(
            f"| {row.key} | {s['rounds']} ({looks}) | {watched} | {s['fit_auto']:.2f} / "
            f"{s['fit_ddp']:.2f} s | **{_ratio(s['wall'])}** | {floor} | {_ratio(s['late'])} | "
            f"{s['locked']} of {s['fits']} | {s['loss_auto']:.4f} / {s['loss_ddp']:.4f} | "
            f"{where} |")
    return "\n".join(lines)


def missing(runs: list[dict], row: Row, version: str) -> int:
    """Undisturbed rounds ``row`` still lacks at ``version`` and ``PROTOCOL`` under the
    two-look rule (none once its disturbed rounds reach its most rounds)."""
    rounds, bad = rounds_of([r for r in runs if row_of(r) == row.key
                             and measured_as(r) == (version, PROTOCOL)])
    if bad >= LOOKS * row.rounds:
        return 0
    auto, ddp = _pairs(rounds, "fit_s")
    return max(decide(auto, ddp, row.rounds)["target"] - len(auto), 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=None,
                    help="comma-separated cluster/steps/workload keys, measured in this order "
                         "(default: every row)")
    ap.add_argument("--store", default=STORE)
    ap.add_argument("--show", action="store_true", help="print the table, measure nothing")
    args = ap.parse_args()
    try:
        rows = parse_rows(args.rows)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    version = package_version()
    if not args.show:
        if version.endswith("+dirty") or version == "unknown":
            print(f"error: package version {version!r}: commit the package before measuring, "
                  "so the store says what code each row measured", file=sys.stderr)
            return 2
        from autosync_transfer.runtime.cpuwatch import wait_until_quiet

        # the benchmark's processes are this one's tree: their CPU is not foreign to each other
        env = {**os.environ, "AUTOSYNC_CPUWATCH_ROOT": str(os.getpid())}
        for row in rows:
            while (left := missing(read_store(args.store), row, version)) > 0:
                n = min(row.chunk, left)
                waited, share = wait_until_quiet(MAX_FOREIGN_CPU, max_wait_s=QUIET_WAIT_S)
                quiet = "" if waited < 5 else (f"; waited {waited:.0f} s for a quiet machine "
                                               f"(other processes' share {share:.0%})")
                print(f"{row.key}: {n} rounds ({left} left){quiet}", flush=True)
                rc = subprocess.run([sys.executable, os.path.join(HERE, "autotune_lightning.py"),
                                     *row.run_argv(n, args.store, version)], cwd=ROOT,
                                    env=env).returncode
                if rc != 0:
                    print(f"error: {row.key}: the benchmark exited {rc}", file=sys.stderr)
                    return rc
    print(table(read_store(args.store), version, rows if args.rows else ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
