"""For every synchronizer kind, W real gloo ranks match single-process training on the
concatenated batch; compressed variants still converge."""

from __future__ import annotations

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.runtime.plan import make_plan
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.models import TinyNet, tiny_batches, tiny_net_graph

STEPS = 3
LR = 0.5


def _cluster(workers: list[int]) -> Cluster:
    return Cluster(name="t", nodes=tuple(
        Node(name=f"n{i}", address=f"10.9.0.{i + 1}", workers=w, bandwidth_gbps=1.0, chief=i == 0)
        for i, w in enumerate(workers)))


def _s(sid: str, cfg: dict) -> Strategy:
    return Strategy(id=sid, nodes=tuple(VarConfig(var_name=k, **v) for k, v in cfg.items()))


def _all(sync) -> dict:
    return {n: {"synchronizer": sync} for n in ("fc.weight", "fc.bias", "out.weight", "out.bias")}


def _strategies() -> list[Strategy]:
    ps0, ps1 = PS(destination="n0"), PS(destination="n1")
    lr1 = PS(destination="n1", local_replication=True)
    lr0 = PS(destination="n0", local_replication=True)
    part = lambda axis, *ss: {"partition": Partition(axis=axis, shards=len(ss), synchronizers=ss)}  # noqa: E731
    return [
        _s("ar-one-group", {"emb.weight": {"synchronizer": ps0}, **_all(AllReduce(group=0))}),
        _s("ar-groups", {"emb.weight": {"synchronizer": ps1}, "fc.weight": {"synchronizer": AllReduce(group=2)},
                         "fc.bias": {"synchronizer": AllReduce(group=0)}, "out.weight": {"synchronizer": AllReduce(group=1)},
                         "out.bias": {"synchronizer": AllReduce(group=2)}}),
        _s("ps-single", {"emb.weight": {"synchronizer": ps0}, **_all(ps0)}),
        _s("ps-lr", {"emb.weight": {"synchronizer": lr1}, **_all(lr1)}),
        _s("ps-lr-server0", {"emb.weight": {"synchronizer": lr0}, **_all(lr0)}),
        # several shards of one variable fused into one bucket with other variables
        # the early variable (out.weight) must not make the bucket ready before fc.* are
        _s("shards-same-bucket", {"emb.weight": {"synchronizer": ps1},
                                  "fc.weight": part(0, AllReduce(group=0), lr1, AllReduce(group=0)),
                                  "fc.bias": {"synchronizer": AllReduce(group=0)},
                                  "out.weight": part(1, *[AllReduce(group=0)] * 4),
                                  "out.bias": {"synchronizer": ps0}}),
        _s("partitioned", {"emb.weight": part(0, ps0, lr1, ps1), "fc.weight": part(1, ps1, AllReduce(group=3), lr0),
                           "fc.bias": part(0, AllReduce(group=3), ps0), "out.weight": {"synchronizer": ps1},
                           "out.bias": {"synchronizer": AllReduce(group=1)}}),
    ]


def _train_worker(rank: int, world: int, cluster_json: str, strategies_json: list[str]) -> list[dict]:
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor

    cluster = Cluster.model_validate_json(cluster_json)
    graph = tiny_net_graph()
    groups = CommGroups.create()
    out = []
    for sj in strategies_json:
        strategy = Strategy.from_json(sj)
        torch.manual_seed(0)
        net = TinyNet()
        opt = torch.optim.SGD(net.parameters(), lr=LR)
        ex = StrategyExecutor(net, make_plan(strategy, graph, cluster), groups).setup()
        for step in tiny_batches(STEPS, world):
            opt.zero_grad()
            net(*step[rank]).backward()
            ex.finish()
            opt.step()
        ex.close()
        out.append({k: v.detach().clone() for k, v in net.state_dict().items()})
    return out


def _reference(world: int) -> dict:
    torch.manual_seed(0)
    net = TinyNet()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step in tiny_batches(STEPS, world):
        idx = torch.cat([b[0] for b in step])
        y = torch.cat([b[1] for b in step])
        opt.zero_grad()
        net(idx, y).backward()
        opt.step()
    return net.state_dict()


