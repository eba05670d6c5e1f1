"""Strategy objects from sampled arrays, built without re-validation and shared where they recur."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from pydantic import BaseModel

from autosync_transfer.strategies.sampler.codes import SynchronizerCodes
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

__all__ = ["StrategyBuilder", "built"]

# the per-builder caches of shared objects are cleared when they grow past this many entries
_CACHE_LIMIT = 200_000

_SET_SYNC = frozenset(("var_name", "synchronizer"))
_SET_PARTITIONED = frozenset(("var_name", "partition"))
_SET_PARTITION = frozenset(("axis", "shards", "synchronizers"))
_new = object.__new__
_setattr = object.__setattr__


def built(cls: type[BaseModel], values: dict[str, Any], fields_set: frozenset[str]) -> Any:
    """An instance of ``cls`` holding ``values`` (every field, already valid), without validation.

    This is what ``cls.model_construct(**values)`` does, minus its per-call bookkeeping (defaults
    lookup, alias handling), which dominated sampling time; the tests check that such objects
    equal validated ones.
    """
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", set(fields_set))
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


class StrategyBuilder:
    """Builds the :class:`Strategy` of one sampled strategy's arrays (``partitioned``, ``axis``,
    ``pieces`` over the variables ``names``; one synchronizer code per piece).

    Synchronizer objects and whole-variable configs are frozen, so they are shared between the
    strategies of a sampler (cached by code). Ids are ``s{seed}-{k}-{content hash}``.
    """

    def __init__(self, names: list[str], codes: SynchronizerCodes, seed: int) -> None:
        self.names = names
        self.codes = codes
        self.seed = seed
        self._sync_cache: dict[int, PS | AllReduce] = {}
        self._var_cache: dict[int, VarConfig] = {}  # key: code * #vars + var

    def strategy(self, partitioned: np.ndarray, axis: np.ndarray, pieces: np.ndarray,
                 codes: np.ndarray, k: int) -> Strategy:
        """The ``k``-th strategy of the sampler, from its arrays."""
        if len(self._sync_cache) > _CACHE_LIMIT or len(self._var_cache) > _CACHE_LIMIT:
            self._sync_cache.clear()
            self._var_cache.clear()
        code_list = codes.tolist()
        cache = self._sync_cache
        for c in set(code_list).difference(cache):
            cache[c] = self.codes.synchronizer(c)
        syncs = list(map(cache.__getitem__, code_list))

        var_cache = self._var_cache
        names = self.names
        nv = len(names)
        nodes: list[VarConfig] = []
        starts = (np.cumsum(pieces) - pieces).tolist()
        for v, is_part, n, ax, pos in zip(
            range(nv), partitioned.tolist(), pieces.tolist(), axis.tolist(), starts
        ):
            if not is_part:  # whole-variable configs recur across strategies: share them
                key = code_list[pos] * nv + v
                cfg = var_cache.get(key)
                if cfg is None:
                    cfg = built(
                        VarConfig,
                        {"var_name": names[v], "synchronizer": syncs[pos], "partition": None},
                        _SET_SYNC,
                    )
                    var_cache[key] = cfg
            else:
                part = built(
                    Partition,
                    {"axis": ax, "shards": n, "synchronizers": tuple(syncs[pos : pos + n])},
                    _SET_PARTITION,
                )
                cfg = built(
                    VarConfig,
                    {"var_name": names[v], "synchronizer": None, "partition": part},
                    _SET_PARTITIONED,
                )
            nodes.append(cfg)

        return Strategy.model_construct(
            id=self.strategy_id(partitioned, axis, pieces, codes, k), kind="sampled",
            nodes=tuple(nodes)
        )

    def strategy_id(self, partitioned: np.ndarray, axis: np.ndarray, pieces: np.ndarray,
                    codes: np.ndarray, k: int) -> str:
        """The id of the ``k``-th strategy (without building it)."""
        h = hashlib.blake2b(digest_size=4)
        for arr in (partitioned, np.where(partitioned, axis, -1), pieces, codes):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
        return f"s{self.seed}-{k}-{h.hexdigest()}"
