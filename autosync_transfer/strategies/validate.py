"""Validation of a strategy against a domain: every rule it breaks, naming the variable."""

from __future__ import annotations

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import StrategyValidationError
from autosync_transfer.strategies.types import PS, AllReduce, Strategy

__all__ = ["violations", "validate"]


def violations(strategy: Strategy, domain: Domain) -> list[str]:
    """Every rule ``strategy`` breaks on ``domain``, one message each (empty when valid)."""
    out: list[str] = []
    model, cluster = domain.model, domain.cluster
    variables = model.by_name()
    node_names = set(cluster.node_names)
    seen: set[str] = set()

    def check_sync(var_name: str, where: str, sync: PS | AllReduce, sparse: bool) -> None:
        if isinstance(sync, PS):
            if not sync.sync or sync.staleness:
                out.append(
                    f"{where}: asynchronous or stale parameter servers (sync={str(sync.sync).lower()}, "
                    f"staleness={sync.staleness}) are not supported; every step synchronizes"
                )
            if sync.destination not in node_names:
                out.append(
                    f"{where}: PS destination {sync.destination!r} is not a node of cluster "
                    f"{cluster.name!r} (nodes: {', '.join(cluster.node_names)})"
                )
        else:
            if sparse:
                out.append(
                    f"{where}: sparse variable {var_name!r} must use a parameter server, "
                    f"not all-reduce"
                )

    for cfg in strategy.nodes:
        name = cfg.var_name
        if name in seen:
            out.append(f"variable {name!r} is configured more than once")
            continue
        seen.add(name)
        var = variables.get(name)
        if var is None:
            out.append(f"variable {name!r} is not a trainable variable of model {model.name!r}")
            continue
        if cfg.partition is None:
            assert cfg.synchronizer is not None
            check_sync(name, f"variable {name!r}", cfg.synchronizer, var.sparse)
            continue
        p = cfg.partition
        if p.axis >= len(var.shape):
            out.append(
                f"variable {name!r}: partition axis {p.axis} does not exist "
                f"(shape {list(var.shape)})"
            )
            continue
        if var.sparse and p.axis != 0:
            out.append(
                f"variable {name!r}: a sparse variable can only be partitioned along axis 0, "
                f"got axis {p.axis}"
            )
        dim = var.shape[p.axis]
        if p.shards > dim:
            out.append(
                f"variable {name!r}: shards must be >= 2 and <= {dim} "
                f"(axis {p.axis} of shape {list(var.shape)}), got {p.shards}"
            )
        for i, s in enumerate(p.synchronizers):
            check_sync(name, f"variable {name!r} shard {i}", s, var.sparse)

    for name in variables:
        if name not in seen:
            out.append(f"variable {name!r} has no synchronizer (every trainable variable needs one)")
    return out


def validate(strategy: Strategy, domain: Domain) -> Strategy:
    """Return ``strategy`` if it is valid on ``domain``; else raise with every violation."""
    found = violations(strategy, domain)
    if found:
        raise StrategyValidationError(found)
    return strategy
