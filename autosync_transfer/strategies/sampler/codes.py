"""One integer per synchronizer: how sampled arrays name a piece's synchronizer.

For a space with ``N`` nodes, ``C`` compressor choices and ``K`` PowerSGD rank choices, a PS
synchronizer is ``2 node + replication`` and an all-reduce one ``2 N + (group C + compressor) K
+ rank`` (``compressor`` and ``rank`` index the config's choices; ``rank`` is 0 unless the
compressor is PowerSGD). :class:`SynchronizerCodes` is the one place that writes and reads the
layout; :class:`SynchronizerTable` is its decoding as columns.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from autosync_transfer.strategies.types import COMPRESSORS, PS, AllReduce

__all__ = ["SynchronizerCodes", "SynchronizerTable"]


@dataclass(frozen=True, eq=False)
class SynchronizerTable:
    """Synchronizers as columns, row ``c`` describing code ``c`` (index a column with a batch's
    ``codes`` to get one value per piece)."""

    #: bool: an all-reduce synchronizer (else a PS)
    is_ar: np.ndarray
    #: int64: the PS server (index into the cluster's nodes); -1 for all-reduce
    node: np.ndarray
    #: bool: PS local replication (False for all-reduce)
    replication: np.ndarray
    #: int64: the all-reduce group; -1 for PS
    group: np.ndarray
    #: int64: the compressor, an index into :data:`~autosync_transfer.strategies.types.COMPRESSORS`;
    #: -1 for PS
    compressor: np.ndarray
    #: int64: the PowerSGD rank; 0 unless the compressor is PowerSGD
    powersgd_rank: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """The columns by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SynchronizerCodes:
    """The code layout of one space: its nodes, compressor choices and rank choices."""

    node_names: tuple[str, ...]
    compressors: tuple[str, ...]
    ranks: tuple[int, ...]

    @property
    def _nodes2(self) -> int:
        return 2 * len(self.node_names)

    def ps_codes(self, node: np.ndarray, replication: np.ndarray) -> np.ndarray:
        """Codes of PS synchronizers on ``node`` (indices) with ``replication`` (bool)."""
        return 2 * node + replication

    def ar_codes(self, group: np.ndarray, compressor: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """Codes of all-reduce synchronizers (``compressor``, ``rank``: indices into the choices;
        the rank is dropped unless the compressor is PowerSGD)."""
        is_powersgd = np.array([c == "powersgd" for c in self.compressors], bool)
        rank = np.where(is_powersgd[compressor], rank, 0)
        return self._nodes2 + (group * len(self.compressors) + compressor) * len(self.ranks) + rank

    def synchronizer(self, code: int) -> PS | AllReduce:
        """The synchronizer object of ``code``."""
        if code < self._nodes2:
            node, lr = divmod(code, 2)
            return PS(destination=self.node_names[node], local_replication=bool(lr))
        rest, rank = divmod(code - self._nodes2, len(self.ranks))
        group, comp = divmod(rest, len(self.compressors))
        compressor = self.compressors[comp]
        if compressor == "powersgd":
            return AllReduce(group=group, compressor=compressor,  # type: ignore[arg-type]
                             powersgd_rank=self.ranks[rank])
        return AllReduce(group=group, compressor=compressor)  # type: ignore[arg-type]

    def table(self, codes: np.ndarray) -> SynchronizerTable:
        """The decoding of every code ``0..max(codes)`` (and at least every PS code)."""
        nodes2 = self._nodes2
        size = max(nodes2, int(codes.max()) + 1 if codes.size else 0)
        c = np.arange(size, dtype=np.int64)
        is_ar = c >= nodes2
        rest, rank_i = np.divmod(np.maximum(c - nodes2, 0), len(self.ranks))
        group, comp_i = np.divmod(rest, len(self.compressors))
        comp_of = np.array([COMPRESSORS.index(x) for x in self.compressors], np.int64)
        rank_of = np.array(self.ranks, np.int64)
        comp = comp_of[comp_i]
        return SynchronizerTable(
            is_ar=is_ar,
            node=np.where(is_ar, -1, c // 2),
            replication=~is_ar & (c % 2 == 1),
            group=np.where(is_ar, group, -1),
            compressor=np.where(is_ar, comp, -1),
            powersgd_rank=np.where(is_ar & (comp == COMPRESSORS.index("powersgd")),
                                   rank_of[rank_i], 0),
        )
