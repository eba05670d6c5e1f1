"""Event-driven step-time simulator: one training iteration of a strategy, vectorized over candidates.

The project's one cost model (``DESIGN.md`` §12): the learned rankers' features
(:mod:`~autosync_transfer.rankers.features`) read its terms, the ``stepsim`` ranker kind ranks by
its prediction, and the analytical sync-only model (:mod:`~autosync_transfer.rankers.costmodel`)
stays as a baseline. Pure: no process group, no I/O; it follows the rules of the runtime's plan
(:func:`autosync_transfer.runtime.plan.make_plan`) and executor. Where each rule comes from (the
traces and side-by-side measurements behind it) is in ``research/stepsim_notes.md``.

Inputs
    The domain (model graph + cluster), a :class:`~autosync_transfer.domains.profile.WorkloadProfile`
    (measured compute, gradient-ready times, synchronization action costs) and a
    :class:`~autosync_transfer.domains.profile.ClusterCalibration` (measured NICs, latencies,
    compute slowdown, per-piece PS costs). Without them the fallback of :class:`StepSimConfig`
    applies: nominal bandwidth times the TCP goodput, ``latency_ms`` (or ``default_latency_s``),
    compute from the graph (``6 x dense parameters x tokens`` FLOP at ``fallback_flops_per_s``;
    forward a third, backward two thirds) and action costs at ``fallback_memory_bytes_per_s``.
    ``host_processes`` / ``host_cores`` describe a cluster emulated on one machine.

One iteration (every worker alike, times from the start of the step)
    * Compute runs ``slowdown x`` the profile's times (the processes sharing a host); variable
      ``v``'s gradient is ready at ``forward + slowdown x ready_s[v]``.
    * Launch order is the executor's: reverse forward order, each communication thread taking
      its tasks one after another.
    * All-reduce: pieces fuse into one bucket per (group, compressor, PowerSGD rank). A bucket
      launches on the AR thread when its last gradient is ready and takes its compression cost
      plus its ring: ``2 (W - 1) / W x wire bytes`` at the ring's slowest link plus ``2 (W - 1)``
      latencies and the collective latency (twice for a PowerSGD matrix: P and Q).
    * Parameter servers: every piece is one exchange on the PS thread, launched when its
      gradient is ready. Each NIC serves the exchanges that cross it at the calibrated rates, a
      piece's pushes and answers one after the other; every rank also spends the calibrated
      per-piece cost. Pieces of different servers follow each other (:meth:`StepSimulator.
      _server_chain`: a max-plus recurrence solved in closed form per strategy), sharing the
      NICs with the all-reduces launched between them. Every all-reduce collective also takes
      the calibrated ``ar_collective_s`` from the PS threads (its wake-ups, where workers
      outnumber cores), from its bucket's launch slot on, and so does the CPU every rank's ring
      spends on the bucket's wire bytes (``ar_cpu_s_per_element`` per float32 element,
      ``ar_fp16_cpu_s_per_element`` per float16 one), times ``processes / cores``.
    * Row-sparse PS pieces are replayed as the executor runs them, a chain of dependent steps per
      piece (:meth:`StepSimulator._sparse_chain`): touched rows pushed with their indices,
      gathered, averaged and answered, the server's receives posted only when its PS thread
      reaches the piece.
    * Flows sharing a NIC share its bandwidth: the synchronization ends at the latest of the AR
      thread, the PS threads and the busiest NIC serving all of it (the NIC contention term).
    * On a host with more compute processes than cores, compression delays the backward pass
      and the PS threads' per-piece work runs ``processes / cores`` slower; bytes and rings
      stream at the links' rate.
    * The step ends ``optimizer`` after both the backward pass and the last synchronization.

    The alternatives to these rules that research code ablates are :class:`StepSimVariant`; the
    defaults are the behaviour, fixed per feature schema version
    (``tests/rankers/test_stepsim_behaviour.py``).

Output
    :meth:`StepSimulator.simulate` returns a structured array (:data:`TERMS`), one record per
    candidate, in seconds: ``step_s`` and its terms (plus the bucket count and all-reduced bytes).

Vectorization
    Strategies are decoded into rows (one per synchronized piece) by
    :class:`~autosync_transfer.rankers.rows.RowDecoder` (shared with the analytical model and the
    featurizer). Everything after is dense ``[strategies, variables(, nodes)]`` arrays in launch
    order: a bucket's work sits at the slot of its last-launched variable, so every queue's end is
    a cumulative sum and a maximum, without sorting.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from autosync_transfer._heap import heap_slack
from autosync_transfer.domains.domain import Domain
from autosync_transfer.domains.profile import ActionCost, ClusterCalibration, WorkloadProfile
from autosync_transfer.errors import ConfigError
from autosync_transfer.strategies.sampler import SampledBatch
from autosync_transfer.strategies.types import Strategy
from autosync_transfer.rankers.rows import (MAX_POWERSGD_RANK, RowDecoder, Rows,
                                           nominal_network, ps_byte_table, ring, wire_bytes)

__all__ = [
    "StepSimConfig",
    "StepSimVariant",
    "TERMS",
    "StepSimulator",
    "simulate",
]

#: bucket kinds of one group: none, fp16, fp16_ef, then PowerSGD ranks 1..64
_BUCKET_KINDS = 4 + MAX_POWERSGD_RANK
_ROWS_PER_BATCH = 1 << 16  # work arrays stay in cache; the sparse chain's loop is per batch
#: threads that decode (a sampler's batches) and simulate batches (``benchmarks/scoring_throughput.py``)
_THREADS = max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1)))
#: freed memory the allocator keeps while batches are simulated (:func:`heap_slack`): a batch's
#: temporaries are reused instead of faulted in again (``benchmarks/scoring_throughput.py``)
_HEAP_SLACK = 64 << 20
#: message hops of a row-sparse piece on its server's chain (:meth:`StepSimulator._sparse_chain`):
#: the header, then the payload's round trip once its receive is posted
_SPARSE_HOPS = 1.5


#: the simulator's output record, seconds per step
TERMS: tuple[tuple[str, str], ...] = (
    ("step_s", "predicted step time"),
    ("compute_s", "forward + backward + optimizer on the loaded host (slowdown included)"),
    ("exposed_compute_s", "compute on the critical path: step_s - exposed_comm_s"),
    ("exposed_comm_s", "synchronization on the critical path: max(0, sync end - backward end)"),
    ("compression_s", "compression and fusion copies on one worker (all buckets)"),
    ("cpu_contention_s", "compute time added by processes sharing a host's cores, plus "
                         "compression delaying the backward pass on an oversubscribed host"),
    ("nic_contention_s", "sync end with every flow sharing the NICs minus the AR and PS threads "
                         "alone"),
    ("ar_s", "work of the AR thread (compression + collectives)"),
    ("ps_s", "PS work of the busiest node's NIC"),
    ("sync_end_s", "when the last synchronization ends (from the start of the step)"),
    ("ar_buckets", "fused all-reduce buckets (a count, not seconds)"),
    ("ar_wire_bytes", "bytes one worker contributes to all its all-reduces (not seconds)"),
)
_TERM_DTYPE = np.dtype([(name, np.float64) for name, _ in TERMS])


class StepSimConfig(BaseModel):
    """Physical constants of the simulator and the host it models; the ``fallback_*`` ones are
    used only where no profile or calibration gives the number (documented physics, not fitted
    per domain). How the simulator models the runtime is not configurable here: that is its
    behaviour, versioned with the feature schema (``features.FEATURE_SCHEMA_VERSION``; a test
    keeps the simulator's output on reference strategies fixed per schema version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    goodput: float = Field(default=1448 / 1514, gt=0, le=1, description=(
        "payload share of the nominal line rate (TCP over Ethernet frames); applied to nominal "
        "bandwidths only, a calibration's are measured goodputs"))
    intra_node_gbps: float = Field(default=10.0, gt=0, description=(
        "bandwidth between workers of one node without a calibration, Gbit/s"))
    default_latency_s: float = Field(default=3e-4, ge=0, description=(
        "per-message latency (and per-message cost) of a node whose latency_ms is 0, without a "
        "calibration; fitted on the 15 shipped source domains "
        "(benchmarks/results/stepsim_accuracy.txt)"))
    sparse_index_bytes: int = Field(default=8, ge=0)
    sparse_call_s: float = Field(default=0.0, ge=0, description=(
        "cost of one row-sparse PS push or pull beyond its bytes and latency (its header is a "
        "dependent hop: the payload's receives wait for it); 0: not modelled. "
        "research/probes/sparse_exchange.py measures it between two nodes"))
    host_processes: int | None = Field(default=None, ge=1, description=(
        "compute processes sharing one host (an emulated cluster: all workers); None: each "
        "node's workers share that node"))
    host_cores: int | None = Field(default=None, ge=1, description=(
        "cores of the one host all workers share (with host_processes); None: the "
        "calibration's host_cores"))
    host_cpu_s_per_byte: float = Field(default=0.0, ge=0, description=(
        "CPU seconds the shared host spends per byte a worker sends (socket, veth, shaping); "
        "counts only where all workers share one host"))
    host_cpu_s_per_message: float = Field(default=0.0, ge=0, description=(
        "CPU seconds the shared host spends per message (PS push or pull, ring step)"))
    fallback_flops_per_s: float = Field(default=8e10, gt=0, description=(
        "one worker's training FLOP/s without a profile (6 x dense parameters x tokens per "
        "step); fitted on the 15 shipped source domains (benchmarks/results/"
        "stepsim_accuracy.txt)"))
    fallback_memory_bytes_per_s: float = Field(default=8e9, gt=0, description=(
        "bytes/s one worker moves in compression, copies and the optimizer without a profile; "
        "fitted on the 15 shipped source domains (benchmarks/results/stepsim_accuracy.txt)"))
    default_ps_piece_s: float | None = Field(default=None, ge=0, description=(
        "seconds one parameter-server piece costs the executor beyond its bytes where the "
        "calibration has no ps_piece_s; None: two message latencies plus the collective "
        "latency"))
    step_overhead_s: float = Field(default=0.0, ge=0, description=(
        "fixed per-step cost (framework, synchronization call)"))


