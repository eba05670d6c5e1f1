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

__all__ = ["DistributedModel", "cluster_from_process_group"]


def _local_address() -> str:
    """The address this process reaches the rendezvous host from (no packet is sent)."""
    import os
    import socket

    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((master, int(os.environ.get("MASTER_PORT") or 1)))
                return str(s.getsockname()[0])
        except (OSError, ValueError):
            pass
    return "127.0.0.1"


def cluster_from_process_group(name: str = "process-group") -> Cluster:
    """The cluster the current process group runs on: one node per distinct (host name,
    address) of the ranks, named ``n0``, ``n1``, ... in rank order like the catalog's clusters,
    with as many workers as it has ranks. Collective: every rank must call it.

    Only the layout is known (which ranks share a machine), so the nodes' ``bandwidth_gbps`` is
    a placeholder 1.0: enough to plan and run a strategy, not to rank strategies with.
    Raises :class:`ConfigError` when the ranks are not numbered node by node.
    """
    import socket

    from autosync_transfer.domains.cluster import Node

    if not dist.is_initialized():
        raise ConfigError("cluster_from_process_group needs an initialized torch.distributed "
                          "process group")
    me = (socket.gethostname(), _local_address())
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, me)
    order: list[tuple[str, str]] = []
    workers: dict[tuple[str, str], int] = {}
    for rank, key in enumerate(map(tuple, hosts)):
        if key not in workers:
            order.append(key)
            workers[key] = 0
        elif order[-1] != key:
            raise ConfigError(f"rank {rank} runs on {key[0]} ({key[1]}) after ranks of another "
                              f"host: ranks must be numbered node by node; pass the cluster "
                              f"explicitly")
        workers[key] += 1
    nodes = tuple(Node(name=f"n{i}", address=key[1] if key[1] != "127.0.0.1" or len(order) == 1
                       else key[0], workers=workers[key], bandwidth_gbps=1.0, chief=i == 0)
                  for i, key in enumerate(order))
    return Cluster(name=name, nodes=nodes,
                   description="derived from the process group (bandwidths unknown)")


class DistributedModel(torch.nn.Module):
    """Wrap ``module`` for data-parallel training with ``strategy`` on ``cluster``.

    Use it like ``DistributedDataParallel`` inside a process group (one process per worker of
    ``cluster``, ranks numbered node by node): ``loss = model(x).sum(); loss.backward();
    optimizer.step()``. Communication starts from the gradient hooks during backward and is
    complete when ``backward()`` returns; every rank then holds the averaged gradients.
    On first use, rank 0's parameters are broadcast so that every replica starts equal.
    ``graph`` defaults to ``ModelGraph.from_torch(module)`` (embeddings have sparse gradients).
    ``cluster``: a :class:`Cluster`, a catalog name (``"B"``), or ``None``: the layout of the
    process group (:func:`cluster_from_process_group`; its nodes are ``n0``, ``n1``, ... in
    rank order, the names strategies found on the catalog's clusters use).
    """

    def __init__(self, module: torch.nn.Module, strategy: Strategy,
                 cluster: Cluster | str | None = None, *,
                 graph: ModelGraph | None = None, groups: CommGroups | None = None,
                 broadcast_parameters: bool = True):
        super().__init__()
        self.module = module
        self.strategy = strategy
        if isinstance(cluster, str):
            from autosync_transfer.domains.catalog import get_cluster

            cluster = get_cluster(cluster)
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
        if self.cluster is None:
            self.cluster = cluster_from_process_group()
        if self.cluster.world_size != dist.get_world_size():
            raise ConfigError(f"cluster {self.cluster.name!r} has {self.cluster.world_size} "
                              f"workers, the process group {dist.get_world_size()} ranks")
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
