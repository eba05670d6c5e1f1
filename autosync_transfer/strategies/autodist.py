"""AutoDist strategy files: the protobuf wire format of ``autodist.proto.Strategy``, by hand.

AutoDist (and every strategy file of the AutoSync dataset) stores a strategy as a serialized
proto3 message. This module reads and writes exactly that schema without depending on
``protobuf``::

    Strategy      { id = 1: string; path = 2: string; node_config = 3: repeated Node;
                    graph_config = 4: GraphConfig }
    GraphConfig   { replicas = 1: repeated string }
    Node          { var_name = 1: string;
                    oneof synchronizer { ps_synchronizer = 2: PSSynchronizer;
                                         all_reduce_synchronizer = 3: AllReduceSynchronizer }
                    partitioner = 4: string; part_config = 5: repeated Node }
    PSSynchronizer        { reduction_destination = 1: string; local_replication = 2: bool;
                            sync = 3: bool; staleness = 4: int32 }
    AllReduceSynchronizer { spec = 1: enum Spec; compressor = 2: enum Compressor; group = 3: int32 }

Writing follows protobuf's canonical encoding (fields in number order, proto3 default values
omitted, singular sub-messages always written so that the ``oneof`` is set), so the bytes are
those ``SerializeToString`` would give. Reading follows protobuf's parsing rules: unknown fields
of every wire type (groups included) are skipped, a singular scalar that appears twice keeps the
last value, a sub-message that appears twice is merged, and the last ``oneof`` member wins.
Deviations, each on purpose:

- PS field 1 keeps its *first* value: old records used ``repeated string
  reduction_destinations`` there, whose first entry is the destination.
- A known field with the wrong wire type is an error (protobuf would keep it as an unknown
  field and silently drop the value).
- Strings must be valid UTF-8 (as proto3 requires); truncated or malformed input is an error.

Every reading error is a :class:`~autosync_transfer.errors.SpecError` whose one-line message
starts with ``"AutoDist strategy: "``.

Mapping to :class:`~autosync_transfer.strategies.types.Strategy`:

- ``var_name`` carries a ``:0`` tensor suffix (``dense/kernel`` <-> ``dense/kernel:0``); reading
  strips one trailing ``:0`` when present.
- A PS destination (a node name) is written as ``"<node address>:CPU:0"``; reading maps
  ``"<address>:<CPU|GPU>:<index>"`` back to the node with that address, or keeps the address
  as the destination name when no cluster is given.
- Compressors: none <-> NoneCompressor (0), fp16 <-> HorovodCompressor (1), fp16_ef <->
  HorovodCompressorEF (2), powersgd <-> PowerSGDCompressor (3). ``spec`` is written as AUTO (0);
  on reading any value is accepted and dropped (it is a transport hint the types do not carry).
- A partition is written as ``partitioner`` (comma-separated splits per axis: the shard count
  at the partition axis, 1 elsewhere) plus one ``part_config`` Node per shard, named
  ``"<var>/part_<i>:0"``; the parent node's synchronizer is left unset. The string needs the
  variable's rank, taken from ``graph`` when given; without a graph it is ``axis`` ones followed
  by the shard count and nothing after (``axis=1, shards=4`` -> ``"1,4"``), which reads back the
  same here but is shorter than what AutoDist's partitioner kernel expects for a variable of
  higher rank. Reading applies AutoDist's ``PartitionerConfig`` rule (non-empty, no zeros,
  exactly one axis > 1) and takes the shards in ``part_config`` order, as AutoDist's kernel
  does; the part names are not checked, and a parent synchronizer next to a partitioner is
  ignored, as in AutoDist.
- ``graph_config.replicas`` is written as one ``"<address>:<GPU|CPU>:<i>"`` per worker (GPU for
  GPU nodes, CPU for CPU nodes), nodes in cluster order; it is ignored on reading. ``path`` is
  not written and is ignored on reading.

Round trip: ``strategy_from_autodist(strategy_to_autodist(s, c), c) == s`` for every strategy
``s`` whose PS destinations are nodes of ``c`` and whose int32 fields fit, except the fields
AutoDist cannot carry: ``powersgd_rank`` reads back as 1 (AutoDist's PowerSGD kernel uses
rank 1) and ``kind`` reads back as ``"autodist"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import (
    ConfigError,
    SpecError,
    UnknownNameError,
    format_pydantic_error,
)
from autosync_transfer.strategies.types import (
    PS,
    AllReduce,
    Partition,
    Strategy,
    VarConfig,
)

__all__ = [
    "COMPRESSOR_TO_AUTODIST",
    "AUTODIST_TO_COMPRESSOR",
    "strategy_to_autodist",
    "strategy_from_autodist",
    "read_autodist_file",
    "write_autodist_file",
]

#: compressor name -> ``AllReduceSynchronizer.Compressor`` enum value
COMPRESSOR_TO_AUTODIST: dict[str, int] = {"none": 0, "fp16": 1, "fp16_ef": 2, "powersgd": 3}
#: ``AllReduceSynchronizer.Compressor`` enum value -> compressor name
AUTODIST_TO_COMPRESSOR: dict[int, str] = {v: k for k, v in COMPRESSOR_TO_AUTODIST.items()}

_PREFIX = "AutoDist strategy: "
_TENSOR_SUFFIX = ":0"
_INT32_MAX = 2**31 - 1
_MASK64 = (1 << 64) - 1
_MAX_FIELD_NUMBER = 2**29 - 1

# wire types
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_WIRE_NAMES = {
    _VARINT: "varint",
    _I64: "64-bit",
    _LEN: "length-delimited",
    _SGROUP: "start-group",
    _EGROUP: "end-group",
    _I32: "32-bit",
}

# field numbers
_STRATEGY_ID, _STRATEGY_PATH, _STRATEGY_NODES, _STRATEGY_GRAPH = 1, 2, 3, 4
_GRAPH_REPLICAS = 1
_NODE_VAR, _NODE_PS, _NODE_AR, _NODE_PARTITIONER, _NODE_PARTS = 1, 2, 3, 4, 5
_PS_DEST, _PS_LOCAL, _PS_SYNC, _PS_STALENESS = 1, 2, 3, 4
_AR_SPEC, _AR_COMPRESSOR, _AR_GROUP = 1, 2, 3


def _error(message: str) -> SpecError:
    return SpecError(_PREFIX + message)


def _show(text: str, limit: int = 60) -> str:
    """``repr`` of a value read from a file, cut to one short line."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