@pytest.mark.parametrize("workers", [[2, 2], [1, 1, 1]], ids=["2x2", "3x1"])
def test_uncompressed_matches_single_process(workers):
    cluster = _cluster(workers)
    world = cluster.world_size
    strategies = [s for s in _strategies()]
    results = spawn_local(_train_worker, world, cluster.model_dump_json(),
                          [s.to_json() for s in strategies], timeout_s=240)
    ref = _reference(world)
    for si, s in enumerate(strategies):
        for rank in range(world):
            got = results[rank][si]
            for k in ref:
                assert torch.allclose(got[k], ref[k], atol=1e-5, rtol=1e-4), (s.id, rank, k)


def test_plan_bytes_match_roles():
    cluster = _cluster([2, 2])
    plan = make_plan(_strategies()[3], tiny_net_graph(), cluster)  # everything on n1 with LR
    # server rank 2 receives from its node-mate (rank 3) and from node n0's leader (rank 0)
    assert plan.ps_items[0].server_rank == 2
    assert plan.sent_bytes[1] > 0 and plan.sent_bytes[0] > plan.sent_bytes[1]


def _converge_worker(rank: int, world: int, cluster_json: str, compressors: list[str]) -> dict:
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor

    cluster = Cluster.model_validate_json(cluster_json)
    graph = tiny_net_graph()
    groups = CommGroups.create()
    out = {}
    # a learnable task: the class is the first token modulo 3
    batches = [(idx, idx[:, 0] % 3) for idx, _ in tiny_batches(1, world, per_rank=32, seed=7)[0]]
    for comp in compressors:
        sync = AllReduce(group=0, compressor=comp, powersgd_rank=2)
        strategy = _s(comp, {"emb.weight": {"synchronizer": PS(destination="n0")}, **_all(sync)})
        torch.manual_seed(0)
        net = TinyNet()
        opt = torch.optim.SGD(net.parameters(), lr=1.0)
        ex = StrategyExecutor(net, make_plan(strategy, graph, cluster), groups).setup()
        losses = []
        for _ in range(150):
            opt.zero_grad()
            loss = net(*batches[rank])
            loss.backward()
            ex.finish()
            opt.step()
            losses.append(loss.item())
        ex.close()
        out[comp] = (losses[0], losses[-1], [p.detach().clone() for p in net.parameters()])
    return out


def test_compressed_variants_converge():
    cluster = _cluster([1, 1])
    comps = ["none", "fp16", "fp16_ef", "powersgd"]
    res = spawn_local(_converge_worker, 2, cluster.model_dump_json(), comps, timeout_s=240)
    base_first, base_last, _ = res[0]["none"]
    assert base_last < 0.5 * base_first
    for comp in comps:
        for rank in range(2):
            first, last, _ = res[rank][comp]
            assert last < 0.6 * first, (comp, rank, first, last)
            assert last < base_last * 1.5 + 0.05, (comp, last, base_last)
        # every rank holds the same parameters after compressed training too
        for a, b in zip(res[0][comp][2], res[1][comp][2]):
            assert torch.allclose(a, b, atol=1e-6), comp


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_row_sparse_form_finds_exactly_the_non_zero_rows(dtype) -> None:
    from autosync_transfer.runtime.executor import _rows

    g = torch.zeros(9, 4, dtype=dtype)
    g[1, 2] = float("nan")
    g[3, 0] = float("inf")
    g[4, 1] = -0.0  # equal to zero: not sent
    g[5] = torch.finfo(dtype).tiny  # the smallest normal in every column
    g[6] = torch.finfo(dtype).max  # its sum overflows to inf: still non-zero
    g[7, 3] = -2.5
    idx, vals = _rows(g)
    assert idx.tolist() == [1, 3, 5, 6, 7]
    assert torch.equal(vals.nan_to_num(), g[[1, 3, 5, 6, 7]].nan_to_num())
    three_d = torch.zeros(5, 2, 3, dtype=dtype)
    three_d[2, 1, 2] = 1.0
    assert _rows(three_d)[0].tolist() == [2]
