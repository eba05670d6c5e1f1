"""AutoDist strategy protobuf: hand-built wire fixtures, error cases, and property tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.errors import ConfigError, SpecError, UnknownNameError
from autosync_transfer.strategies.autodist import (
    read_autodist_file,
    strategy_from_autodist,
    strategy_to_autodist,
    write_autodist_file,
)
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing import hypothesis_strategies as hs

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------------------
# hand-built fixtures: bytes written from the schema, independently of the encoder
# ------------------------------------------------------------------------------------------------
CLUSTER = Cluster(
    name="two",
    nodes=(
        Node(name="n0", address="10.0.0.1", workers=2, device="gpu", bandwidth_gbps=10, chief=True),
        Node(name="n1", address="10.0.0.2", workers=1, device="cpu", bandwidth_gbps=10),
    ),
)

PS_NODE = (
    b"\x0a\x03" b"w:0"  # Node.var_name (1, LEN, 3 bytes)
    b"\x12\x16"  # Node.ps_synchronizer (2, LEN, 22 bytes)
    b"\x0a\x0e" b"10.0.0.2:CPU:0"  # PS.reduction_destination (1, LEN, 14 bytes)
    b"\x10\x01"  # PS.local_replication (2, varint) = true
    b"\x18\x01"  # PS.sync (3, varint) = true
    b"\x20\x02"  # PS.staleness (4, varint) = 2
)
AR_NODE = (
    b"\x0a\x03" b"b:0"  # Node.var_name (1, LEN, 3 bytes)
    b"\x1a\x04"  # Node.all_reduce_synchronizer (3, LEN, 4 bytes); spec AUTO=0 omitted
    b"\x10\x02"  # AR.compressor (2, varint) = HorovodCompressorEF
    b"\x18\x03"  # AR.group (3, varint) = 3
)
GRAPH_CONFIG = (
    b"\x0a\x0e" b"10.0.0.1:GPU:0"  # GraphConfig.replicas (1, LEN, 14 bytes)
    b"\x0a\x0e" b"10.0.0.1:GPU:1"
    b"\x0a\x0e" b"10.0.0.2:CPU:0"
)
FIXTURE = (
    b"\x0a\x02" b"s1"  # Strategy.id (1, LEN, 2 bytes)
    b"\x1a\x1d" + PS_NODE  # Strategy.node_config (3, LEN, 29 bytes)
    + b"\x1a\x0b" + AR_NODE  # Strategy.node_config (3, LEN, 11 bytes)
    + b"\x22\x30" + GRAPH_CONFIG  # Strategy.graph_config (4, LEN, 48 bytes)
)
assert len(PS_NODE) == 0x1D and len(AR_NODE) == 0x0B and len(GRAPH_CONFIG) == 0x30

EXPECTED = Strategy(
    id="s1",
    kind="autodist",
    nodes=(
        VarConfig(
            var_name="w",
            synchronizer=PS(destination="n1", local_replication=True, sync=True, staleness=2),
        ),
        VarConfig(var_name="b", synchronizer=AllReduce(group=3, compressor="fp16_ef")),
    ),
)

PART_NODE = (
    b"\x0a\x03" b"e:0"  # Node.var_name
    b"\x22\x03" b"2,1"  # Node.partitioner (4, LEN, 3 bytes)
    b"\x2a\x0e"  # Node.part_config (5, LEN, 14 bytes)
    b"\x0a\x0a" b"e/part_0:0"  # part var_name (10 bytes)
    b"\x1a\x00"  # part all_reduce_synchronizer, every field default
    b"\x2a\x1e"  # Node.part_config (5, LEN, 30 bytes)
    b"\x0a\x0a" b"e/part_1:0"
    b"\x12\x10" b"\x0a\x0e" b"10.0.0.1:CPU:0"  # PS to n0, sync=false (omitted)
)
PART_FIXTURE = b"\x0a\x02" b"s2" b"\x1a\x3a" + PART_NODE + b"\x22\x30" + GRAPH_CONFIG
assert len(PART_NODE) == 0x3A

PART_EXPECTED = Strategy(
    id="s2",
    kind="autodist",
    nodes=(
        VarConfig(
            var_name="e",
            partition=Partition(
                axis=0,
                shards=2,
                synchronizers=(AllReduce(), PS(destination="n0", sync=False)),
            ),
        ),
    ),
)
PART_GRAPH = ModelGraph(name="m", variables=(Variable(name="e", shape=(4, 3), order=0),))


def _strategy(*nodes: bytes, sid: bytes = b"s") -> bytes:
    out = b"\x0a" + bytes([len(sid)]) + sid
    for n in nodes:
        out += b"\x1a" + bytes([len(n)]) + n
    return out


def _ps_node(var: bytes, ps_body: bytes) -> bytes:
    return b"\x0a" + bytes([len(var)]) + var + b"\x12" + bytes([len(ps_body)]) + ps_body


def _expect_spec_error(data: bytes, *needles: str, cluster: Cluster | None = CLUSTER) -> str:
    with pytest.raises(SpecError) as info:
        strategy_from_autodist(data, cluster)
    msg = str(info.value)
    assert msg.startswith("AutoDist strategy: ") and "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


# ------------------------------------------------------------------------------------------------
# fixtures decode / encode
# ------------------------------------------------------------------------------------------------
def test_hand_built_ps_and_ar_nodes_decode() -> None:
    assert strategy_from_autodist(FIXTURE, CLUSTER) == EXPECTED


def test_encoder_writes_the_hand_built_bytes() -> None:
    assert strategy_to_autodist(EXPECTED, CLUSTER) == FIXTURE


def test_hand_built_partition_decodes_and_encodes_with_graph() -> None:
    assert strategy_from_autodist(PART_FIXTURE, CLUSTER) == PART_EXPECTED
    assert strategy_to_autodist(PART_EXPECTED, CLUSTER, graph=PART_GRAPH) == PART_FIXTURE


def test_partitioner_without_graph_is_axis_ones_then_count() -> None:
    s = Strategy(
        id="p",
        nodes=(
            VarConfig(
                var_name="k",
                partition=Partition(axis=2, shards=3, synchronizers=(AllReduce(),) * 3),
            ),
        ),
    )
    data = strategy_to_autodist(s, CLUSTER)
    assert b"\x22\x05" b"1,1,3" in data
    graph = ModelGraph(name="m", variables=(Variable(name="k", shape=(2, 2, 9, 5), order=0),))
    assert b"\x22\x07" b"1,1,3,1" in strategy_to_autodist(s, CLUSTER, graph=graph)
    back = strategy_from_autodist(data, CLUSTER)
    assert back == s.model_copy(update={"kind": "autodist"})


def test_without_cluster_the_address_is_the_destination() -> None:
    s = strategy_from_autodist(FIXTURE)
    assert s.nodes[0].synchronizer == PS(
        destination="10.0.0.2", local_replication=True, sync=True, staleness=2
    )


def test_strategy_from_file_reads_autodist_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s1"
    path.write_bytes(FIXTURE)
    assert read_autodist_file(path, CLUSTER) == EXPECTED


def test_file_round_trip(tmp_path: Path) -> None:
    path = write_autodist_file(PART_EXPECTED, CLUSTER, tmp_path / "x", graph=PART_GRAPH)
    assert path.read_bytes() == PART_FIXTURE
    assert read_autodist_file(path, CLUSTER) == PART_EXPECTED


def test_read_missing_file_is_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        read_autodist_file(tmp_path / "missing")


def test_read_file_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken"
    path.write_bytes(FIXTURE[:-3])
    with pytest.raises(SpecError, match="broken"):
        read_autodist_file(path, CLUSTER)


def test_powersgd_rank_and_kind_are_not_carried() -> None:
    s = Strategy(
        id="q",
        kind="sampled",
        nodes=(
            VarConfig(
                var_name="v", synchronizer=AllReduce(compressor="powersgd", powersgd_rank=8)
            ),
        ),
    )
    back = strategy_from_autodist(strategy_to_autodist(s, CLUSTER), CLUSTER)
    assert back.kind == "autodist"
    assert back.nodes[0].synchronizer == AllReduce(compressor="powersgd", powersgd_rank=1)


@pytest.mark.parametrize("name,code", [("none", 0), ("fp16", 1), ("fp16_ef", 2), ("powersgd", 3)])
def test_compressor_enum_values(name: str, code: int) -> None:
    ar = AllReduce(compressor=name)  # type: ignore[arg-type]
    s = Strategy(id="c", nodes=(VarConfig(var_name="v", synchronizer=ar),))
    ar_body = b"\x10" + bytes([code]) if code else b""
    node = b"\x0a\x03v:0" + b"\x1a" + bytes([len(ar_body)]) + ar_body
    assert strategy_to_autodist(s, CLUSTER).startswith(_strategy(node, sid=b"c"))


# ------------------------------------------------------------------------------------------------
# tolerance
# ------------------------------------------------------------------------------------------------
def test_legacy_repeated_reduction_destinations_keep_the_first() -> None:
    body = b"\x0a\x0e" b"10.0.0.1:CPU:0" b"\x0a\x0e" b"10.0.0.2:CPU:0" b"\x18\x01"
    s = strategy_from_autodist(_strategy(_ps_node(b"v:0", body)), CLUSTER)
    assert s.nodes[0].synchronizer == PS(destination="n0", sync=True)


UNKNOWN = (
    b"\x48\x96\x01"  # field 9 varint
    b"\x51" + bytes(8)  # field 10 fixed64
    + b"\x5a\x03abc"  # field 11 length-delimited
    b"\x63" b"\x08\x01" b"\x6b\x6c" b"\x64"  # field 12 group holding a varint and an empty group 13
    b"\x75\x01\x02\x03\x04"  # field 14 fixed32
)


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    ps_node = (
        b"\x0a\x03w:0" + UNKNOWN
        + b"\x12" + bytes([22 + len(UNKNOWN)]) + PS_NODE[7:] + UNKNOWN
    )
    ar_node = AR_NODE[:5] + b"\x1a" + bytes([4 + len(UNKNOWN)]) + UNKNOWN + AR_NODE[7:]
    graph = GRAPH_CONFIG + UNKNOWN
    data = (
        UNKNOWN + b"\x0a\x02s1"
        + b"\x1a" + bytes([len(ps_node)]) + ps_node
        + b"\x1a" + bytes([len(ar_node)]) + ar_node
        + b"\x22" + bytes([len(graph)]) + graph
        + b"\x12\x05/tmp/" + UNKNOWN  # Strategy.path is read and ignored
    )
    assert strategy_from_autodist(data, CLUSTER) == EXPECTED


def test_spec_values_are_accepted_and_dropped() -> None:
    node = b"\x0a\x03v:0" b"\x1a\x02" b"\x08\x02"  # spec = RING
    s = strategy_from_autodist(_strategy(node), CLUSTER)
    assert s.nodes[0].synchronizer == AllReduce()


def test_last_oneof_member_wins() -> None:
    node = b"\x0a\x03v:0" b"\x12\x10\x0a\x0e10.0.0.1:CPU:0" b"\x1a\x02\x18\x05"
    s = strategy_from_autodist(_strategy(node), CLUSTER)
    assert s.nodes[0].synchronizer == AllReduce(group=5)


def test_gpu_destination_string_maps_to_the_node() -> None:
    node = _ps_node(b"v:0", b"\x0a\x0e10.0.0.1:GPU:1")
    assert strategy_from_autodist(_strategy(node), CLUSTER).nodes[0].synchronizer == PS(
        destination="n0", sync=False
    )


def test_ipv6_address_destination() -> None:
    cluster = Cluster(
        name="v6",
        nodes=(Node(name="a", address="fd00::1", workers=1, bandwidth_gbps=1, chief=True),),
    )
    s = Strategy(
        id="6", kind="autodist", nodes=(VarConfig(var_name="v", synchronizer=PS(destination="a")),)
    )
    data = strategy_to_autodist(s, cluster)
    assert b"fd00::1:CPU:0" in data
    assert strategy_from_autodist(data, cluster) == s
    assert strategy_from_autodist(data).nodes[0].synchronizer == PS(destination="fd00::1")


# ------------------------------------------------------------------------------------------------
# malformed input
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data,needle",
    [
        (b"\x0a\x05ab", "length 5"),
        (b"\x0a", "truncated varint"),
        (b"\x08\x96", "truncated varint"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\x0e", "invalid wire type 6"),
        (b"\x0f", "invalid wire type 7"),
        (b"\x02\x00", "invalid field number 0"),
        (b"\x64", "unexpected end-group"),
        (b"\x63\x08\x01", "unterminated group"),
        (b"\x63\x6c", "closes a group"),
        (b"\x51\x00\x00", "truncated 64-bit"),
        (b"\x55\x00", "truncated 32-bit"),
        (b"\x0a\x02\xff\xfe", "not valid UTF-8"),
        (b"\x08\x01", "id of Strategy (field 1) at byte 0 must be length-delimited"),
        (b"\x1a\x00", "no id"),
        (b"", "no id"),
        (_strategy(b""), "node_config[0] has no var_name"),
        (_strategy(b"\x0a\x01v"), "variable 'v' has no synchronizer"),
        (_strategy(b"\x0a\x01v\x12\x00"), "no reduction_destination"),
        (_strategy(b"\x0a\x01v\x10\x01"), "synchronizer of node_config[0]"),
        (_strategy(_ps_node(b"v", b"\x0a\x0510.0.")), "not an AutoDist device string"),
        (_strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.9:CPU:0")), "on no node of cluster 'two'"),
        (_strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.1:TPU:0")), "not an AutoDist device string"),
        (_strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.1:CPU:x")), "not an AutoDist device string"),
        (_strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.1:CPU:0\x12\x00")), "local_replication"),
        (
            _strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.1:CPU:0\x20" + b"\xff" * 9 + b"\x01")),
            "staleness",
        ),
        (_strategy(_ps_node(b"v", b"\x0a\x0e10.0.0.1:CPU:0\x20\x03")), "requires sync=true"),
        (_strategy(b"\x0a\x01v\x1a\x02\x10\x07"), "unknown all-reduce compressor 7"),
        (_strategy(b"\x0a\x01v\x1a\x0b\x18" + b"\xff" * 9 + b"\x01"), "group"),
        (_strategy(b"\x0a\x01v\x2a\x00"), "part_config entries but no partitioner"),
    ],
)
def test_malformed_input_is_a_one_line_spec_error(data: bytes, needle: str) -> None:
    _expect_spec_error(data, needle)


def _partitioned(partitioner: bytes, parts: int) -> bytes:
    part = b"\x0a\x03p:0\x1a\x00"
    node = b"\x0a\x05emb:0\x22" + bytes([len(partitioner)]) + partitioner
    node += (b"\x2a" + bytes([len(part)]) + part) * parts
    return _strategy(node)


@pytest.mark.parametrize("partitioner", [b"1,2,2", b"0,4", b"1,1", b"a,2", b"4,-1", b"3,", b","])
def test_invalid_partitioner_names_variable_and_string(partitioner: bytes) -> None:
    _expect_spec_error(_partitioned(partitioner, 2), "'emb'", repr(partitioner.decode()))


def test_partitioner_shard_count_must_match_part_config() -> None:
    _expect_spec_error(_partitioned(b"1,3", 2), "asks for 3 shards", "2 entries")


def test_valid_partitioner_forms() -> None:
    for text, axis in ((b"3", 0), (b"1,3", 1), (b"1,1,3,1", 2)):
        p = strategy_from_autodist(_partitioned(text, 3), CLUSTER).nodes[0].partition
        assert p is not None and (p.axis, p.shards) == (axis, 3)


def test_nested_partition_is_rejected() -> None:
    inner = b"\x0a\x03q:0\x1a\x00"
    part = b"\x0a\x03p:0\x22\x01\x32" + (b"\x2a" + bytes([len(inner)]) + inner) * 2
    node = b"\x0a\x05emb:0\x22\x012" + (b"\x2a" + bytes([len(part)]) + part) * 2
    _expect_spec_error(_strategy(node), "nested")


def test_every_prefix_decodes_or_is_spec_error() -> None:
    for data in (FIXTURE, PART_FIXTURE):
        for end in range(len(data)):
            try:
                strategy_from_autodist(data[:end], CLUSTER)
            except SpecError as e:
                assert str(e).startswith("AutoDist strategy: ")


# ------------------------------------------------------------------------------------------------
# export errors
# ------------------------------------------------------------------------------------------------
def test_export_unknown_destination_names_variable() -> None:
    s = Strategy(id="x", nodes=(VarConfig(var_name="v", synchronizer=PS(destination="nope")),))
    with pytest.raises(UnknownNameError, match="'nope' of variable 'v'"):
        strategy_to_autodist(s, CLUSTER)


def test_export_partition_axis_beyond_rank() -> None:
    s = Strategy(
        id="x",
        nodes=(
            VarConfig(
                var_name="e",
                partition=Partition(axis=2, shards=2, synchronizers=(AllReduce(),) * 2),
            ),
        ),
    )
    with pytest.raises(ConfigError, match="axis 2 does not exist"):
        strategy_to_autodist(s, CLUSTER, graph=PART_GRAPH)


def test_export_group_beyond_int32() -> None:
    # the type itself refuses such groups; an unvalidated object must still fail cleanly on export
    big = AllReduce.model_construct(group=2**31, compressor="none", powersgd_rank=1)
    s = Strategy(id="x", nodes=(VarConfig(var_name="v", synchronizer=big),))
    with pytest.raises(ConfigError, match="int32"):
        strategy_to_autodist(s, CLUSTER)


# ------------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------------
@PROPERTY
@given(hs.strategy_objects())
def test_property_json_round_trip(s: Strategy) -> None:
    assert Strategy.from_json(s.to_json()) == s


@PROPERTY
@given(hs.clusters_with_strategies())
def test_property_autodist_round_trip(pair: tuple[Cluster, Strategy]) -> None:
    cluster, s = pair
    assert strategy_from_autodist(strategy_to_autodist(s, cluster), cluster) == s


@PROPERTY
@given(st.data())
def test_property_autodist_round_trip_with_graph(data: st.DataObject) -> None:
    cluster, s = data.draw(hs.clusters_with_strategies())
    graph = data.draw(hs.graphs_for(s))
    assert strategy_from_autodist(strategy_to_autodist(s, cluster, graph=graph), cluster) == s


def _decode_or_spec_error(data: bytes, cluster: Cluster | None) -> None:
    try:
        strategy_from_autodist(data, cluster)
    except SpecError as e:
        msg = str(e)
        assert msg.startswith("AutoDist strategy: ") and "\n" not in msg, msg


@PROPERTY
@given(st.binary(max_size=256), st.booleans())
def test_property_random_bytes_decode_or_spec_error(data: bytes, with_cluster: bool) -> None:
    _decode_or_spec_error(data, CLUSTER if with_cluster else None)


@PROPERTY
@given(st.data())
def test_property_mutated_encodings_decode_or_spec_error(data: st.DataObject) -> None:
    cluster, s = data.draw(hs.clusters_with_strategies(max_vars=3))
    raw = bytearray(strategy_to_autodist(s, cluster))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "set" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        elif op == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and raw:
            del raw[at]
        elif op == "truncate":
            del raw[at:]
    _decode_or_spec_error(bytes(raw), data.draw(st.sampled_from([cluster, None])))
