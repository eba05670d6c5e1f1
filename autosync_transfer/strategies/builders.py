"""Hand-optimized strategies: AutoDist's builders (PS, PS-LB, PartitionedPS, AllReduce,
PartitionedAR, Parallax) and a DDP-equivalent.

Every builder is a function ``(domain, **options) -> Strategy``, registered in :data:`BUILDERS`;
:func:`build` looks one up by name. Variables are handled in forward order, servers in cluster
order. Differences from AutoDist:

* ``ps`` puts everything on the chief node (AutoDist took the first CPU device in dict order);
* ``partitioned_ps`` does not partition when the cluster has one server, and caps the shard count
  (see :func:`partitioned_ps`); ``partitioned_ar`` caps it too, so a prime first dimension is not
  split into one-row shards;
* the all-reduce builders default to no compression (one AutoDist branch silently used PowerSGD);
* a sparse variable can never be all-reduced (validation rule), so ``all_reduce``,
  ``partitioned_ar`` and ``ddp`` put sparse variables (or their shards) on parameter servers with
  greedy byte load balancing in forward order, without local replication — what Parallax does.

Local replication (``local_replication=True`` on the PS-family builders) aggregates each node's
workers before the push; it is only applied when some node has more than one worker (with one
worker per node it does nothing, and the flag stays False).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.graph import Variable
from autosync_transfer.errors import ConfigError, UnknownNameError
from autosync_transfer.strategies.types import (
    COMPRESSORS,
    PS,
    AllReduce,
    Partition,
    Strategy,
    VarConfig,
)

__all__ = [
    "BUILDERS",
    "builder_names",
    "build",
    "ps",
    "ps_lb",
    "partitioned_ps",
    "all_reduce",
    "partitioned_ar",
    "parallax",
    "ddp",
    "smallest_divisor",
]

#: bytes per MiB (DDP's ``bucket_cap_mb`` counts MiB)
MIB = 1024 * 1024


# -- helpers -----------------------------------------------------------------------------------


def smallest_divisor(n: int) -> int:
    """The smallest divisor >= 2 of ``n`` (``n`` itself when prime; 1 for ``n`` < 2)."""
    if n < 2:
        return 1
    d = 2
    while d * d <= n:
        if n % d == 0:
            return d
        d += 1
    return n


def _replication(domain: Domain, requested: bool) -> bool:
    """Local replication only where it does something: some node has more than one worker."""
    return bool(requested) and any(n.workers > 1 for n in domain.cluster.nodes)


def _check_chunk(chunk_size: int) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ConfigError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    return chunk_size


def _check_compressor(compressor: str, powersgd_rank: int) -> None:
    if compressor not in COMPRESSORS:
        raise ConfigError(
            f"compressor must be one of {', '.join(COMPRESSORS)}, got {compressor!r}"
        )
    if isinstance(powersgd_rank, bool) or not isinstance(powersgd_rank, int) or not (
        1 <= powersgd_rank <= 64
    ):
        raise ConfigError(f"powersgd_rank must be an integer in [1, 64], got {powersgd_rank!r}")


def _check_max_shards(max_shards: int | None) -> None:
    if max_shards is not None and (
        isinstance(max_shards, bool) or not isinstance(max_shards, int) or max_shards < 1
    ):
        raise ConfigError(f"max_shards must be an integer >= 1, got {max_shards!r}")


def _ar(group: int, compressor: str, powersgd_rank: int) -> AllReduce:
    if compressor == "powersgd":
        return AllReduce(group=group, compressor="powersgd", powersgd_rank=powersgd_rank)
    return AllReduce(group=group, compressor=compressor)  # type: ignore[arg-type]


def _shard_bytes(var: Variable, shards: int) -> list[int]:
    """Bytes of each axis-0 shard (AutoDist sizes: the first ``dim % shards`` get one more row)."""
    dim = var.shape[0]
    row = var.nbytes // dim
    base, rem = divmod(dim, shards)
    return [(base + (1 if i < rem else 0)) * row for i in range(shards)]


def _axis0_shards(var: Variable, cap: int) -> int:
    """AutoDist's shard count (smallest divisor >= 2 of axis 0), capped; < 2 means no partition."""
    if not var.shape or var.shape[0] < 2:
        return 1
    return min(smallest_divisor(var.shape[0]), var.shape[0], cap)


