"""Typed per-variable synchronization strategies and their JSON form."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autosync_transfer.errors import SpecError, format_pydantic_error

__all__ = [
    "Compressor",
    "COMPRESSORS",
    "PS",
    "AllReduce",
    "Synchronizer",
    "Partition",
    "VarConfig",
    "Strategy",
    "looks_like_json",
    "TORCH_DDP",
]

#: The one name of the torch DDP reference measurement (``DistributedDataParallel`` with its own
#: buckets, no strategy of ours): its ``strategy_id`` and ``strategy_kind`` in trial records, and
#: the word in a torchrun queue line. Everything that means "measure torch DDP" uses this name.
TORCH_DDP = "torch_ddp"

Compressor = Literal["none", "fp16", "fp16_ef", "powersgd"]
COMPRESSORS: tuple[str, ...] = ("none", "fp16", "fp16_ef", "powersgd")


class PS(BaseModel):
    """Parameter server: gradients are pushed to ``destination`` (a node name), averaged there and
    pulled back. ``local_replication`` aggregates each node's workers first (one push/pull per node)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["ps"] = "ps"
    destination: str = Field(min_length=1)
    local_replication: bool = False
    sync: bool = True
    staleness: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _staleness_needs_sync(self) -> PS:
        if self.staleness > 0 and not self.sync:
            raise ValueError(f"staleness > 0 requires sync=true, got staleness={self.staleness}")
        return self


class AllReduce(BaseModel):
    """All-reduce: every tensor with the same ``group`` is fused into one collective."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["ar"] = "ar"
    group: int = Field(default=0, ge=0, le=2**31 - 1)
    compressor: Compressor = "none"
    powersgd_rank: int = Field(default=1, ge=1, le=64)

    @model_validator(mode="before")
    @classmethod
    def _rank_only_for_powersgd(cls, data: object) -> object:
        """``powersgd_rank`` means nothing without PowerSGD: normalize it to 1."""
        if isinstance(data, dict) and data.get("compressor", "none") != "powersgd" \
                and "powersgd_rank" in data:
            data = {**data, "powersgd_rank": 1}
        return data


Synchronizer = Annotated[Union[PS, AllReduce], Field(discriminator="kind")]


class Partition(BaseModel):
    """Split a variable into ``shards`` along ``axis``; shard i gets ``synchronizers[i]``.

    Shard lengths follow AutoDist: ``d // shards`` each, the first ``d % shards`` get one more.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: int = Field(ge=0)
    shards: int = Field(ge=2)
    synchronizers: tuple[Synchronizer, ...]

    @model_validator(mode="after")
    def _one_per_shard(self) -> Partition:
        if len(self.synchronizers) != self.shards:
            raise ValueError(
                f"a partition needs one synchronizer per shard: shards={self.shards}, "
                f"got {len(self.synchronizers)} synchronizers"
            )
        return self

    def shard_sizes(self, dim: int) -> list[int]:
        base, rem = divmod(dim, self.shards)
        return [base + (1 if i < rem else 0) for i in range(self.shards)]