class StepSimVariant(BaseModel):
    """Alternative models of the runtime, for research only (``research/probes`` ablate them);
    the defaults are the shipped behaviour, and the product never sets another. Changing a
    default changes every learned ranker's ``sim_*`` features: it is a new feature schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    network_shares_cores: bool = Field(default=True, description=(
        "on a host with more compute processes than cores (slowdown > 1) the parameter-server "
        "threads get the same share of a core as compute: the per-piece work of every PS "
        "exchange (a chain of dependent steps on the PS thread) runs slower (see "
        "comm_time_slicing)"))
    comm_time_slicing: bool = Field(default=True, description=(
        "with network_shares_cores, the PS threads' per-piece work is slowed by the time "
        "slicing of the host's processes over its cores (processes / cores) and not by the "
        "compute's measured contention for caches and memory, which the calibration's small "
        "network measures (2.0-2.29 for four processes on two cores between calibrations of one "
        "machine); False: the compute slowdown"))
    ps_sliced_while_computing: bool = Field(default=False, description=(
        "with network_shares_cores, the PS threads' per-piece work (the calibration's "
        "ps_piece_s, measured with every rank's PS thread on this host, and the server's "
        "aggregation) is slowed by the time slicing only where it starts before the backward "
        "pass ends; once the cores are free of compute it runs at the calibrated cost. False: "
        "slowed throughout"))
    wire_shares_cores: bool = Field(default=False, description=(
        "slow a parameter-server exchange's bytes by the same slowdown as its per-piece work "
        "(the older model); by default bytes cross a NIC at its calibrated rate"))
    ps_results_block_gathers: bool = Field(default=True, description=(
        "a receive's ready notice travels on the same connection as the data queued before it "
        "(gloo's pair protocol), so a server's next gather from a peer starts only once its "
        "answers to that peer are out, and a node's NIC carries a piece's pushes and answers "
        "one after the other; False: both directions at once (full duplex)"))
    ps_chain: bool = Field(default=True, description=(
        "dense PS pieces follow one another in launch order whichever servers hold them: a "
        "server gathers a piece only once its answers of the piece before are out, and the "
        "server of the piece before pushes it only after those answers "
        "(StepSimulator._server_chain); False: every node's queue runs independently"))
    ps_chain_shares_nic: bool = Field(default=True, description=(
        "with ps_chain, the all-reduces launched while dense PS pieces follow one another share "
        "the NICs with them, one flow among a piece's pushes or answers: a piece takes up to "
        "1 / (its remote pushes) longer, at most the busiest NIC's time for the all-reduces "
        "launched since the piece before (StepSimulator._server_chain); False: the chain "
        "ignores them"))
    ps_push_after_gather: float = Field(default=1.0, ge=0, le=1, description=(
        "with ps_chain, the share of a piece's pushes that cross into its server only once the "
        "piece before it is gathered (1: all of them, as traced on emulated cluster A by "
        "research/probes/ps_layouts.py --trace; 0: they arrive early, only the previous server's "
        "push waits)"))
    ps_sender_overlaps: bool = Field(default=True, description=(
        "a node's PS thread hands a piece it only sends to the network and goes on, so its "
        "per-piece work for such pieces overlaps its NIC's bytes (max of the two); a server "
        "waits for the bytes, then does its per-piece work (their sum). False: the sum on "
        "every node"))
    collectives_take_ps_cpu: bool = Field(default=True, description=(
        "every all-reduce collective delays the parameter-server threads by the calibration's "
        "ar_collective_s (what one more collective adds to a step whose PS work binds: its "
        "wake-ups take CPU from the PS threads where the workers outnumber the cores), from "
        "its bucket's launch slot on: every node's PS queue and the dense pieces' chain; "
        "research/probes/layout_probe.py --sets ps_buckets measures the step against the "
        "bucket count. False, or no such calibration figure: collectives cost only the AR "
        "thread"))
    ring_cpu_takes_ps_cpu: bool = Field(default=True, description=(
        "on a host with more compute processes than cores, the CPU every rank's ring spends on "
        "a bucket's wire bytes (the calibration's ar_cpu_s_per_element and "
        "ar_fp16_cpu_s_per_element: gloo's reduction and socket copies) runs on the same "
        "cores: processes / cores times it delays the parameter-server threads from the "
        "bucket's launch slot on, like ar_collective_s, and adds to the step's total-CPU bound. "
        "False, or no such calibration figures: a ring costs the host no CPU"))
    ring_shares_cores: bool = Field(default=False, description=(
        "slow all-reduce buckets by the same slowdown (the older model); by default a ring "
        "streams at the links' rate, as the calibration's all-reduce measurement shows"))
    ring_slowed_while_computing: bool = Field(default=False, description=(
        "on a host with more compute processes than cores, the AR thread (its rings' reductions "
        "and socket copies, its compression) gets a time slice of a core like every other "
        "thread while the backward pass runs: it progresses processes / cores times slower "
        "until the backward pass ends, then at full rate (a time change of its queue, exact "
        "for one work-conserving queue); False: rings stream at the links' rate throughout"))


class _Physics:
    """The per-domain numbers of the simulation (profile, calibration or the fallback)."""

    def __init__(self, domain: Domain, profile: WorkloadProfile | None,
                 calibration: ClusterCalibration | None, config: StepSimConfig,
                 variant: StepSimVariant | None = None):
        variant = variant or StepSimVariant()
        model, cluster = domain.model, domain.cluster
        variables = model.variables
        V = len(variables)
        nodes = cluster.nodes
        self.num_nodes = N = len(nodes)
        self.workers = np.array([n.workers for n in nodes], dtype=np.float64)
        self.world = W = int(self.workers.sum())
        self.tokens = float(model.batch_size * model.seq_len)
        self.sparse_row_bytes = np.array(
            [v.row_elements * v.itemsize + config.sparse_index_bytes for v in variables],
            dtype=np.float64)
        self.itemsize = np.array([v.itemsize for v in variables], dtype=np.float64)
        self.var_rows = np.array([float(v.shape[0]) if v.shape else 1.0 for v in variables])
        # ---- network ----------------------------------------------------------------------------
        if calibration is not None:
            by_name = {c.name: c for c in calibration.nodes}
            missing = [n.name for n in nodes if n.name not in by_name]
            if missing:
                raise ConfigError(f"calibration: node {missing[0]!r} of cluster "
                                  f"{cluster.name!r} is not calibrated")
            self.nic = np.array([by_name[n.name].bandwidth_gbps * 1e9 / 8 for n in nodes])
            self.lat = np.array([by_name[n.name].latency_s for n in nodes])
            self.intra = calibration.intra_bandwidth_gbps * 1e9 / 8
            self.intra_lat = calibration.intra_latency_s
            self.coll_lat = calibration.collective_latency_s
            self.ar_ps_cpu_s = (float(calibration.ar_collective_s or 0.0)
                                if variant.collectives_take_ps_cpu else 0.0)
            # CPU seconds per wire byte of a rank's ring: float32 (and every uncompressed or
            # PowerSGD wire) and float16
            ring_cpu = ((calibration.ar_cpu_s_per_element or 0.0) / 4.0,
                        (calibration.ar_fp16_cpu_s_per_element or 0.0) / 2.0)
        else:
            self.nic, self.lat, self.intra = nominal_network(
                cluster, goodput=config.goodput, default_latency_s=config.default_latency_s,
                intra_node_gbps=config.intra_node_gbps)
            self.intra_lat = 0.0
            self.coll_lat = 0.0
            self.ar_ps_cpu_s = 0.0
            ring_cpu = (0.0, 0.0)
        self.ring_factor, self.ring_bw = ring(self.workers, self.nic, self.intra)
        max_lat = float(self.lat.max()) if N > 1 else self.intra_lat
        self.ar_lat_per_coll = (2.0 * (W - 1) * max_lat + self.coll_lat) if W > 1 else 0.0
        # NIC seconds per all-reduced byte on every node (its share of the ring)
        self.ar_nic = (self.ring_factor / self.nic) if N > 1 else np.zeros(N)
        # ---- compute ----------------------------------------------------------------------------
        procs = config.host_processes or int(self.workers.max())
        self.shared_host = config.host_processes is not None
        cores = config.host_cores or (calibration.host_cores if calibration is not None
                                      else procs)
        self.host_cores = float(cores)
        if calibration is not None:
            self.slowdown = calibration.slowdown(procs)
        else:
            self.slowdown = max(1.0, procs / cores)
        dense = np.array([0 if v.sparse else v.num_elements for v in variables], dtype=np.float64)
        if profile is not None:
            fwd, bwd, opt = profile.forward_s, profile.backward_s, profile.optimizer_s
            ready = np.array([profile.ready_s.get(v.name, math.nan) for v in variables])
            if np.isnan(ready).all():
                ready = _fallback_ready(dense, bwd)
            else:  # a variable the profile missed is ready with its forward neighbour
                ready = _fill_missing(ready)
        else:
            flops = 6.0 * float(dense.sum()) * self.tokens
            total = flops / config.fallback_flops_per_s
            fwd, bwd = total / 3.0, 2.0 * total / 3.0
            every = float(sum(v.num_elements for v in variables))
            opt = 4.0 * every * 4 / config.fallback_memory_bytes_per_s  # read p, g; write p, m
            ready = _fallback_ready(dense, bwd)
        s = self.slowdown
        self.forward_s, self.backward_s, self.optimizer_s = s * fwd, s * bwd, s * opt
        self.unloaded_compute_s = fwd + bwd + opt
        self.compute_s = s * (fwd + bwd + opt)
        self.backward_end = self.forward_s + self.backward_s
        self.cpu_share = 1.0 if s > 1.0 else 0.0
        slicing = max(1.0, procs / float(cores))
        self.comm_scale = ((slicing if variant.comm_time_slicing else s)
                           if (variant.network_shares_cores and s > 1.0) else 1.0)
        self.ring_scale = s if (variant.ring_shares_cores and s > 1.0) else 1.0
        self.ar_busy_scale = (slicing if (variant.ring_slowed_while_computing and s > 1.0
                                          and not variant.ring_shares_cores) else 1.0)
        self.wire_scale = self.comm_scale if variant.wire_shares_cores else 1.0
        # per-piece PS work slowed only while the backward pass runs (a research variant)
        self.ps_sliced = variant.ps_sliced_while_computing and self.comm_scale > 1.0
        # what a ring's CPU per wire byte delays the PS threads by: every rank's ring on the
        # host's cores, where the processes outnumber them (0 otherwise)
        ring_delay = slicing if (variant.ring_cpu_takes_ps_cpu and slicing > 1.0) else 0.0
        self.ring_cpu_per_byte = (ring_cpu[0] * ring_delay, ring_cpu[1] * ring_delay)
        release = self.forward_s + s * np.minimum(ready, bwd)
        # the executor's launch order (``runtime.plan``): reverse forward order, each
        # communication thread waiting for its tasks one after another, so a slot is released
        # no sooner than the slots before it
        forward = np.array([v.order for v in variables], dtype=np.int64)
        self.order = np.lexsort((-np.arange(V), -forward))
        self.rank_of_var = np.empty(V, dtype=np.int64)
        self.rank_of_var[self.order] = np.arange(V)
        self.release_sorted = np.maximum.accumulate(release[self.order])
        self.launch_reversed = bool((self.rank_of_var == V - 1 - np.arange(V)).all())
        # ---- action costs -----------------------------------------------------------------------
        actions = dict(profile.actions) if profile is not None else {}
        mem = config.fallback_memory_bytes_per_s

        def cost(name: str, bytes_per_element: float) -> ActionCost:
            if name in actions:
                return actions[name]
            return ActionCost(action=name, elements=(1, 1 << 24),  # type: ignore[arg-type]
                              seconds=(0.0, (1 << 24) * bytes_per_element / mem))

        self.act_copy = cost("copy", 8.0)  # read + write of fp32
        self.act_fp16 = cost("fp16_cast", 12.0)
        self.act_ef = cost("error_feedback", 24.0)
        self.act_psgd = cost("powersgd", 24.0)
        self.act_agg = cost("ps_aggregate", 12.0)
        self.act_gather = cost("sparse_gather", 8.0)  # scan the dense gradient, copy rows
        self.act_scatter = cost("sparse_scatter", 4.0)  # zero-filled result, rows copied in
        # ---- PS tables per (server p, replication r) --------------------------------------------
        w = self.workers
        eye = np.eye(N, dtype=bool)
        gamma, sources = ps_byte_table(w, self.nic, self.intra)
        # one piece's cost to every rank's PS thread beyond its bytes: measured by the
        # calibration (the executor on many tiny pieces), else two message latencies (push and
        # answer) plus the framework's per-call cost
        if calibration is not None and calibration.ps_piece_s is not None:
            self.ps_piece_s = float(calibration.ps_piece_s)
        elif config.default_ps_piece_s is not None:
            self.ps_piece_s = float(config.default_ps_piece_s)
        else:
            self.ps_piece_s = 2.0 * float(self.lat.max()) + self.coll_lat
        lat = np.full((N, 2, N), self.ps_piece_s)
        # one dependent hop of a row-sparse piece on its server's chain, in a step: the measured
        # row-sparse piece (every rank of the cluster running the exchange on this host, so
        # already time-sliced as in a step) spread over its _SPARSE_HOPS hops, else two message
        # latencies plus the framework's per-call cost, slowed like the other PS work
        if calibration is not None and calibration.ps_sparse_piece_s is not None:
            self.sparse_hop_s = np.full(N, calibration.ps_sparse_piece_s / _SPARSE_HOPS)
        else:
            self.sparse_hop_s = (2.0 * self.lat + self.coll_lat) * self.comm_scale
        calls = np.empty((N, 2, N))  # pushes and pulls each node makes or serves, per piece
        for r in (0, 1):
            for p in range(N):
                calls[p, r] = np.where(eye[p], sources[p, r], 2.0 * w)
        if W == 1:  # one rank: the executor sends nothing
            gamma[:] = 0.0
            lat[:] = 0.0
            calls[:] = 0.0
            self.sparse_hop_s = np.zeros(N)
        # a piece's pushes into (or out of) each node; with ps_results_block_gathers its answers
        # cross the same NIC after them
        self.ps_gamma_in = gamma.reshape(2 * N, N)
        self.ps_gamma = self.ps_gamma_in * (2.0 if variant.ps_results_block_gathers else 1.0)
        self.ps_gamma_in_flat = self.ps_gamma_in.ravel()
        self.ps_gamma_out_flat = (self.ps_gamma - self.ps_gamma_in).ravel()
        self.ps_lat = lat.reshape(2 * N, N)
        # the server's share and the senders' share of both (see ps_sender_overlaps)
        on_server = np.repeat(eye, 2, axis=0)  # [(p, r), k]: k is the server p
        self.ps_gamma_server = np.where(on_server, self.ps_gamma, 0.0)
        self.ps_gamma_sender = self.ps_gamma - self.ps_gamma_server
        self.ps_lat_server = np.where(on_server, self.ps_lat, 0.0)
        self.ps_lat_sender = self.ps_lat - self.ps_lat_server
        self.ps_sparse_call = calls.reshape(2 * N, N) * config.sparse_call_s
        self.ps_sources = sources.reshape(2 * N)
        # the pushes crossing the server's NIC (at least one: a divisor)
        mates = np.repeat(w - 1.0, 2)
        self.ps_remote_sources = np.maximum(self.ps_sources - mates, 1.0)


def _fallback_ready(dense: np.ndarray, backward_s: float) -> np.ndarray:
    """Gradient-ready times without a profile: reverse forward order, each variable ready once
    the backward pass has covered the parameters from the last variable down to it."""
    weight = np.maximum(dense, 1.0)
    done_after = np.cumsum(weight[::-1])[::-1]  # parameters of this variable and the later ones
    return backward_s * done_after / float(weight.sum())


def _fill_missing(ready: np.ndarray) -> np.ndarray:
    out = ready.copy()
    for i in range(len(out)):
        if math.isnan(out[i]):
            out[i] = out[i - 1] if i else np.nanmax(ready)
    return out


class StepSimulator:
    """Simulates one iteration of strategies on one domain (see the module docstring).

    Constructing stores; the per-domain tables are built on first use.
    """

    lower_is_better: bool = True

    def __init__(self, domain: Domain, profile: WorkloadProfile | None = None,
                 calibration: ClusterCalibration | None = None,
                 config: StepSimConfig | None = None, decoder: RowDecoder | None = None,
                 variant: StepSimVariant | None = None):
        self.domain = domain
        self.profile = profile
        self.calibration = calibration
        self.config = config or StepSimConfig()
        self.variant = variant or StepSimVariant()
        self._decoder = decoder
        self._physics: _Physics | None = None

    @property
    def decoder(self) -> RowDecoder:
        if self._decoder is None:
            self._decoder = RowDecoder(self.domain)
        return self._decoder

    @property
    def physics(self) -> _Physics:
        if self._physics is None:
            self._physics = _Physics(self.domain, self.profile, self.calibration, self.config,
                                     self.variant)
        return self._physics

    def simulate(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """One :data:`TERMS` record per strategy (structured float64 array), in order.

        Batches are decoded in this thread (the decoder's caches are not shared) and simulated
        on up to :data:`_THREADS` threads (numpy releases the GIL inside its array operations)."""
        batches = self.decoder.batches(strategies, _ROWS_PER_BATCH)
        first = next(batches, None)
        if first is None:
            return np.zeros(0, dtype=_TERM_DTYPE)
        second = next(batches, None)
        if second is None:
            parts = [self.simulate_rows(self.decoder.rows(first, order=False))]
        elif _THREADS < 2:
            with heap_slack(_HEAP_SLACK):
                parts = [self.simulate_rows(self.decoder.rows(b, order=False))
                         for b in chain([first, second], batches)]
        else:
            from concurrent.futures import ThreadPoolExecutor

            _ = self.physics  # built once, before the threads read it
            parts = []
            in_flight: deque[Any] = deque()  # bounded: decoded rows of a few batches at a time
            with heap_slack(_HEAP_SLACK), ThreadPoolExecutor(_THREADS) as pool:
                for b in chain([first, second], batches):
                    if len(in_flight) >= 2 * _THREADS:
                        parts.append(in_flight.popleft().result())
                    if self.decoder.reads_arrays(b):  # no shared caches: decoded there
                        in_flight.append(pool.submit(self._simulate_batch, b))
                    else:
                        in_flight.append(pool.submit(self.simulate_rows,
                                                     self.decoder.rows(b, order=False)))
                parts += [f.result() for f in in_flight]
        if not parts:
            return np.zeros(0, dtype=_TERM_DTYPE)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _simulate_batch(self, batch: SampledBatch) -> np.ndarray:
        return self.simulate_rows(self.decoder.rows(batch, order=False))

    def score(self, strategies: Sequence[Strategy], domain: Domain | None = None) -> np.ndarray:
        """Predicted step seconds of every strategy (lower is faster)."""
        if domain is not None and domain.fingerprint != self.domain.fingerprint:
            raise ConfigError(f"domain: the simulator is for {self.domain.name!r}, got "
                              f"{domain.name!r}")
        return self.simulate(strategies)["step_s"]

    def simulate_rows(self, rows: Rows) -> np.ndarray:
        """The simulation of decoded rows (any row order)."""
        ph = self.physics
        B, V, N = rows.num_strategies, len(ph.rank_of_var), ph.num_nodes
        wire, touched, psgd = wire_bytes(rows, ph.tokens, ph.sparse_row_bytes, ph.var_rows)
        slot = rows.strat * V + ph.rank_of_var[rows.var]  # (strategy, launch rank)
        is_ar = rows.is_ar
        out = np.zeros(B, dtype=_TERM_DTYPE)

        # ---- all-reduce buckets: (strategy, group, compressor kind) ------------------------------
        ar = np.flatnonzero(is_ar)
        ar_work = np.zeros(B * V)
        nic_work = np.zeros((B * V, N))
        comp_total = np.zeros(B)
        coll_cpu = None  # [B * V]: PS-thread time the collectives launched in a slot take
        ring_cpu_total = np.zeros(B)  # [B]: host core-seconds of the rings' CPU per step
        if ar.size:
            ctab, codes = rows.ctab, rows.codes[ar]
            comp = ctab[4][codes]
            kind = np.where(comp == 3, 3 + np.minimum(ctab[5][codes], MAX_POWERSGD_RANK), comp)
            bucket_local, NB = _bucket_index(ctab, codes, kind)
            bkey = rows.strat[ar] * NB + bucket_local.reshape(-1)
            KB = B * NB
            b_release = np.full(KB, -1, dtype=np.int64)
            np.maximum.at(b_release, bkey, slot[ar])
            b_bytes = np.bincount(bkey, weights=wire[ar], minlength=KB)
            b_two = np.bincount(bkey, weights=psgd[ar], minlength=KB) > 0
            # compression on the worker: per piece (fusion copy + the compressor's action)
            numel = rows.numel[ar].astype(np.float64)
            c = ph.act_copy.at(numel)
            for code, act in ((1, ph.act_fp16), (2, ph.act_ef)):
                i = np.flatnonzero(comp == code)
                if i.size:
                    c[i] += act.at(numel[i])
            if (comp == 3).any():
                c = c + np.where(psgd[ar], ph.act_psgd.at(numel) * ctab[5][codes], 0.0)
            b_comp = np.bincount(bkey, weights=c, minlength=KB)
            present = b_release >= 0
            coll = np.where(b_two, 2.0, 1.0)
            b_time = b_comp + ph.ring_scale * (b_bytes * ph.ring_factor / ph.ring_bw
                                               + coll * ph.ar_lat_per_coll)
            rel = b_release[present]
            ar_work += np.bincount(rel, weights=b_time[present], minlength=B * V)
            nic_work += (np.bincount(rel, weights=b_bytes[present], minlength=B * V)[:, None]
                         * (ph.ring_scale * ph.ar_nic)[None, :])
            if ph.ar_ps_cpu_s > 0.0:
                coll_cpu = np.bincount(rel, weights=coll[present] * ph.ar_ps_cpu_s,
                                       minlength=B * V)
            c32, c16 = ph.ring_cpu_per_byte
            if c32 > 0.0 or c16 > 0.0:
                # the rings' CPU on the shared cores, per wire byte of each bucket's dtype
                per_byte = np.where((comp == 1) | (comp == 2), c16, c32)
                b_ring = np.bincount(bkey, weights=wire[ar] * per_byte, minlength=KB)[present]
                ring_cpu = np.bincount(rel, weights=b_ring, minlength=B * V)
                coll_cpu = ring_cpu if coll_cpu is None else coll_cpu + ring_cpu
                # every rank's rings in core-seconds over the host's cores: the same
                # processes / cores times one rank's CPU
                ring_cpu_total = np.bincount(np.flatnonzero(present) // NB, weights=b_ring,
                                             minlength=B)
            b_strat = np.flatnonzero(present) // NB
            comp_total = np.bincount(b_strat, weights=b_comp[present], minlength=B)
            out["ar_buckets"] = np.bincount(b_strat, minlength=B)
            out["ar_wire_bytes"] = np.bincount(b_strat, weights=b_bytes[present], minlength=B)

        # ---- parameter servers -------------------------------------------------------------------
        ps = np.flatnonzero(~is_ar)
        ps_work = np.zeros((B * V, N))  # per-piece work of the PS threads (slowed by the cores)
        ps_wire = np.zeros((B * V, N))  # NIC time of the PS bytes (at the links' rate)
        chain_end = None
        send_wire = send_work = None
        if ps.size:
            p = rows.server[ps]
            lr = rows.replication[ps].astype(np.int64)
            pl = p * 2 + lr
            b = wire[ps]
            nonlinear = rows.sparse[ps] & (lr == 1)
            b_lin = np.where(nonlinear, 0.0, b)
            key = slot[ps] * (2 * N) + pl
            K2 = B * V * 2 * N
            byte_tab = np.bincount(key, weights=b_lin, minlength=K2).reshape(B * V, 2 * N)
            # per-piece cost of dense pieces (a sparse piece's are in its exchange's chain)
            dense_ps = ~rows.sparse[ps]
            count_tab = np.bincount(key[dense_ps], minlength=K2).astype(np.float64).reshape(
                B * V, 2 * N)
            # a server's bytes and work add up; a sender's are combined below
            ps_wire += byte_tab @ ph.ps_gamma_server
            ps_work += count_tab @ ph.ps_lat_server
            send_wire = byte_tab @ ph.ps_gamma_sender
            send_work = count_tab @ ph.ps_lat_sender
            # the server aggregates every incoming gradient
            agg = ph.act_agg.at(rows.numel[ps].astype(np.float64)) * ph.ps_sources[pl]
            ps_work += np.bincount(slot[ps] * N + p, weights=agg,
                                   minlength=B * V * N).reshape(B * V, N)
            sp = rows.sparse[ps]
            if sp.any() and self.config.sparse_call_s > 0:
                ps_work += (np.bincount(key[sp], minlength=K2).reshape(B * V, 2 * N)
                            .astype(np.float64) @ ph.ps_sparse_call)
            if nonlinear.any():
                nl = np.flatnonzero(nonlinear)
                rows_nl = ps[nl]
                w = ph.workers
                p_nl = p[nl]
                on_server = p_nl[:, None] == np.arange(N)[None, :]
                sender = (np.minimum(w[None, :] * touched[rows_nl, None],
                                     rows.rows_total[rows_nl, None])
                          * ph.sparse_row_bytes[rows.var[rows_nl], None])
                sender[on_server] = 0.0
                ingress = np.where(on_server, sender.sum(axis=1)[:, None], sender)
                intra = (w - 1.0)[None, :] * b[nl, None]
                node_time = ingress / ph.nic[None, :] + intra / ph.intra
                if ph.world == 1:
                    node_time[:] = 0.0
                keys = (slot[rows_nl, None] * N + np.arange(N)[None, :]).ravel()
                ps_wire += np.bincount(keys, weights=node_time.ravel(),
                                       minlength=B * V * N).reshape(B * V, N)
            if self.variant.ps_chain and ph.world > 1 and dense_ps.any():
                ar_slot = None
                if self.variant.ps_chain_shares_nic and ar.size and ph.num_nodes > 1:
                    # the busiest NIC's share of the all-reduces launched in each slot
                    ar_slot = (np.bincount(rel, weights=b_bytes[present], minlength=B * V)
                               * (ph.ring_scale * float(ph.ar_nic.max())))
                chain_end = self._server_chain(rows, wire, ps[dense_ps], B, ar_slot, coll_cpu)
        sliced = ph.ps_sliced
        piece_work = ps_work.copy() if sliced else ps_work  # per-piece work, unslowed: [B * V, N]

        def node_work(scale: Any, w: np.ndarray) -> np.ndarray:
            # every node's PS-thread work per slot (in ``w``, the per-piece work), its per-piece
            # part slowed by ``scale``
            w *= scale
            w += ph.wire_scale * ps_wire
            if send_wire is not None:
                both = np.maximum if self.variant.ps_sender_overlaps else np.add
                w += both(scale * send_work, ph.wire_scale * send_wire)
            return w

        ps_work = node_work(ph.comm_scale, ps_work)

        # ---- queues: end = max_j (release_j + work released at or after j) ----------------------
        t = ph.release_sorted
        if ph.ar_busy_scale > 1.0:
            ar_end = _queue_end_slowed(ar_work.reshape(B, V), t, ph.backward_end,
                                       ph.ar_busy_scale)
        else:
            ar_end = _queue_end(ar_work.reshape(B, V), t)
        ps_end_nodes = np.zeros((B, N))
        if ps.size:
            # the PS thread reaches a piece once the pieces before it are done (the queue's
            # closed form, forwards: its end is the last finish of a slot with work)
            def node_queue(ps_work: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                work = _slots_last(ps_work, B, V, N)  # [B, N, V]
                has_work = work > 0
                if coll_cpu is not None:  # the collectives' wake-ups delay every PS thread
                    work += coll_cpu.reshape(B, 1, V)
                before = np.cumsum(work, axis=-1)
                before -= work
                reach = before + np.maximum.accumulate(t - before, axis=-1)
                finish = reach + work
                finish *= has_work
                return reach, finish, has_work

            reach, finish, has_work = node_queue(ps_work)
            if sliced:
                # a slot's per-piece work runs at the calibrated cost where the thread reaches
                # it after the backward pass (one more pass with the scales this one implies)
                late = (reach >= ph.backward_end).transpose(0, 2, 1).reshape(B * V, N)
                ps_work = node_work(np.where(late, 1.0, ph.comm_scale), piece_work)
                reach, finish, has_work = node_queue(ps_work)
            ps_end_nodes = finish.max(axis=-1)
        nic_work += ps_work
        nic_end = _queue_end(_slots_last(nic_work, B, V, N), t).reshape(B, N).max(axis=1)
        ps_end = ps_end_nodes.max(axis=1)
        if chain_end is not None:
            ps_end = np.maximum(ps_end, chain_end)
        threads_end = np.maximum(ar_end, ps_end)
        sparse_cpu = np.zeros(B)
        if ps.size and rows.sparse[ps].any():
            chain_end, sparse_cpu = self._sparse_chain(
                rows, wire, ps[rows.sparse[ps]], np.maximum(ar_end[:, None], ps_end_nodes), reach)
            threads_end = np.maximum(threads_end, chain_end)
        sync_end = np.maximum(threads_end, nic_end)

        comm_cpu = np.zeros(B)
        if ph.shared_host:
            # one host's cores run every worker's compute, compression and network stack: the
            # CPU the network stack spends (per byte sent, per message) is taken from compute
            cfg = self.config
            W = ph.world
            sent = (W * ph.ring_factor) * out["ar_wire_bytes"]
            msgs = np.zeros(B)
            if ps.size:
                sent += (2.0 * (W - 1)) * np.bincount(rows.strat[ps], weights=wire[ps],
                                                      minlength=B)
                msgs += (2.0 * (W - 1)) * np.bincount(rows.strat[ps], minlength=B)
            if ar.size:
                msgs += np.bincount(np.flatnonzero(present) // NB, weights=coll[present]
                                    * 2.0 * W * (W - 1), minlength=B)
            comm_cpu = (sent * cfg.host_cpu_s_per_byte
                        + msgs * cfg.host_cpu_s_per_message) / ph.host_cores
        backward_end = ph.backward_end + ph.cpu_share * (comp_total + comm_cpu)
        critical = np.maximum(backward_end, sync_end)
        step = critical + ph.optimizer_s
        if ph.shared_host:
            cpu = ((W * (ph.unloaded_compute_s + comp_total) + sparse_cpu) / ph.host_cores
                   + comm_cpu + ring_cpu_total)
            out["cpu_contention_s"] = np.maximum(0.0, cpu - step) + ph.cpu_share * comm_cpu
            step = np.maximum(step, cpu)
        out["step_s"] = step + self.config.step_overhead_s
        out["compute_s"] = ph.compute_s
        out["exposed_comm_s"] = np.maximum(0.0, sync_end - backward_end)
        out["exposed_compute_s"] = out["step_s"] - out["exposed_comm_s"]
        out["compression_s"] = comp_total
        out["cpu_contention_s"] += (ph.compute_s - ph.unloaded_compute_s
                                    + ph.cpu_share * comp_total)
        out["nic_contention_s"] = sync_end - threads_end
        out["ar_s"] = ar_work.reshape(B, V).sum(axis=1)
        out["ps_s"] = np.einsum("bvn->bn", ps_work.reshape(B, V, N)).max(axis=1)
        out["sync_end_s"] = sync_end
        return out

    def _server_chain(self, rows: Rows, wire: np.ndarray, dense: np.ndarray, B: int,
                      ar_slot: np.ndarray | None = None,
                      coll_cpu: np.ndarray | None = None) -> np.ndarray:
        """``[B]``: when the dense PS pieces (``dense``: their rows) are complete at the earliest,
        replaying the executor's order of pieces.

        Every rank's PS thread takes the pieces in launch order; a sender hands its push to the
        network and goes on, a server blocks on its gather, then sends its answers and goes on.
        gloo sends only to a posted receive, and the notice that a receive is posted travels
        behind the data already queued to that peer, so a server gathers piece ``i`` only once
        its answers of the piece before are out (``ps_results_block_gathers``), and the server
        of the piece before pushes piece ``i`` only after those answers. Traced on an
        emulated cluster (``research/probes/ps_layouts.py --trace``), the other pushes of a piece
        do not reach its server early either: they cross its NIC after the piece before is
        gathered (``ps_push_after_gather``, the share that does). So, with ``in_i`` every push
        of piece ``i`` into its server, ``out_i`` its answers and ``k`` the per-piece cost,
        the gather ends ``G_i = max(release_i + in_i, G_(i-1) + c_i) + k`` where ``c_i`` is
        ``out_(i-1) + in_i`` on the same server, else ``max(share * in_i, out_(i-1) + one
        push)``; piece ``i`` is complete at ``G_i + out_i``. The max-plus recurrence is solved
        in closed form, ``G_i = C_i + max_(j <= i)(r_j - C_j)`` with ``C`` the running sum of
        ``c`` and ``r_j = release_j + in_j + k``, segmented by strategy. ``ar_slot [B * V]``:
        the busiest NIC's time for the all-reduces launched in each slot, which lengthen the
        next piece's ``c`` (``ps_chain_shares_nic``); ``coll_cpu [B * V]``: the PS threads' time
        the collectives launched in each slot take, added to the next piece's ``c``
        (``collectives_take_ps_cpu``)."""
        ph = self.physics
        if rows.ordered and ph.launch_reversed:
            # rows in (strategy, variable, shard) order, launched in reverse variable order:
            # the reversed rows are in launch order but for a variable's shards (first to last)
            dense = dense[::-1]
            if rows.partitioned[dense].any():
                var = rows.strat[dense].astype(np.int64) * len(ph.rank_of_var) + rows.var[dense]
                run = np.r_[True, var[1:] != var[:-1]]
                run_id = np.cumsum(run) - 1
                starts = np.flatnonzero(run)
                ends = np.r_[starts[1:], var.size]
                dense = dense[starts[run_id] + ends[run_id] - 1 - np.arange(var.size)]
        else:
            key = ((rows.strat[dense].astype(np.int64) * len(ph.rank_of_var)
                    + ph.rank_of_var[rows.var[dense]]) * (int(rows.shards.max()) + 1)
                   + rows.shard[dense])
            dense = dense[np.argsort(key, kind="stable")]
        p = rows.server[dense]
        pl = p * 2 + rows.replication[dense]
        b = ph.wire_scale * wire[dense]
        cost = ph.comm_scale * ph.ps_piece_s
        k_row = ph.rank_of_var[rows.var[dense]]
        st = rows.strat[dense]
        N = ph.num_nodes
        pl_n = pl * N
        t_in = b * ph.ps_gamma_in_flat[pl_n + p]
        t_out = b * ph.ps_gamma_out_flat[pl_n + p]
        first = np.r_[True, st[1:] != st[:-1]]
        prev_p = np.r_[0, p[:-1]]
        prev_out = np.r_[0.0, t_out[:-1]]
        push = b * ph.ps_gamma_in_flat[pl_n + prev_p]  # the previous server's push of it
        c = np.maximum(self.variant.ps_push_after_gather * t_in, prev_out + push)
        c = np.where(p == prev_p, prev_out + t_in, c)
        if ar_slot is not None:
            # the all-reduces launched since the piece before share the NICs with this piece,
            # a flow among its flows (TCP shares a link per flow): while the piece's bytes
            # cross, the ring gets 1 / (flows + 1) of the link, so the piece takes up to
            # 1 / flows longer, or as long as those all-reduces' bytes if they are fewer
            here = np.cumsum(ar_slot)[st * len(ph.rank_of_var) + k_row]
            launched = here - np.r_[0.0, here[:-1]]
            c += np.minimum(launched, c / ph.ps_remote_sources[pl])
        if coll_cpu is not None:
            here = np.cumsum(coll_cpu)[st * len(ph.rank_of_var) + k_row]
            c += here - np.r_[0.0, here[:-1]]
        release = ph.release_sorted[k_row] + t_in

        def gathers(cost: Any) -> np.ndarray:
            # the max-plus recurrence in closed form, segmented by strategy
            cc = c + cost
            cc[first] = 0.0
            C = np.cumsum(cc)
            v = release + cost - C
            off = (np.cumsum(first) - 1) * (2.0 * (float(np.abs(v).max()) + 1.0))
            return C + np.maximum.accumulate(v + off) - off

        g = gathers(cost)
        if ph.ps_sliced:
            # a piece whose gather starts after the backward pass pays the calibrated cost
            # (one more pass with the costs this one implies)
            g = gathers(np.where(g - cost >= ph.backward_end, ph.ps_piece_s, cost))
        starts = np.flatnonzero(first)
        out = np.zeros(B)
        out[st[starts]] = np.maximum.reduceat(g + t_out, starts)
        return out

    def _sparse_chain(self, rows: Rows, wire: np.ndarray, sp: np.ndarray,
                      other_end: np.ndarray, reach: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """When the last row-sparse exchange is complete on every rank (``[B]``), replaying the
        dependent steps of the executor's sparse exchange (``sp``: the rows of sparse PS pieces).

        The PS thread of every rank takes the pieces in launch order, one at a time. A
        worker finds its touched rows in the dense gradient (``sparse_gather``) and pushes them;
        the server, once its thread reaches the piece (its receives are posted only then, so the
        piece's hops start then), copies its own gradient, waits for every push (the hops and
        its NIC time for the piece), averages in place, finds the touched rows of the average,
        answers, and copies the average into its gradient. With local replication a remote
        node's leader first sums its node-mates' pushes and searches the sum. A worker completes its pieces only after
        its communication threads have ended (``other_end [B, N]``: the AR thread and the PS
        queue of its node), one after another: it waits for the answer, builds the dense result
        (``sparse_scatter``) and copies it into its gradient. ``reach [B, N, V]``: when a
        node's PS thread is through the other exchanges released up to each launch slot (the
        PS queue). Rows are tracked for the first
        rank of every node (a server) and for the node's other ranks (workers only).

        Also returns the CPU seconds all ranks together spend on these steps (unloaded)."""
        ph = self.physics
        B, N = rows.num_strategies, ph.num_nodes
        s = ph.comm_scale
        W = float(ph.world)
        has_other = ph.workers > 1
        any_other = bool(has_other.any())
        k_row = ph.rank_of_var[rows.var[sp]].astype(np.int64)
        pos = k_row * (int(rows.shards.max()) + 1) + rows.shard[sp]
        order = np.argsort(pos, kind="stable")
        sp, pos, k_row = sp[order], pos[order], k_row[order]
        cuts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1], True])
        # ---- per piece, all at once ----
        st_all = rows.strat[sp]
        n_el = rows.numel[sp].astype(np.float64)
        u_gat, u_cp, u_sc = ph.act_gather.at(n_el), ph.act_copy.at(n_el), ph.act_scatter.at(n_el)
        gat, cp = s * u_gat, s * u_cp
        p_all = rows.server[sp]
        lr_all = rows.replication[sp]
        pl = p_all * 2 + lr_all.astype(np.int64)
        # from when the server reaches the piece (its receives are posted then): the header's
        # hop, then a round trip (the payloads' receives are posted, all sources at once, once
        # their headers are in), and the server's NIC time for the pushes
        hop = ph.sparse_hop_s[p_all]
        net = ph.wire_scale * ph.ps_gamma_in[pl, p_all] * wire[sp] + _SPARSE_HOPS * hop
        own = np.maximum(ph.release_sorted[k_row], reach[st_all, p_all, k_row]) + cp
        after = 2.0 * cp + gat  # average, search the average, copy it back
        # the answer: its payload's round trip (a hop of the chain), build, copy
        scatter = s * u_sc + hop + cp
        on_p_all = p_all[:, None] == np.arange(N)[None, :]
        lead_all = lr_all[:, None] & ~on_p_all  # a remote node's first rank gathers its node
        o_src_all = has_other[None, :] & (on_p_all | ~lr_all[:, None])
        # CPU of all ranks: every rank searches its gradient; the server copies, averages,
        # searches and copies back; every other rank builds and copies the answer; a leader
        # also sums and searches its node's pushes and searches the answer again
        work = ((W + 1.0) * u_gat + 3.0 * u_cp + (W - 1.0) * (u_sc + u_cp)
                + lr_all * (N - 1.0) * (u_cp + 2.0 * u_gat))
        cpu = np.bincount(st_all, weights=work, minlength=B)
        t_first = np.zeros((B, N))  # PS thread of each node's first rank: free from
        t_other = np.zeros((B, N))  # PS thread of the node's other ranks
        done_all = np.empty(sp.size)
        for a, b in zip(cuts[:-1], cuts[1:]):
            st = st_all[a:b]
            rel = ph.release_sorted[k_row[a]]
            g = gat[a:b, None]
            on_p = on_p_all[a:b]
            f0 = np.maximum(t_first[st], rel)
            f_push = f0 + g
            if any_other:
                o_push = np.maximum(t_other[st], rel) + g
                if lr_all[a:b].any():
                    lead = lead_all[a:b]
                    f_push = np.where(lead, np.maximum(f0 + cp[a:b, None],
                                                       np.where(has_other, o_push, 0.0)) + g,
                                      f_push)
                arrive = np.maximum(np.where(on_p, 0.0, f_push).max(axis=1),
                                    np.where(o_src_all[a:b], o_push, 0.0).max(axis=1))
                t_other[st] = o_push
            else:
                arrive = np.where(on_p, 0.0, f_push).max(axis=1)
            start = np.maximum(f0[on_p] + cp[a:b], own[a:b])  # its own copy
            done = np.maximum(start, arrive) + net[a:b] + after[a:b]
            done_all[a:b] = done
            t_first[st] = np.where(on_p, done[:, None], f_push)
        pend_first = np.maximum(t_first, other_end)
        pend_other = np.maximum(t_other, other_end)
        extra = np.where(lead_all, gat[:, None], 0.0) + scatter[:, None]
        for a, b in zip(cuts[:-1], cuts[1:]):
            st = st_all[a:b]
            on_p = on_p_all[a:b]
            done = done_all[a:b, None]
            first = np.maximum(pend_first[st], done) + extra[a:b]
            pend_first[st] = np.where(on_p, pend_first[st], first)
            if any_other:
                # a remote node's other ranks get the answer from their leader (replication)
                ans = np.where(lead_all[a:b], first, done)
                pend_other[st] = np.maximum(pend_other[st], ans) + scatter[a:b, None]
        end = pend_first.max(axis=1)
        if any_other:
            end = np.maximum(end, np.where(has_other[None, :], pend_other, 0.0).max(axis=1))
        return end, cpu


def _bucket_index(ctab: np.ndarray, codes: np.ndarray, kind: np.ndarray
                  ) -> tuple[np.ndarray, int]:
    """The bucket (group, compressor kind) of every all-reduce row as an index ``0..NB-1``.

    Keys are made unique over the code table when it is small (a sampler's table: a few codes
    per group), which costs nothing per row; over the rows otherwise."""
    if ctab.shape[1] <= 4 * codes.size:
        is_ar = ctab[0] == 1
        tab_comp = ctab[4]
        tab_kind = np.where(tab_comp == 3, 3 + np.minimum(ctab[5], MAX_POWERSGD_RANK), tab_comp)
        tab_key = np.where(is_ar, ctab[3] * _BUCKET_KINDS + tab_kind, -1)
        uniq, inv = np.unique(tab_key[is_ar], return_inverse=True)
        local = np.full(ctab.shape[1], -1, dtype=np.int64)
        local[is_ar] = inv.reshape(-1)
        return local[codes], int(uniq.size)
    gk = ctab[3][codes] * _BUCKET_KINDS + kind
    uniq, inv = np.unique(gk, return_inverse=True)
    return inv.reshape(-1), int(uniq.size)


def _queue_end(work: np.ndarray, release: np.ndarray) -> np.ndarray:
    """End of a work-conserving queue per strategy (and node): ``work [B, V]`` or
    ``[B, N, V]`` released at ``release [V]`` (ascending); 0 where there is no work."""
    rev = work[..., ::-1]
    after = np.cumsum(rev, axis=-1)  # work released at or after j (reversed)
    after += release[::-1]
    after *= rev > 0  # (a multiply: numpy's masked assignments are several times slower)
    return after.max(axis=-1)


def _queue_end_slowed(work: np.ndarray, release: np.ndarray, until: float, scale: float
                      ) -> np.ndarray:
    """:func:`_queue_end` of a queue served ``scale`` times slower until ``until``, then at
    full rate: in the queue's own clock (``tau = t / scale`` before ``until``, ``until / scale +
    (t - until)`` after) it is an ordinary queue, and the clock maps back one to one."""
    knee = until / scale
    tau = np.where(release <= until, release / scale, knee + (release - until))
    end = _queue_end(work, tau)
    return np.where(end <= knee, end * scale, until + (end - knee))


def _slots_last(x: np.ndarray, B: int, V: int, N: int) -> np.ndarray:
    """``[B * V, N]`` -> contiguous ``[B, N, V]``: numpy scans and reduces the last axis many
    times faster than a middle one over a few columns."""
    return np.ascontiguousarray(x.reshape(B, V, N).transpose(0, 2, 1))


def simulate(strategies: Sequence[Strategy], domain: Domain,
             profile: WorkloadProfile | None = None,
             calibration: ClusterCalibration | None = None,
             config: StepSimConfig | None = None) -> np.ndarray:
    """:meth:`StepSimulator.simulate` of ``strategies`` on ``domain``."""
    return StepSimulator(domain, profile, calibration, config).simulate(strategies)
