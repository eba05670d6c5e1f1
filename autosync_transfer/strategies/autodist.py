"""AutoDist strategy files: ``autodist.proto.Strategy`` through the generated protobuf code.

AutoDist (and every strategy file of the AutoSync dataset) stores a strategy as a serialized
proto3 message. The schema is AutoDist's own, vendored in :mod:`.proto` (``strategy.proto``,
``synchronizers.proto``) with the generated ``*_pb2`` modules (``make proto`` regenerates them);
this module maps those messages to and from :class:`~autosync_transfer.strategies.types.Strategy`.
Writing is ``SerializeToString`` (canonical encoding: the bytes AutoDist writes). Reading is
``ParseFromString`` (unknown fields skipped, repeated singular fields keep the last value,
sub-messages merged, the last ``oneof`` member wins), preceded by a check of the wire structure
that names the field and the byte offset of a mistake. Deviations from plain protobuf parsing,
each on purpose:

- PS field 1 keeps its *first* value: old records used ``repeated string
  reduction_destinations`` there, whose first entry is the destination (reading uses the
  vendored schema with that field repeated).
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

import functools
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from pydantic import ValidationError

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import (
    ConfigError,
    SpecError,
    UnknownNameError,
    format_pydantic_error,
)
from autosync_transfer.strategies.proto import strategy_pb2, synchronizers_pb2
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

_AR = synchronizers_pb2.AllReduceSynchronizer
#: compressor name -> ``AllReduceSynchronizer.Compressor`` enum value
COMPRESSOR_TO_AUTODIST: dict[str, int] = {
    "none": _AR.NoneCompressor,
    "fp16": _AR.HorovodCompressor,
    "fp16_ef": _AR.HorovodCompressorEF,
    "powersgd": _AR.PowerSGDCompressor,
}
#: ``AllReduceSynchronizer.Compressor`` enum value -> compressor name
AUTODIST_TO_COMPRESSOR: dict[int, str] = {v: k for k, v in COMPRESSOR_TO_AUTODIST.items()}

_PREFIX = "AutoDist strategy: "
_TENSOR_SUFFIX = ":0"
_INT32_MAX = 2**31 - 1


def _error(message: str) -> SpecError:
    return SpecError(_PREFIX + message)


def _show(text: str, limit: int = 60) -> str:
    """``repr`` of a value read from a file, cut to one short line."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


# ================================================================================================
# writing
# ================================================================================================
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


def _set_synchronizer(
    node: strategy_pb2.Strategy.Node, sync: PS | AllReduce, cluster: Cluster, var_name: str
) -> None:
    """Set ``node``'s ``synchronizer`` (the ``oneof`` is set even when every field is default)."""
    if isinstance(sync, PS):
        node.PSSynchronizer.SetInParent()
        ps = node.PSSynchronizer
        ps.reduction_destination = _device_string(cluster, sync.destination, var_name)
        ps.local_replication = sync.local_replication
        ps.sync = sync.sync
        ps.staleness = _int32(sync.staleness, f"staleness of {var_name!r}")
        return
    node.AllReduceSynchronizer.SetInParent()
    ar = node.AllReduceSynchronizer
    ar.spec = _AR.AUTO
    ar.compressor = COMPRESSOR_TO_AUTODIST[sync.compressor]  # type: ignore[assignment]
    ar.group = _int32(sync.group, f"all-reduce group of {var_name!r}")


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


def _set_node(
    node: strategy_pb2.Strategy.Node, cfg: VarConfig, cluster: Cluster, graph: ModelGraph | None
) -> None:
    node.var_name = cfg.var_name + _TENSOR_SUFFIX
    if cfg.partition is None:
        assert cfg.synchronizer is not None  # VarConfig guarantees exactly one
        _set_synchronizer(node, cfg.synchronizer, cluster, cfg.var_name)
        return
    node.partitioner = _partitioner_string(cfg, cfg.partition, graph)
    for i, sync in enumerate(cfg.partition.synchronizers):
        part = node.part_config.add(var_name=f"{cfg.var_name}/part_{i}{_TENSOR_SUFFIX}")
        _set_synchronizer(part, sync, cluster, cfg.var_name)


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
    message = strategy_pb2.Strategy(id=strategy.id)
    for cfg in strategy.nodes:
        _set_node(message.node_config.add(), cfg, cluster, graph)
    message.graph_config.SetInParent()
    message.graph_config.replicas.extend(_replicas(cluster))
    return message.SerializeToString()


