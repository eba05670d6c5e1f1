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

__all__ = ["GradientFidelity", "ConvergenceTolerance", "ConvergenceCheck", "is_lossless"]


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

    def judged(self, tolerance: ConvergenceTolerance) -> ConvergenceCheck:
        """This check under ``tolerance`` (the same curves' figures, the verdict again)."""
        if tolerance == self.tolerance:
            return self
        return self.model_copy(update={
            "tolerance": tolerance, "passed": tolerance.accepts(self.step_ratio, self.final_gap)})

    def summary(self) -> str:
        """One line: the verdict and its figures."""
        reached = ("never reached" if self.steps_to_target is None
                   else f"reached in {self.steps_to_target} steps")
        verdict = "passed" if self.passed else "failed"
        return (f"convergence check {verdict}: target loss {self.target_loss:.4g} {reached} vs "
                f"{self.exact_steps_to_target} exact (ratio {self.step_ratio:.2f}, tolerance "
                f"{self.tolerance.max_step_ratio:.2f}); final loss gap {self.final_gap:+.1%} "
                f"(tolerance {self.tolerance.max_final_gap:.0%}) over {self.steps} steps")
