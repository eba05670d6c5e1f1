"""DistributedModel: a DDP-like training loop (no explicit finish) equals single-process training."""

from __future__ import annotations

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.models import TinyNet, tiny_batches

STEPS, LR = 3, 0.5


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def _strategy() -> Strategy:
    ps0, ps1 = PS(destination="n0"), PS(destination="n1")
    return Strategy(id="mixed", nodes=(
        VarConfig(var_name="emb.weight", partition=Partition(axis=0, shards=2, synchronizers=(ps0, ps1))),
        VarConfig(var_name="fc.weight", synchronizer=AllReduce(group=0, compressor="none")),
        VarConfig(var_name="fc.bias", synchronizer=ps1),
        VarConfig(var_name="out.weight", synchronizer=AllReduce(group=1)),
        VarConfig(var_name="out.bias", synchronizer=AllReduce(group=1)),
    ))


def _worker(rank: int, world: int) -> dict:
    from autosync_transfer.runtime.ddp import DistributedModel

    torch.manual_seed(rank)  # different on purpose: the first forward broadcasts rank 0's weights
    net = TinyNet()
    model = DistributedModel(net, _strategy(), _cluster())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in tiny_batches(STEPS, world):
        opt.zero_grad()
        model(*step[rank]).backward()  # gradients are averaged when backward returns
        opt.step()
    model.close()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_plain_training_loop_matches_single_process():
    results = spawn_local(_worker, 2, timeout_s=180)
    torch.manual_seed(0)
    ref = TinyNet()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for step in tiny_batches(STEPS, 2):
        opt.zero_grad()
        ref(torch.cat([b[0] for b in step]), torch.cat([b[1] for b in step])).backward()
        opt.step()
    for rank in range(2):
        for k, v in ref.state_dict().items():
            assert torch.allclose(results[rank][k], v, atol=1e-5, rtol=1e-4), (rank, k)


def _sparse_worker(rank: int, world: int) -> dict:
    from autosync_transfer.runtime.ddp import DistributedModel

    torch.manual_seed(0)
    net = TinyNet()
    net.emb.sparse = True
    model = DistributedModel(net, _strategy(), _cluster())
    model(*tiny_batches(1, world)[0][rank]).backward()
    g = net.emb.weight.grad
    return {"layout": str(g.layout), "grad": g.to_dense().clone(),
            "fc": [p.grad.clone() for n, p in net.named_parameters() if n != "emb.weight"]}


def test_sparse_embedding_gradients_are_synchronized():
    """``nn.Embedding(sparse=True)`` trains like under torch DDP (was refused): every rank ends
    with the same averaged gradient, sparse again for ``SparseAdam``
    (``test_sparse_parity.py`` compares whole trainings with DDP)."""
    results = spawn_local(_sparse_worker, 2, timeout_s=180)
    assert results[0]["layout"] == results[1]["layout"] == "torch.sparse_coo"
    assert torch.equal(results[0]["grad"], results[1]["grad"])
    assert all(torch.equal(a, b) for a, b in zip(results[0]["fc"], results[1]["fc"]))


def test_recommend_returns_a_valid_strategy_without_running_anything():
    import autosync_transfer
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.strategies.validate import validate

    with torch.device("meta"):
        net = TinyNet()
    a = autosync_transfer.recommend(net, _cluster(), candidates=40, seed=1, batch_size=4, seq_len=5)
    b = autosync_transfer.recommend(net, _cluster(), candidates=40, seed=1, batch_size=4, seq_len=5)
    assert a == b
    graph = ModelGraph.from_torch(net, name="model", batch_size=4, seq_len=5)
    validate(a, Domain(name="model-t", model=graph, cluster=_cluster()))


def _one_node_worker(rank: int, world: int) -> tuple:
    from autosync_transfer.runtime.ddp import DistributedModel, cluster_from_process_group

    c = cluster_from_process_group()
    net = TinyNet()
    on_n0 = PS(destination="n0")
    strategy = Strategy(id="one-node", nodes=tuple(
        VarConfig(var_name=n, synchronizer=on_n0 if n.startswith("emb") else AllReduce())
        for n, _ in net.named_parameters()))
    model = DistributedModel(net, strategy)  # the cluster: the process group's layout
    model(*tiny_batches(1, world)[0][rank]).backward()
    model.close()
    return [(n.name, n.workers) for n in c.nodes], [(n.name, n.workers) for n in model.cluster.nodes]


def test_without_a_cluster_the_process_group_layout_is_used():
    """Two local ranks: one node ``n0`` with two workers, derived collectively."""
    for derived, used in spawn_local(_one_node_worker, 2, timeout_s=180):
        assert derived == used == [("n0", 2)]


_EMULATED_WORKER = """
import json, torch
import torch.distributed as dist
from autosync_transfer.runtime.ddp import DistributedModel
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.models import TinyNet, tiny_batches
STEPS, LR = 3, 0.5
ps0, ps1 = PS(destination="n0"), PS(destination="n1")
strategy = Strategy(id="mixed", nodes=(
    VarConfig(var_name="emb.weight", partition=Partition(axis=0, shards=2, synchronizers=(ps0, ps1))),
    VarConfig(var_name="fc.weight", synchronizer=AllReduce(group=0)),
    VarConfig(var_name="fc.bias", synchronizer=ps1),
    VarConfig(var_name="out.weight", synchronizer=AllReduce(group=1)),
    VarConfig(var_name="out.bias", synchronizer=AllReduce(group=1)),
))
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
net = TinyNet()
model = DistributedModel(net, strategy)  # PS shards on n0 and n1 of the derived cluster
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in tiny_batches(STEPS, world):
    opt.zero_grad()
    model(*step[rank]).backward()
    opt.step()
model.close()
print(json.dumps({"nodes": [[n.name, n.address, n.workers, n.chief] for n in model.cluster.nodes],
                  "sum": float(sum(p.double().sum() for p in net.parameters()))}))
"""


@pytest.mark.netns
def test_without_a_cluster_an_emulated_cluster_is_found_node_by_node(two_emulated_hosts) -> None:  # noqa: ANN001
    """Three ranks on two emulated hosts (two on the chief): the derived cluster has the
    hosts' addresses in rank order, and a strategy naming n0 and n1 trains to equal replicas."""
    import json
    import subprocess
    import sys

    from autosync_transfer.runtime.emulation import EmulatedCluster

    c = two_emulated_hosts
    with EmulatedCluster(c) as ec:
        procs = [ec.popen(node, [sys.executable, "-c", _EMULATED_WORKER],
                          env={"RANK": str(r), "WORLD_SIZE": "3", "MASTER_PORT": "29533"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r, node in enumerate(["a", "a", "b"])]
        outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1][-1500:] for o in outs]
    res = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    addrs = [ec.address_of(n) for n in ("a", "b")]
    for r in res:
        assert r["nodes"] == [["n0", addrs[0], 2, True], ["n1", addrs[1], 1, False]]
    assert res[0]["sum"] == pytest.approx(res[1]["sum"]) == pytest.approx(res[2]["sum"])
