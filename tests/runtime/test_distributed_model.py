"""DistributedModel: a DDP-like training loop (no explicit finish) equals single-process training."""

from __future__ import annotations

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


def _sparse_worker(rank: int, world: int) -> str:
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.runtime.ddp import DistributedModel

    net = TinyNet()
    net.emb.sparse = True
    model = DistributedModel(net, _strategy(), _cluster())
    try:
        model(*tiny_batches(1, world)[0][rank])
    except ConfigError as e:
        return str(e)
    return "no error"


def test_sparse_embedding_gradients_are_refused_in_one_line():
    results = spawn_local(_sparse_worker, 2, timeout_s=180)
    for rank in range(2):
        assert results[rank].startswith("module 'emb' has sparse=True"), results[rank]


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
