"""``DistributedModel``: a DDP-like wrapper that synchronizes gradients with any strategy."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
from autosync_transfer.runtime.plan import make_plan
from autosync_transfer.strategies.types import Strategy

__all__ = ["DistributedModel"]


class DistributedModel(torch.nn.Module):
    """Wrap ``module`` for data-parallel training with ``strategy`` on ``cluster``.

    Use it like ``DistributedDataParallel`` inside a process group (one process per worker of
    ``cluster``, ranks numbered node by node): ``loss = model(x).sum(); loss.backward();
    optimizer.step()``. Communication starts from the gradient hooks during backward and is
    complete when ``backward()`` returns; every rank then holds the averaged gradients.
    On first use, rank 0's parameters are broadcast so that every replica starts equal.
    ``graph`` defaults to ``ModelGraph.from_torch(module)`` (embeddings have sparse gradients).
    """

    def __init__(self, module: torch.nn.Module, strategy: Strategy, cluster: Cluster, *,
                 graph: ModelGraph | None = None, groups: CommGroups | None = None,
                 broadcast_parameters: bool = True):
        super().__init__()
        self.module = module
        self.strategy = strategy
        self.cluster = cluster
        self.graph = graph
        self.groups = groups
        self.broadcast_parameters = broadcast_parameters
        self._executor: StrategyExecutor | None = None

    def setup(self) -> DistributedModel:
        """Plan the strategy, broadcast the parameters and install the gradient hooks (done
        automatically on the first forward)."""
        if self._executor is not None:
            return self
        if not dist.is_initialized():
            raise ConfigError("DistributedModel needs an initialized torch.distributed process group")
        graph = self.graph or ModelGraph.from_torch(self.module, name="model")
        plan = make_plan(self.strategy, graph, self.cluster)
        if self.broadcast_parameters:
            with torch.no_grad():
                for p in self.module.parameters():
                    dist.broadcast(p.data, src=0)
        self._executor = StrategyExecutor(self.module, plan, self.groups, auto_finish=True).setup()
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.setup()
        return self.module(*args, **kwargs)

    def close(self) -> None:
        """Remove the hooks: ``module`` trains locally again."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
