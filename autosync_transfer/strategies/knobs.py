"""A fixed-length encoding of the strategy space, for black-box optimizers (Optuna TPE).

The sampler's space has a decision per variable, so its dimension depends on the model. A
black-box optimizer needs a fixed set of parameters instead: :data:`KNOBS` describes the space
with eleven knobs that treat variables by class — sparse, large dense (at least
``2**large_bytes_log2`` bytes) and small dense — and :func:`decode` turns one assignment into a
valid strategy deterministically:

* sparse variables: parameter servers, ``sparse_shards`` shards along axis 0;
* large / small dense variables: ``large_sync`` / ``small_sync`` (``ps`` or ``ar``), large ones
  split along axis 0 into ``large_shards`` pieces;
* all-reduce pieces: fused into ``ar_groups`` contiguous groups of equal bytes in forward order,
  compressed with ``compressor`` (``powersgd`` at ``powersgd_rank``);
* parameter-server pieces: placed largest first on the node whose load relative to its
  bandwidth share is lowest (``ps_placement='bandwidth'``) or with the fewest bytes
  (``'bytes'``); ``local_replication`` when some node runs more than one worker.

Shard counts are clipped to the variable's axis-0 length. Every decoded strategy validates; the
hand-optimized builders' families (PS, PS-LB, partitioned PS, all-reduce, Parallax, DDP-like
bucketing) are all reachable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

__all__ = ["Knob", "KNOBS", "decode", "knob_names"]


@dataclass(frozen=True)
class Knob:
    """One parameter: ``choices`` (categorical) or an integer range ``low..high`` (inclusive)."""

    name: str
    choices: tuple[Any, ...] = ()
    low: int = 0
    high: int = 0

    @property
    def categorical(self) -> bool:
        return bool(self.choices)

    def check(self, value: Any) -> Any:
        if self.categorical:
            if value not in self.choices:
                raise ConfigError(f"knob {self.name} must be one of {list(self.choices)}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ConfigError(f"knob {self.name} must be an integer in [{self.low}, {self.high}], got {value!r}")
        return value


#: the encoded space
KNOBS: tuple[Knob, ...] = (
    Knob("large_bytes_log2", low=12, high=26),
    Knob("large_sync", choices=("ps", "ar")),
    Knob("small_sync", choices=("ps", "ar")),
    Knob("large_shards", low=1, high=16),
    Knob("sparse_shards", low=1, high=16),
    Knob("ar_groups", low=1, high=20),
    Knob("compressor", choices=("none", "fp16", "powersgd")),
    Knob("powersgd_rank", choices=(1, 2, 4)),
    Knob("ps_placement", choices=("bandwidth", "bytes")),
    Knob("local_replication", choices=(False, True)),
)


def knob_names() -> list[str]:
    return [k.name for k in KNOBS]


class _Placer:
    def __init__(self, domain: Domain, by_bandwidth: bool) -> None:
        nodes = domain.cluster.nodes
        self.names = [n.name for n in nodes]
        total = sum(n.bandwidth_gbps for n in nodes)
        self.share = [n.bandwidth_gbps / total if by_bandwidth else 1.0 / len(nodes) for n in nodes]
        self.load = [0] * len(nodes)

    def place(self, nbytes: int, avoid: set[int] | None = None) -> int:
        cand = [i for i in range(len(self.names)) if not avoid or i not in avoid] or list(range(len(self.names)))
        i = min(cand, key=lambda j: ((self.load[j] + nbytes) / self.share[j], j))
        self.load[i] += nbytes
        return i


def _shard_bytes(nbytes: int, dim: int, shards: int) -> list[int]:
    row = nbytes // dim
    base, rem = divmod(dim, shards)
    return [(base + (1 if i < rem else 0)) * row for i in range(shards)]


def decode(params: Mapping[str, Any], domain: Domain, *, strategy_id: str | None = None) -> Strategy:
    """The strategy that knob assignment ``params`` (every name of :data:`KNOBS`) encodes."""
    unknown = sorted(set(params) - set(knob_names()))
    if unknown:
        raise ConfigError(f"unknown knob {unknown[0]!r} (known: {', '.join(knob_names())})")
    p = {}
    for k in KNOBS:
        if k.name not in params:
            raise ConfigError(f"knob {k.name} is missing")
        p[k.name] = k.check(params[k.name])
    variables = domain.model.variables
    threshold = 2 ** p["large_bytes_log2"]
    replicate = p["local_replication"] and any(n.workers > 1 for n in domain.cluster.nodes)
    placer = _Placer(domain, p["ps_placement"] == "bandwidth")

    def shards_of(v: Any, wanted: int) -> int:
        if wanted < 2 or not v.shape or v.shape[0] < 2:
            return 1
        return min(wanted, v.shape[0])

    # pieces: (variable index, shard index, bytes, kind) in forward order
    plan: list[tuple[int, int, int, str]] = []
    shard_count: list[int] = []
    for i, v in enumerate(variables):
        if v.sparse:
            kind, wanted = "ps", p["sparse_shards"]
        elif v.nbytes >= threshold:
            kind, wanted = p["large_sync"], p["large_shards"]
        else:
            kind, wanted = p["small_sync"], 1
        n = shards_of(v, wanted)
        shard_count.append(n)
        sizes = _shard_bytes(v.nbytes, v.shape[0], n) if n > 1 else [v.nbytes]
        plan.extend((i, s, b, kind) for s, b in enumerate(sizes))

    # all-reduce pieces: contiguous groups of ~equal bytes in forward order
    ar = [(i, s, b) for i, s, b, kind in plan if kind == "ar"]
    groups = max(1, min(p["ar_groups"], len(ar)))
    total_ar = sum(b for _, _, b in ar) or 1
    group_of: dict[tuple[int, int], int] = {}
    g, filled = 0, 0
    for i, s, b in ar:
        if filled and filled + b / 2 > total_ar * (g + 1) / groups and g < groups - 1:
            g += 1
        group_of[(i, s)] = g
        filled += b
    # parameter-server pieces: largest first onto the least loaded node (relative to its share)
    dest_of: dict[tuple[int, int], str] = {}
    ps_pieces = sorted(((b, i, s) for i, s, b, kind in plan if kind == "ps"), key=lambda t: (-t[0], t[1], t[2]))
    used: dict[int, set[int]] = {}
    for b, i, s in ps_pieces:
        node = placer.place(b, used.setdefault(i, set()))
        used[i].add(node)
        dest_of[(i, s)] = placer.names[node]

    def sync(i: int, s: int, kind: str) -> PS | AllReduce:
        if kind == "ps":
            return PS(destination=dest_of[(i, s)], local_replication=replicate)
        if p["compressor"] == "powersgd":
            return AllReduce(group=group_of[(i, s)], compressor="powersgd", powersgd_rank=p["powersgd_rank"])
        return AllReduce(group=group_of[(i, s)], compressor=p["compressor"])

    kinds = {(i, s): kind for i, s, _, kind in plan}
    nodes = []
    for i, v in enumerate(variables):
        n = shard_count[i]
        if n == 1:
            nodes.append(VarConfig(var_name=v.name, synchronizer=sync(i, 0, kinds[(i, 0)])))
        else:
            syncs = tuple(sync(i, s, kinds[(i, s)]) for s in range(n))
            nodes.append(VarConfig(var_name=v.name, partition=Partition(axis=0, shards=n, synchronizers=syncs)))
    if strategy_id is None:
        digest = hashlib.blake2b(json.dumps(p, sort_keys=True).encode(), digest_size=4).hexdigest()
        strategy_id = f"knobs-{digest}"
    return Strategy(id=strategy_id, kind="knobs", nodes=tuple(nodes))
