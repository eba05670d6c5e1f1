"""A compact, positional encoding of strategies for trial stores.

A store holds thousands of strategies of the same few graphs; spelling out every variable name
and every default field makes a record ~40 kB. The compact form lists one token per variable in
the graph's forward order (the record's model fingerprint pins the graph):

- ``"p:n1"`` PS on node ``n1``; ``"p:n1:L"`` with local replication; non-default ``sync`` /
  ``staleness`` add ``:A`` (async) and ``:s<k>``;
- ``"a:3"`` all-reduce in group 3; ``"a:3:fp16"``; ``"a:3:powersgd:2"`` (rank 2);
- ``{"x": axis, "s": [token, ...]}`` a partition along ``axis`` with one token per shard.

``{"v": 1, "id": ..., "kind": ..., "vars": [...]}`` is the whole strategy.
"""

from __future__ import annotations

from typing import Any

from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import SpecError
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

__all__ = ["COMPACT_VERSION", "encode", "decode", "is_compact"]

COMPACT_VERSION = 1


def _tok(s: PS | AllReduce) -> str:
    if isinstance(s, PS):
        t = f"p:{s.destination}"
        if s.local_replication:
            t += ":L"
        if not s.sync:
            t += ":A"
        if s.staleness:
            t += f":s{s.staleness}"
        return t
    t = f"a:{s.group}"
    if s.compressor != "none":
        t += f":{s.compressor}"
        if s.compressor == "powersgd":
            t += f":{s.powersgd_rank}"
    return t


def _sync(tok: str) -> PS | AllReduce:
    parts = tok.split(":")
    if parts[0] == "p" and len(parts) >= 2:
        flags = parts[2:]
        bad = [f for f in flags if f not in ("L", "A") and not (f[:1] == "s" and f[1:].isdigit())]
        if bad:
            raise ValueError(f"unknown flag {bad[0]!r} in synchronizer token {tok!r}")
        stale = next((int(f[1:]) for f in flags if f.startswith("s")), 0)
        return PS(destination=parts[1], local_replication="L" in flags, sync="A" not in flags,
                  staleness=stale)
    if parts[0] == "a" and len(parts) >= 2:
        comp = parts[2] if len(parts) > 2 else "none"
        rank = int(parts[3]) if len(parts) > 3 else 1
        return AllReduce(group=int(parts[1]), compressor=comp, powersgd_rank=rank)  # type: ignore[arg-type]
    raise ValueError(f"bad synchronizer token {tok!r}")


def encode(strategy: Strategy, graph: ModelGraph) -> dict[str, Any]:
    """Compact form of ``strategy`` (which must configure exactly ``graph``'s variables)."""
    by_var = strategy.by_var()
    if len(by_var) != len(strategy.nodes) or set(by_var) != {v.name for v in graph.variables}:
        raise SpecError(f"strategy {strategy.id!r} does not configure exactly the variables of "
                        f"{graph.name!r}; it cannot be stored compactly")
    out: list[Any] = []
    for v in graph.variables:
        cfg = by_var[v.name]
        if cfg.partition is None:
            assert cfg.synchronizer is not None
            out.append(_tok(cfg.synchronizer))
        else:
            out.append({"x": cfg.partition.axis, "s": [_tok(s) for s in cfg.partition.synchronizers]})
    return {"v": COMPACT_VERSION, "id": strategy.id, "kind": strategy.kind, "vars": out}


def is_compact(data: Any) -> bool:
    return isinstance(data, dict) and "vars" in data and "v" in data


def decode(data: dict[str, Any], graph: ModelGraph) -> Strategy:
    """Inverse of :func:`encode` for the same graph."""
    try:
        if data.get("v") != COMPACT_VERSION:
            raise ValueError(f"unsupported compact version {data.get('v')!r}")
        items = data["vars"]
        if len(items) != len(graph.variables):
            raise ValueError(f"{len(items)} entries for {len(graph.variables)} variables")
        nodes = []
        for v, it in zip(graph.variables, items):
            if isinstance(it, str):
                nodes.append(VarConfig(var_name=v.name, synchronizer=_sync(it)))
            else:
                syncs = tuple(_sync(t) for t in it["s"])
                nodes.append(VarConfig(var_name=v.name, partition=Partition(
                    axis=int(it["x"]), shards=len(syncs), synchronizers=syncs)))
        return Strategy(id=str(data["id"]), kind=str(data.get("kind", "user")), nodes=tuple(nodes))
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"compact strategy {data.get('id', '?')!r} for {graph.name!r}: {e}") from e
