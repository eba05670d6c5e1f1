"""The runtime's side of the Lightning strategy
(:class:`autosync_transfer.search.lightning.AutoSyncStrategy`, which lives in the search room
because it may let a simulator choose): the names it is known by, how a strategy's variable
names are matched to a ``LightningModule``'s parameters, and how many steps a fit plans.

This module imports neither Lightning nor the search room.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.ddp import ddp_equivalent
from autosync_transfer.strategies.types import Strategy, VarConfig

__all__ = ["Picker", "match_names", "planned_steps", "ddp_equivalent", "STRATEGY_NAME",
           "CHECKPOINT_KEY"]

#: the name ``Trainer(strategy=...)`` knows the strategy by
STRATEGY_NAME = "autosync"
#: the checkpoint key holding :meth:`DistributedModel.sync_state_dict`
CHECKPOINT_KEY = "autosync"

log = logging.getLogger(__name__)

#: chooses the strategy once the model is known: ``picker(graph, cluster) -> Strategy``
Picker = Callable[[ModelGraph, Cluster], Strategy]


def planned_steps(model: Any) -> int | None:
    """The optimizer steps the Trainer plans for this fit (``None`` when unbounded or unknown)."""
    try:
        planned = float(model.trainer.estimated_stepping_batches)
    except Exception:  # no trainer attached, or no way to tell
        return None
    return int(planned) if math.isfinite(planned) and planned >= 1 else None


def match_names(strategy: Strategy, module: torch.nn.Module) -> Strategy:
    """``strategy`` with variable names of ``module``'s trainable parameters.

    Names that already match are kept. A strategy written for a submodule (``fc.weight`` for
    the network held as ``self.model``) is renamed when one submodule path makes every name
    match (``model.fc.weight``). Otherwise :class:`ConfigError` names the first mismatch.
    """
    params = [n for n, p in module.named_parameters() if p.requires_grad]
    wanted = set(params)
    names = [n.var_name for n in strategy.nodes]
    if set(names) == wanted:
        return strategy
    for path, _ in module.named_modules():
        if not path:
            continue
        if {f"{path}.{n}" for n in names} == wanted:
            log.info("strategy %s: variable names taken as relative to submodule %r",
                     strategy.id, path)
            nodes = tuple(
                VarConfig.model_validate({**n.model_dump(), "var_name": f"{path}.{n.var_name}"})
                for n in strategy.nodes
            )
            return strategy.model_copy(update={"nodes": nodes})
    what = type(module).__name__
    example = ", ".join(repr(p) for p in params[:3]) + (", ..." if len(params) > 3 else "")
    extra = [n for n in names if n not in wanted]
    if extra:
        raise ConfigError(
            f"strategy {strategy.id!r} does not fit {what}: it configures {extra[0]!r}, which is "
            f"not a trainable parameter of {what} (its parameters: {example}); build the strategy "
            f"from the {what} itself, e.g. with ModelGraph.from_torch"
        )
    missing = [p for p in params if p not in set(names)]
    raise ConfigError(
        f"strategy {strategy.id!r} does not fit {what}: trainable parameter {missing[0]!r} has no "
        f"synchronizer in it ({len(missing)} of {len(params)} parameters are not configured)"
    )

