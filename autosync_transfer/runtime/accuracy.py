"""What a synchronization strategy does to training: gradient fidelity and convergence checks.

A lossy synchronizer (an all-reduce with ``fp16``, ``fp16_ef`` or ``powersgd`` compression)
changes the averaged gradient. Two records say by how much:

* :class:`GradientFidelity`, measured in every trial that uses a lossy synchronizer: on a few of
  the timed steps the averaged gradient the strategy produced is compared with the exact average
  (relative error per variable and in total, cosine similarity);
* :class:`ConvergenceCheck`, measured for final candidates: the same number of training steps with
  the strategy and with exact synchronization, on the same seeds and batches; steps to a target
  loss and the final-loss gap decide whether the strategy trains as well as exact
  synchronization, within a :class:`ConvergenceTolerance`.

Both are plain data (stored with trials and searches); this module only defines them.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["GradientFidelity", "ConvergenceTolerance", "ConvergenceCheck", "is_lossless",
           "over_seeds"]


def is_lossless(strategy: Any) -> bool:
    """Whether ``strategy`` synchronizes exactly (no compressed all-reduce)."""
    from autosync_transfer.strategies.types import AllReduce

    for node in strategy.nodes:
        syncs = ([node.synchronizer] if node.partition is None
                 else list(node.partition.synchronizers))
        for s in syncs:
            if isinstance(s, AllReduce) and s.compressor != "none":
                return False
    return True


class GradientFidelity(BaseModel):
    """How close the strategy's averaged gradient is to the exact average, over ``steps`` probed
    steps (the worst step counts): ``rel_error`` = ||g - g_exact|| / ||g_exact|| over all
    variables, ``cosine`` = cos(g, g_exact), ``per_variable`` the relative error of each variable
    (its name as in the model graph)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rel_error: float = Field(ge=0)
    cosine: float = Field(ge=-1.0, le=1.0)
    per_variable: dict[str, float] = Field(default_factory=dict)
    steps: int = Field(ge=1)

    @field_validator("rel_error")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"rel_error must be finite, got {v}")
        return v


class ConvergenceTolerance(BaseModel):
    """When a strategy trains as well as exact synchronization: it needs at most
    ``max_step_ratio`` times the exact run's steps to reach the target loss, and its final loss is
    at most ``max_final_gap`` (relative) above the exact run's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_step_ratio: float = Field(default=1.10, ge=1.0, allow_inf_nan=False)
    max_final_gap: float = Field(default=0.02, ge=0.0, allow_inf_nan=False)

    def accepts(self, step_ratio: float, final_gap: float) -> bool:
        """The rule: within both bounds (``inf``: the target was never reached)."""
        return bool(step_ratio <= self.max_step_ratio and final_gap <= self.max_final_gap)


class ConvergenceCheck(BaseModel):
    """One convergence run of ``strategy_id`` against exact synchronization (same seeds and
    batches, ``steps`` steps each). ``target_loss`` is the loss the exact run reaches
    (``steps_to_target`` is ``None`` when the strategy never reaches it); ``step_ratio`` =
    steps_to_target / exact_steps_to_target (``inf`` when not reached); ``final_gap`` =
    (final_loss - exact_final_loss) / |exact_final_loss|; ``passed`` applies ``tolerance``.
    ``optimizer`` and ``lr`` are how both runs trained (a check stored without them trained with
    Adam at 1e-3)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy_id: str
    steps: int = Field(ge=1)
    seed: int = 0
    optimizer: str = "adam"
    lr: float | None = 1e-3
    target_loss: float
    steps_to_target: int | None
    exact_steps_to_target: int
    final_loss: float
    exact_final_loss: float
    step_ratio: float
    final_gap: float
    tolerance: ConvergenceTolerance = Field(default_factory=ConvergenceTolerance)
    passed: bool
    seconds: float = Field(default=0.0, ge=0)
    #: several seeds (:func:`over_seeds`): each seed's figures, and the one-sided upper bounds
    #: (``confidence``) the verdict is taken on; empty / ``None`` for one seed
    seeds: tuple[int, ...] = ()
    step_ratios: tuple[float, ...] = ()
    final_gaps: tuple[float, ...] = ()
    step_ratio_high: float | None = None
    final_gap_high: float | None = None
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)

    def judged(self, tolerance: ConvergenceTolerance) -> ConvergenceCheck:
        """This check under ``tolerance`` (the same curves' figures, the verdict again)."""
        if tolerance == self.tolerance:
            return self
        ratio, gap = self._decisive()
        return self.model_copy(update={"tolerance": tolerance,
                                       "passed": tolerance.accepts(ratio, gap)})

    def _decisive(self) -> tuple[float, float]:
        """The figures the verdict is taken on: the upper bounds over seeds (non-inferiority),
        or the one seed's figures."""
        if self.step_ratio_high is not None and self.final_gap_high is not None:
            return self.step_ratio_high, self.final_gap_high
        return self.step_ratio, self.final_gap

    @property
    def seeds_to_pass(self) -> int | None:
        """Seeds a check over several seeds would need for both upper bounds to lie within the
        tolerance if each figure's mean and spread held (:func:`~autosync_transfer.measure.
        seeds_to_show`): its own number when it passed; ``None`` for one seed, or when a mean
        lies beyond the tolerance (no number of seeds shows it within)."""
        from autosync_transfer.measure import seeds_to_show

        if not self.seeds:
            return None
        if self.passed:
            return len(self.seeds)
        tol = self.tolerance
        need = (seeds_to_show(self.step_ratios, tol.max_step_ratio, confidence=self.confidence,
                              log=True),
                seeds_to_show(self.final_gaps, tol.max_final_gap, confidence=self.confidence))
        return None if None in need else max(need)  # type: ignore[type-var]

    @property
    def credited_step_ratio(self) -> float:
        """The steps-to-target ratio time to loss may use: below 1 only when that is
        significant (the upper bound over seeds below 1), otherwise at least 1."""
        if self.step_ratio_high is not None and self.step_ratio_high < 1.0:
            return self.step_ratio
        return max(self.step_ratio, 1.0)

    def summary(self) -> str:
        """One line: the verdict and its figures."""
        reached = ("never reached" if self.steps_to_target is None
                   else f"reached in {self.steps_to_target} steps")
        verdict = "passed" if self.passed else "failed"
        if self.seeds:
            return (f"convergence check {verdict} over seeds {', '.join(map(str, self.seeds))}: "
                    f"steps-to-target ratio {self.step_ratio:.2f} (upper "
                    f"{100 * self.confidence:.0f} % bound {self.step_ratio_high:.2f}, tolerance "
                    f"{self.tolerance.max_step_ratio:.2f}); final loss gap "
                    f"{self.final_gap:+.1%} (upper bound {self.final_gap_high:+.1%}, tolerance "
                    f"{self.tolerance.max_final_gap:.0%}) over {self.steps} steps"
                    f"{self._undecided()}")
        return (f"convergence check {verdict}: target loss {self.target_loss:.4g} {reached} vs "
                f"{self.exact_steps_to_target} exact (ratio {self.step_ratio:.2f}, tolerance "
                f"{self.tolerance.max_step_ratio:.2f}); final loss gap {self.final_gap:+.1%} "
                f"(tolerance {self.tolerance.max_final_gap:.0%}) over {self.steps} steps")

    def _undecided(self) -> str:
        """For a failed check over seeds: whether more seeds could show it within tolerance."""
        if self.passed:
            return ""
        n = self.seeds_to_pass
        if n is None:
            return "; a mean lies beyond the tolerance"
        return (f"; the means lie within the tolerance but the seeds spread too much to show it: "
                f"about {n} seeds would if they held")


