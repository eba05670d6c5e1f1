"""Randomized multiple interleaved trials: the one way the project compares configurations.

Candidates run in rounds; each round runs one block of steps of every candidate still in the
pool, in an order shuffled per round, so a drifting machine slows all of them alike. A block's
warm-up (a switch, a cold cache) is detected from its steps and dropped; the leading rounds of a
comparison that sit above the later level (the job or the machine still warming up) are dropped
too. Against the named baseline each candidate gets a speed-up paired by round with a bootstrap
interval and a :class:`~autosync_transfer.measure.stats.Verdict`.

The sequential rule: the verdicts are looked at after ``min_rounds`` rounds and every
``look_every`` rounds after that, up to ``max_rounds``; each look uses the confidence
``1 - (1 - confidence) / looks`` (Bonferroni over the planned looks), so stopping as soon as
everything is decided keeps the overall false-positive rate within ``1 - confidence``. With
``race=True`` a decided candidate leaves the pool (its figures stay those of its last look);
the baseline never leaves. Nothing is re-run: a comparison that ends undecided says so.

Use :func:`compare` with a callable that times one block of a candidate, or drive an
:class:`Interleaved` by hand where the caller owns the loop (the in-job autotuner: the job's own
steps are the blocks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosync_transfer.errors import ConfigError
from autosync_transfer.measure.stats import (RatioEstimate, Verdict, block_level, detect_warmup,
                                             paired_speedup, verdict_for)

__all__ = ["Design", "CandidateResult", "Comparison", "Interleaved", "compare"]


@dataclass(frozen=True)
class Design:
    """How a comparison runs and decides.

    Args:
        baseline: the candidate every other is compared with.
        min_rounds: rounds before the first look (at least 3).
        max_rounds: the budget of rounds.
        look_every: rounds between looks after the first.
        margin: equivalence margin: an interval within ``[1/(1+margin), 1+margin]`` is
            "equivalent".
        confidence: overall confidence of the verdicts (and of the reported intervals).
        race: decided candidates leave the pool at a look.
        method: the interval on paired log-ratios: ``"t"`` (Student's t) or ``"bootstrap"``
            (BCa; undercovers at few rounds).
        n_resamples: bootstrap resamples per interval.
        seed: the shuffles' and the bootstrap's randomness.
    """

    baseline: str
    min_rounds: int = 6
    max_rounds: int = 20
    look_every: int = 2
    margin: float = 0.02
    confidence: float = 0.95
    race: bool = True
    method: str = "t"
    n_resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_rounds < 3:
            raise ConfigError(f"min_rounds must be >= 3, got {self.min_rounds}")
        if self.max_rounds < self.min_rounds:
            raise ConfigError(f"max_rounds must be >= min_rounds ({self.min_rounds}), got "
                              f"{self.max_rounds}")
        if self.look_every < 1:
            raise ConfigError(f"look_every must be >= 1, got {self.look_every}")
        if not 0.0 <= self.margin < 1.0:
            raise ConfigError(f"margin must be in [0, 1), got {self.margin}")
        if self.method not in ("t", "bootstrap"):
            raise ConfigError(f"method must be 't' or 'bootstrap', got {self.method!r}")
        if not 0.5 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0.5, 1), got {self.confidence}")

    @property
    def looks(self) -> list[int]:
        """The rounds after which verdicts are looked at."""
        out = list(range(self.min_rounds, self.max_rounds + 1, self.look_every))
        if out[-1] != self.max_rounds:
            out.append(self.max_rounds)
        return out

    @property
    def look_confidence(self) -> float:
        return 1.0 - (1.0 - self.confidence) / len(self.looks)


@dataclass(frozen=True)
class CandidateResult:
    """One candidate's figures: the median of its block levels (seconds per step), its
    speed-up over the baseline with the reported (``confidence``) interval, the verdict of the
    sequential rule, and what it cost."""

    name: str
    median_s: float
    rounds: int
    verdict: Verdict
    speedup: RatioEstimate | None
    warmup_steps: int
    steps: int

    def format(self) -> str:
        if self.speedup is None:
            return f"{self.name}: {1000 * self.median_s:.2f} ms/step (baseline), {self.rounds} rounds"
        return (f"{self.name}: {1000 * self.median_s:.2f} ms/step, {self.speedup.format()} vs "
                f"baseline, {self.verdict.value}, {self.rounds} rounds")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "median_s": self.median_s, "rounds": self.rounds,
                             "verdict": self.verdict.value, "warmup_steps": self.warmup_steps,
                             "steps": self.steps}
        if self.speedup is not None:
            d.update(speedup=self.speedup.speedup, low=self.speedup.low, high=self.speedup.high,
                     confidence=self.speedup.confidence)
        return d


@dataclass(frozen=True)
class Comparison:
    """The outcome of a comparison: per candidate figures, rounds run and dropped as warm-up."""

    baseline: str
    candidates: dict[str, CandidateResult]
    rounds: int
    warmup_rounds: int
    design: Design

    def best(self) -> str:
        """The candidate confidently faster than the baseline with the largest speed-up, or the
        baseline when none is."""
        faster = [c for c in self.candidates.values() if c.verdict is Verdict.FASTER]
        if not faster:
            return self.baseline
        return max(faster, key=lambda c: c.speedup.speedup if c.speedup else 0.0).name

    def __getitem__(self, name: str) -> CandidateResult:
        return self.candidates[name]

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "rounds": self.rounds,
                "warmup_rounds": self.warmup_rounds, "confidence": self.design.confidence,
                "margin": self.design.margin,
                "candidates": [c.to_dict() for c in self.candidates.values()]}

    def format(self) -> str:
        return "\n".join(c.format() for c in self.candidates.values())


@dataclass
class Interleaved:
    """The state of one interleaved comparison, driven by its caller:
    ``for order in iter(cmp.next_round, None): for name in order: cmp.record(name, times)``."""

    names: Sequence[str]
    design: Design
    _blocks: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    _active: list[str] = field(default_factory=list)
    _round: int = 0
    _order: list[str] = field(default_factory=list)
    _decided: dict[str, CandidateResult] = field(default_factory=dict)
    _done: bool = False
    _log: list[tuple[int, str]] = field(default_factory=list)
    _level: dict[str, dict[int, tuple[float, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = list(self.names)
        if len(set(names)) != len(names):
            raise ConfigError(f"candidate names must be unique, got {names}")
        if self.design.baseline not in names:
            raise ConfigError(f"the baseline {self.design.baseline!r} is not among the "
                              f"candidates {names}")
        if len(names) < 2:
            raise ConfigError(f"a comparison needs at least 2 candidates, got {names}")
        self.names = names
        self._blocks = {n: {} for n in names}
        self._level = {n: {} for n in names}
        self._active = list(names)
        self._rng = np.random.default_rng(self.design.seed)

    @property
    def rounds(self) -> int:
        """Complete rounds recorded."""
        return self._round

    @property
    def done(self) -> bool:
        return self._done

    @property
    def active(self) -> list[str]:
        return list(self._active)

    def next_round(self) -> list[str] | None:
        """The shuffled order of the next round's blocks; ``None`` when the comparison is over
        (decided or out of budget). Every block of the previous round must be recorded."""
        if self._order:
            raise ConfigError(f"round {self._round + 1} still waits for "
                              f"{', '.join(self._order)}")
        if self._done:
            return None
        order = list(self._active)
        self._rng.shuffle(order)
        self._order = order
        return list(order)

    def stop(self) -> None:
        """End the comparison now (the caller's budget ran out), between rounds or within one
        (the blocks it leaves are not run): :meth:`next_round` returns ``None`` and
        :meth:`result`'s verdicts are those of the last planned look (``undecided`` before the
        first), so stopping adds no look; the reported intervals still cover every block
        recorded, so an undecided candidate's may exclude 1."""
        self._order = []
        self._done = True

    def drop(self, name: str) -> None:
        """``name`` leaves the pool now (its caller judged it not worth its cost): it runs no
        more blocks, its verdict stays that of its last look (``undecided`` before the
        first), so dropping never makes a candidate win; the comparison is over once the
        baseline is alone (its block pending in this round is not run). A block of ``name``
        pending in this round is not run."""
        if name == self.design.baseline:
            raise ConfigError(f"the baseline {name!r} cannot leave the comparison")
        if name not in self.names:
            raise ConfigError(f"unknown candidate {name!r}")
        if name in self._active:
            self._active.remove(name)
        if name in self._order:
            self._order.remove(name)
            if not self._order:  # its block was the round's last one
                self._round += 1
                self._after_round()
        if len(self._active) < 2:  # the baseline alone: its pending block is not run
            self._order = []
            self._done = True

    def record(self, name: str, times: Sequence[float]) -> None:
        """The step times (seconds) of ``name``'s block in the current round."""
        if name not in self._order:
            raise ConfigError(f"{name!r} has no block pending in round {self._round + 1} "
                              f"(pending: {', '.join(self._order) or 'none'})")
        t = [float(v) for v in times]
        if not t or not all(math.isfinite(v) and v > 0 for v in t):
            raise ConfigError(f"block times of {name!r} must be positive and finite, got {t}")
        self._blocks[name][self._round] = t
        self._level[name][self._round] = block_level(t)
        self._log.append((self._round, name))
        self._order.remove(name)
        if not self._order:
            self._round += 1
            self._after_round()

    # -- analysis ------------------------------------------------------------------------------
    def _levels(self, upto: int | None = None
                ) -> tuple[dict[str, dict[int, float]], dict[str, int], int]:
        """Block levels, warm-up steps and the session's warm-up rounds of the rounds before
        ``upto`` (default: every block recorded)."""
        levels: dict[str, dict[int, float]] = {}
        warm: dict[str, int] = {}
        for n, blocks in self._blocks.items():
            levels[n] = {}
            warm[n] = 0
            for r in blocks:
                if upto is not None and r >= upto:
                    continue
                lv, dropped = self._level[n][r]
                levels[n][r] = lv
                warm[n] += dropped
        return levels, warm, self._session_warmup(self._round if upto is None else upto)

    def _session_warmup(self, rounds: int) -> int:
        """Leading rounds to drop of the first ``rounds``: the session's steps in the order
        they ran, each divided by its candidate's median step, smoothed; rounds up to the one
        holding the last warm step are dropped (at most a third of them)."""
        if rounds < 3:
            return 0
        # not truncated (rounds == self._round): the pending round's blocks count too
        limit = rounds if rounds < self._round else math.inf
        med = {n: float(np.median([v for r, t in b.items() if r < limit for v in t]))
               for n, b in self._blocks.items() if any(r < limit for r in b)}
        series: list[float] = []
        round_of: list[int] = []
        for r, n in self._log:
            if r >= rounds:
                break
            t = self._blocks[n][r]
            series.extend(v / med[n] for v in t)
            round_of.extend([r] * len(t))
        warm = detect_warmup(series, window=5, max_fraction=1 / 3)
        if warm == 0:
            return 0
        return min(round_of[warm - 1] + 1, rounds // 3)

    def _evaluate(self, confidence: float,
                  lv: tuple[dict[str, dict[int, float]], dict[str, int], int] | None = None
                  ) -> dict[str, CandidateResult]:
        levels, warm, skip = lv if lv is not None else self._levels()
        b = self.design.baseline
        out: dict[str, CandidateResult] = {}
        for n in self.names:
            rounds = sorted(r for r in levels[n] if r >= skip)
            if not rounds:
                rounds = sorted(levels[n])
            vals = [levels[n][r] for r in rounds]
            med = float(np.median(vals)) if vals else math.nan
            steps = sum(len(t) for t in self._blocks[n].values())
            if n == b:
                out[n] = CandidateResult(n, med, len(rounds), Verdict.UNDECIDED, None, warm[n],
                                         steps)
                continue
            paired = [r for r in rounds if r in levels[b]]
            est = paired_speedup([levels[n][r] for r in paired], [levels[b][r] for r in paired],
                                 confidence=confidence, method=self.design.method,
                                 n_resamples=self.design.n_resamples,
                                 seed=self.design.seed + len(paired))
            out[n] = CandidateResult(n, med, len(paired), verdict_for(est, self.design.margin),
                                     est, warm[n], steps)
        return out

    def _after_round(self) -> None:
        d = self.design
        if self._round not in d.looks:
            return
        look = self._evaluate(d.look_confidence)
        undecided = [n for n in self._active if n != d.baseline
                     and look[n].verdict is Verdict.UNDECIDED]
        if d.race:
            for n in list(self._active):
                if n != d.baseline and look[n].verdict is not Verdict.UNDECIDED:
                    self._decided[n] = look[n]
                    self._active.remove(n)
        if not undecided or self._round >= d.max_rounds or len(self._active) < 2:
            self._done = True

    def result(self) -> Comparison:
        """The figures so far: each candidate's verdict from its last look (``undecided`` before
        the first), and its speed-up with the reported ``confidence`` interval over all its
        rounds."""
        d = self.design
        lv = self._levels() if self._round >= 1 else None  # once: both evaluations share it
        report = self._evaluate(d.confidence, lv) if lv is not None else {}
        verdicts: dict[str, Verdict] = {}
        if self._round >= d.min_rounds:  # the last planned look (the current round unless stopped)
            look = max(r for r in d.looks if r <= self._round)
            # stopped within a round: its recorded blocks were not part of that look
            partial = any(self._round in b for b in self._blocks.values())
            last_look = self._evaluate(d.look_confidence, lv if look == self._round and not partial
                                       else self._levels(upto=look))
            verdicts = {n: c.verdict for n, c in last_look.items()}
        out: dict[str, CandidateResult] = {}
        for n in self.names:
            if n in self._decided:
                c = self._decided[n]
                rep = report.get(n, c)
                out[n] = CandidateResult(n, rep.median_s, rep.rounds, c.verdict, rep.speedup,
                                         rep.warmup_steps, rep.steps)
            elif n in report:
                c = report[n]
                out[n] = CandidateResult(n, c.median_s, c.rounds,
                                         verdicts.get(n, Verdict.UNDECIDED), c.speedup,
                                         c.warmup_steps, c.steps)
        return Comparison(d.baseline, out, self._round, lv[2] if lv is not None else 0, d)


def compare(candidates: Sequence[str], time_block: Callable[[str], Sequence[float]],
            design: Design, *, on_round: Callable[[int, Comparison], None] | None = None
            ) -> Comparison:
    """Compare ``candidates`` by calling ``time_block(name)`` (the step times, seconds, of one
    block of ``name``) in randomized interleaved rounds until the sequential rule stops;
    ``on_round(round, partial)`` after every round (progress)."""
    cmp = Interleaved(list(candidates), design)
    while (order := cmp.next_round()) is not None:
        for name in order:
            cmp.record(name, time_block(name))
        if on_round is not None:
            on_round(cmp.rounds, cmp.result())
    return cmp.result()