# ================================================================================================
# writing
# ================================================================================================
def _varint(value: int) -> bytes:
    if value < 0:  # int32/int64 negatives are sign-extended to 64 bits (10 bytes)
        value &= _MASK64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field; written even when empty (repeated elements, set sub-messages)."""
    return _tag(number, _LEN) + _varint(len(payload)) + payload


def _string_field(number: int, value: str) -> bytes:
    """A singular proto3 string: omitted when empty."""
    return _len_field(number, value.encode("utf-8")) if value else b""


def _varint_field(number: int, value: int) -> bytes:
    """A singular proto3 bool/int32/enum: omitted when zero."""
    return _tag(number, _VARINT) + _varint(int(value)) if value else b""


def _int32(value: int, what: str) -> int:
    if not 0 <= value <= _INT32_MAX:
        raise ConfigError(f"{_PREFIX}{what} must fit an int32 (0..{_INT32_MAX}), got {value}")
    return value


def _device_string(cluster: Cluster, node_name: str, var_name: str) -> str:
    try:
        node = cluster.node(node_name)
    except UnknownNameError as e:
        raise UnknownNameError(
            f"{_PREFIX}PS destination {node_name!r} of variable {var_name!r} is not a node of "
            f"cluster {cluster.name!r} (nodes: {', '.join(cluster.node_names)})"
        ) from e
    return f"{node.address}:CPU:0"


def _encode_synchronizer(sync: PS | AllReduce, cluster: Cluster, var_name: str) -> bytes:
    if isinstance(sync, PS):
        body = (
            _string_field(_PS_DEST, _device_string(cluster, sync.destination, var_name))
            + _varint_field(_PS_LOCAL, sync.local_replication)
            + _varint_field(_PS_SYNC, sync.sync)
            + _varint_field(_PS_STALENESS, _int32(sync.staleness, f"staleness of {var_name!r}"))
        )
        return _len_field(_NODE_PS, body)
    body = (
        _varint_field(_AR_SPEC, 0)  # AUTO
        + _varint_field(_AR_COMPRESSOR, COMPRESSOR_TO_AUTODIST[sync.compressor])
        + _varint_field(_AR_GROUP, _int32(sync.group, f"all-reduce group of {var_name!r}"))
    )
    return _len_field(_NODE_AR, body)


def _partitioner_string(cfg: VarConfig, partition: Partition, graph: ModelGraph | None) -> str:
    if graph is None:
        splits = [1] * partition.axis + [partition.shards]
    else:
        shape = graph.variable(cfg.var_name).shape
        if partition.axis >= len(shape):
            raise ConfigError(
                f"{_PREFIX}variable {cfg.var_name!r}: partition axis {partition.axis} does not "
                f"exist (shape {list(shape)})"
            )
        splits = [1] * len(shape)
        splits[partition.axis] = partition.shards
    return ",".join(str(s) for s in splits)


def _encode_node(cfg: VarConfig, cluster: Cluster, graph: ModelGraph | None) -> bytes:
    out = _string_field(_NODE_VAR, cfg.var_name + _TENSOR_SUFFIX)
    if cfg.partition is None:
        assert cfg.synchronizer is not None  # VarConfig guarantees exactly one
        return out + _encode_synchronizer(cfg.synchronizer, cluster, cfg.var_name)
    p = cfg.partition
    out += _string_field(_NODE_PARTITIONER, _partitioner_string(cfg, p, graph))
    for i, sync in enumerate(p.synchronizers):
        part_name = f"{cfg.var_name}/part_{i}{_TENSOR_SUFFIX}"
        part = _string_field(_NODE_VAR, part_name) + _encode_synchronizer(
            sync, cluster, cfg.var_name
        )
        out += _len_field(_NODE_PARTS, part)
    return out


def _replicas(cluster: Cluster) -> list[str]:
    out = []
    for node in cluster.nodes:
        device = "GPU" if node.device == "gpu" else "CPU"
        out.extend(f"{node.address}:{device}:{i}" for i in range(node.workers))
    return out


def strategy_to_autodist(
    strategy: Strategy, cluster: Cluster, *, graph: ModelGraph | None = None
) -> bytes:
    """Serialize ``strategy`` as an AutoDist ``Strategy`` protobuf message.

    ``cluster`` maps PS destinations (node names) to addresses and gives the replicas; ``graph``
    (optional) gives variable ranks for full-length ``partitioner`` strings (see the module
    docstring). Raises :class:`UnknownNameError` for a PS destination that is not a node of
    ``cluster`` (or a partitioned variable missing from ``graph``) and :class:`ConfigError` for
    a value AutoDist cannot hold.
    """
    out = bytearray(_string_field(_STRATEGY_ID, strategy.id))
    for cfg in strategy.nodes:
        out += _len_field(_STRATEGY_NODES, _encode_node(cfg, cluster, graph))
    graph_config = b"".join(
        _len_field(_GRAPH_REPLICAS, r.encode("utf-8")) for r in _replicas(cluster)
    )
    out += _len_field(_STRATEGY_GRAPH, graph_config)
    return bytes(out)


# ================================================================================================
# reading: wire level
# ================================================================================================
class _Field(NamedTuple):
    """One field as found on the wire. ``value`` is the number for varint/fixed wire types;
    ``start:end`` bounds the payload of a length-delimited field."""

    number: int
    wire_type: int
    value: int
    start: int
    end: int
    at: int  # byte offset of the tag


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    start, result, shift = pos, 0, 0
    for _ in range(10):
        if pos >= end:
            raise _error(f"truncated varint at byte {start}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _MASK64, pos
        shift += 7
    raise _error(f"varint longer than 10 bytes at byte {start}")


def _read_tag(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    at = pos
    tag, pos = _read_varint(data, pos, end)
    number, wire_type = tag >> 3, tag & 7
    if tag > 0xFFFFFFFF or not 1 <= number <= _MAX_FIELD_NUMBER:
        raise _error(f"invalid field number {number} at byte {at}")
    if wire_type not in _WIRE_NAMES:
        raise _error(f"invalid wire type {wire_type} (field {number}) at byte {at}")
    return number, wire_type, pos


def _skip_scalar(
    data: bytes, pos: int, end: int, wire_type: int, number: int
) -> tuple[int, int, int]:
    """Skip one non-group value; return (value, payload start, new position)."""
    if wire_type == _VARINT:
        value, pos = _read_varint(data, pos, end)
        return value, pos, pos
    if wire_type in (_I64, _I32):
        size = 8 if wire_type == _I64 else 4
        if end - pos < size:
            raise _error(
                f"truncated {_WIRE_NAMES[wire_type]} value of field {number} at byte {pos}"
            )
        return int.from_bytes(data[pos : pos + size], "little"), pos, pos + size
    # length-delimited
    length, pos = _read_varint(data, pos, end)
    if length > end - pos:
        raise _error(
            f"field {number} at byte {pos} has length {length} but only {end - pos} bytes remain"
        )
    return length, pos, pos + length


def _skip_group(data: bytes, pos: int, end: int, number: int, at: int) -> int:
    """Skip a group that started with field ``number``; return the position after its end tag."""
    open_groups = [number]
    while open_groups:
        if pos >= end:
            raise _error(f"unterminated group (field {open_groups[-1]}) starting at byte {at}")
        inner, wire_type, tag_end = _read_tag(data, pos, end)
        if wire_type == _SGROUP:
            open_groups.append(inner)
            pos = tag_end
        elif wire_type == _EGROUP:
            if inner != open_groups[-1]:
                raise _error(
                    f"end-group of field {inner} at byte {pos} closes a group of field "
                    f"{open_groups[-1]}"
                )
            open_groups.pop()
            pos = tag_end
        else:
            _, _, pos = _skip_scalar(data, tag_end, end, wire_type, inner)
    return pos


def _fields(data: bytes, start: int, end: int) -> list[_Field]:
    """Every field of the message in ``data[start:end]``, groups skipped but listed."""
    out: list[_Field] = []
    pos = start
    while pos < end:
        at = pos
        number, wire_type, pos = _read_tag(data, pos, end)
        if wire_type == _SGROUP:
            pos = _skip_group(data, pos, end, number, at)
            out.append(_Field(number, wire_type, 0, pos, pos, at))
        elif wire_type == _EGROUP:
            raise _error(f"unexpected end-group (field {number}) at byte {at}")
        else:
            value, payload, pos = _skip_scalar(data, pos, end, wire_type, number)
            out.append(_Field(number, wire_type, value, payload, pos, at))
    return out


def _expect(f: _Field, wire_type: int, what: str) -> None:
    if f.wire_type != wire_type:
        raise _error(
            f"{what} (field {f.number}) at byte {f.at} must be {_WIRE_NAMES[wire_type]}, "
            f"got wire type {f.wire_type} ({_WIRE_NAMES[f.wire_type]})"
        )


def _string(data: bytes, f: _Field, what: str) -> str:
    _expect(f, _LEN, what)
    try:
        return data[f.start : f.end].decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(f"{what} at byte {f.start} is not valid UTF-8") from e


def _int32_value(f: _Field, what: str) -> int:
    _expect(f, _VARINT, what)
    v = f.value & 0xFFFFFFFF  # protobuf truncates int32 varints to 32 bits
    return v - (1 << 32) if v >= 1 << 31 else v


def _bool_value(f: _Field, what: str) -> bool:
    _expect(f, _VARINT, what)
    return f.value != 0


# ================================================================================================
# reading: messages
# ================================================================================================
@dataclass
class _RawNode:
    var_name: str = ""
    sync_field: int = 0  # 0 = unset, _NODE_PS or _NODE_AR
    sync_spans: list[_Field] = field(default_factory=list)
    partitioner: str = ""
    parts: list[_Field] = field(default_factory=list)


def _raw_node(data: bytes, start: int, end: int, where: str) -> _RawNode:
    node = _RawNode()
    for f in _fields(data, start, end):
        if f.number == _NODE_VAR:
            node.var_name = _string(data, f, f"var_name of {where}")
        elif f.number in (_NODE_PS, _NODE_AR):
            _expect(f, _LEN, f"synchronizer of {where}")
            if f.number != node.sync_field:  # a new oneof member replaces the previous one
                node.sync_field, node.sync_spans = f.number, []
            node.sync_spans.append(f)
        elif f.number == _NODE_PARTITIONER:
            node.partitioner = _string(data, f, f"partitioner of {where}")
        elif f.number == _NODE_PARTS:
            _expect(f, _LEN, f"part_config of {where}")
            node.parts.append(f)
    return node


def _strip_suffix(name: str) -> str:
    return name[: -len(_TENSOR_SUFFIX)] if name.endswith(_TENSOR_SUFFIX) else name


def _destination_name(device: str, cluster: Cluster | None, where: str) -> str:
    pieces = device.rsplit(":", 2)
    if (
        len(pieces) != 3
        or not pieces[0]
        or pieces[1] not in ("CPU", "GPU")
        or not (pieces[2].isascii() and pieces[2].isdigit())
    ):
        raise _error(
            f"{where}: PS destination {_show(device)} is not an AutoDist device string "
            f"'<address>:<CPU|GPU>:<index>'"
        )
    address = pieces[0]
    if cluster is None:
        return address
    try:
        return cluster.node_of_address(address).name
    except UnknownNameError as e:
        raise _error(
            f"{where}: PS destination {_show(device)} is on no node of cluster {cluster.name!r}"
        ) from e


def _decode_ps(data: bytes, spans: list[_Field], cluster: Cluster | None, where: str) -> PS:
    destination: str | None = None
    local_replication = sync = False
    staleness = 0
    for span in spans:
        for f in _fields(data, span.start, span.end):
            if f.number == _PS_DEST:
                value = _string(data, f, f"reduction_destination of {where}")
                if destination is None:  # legacy repeated reduction_destinations: keep the first
                    destination = value
            elif f.number == _PS_LOCAL:
                local_replication = _bool_value(f, f"local_replication of {where}")
            elif f.number == _PS_SYNC:
                sync = _bool_value(f, f"sync of {where}")
            elif f.number == _PS_STALENESS:
                staleness = _int32_value(f, f"staleness of {where}")
    if not destination:
        raise _error(f"{where}: PS synchronizer has no reduction_destination")
    name = _destination_name(destination, cluster, where)
    try:
        return PS(
            destination=name, local_replication=local_replication, sync=sync, staleness=staleness
        )
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"{where}: PS synchronizer")) from e


def _decode_ar(data: bytes, spans: list[_Field], where: str) -> AllReduce:
    compressor = group = 0
    for span in spans:
        for f in _fields(data, span.start, span.end):
            if f.number == _AR_SPEC:
                _int32_value(f, f"spec of {where}")  # a transport hint the types do not carry
            elif f.number == _AR_COMPRESSOR:
                compressor = _int32_value(f, f"compressor of {where}")
            elif f.number == _AR_GROUP:
                group = _int32_value(f, f"group of {where}")
    if compressor not in AUTODIST_TO_COMPRESSOR:
        known = ", ".join(f"{v}={k}" for k, v in AUTODIST_TO_COMPRESSOR.items())
        raise _error(f"{where}: unknown all-reduce compressor {compressor} (known: {known})")
    try:
        name = AUTODIST_TO_COMPRESSOR[compressor]
        return AllReduce(group=group, compressor=name)  # type: ignore[arg-type]
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"{where}: all-reduce synchronizer")) from e


def _decode_synchronizer(
    data: bytes, node: _RawNode, cluster: Cluster | None, where: str
) -> PS | AllReduce:
    if node.sync_field == _NODE_PS:
        return _decode_ps(data, node.sync_spans, cluster, where)
    if node.sync_field == _NODE_AR:
        return _decode_ar(data, node.sync_spans, where)
    raise _error(f"{where} has no synchronizer and no partitioner")


def _parse_partitioner(text: str, var: str) -> tuple[int, int]:
    """(axis, shards) of a partitioner string, by AutoDist's ``PartitionerConfig`` rule."""
    bad = _error(
        f"variable {_show(var)}: invalid partitioner {_show(text)} (needs comma-separated "
        f"positive split counts with exactly one axis > 1 and no zeros)"
    )
    try:
        splits = [int(s) for s in text.split(",")]
    except ValueError:
        raise bad from None
    if any(s < 1 for s in splits):
        raise bad
    active = [i for i, s in enumerate(splits) if s > 1]
    if len(active) != 1:
        raise bad
    return active[0], splits[active[0]]


