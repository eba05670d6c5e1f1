"""What a search measured and what it comes to: its progress, its result, and the figures of
:func:`summarize` (best-so-far speed-up curve, trials to 1.1x / 1.2x / 1.3x, hit rate per round,
the confirmed speed-up)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autosync_transfer.search.references import FP16_REFERENCES, is_builder
from autosync_transfer.strategies.types import TORCH_DDP, Strategy

if TYPE_CHECKING:
    from autosync_transfer.dataset.store import TrialRecord
    from autosync_transfer.search.config import SearchConfig

__all__ = ["HIT_MARGIN", "SearchProgress", "SearchResult", "format_speedup", "summarize"]

#: a trial is a *hit* when it is at least this much faster than the best builder (a margin of
#: the order of the trial-to-trial noise, so that a builder's near-copy does not count by luck)
HIT_MARGIN = 0.02


@dataclass
class SearchProgress:
    """What a search has measured so far (``on_event`` receives it after every trial)."""

    domain: str
    run: str
    budget: int
    trials: list[TrialRecord] = field(default_factory=list)  # searched, in measuring order
    references: dict[str, float | None] = field(default_factory=dict)  # builder/ddp -> median s
    confirmations: dict[str, TrialRecord] = field(default_factory=dict)  # "<done>/<i>-<who>"
    round: int = 0
    message: str = ""

    @property
    def done(self) -> int:
        return len(self.trials)

    @property
    def best_builder_s(self) -> float | None:
        vals = [v for k, v in self.references.items() if is_builder(k) and v]
        return min(vals) if vals else None

    @property
    def ddp_s(self) -> float | None:
        return self.references.get(TORCH_DDP)

    @property
    def best_s(self) -> float | None:
        vals = [r.median_s for r in self.trials if r.status == "ok" and r.median_s]
        return min(vals) if vals else None

    @property
    def failure_penalty_s(self) -> float:
        """What a failed or timed-out trial counts as to a proposer told the results: twice the
        slowest ok time so far (1000 s before any)."""
        ok = [r.median_s for r in self.trials if r.status == "ok" and r.median_s]
        return 2 * max(ok) if ok else 1e3


@dataclass(frozen=True)
class SearchResult:
    """The outcome: the best strategy found, the figures of :func:`summarize`, and the strategy
    to use (``chosen``): the fastest of the best found, the best builder and the best fp16
    reference, by the confirmation's medians when the run has one, else by their measurements
    (``chosen_from``: ``search``, or the reference's name)."""

    domain: str
    run: str
    config: SearchConfig
    store: Path
    best: Strategy | None
    summary: dict[str, Any]
    simulator: Any = None  # the final simulator (autosync only)
    chosen: Strategy | None = None
    chosen_from: str | None = None

    def exportable(self, domain: Any, checks: Any = None, allow_lossy: bool = False) -> Any:
        """What this search exports (an :class:`~autosync_transfer.search.export.ExportChoice`):
        as ``chosen``, but a lossy strategy only with a passed convergence check (``checks``
        by strategy id; default: the summary's) or ``allow_lossy``
        (:func:`~autosync_transfer.search.export.search_choice`)."""
        from autosync_transfer.search.export import search_choice

        return search_choice(self, domain, checks, allow_lossy)


def summarize(trials: Sequence[TrialRecord], references: dict[str, float | None],
              per_round: int, confirmations: dict[str, TrialRecord] | None = None
              ) -> dict[str, Any]:
    """Figures of a search: best-so-far speed-up over the best builder after every trial, trials
    needed to reach 1.1x / 1.2x, hit rate per round (share of its trials at least
    :data:`HIT_MARGIN` faster than the best builder), failures; with ``confirmations`` (of the
    current number of trials) the ``confirmed`` speed-up: median of the best strategy's
    re-measurements over the median of the best builder's (and of the best fp16 reference's,
    when the confirmation measured one)."""
    builders = [v for k, v in references.items() if is_builder(k) and v]
    fp16 = {k: v for k, v in references.items() if k in FP16_REFERENCES and v}
    best_builder = min(builders) if builders else None
    ddp = references.get(TORCH_DDP)
    curve, hits, best = _curve(trials, best_builder)

    def first_reaching(x: float) -> int | None:
        for i, v in enumerate(curve):
            if v is not None and v >= x:
                return i + 1
        return None

    rounds = [hits[i:i + per_round] for i in range(0, len(hits), per_round)]
    best_s = best if math.isfinite(best) else None
    return {
        "trials": len(trials),
        "failed": sum(r.status != "ok" for r in trials),
        "best_s": best_s,
        "best_builder_s": best_builder,
        "best_builder": min((k for k, v in references.items() if is_builder(k) and v),
                            key=lambda k: references[k], default=None),  # type: ignore[arg-type,return-value]
        "best_fp16_builder": min(fp16, key=lambda k: fp16[k], default=None),
        "best_fp16_builder_s": min(fp16.values(), default=None),
        "speedup_vs_fp16_builder": (min(fp16.values()) / best_s if fp16 and best_s else None),
        "ddp_s": ddp,
        "speedup_vs_builder": best_builder / best_s if best_builder and best_s else None,
        # the search's own measurements (the minimum of many noisy trials against one of
        # DDP): not a figure to report; "vs torch DDP" is the confirmation's
        "unconfirmed_speedup_vs_ddp": ddp / best_s if ddp and best_s else None,
        "trials_to_1.1x": first_reaching(1.1),
        "trials_to_1.2x": first_reaching(1.2),
        "trials_to_1.3x": first_reaching(1.3),
        "curve": curve,
        "hit_rate": [sum(h) / len(h) for h in rounds],
        "confirmed": (confirmed := _confirmed(confirmations or {}, len(trials))),
        "confirmed_speedup_vs_builder": confirmed["speedup_vs_builder"] if confirmed else None,
        "confirmed_speedup_vs_fp16_builder": (confirmed or {}).get("speedup_vs_fp16_builder"),
        "speedup_vs_ddp": (confirmed or {}).get("speedup_vs_ddp"),
    }


def _curve(trials: Sequence[TrialRecord], best_builder: float | None
           ) -> tuple[list[float | None], list[bool], float]:
    """The best-so-far speed-up over ``best_builder`` after every trial, whether each trial is a
    hit, and the best time (``inf``: none ok)."""
    best = math.inf
    curve: list[float | None] = []
    hits: list[bool] = []
    for r in trials:
        ok = r.status == "ok" and r.median_s is not None
        if ok:
            best = min(best, float(r.median_s))  # type: ignore[arg-type]
        curve.append(best_builder / best if best_builder and math.isfinite(best) else None)
        hits.append(bool(ok and best_builder
                         and r.median_s * (1 + HIT_MARGIN) < best_builder))  # type: ignore[operator]
    return curve, hits, best


def _confirmed(confirmations: dict[str, TrialRecord], done: int) -> dict[str, Any] | None:
    """The confirmation of the run at ``done`` trials: each member's median over its ok
    re-measurements, and the best strategy's (and the best lossless one's) speed-ups over the
    others paired by round, each with its 95 % interval, the rounds it rests on and its verdict
    (:func:`autosync_transfer.measure.paired_speedup`; fewer than 3 paired rounds give no
    interval)."""
    from autosync_transfer.measure import paired_speedup
    from autosync_transfer.measure.stats import verdict_for

    members = ("best", "builder", "fp16", "ddp", "lossless")
    times: dict[str, dict[int, float]] = {w: {} for w in members}
    names: dict[str, str] = {}
    for key, r in confirmations.items():
        at, _, rest = key.partition("/")
        index, _, who = rest.rpartition("-")
        if at != str(done) or who not in times:
            continue
        names[who] = r.strategy_id
        if r.status == "ok" and r.median_s:
            times[who][int(index) if index.isdigit() else len(times[who])] = float(r.median_s)
    if not times["best"] or not times["builder"]:
        return None

    def med(who: str) -> float:
        return float(np.median(list(times[who].values())))

    def versus(who: str, other: str, label: str, out: dict[str, Any]) -> None:
        rounds = sorted(set(times[who]) & set(times[other]))
        if not rounds:
            return
        est = paired_speedup([times[who][i] for i in rounds], [times[other][i] for i in rounds])
        out[label] = est.speedup
        out[f"{label}_low"] = est.low if math.isfinite(est.low) else None
        out[f"{label}_high"] = est.high if math.isfinite(est.high) else None
        out[f"{label}_rounds"] = est.n
        out[f"{label}_verdict"] = verdict_for(est, 0.02).value

    out: dict[str, Any] = {"best": names.get("best"), "builder": names.get("builder"),
                           "best_s": med("best"), "builder_s": med("builder"),
                           "measurements": min(len(times["best"]), len(times["builder"]))}
    versus("best", "builder", "speedup_vs_builder", out)
    if times["fp16"]:
        out.update(fp16_builder=names.get("fp16"), fp16_builder_s=med("fp16"))
        versus("best", "fp16", "speedup_vs_fp16_builder", out)
    if times["ddp"]:
        out["ddp_s"] = med("ddp")
        versus("best", "ddp", "speedup_vs_ddp", out)
    if times["lossless"]:
        out.update(lossless=names.get("lossless"), lossless_s=med("lossless"))
        versus("lossless", "builder", "lossless_speedup_vs_builder", out)
        if times["ddp"]:
            versus("lossless", "ddp", "lossless_speedup_vs_ddp", out)
    return out


def format_speedup(c: dict[str, Any], label: str) -> str:
    """``1.23x [1.10, 1.37], 10 rounds`` from a confirmation's figures (``-`` when absent)."""
    v = c.get(label)
    if v is None:
        return "-"
    lo, hi, n = c.get(f"{label}_low"), c.get(f"{label}_high"), c.get(f"{label}_rounds")
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else " [no interval]"
    return f"{v:.2f}x{ci}, {n} rounds"
