"""Synthetic step timings of known truth, for testing comparisons: a machine whose level drifts,
steps with heavy-tailed outliers, a slow warm-up at the start of the session and a cost at
every switch between candidates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["NoisyMachine"]


@dataclass
class NoisyMachine:
    """Times blocks of steps of candidates whose true step times are ``true_s``.

    Args:
        true_s: each candidate's true steady step time (seconds).
        block_steps: steps per block.
        drift: the level rises by this fraction over ``session_steps`` steps (0.27: +27 %),
            with a slow wander of a quarter of it on top.
        session_steps: steps over which the drift runs its course.
        noise_cv: multiplicative per-step noise (log-normal sigma).
        outlier_p: probability that a step is an outlier, slowed by 1 + Pareto(1.5) * 0.1
            (heavy-tailed: a few steps take several times the normal).
        warmup_steps: the session's first steps start ``warmup_factor`` times slower and
            decay to the level over this many steps.
        switch_factor: the first step of every block is this much slower (a switch).
        seed: the noise's randomness.
    """

    true_s: Mapping[str, float]
    block_steps: int = 5
    drift: float = 0.27
    session_steps: int = 1000
    noise_cv: float = 0.03
    outlier_p: float = 0.05
    warmup_steps: int = 0
    warmup_factor: float = 2.5
    switch_factor: float = 1.5
    seed: int = 0
    _step: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self._phase = float(self._rng.uniform(0, 2 * np.pi))

    def _level(self, i: int) -> float:
        u = i / self.session_steps
        lv = 1.0 + self.drift * u + 0.25 * self.drift * np.sin(2 * np.pi * 3 * u + self._phase)
        if self.warmup_steps and i < self.warmup_steps:
            lv *= 1.0 + (self.warmup_factor - 1.0) * (1.0 - i / self.warmup_steps) ** 2
        return float(lv)

    def time_block(self, name: str) -> list[float]:
        out = []
        for j in range(self.block_steps):
            t = self.true_s[name] * self._level(self._step)
            t *= float(np.exp(self._rng.normal(0.0, self.noise_cv)))
            if self._rng.random() < self.outlier_p:
                t *= 1.0 + 0.1 * float(self._rng.pareto(1.5))
            if j == 0:
                t *= self.switch_factor
            out.append(t)
            self._step += 1
        return out
