"""Measured physics of a domain: a workload's profile and a cluster's calibration.

These are the inputs of the step-time simulator (:mod:`autosync_transfer.rankers.stepsim`):

* :class:`WorkloadProfile` — one workload measured once on one worker (no cluster): forward,
  backward and optimizer time, when each variable's gradient becomes ready during backward, and
  the measured cost of each synchronization action as a function of tensor size
  (:class:`ActionCost`). Keyed by (workload fingerprint, worker type).
* :class:`ClusterCalibration` — one cluster measured once through the project's own runtime:
  per-node bandwidth and per-message latency from point-to-point and collective microbenchmarks,
  the intra-node path, and the compute slowdown when several worker processes share a host's
  cores. Keyed by the cluster's fingerprint and the launcher that measured it.

Both are plain, frozen data (measured by :mod:`autosync_transfer.runtime`, stored as JSON); this
module does no measuring.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ACTIONS", "ActionCost", "WorkloadProfile", "NodeCalibration", "ClusterCalibration"]

#: synchronization actions whose cost on a worker the profile measures vs tensor size
ACTIONS: tuple[str, ...] = (
    "fp16_cast",        # fp32 -> fp16 -> fp32 round trip of a tensor (fp16 compressor)
    "error_feedback",   # add the residual, compress, store the new residual (fp16_ef)
    "powersgd",         # one PowerSGD rank-r factorization step (per element of the matrix, at rank 1)
    "ps_aggregate",     # a server summing one worker's gradient into the aggregate
    "sparse_gather",    # row-sparse: gathering the looked-up rows and their indices
    "sparse_scatter",   # row-sparse: scattering averaged rows back into a dense gradient
    "copy",             # flattening a tensor into a fused bucket and back
)

Action = Literal["fp16_cast", "error_feedback", "powersgd", "ps_aggregate", "sparse_gather",
                 "sparse_scatter", "copy"]


class ActionCost(BaseModel):
    """Seconds one synchronization action takes on one worker for tensors of ``elements`` elements
    (increasing), as measured; :meth:`at` interpolates linearly between the points and
    extrapolates with the last segment's per-element slope (never below the smallest point's
    time)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Action
    elements: tuple[int, ...] = Field(min_length=1)
    seconds: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ActionCost:
        if len(self.elements) != len(self.seconds):
            raise ValueError(f"elements and seconds must have the same length, got "
                             f"{len(self.elements)} and {len(self.seconds)}")
        if any(b <= a for a, b in zip(self.elements, self.elements[1:])):
            raise ValueError(f"elements must be strictly increasing, got {self.elements}")
        if any(e < 1 for e in self.elements):
            raise ValueError(f"elements must be >= 1, got {self.elements}")
        if any(not math.isfinite(s) or s < 0 for s in self.seconds):
            raise ValueError(f"seconds must be finite and >= 0, got {self.seconds}")
        return self

    def at(self, elements: np.ndarray | float) -> np.ndarray:
        """Seconds for tensors of ``elements`` elements (vectorized)."""
        n = np.asarray(elements, dtype=np.float64)
        x = np.asarray(self.elements, dtype=np.float64)
        y = np.asarray(self.seconds, dtype=np.float64)
        out = np.array(np.interp(n, x, y), dtype=np.float64)  # y[-1] beyond the last point
        if len(x) >= 2:
            slope = max((y[-1] - y[-2]) / (x[-1] - x[-2]), 0.0)
            if slope > 0:
                out += slope * np.maximum(n - x[-1], 0.0)
        if out.size and n.min() <= 0:
            out[n <= 0] = 0.0
        return out


class WorkloadProfile(BaseModel):
    """One workload measured on one worker (one process, ``threads`` compute threads).

    ``ready_s[name]`` is when the gradient of variable ``name`` (as named in the model graph)
    becomes ready, in seconds after backward started; ``forward_s`` / ``backward_s`` /
    ``optimizer_s`` are medians over the profiled steps.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str = Field(min_length=1)
    fingerprint: str = Field(min_length=1, description="the model graph's fingerprint")
    worker_type: str = Field(min_length=1, description="e.g. 'cpu:<processor>:threads=1'")
    batch_size: int = Field(ge=1)
    threads: int = Field(default=1, ge=1)
    forward_s: float = Field(ge=0, allow_inf_nan=False)
    backward_s: float = Field(ge=0, allow_inf_nan=False)
    optimizer_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    ready_s: dict[str, float] = Field(default_factory=dict)
    actions: dict[str, ActionCost] = Field(default_factory=dict)
    steps: int = Field(default=1, ge=1, description="profiled steps the medians are over")
    versions: dict[str, str] = Field(default_factory=dict, description="torch version, ...")
    created_at: str = ""
    clock: Literal["wall", "cpu"] = Field(
        default="wall", description="what the times count: wall-clock seconds, or the process's "
                                    "CPU seconds (one thread: the undisturbed wall time)")
    seconds: float = Field(default=0.0, ge=0, description="how long the profiling took")
    foreign_cpu: float | None = Field(
        default=None, ge=0, le=1, description="share of the machine's CPU that other processes "
                                              "used while it was measured")

    @property
    def compute_s(self) -> float:
        """Forward + backward + optimizer of one step on one unloaded worker."""
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def processor(self) -> str | None:
        """The processor named by the worker type (``cpu:<processor>:threads=<n>``), or None."""
        parts = self.worker_type.split(":")
        return (":".join(parts[1:-1]) or None) if len(parts) >= 3 else None


class NodeCalibration(BaseModel):
    """One node's measured NIC: bandwidth (Gbit/s, each direction) and per-message latency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    bandwidth_gbps: float = Field(gt=0, allow_inf_nan=False)
    latency_s: float = Field(ge=0, allow_inf_nan=False)


