"""Random search: each round's sampled candidates in the sampler's order, unranked."""

from __future__ import annotations

from collections.abc import Sequence

from autosync_transfer.search.proposers.base import SamplingProposer, unmeasured
from autosync_transfer.strategies.types import Strategy

__all__ = ["RandomProposer"]


class RandomProposer(SamplingProposer):
    """The first ``k`` unmeasured candidates the sampler draws for the round."""

    method = "random"

    def propose(self, round_no: int, k: int, measured: set[str], history: Sequence[Strategy],
                parents: Sequence[Strategy] = ()) -> list[Strategy]:
        sampled = self.candidates(round_no)
        return [sampled[i] for i in unmeasured(sampled, range(len(sampled)), measured, k)]
