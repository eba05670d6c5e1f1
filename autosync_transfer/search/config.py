"""How one search runs (:class:`SearchConfig`), and the names of its run and default store.

The method word (``config.method``) names a :class:`~autosync_transfer.search.proposers.Proposer`
through :data:`~autosync_transfer.search.proposers.PROPOSERS`; everything this module says about a
method (which methods rank candidates, which warm-start) is read from that registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autosync_transfer.paths import search_dir
from autosync_transfer.search.proposers import PROPOSERS, RANKED_METHODS, SEARCH_METHODS

__all__ = ["DEFAULT_KNOB_CANDIDATES", "DEFAULT_SEARCH_DIR", "SearchConfig", "SearchMethod",
           "default_store_path", "run_name"]

#: the method words, as a type (the keys of the proposer registry)
SearchMethod = Literal[SEARCH_METHODS]  # type: ignore[valid-type]

#: whole-model candidates per round a ranked search adds from the knob encoding by default
DEFAULT_KNOB_CANDIDATES = 200

#: default folder of search trial stores below the checkout (installed: ./autosync-runs/search;
#: the folder is :func:`autosync_transfer.paths.search_dir`); kept apart from the collected
#: datasets, whose sampled strategies are unbiased: give another store path to put them there
DEFAULT_SEARCH_DIR = "runs/search"


class SearchConfig(BaseModel):
    """How one search runs (see :mod:`autosync_transfer.search.loop`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: SearchMethod = "autosync"
    budget: int = Field(default=200, ge=1)
    per_round: int = Field(default=10, ge=1)
    candidates: int = Field(default=1000, ge=1)
    seed: int = 0
    # the dataset's space (where every simulator was trained), with per-strategy knob
    # probabilities so that candidates reach its corners (sampler ``knob_prior``)
    preset: str = "mixture"
    diversity: float = Field(default=0.3, ge=0)
    min_train: int = Field(default=10, ge=2)
    ranker: str = "rnn"
    max_epochs: int = Field(default=30, ge=1)
    neighbours: int = Field(default=200, ge=0)
    parents: int = Field(default=3, ge=1)
    confirm: int = Field(default=10, ge=0)
    # ranked methods: whole-model candidates per round decoded from uniform knob assignments
    # (default: DEFAULT_KNOB_CANDIDATES for the ranked methods, 0 for the others)
    knob_candidates: int = Field(default=0, ge=0)
    # what the search minimizes (search.objective.OBJECTIVES): "time-to-loss" (step time x
    # steps to a target loss relative to exact synchronization) or "step-time"
    objective: str = "time-to-loss"
    # propose lossless strategies only (no compressed all-reduce)
    lossless: bool = False
    # time-to-loss: lossy final candidates that get a convergence run, and its steps
    final_checks: int = Field(default=3, ge=0)
    # rounds of final checks: after a round whose candidates all failed, the next best that
    # compress less are checked (search.timetoloss.check_final)
    final_rounds: int = Field(default=3, ge=1)
    # a lossy strategy passes its check within this many times exact synchronization's steps to
    # the target loss (runtime.accuracy.ConvergenceTolerance; its time to loss is charged the ratio)
    max_step_ratio: float = Field(default=1.10, ge=1.0, allow_inf_nan=False)
    check_steps: int = Field(default=150, ge=4)

    @field_validator("objective")
    @classmethod
    def _known_objective(cls, v: str) -> str:
        from autosync_transfer.search.objective import OBJECTIVES

        if v not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {v!r}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_knob_candidates(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("knob_candidates") is None:
            ranked = data.get("method", "autosync") in RANKED_METHODS
            data = {**data, "knob_candidates": DEFAULT_KNOB_CANDIDATES if ranked else 0}
        return data


def run_name(config: SearchConfig, warm: bool) -> str:
    """The run's name: method, warm or cold (methods that warm-start), knob candidates when
    there are, ``lossless`` when restricted to lossless strategies, seed."""
    proposer = PROPOSERS[config.method]
    tag = config.method + (("-warm" if warm else "-cold") if proposer.warm_starts else "")
    if config.knob_candidates and proposer.ranked:
        tag += f"-knobs{config.knob_candidates}"
    if config.lossless:
        tag += "-lossless"
    return f"{tag}-seed{config.seed}"


def default_store_path(domain: str, name: str) -> Path:
    """Where run ``name`` of ``domain`` is stored by default: below
    :func:`autosync_transfer.paths.search_dir` (the checkout's ``runs/search``, or
    ``./autosync-runs/search`` for an installed package)."""
    return search_dir() / domain / f"{name}.jsonl"