class _Servers:
    """Byte loads of the PS candidates (every node, in cluster order)."""

    def __init__(self, domain: Domain) -> None:
        self.names = list(domain.cluster.node_names)
        self.load = [0] * len(self.names)

    def least_loaded(self) -> int:
        return min(range(len(self.load)), key=self.load.__getitem__)  # first on ties

    def place(self, nbytes: int) -> str:
        i = self.least_loaded()
        self.load[i] += nbytes
        return self.names[i]

    def place_shards(self, shard_bytes: list[int]) -> list[str]:
        """AutoDist: shards go to the ``len(shard_bytes)`` least-loaded servers (the sorted server
        list repeated when there are more shards than servers)."""
        order = sorted(range(len(self.load)), key=self.load.__getitem__)  # stable: cluster order
        out = []
        for k, b in enumerate(shard_bytes):
            i = order[k % len(order)]
            self.load[i] += b
            out.append(self.names[i])
        return out


def _strategy(name: str, domain: Domain, nodes: list[VarConfig]) -> Strategy:
    return Strategy(id=f"{name}-{domain.name}", kind=name, nodes=tuple(nodes))


def _sparse_on_ps(var: Variable, servers: _Servers) -> VarConfig:
    return VarConfig(var_name=var.name, synchronizer=PS(destination=servers.place(var.nbytes)))


# -- builders ----------------------------------------------------------------------------------


def ps(domain: Domain, *, local_replication: bool = False) -> Strategy:
    """Every variable on one parameter server: the chief node."""
    sync = PS(
        destination=domain.cluster.chief.name,
        local_replication=_replication(domain, local_replication),
    )
    nodes = [VarConfig(var_name=v.name, synchronizer=sync) for v in domain.model.variables]
    return _strategy("ps", domain, nodes)


def ps_lb(domain: Domain, *, local_replication: bool = False) -> Strategy:
    """Parameter servers on every node; each variable, in forward order, goes to the server with
    the fewest bytes so far (ties: cluster order)."""
    lr = _replication(domain, local_replication)
    servers = _Servers(domain)
    nodes = [
        VarConfig(
            var_name=v.name,
            synchronizer=PS(destination=servers.place(v.nbytes), local_replication=lr),
        )
        for v in domain.model.variables
    ]
    return _strategy("ps_lb", domain, nodes)


def partitioned_ps(
    domain: Domain, *, local_replication: bool = False, max_shards: int | None = None
) -> Strategy:
    """Every variable split along axis 0 into ``smallest_divisor(dim0)`` shards (AutoDist: 2 for
    even dims, ``dim0`` for primes), capped at ``max_shards`` (default: the number of nodes — more
    shards than servers would put two shards of one variable on the same server, which gains a
    parameter server nothing; a capped count may split unevenly). The shards of a variable go to
    the least-loaded servers. No partitioning on a one-node cluster (a single server), nor for
    scalars and variables whose axis 0 has length 1; those go to the least-loaded server."""
    _check_max_shards(max_shards)
    lr = _replication(domain, local_replication)
    servers = _Servers(domain)
    num_nodes = domain.cluster.num_nodes
    cap = num_nodes if max_shards is None else max_shards
    nodes = []
    for v in domain.model.variables:
        shards = _axis0_shards(v, cap) if num_nodes > 1 else 1
        if shards < 2:
            dest = servers.place(v.nbytes)
            nodes.append(
                VarConfig(var_name=v.name, synchronizer=PS(destination=dest, local_replication=lr))
            )
            continue
        dests = servers.place_shards(_shard_bytes(v, shards))
        syncs = tuple(PS(destination=d, local_replication=lr) for d in dests)
        nodes.append(
            VarConfig(
                var_name=v.name, partition=Partition(axis=0, shards=shards, synchronizers=syncs)
            )
        )
    return _strategy("partitioned_ps", domain, nodes)