class ClusterCalibration(BaseModel):
    """One cluster measured through the runtime (``launcher``: emulated, torchrun, ...).

    ``compute_slowdown[k]`` is how much slower one step's compute runs when ``k`` worker processes
    compute at once on one host (1.0 for ``k = 1``); ``host_cores`` the cores they share.
    ``collective_latency_s`` is the fixed cost of one collective call beyond the per-message
    latencies (framework overhead), measured with tiny all-reduces.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: str = Field(min_length=1)
    fingerprint: str = Field(min_length=1, description="the cluster's fingerprint")
    launcher: str = Field(min_length=1)
    nodes: tuple[NodeCalibration, ...] = Field(min_length=1)
    intra_bandwidth_gbps: float = Field(gt=0, allow_inf_nan=False)
    intra_latency_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    collective_latency_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    compute_slowdown: dict[int, float] = Field(default_factory=lambda: {1: 1.0})
    host_cores: int = Field(default=1, ge=1)
    seconds: float = Field(default=0.0, ge=0, description="how long the calibration took")
    created_at: str = ""
    allreduce_s: dict[int, float] = Field(
        default_factory=dict, description="seconds of one all-reduce over every worker (by "
                                          "allreduce_stat, slowest rank), by message bytes")
    foreign_cpu: float | None = Field(
        default=None, ge=0, le=1, description="share of the machine's CPU that other processes "
                                              "used while it was measured")
    ps_piece_s: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description=(
            "seconds one parameter-server piece costs the executor beyond its bytes (every "
            "rank's PS thread posting, waiting and answering; its messages' latencies), from a "
            "step of many one-element pieces on one server; None: not measured (calibrations "
            "written before it)"))
    ps_sparse_piece_s: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description=(
            "the same for a row-sparse piece (a header, then indices and rows, then the "
            "answer), from tables with one touched row; None: not measured"))
    ar_collective_s: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description=(
            "seconds one more all-reduce collective adds to a step whose parameter-server work "
            "binds (its wake-ups take CPU from the PS threads where the workers outnumber the "
            "cores), from the dense pieces beside 1 and 17 all-reduce buckets of "
            "ar_collective_elements elements each; None: not measured (calibrations written "
            "before it)"))
    ar_collective_elements: int | None = Field(
        default=None, ge=1, description=(
            "float32 elements of each all-reduce bucket ar_collective_s was measured with "
            "(4096: several chunks per rank, as the executor's buckets; a one-element "
            "collective costs a quarter of the CPU); None: one element (calibrations written "
            "before it)"))
    allreduce_stat: Literal["median", "min"] = Field(
        default="min", description=(
            "how allreduce_s summarizes its repetitions: median (each rank's median over "
            "interleaved repetitions, the slowest rank) or min (the fastest repetition: "
            "calibrations written before the median)"))
    processor: str | None = Field(
        default=None, description=(
            "the processor model of the machine that measured it (as in a workload profile's "
            "worker type); None: not recorded (calibrations written before it)"))
    ar_cpu_s_per_element: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description=(
            "process CPU seconds one rank spends per float32 element it all-reduces, beyond a "
            "collective's fixed cost (gloo's reduction and socket copies): the slope between "
            "all-reduces of two sizes; None: not measured (calibrations written before it)"))
    ar_fp16_cpu_s_per_element: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description=(
            "the same per float16 element (an fp16-compressed bucket's wire); None: not "
            "measured"))

    def slowdown(self, processes: int) -> float:
        """Compute slowdown of ``processes`` concurrent workers on one host (interpolated; beyond
        the largest measured count, proportional to processes / host_cores)."""
        if processes <= 1 or not self.compute_slowdown:
            return 1.0
        ks = sorted(self.compute_slowdown)
        if processes in self.compute_slowdown:
            return self.compute_slowdown[processes]
        if processes > ks[-1]:
            return self.compute_slowdown[ks[-1]] * processes / ks[-1]
        return float(np.interp(processes, ks, [self.compute_slowdown[k] for k in ks]))
