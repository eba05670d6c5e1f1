"""How the project compares configurations: randomized interleaved rounds, warm-up detected and
dropped, speed-ups with 95 % intervals (Student's t on paired log-ratios), verdicts instead of
minima, and one-sided bounds for convergence over seeds (DESIGN §15)."""

from __future__ import annotations

from autosync_transfer.measure.compare import (CandidateResult, Comparison, Design, Interleaved,
                                               compare)
from autosync_transfer.measure.stats import (RatioEstimate, Verdict, detect_warmup,
                                             paired_speedup, seeds_to_show, upper_bound)

__all__ = ["Design", "Interleaved", "Comparison", "CandidateResult", "compare", "Verdict",
           "RatioEstimate", "detect_warmup", "paired_speedup", "seeds_to_show", "upper_bound"]
