"""``nn.Embedding(sparse=True)`` (torch sparse gradients, trained with ``SparseAdam``) trains
under DistributedModel exactly as under torch DDP: on DDP's reducer (every variable
all-reduced: DDP's sparse all-reduce gathers indices and values), and on the executor with the
embedding on a parameter server (``all_reduce``, ``ps``, ``parallax`` on a graph that marks it
sparse: only the touched rows cross) or all-reduced (``use_ddp_reducer=False``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.launch import spawn_local

STEPS, PER_RANK, VOCAB = 5, 6, 40
CASES = ("all_reduce", "all_reduce_dense_graph", "ps", "parallax", "all_reduce_executor")


class SparseNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8, sparse=True)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(tokens).mean(dim=1))


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def _train(model: torch.nn.Module, net: SparseNet, rank: int) -> dict:
    dense = torch.optim.SGD(net.fc.parameters(), lr=0.1)
    sparse = torch.optim.SparseAdam(list(net.emb.parameters()), lr=0.05)
    g = torch.Generator().manual_seed(0)
    layouts = []
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (2, PER_RANK, 4), generator=g)
        labels = torch.randint(0, 3, (2, PER_RANK), generator=g)
        dense.zero_grad()
        sparse.zero_grad()
        F.cross_entropy(model(tokens[rank]), labels[rank]).backward()
        layouts.append(str(net.emb.weight.grad.layout))
        dense.step()
        sparse.step()
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()},
            "layouts": sorted(set(layouts))}


def _worker(rank: int, world: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.domains.graph import ModelGraph
    from autosync_transfer.runtime.ddp import DistributedModel
    from autosync_transfer.strategies.builders import build

    out = {}
    torch.manual_seed(0)
    net = SparseNet()
    out["ddp"] = _train(DistributedDataParallel(net), net, rank)
    for case in CASES:
        torch.manual_seed(rank + 3)  # rank 0's parameters are broadcast
        net = SparseNet()
        # the dense graph all-reduces the embedding too: the plan runs on DDP's reducer
        graph = ModelGraph.from_torch(net, name="sparse", sparse=()) \
            if case.endswith("_dense_graph") else ModelGraph.from_torch(net, name="sparse")
        builder = case.removesuffix("_executor").removesuffix("_dense_graph")
        strategy = build(builder, Domain(name="sparse-t", model=graph, cluster=_cluster()))
        model = DistributedModel(net, strategy, _cluster(), graph=graph,
                                 use_ddp_reducer=not case.endswith("_executor"))
        if rank == 0:
            torch.manual_seed(0)
            ref = SparseNet()
            with torch.no_grad():
                for p, q in zip(net.parameters(), ref.parameters()):
                    p.copy_(q)
        out[case] = {**_train(model, net, rank), "backend": model.backend}
    return out


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return spawn_local(_worker, 2, timeout_s=240)


@pytest.mark.parametrize("case", CASES)
def test_sparse_embedding_trains_like_ddp(runs: list[dict], case: str) -> None:
    for rank in range(2):
        ours, ddp = runs[rank][case]["state"], runs[rank]["ddp"]["state"]
        for k in ddp:
            assert torch.allclose(ours[k], ddp[k], atol=1e-6, rtol=1e-5), (case, rank, k)
        assert runs[rank][case]["layouts"] == ["torch.sparse_coo"]  # SparseAdam's input
    expected = {"all_reduce_dense_graph": "ddp_reducer"}.get(case, "executor")
    assert runs[0][case]["backend"] == expected