# ================================================================================================
# reading: the wire structure, checked against the schema for messages that name the mistake
# ================================================================================================
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_WIRE_NAMES = {
    _VARINT: "varint",
    _I64: "64-bit",
    _LEN: "length-delimited",
    _SGROUP: "start-group",
    _EGROUP: "end-group",
    _I32: "32-bit",
}
#: the wire type of each field type the schema uses
_WIRE_OF_TYPE = {
    FieldDescriptor.TYPE_STRING: _LEN,
    FieldDescriptor.TYPE_MESSAGE: _LEN,
    FieldDescriptor.TYPE_BOOL: _VARINT,
    FieldDescriptor.TYPE_INT32: _VARINT,
    FieldDescriptor.TYPE_ENUM: _VARINT,
}
_MASK64 = (1 << 64) - 1
_MAX_FIELD_NUMBER = 2**29 - 1


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


def _skip_value(data: bytes, pos: int, end: int, wire_type: int, number: int) -> tuple[int, int]:
    """Skip one non-group value at ``pos``; return (payload start, position after it)."""
    if wire_type == _VARINT:
        _, pos = _read_varint(data, pos, end)
        return pos, pos
    if wire_type in (_I64, _I32):
        size = 8 if wire_type == _I64 else 4
        if end - pos < size:
            raise _error(
                f"truncated {_WIRE_NAMES[wire_type]} value of field {number} at byte {pos}"
            )
        return pos, pos + size
    length, pos = _read_varint(data, pos, end)  # length-delimited
    if length > end - pos:
        raise _error(
            f"field {number} at byte {pos} has length {length} but only {end - pos} bytes remain"
        )
    return pos, pos + length


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
            pos = _skip_value(data, tag_end, end, wire_type, inner)[1]
    return pos


def _check_wire(data: bytes, start: int, end: int, message: Descriptor, where: str) -> None:
    """Walk the ``message`` in ``data[start:end]``: every value complete, every known field
    with its schema's wire type, every string UTF-8; nested messages likewise. ``where`` names
    the message in errors (``Strategy``, ``node_config[0]``, ``node_config[0].synchronizer``)."""
    seen: dict[int, int] = {}
    pos = start
    while pos < end:
        at = pos
        number, wire_type, pos = _read_tag(data, pos, end)
        if wire_type == _EGROUP:
            raise _error(f"unexpected end-group (field {number}) at byte {at}")
        if wire_type == _SGROUP:
            payload = pos = _skip_group(data, pos, end, number, at)
        else:
            payload, pos = _skip_value(data, pos, end, wire_type, number)
        field = message.fields_by_number.get(number)
        if field is None:  # unknown fields are skipped
            continue
        oneof = field.containing_oneof
        label = oneof.name if oneof is not None else field.name
        what = f"{label} of {where}"
        expected = _WIRE_OF_TYPE[field.type]
        if wire_type != expected:
            raise _error(
                f"{what} (field {number}) at byte {at} must be {_WIRE_NAMES[expected]}, "
                f"got wire type {wire_type} ({_WIRE_NAMES[wire_type]})"
            )
        if field.type == FieldDescriptor.TYPE_STRING:
            try:
                data[payload:pos].decode("utf-8")
            except UnicodeDecodeError as e:
                raise _error(f"{what} at byte {payload} is not valid UTF-8") from e
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            index = seen[number] = seen.get(number, -1) + 1
            child = f"{field.name}[{index}]" if field.is_repeated else label
            inner = child if message.name == "Strategy" else f"{where}.{child}"
            _check_wire(data, payload, pos, field.message_type, inner)