def _decode_node(data: bytes, span: _Field, cluster: Cluster | None, index: int) -> VarConfig:
    raw = _raw_node(data, span.start, span.end, f"node_config[{index}]")
    if not raw.var_name:
        raise _error(f"node_config[{index}] has no var_name")
    var = _strip_suffix(raw.var_name)
    where = f"variable {_show(var)}"
    if not raw.partitioner:
        if raw.parts:
            raise _error(f"{where} has part_config entries but no partitioner")
        sync = _decode_synchronizer(data, raw, cluster, where)
        return _var_config(var, synchronizer=sync)
    axis, shards = _parse_partitioner(raw.partitioner, var)
    if len(raw.parts) != shards:
        raise _error(
            f"{where}: partitioner {_show(raw.partitioner)} asks for {shards} shards but "
            f"part_config has {len(raw.parts)} entries"
        )
    syncs: list[PS | AllReduce] = []
    for i, part_span in enumerate(raw.parts):
        part_where = f"{where} shard {i}"
        part = _raw_node(data, part_span.start, part_span.end, part_where)
        if part.partitioner or part.parts:
            raise _error(f"{part_where} is partitioned again (nested partitions are not supported)")
        syncs.append(_decode_synchronizer(data, part, cluster, part_where))
    try:
        partition = Partition(axis=axis, shards=shards, synchronizers=tuple(syncs))
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"{where}: partition")) from e
    return _var_config(var, partition=partition)