def all_reduce(
    domain: Domain,
    *,
    chunk_size: int = 128,
    compressor: str = "none",
    powersgd_rank: int = 1,
) -> Strategy:
    """Every dense variable all-reduced; variable ``i`` (index over all variables in forward order,
    as in AutoDist) joins group ``i // chunk_size``. Sparse variables: PS, greedy."""
    _check_chunk(chunk_size)
    _check_compressor(compressor, powersgd_rank)
    servers = _Servers(domain)
    nodes = []
    for i, v in enumerate(domain.model.variables):
        if v.sparse:
            nodes.append(_sparse_on_ps(v, servers))
        else:
            sync = _ar(i // chunk_size, compressor, powersgd_rank)
            nodes.append(VarConfig(var_name=v.name, synchronizer=sync))
    return _strategy("all_reduce", domain, nodes)


def partitioned_ar(
    domain: Domain,
    *,
    chunk_size: int = 128,
    compressor: str = "none",
    powersgd_rank: int = 1,
    max_shards: int = 8,
) -> Strategy:
    """Every variable split along axis 0 into ``smallest_divisor(dim0)`` shards (capped at
    ``max_shards``; scalars and length-1 axes stay whole); every dense shard all-reduced, grouped by
    a running counter over all shards in forward order: piece ``c`` joins group
    ``c // chunk_size`` (AutoDist). Shards of sparse variables go to parameter servers, each to
    the least-loaded one."""
    _check_chunk(chunk_size)
    _check_compressor(compressor, powersgd_rank)
    _check_max_shards(max_shards)
    servers = _Servers(domain)
    nodes = []
    counter = 0
    for v in domain.model.variables:
        shards = _axis0_shards(v, max_shards)
        if shards < 2:
            if v.sparse:
                nodes.append(_sparse_on_ps(v, servers))
            else:
                sync = _ar(counter // chunk_size, compressor, powersgd_rank)
                nodes.append(VarConfig(var_name=v.name, synchronizer=sync))
            counter += 1
            continue
        syncs: tuple[PS | AllReduce, ...]
        if v.sparse:
            syncs = tuple(PS(destination=servers.place(b)) for b in _shard_bytes(v, shards))
        else:
            syncs = tuple(
                _ar((counter + k) // chunk_size, compressor, powersgd_rank) for k in range(shards)
            )
        counter += shards
        nodes.append(
            VarConfig(
                var_name=v.name, partition=Partition(axis=0, shards=shards, synchronizers=syncs)
            )
        )
    return _strategy("partitioned_ar", domain, nodes)


def parallax(domain: Domain, *, chunk_size: int = 128) -> Strategy:
    """Parallax: dense variables all-reduced (variable ``i`` of all variables joins group
    ``i // chunk_size``), sparse variables on parameter servers with greedy byte load balancing
    and no local replication."""
    _check_chunk(chunk_size)
    servers = _Servers(domain)
    nodes = []
    for i, v in enumerate(domain.model.variables):
        if v.sparse:
            nodes.append(_sparse_on_ps(v, servers))
        else:
            nodes.append(VarConfig(var_name=v.name, synchronizer=AllReduce(group=i // chunk_size)))
    return _strategy("parallax", domain, nodes)


def ddp(
    domain: Domain,
    *,
    bucket_cap_mb: float = 25.0,
    first_bucket_mb: float = 1.0,
    compressor: str = "none",
    powersgd_rank: int = 1,
) -> Strategy:
    """What ``torch.nn.parallel.DistributedDataParallel`` does: every dense variable all-reduced in
    buckets filled in reverse forward order (gradients become ready backwards), the first bucket
    capped at ``first_bucket_mb`` MiB and the others at ``bucket_cap_mb`` MiB; groups are numbered
    in bucket order (group 0 holds the last variables). A bucket never exceeds its cap, except a
    single tensor larger than the cap, which gets a bucket of its own (DDP closes a bucket only
    once it reaches the cap, so its buckets may overshoot by one tensor). Sparse variables: PS,
    greedy. Buckets are not split by dtype."""
    for label, val in (("bucket_cap_mb", bucket_cap_mb), ("first_bucket_mb", first_bucket_mb)):
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not val > 0:
            raise ConfigError(f"{label} must be a number > 0 (MiB), got {val!r}")
    _check_compressor(compressor, powersgd_rank)
    variables = domain.model.variables
    group_of: dict[str, int] = {}
    group, filled, cap = 0, 0, first_bucket_mb * MIB
    for v in reversed(variables):
        if v.sparse:
            continue
        if filled and filled + v.nbytes > cap:
            group, filled, cap = group + 1, 0, bucket_cap_mb * MIB
        group_of[v.name] = group
        filled += v.nbytes
    servers = _Servers(domain)
    nodes = []
    for v in variables:
        if v.sparse:
            nodes.append(_sparse_on_ps(v, servers))
        else:
            sync = _ar(group_of[v.name], compressor, powersgd_rank)
            nodes.append(VarConfig(var_name=v.name, synchronizer=sync))
    return _strategy("ddp", domain, nodes)


#: the builders by name
BUILDERS: dict[str, Callable[..., Strategy]] = {
    "ps": ps,
    "ps_lb": ps_lb,
    "partitioned_ps": partitioned_ps,
    "all_reduce": all_reduce,
    "partitioned_ar": partitioned_ar,
    "parallax": parallax,
    "ddp": ddp,
}


def builder_names() -> list[str]:
    return list(BUILDERS)


def build(name: str, domain: Domain, **options: Any) -> Strategy:
    """The strategy of builder ``name`` for ``domain``; ``options`` are the builder's keywords."""
    try:
        fn = BUILDERS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown strategy builder {name!r} (known: {', '.join(BUILDERS)})"
        ) from None
    try:
        inspect.signature(fn).bind(domain, **options)
    except TypeError as e:
        known = [p for p in inspect.signature(fn).parameters if p != "domain"]
        raise ConfigError(
            f"strategy builder {name!r}: {e} (options: {', '.join(known) or 'none'})"
        ) from e
    return fn(domain, **options)