@functools.cache
def _reading_strategy() -> type[Message]:
    """The ``Strategy`` class for reading: the vendored schema in a private pool, with
    ``PSSynchronizer.reduction_destination`` repeated, as AutoDist wrote it before April 2020
    (``repeated string reduction_destinations = 1``); the destination is the first entry."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for module in (synchronizers_pb2, strategy_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        for message in proto.message_type:
            if message.name == "PSSynchronizer":
                for field in message.field:
                    if field.number == 1:
                        field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("autodist.proto.Strategy"))


# ================================================================================================
# reading: messages -> Strategy
# ================================================================================================
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


def _decode_ps(ps: Any, cluster: Cluster | None, where: str) -> PS:
    destinations = list(ps.reduction_destination)
    if not destinations or not destinations[0]:
        raise _error(f"{where}: PS synchronizer has no reduction_destination")
    name = _destination_name(destinations[0], cluster, where)
    try:
        return PS(destination=name, local_replication=ps.local_replication, sync=ps.sync,
                  staleness=ps.staleness)
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"{where}: PS synchronizer")) from e


def _decode_ar(ar: Any, where: str) -> AllReduce:
    # ``spec`` is a transport hint the types do not carry: accepted and dropped
    if ar.compressor not in AUTODIST_TO_COMPRESSOR:
        known = ", ".join(f"{v}={k}" for k, v in AUTODIST_TO_COMPRESSOR.items())
        raise _error(f"{where}: unknown all-reduce compressor {ar.compressor} (known: {known})")
    try:
        name = AUTODIST_TO_COMPRESSOR[ar.compressor]
        return AllReduce(group=ar.group, compressor=name)  # type: ignore[arg-type]
    except ValidationError as e:
        raise _error(format_pydantic_error(e, f"{where}: all-reduce synchronizer")) from e


def _decode_synchronizer(node: Any, cluster: Cluster | None, where: str) -> PS | AllReduce:
    which = node.WhichOneof("synchronizer")
    if which == "PSSynchronizer":
        return _decode_ps(node.PSSynchronizer, cluster, where)
    if which == "AllReduceSynchronizer":
        return _decode_ar(node.AllReduceSynchronizer, where)
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


def _decode_node(node: Any, cluster: Cluster | None, index: int) -> VarConfig:
    if not node.var_name:
        raise _error(f"node_config[{index}] has no var_name")
    var = _strip_suffix(node.var_name)
    where = f"variable {_show(var)}"
    if not node.partitioner:
        if node.part_config:
            raise _error(f"{where} has part_config entries but no partitioner")
        return _var_config(var, synchronizer=_decode_synchronizer(node, cluster, where))
    axis, shards = _parse_partitioner(node.partitioner, var)
    if len(node.part_config) != shards:
        raise _error(
            f"{where}: partitioner {_show(node.partitioner)} asks for {shards} shards but "
            f"part_config has {len(node.part_config)} entries"
        )
    syncs: list[PS | AllReduce] = []
    for i, part in enumerate(node.part_config):
        part_where = f"{where} shard {i}"
        if part.partitioner or part.part_config:
            raise _error(f"{part_where} is partitioned again (nested partitions are not supported)")
        syncs.append(_decode_synchronizer(part, cluster, part_where))
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
    message_type = _reading_strategy()
    _check_wire(buf, 0, len(buf), message_type.DESCRIPTOR, "Strategy")
    message = message_type()
    try:
        message.ParseFromString(buf)
    except DecodeError as e:  # beyond what the wire check names (e.g. nesting too deep)
        raise _error(f"not a valid Strategy message ({str(e).splitlines()[0]})") from e
    if not message.id:
        raise _error("the message has no id (field 1)")
    nodes = tuple(_decode_node(n, cluster, i) for i, n in enumerate(message.node_config))
    try:
        return Strategy(id=message.id, kind="autodist", nodes=nodes)
    except ValidationError as e:
        raise _error(format_pydantic_error(e)) from e


# ================================================================================================
# files
# ================================================================================================
def read_autodist_file(path: str | Path, cluster: Cluster | None = None) -> Strategy:
    """Read an AutoDist strategy file (serialized protobuf, as in the AutoSync dataset)."""
    from autosync_transfer.domains.parsing import MAX_JSON_BYTES, read_bounded

    p = Path(path)
    try:
        raw = read_bounded(p, MAX_JSON_BYTES, f"{_PREFIX}file")
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
    from autosync_transfer._files import atomic_write

    payload = strategy_to_autodist(strategy, cluster, graph=graph)
    return atomic_write(path, payload, "AutoDist strategy file")
