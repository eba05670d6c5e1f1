"""Sampled strategies held as arrays: :class:`StrategyBatch` (the typed arrays) and
:class:`SampledBatch` (a lazy sequence of :class:`Strategy` over them)."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.strategies.sampler.codes import SynchronizerTable
from autosync_transfer.strategies.sampler.objects import StrategyBuilder
from autosync_transfer.strategies.types import Strategy

__all__ = ["SampledBatch", "StrategyBatch", "build_all"]

# strategies built per chunk (see :func:`build_all`)
_CHUNK = 256


@dataclass(frozen=True, eq=False)
class StrategyBatch:
    """``B`` strategies of one domain as read-only arrays, without strategy objects.

    Variables are the domain's, in forward order (``V`` of them). A variable is either whole (one
    piece) or partitioned into shards (one piece per shard); the pieces of strategy ``b`` are
    ``codes[offsets[b]:offsets[b + 1]]``, variable by variable, shard by shard. Each piece's
    synchronizer is a code: a row of :attr:`synchronizers`.
    """

    #: the domain the strategies are for
    domain: Domain
    #: ``[B, V]`` bool: the variable is partitioned
    partitioned: np.ndarray
    #: ``[B, V]`` int64: the partition axis (meaningful where ``partitioned``)
    axis: np.ndarray
    #: ``[B, V]`` int64: pieces of the variable (1, or the shard count)
    pieces: np.ndarray
    #: ``[B + 1]`` int64: where each strategy's pieces start in :attr:`codes`
    offsets: np.ndarray
    #: ``[P]`` int64: the synchronizer of every piece, a row of :attr:`synchronizers`
    codes: np.ndarray
    #: the synchronizer of every code, as columns
    synchronizers: SynchronizerTable

    def __post_init__(self) -> None:
        for name in ("partitioned", "axis", "pieces", "offsets", "codes"):
            getattr(self, name).setflags(write=False)

    def __len__(self) -> int:
        return int(self.pieces.shape[0])

    def rows(self, start: int, stop: int) -> StrategyBatch:
        """Strategies ``start..stop-1`` (views of the same arrays; offsets start at 0)."""
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return StrategyBatch(self.domain, self.partitioned[start:stop], self.axis[start:stop],
                             self.pieces[start:stop], self.offsets[start: stop + 1] - a,
                             self.codes[a:b], self.synchronizers)

    def strategy_arrays(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(partitioned, axis, pieces, codes)`` of strategy ``k``."""
        return (self.partitioned[k], self.axis[k], self.pieces[k],
                self.codes[self.offsets[k]: self.offsets[k + 1]])

    def synchronizer_columns(self) -> dict[str, np.ndarray]:
        """Every piece's synchronizer as columns (pieces of all strategies, in order)."""
        return {k: v[self.codes] for k, v in self.synchronizers.columns().items()}


class SampledBatch(Sequence[Strategy]):
    """Strategies of one :meth:`StrategySampler.sample_batch` call, held as arrays.

    A read-only sequence of :class:`Strategy`: ``batch[i]`` builds the ``i``-th strategy on first
    access (and keeps it), ``batch[a:b]`` is a batch of the same arrays (no object is built),
    :attr:`ids` are the strategies' ids, computed without building them. Search and
    :func:`~autosync_transfer.recommend` score thousands of candidates and build only the ones
    they pick; :class:`~autosync_transfer.rankers.features.Featurizer` reads :attr:`arrays`
    (a :class:`StrategyBatch`) without walking objects.
    """

    __slots__ = ("arrays", "builder", "first", "_built", "_ids")

    def __init__(self, builder: StrategyBuilder, first: int, arrays: StrategyBatch) -> None:
        self.builder = builder
        self.first = first
        self.arrays = arrays
        self._built: dict[int, Strategy] = {}
        self._ids: list[str] | None = None

    @property
    def domain(self) -> Domain:
        return self.arrays.domain

    # the arrays, as attributes of the batch (see :class:`StrategyBatch`)
    @property
    def partitioned(self) -> np.ndarray:
        return self.arrays.partitioned

    @property
    def axis(self) -> np.ndarray:
        return self.arrays.axis

    @property
    def pieces(self) -> np.ndarray:
        return self.arrays.pieces

    @property
    def offsets(self) -> np.ndarray:
        return self.arrays.offsets

    @property
    def codes(self) -> np.ndarray:
        return self.arrays.codes

    def __len__(self) -> int:
        return len(self.arrays)

    def __repr__(self) -> str:
        return (f"SampledBatch({len(self)} strategies of {self.domain.name!r}, sampler seed "
                f"{self.builder.seed}, first index {self.first})")

    def __getitem__(self, i: Any) -> Any:
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                return [self[k] for k in range(start, stop, step)]
            stop = max(start, stop)
            return SampledBatch(self.builder, self.first + start, self.arrays.rows(start, stop))
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"SampledBatch indices must be integers or slices, got {i!r}")
        k = int(i) + n if i < 0 else int(i)
        if not 0 <= k < n:
            raise IndexError(f"strategy index {i} out of range for a batch of {n}")
        s = self._built.get(k)
        if s is None:
            s = self.builder.strategy(*self.arrays.strategy_arrays(k), self.first + k)
            self._built[k] = s
        return s

    def __iter__(self) -> Iterator[Strategy]:
        n = len(self)
        for a in range(0, n, _CHUNK):
            yield from [self[k] for k in range(a, min(n, a + _CHUNK))]

    @property
    def ids(self) -> list[str]:
        """The strategies' ids (as ``batch[i].id``), without building the strategies."""
        if self._ids is None:
            self._ids = [self.builder.strategy_id(*self.arrays.strategy_arrays(k), self.first + k)
                         for k in range(len(self))]
        return self._ids

    def synchronizer_columns(self) -> dict[str, np.ndarray]:
        """Every piece's synchronizer as columns (pieces of all strategies, in order):
        ``is_ar`` (bool), ``node`` (PS server, index into the cluster's nodes; -1 for AR),
        ``replication`` (bool, PS), ``group`` (AR group id; -1 for PS), ``compressor`` (index
        into :data:`~autosync_transfer.strategies.types.COMPRESSORS`; -1 for PS) and
        ``powersgd_rank`` (0 unless PowerSGD)."""
        return self.arrays.synchronizer_columns()

    def synchronizer_table(self) -> dict[str, np.ndarray]:
        """The columns of :meth:`synchronizer_columns` by code (``synchronizer_table()[k][codes]``
        is ``synchronizer_columns()[k]``)."""
        return self.arrays.synchronizers.columns()


def build_all(batch: SampledBatch) -> list[Strategy]:
    """Every strategy of ``batch``, built chunk by chunk.

    A batch creates hundreds of thousands of small acyclic objects that stay alive; the cyclic
    garbage collector's repeated scans of them cost about half of the building time and can free
    nothing. The collector keeps running; after each chunk, what has been built so far is moved
    out of its scans (``gc.freeze``) and everything is handed back (``gc.unfreeze``) at the end,
    unless the process had frozen objects of its own (then nothing is frozen).
    """
    n = len(batch)
    out: list[Strategy] = []
    freeze = gc.get_freeze_count() == 0
    try:
        for a in range(0, n, _CHUNK):
            out.extend(batch[k] for k in range(a, min(n, a + _CHUNK)))
            if freeze:
                gc.freeze()
    finally:
        if freeze:
            gc.unfreeze()
    return out