def over_seeds(checks: list[ConvergenceCheck], *, confidence: float = 0.95) -> ConvergenceCheck:
    """One check from the same strategy's checks on several seeds (exact and strategy on the
    same seeds and batches each): the steps-to-target ratio is their geometric mean and the
    final-loss gap their mean, each with a one-sided upper ``confidence`` bound (Student's t over
    the seeds, as MLPerf's convergence checker); it passes only when both bounds lie within the
    tolerance (non-inferiority: "not shown worse" is not enough). A seed that never reaches the
    target makes the ratio's bound infinite. One check is returned as it is."""
    from autosync_transfer.measure import upper_bound

    if not checks:
        raise ValueError("over_seeds needs at least one check")
    if len(checks) == 1:
        return checks[0]
    first = checks[0]
    ratios = [c.step_ratio for c in checks]
    gaps = [c.final_gap for c in checks]
    finite = all(math.isfinite(r) and r > 0 for r in ratios)
    ratio = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if finite else math.inf
    gap = sum(gaps) / len(gaps) if all(math.isfinite(g) for g in gaps) else math.inf
    ratio_high = upper_bound(ratios, confidence=confidence, log=True) if finite else math.inf
    gap_high = upper_bound(gaps, confidence=confidence)
    reached = [c.steps_to_target for c in checks]
    return first.model_copy(update={
        "steps_to_target": None if any(r is None for r in reached) else
        round(sum(reached) / len(reached)),  # type: ignore[arg-type]
        "exact_steps_to_target": round(sum(c.exact_steps_to_target for c in checks) / len(checks)),
        "target_loss": sum(c.target_loss for c in checks) / len(checks),
        "final_loss": sum(c.final_loss for c in checks) / len(checks),
        "exact_final_loss": sum(c.exact_final_loss for c in checks) / len(checks),
        "step_ratio": ratio, "final_gap": gap, "seeds": tuple(c.seed for c in checks),
        "step_ratios": tuple(ratios), "final_gaps": tuple(gaps),
        "step_ratio_high": ratio_high, "final_gap_high": gap_high, "confidence": confidence,
        "passed": first.tolerance.accepts(ratio_high, gap_high),
        "seconds": sum(c.seconds for c in checks),
    })