class VarConfig(BaseModel):
    """The synchronization of one variable: a single synchronizer, or a partition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    var_name: str = Field(min_length=1)
    synchronizer: Synchronizer | None = None
    partition: Partition | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> VarConfig:
        if (self.synchronizer is None) == (self.partition is None):
            raise ValueError(
                f"variable {self.var_name!r} needs exactly one of 'synchronizer' or 'partition'"
            )
        return self

    def items(self) -> Iterator[tuple[int | None, PS | AllReduce]]:
        """(shard index or None, synchronizer) for every synchronized piece."""
        if self.partition is None:
            assert self.synchronizer is not None
            yield None, self.synchronizer
        else:
            for i, s in enumerate(self.partition.synchronizers):
                yield i, s


class Strategy(BaseModel):
    """A complete strategy: one :class:`VarConfig` per trainable variable.

    ``kind`` tells where it came from (``sampled``, a builder name such as ``ps_lb``, ``ddp``,
    ``autodist``, ``user``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    kind: str = "user"
    nodes: tuple[VarConfig, ...]

    def node(self, var_name: str) -> VarConfig | None:
        for n in self.nodes:
            if n.var_name == var_name:
                return n
        return None

    def by_var(self) -> dict[str, VarConfig]:
        return {n.var_name: n for n in self.nodes}

    # -- JSON ---------------------------------------------------------------------------------
    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent, exclude_defaults=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Strategy:
        from autosync_transfer.domains.parsing import load_json

        return cls.from_dict(load_json(text, "strategy"))

    @classmethod
    def from_dict(cls, data: object) -> Strategy:
        if not isinstance(data, dict):
            raise SpecError(f"strategy must be a JSON object, got {type(data).__name__}")
        from autosync_transfer.strategies.compact import is_compact

        if is_compact(data) and "nodes" not in data:
            raise SpecError(f"strategy {str(data.get('id', '?'))[:80]!r} is in a trial store's "
                            f"compact form (one entry per variable in the model's order): give "
                            f"its domain to read it (--domain, or the DOMAIN argument)")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise SpecError(format_pydantic_error(e, "strategy")) from e

    @classmethod
    def from_file(cls, path: str | Path) -> Strategy:
        from autosync_transfer.domains.parsing import MAX_JSON_BYTES, read_bounded

        p = Path(path)
        try:
            raw = read_bounded(p, MAX_JSON_BYTES, "strategy file")
        except OSError as e:
            raise SpecError(f"cannot read strategy file {str(p)!r}: {e.strerror}") from e
        raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
        from autosync_transfer.strategies.autodist import strategy_from_autodist

        if looks_like_json(raw):
            try:
                return cls.from_json(raw)
            except SpecError:
                if raw[:1] != b"\n":  # 0x0A also starts every AutoDist file (field 1's tag)
                    raise
        return strategy_from_autodist(raw)

    def canonical(self) -> Strategy:
        """This strategy with its all-reduce groups numbered 0, 1, ... in order of first
        appearance (variables in order, a variable's shards in order). Group numbers only say
        which pieces are fused together, so both forms are the same strategy; the sampler
        numbers groups this way. Returns ``self`` when already canonical."""
        mapping: dict[int, int] = {}
        for n in self.nodes:
            for _, sync in n.items():
                if isinstance(sync, AllReduce) and sync.group not in mapping:
                    mapping[sync.group] = len(mapping)
        if all(k == v for k, v in mapping.items()):
            return self

        def renumbered(sync: PS | AllReduce) -> PS | AllReduce:
            if isinstance(sync, AllReduce):
                return sync.model_copy(update={"group": mapping[sync.group]})
            return sync

        nodes = tuple(
            n.model_copy(update={"synchronizer": renumbered(n.synchronizer)})
            if n.synchronizer is not None else
            n.model_copy(update={"partition": n.partition.model_copy(update={  # type: ignore[union-attr]
                "synchronizers": tuple(map(renumbered, n.partition.synchronizers))})})  # type: ignore[union-attr]
            for n in self.nodes)
        return self.model_copy(update={"nodes": nodes})

    @property
    def content_key(self) -> str:
        """The :attr:`fingerprint` of :meth:`canonical`: equal for strategies that differ only in
        how their all-reduce groups are numbered."""
        return self.canonical().fingerprint

    @property
    def fingerprint(self) -> str:
        import hashlib

        body = json.dumps(
            [n.model_dump(mode="json") for n in self.nodes], sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def looks_like_json(raw: bytes) -> bool:
    """JSON strategy files start with ``{`` (after whitespace); AutoDist protobuf files start with
    the tag byte of field 1 (0x0A, which is also ``\\n``), so only the first non-blank byte decides.
    An empty or blank file counts as JSON (and fails as such)."""
    head = raw.lstrip()[:1]
    return head in (b"{", b"[", b"")
