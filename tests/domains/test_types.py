from __future__ import annotations

import pytest
from pydantic import ValidationError

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph, Variable
from autosync_transfer.errors import SpecError

AUTODIST_SPEC = """
nodes:
  - address: 192.168.0.1
    gpus: [0, 1, 2, 3]
    chief: true
    network_bandwidth: 25
  - address: 192.168.0.2
    gpus: [0, 1, 2, 3]
    ssh_config: conf
    network_bandwidth: 25
ssh:
  conf:
    username: ubuntu
    key_file: /home/ubuntu/.ssh/id_rsa
    python_venv: source /home/ubuntu/venv/bin/activate
    shared_envs:
      LD_LIBRARY_PATH: /usr/local/cuda/lib64
"""


def _graph(**kw):
    vs = (
        Variable(name="emb", shape=(100, 8), sparse=True, order=0),
        Variable(name="w", shape=(8, 4), order=1),
        Variable(name="b", shape=(4,), order=2),
    )
    return ModelGraph(name="g", variables=vs, edges=(("emb", "w"), ("w", "b")), **kw)


def test_graph_derived_quantities():
    g = _graph(batch_size=4, seq_len=2)
    assert g.num_parameters == 800 + 32 + 4
    assert g.nbytes == 4 * g.num_parameters
    assert [v.name for v in g.sparse_variables] == ["emb"]
    assert g.variable("w").partitionable_axes() == [0, 1]
    assert g.variable("emb").partitionable_axes() == [0]
    assert g.variable("b").row_elements == 1


def test_fingerprint_depends_on_content_only():
    a, b = _graph(batch_size=4), _graph(batch_size=4, description="other words")
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != _graph(batch_size=8).fingerprint


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(name="x", shape=(0, 3), order=0), "every dimension must be >= 1"),
        (dict(name="x", shape=(3,), dtype="float8", order=0), "dtype must be one of"),
        (dict(name="x", shape=(3,), sparse=True, order=0), "sparse variable needs a row axis"),
        (dict(name="", shape=(3,), order=0), "at least 1 character"),
    ],
)
def test_variable_rules(kwargs, needle):
    with pytest.raises(ValidationError, match=needle):
        Variable(**kwargs)


def test_graph_rules():
    v0 = Variable(name="a", shape=(2,), order=0)
    with pytest.raises(ValidationError, match="appears twice"):
        ModelGraph(name="g", variables=(v0, Variable(name="a", shape=(2,), order=1)))
    with pytest.raises(ValidationError, match="forward order"):
        ModelGraph(name="g", variables=(Variable(name="a", shape=(2,), order=1),))
    with pytest.raises(ValidationError, match="unknown variable 'zz'"):
        ModelGraph(name="g", variables=(v0,), edges=(("a", "zz"),))
    with pytest.raises(ValidationError, match="no trainable variables"):
        ModelGraph(name="g", variables=())


def test_frozen():
    g = _graph()
    with pytest.raises(ValidationError):
        g.batch_size = 3  # type: ignore[misc]


def test_autodist_resource_spec_reads_and_round_trips():
    c = Cluster.from_yaml(AUTODIST_SPEC, name="aws")
    assert c.num_nodes == 2 and c.world_size == 8
    assert c.chief.address == "192.168.0.1"
    assert c.nodes[0].device == "gpu" and c.nodes[0].bandwidth_gbps == 25
    assert c.ssh["conf"].username == "ubuntu"
    assert c.node_ranks("n1") == [4, 5, 6, 7]
    assert c.rank_nodes()[:5] == ["n0"] * 4 + ["n1"]
    again = Cluster.from_yaml(c.to_yaml(), name="aws")
    assert again == c
    spec = c.to_resource_spec()
    assert spec["nodes"][0]["gpus"] == [0, 1, 2, 3] and spec["nodes"][1]["ssh_config"] == "conf"


def test_single_node_is_chief_by_default_and_may_use_loopback():
    c = Cluster.from_yaml("nodes: [{address: localhost, cpus: [0, 1]}]")
    assert c.chief.name == "n0" and c.world_size == 2


def test_bandwidth_defaults_to_one_gbit():
    c = Cluster.from_yaml("nodes: [{address: 10.0.0.1, cpus: [0]}]")
    assert c.nodes[0].bandwidth_gbps == 1.0


def test_spec_error_is_config_error():
    with pytest.raises(SpecError, match="must be > 0"):
        Cluster.from_yaml("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: -1}]")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [{address: 10.0.0.1, cpus: [0], network_bandwidth: -5}]",
         "resource spec: nodes[0]: 'network_bandwidth' must be > 0 Gbit/s (got -5)"),
        ("nodes: [{address: 10.0.0.1, cpus: [0]}, {address: 10.0.0.2, cpus: [0], chief: maybe}]",
         "resource spec: nodes[1]: 'chief' must be true/false (got 'maybe')"),
        ("nodes: [{address: 10.0.0.1, cpus: [0], gpu_count: 4}]",
         "resource spec: nodes[0]: unknown field 'gpu_count' (got 4)"),
        ("nodes: [10.0.0.1]", "resource spec: nodes[0] must be a mapping (got '10.0.0.1')"),
    ],
)
def test_resource_spec_errors_name_the_node_the_field_and_the_value(text, message):
    with pytest.raises(SpecError) as info:
        Cluster.from_yaml(text)
    assert str(info.value) == message


def test_resource_spec_model_keeps_autodist_defaults():
    from autosync_transfer.domains.cluster import ResourceSpec

    spec = ResourceSpec.parse({"nodes": [{"address": "10.0.0.1", "gpus": [0, 1]}]})
    node = spec.nodes[0]
    assert (node.network_bandwidth, node.latency_ms, node.chief) == (1.0, 0.0, False)
    assert spec.ssh is None and spec.name is None
    with pytest.raises(SpecError, match="'cpus' must be a list of device indices"):
        ResourceSpec.parse({"nodes": [{"address": "a", "cpus": (0, 1)}]})