def _var_config(
    var: str, synchronizer: PS | AllReduce | None = None, partition: Partition | None = None
) -> VarConfig:
    try:
        return VarConfig(var_name=var, synchronizer=synchronizer, partition=partition)
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"variable {_show(var)}")) from e


def strategy_from_autodist(data: bytes, cluster: Cluster | None = None) -> Strategy:
    """Parse a serialized AutoDist ``Strategy`` message into a :class:`Strategy`.

    PS destinations become the names of the ``cluster`` nodes with their address (the address
    itself when ``cluster`` is None). ``kind`` is ``"autodist"`` and PowerSGD's rank is 1.
    Raises :class:`SpecError` for truncated or malformed input or a strategy the types reject.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _error(f"expected bytes, got {type(data).__name__}")
    buf = bytes(data)
    strategy_id = ""
    node_spans: list[_Field] = []
    for f in _fields(buf, 0, len(buf)):
        if f.number == _STRATEGY_ID:
            strategy_id = _string(buf, f, "id of Strategy")
        elif f.number == _STRATEGY_PATH:
            _string(buf, f, "path of Strategy")
        elif f.number == _STRATEGY_NODES:
            _expect(f, _LEN, "node_config of Strategy")
            node_spans.append(f)
        elif f.number == _STRATEGY_GRAPH:
            _expect(f, _LEN, "graph_config of Strategy")
            for r in _fields(buf, f.start, f.end):
                if r.number == _GRAPH_REPLICAS:
                    _string(buf, r, "replica of graph_config")
    if not strategy_id:
        raise _error("the message has no id (field 1)")
    nodes = tuple(_decode_node(buf, span, cluster, i) for i, span in enumerate(node_spans))
    try:
        return Strategy(id=strategy_id, kind="autodist", nodes=nodes)
    except ValidationError as e:
        raise _error(format_pydantic_error(e)) from e


# ================================================================================================
# files
# ================================================================================================
def read_autodist_file(path: str | Path, cluster: Cluster | None = None) -> Strategy:
    """Read an AutoDist strategy file (serialized protobuf, as in the AutoSync dataset)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SpecError(f"{_PREFIX}cannot read {str(p)!r}: {e.strerror}") from e
    try:
        return strategy_from_autodist(raw, cluster)
    except SpecError as e:
        raise SpecError(f"{e} (in {str(p)!r})") from e


def write_autodist_file(
    strategy: Strategy, cluster: Cluster, path: str | Path, graph: ModelGraph | None = None
) -> Path:
    """Write ``strategy`` as an AutoDist strategy file; returns the path written."""
    p = Path(path)
    payload = strategy_to_autodist(strategy, cluster, graph=graph)
    try:
        p.write_bytes(payload)
    except OSError as e:
        raise SpecError(f"{_PREFIX}cannot write {str(p)!r}: {e.strerror}") from e
    return p
