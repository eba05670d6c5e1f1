"""The sampler's strategy space and heuristics (:class:`SamplerConfig`) and its named presets."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from autosync_transfer.errors import UnknownNameError
from autosync_transfer.strategies.types import Compressor

__all__ = ["MAX_INT32", "PRESETS", "SamplerConfig", "preset", "preset_names"]

#: AutoSync's "unbounded" value for bounds (2**31 - 1)
MAX_INT32 = 2**31 - 1

SynchronizerType = Literal["ps", "ar"]
LoadBalancer = Literal[
    "random", "greedy", "sorted_greedy", "randomized_greedy", "sorted_randomized_greedy"
]
MergeScheme = Literal["random", "by_chunk", "randomized_greedy", "ordered_balanced"]
KnobPrior = Literal["uniform", "mixture"]
Bound = Union[int, Literal["num_nodes"]]


class SamplerConfig(BaseModel):
    """The strategy space and the heuristics of :class:`StrategySampler`.

    Space (uniform choices): ``synchronizer_types`` (``ps``/``ar``) for dense pieces,
    ``compressors`` and ``powersgd_ranks`` for all-reduce pieces, ``local_replication`` for PS
    pieces (only when some node has more than one worker), ``maybe_partition`` (partition a
    variable or not), ``partitionable_axes`` (if non-empty, only these axes may be split).

    Heuristics: ``ps_load_balancer`` places PS pieces on nodes (``greedy`` = least bytes so far;
    ``sorted_*`` handles pieces largest first; ``randomized_*`` samples a node with probability
    ``softmax((target_s - load_s) / (balance_temperature * total))`` where ``target_s`` is the
    node's bandwidth share of the total load — smaller temperatures are closer to greedy);
    ``merge_scheme`` fuses all-reduce pieces into G groups, G uniform in ``num_group_bounds``
    clipped to ``[1, #AR pieces]`` (``random`` groups with none empty, contiguous ``by_chunk``
    chunks of ``chunk_size`` pieces when set (then G is not used) else ``ceil(pieces / G)``,
    ``randomized_greedy`` size balancing largest first, or ``ordered_balanced``: contiguous groups
    in forward order, each filled until it holds ``1/G`` of the bytes). ``num_partition_bounds``
    bounds the shard count: ``[max(2, lb), min(dim, ub)]``. Either bound of both may be
    ``"num_nodes"``. ``maybe_partition_bounds`` (bytes): variables of at most ``lb`` bytes are
    never partitioned, of at least ``ub`` bytes always (when partitioning is a choice), in between
    with probability ``(size - lb) / (ub - lb)`` if ``maybe_partition_by_size`` else 1/2.
    ``same_synchronizer_for_parts`` gives all shards of a variable one synchronizer type.

    ``knob_prior``: ``uniform`` (AutoSync's) draws every variable's choices uniformly, so on a
    model of a few hundred variables every strategy is about half PS, half all-reduce, half
    compressed: the sampled strategies all look alike in aggregate, far from the builders (all
    all-reduce, all PS) and from, say, all-reduce with fp16 everywhere. ``mixture`` first draws
    per strategy the probability of PS for a dense piece, of local replication, the compressor
    weights (Dirichlet(1, ...)) and a partition scale ``s`` (a variable partitioned with
    probability ``min(1, 2 s p)`` where ``uniform`` uses ``p``), then every variable from those:
    the same space (every constraint holds), spread over its corners.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    synchronizer_types: tuple[SynchronizerType, ...] = ("ps", "ar")
    compressors: tuple[Compressor, ...] = ("none", "fp16")
    powersgd_ranks: tuple[int, ...] = (1, 2, 4)
    local_replication: tuple[bool, ...] = (True, False)
    maybe_partition: tuple[bool, ...] = (True, False)
    partitionable_axes: tuple[int, ...] = ()

    ps_load_balancer: LoadBalancer = "sorted_randomized_greedy"
    merge_scheme: MergeScheme = "ordered_balanced"
    balance_temperature: float = Field(default=0.1, gt=0, allow_inf_nan=False)
    chunk_size: int | None = Field(default=None, ge=1)
    num_group_bounds: tuple[Bound, Bound] = (1, 20)
    num_partition_bounds: tuple[Bound, Bound] = (2, 40)
    maybe_partition_bounds: tuple[int, int] = (0, MAX_INT32)
    maybe_partition_by_size: bool = False
    same_synchronizer_for_parts: bool = False
    knob_prior: KnobPrior = "uniform"

    @field_validator(
        "synchronizer_types",
        "compressors",
        "powersgd_ranks",
        "local_replication",
        "maybe_partition",
    )
    @classmethod
    def _choices(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        if not v:
            raise ValueError(f"{info.field_name} needs at least one choice, got none")
        if len(set(v)) != len(v):
            raise ValueError(f"{info.field_name} must not repeat a choice, got {list(v)}")
        return v

    @field_validator("powersgd_ranks")
    @classmethod
    def _ranks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for r in v:
            if not 1 <= r <= 64:
                raise ValueError(f"powersgd_ranks must be between 1 and 64, got {r}")
        return v

    @field_validator("partitionable_axes")
    @classmethod
    def _axes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for a in v:
            if a < 0:
                raise ValueError(f"partitionable_axes must be >= 0, got {a}")
        if len(set(v)) != len(v):
            raise ValueError(f"partitionable_axes must not repeat an axis, got {list(v)}")
        return v

    @field_validator(
        "num_group_bounds", "num_partition_bounds", "maybe_partition_bounds", mode="before"
    )
    @classmethod
    def _no_bools(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, (list, tuple)) and any(isinstance(x, bool) for x in v):
            raise ValueError(f"{info.field_name} must be integers, got {list(v)}")
        return v

    @field_validator("num_group_bounds", "num_partition_bounds")
    @classmethod
    def _bounds(cls, v: tuple[Bound, Bound], info: ValidationInfo) -> tuple[Bound, Bound]:
        name = info.field_name
        lo, hi = v
        for which, b in (("lower", lo), ("upper", hi)):
            if isinstance(b, int) and b < 1:
                raise ValueError(f"{name} {which} bound must be >= 1 or 'num_nodes', got {b}")
        if name == "num_partition_bounds" and isinstance(hi, int) and hi < 2:
            raise ValueError(
                f"num_partition_bounds upper bound must be >= 2 (a partition has at least 2 "
                f"shards; use maybe_partition=(False,) to never partition), got {hi}"
            )
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            raise ValueError(f"{name} must satisfy lower <= upper, got ({lo}, {hi})")
        return v

    @field_validator("maybe_partition_bounds")
    @classmethod
    def _byte_bounds(cls, v: tuple[int, int]) -> tuple[int, int]:
        lo, hi = v
        if lo < 0 or lo > hi:
            raise ValueError(
                f"maybe_partition_bounds must satisfy 0 <= lower <= upper (bytes), got ({lo}, {hi})"
            )
        return v

    def resolved_bounds(
        self, which: Literal["num_group_bounds", "num_partition_bounds"], num_nodes: int
    ) -> tuple[int, int]:
        """The integer bounds of ``which`` with ``"num_nodes"`` replaced by ``num_nodes``."""
        lo, hi = getattr(self, which)
        lo_i = num_nodes if lo == "num_nodes" else int(lo)
        hi_i = num_nodes if hi == "num_nodes" else int(hi)
        return lo_i, hi_i


#: named sampler configurations (keyword arguments of :class:`SamplerConfig`)
PRESETS: dict[str, dict[str, Any]] = {
    # the package default: AutoSync's product preset (AutoStrategy), with fp16 for Horovod's cast
    "default": {},
    "product": {},
    # AutoSync's default_space / default_heuristics: random placement and random groups
    "autosync_default": {
        "compressors": ("none", "fp16", "fp16_ef"),
        "local_replication": (False,),
        "ps_load_balancer": "random",
        "merge_scheme": "random",
        "num_group_bounds": (1, MAX_INT32),
        "num_partition_bounds": (2, MAX_INT32),
    },
    "ps_only": {"synchronizer_types": ("ps",)},
    "ar_only": {"synchronizer_types": ("ar",)},
    # every compressor, PowerSGD ranks included
    "compressed": {"compressors": ("none", "fp16", "fp16_ef", "powersgd")},
    # AutoSync's data-collection setting "if-partition-lb-100000": never split vars <= 100 kB
    "large_partitions": {"maybe_partition_bounds": (100_000, MAX_INT32)},
    # the dataset's space with strategy-level knob probabilities (what a search samples)
    "mixture": {"maybe_partition_bounds": (100_000, MAX_INT32), "num_partition_bounds": (2, 20),
                "knob_prior": "mixture"},
    # what the shipped dataset samples: AutoSync's collection settings "if-partition-lb-100000"
    # and "max-par-20" (tiny tensors are never split, at most 20 shards)
    "dataset": {"maybe_partition_bounds": (100_000, MAX_INT32), "num_partition_bounds": (2, 20)},
}


def preset_names() -> list[str]:
    """The names of :data:`PRESETS`."""
    return list(PRESETS)


def preset(name: str, **overrides: Any) -> SamplerConfig:
    """The :class:`SamplerConfig` of preset ``name``, with ``overrides`` applied."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown sampler preset {name!r} (known: {', '.join(PRESETS)})"
        ) from None
    return SamplerConfig(**{**base, **overrides})
