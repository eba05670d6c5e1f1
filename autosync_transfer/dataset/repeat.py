"""Repeatability of a store's labels: a stratified subset of its strategies measured again in
interleaved rounds, and what those measurements can resolve.

A repeat file sits beside its trial store (``bert-12l-B.jsonl`` -> ``bert-12l-B.repeat.ndjson``,
a suffix the trial loader does not read) and holds, append-only, one ``plan`` line per *run*
(the strategies chosen, the shuffled order of every round, the protocol, the launcher, the
machine and the date) and one ``measurement`` line per (run, round, strategy). A run that is
started again continues where it stopped: a killed process loses at most the measurement in
flight (an interruption records nothing; a failed trial is recorded, it is data).

What the runs say:

- **resolved pairs**: a pair of strategies is resolved when the per-round ratio of their medians
  (paired by round, so drift within a run cancels) has a 95 % Student-t interval that excludes 1
  (:func:`~autosync_transfer.measure.stats.paired_speedup`) -- the interval decides, not a fixed
  percentage; pooled over several runs, every run's own mean ratio must also point its way
  (runs may measure different strategy sets, e.g. a wider run beside earlier ones: a pair is
  judged on the rounds that measured both);
- **agreement** of two runs: the share of the pairs that both resolve which they order alike;
- **noise ceiling**: the share of *all* pairs that two runs' medians order alike (what a perfect
  simulator can expect when judged against one run);
- :func:`ranking_figures`: a simulator's pairwise accuracy on all pairs and on resolved pairs,
  with their counts and the resolved figure's 95 % interval (:func:`resolved_interval`), and the
  top-1 regret of the strategy it picks, against the consensus-fastest and against the
  confidently-best (zero where the runs cannot tell the pick from the fastest).

Runs are grouped by the machine type they ran on (the plan's ``machine.processor``): labels
measured on different processors are different labels, so resolved pairs, agreement and the
consensus use the runs of one machine type (:func:`load_repeatability`'s ``processor``; by
default the type the store's own trials ran on, :data:`STORE_MACHINE`, or its metadata's
``processor`` where they do not record it, else the type of the file's first run), and
:func:`repeat_processors` lists the types.

A store collected on another machine type (a *twin*: the same sampler, seed and protocol on
another processor) keeps its folder apart; its repeat runs are found beside it, or in the
``repeats`` folders :func:`load_repeatability` is given (where the shipped store's repeat file
holds the runs of every machine type), and its own machine type picks the runs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosync_transfer._files import append_line, complete_lines
from autosync_transfer.errors import ConfigError

__all__ = ["REPEAT_SUFFIX", "MIN_ROUNDS", "FIRST_RUN", "STORE_MACHINE", "repeat_path",
           "find_repeat_file", "store_processor", "META_PROCESSOR_KEY", "stratified", "measure_run",
           "Repeatability", "load_repeatability", "repeat_processors", "run_plan",
           "ranking_figures", "resolved_interval", "repeat_evaluation", "PHYSICS_SUFFIX",
           "run_physics_dir", "measure_run_physics", "run_physics", "using_run_physics"]

REPEAT_SUFFIX = ".repeat.ndjson"
#: the folder beside a store holding the physics measured with its repeat runs
#: (``bert-12l-B.jsonl`` -> ``bert-12l-B.physics/<run>/{profiles,calibrations}``)
PHYSICS_SUFFIX = ".physics"
#: the fewest rounds that must measure both strategies of a pair for it to be resolved (a
#: paired interval needs 3)
MIN_ROUNDS = 3


def repeat_path(store_path: str | Path) -> Path:
    """The repeat file beside trial store ``store_path``."""
    p = Path(store_path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + REPEAT_SUFFIX)


def find_repeat_file(store_path: str | Path, domain: str | None = None,
                     repeats: Sequence[str | Path] = ()) -> Path | None:
    """The repeat file of trial store ``store_path``: beside it, else ``DOMAIN.repeat.ndjson`` in
    the first of the ``repeats`` folders that has one (``domain`` default: the store's name), else
    None."""
    beside = repeat_path(store_path)
    if beside.exists():
        return beside
    name = domain or Path(store_path).name.split(".")[0]
    for folder in repeats:
        candidate = Path(folder) / f"{name}{REPEAT_SUFFIX}"
        if candidate.exists():
            return candidate
    return None


#: key of a store's ``.meta.json`` naming the machine type of trials that do not record theirs
META_PROCESSOR_KEY = "processor"


def store_processor(store_path: str | Path) -> str | None:
    """The machine type (processor) the trials of store ``store_path`` ran on: the first trial
    that records one, else the store metadata's :data:`META_PROCESSOR_KEY` (stores collected
    before trials recorded it); ``None``: neither says, or no store."""
    try:
        lines, _ = complete_lines(Path(store_path), "trial store")
    except (OSError, ConfigError):
        return None
    for line in lines:
        if b'"processor"' not in line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        proc = (row.get("machine") or {}).get("processor") if isinstance(row, dict) else None
        if proc:
            return str(proc)
    from autosync_transfer.dataset.loader import file_meta

    try:
        proc = file_meta(store_path).get(META_PROCESSOR_KEY)
    except (OSError, ConfigError):
        return None
    return proc if isinstance(proc, str) and proc else None


def stratified(runtimes: Mapping[str, float], n: int) -> list[str]:
    """``n`` strategy ids spanning the range of ``runtimes`` (id -> label): evenly spaced ranks
    of the sorted labels, the fastest and the slowest included (all of them when there are no
    more than ``n``)."""
    ids = sorted(runtimes, key=lambda k: (runtimes[k], k))
    if n <= 0:
        raise ConfigError(f"n must be at least 1, got {n}")
    if len(ids) <= n:
        return ids
    if n == 1:
        return [ids[0]]
    picks = sorted({round(i * (len(ids) - 1) / (n - 1)) for i in range(n)})
    return [ids[i] for i in picks]


def _disturbed(row: Mapping[str, Any]) -> bool:
    """A measurement that foreign CPU load disturbed on every attempt (measured again when the
    run continues; never a label)."""
    return bool((row.get("cpu") or {}).get("disturbed"))


def _rows(path: Path) -> list[dict[str, Any]]:
    lines, _ = complete_lines(path, "repeat file")
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("kind") in ("plan", "measurement"):
            out.append(row)
    return out


def measure_run(store_path: str | Path, domain: Any, *, run: str, n: int = 30,
                rounds: int = 3, seed: int = 0, launcher: str = "emulated",
                max_foreign_cpu: float | None = None,
                progress: Callable[[str], None] | None = None) -> Path:
    """Measure (or continue measuring) repeat run ``run`` of ``domain``'s store (a
    :class:`~autosync_transfer.domains.domain.Domain`, or its name: the catalog's or the one the
    store describes): ``n``
    stratified strategies, ``rounds`` rounds, each round in its own shuffled order (seeded by
    ``seed`` and ``run``), with the store's protocol on a persistent worker pool. Returns the
    repeat file. A trial disturbed by foreign CPU load is measured again when the machine is
    quiet (as collection does)."""
    from autosync_transfer.dataset.collect import MAX_FOREIGN_CPU, measure_undisturbed
    from autosync_transfer.dataset.loader import find_domain, load_trials, strategy_table
    from autosync_transfer.dataset.store import machine_info, utc_now
    from autosync_transfer.runtime.trial import Protocol, WorkerPool

    store_path = Path(store_path)
    if isinstance(domain, str):
        domain = find_domain(domain, store_path)
    domain_name = domain.name
    out = repeat_path(store_path)
    say = progress or (lambda _msg: None)
    rows = _rows(out)
    plan = next((r for r in rows if r["kind"] == "plan" and r["run"] == run), None)
    df = load_trials(store_path, domain=domain_name)
    table = strategy_table(df)
    by_id = dict(zip(table["strategy_id"], table["strategy"]))
    if plan is None:
        if not len(table):
            raise ConfigError(f"domain: no measured strategies of {domain_name!r} in {store_path}")
        protocols = df["protocol"].value_counts()
        proto = json.loads(protocols.index[0])
        chosen = stratified(dict(zip(table["strategy_id"], table["runtime_s"])), n)
        rng = random.Random(f"{seed}|{run}")
        orders = [rng.sample(chosen, len(chosen)) for _ in range(rounds)]
        plan = {"kind": "plan", "run": run, "domain": domain_name, "strategy_ids": chosen,
                "orders": orders, "protocol": proto, "launcher": launcher, "seed": seed,
                "created": utc_now(), "machine": machine_info()}
        append_line(out, json.dumps(plan, sort_keys=True), "repeat file")
    here = machine_info().get("processor")
    if _processor(plan) is not None and _processor(plan) != here:
        raise ConfigError(f"run: {run!r} was measured on {_processor(plan)!r}, this machine is "
                          f"{here!r}: labels of two machine types do not mix; start a new run")
    missing = [s for s in plan["strategy_ids"] if s not in by_id]
    if missing:
        raise ConfigError(f"run: {run!r} plans strategy {missing[0]!r}, which the store no longer has")
    done = {(r["round"], r["strategy_id"]) for r in rows
            if r["kind"] == "measurement" and r["run"] == run and not _disturbed(r)}
    todo = [(k, sid) for k, order in enumerate(plan["orders"]) for sid in order
            if (k, sid) not in done]
    if not todo:
        return out
    proto = Protocol(**plan["protocol"])
    limit = MAX_FOREIGN_CPU if max_foreign_cpu is None else max_foreign_cpu
    with WorkerPool(domain, plan["launcher"], proto) as pool:
        for i, (k, sid) in enumerate(todo):
            t0, started = time.monotonic(), utc_now()
            res, start, facts = measure_undisturbed(pool, by_id[sid], limit)
            row = {"kind": "measurement", "run": run, "round": k, "strategy_id": sid,
                   "status": res.status, "median_s": res.median_s,
                   "iteration_times_s": [round(t, 6) for t in res.iteration_times_s],
                   "error": res.error[:500], "wall_s": round(time.monotonic() - t0, 3),
                   "started": started, "machine": start,
                   "cpu": facts}
            append_line(out, json.dumps(row, sort_keys=True), "repeat file")
            say(f"{domain_name} {run} round {k} {sid}: {res.status} "
                f"{'' if res.median_s is None else f'{res.median_s:.4f} s'} "
                f"({len(done) + i + 1}/{len(done) + len(todo)})")
    return out


def run_physics_dir(store_path: str | Path, run: str) -> Path:
    """The folder of the physics measured with repeat run ``run`` of store ``store_path``."""
    p = Path(store_path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + PHYSICS_SUFFIX) / run


def run_physics(store_path: str | Path, domain: Any, run: str,
                repeats: Sequence[str | Path] = ()) -> tuple[Any, Any] | None:
    """``(profile, calibration)`` measured with repeat run ``run`` of ``domain`` (a
    :class:`~autosync_transfer.domains.domain.Domain`): its model's profile and its cluster's
    newest calibration in the physics folder beside the repeat file the run is read from
    (:func:`find_repeat_file`: beside the store, else ``DOMAIN.repeat.ndjson`` in the first of the
    ``repeats`` folders that has one; the physics in ``DOMAIN.physics/<run>`` there), or None
    where the run has none, has only part of it, or has physics of another machine type than
    its plan records (labels and physics of two machine types never mix)."""
    from autosync_transfer.domains.physics import find_calibration, find_profile

    path = find_repeat_file(store_path, domain.name, repeats)
    if path is None:
        return None
    d = path.with_name(path.name[: -len(REPEAT_SUFFIX)] + PHYSICS_SUFFIX) / run
    if not d.is_dir():
        return None
    prof = find_profile(domain.model.fingerprint, folder=d / "profiles")
    cal = find_calibration(domain.cluster.fingerprint, folder=d / "calibrations")
    if prof is None or cal is None:
        return None
    plan = next((p for p in _plans(_rows(path), domain.name) if p["run"] == run), None)
    here = _processor(plan) if plan is not None else None
    if here is not None and any(x is not None and x != here
                                for x in (prof.processor, cal.processor)):
        return None
    return prof, cal


@contextlib.contextmanager
def using_run_physics(store_path: str | Path, domain: Any, run: str,
                      repeats: Sequence[str | Path] = ()) -> Iterator[tuple[Any, Any]]:
    """Within the block, the physics lookup
    (:func:`~autosync_transfer.rankers.physics.measured_physics`: every featurizer, training
    data module and step-time simulator not given physics explicitly) finds, for ``domain``'s
    model and cluster, the physics measured with repeat run ``run`` (:func:`run_physics`),
    whatever launcher is asked for; every other domain, even of the same model or cluster, finds
    what it found before (:func:`~autosync_transfer.rankers.physics.physics_override`). Yields
    ``(profile, calibration)``; a run without (complete) physics of its machine type is a
    :class:`ConfigError`."""
    from autosync_transfer.rankers.physics import physics_override

    found = run_physics(store_path, domain, run, repeats)
    if found is None:
        raise ConfigError(f"run: {run!r} of {domain.name} has no complete physics of its "
                          f"machine type (benchmarks/repeatability.py --physics measures it)")
    with physics_override(domain, *found):
        yield found


def measure_run_physics(store_path: str | Path, domain: Any, run: str, *,
                        launcher: str = "emulated",
                        progress: Callable[[str], None] | None = None) -> Path:
    """Measure the physics of ``domain`` on this machine for repeat run ``run``: a calibration of
    its cluster (through ``launcher``) and a profile of its model (one worker thread, as trial
    workers run), written to :func:`run_physics_dir` -- the step-time simulator's input measured on
    the machine, and at the hour, of the labels it is judged by. Call it before the run's first
    round: a new run (no plan yet) gets both measured afresh (what an attempt that stopped before
    its first round left is replaced), a run that has started keeps the physics it started with
    (continued on another day), and a run that started without complete physics, or on another
    machine type, is refused (:class:`ConfigError`): physics measured now would not be of its
    hour or its machine. Returns the folder."""
    import shutil

    from autosync_transfer.dataset.store import machine_info
    from autosync_transfer.domains.physics import find_calibration, find_profile
    from autosync_transfer.domains.workload import load_workload
    from autosync_transfer.runtime.calibrate import get_calibration
    from autosync_transfer.runtime.profile import get_profile

    store_path = Path(store_path)
    if isinstance(domain, str):
        from autosync_transfer.dataset.loader import find_domain

        domain = find_domain(domain, store_path)
    d = run_physics_dir(store_path, run)
    say = progress or (lambda _msg: None)
    cal_dir, prof_dir = d / "calibrations", d / "profiles"
    plan = run_plan(store_path, domain.name, run)
    if plan is not None:
        here = machine_info().get("processor")
        if _processor(plan) is not None and _processor(plan) != here:
            raise ConfigError(f"run: {run!r} was measured on {_processor(plan)!r}, this machine "
                              f"is {here!r}: labels of two machine types do not mix; start a "
                              f"new run")
        if (find_calibration(domain.cluster.fingerprint, folder=cal_dir) is None
                or find_profile(domain.model.fingerprint, folder=prof_dir) is None):
            raise ConfigError(f"run: {run!r} of {domain.name} was started without complete "
                              f"physics; physics measured now would not be of its hour (start "
                              f"a new run)")
        return d
    if d.exists():
        shutil.rmtree(d)
    cal_dir.mkdir(parents=True, exist_ok=True)
    prof_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    get_calibration(domain.cluster, launcher, force=True, folder=cal_dir)
    say(f"{domain.name} {run}: calibrated {domain.cluster.name} in "
        f"{time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    get_profile(load_workload(f"zoo:{domain.model.name}"), threads=1, force=True,
                folder=prof_dir)
    say(f"{domain.name} {run}: profiled {domain.model.name} in "
        f"{time.monotonic() - t0:.1f} s")
    return d


@dataclass
class Repeatability:
    """The repeat runs of one domain on one machine type: ``levels[run][strategy_id][round]`` =
    the trial median (ok trials only), ``plans[run]`` the plan line, ``wall_s[run]`` the machine
    time spent."""

    domain: str
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def processor(self) -> str | None:
        """The machine type these runs ran on (``None``: not recorded)."""
        first = next(iter(self.plans.values()), None)
        return _processor(first) if first is not None else None
    levels: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)

    @property
    def runs(self) -> list[str]:
        return list(self.plans)

    def complete_runs(self) -> list[str]:
        """Runs with every planned measurement recorded."""
        out = []
        for run, plan in self.plans.items():
            want = len(plan["strategy_ids"]) * len(plan["orders"])
            got = sum(len(v) for v in self.levels.get(run, {}).values()) + self.failed.get(run, 0)
            if got >= want:
                out.append(run)
        return out

    def strategy_ids(self, runs: Sequence[str] | None = None) -> list[str]:
        """The strategies the runs of ``runs`` (default: all) can compare: those that every
        complete run planning them measured (a strategy whose every measurement in one run
        failed is left out, as a store's failed trial has no time), where runs of different strategy sets
        overlap (a wider run beside earlier ones); a strategy whose rounds share no strategy
        with the rest (runs of disjoint sets) cannot be put on their scale, and only the largest
        such group counts."""
        return sorted(self._rounds(list(runs or self.runs)))

    def _rounds(self, runs: Sequence[str]) -> dict[str, dict[tuple[str, int], float]]:
        """strategy -> {(run, round): median} over ``runs``, for the strategies they can
        compare (:meth:`strategy_ids`): a pair is then judged on the rounds both were measured
        in."""
        series: dict[str, dict[tuple[str, int], float]] = {}
        for run in runs:
            for s, by_round in self.levels.get(run, {}).items():
                series.setdefault(s, {}).update({(run, k): v for k, v in by_round.items()})
        # a complete run that planned a strategy and has no time for it failed it; a run still
        # measuring may not have reached it yet
        done = set(self.complete_runs())
        planned = {run: set(self.plans[run]["strategy_ids"]) for run in runs
                   if run in self.plans and run in done}
        series = {s: v for s, v in series.items()
                  if all(s in self.levels.get(run, {}) for run, ids in planned.items() if s in ids)}
        keep = _largest_linked(series)
        return {s: series[s] for s in sorted(keep)}

    def comparable_pairs(self, runs: Sequence[str] | None = None) -> int:
        """How many pairs of :meth:`strategy_ids` share at least :data:`MIN_ROUNDS` rounds (the
        pairs :meth:`resolved` can resolve: all of them where every run measured the same
        strategies)."""
        series = self._rounds(list(runs or self.runs))
        return sum(len(series[a].keys() & series[b].keys()) >= MIN_ROUNDS
                   for a, b in itertools.combinations(sorted(series), 2))

    def resolved(self, runs: Sequence[str] | None = None, *, confidence: float = 0.95
                 ) -> dict[tuple[str, str], int]:
        """Resolved pairs over the rounds of ``runs`` (default: all): ``(a, b)`` with ``a < b``
        -> +1 when ``a`` is faster with confidence, -1 when ``b`` is.

        Over several runs the rounds are pooled, and a pair also needs every run's own mean log
        ratio on the interval's side: a run that orders it the other way (a strategy that the
        machine's state between runs favours) leaves it unresolved, however narrow the pooled
        interval."""
        from autosync_transfer.measure.stats import paired_speedup

        series = self._rounds(list(runs or self.runs))
        out: dict[tuple[str, str], int] = {}
        for a, b in itertools.combinations(sorted(series), 2):
            both = sorted(set(series[a]) & set(series[b]))
            if len(both) < MIN_ROUNDS:
                continue
            est = paired_speedup([series[a][k] for k in both], [series[b][k] for k in both],
                                 confidence=confidence)
            sign = 1 if est.low > 1.0 else -1 if est.high < 1.0 else 0
            if sign and not _runs_agree(series[a], series[b], both, sign):
                sign = 0
            if sign:
                out[(a, b)] = sign
        return out

    def consensus(self, runs: Sequence[str] | None = None) -> dict[str, float]:
        """strategy -> its label over ``runs``: log medians fitted as strategy + round effects
        (an additive two-way fit over the measured cells, so drift between rounds cancels and a
        missing measurement does not drop a round), in seconds at the overall level."""
        series = self._rounds(list(runs or self.runs))
        if not series:
            return {}
        ids = sorted(series)
        cells = sorted({k for s in ids for k in series[s]})
        col = {k: j for j, k in enumerate(cells)}
        obs = [(i, col[k], math.log(v)) for i, s in enumerate(ids) for k, v in series[s].items()]
        # least squares of log median = strategy effect + round effect, solved exactly (the
        # strategies are linked through shared rounds, so only a common shift is free); the
        # round effects are then set to average 0, so a label is a strategy's level averaged
        # over the rounds (with every strategy in every round: the mean of its log medians)
        design = np.zeros((len(obs), len(ids) + len(cells)))
        for r, (i, j, _) in enumerate(obs):
            design[r, i] = design[r, len(ids) + j] = 1.0
        coef = np.linalg.lstsq(design, np.array([y for _, _, y in obs]), rcond=None)[0]
        a = coef[:len(ids)] + float(np.mean(coef[len(ids):]))
        return {s: float(math.exp(a[i])) for i, s in enumerate(ids)}

    def agreement(self, run_a: str, run_b: str) -> tuple[float, int]:
        """(share of the pairs both runs resolve that they order alike, how many pairs)."""
        ra, rb = self.resolved([run_a]), self.resolved([run_b])
        both = set(ra) & set(rb)
        if not both:
            return math.nan, 0
        return sum(ra[p] == rb[p] for p in both) / len(both), len(both)

    def noise_ceiling(self, run_a: str, run_b: str) -> tuple[float, int]:
        """(share of all pairs that the two runs' labels order alike, how many pairs)."""
        ca, cb = self.consensus([run_a]), self.consensus([run_b])
        ids = sorted(set(ca) & set(cb))
        pairs = list(itertools.combinations(ids, 2))
        if not pairs:
            return math.nan, 0
        same = sum((ca[a] < ca[b]) == (cb[a] < cb[b]) for a, b in pairs)
        return same / len(pairs), len(pairs)

    def summary(self) -> dict[str, Any]:
        """Runs, rounds, strategies, resolved pairs, the agreement and noise ceiling of the first
        two complete runs, and the machine time spent."""
        runs = self.complete_runs()
        out: dict[str, Any] = {
            "domain": self.domain, "runs": self.runs, "complete_runs": runs,
            "strategies": len(self.strategy_ids(runs)) if runs else 0,
            "rounds": sum(len(self.plans[r]["orders"]) for r in runs),
            "machine_s": round(sum(self.wall_s.values()), 1),
            "dates": {r: self.plans[r].get("created") for r in self.runs},
            "protocol": next(iter(self.plans.values()))["protocol"] if self.plans else None,
            "processor": self.processor,
        }
        if runs:
            res = self.resolved(runs)
            out["pairs"] = self.comparable_pairs(runs)
            out["resolved_pairs"] = len(res)
            kept = set(self.strategy_ids(runs))
            out["run_strategies"] = {r: len(self.levels.get(r, {}).keys() & kept) for r in runs}
        if len(runs) >= 2:
            out["agreements"] = []
            for a, b in itertools.combinations(runs, 2):
                agree, both = self.agreement(a, b)
                out["agreements"].append({"runs": [a, b], "agreement": agree if both else None,
                                          "both_resolved": both})
            ceiling, pairs = self.noise_ceiling(runs[0], runs[1])
            first = out["agreements"][0]
            out.update(agreement=first["agreement"], both_resolved=first["both_resolved"],
                       noise_ceiling=ceiling if pairs else None, ceiling_pairs=pairs)
        return out


def _largest_linked(series: Mapping[str, Mapping[tuple[str, int], float]]) -> set[str]:
    """The largest set of strategies linked through shared rounds (two strategies are linked
    when one round measured both; ties: the group with the first strategy id)."""
    by_cell: dict[tuple[str, int], list[str]] = {}
    for s, cells in series.items():
        for k in cells:
            by_cell.setdefault(k, []).append(s)
    seen: set[str] = set()
    best: set[str] = set()
    for start in sorted(series):
        if start in seen:
            continue
        group, todo = {start}, [start]
        while todo:
            for k in series[todo.pop()]:
                for other in by_cell[k]:
                    if other not in group:
                        group.add(other)
                        todo.append(other)
        seen |= group
        if len(group) > len(best):
            best = group
    return best


def _runs_agree(a: Mapping[tuple[str, int], float], b: Mapping[tuple[str, int], float],
                cells: Sequence[tuple[str, int]], sign: int) -> bool:
    """Whether every run among ``cells`` orders ``a`` against ``b`` as ``sign`` does (+1: ``a``
    faster) by its own mean log ratio of ``b`` over ``a`` (a run with a zero mean agrees)."""
    per_run: dict[str, list[float]] = {}
    for k in cells:
        per_run.setdefault(k[0], []).append(math.log(b[k] / a[k]))
    return all(sign * sum(v) >= 0.0 for v in per_run.values())


def _processor(plan: Mapping[str, Any]) -> str | None:
    return (plan.get("machine") or {}).get("processor")


def _plans(rows: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """The first plan line of every run of domain ``name``, in file order."""
    seen: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if r["kind"] == "plan" and r.get("domain", name) == name:
            seen.setdefault(r["run"], r)
    return list(seen.values())


def repeat_processors(store_path: str | Path, domain: str | None = None,
                      repeats: Sequence[str | Path] = ()) -> list[str | None]:
    """The machine types (processors) the repeat runs of ``store_path`` ran on (its repeat file:
    :func:`find_repeat_file`, beside it, else in the ``repeats`` folders), in the order of their
    first run (``None``: a run that did not record it)."""
    path = find_repeat_file(store_path, domain, repeats)
    if path is None:
        return []
    name = domain or Path(store_path).name.split(".")[0]
    return list(dict.fromkeys(_processor(p) for p in _plans(_rows(path), name)))


def run_plan(store_path: str | Path, domain: str, run: str) -> Mapping[str, Any] | None:
    """The plan line of repeat run ``run`` of ``domain`` beside ``store_path`` (its strategies,
    rounds, protocol, machine), or None where the run has not started."""
    return next((p for p in _plans(_rows(repeat_path(store_path)), domain) if p["run"] == run),
                None)


#: ``processor`` of :func:`load_repeatability`: the machine type of the file's first run
FIRST_RUN: Any = object()
#: ``processor`` of :func:`load_repeatability`: the machine type the store's own trials ran on
#: (:func:`store_processor`), else :data:`FIRST_RUN`'s
STORE_MACHINE: Any = object()


def load_repeatability(store_path: str | Path, domain: str | None = None, *,
                       processor: str | None | Any = STORE_MACHINE,
                       repeats: Sequence[str | Path] = ()) -> Repeatability | None:
    """The repeat runs of ``store_path`` (beside it, else in the ``repeats`` folders:
    :func:`find_repeat_file`; of ``domain``, default: the store's name) measured on ``processor``
    (default :data:`STORE_MACHINE`: the machine type the store's trials ran on, else the type of
    the file's first run; :data:`FIRST_RUN`: the file's first run's; ``None``: the runs that did
    not record theirs), or None when there are none."""
    path = find_repeat_file(store_path, domain, repeats)
    if path is None:
        return None
    if processor is STORE_MACHINE:
        processor = store_processor(store_path) or FIRST_RUN
    rows = _rows(path)
    name = domain or Path(store_path).name.split(".")[0]
    rep = Repeatability(domain=name)
    plans = _plans(rows, name)
    if not plans:
        return None
    want = _processor(plans[0]) if processor is FIRST_RUN else processor
    for plan in plans:
        if _processor(plan) == want:
            rep.plans[plan["run"]] = dict(plan)
    for r in rows:
        if r["kind"] != "measurement" or r["run"] not in rep.plans:
            continue
        rep.wall_s[r["run"]] = rep.wall_s.get(r["run"], 0.0) + float(r.get("wall_s") or 0.0)
        if _disturbed(r):
            continue
        if r.get("status") == "ok" and r.get("median_s"):
            rep.levels.setdefault(r["run"], {}).setdefault(r["strategy_id"], {})[
                int(r["round"])] = float(r["median_s"])
        else:
            rep.failed[r["run"]] = rep.failed.get(r["run"], 0) + 1
    return rep if rep.plans else None


def ranking_figures(predicted: Mapping[str, float], rep: Repeatability,
                    runs: Sequence[str] | None = None,
                    groups: Mapping[str, int] | None = None) -> dict[str, Any]:
    """How a simulator's ``predicted`` times (strategy id -> seconds, lower is faster) order the
    re-measured strategies: pairwise accuracy on all pairs (against the repeat runs' consensus
    labels) and on resolved pairs, each with its count, and the top-1 regret of its pick:

    - ``top1_regret``: the consensus time of the strategy it predicts fastest over the
      consensus-fastest one's, minus 1 (a point estimate: a pick a few per cent slower may be a
      pick the runs cannot tell from the fastest);
    - ``top1_regret_resolved``: the regret against the confidently-best strategy, that is
      ``top1_regret`` where the runs resolve the pick slower than the consensus-fastest, and 0
      where they cannot tell the two apart (``pick_resolved_slower`` says which);
    - ``pairwise_resolved_low`` / ``pairwise_resolved_high``: the 95 % interval of
      ``pairwise_resolved`` over the strategies that could have been re-measured
      (:func:`resolved_interval`).

    ``groups`` (strategy id -> fold): ``predicted`` holds the scores of several simulators, each
    trained without its fold (a cross-validation), so a pair counts only within one fold, and
    the pick, one simulator's, is undefined (the regrets are nan)."""
    runs = list(runs or rep.complete_runs() or rep.runs)
    labels = rep.consensus(runs)
    ids = sorted(set(labels) & set(predicted))
    if groups is not None:
        ids = [s for s in ids if s in groups]
    if len(ids) < 2:
        return {"pairs": 0, "pairwise": math.nan, "resolved_pairs": 0,
                "pairwise_resolved": math.nan, "pairwise_resolved_low": math.nan,
                "pairwise_resolved_high": math.nan,
                "top1_regret": math.nan, "top1_regret_resolved": math.nan}
    pairs = list(itertools.combinations(ids, 2))
    if groups is not None:
        pairs = [(a, b) for a, b in pairs if groups[a] == groups[b]]
    right = sum((predicted[a] < predicted[b]) == (labels[a] < labels[b]) for a, b in pairs)
    every = rep.resolved(runs)
    kept = set(ids)
    resolved = {p: s for p, s in every.items() if p[0] in kept and p[1] in kept
                and (groups is None or groups[p[0]] == groups[p[1]])}
    right_res = sum((predicted[a] < predicted[b]) == (s > 0) for (a, b), s in resolved.items())
    figures = {"pairs": len(pairs), "pairwise": right / len(pairs) if pairs else math.nan,
               "resolved_pairs": len(resolved),
               "pairwise_resolved": right_res / len(resolved) if resolved else math.nan,
               **dict(zip(("pairwise_resolved_low", "pairwise_resolved_high"),
                          resolved_interval(predicted, resolved)))}
    if groups is not None:
        return {**figures, "top1_regret": math.nan, "top1_regret_resolved": math.nan}
    pick = min(ids, key=lambda s: (predicted[s], s))
    best = min(ids, key=lambda s: (labels[s], s))
    regret = labels[pick] / labels[best] - 1.0
    first, second = sorted((pick, best))
    sign = every.get((first, second), 0) if pick != best else 0
    slower = sign == (1 if first == best else -1)
    return {**figures, "top1_regret": regret, "top1_regret_resolved": regret if slower else 0.0,
            "pick_resolved_slower": slower, "pick": pick, "best": best}


def resolved_interval(predicted: Mapping[str, float], resolved: Mapping[tuple[str, str], int],
                      *, baseline: Mapping[str, float] | None = None, confidence: float = 0.95,
                      n_resamples: int = 999, seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of the share of ``resolved`` pairs (``(a, b)`` -> +1 where
    ``a`` is confidently faster, -1 where ``b`` is) that ``predicted`` (strategy id -> seconds)
    orders their way; with ``baseline`` (another simulator's predictions), of that share minus
    the baseline's on the same pairs (paired: what one simulator adds over the other). A
    percentile bootstrap over strategies (:func:`scipy.stats.bootstrap`; the pairs of one
    strategy are not independent, so the strategy is the unit, as the re-measured subset is a
    sample of the store's strategies). ``(nan, nan)`` with no resolved pair or fewer than 3
    strategies in them; the point estimate at both ends where every resample gives it."""
    from scipy.stats import bootstrap

    ids = sorted({s for pair in resolved for s in pair})
    if len(ids) < 3:
        return math.nan, math.nan
    at = {s: i for i, s in enumerate(ids)}
    n = len(ids)
    right = np.zeros((n, n))
    counted = np.zeros((n, n))
    for (a, b), sign in resolved.items():
        i, j = at[a], at[b]
        ok = float((predicted[a] < predicted[b]) == (sign > 0))
        if baseline is not None:
            ok -= float((baseline[a] < baseline[b]) == (sign > 0))
        right[i, j] = right[j, i] = ok
        counted[i, j] = counted[j, i] = 1.0
    point = float(right.sum() / counted.sum())

    def stat(idx: np.ndarray) -> float:
        # both symmetric with a zero diagonal: a strategy drawn twice pairs with itself nowhere
        idx = idx.astype(int)
        c = counted[np.ix_(idx, idx)].sum()
        return float(right[np.ix_(idx, idx)].sum() / c) if c else point

    res = bootstrap((np.arange(n, dtype=np.float64),), stat, n_resamples=n_resamples,
                    vectorized=False, confidence_level=confidence, method="percentile",
                    rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # a degenerate resample distribution
        return point, point
    return low, high


def repeat_evaluation(simulator: Any, domain: Any, trials: Any = None, *,
                      exclude: Sequence[str] = (), processor: str | None | Any = STORE_MACHINE
                      ) -> dict[str, Any] | None:
    """``simulator`` (anything with ``score(strategies, domain)``) on ``domain``'s re-measured
    strategies other than ``exclude`` (e.g. the shots it was adapted on): :func:`ranking_figures`
    against the repeat runs found beside the trial stores of ``trials`` (default: the shipped
    datasets) on machine type ``processor`` (as :func:`load_repeatability` takes it), or None
    when no store of the domain has complete repeat runs."""
    from autosync_transfer.dataset.loader import dataset_files, load_trials, strategy_table

    for f in dataset_files(trials):
        if f.suffix != ".jsonl" or f.stem != domain.name:
            continue
        rep = load_repeatability(f, domain.name, processor=processor)
        if rep is None or not rep.complete_runs():
            continue
        table = strategy_table(load_trials(f, domain=domain.name))
        held = set(rep.strategy_ids(rep.complete_runs())) - set(exclude)
        sub = table[table["strategy_id"].isin(held)]
        if len(sub) < 2:
            return None
        scores = simulator.score(list(sub["strategy"]), domain)
        return {**ranking_figures(dict(zip(sub["strategy_id"], map(float, scores))), rep),
                "strategies": len(sub), "store": str(f)}
    return None
