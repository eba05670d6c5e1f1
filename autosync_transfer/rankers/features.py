"""Featurization of strategies for learned simulators (rankers): versioned, model- and cluster-free.

A learned ranker never sees a :class:`~autosync_transfer.strategies.types.Strategy`; it sees the
:class:`StrategyFeatures` of this module:

``rows`` ``[R, F_row]``
    One row per partition row (a whole variable, or one shard of a partitioned variable), in
    forward variable order (shards in shard order): **z_raw** (what the strategy does with the row,
    described relative to the model and the cluster) followed by **z_pre** (the analytical cost
    model's per-row terms, see :mod:`autosync_transfer.rankers.costmodel`).
``agg`` ``[F_agg]``
    The cost model's terms aggregated over servers and all-reduce groups (AutoSync's 12 aggregates,
    computed from the improved model) plus a few strategy and cluster shape numbers, and the
    step-time simulator's prediction and terms (``sim_*``, :mod:`~autosync_transfer.rankers.stepsim`,
    with the featurizer's simulator: its profile and calibration when given), so that a learned
    ranker learns the residual of the simulation. Schema version 2 added the ``sim_*`` columns;
    version 3 keeps them and changes their values: the simulator no longer slows all-reduce
    rings by the host's compute slowdown (``StepSimConfig.ring_shares_cores``); version 4
    changes them again: a row-sparse exchange is replayed as its chain of dependent steps;
    version 5: a parameter-server piece's pushes and answers cross a NIC one after the other,
    at the links' rate, with the calibrated per-piece costs and a chain across servers.
``server_feats`` ``[S, F_srv]`` / ``group_feats`` ``[G, F_grp]``
    One row per parameter server used (a node hosting at least one PS row) and per all-reduce
    group, for graph rankers; ``row_server`` / ``row_group`` connect rows to them.

Transfer across models and clusters
    No column is a server id or a group id (AutoSync's one-hot ids tie a simulator to one cluster
    and one group numbering). Servers and groups are described by permutation-invariant properties
    (load share, bandwidth relative to the cluster mean, workers on the node / world size, group
    byte share), sizes are shares of the model's bytes, and times are divided by the domain's
    reference time :func:`reference_time_s` (all-reduce of the whole model in one group), so the
    same numbers mean the same thing on a 3-node and on an 8-node cluster, and for a small and a
    large model. ``row_server`` / ``row_group`` are per-strategy local indices (0.. in order of
    first appearance in forward order) used only to connect rows to server/group nodes, never as
    features. Renaming or reordering nodes, or renumbering groups, leaves every feature unchanged.

Decoding
    Strategies are decoded and validated by the simulator's
    :class:`~autosync_transfer.rankers.rows.RowDecoder` (one implementation of the vectorized
    validity rules and of reading a sampler's batch), shared by the featurizer and the simulator.

Performance
    :class:`Featurizer` computes the per-domain tables once and featurizes strategies in batches.
    Strategy objects are walked once with C-level iteration (synchronizer objects shared between
    strategies, as the sampler makes them, are resolved once, by identity); a
    :class:`~autosync_transfer.strategies.sampler.SampledBatch` is read from the sampler's arrays
    (its :class:`~autosync_transfer.strategies.sampler.StrategyBatch`) instead, without building
    or walking any object. Everything else runs vectorized over all rows of a batch: the cost
    model's terms are :func:`~autosync_transfer.rankers.costmodel.terms` on the decoded rows (the
    one implementation of its formulas), the ``sim_*`` columns the simulator's
    :meth:`~autosync_transfer.rankers.stepsim.StepSimulator.simulate_rows` on the same rows; this
    module only normalizes and aggregates them. :meth:`Featurizer.aggregates`
    computes the ``agg`` table alone (what the ``linear`` ranker reads), skipping every per-row
    output; ``benchmarks/scoring_throughput.py`` measures both paths.

This module imports numpy (and the sampler's types); :func:`collate` imports torch inside.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError
from autosync_transfer.rankers.costmodel import CostModelConfig, Terms, _Context, terms
from autosync_transfer.rankers.rows import Columns, RowDecoder
from autosync_transfer.rankers.stepsim import StepSimulator
from autosync_transfer.strategies.sampler import SampledBatch
from autosync_transfer.strategies.types import Strategy

if TYPE_CHECKING:
    import torch

__all__ = [
    "FEATURE_SCHEMA_VERSION",
    "FeatureSchema",
    "FEATURE_SCHEMA",
    "StrategyFeatures",
    "Featurizer",
    "featurize",
    "featurize_many",
    "reference_time_s",
    "collate",
]

#: bump whenever a column is added, removed, reordered or changes meaning, or the simulator's
#: terms on the shipped physics move (tests/rankers/test_stepsim_behaviour.py); v12: the
#: shipped AMD physics measured under the median protocol (calibrations v4), v11's code
FEATURE_SCHEMA_VERSION = 12

_MAX_POWERSGD_RANK = 64  # AllReduce.powersgd_rank's upper bound
_LOG_FLOOR_S = 1e-9  # seconds added before log10 so that 0 s stays finite (-9)
_ROWS_PER_BATCH = 1 << 17  # rows per batch: the work arrays of a batch stay small
# rows per batch of Featurizer.aggregates: its per-row work arrays (8 bytes a row) then stay at
# 128 KiB, which the C allocator serves from its heap and reuses batch after batch; larger ones
# it maps and unmaps every time, and the page faults of touching fresh pages cost more than the
# arithmetic (2,000 bert-12l strategies: about 6,500/s at 2**17 rows, 15,000/s at 2**14)
_AGG_ROWS_PER_BATCH = 1 << 14


# -- schema --------------------------------------------------------------------------------------

_ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    # z_raw: what the strategy does with the row, relative to the model and the cluster
    ("kind_ps_dense", "1 if a parameter server synchronizes the row and its gradient is dense"),
    ("kind_ps_sparse", "1 if a parameter server synchronizes a row-sparse (embedding) gradient"),
    ("kind_ar", "1 if the row is all-reduced"),
    ("local_replication", "1 if PS with local replication (each node aggregates its workers)"),
    ("comp_none", "AR compressor one-hot: none (all 0 for PS rows)"),
    ("comp_fp16", "AR compressor one-hot: fp16"),
    ("comp_fp16_ef", "AR compressor one-hot: fp16 with error feedback"),
    ("comp_powersgd", "AR compressor one-hot: PowerSGD"),
    ("powersgd_rank", "log2(1 + rank) / log2(1 + 64) for PowerSGD rows, else 0"),
    ("is_shard", "1 if the row is one shard of a partitioned variable"),
    ("log2_shards", "log2 of the number of rows of the row's variable (0 when not partitioned)"),
    ("byte_share", "bytes of the row's tensor / bytes of all trainable variables"),
    ("wire_share", "bytes one worker sends for the row (after compression; sparse: touched "
                   "rows + indices) / model bytes"),
    ("log10_wire_bytes", "log10(1 + bytes one worker sends for the row)"),
    ("is_sparse", "1 if the variable's gradient is row-sparse"),
    ("rows_touched_frac", "sparse: rows touched per worker and step / rows of the shard; "
                          "dense: 1"),
    ("server_load_share", "PS: wire bytes of all PS rows on the row's server / wire bytes of all "
                          "PS rows; AR: 0"),
    ("server_bw_rel", "PS: the server's NIC bandwidth / mean NIC bandwidth of the cluster; AR: "
                      "the ring's bottleneck bandwidth / mean NIC bandwidth"),
    ("server_workers_frac", "PS: workers on the server's node / world size; AR: 0"),
    ("servers_used_frac", "distinct PS servers of the strategy / nodes (same on every row)"),
    ("group_byte_share", "AR: wire bytes of the row's group / wire bytes of all AR rows; PS: 0"),
    ("log2_num_groups", "log2(1 + number of AR groups of the strategy)"),
    ("ps_wire_frac", "wire bytes of PS rows / wire bytes of all rows of the strategy"),
    ("log2_nodes", "log2(nodes of the cluster)"),
    ("log2_world", "log2(workers of the cluster)"),
    ("workers_per_node", "mean workers per node"),
    ("bw_min_max_ratio", "slowest / fastest NIC bandwidth of the cluster"),
    ("var_position", "position of the row's variable in forward order / (variables - 1)"),
    # z_pre: the analytical model's terms, divided by the domain's reference time
    ("pre_transmission", "cost model: the row's transmission_s / reference time"),
    ("pre_latency", "cost model: the row's latency_s / reference time"),
    ("pre_messages", "cost model: messages of the row / (2 x world size); PS: pushes + pulls the "
                     "server handles, AR: 2 (W - 1) ring messages per collective"),
    ("pre_server_time", "PS: the server node's PS time per_node_nic_s / reference time; AR: 0"),
    ("pre_group_time", "AR: the time of the row's group / reference time; PS: 0"),
    ("pre_total", "the strategy's bottleneck time total_s / reference time (same on every row)"),
    ("log10_transmission_s", "log10(1e-9 + the row's transmission_s)"),
    ("log10_latency_s", "log10(1e-9 + the row's latency_s)"),
)

_AGG_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ps_time_max", "max over servers of the server's summed row times (per_server) / ref"),
    ("ps_time_sum", "sum over servers of per_server / ref"),
    ("ps_bytes_max", "max over servers of the wire bytes per worker of its rows / model bytes"),
    ("ps_bytes_sum", "sum over servers of the same (all PS wire bytes) / model bytes"),
    ("ps_msgs_max", "max over servers of the pushes + pulls it handles / (2 W V)"),
    ("ps_msgs_sum", "sum over servers of the same / (2 W V)"),
    ("ar_time_max", "max over AR groups of the group's time / ref"),
    ("ar_time_sum", "sum over AR groups of the group's time (ar_total_s) / ref"),
    ("ar_bytes_max", "max over groups of the group's wire bytes per worker / model bytes"),
    ("ar_bytes_sum", "sum over groups of the same / model bytes"),
    ("ar_msgs_max", "max over groups of its ring messages (2 (W - 1) per collective) / (2 W V)"),
    ("ar_msgs_sum", "sum over groups of the same / (2 W V)"),
    ("total", "bottleneck time total_s / ref"),
    ("sum", "sequential time sum_s / ref"),
    ("ps_nic_max", "max over nodes of the node's PS time per_node_nic_s / ref"),
    ("log10_total_s", "log10(1e-9 + total_s)"),
    ("log10_ref_s", "log10 of the domain's reference time (constant within a domain)"),
    ("servers_used_frac", "distinct PS servers / nodes"),
    ("log2_num_groups", "log2(1 + AR groups)"),
    ("ps_wire_frac", "wire bytes of PS rows / wire bytes of all rows"),
    ("log2_rows_per_var", "log2(rows / variables): how finely the strategy partitions"),
    ("log2_nodes", "log2(nodes)"),
    ("log2_world", "log2(world size)"),
    ("workers_per_node", "mean workers per node"),
    ("bw_min_max_ratio", "slowest / fastest NIC bandwidth"),
    # the step-time simulator's prediction and terms (rankers.stepsim), / ref
    ("sim_step", "simulated step time step_s / ref"),
    ("sim_exposed_compute", "simulated compute on the critical path / ref"),
    ("sim_exposed_comm", "simulated synchronization on the critical path / ref"),
    ("sim_compression", "simulated compression and fusion copies / ref"),
    ("sim_cpu_contention", "simulated time added by processes sharing cores / ref"),
    ("sim_nic_contention", "simulated time added by flows sharing NICs / ref"),
    ("sim_ar", "simulated work of the AR thread / ref"),
    ("sim_ps", "simulated PS work of the busiest NIC / ref"),
    ("log10_sim_step_s", "log10(1e-9 + simulated step time in seconds)"),
)

_SERVER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("bw_rel", "the node's NIC bandwidth / mean NIC bandwidth"),
    ("workers_frac", "workers on the node / world size"),
    ("latency_rel", "the node's per-message latency / mean latency of the cluster"),
    ("load_share", "wire bytes of its PS rows / wire bytes of all PS rows"),
    ("bytes_share", "wire bytes of its PS rows / model bytes"),
    ("rows_frac", "its PS rows / all rows"),
    ("time", "per_server (sum of its rows' times) / ref"),
    ("nic_time", "the node's PS time per_node_nic_s / ref"),
    ("msgs", "pushes + pulls it handles / (2 W V)"),
    ("is_bottleneck", "1 if the node's per_node_nic_s is the largest (ties: all of them)"),
    ("sparse_frac", "share of its wire bytes from sparse rows"),
    ("replicated_frac", "share of its rows with local replication"),
)

_GROUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("byte_share", "the group's wire bytes / wire bytes of all AR rows"),
    ("bytes_share", "the group's wire bytes / model bytes"),
    ("time", "the group's time / ref"),
    ("rows_frac", "its rows / all rows"),
    ("two_collectives", "1 if it holds a PowerSGD tensor (two collectives, P then Q)"),
    ("compressed_frac", "share of its rows with a compressor other than none"),
    ("position_mean", "mean forward position (fraction) of its rows' variables"),
    ("position_min", "first forward position (fraction) among its rows"),
    ("position_max", "last forward position (fraction) among its rows"),
)


@dataclass(frozen=True, slots=True)
class FeatureSchema:
    """Names and meanings of every feature column, with the schema version.

    A trained ranker stores the schema it was trained on; :meth:`to_dict` gives its JSON form.
    """

    version: int
    row_columns: tuple[str, ...]
    agg_columns: tuple[str, ...]
    server_columns: tuple[str, ...]
    group_columns: tuple[str, ...]
    descriptions: tuple[tuple[str, str, str], ...]  # (table, column, meaning)

    @property
    def num_row(self) -> int:
        return len(self.row_columns)

    @property
    def num_agg(self) -> int:
        return len(self.agg_columns)

    @property
    def num_server(self) -> int:
        return len(self.server_columns)

    @property
    def num_group(self) -> int:
        return len(self.group_columns)

    def row_index(self, name: str) -> int:
        return self.row_columns.index(name)

    def agg_index(self, name: str) -> int:
        return self.agg_columns.index(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "row_columns": list(self.row_columns),
            "agg_columns": list(self.agg_columns),
            "server_columns": list(self.server_columns),
            "group_columns": list(self.group_columns),
        }

    def describe(self) -> str:
        """A plain-text table of every column: table, index, name, meaning."""
        width = max(len(c) for _, c, _ in self.descriptions)
        lines = [f"feature schema v{self.version} (ref = reference_time_s of the domain; "
                 f"W = world size, V = variables)"]
        table = ""
        index = 0
        for t, col, text in self.descriptions:
            if t != table:
                table, index = t, 0
                n = {"row": self.num_row, "agg": self.num_agg, "server": self.num_server,
                     "group": self.num_group}[t]
                lines.append(f"[{t}] {n} columns")
            lines.append(f"  {index:3d}  {col:<{width}}  {text}")
            index += 1
        return "\n".join(lines)


FEATURE_SCHEMA = FeatureSchema(
    version=FEATURE_SCHEMA_VERSION,
    row_columns=tuple(c for c, _ in _ROW_COLUMNS),
    agg_columns=tuple(c for c, _ in _AGG_COLUMNS),
    server_columns=tuple(c for c, _ in _SERVER_COLUMNS),
    group_columns=tuple(c for c, _ in _GROUP_COLUMNS),
    descriptions=tuple(
        (table, c, d)
        for table, cols in (("row", _ROW_COLUMNS), ("agg", _AGG_COLUMNS),
                            ("server", _SERVER_COLUMNS), ("group", _GROUP_COLUMNS))
        for c, d in cols
    ),
)

_R = {c: i for i, c in enumerate(FEATURE_SCHEMA.row_columns)}
_A = {c: i for i, c in enumerate(FEATURE_SCHEMA.agg_columns)}
_S = {c: i for i, c in enumerate(FEATURE_SCHEMA.server_columns)}
_G = {c: i for i, c in enumerate(FEATURE_SCHEMA.group_columns)}


# -- features of one strategy -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StrategyFeatures:
    """The features of one strategy on one domain (float32 features, int64 indices).

    ``rows [R, F_row]``, ``row_var [R]`` (variable index in forward order), ``row_server [R]``
    (local server index, -1 for AR rows), ``row_group [R]`` (local group index, -1 for PS rows),
    ``agg [F_agg]``, ``server_feats [S, F_srv]``, ``group_feats [G, F_grp]``; ``num_vars`` is the
    number of variables of the model. Columns: :data:`FEATURE_SCHEMA`.
    """

    strategy_id: str
    rows: np.ndarray
    row_var: np.ndarray
    num_vars: int
    row_server: np.ndarray
    row_group: np.ndarray
    agg: np.ndarray
    server_feats: np.ndarray
    group_feats: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.rows.shape[0])

    @property
    def num_servers(self) -> int:
        return int(self.server_feats.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_feats.shape[0])


# -- per-domain tables --------------------------------------------------------------------------


def reference_time_s(domain: Domain, config: CostModelConfig | None = None) -> float:
    """The domain's time scale: the cost model's time to all-reduce every variable (its full dtype
    bytes, sparse ones counted dense) in one group, uncompressed; ``model bytes / ring bandwidth``
    when that is larger (a single worker, whose all-reduce costs nothing). Always > 0."""
    return _Tables(domain, config or CostModelConfig()).ref_s


class _Tables:
    """What featurization needs from a domain, computed once (the cost model's tables in
    ``ctx``)."""

    def __init__(self, domain: Domain, config: CostModelConfig):
        ctx = _Context(domain, config)
        self.ctx = ctx
        model = domain.model
        variables = model.variables
        self.num_vars = len(variables)
        self.position = np.arange(self.num_vars, dtype=np.float64) / max(1, self.num_vars - 1)
        self.model_bytes = float(sum(v.nbytes for v in variables))
        self.num_nodes = ctx.num_nodes
        self.world = ctx.world_size
        nic, lat = ctx.nic_bytes_per_s, ctx.latency_s
        mean_nic = float(nic.mean())
        self.bw_rel = nic / mean_nic
        self.ar_bw_rel = ctx.ar_bytes_per_s / mean_nic
        self.lat_rel = lat / float(lat.mean()) if float(lat.mean()) > 0 else np.ones_like(lat)
        self.workers_frac = ctx.workers / self.world
        self.ref_s = max(
            self.model_bytes * ctx.ring_s_per_byte + ctx.ar_latency_per_collective_s,
            self.model_bytes / ctx.ar_bytes_per_s,
        )
        self.msg_scale = 2.0 * self.world * self.num_vars  # 2 W V
        self.shape_cols = (
            math.log2(self.num_nodes),
            math.log2(self.world),
            self.world / self.num_nodes,
            float(nic.min() / nic.max()),
        )


# -- featurizer -----------------------------------------------------------------------------------


class Featurizer:
    """Featurizes strategies of one domain; the per-domain tables are built on first use and kept.

    ``featurize_many`` validates every strategy (an invalid one raises
    :class:`~autosync_transfer.errors.StrategyValidationError` with the validator's full report).
    """

    def __init__(self, domain: Domain, costmodel_config: CostModelConfig | None = None,
                 simulator: StepSimulator | None = None):
        self.domain = domain
        self.costmodel_config = costmodel_config or CostModelConfig()
        self._tables: _Tables | None = None
        if simulator is not None and simulator.domain.fingerprint != domain.fingerprint:
            raise ConfigError(f"simulator: it simulates domain {simulator.domain.name!r}, not "
                              f"{domain.name!r}")
        self.simulator = simulator or StepSimulator(domain)
        #: strategies -> rows (validity rules, synchronizer codes), shared with the simulator
        self.decoder: RowDecoder = self.simulator.decoder

    @property
    def schema(self) -> FeatureSchema:
        return FEATURE_SCHEMA

    @property
    def tables(self) -> _Tables:
        if self._tables is None:
            self._tables = _Tables(self.domain, self.costmodel_config)
        return self._tables

    @property
    def reference_time_s(self) -> float:
        return self.tables.ref_s

    def featurize(self, strategy: Strategy) -> StrategyFeatures:
        return self.featurize_many([strategy])[0]

    def featurize_many(self, strategies: Sequence[Strategy]) -> list[StrategyFeatures]:
        """Features of every strategy, in order.

        Strategies are featurized in batches of about ``2**17`` rows; the arrays of the strategies
        of one batch are views into one array per batch. A
        :class:`~autosync_transfer.strategies.sampler.SampledBatch` of this domain is read from
        its arrays (its strategy objects are not built).
        """
        out: list[StrategyFeatures] = []
        for batch in self._batches(strategies):
            out.extend(self._batch(batch))
        return out

    def aggregates(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """Only the ``agg`` table of every strategy: ``[n, F_agg]`` float32, row ``i`` equal to
        ``featurize_many(strategies)[i].agg``. Skips every per-row, per-server and per-group
        output (what a ranker on ``agg`` alone, such as ``linear``, needs)."""
        parts = [self._batch(batch, full=False)
                 for batch in self._batches(strategies, _AGG_ROWS_PER_BATCH)]
        if not parts:
            return np.zeros((0, FEATURE_SCHEMA.num_agg), dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _batches(self, strategies: Sequence[Strategy], rows_per_batch: int = _ROWS_PER_BATCH
                 ) -> Iterator[Sequence[Strategy]]:
        return self.decoder.batches(strategies, rows_per_batch)

    # -- one batch ------------------------------------------------------------------------------
    def _columns_of_objects(self, strategies: Sequence[Strategy]) -> Columns:
        return self.decoder._columns_of_objects(strategies)  # noqa: SLF001

    def _columns_of_sampled(self, batch: SampledBatch) -> Columns:
        return self.decoder._columns_of_sampled(batch)  # noqa: SLF001

    def totals(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """The analytical bottleneck time of every strategy, in seconds (float64: the ``total``
        aggregate times the reference time, before rounding to float32), computed like
        :meth:`aggregates`: ``costmodel.estimate(s, domain).total_s``."""
        parts = [self._batch(batch, full=False, totals=True)
                 for batch in self._batches(strategies, _AGG_ROWS_PER_BATCH)]
        if not parts:
            return np.zeros(0, dtype=np.float64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _batch(self, strategies: Sequence[Strategy], full: bool = True,
               totals: bool = False) -> Any:
        """Features of one batch: a list of :class:`StrategyFeatures` (``full``), or only the
        ``agg`` table ``[B, F_agg]`` (float32), which skips every per-row output, or (``totals``)
        only the bottleneck times in seconds (float64)."""
        t = self.tables
        B = len(strategies)
        V, N = t.num_vars, t.num_nodes
        rows = self.decoder.rows(strategies, order=full)
        row_strat, row_var = rows.strat, rows.var
        is_ar, srv, row_sparse = rows.is_ar, rows.server, rows.sparse
        R = row_strat.size
        r_part, r_shards = rows.partitioned, rows.shards
        tensor_bytes = rows.tensor_bytes
        rows_total = rows.rows_total
        if totals:
            return terms(t.ctx, rows, totals_only=True)
        tm = cast(Terms, terms(t.ctx, rows))
        wire, touched, trans, lat = tm.wire, tm.touched, tm.transmission, tm.latency
        lr, comp, rank = tm.replication, tm.compressor, tm.powersgd_rank
        node_ps, total, ar_total = tm.node_ps, tm.total, tm.ar_total
        is_ps = ~is_ar
        # messages in the units of pre_messages (x 2W): AR 2 (W - 1) ring messages a collective
        msgs_eq = np.where(is_ar, tm.messages * 2.0 * (t.world - 1), tm.messages)
        ps_idx = np.flatnonzero(is_ps)
        ar_idx = np.flatnonzero(is_ar)
        K = B * N
        # ---- servers: local index by first appearance -------------------------------------------
        if full:
            s_key, s_keys, s_strat, s_local, S_count = _local_index(
                row_strat[ps_idx], srv[ps_idx], N, B)
            row_server = np.full(R, -1, dtype=np.int64)
            row_server[ps_idx] = s_local[s_key]
        else:
            s_key = row_strat[ps_idx] * N + srv[ps_idx]
        wire_ps = wire[ps_idx]
        srv_bytes = np.bincount(s_key, weights=wire_ps, minlength=K)
        srv_time = tm.per_server.reshape(-1)
        srv_msgs = np.bincount(s_key, weights=msgs_eq[ps_idx], minlength=K)
        srv_rows = np.bincount(s_key, minlength=K).astype(np.float64)
        if full:
            srv_sparse = np.bincount(s_key, weights=wire_ps * row_sparse[ps_idx], minlength=K)
            srv_lr = np.bincount(s_key, weights=lr[ps_idx], minlength=K)
        else:
            S_count = (srv_rows.reshape(B, N) > 0).sum(axis=1)

        # ---- groups: local index by first appearance --------------------------------------------
        GM = tm.groups_width
        KG = B * GM
        g_key = tm.group_key
        if full:
            _, g_keys, g_strat, g_local, G_count = _local_index(
                row_strat[ar_idx], g_key - row_strat[ar_idx] * GM, GM, B)
            row_group = np.full(R, -1, dtype=np.int64)
            row_group[ar_idx] = g_local[g_key]
        grp_bytes, grp_two, grp_time = tm.group_bytes, tm.group_two, tm.group_time
        grp_rows = np.bincount(g_key, minlength=KG).astype(np.float64)
        present = grp_rows > 0
        if not full:
            G_count = present.reshape(B, GM).sum(axis=1)
        grp_msgs = np.where(present, tm.group_collectives * 2.0 * (t.world - 1), 0.0)

        # ---- strategy-level totals --------------------------------------------------------------
        ps_node_max = node_ps.max(axis=1)
        sim = self.simulator.simulate_rows(rows)
        per_server = tm.per_server
        sum_s = tm.sum
        ps_bytes = srv_bytes.reshape(B, N).sum(axis=1)
        ar_bytes = grp_bytes.reshape(B, GM).sum(axis=1)
        all_bytes = ps_bytes + ar_bytes
        rows_per = np.bincount(row_strat, minlength=B).astype(np.float64)

        ref, M = t.ref_s, t.model_bytes
        # ---- aggregates -------------------------------------------------------------------------
        A = np.zeros((B, FEATURE_SCHEMA.num_agg), dtype=np.float64)
        sb = srv_bytes.reshape(B, N)
        sm = srv_msgs.reshape(B, N)
        gt = grp_time.reshape(B, GM)
        gb = grp_bytes.reshape(B, GM)
        gmsg = grp_msgs.reshape(B, GM)
        A[:, _A["ps_time_max"]] = per_server.max(axis=1) / ref
        A[:, _A["ps_time_sum"]] = per_server.sum(axis=1) / ref
        A[:, _A["ps_bytes_max"]] = sb.max(axis=1) / M
        A[:, _A["ps_bytes_sum"]] = ps_bytes / M
        A[:, _A["ps_msgs_max"]] = sm.max(axis=1) / t.msg_scale
        A[:, _A["ps_msgs_sum"]] = sm.sum(axis=1) / t.msg_scale
        A[:, _A["ar_time_max"]] = gt.max(axis=1) / ref
        A[:, _A["ar_time_sum"]] = ar_total / ref
        A[:, _A["ar_bytes_max"]] = gb.max(axis=1) / M
        A[:, _A["ar_bytes_sum"]] = ar_bytes / M
        A[:, _A["ar_msgs_max"]] = gmsg.max(axis=1) / t.msg_scale
        A[:, _A["ar_msgs_sum"]] = gmsg.sum(axis=1) / t.msg_scale
        A[:, _A["total"]] = total / ref
        A[:, _A["sum"]] = sum_s / ref
        A[:, _A["ps_nic_max"]] = ps_node_max / ref
        A[:, _A["log10_total_s"]] = np.log10(_LOG_FLOOR_S + total)
        A[:, _A["log10_ref_s"]] = math.log10(ref)
        A[:, _A["servers_used_frac"]] = S_count / N
        A[:, _A["log2_num_groups"]] = np.log2(1.0 + G_count)
        A[:, _A["ps_wire_frac"]] = ps_bytes / np.maximum(all_bytes, 1e-300)
        A[:, _A["log2_rows_per_var"]] = np.log2(rows_per / V)
        for name, value in zip(("log2_nodes", "log2_world", "workers_per_node",
                                "bw_min_max_ratio"), t.shape_cols):
            A[:, _A[name]] = value
        for col, term in (("sim_step", "step_s"), ("sim_exposed_compute", "exposed_compute_s"),
                          ("sim_exposed_comm", "exposed_comm_s"),
                          ("sim_compression", "compression_s"),
                          ("sim_cpu_contention", "cpu_contention_s"),
                          ("sim_nic_contention", "nic_contention_s"), ("sim_ar", "ar_s"),
                          ("sim_ps", "ps_s")):
            A[:, _A[col]] = sim[term] / ref
        A[:, _A["log10_sim_step_s"]] = np.log10(_LOG_FLOOR_S + sim["step_s"])
        agg_all = A.astype(np.float32)
        if not full:
            return agg_all


        # ---- per-row and per-node outputs (full features only) -----------------------------------
        pos_row = t.position[row_var]
        pos_ar = pos_row[ar_idx]
        grp_comp = np.bincount(g_key, weights=comp[ar_idx] > 0, minlength=KG)
        grp_pos = np.bincount(g_key, weights=pos_ar, minlength=KG)
        grp_pos_min = np.full(KG, np.inf)
        grp_pos_max = np.full(KG, -np.inf)
        np.minimum.at(grp_pos_min, g_key, pos_ar)
        np.maximum.at(grp_pos_max, g_key, pos_ar)

        # ---- row features ---------------------------------------------------------------------
        F = FEATURE_SCHEMA.num_row
        X = np.zeros((F, R), dtype=np.float32)  # column-major while filling, transposed at the end
        kind_sparse = is_ps & row_sparse
        X[_R["kind_ps_dense"]] = is_ps & ~row_sparse
        X[_R["kind_ps_sparse"]] = kind_sparse
        X[_R["kind_ar"]] = is_ar
        X[_R["local_replication"]] = is_ps & lr
        for j, name in enumerate(("comp_none", "comp_fp16", "comp_fp16_ef", "comp_powersgd")):
            X[_R[name]] = is_ar & (comp == j)
        X[_R["powersgd_rank"]] = np.where(
            is_ar & (comp == 3), np.log2(1.0 + rank) / math.log2(1 + _MAX_POWERSGD_RANK),
            0.0)
        X[_R["is_shard"]] = r_part
        X[_R["log2_shards"]] = np.log2(r_shards)
        X[_R["byte_share"]] = tensor_bytes / M
        X[_R["wire_share"]] = wire / M
        X[_R["log10_wire_bytes"]] = np.log10(1.0 + wire)
        X[_R["is_sparse"]] = row_sparse
        X[_R["rows_touched_frac"]] = np.where(row_sparse, touched / rows_total, 1.0)
        key_ok = np.full(R, 0, dtype=np.int64)
        key_ok[ps_idx] = s_key
        X[_R["server_load_share"]] = np.where(
            is_ps, srv_bytes[key_ok] / np.maximum(ps_bytes[row_strat], 1e-300), 0.0)
        X[_R["server_bw_rel"]] = np.where(is_ps, t.bw_rel[np.maximum(srv, 0)], t.ar_bw_rel)
        X[_R["server_workers_frac"]] = np.where(is_ps, t.workers_frac[np.maximum(srv, 0)], 0.0)
        X[_R["servers_used_frac"]] = (S_count / N)[row_strat]
        gkey_ok = np.full(R, 0, dtype=np.int64)
        gkey_ok[ar_idx] = g_key
        X[_R["group_byte_share"]] = np.where(
            is_ar, grp_bytes[gkey_ok] / np.maximum(ar_bytes[row_strat], 1e-300), 0.0)
        X[_R["log2_num_groups"]] = np.log2(1.0 + G_count)[row_strat]
        X[_R["ps_wire_frac"]] = (ps_bytes / np.maximum(all_bytes, 1e-300))[row_strat]
        for name, value in zip(("log2_nodes", "log2_world", "workers_per_node",
                                "bw_min_max_ratio"), t.shape_cols):
            X[_R[name]] = value
        X[_R["var_position"]] = pos_row
        X[_R["pre_transmission"]] = trans / ref
        X[_R["pre_latency"]] = lat / ref
        X[_R["pre_messages"]] = msgs_eq / (2.0 * t.world)
        X[_R["pre_server_time"]] = np.where(
            is_ps, node_ps.ravel()[row_strat * N + np.maximum(srv, 0)] / ref, 0.0)
        X[_R["pre_group_time"]] = np.where(is_ar, grp_time[gkey_ok] / ref, 0.0)
        X[_R["pre_total"]] = (total / ref)[row_strat]
        X[_R["log10_transmission_s"]] = np.log10(_LOG_FLOOR_S + trans)
        X[_R["log10_latency_s"]] = np.log10(_LOG_FLOOR_S + lat)
        rows_all = np.ascontiguousarray(X.T)

        # ---- server nodes (in local order) -------------------------------------------------------
        node_of = s_keys % N
        SF = np.zeros((s_keys.size, FEATURE_SCHEMA.num_server), dtype=np.float64)
        if s_keys.size:
            ps_b = ps_bytes[s_strat]
            nps = node_ps.ravel()[s_keys]
            SF[:, _S["bw_rel"]] = t.bw_rel[node_of]
            SF[:, _S["workers_frac"]] = t.workers_frac[node_of]
            SF[:, _S["latency_rel"]] = t.lat_rel[node_of]
            SF[:, _S["load_share"]] = srv_bytes[s_keys] / np.maximum(ps_b, 1e-300)
            SF[:, _S["bytes_share"]] = srv_bytes[s_keys] / M
            SF[:, _S["rows_frac"]] = srv_rows[s_keys] / rows_per[s_strat]
            SF[:, _S["time"]] = srv_time[s_keys] / ref
            SF[:, _S["nic_time"]] = nps / ref
            SF[:, _S["msgs"]] = srv_msgs[s_keys] / t.msg_scale
            SF[:, _S["is_bottleneck"]] = nps >= ps_node_max[s_strat] * (1.0 - 1e-9)
            SF[:, _S["sparse_frac"]] = srv_sparse[s_keys] / np.maximum(srv_bytes[s_keys], 1e-300)
            SF[:, _S["replicated_frac"]] = srv_lr[s_keys] / srv_rows[s_keys]
        srv_all = SF.astype(np.float32)

        # ---- group nodes (in local order) -------------------------------------------------------
        GF = np.zeros((g_keys.size, FEATURE_SCHEMA.num_group), dtype=np.float64)
        if g_keys.size:
            GF[:, _G["byte_share"]] = grp_bytes[g_keys] / np.maximum(ar_bytes[g_strat], 1e-300)
            GF[:, _G["bytes_share"]] = grp_bytes[g_keys] / M
            GF[:, _G["time"]] = grp_time[g_keys] / ref
            GF[:, _G["rows_frac"]] = grp_rows[g_keys] / rows_per[g_strat]
            GF[:, _G["two_collectives"]] = grp_two[g_keys]
            GF[:, _G["compressed_frac"]] = grp_comp[g_keys] / grp_rows[g_keys]
            GF[:, _G["position_mean"]] = grp_pos[g_keys] / grp_rows[g_keys]
            GF[:, _G["position_min"]] = grp_pos_min[g_keys]
            GF[:, _G["position_max"]] = grp_pos_max[g_keys]
        grp_all = GF.astype(np.float32)

        # ---- split per strategy ------------------------------------------------------------------
        r_off = np.concatenate(([0], np.cumsum(rows_per.astype(np.int64)))).tolist()
        s_off = np.concatenate(([0], np.cumsum(S_count))).tolist()
        g_off = np.concatenate(([0], np.cumsum(G_count))).tolist()
        row_var64 = row_var.astype(np.int64)
        ids = (strategies.ids if isinstance(strategies, SampledBatch)
               else [s.id for s in strategies])
        out = []
        for k, sid in enumerate(ids):
            a, e = r_off[k], r_off[k + 1]
            out.append(StrategyFeatures(
                strategy_id=sid,
                rows=rows_all[a:e],
                row_var=row_var64[a:e],
                num_vars=V,
                row_server=row_server[a:e],
                row_group=row_group[a:e],
                agg=agg_all[k],
                server_feats=srv_all[s_off[k]: s_off[k + 1]],
                group_feats=grp_all[g_off[k]: g_off[k + 1]],
            ))
        return out


def _local_index(
    strat: np.ndarray, ids: np.ndarray, width: int, num_strategies: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Number the distinct ``ids`` (``0 <= id < width``) of each strategy 0.. in order of first
    appearance; ``strat``/``ids`` are rows in row order (grouped by strategy).

    Returns the dense key ``strategy * width + id`` of every row, the keys present in order of
    first appearance (grouped by strategy), their strategy, the local index of every key (-1 if
    absent) and the count per strategy.
    """
    key = strat * width + ids
    K = num_strategies * width
    first = np.full(K, key.size, dtype=np.int64)
    np.minimum.at(first, key, np.arange(key.size))
    present = np.flatnonzero(first < key.size)
    keys = present[np.argsort(first[present], kind="stable")]
    key_strat = keys // width
    count = np.bincount(key_strat, minlength=num_strategies)
    start = np.cumsum(count) - count
    local_of_key = np.full(K, -1, dtype=np.int64)
    local_of_key[keys] = np.arange(keys.size) - start[key_strat]
    return key, keys, key_strat, local_of_key, count


# -- module-level API -----------------------------------------------------------------------------


def featurize(
    strategy: Strategy, domain: Domain, *, costmodel_config: CostModelConfig | None = None
) -> StrategyFeatures:
    """The features of one strategy on ``domain`` (see :class:`StrategyFeatures`)."""
    return Featurizer(domain, costmodel_config).featurize(strategy)


def featurize_many(
    strategies: Sequence[Strategy], domain: Domain, *,
    costmodel_config: CostModelConfig | None = None,
) -> list[StrategyFeatures]:
    """The features of every strategy, sharing the per-domain tables and batching the work."""
    return Featurizer(domain, costmodel_config).featurize_many(strategies)


def collate(features: Sequence[StrategyFeatures]) -> dict[str, torch.Tensor]:
    """Pad a list of :class:`StrategyFeatures` into a batch of tensors.

    Keys: ``rows [B, Rmax, F_row]`` (float32, zero padding), ``row_mask [B, Rmax]`` (bool),
    ``row_var``, ``row_server``, ``row_group`` ``[B, Rmax]`` (int64, -1 on padding rows),
    ``num_rows [B]``, ``num_vars [B]``, ``agg [B, F_agg]``, ``server_feats [B, Smax, F_srv]``
    with ``server_mask [B, Smax]`` and ``num_servers [B]``, ``group_feats [B, Gmax, F_grp]``
    with ``group_mask [B, Gmax]`` and ``num_groups [B]``.
    """
    import torch

    if not features:
        raise ValueError("collate needs at least one StrategyFeatures, got an empty list")
    B = len(features)
    sch = FEATURE_SCHEMA

    def pad(arrays: list[np.ndarray], width: int, dtype: np.dtype[Any], fill: float | int
            ) -> tuple[np.ndarray, np.ndarray]:
        n = np.array([a.shape[0] for a in arrays], dtype=np.int64)
        nmax = int(n.max()) if B else 0
        shape = (B, nmax, width) if width else (B, nmax)
        out = np.full(shape, fill, dtype=dtype)
        mask = np.arange(nmax)[None, :] < n[:, None]
        if nmax:
            out[mask] = np.concatenate(arrays, axis=0)
        return out, mask

    rows, row_mask = pad([f.rows for f in features], sch.num_row, np.dtype(np.float32), 0.0)
    row_var, _ = pad([f.row_var for f in features], 0, np.dtype(np.int64), -1)
    row_server, _ = pad([f.row_server for f in features], 0, np.dtype(np.int64), -1)
    row_group, _ = pad([f.row_group for f in features], 0, np.dtype(np.int64), -1)
    srv, srv_mask = pad([f.server_feats for f in features], sch.num_server,
                        np.dtype(np.float32), 0.0)
    grp, grp_mask = pad([f.group_feats for f in features], sch.num_group,
                        np.dtype(np.float32), 0.0)
    return {
        "rows": torch.from_numpy(rows),
        "row_mask": torch.from_numpy(row_mask),
        "row_var": torch.from_numpy(row_var),
        "row_server": torch.from_numpy(row_server),
        "row_group": torch.from_numpy(row_group),
        "num_rows": torch.tensor([f.num_rows for f in features], dtype=torch.int64),
        "num_vars": torch.tensor([f.num_vars for f in features], dtype=torch.int64),
        "agg": torch.from_numpy(np.stack([f.agg for f in features]).astype(np.float32)),
        "server_feats": torch.from_numpy(srv),
        "server_mask": torch.from_numpy(srv_mask),
        "num_servers": torch.tensor([f.num_servers for f in features], dtype=torch.int64),
        "group_feats": torch.from_numpy(grp),
        "group_mask": torch.from_numpy(grp_mask),
        "num_groups": torch.tensor([f.num_groups for f in features], dtype=torch.int64),
    }
