"""Importing the AutoSync dataset layouts (v2 and v1) from a small hand-built tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autosync_transfer.dataset.autosync_import import import_autosync
from autosync_transfer.dataset.store import TrialStore
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.errors import SpecError
from autosync_transfer.strategies.autodist import strategy_to_autodist
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig

CLUSTER = Cluster(
    name="spec",
    nodes=(
        Node(name="n0", address="10.0.0.1", workers=2, device="gpu", bandwidth_gbps=25, chief=True),
        Node(name="n1", address="10.0.0.2", workers=2, device="gpu", bandwidth_gbps=25),
    ),
)
SPEC_YAML = yaml.safe_dump({  # as AutoSync writes it: no node names
    "nodes": [
        {"address": "10.0.0.1", "gpus": [0, 1], "chief": True, "network_bandwidth": 25},
        {"address": "10.0.0.2", "gpus": [0, 1], "network_bandwidth": 25},
    ]
})


def strategy(sid: str, dest: str = "n1") -> Strategy:
    return Strategy(id=sid, nodes=(
        VarConfig(var_name="dense/kernel", synchronizer=PS(destination=dest, sync=True)),
        VarConfig(var_name="emb", partition=Partition(
            axis=0, shards=2, synchronizers=(AllReduce(group=1), AllReduce(compressor="fp16")))),
    ))


def write_sample(folder: Path, sid: str, runtime: dict | None, *, strategy_dir: str = "strategies",
                 runtime_dir: str = "runtime", runtime_suffix: str = "", spec: bool = True,
                 as_json: bool = False) -> None:
    (folder / strategy_dir).mkdir(parents=True, exist_ok=True)
    (folder / strategy_dir / sid).write_bytes(strategy_to_autodist(strategy(sid), CLUSTER))
    if runtime is not None:
        (folder / runtime_dir).mkdir(exist_ok=True)
        text = json.dumps(runtime) if as_json else yaml.safe_dump(runtime)
        (folder / runtime_dir / f"{sid}{runtime_suffix}").write_text(text)
    if spec:
        (folder / "resource_spec").mkdir(exist_ok=True)
        (folder / "resource_spec" / sid).write_text(SPEC_YAML)


@pytest.fixture
def v2_tree(tmp_path) -> Path:
    root = tmp_path / "autosync"
    a = root / "bert_large" / "cluster-A"
    write_sample(a, "1600000001", {"average": 0.5, "runtime": [0.49, 0.5, 0.51], "extra": 1})
    write_sample(a, "1600000002", {"average": 0.25, "runtime": [0.25]}, as_json=True)
    write_sample(a, "1600000003", None)  # no runtime
    write_sample(a, "1600000004", {"average": 0.3, "runtime": [0.3]})
    (a / "strategies" / "1600000004").write_bytes(b"\x0a\xff")  # truncated protobuf
    write_sample(a, "1600000005", {"runtime": [0.3]})  # no average
    b = root / "vgg16" / "cluster-B"
    write_sample(b, "1600000009", {"average": 1.5, "runtime": [1.5, 1.5]}, runtime_suffix=".yml")
    (root / "vgg16" / "graph_item").write_bytes(b"\x00")  # not read
    return root


def test_v2_import(v2_tree, tmp_path):
    store = TrialStore(tmp_path / "out.jsonl")
    report = import_autosync(v2_tree, store)
    assert (report.imported, report.missing_runtime, report.bad_strategy, report.bad_runtime) == (
        3, 1, 1, 1)
    assert report.per_domain == {"bert_large-cluster-A": 2, "vgg16-cluster-B": 1}
    assert len(report.problems) == 3 and any("1600000003" in p for p in report.problems)
    recs = {r.id: r for r in store.records()}
    r = recs["autosync/bert_large/cluster-A/1600000001"]
    assert r.domain == "bert_large-cluster-A" and r.model == "bert_large" and r.cluster == "cluster-A"
    assert r.status == "ok" and r.median_s == 0.5 and r.iteration_times_s == [0.49, 0.5, 0.51]
    assert r.strategy_kind == "autodist" and r.model_fingerprint == ""
    parsed = Cluster.from_yaml(SPEC_YAML)
    assert r.cluster_fingerprint == parsed.fingerprint
    s = Strategy.from_dict(r.strategy)
    assert s.id == "1600000001" and s.kind == "autodist"
    assert s.node("dense/kernel").synchronizer.destination == "n1"  # mapped to the spec's node
    assert s.node("emb").partition.synchronizers[1].compressor == "fp16"
    assert recs["autosync/vgg16/cluster-B/1600000009"].median_s == 1.5
    # importing again adds nothing
    again = import_autosync(v2_tree, store)
    assert again.imported == 0 and again.duplicates == 3 and len(store) == 3


def test_v1_layout(tmp_path):
    root = tmp_path / "v1"
    exp = root / "ncf" / "cluster1" / "ncf_large_adam_dense_g3.4.25.1"
    for sid, avg in (("11", 0.2), ("12", 0.4)):
        write_sample(exp, sid, {"average": avg, "runtime": [avg]}, runtime_dir="runtimes",
                     spec=False, as_json=True)
    (exp / "resource_spec.yml").write_text(SPEC_YAML)
    other = root / "ncf" / "cluster2" / "exp2"
    write_sample(other, "21", {"average": 0.3}, strategy_dir="strategy", runtime_dir="runtimes",
                 spec=False)  # no spec at all
    store = TrialStore(tmp_path / "v1.jsonl")
    report = import_autosync(root, store)
    assert report.imported == 2 and report.bad_spec == 1 and report.folders == 2
    domains = {r.domain for r in store.records()}
    assert domains == {"ncf-cluster1/ncf_large_adam_dense_g3.4.25.1"}


def test_model_folder_as_root(v2_tree, tmp_path):
    store = TrialStore(tmp_path / "m.jsonl")
    report = import_autosync(v2_tree / "vgg16", store)
    assert report.per_domain == {"vgg16-cluster-B": 1}


def test_bad_spec_is_counted(tmp_path):
    folder = tmp_path / "root" / "m" / "c"
    write_sample(folder, "1", {"average": 0.1})
    (folder / "resource_spec" / "1").write_text("nodes: [")
    report = import_autosync(tmp_path / "root", TrialStore(tmp_path / "x.jsonl"))
    assert report.imported == 0 and report.bad_spec == 1 and "not valid YAML" in report.problems[0]


def test_empty_or_missing_root(tmp_path):
    with pytest.raises(SpecError, match="no AutoSync samples"):
        import_autosync(tmp_path, TrialStore(tmp_path / "x.jsonl"))
    with pytest.raises(SpecError, match="is not a folder"):
        import_autosync(tmp_path / "nope", TrialStore(tmp_path / "x.jsonl"))
