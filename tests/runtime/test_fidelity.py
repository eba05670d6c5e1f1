"""The gradient-fidelity probe: exact strategies show no error, lossy ones show theirs, measured
with real gloo processes (and through the trial workers, into the trial record)."""

from __future__ import annotations

import math

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.runtime.accuracy import GradientFidelity
from autosync_transfer.runtime.fidelity import compare_gradients
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.runtime.plan import make_plan
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.models import TinyNet, tiny_batches, tiny_net_graph

VARS = ("emb.weight", "fc.weight", "fc.bias", "out.weight", "out.bias")


def _cluster(workers: list[int]) -> Cluster:
    return Cluster(name="t", nodes=tuple(
        Node(name=f"n{i}", address=f"10.9.0.{i + 1}", workers=w, bandwidth_gbps=1.0, chief=i == 0)
        for i, w in enumerate(workers)))


def _s(sid: str, cfg: dict) -> Strategy:
    return Strategy(id=sid, nodes=tuple(VarConfig(var_name=k, **v) for k, v in cfg.items()))


def _every(sync) -> dict:  # noqa: ANN001
    return {n: {"synchronizer": sync} for n in VARS}


LOSSLESS = [
    _s("ar", _every(AllReduce(group=0))),
    _s("ps-sparse-lr", {"emb.weight": {"synchronizer": PS(destination="n1", local_replication=True)},
                        **{n: {"synchronizer": PS(destination="n0")} for n in VARS[1:]}}),
    _s("partitioned", {
        "emb.weight": {"partition": Partition(axis=0, shards=2, synchronizers=(
            PS(destination="n0"), AllReduce(group=1)))},
        "fc.weight": {"partition": Partition(axis=1, shards=3, synchronizers=(
            AllReduce(group=0), PS(destination="n1"), AllReduce(group=0)))},
        "fc.bias": {"synchronizer": AllReduce(group=0)},
        "out.weight": {"synchronizer": PS(destination="n1", local_replication=True)},
        "out.bias": {"synchronizer": AllReduce(group=2)}}),
]
FP16 = _s("fp16", _every(AllReduce(group=0, compressor="fp16")))
#: PowerSGD rank 1 on the embedding table (in a graph that marks it dense, so that it may be
#: all-reduced): its gradient (the rows the batch touched) is far from rank 1, and what the
#: approximation drops is only fed back, never sent
POWERSGD_EMB = _s("psgd1-emb", {"emb.weight": {"synchronizer": AllReduce(
    group=0, compressor="powersgd", powersgd_rank=1)},
    **{n: {"synchronizer": AllReduce(group=1)} for n in VARS[1:]}})
#: an aggressive compressor on a small model: PowerSGD rank 1 on every variable
POWERSGD_ALL = _s("psgd1-all", _every(AllReduce(group=0, compressor="powersgd", powersgd_rank=1)))


def _dense_graph():  # noqa: ANN202
    """TinyNet's graph with its embedding table marked dense (every strategy may all-reduce it)."""
    from autosync_transfer.domains.graph import ModelGraph

    data = tiny_net_graph().model_dump()
    for v in data["variables"]:
        v["sparse"] = False
    return ModelGraph.model_validate(data)


def _probe_worker(rank: int, world: int, cluster_json: str, strategies_json: list[str],
                  steps: int) -> list[dict]:
    from autosync_transfer.runtime.executor import CommGroups, StrategyExecutor
    from autosync_transfer.runtime.fidelity import probe_fidelity

    cluster = Cluster.model_validate_json(cluster_json)
    graph = _dense_graph()
    groups = CommGroups.create()
    batches = tiny_batches(steps + 3, world)
    out = []
    for sj in strategies_json:
        torch.manual_seed(0)
        net = TinyNet()
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        ex = StrategyExecutor(net, make_plan(Strategy.from_json(sj), graph, cluster),
                              groups).setup()

        def backward(k: int, net=net, opt=opt) -> None:  # noqa: ANN001
            opt.zero_grad(set_to_none=False)
            net(*batches[k][rank]).backward()

        # one ordinary synchronized step first: the probe works mid-training
        backward(0)
        ex.finish()
        opt.step()
        # every variable averaged again exactly (the lossless synchronizers checked too)
        fid = probe_fidelity(ex, backward, steps, step=opt.step, first=1, every_variable=True)
        # after the probe the executor synchronizes as before
        backward(steps + 1)
        ex.finish()
        opt.step()
        # as the trial harness probes: only the variables a compressed all-reduce synchronizes
        lean = probe_fidelity(ex, backward, 1, step=opt.step, first=steps + 2)
        ex.close()
        out.append({"every": fid.model_dump(), "lean": lean.model_dump()})
    return out


def _probe(strategies: list[Strategy], workers: list[int], steps: int = 2) -> list[list[dict]]:
    cluster = _cluster(workers)
    return spawn_local(_probe_worker, cluster.world_size, cluster.model_dump_json(),
                       [s.to_json() for s in strategies], steps, timeout_s=240)


def test_probe_exact_and_lossy_strategies_on_gloo():
    strategies = [*LOSSLESS, FP16, POWERSGD_EMB, POWERSGD_ALL]
    per_rank = _probe(strategies, [2, 1])
    # every rank reports the same figures (rank 0's are recorded)
    for other in per_rank[1:]:
        for a, b in zip(per_rank[0], other):
            assert a["every"]["rel_error"] == pytest.approx(b["every"]["rel_error"], rel=1e-5,
                                                            abs=1e-7)
    results = {s.id: GradientFidelity.model_validate(f["every"])
               for s, f in zip(strategies, per_rank[0])}
    lean = {s.id: GradientFidelity.model_validate(f["lean"]) for s, f in zip(strategies, per_rank[0])}
    for s in LOSSLESS:  # nothing compressed: nothing averaged again, no error
        assert lean[s.id].rel_error == 0 and lean[s.id].cosine == pytest.approx(1.0)
    # the lossless variables of a lossy strategy count as exact; the compressed one is measured
    assert lean["psgd1-emb"].per_variable["fc.weight"] == 0.0
    assert lean["psgd1-emb"].per_variable["emb.weight"] > 0.5
    assert lean["psgd1-all"].rel_error > 0.3 and 0 < lean["fp16"].rel_error < 5e-3
    for s in LOSSLESS:
        fid = results[s.id]
        assert fid.rel_error < 1e-5, (s.id, fid)
        assert fid.cosine > 1 - 1e-6, (s.id, fid)
        assert set(fid.per_variable) == set(VARS) and fid.steps == 2
    fp16 = results["fp16"]
    assert 1e-6 < fp16.rel_error < 5e-3 and fp16.cosine > 0.9999
    emb = results["psgd1-emb"]
    assert emb.per_variable["emb.weight"] > 0.5, emb
    assert max(v for k, v in emb.per_variable.items() if k != "emb.weight") < 1e-5
    assert emb.rel_error > 10 * fp16.rel_error and emb.cosine < fp16.cosine
    every = results["psgd1-all"]
    assert every.rel_error > 0.3 and every.cosine < 0.95, every


def test_compare_gradients_hand_computed():
    exact = {"a": torch.tensor([3.0, 4.0]), "b": torch.zeros(2)}
    rel, cos, per = compare_gradients({"a": torch.tensor([3.0, 4.0]), "b": torch.zeros(2)}, exact)
    assert rel == 0 and cos == pytest.approx(1.0) and per == {"a": 0.0, "b": 0.0}
    rel, cos, per = compare_gradients({"a": torch.tensor([0.0, 5.0]), "b": torch.tensor([0.0, 1.0])},
                                      exact)
    assert rel == pytest.approx(math.sqrt(9 + 1 + 1) / 5)
    assert cos == pytest.approx(20 / (5 * math.sqrt(26)))
    assert per["a"] == pytest.approx(math.sqrt(10) / 5, rel=1e-3)
    assert per["b"] == pytest.approx(1 / 5, rel=1e-3)  # zero exact average: relative to the whole


@pytest.mark.parametrize("steps", [0])
def test_probe_needs_a_step(steps):
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.runtime.fidelity import probe_fidelity

    with pytest.raises(ConfigError, match="steps must be >= 1, got 0"):
        probe_fidelity(object(), lambda k: None, steps)


def _check(sid: str, passed: bool):  # noqa: ANN202
    from autosync_transfer.runtime.accuracy import ConvergenceCheck

    return ConvergenceCheck(strategy_id=sid, steps=50, target_loss=1.0,
                            steps_to_target=30 if passed else None, exact_steps_to_target=29,
                            final_loss=0.5 if passed else 1.4, exact_final_loss=0.5,
                            step_ratio=30 / 29 if passed else float("inf"),
                            final_gap=0.0 if passed else 1.8, passed=passed)


def _warning_worker(rank: int, world: int, cases: list[tuple[str, str | None, bool]]
                    ) -> list[list[str]]:
    """For each (strategy, check of which strategy, passed): the warnings DistributedModel logs
    on this rank while it sets up and trains one step."""
    import logging

    from autosync_transfer.runtime.ddp import DistributedModel

    strategies = {s.id: s for s in [*LOSSLESS, FP16, POWERSGD_ALL]}
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.WARNING)
    logging.getLogger("autosync_transfer").addHandler(handler)
    cluster = _cluster([1, 1])
    out = []
    for sid, checked, passed in cases:
        records.clear()
        check = _check(checked, passed) if checked else None
        torch.manual_seed(0)
        model = DistributedModel(TinyNet(), strategies[sid], cluster, graph=_dense_graph(),
                                 convergence_check=check)
        model(*tiny_batches(1, world)[0][rank]).backward()
        model.close()
        out.append([r.getMessage() for r in records])
    return out


def test_distributed_model_warns_on_an_unchecked_lossy_strategy():
    cases = [("ar", None, False), ("fp16", None, False), ("fp16", "fp16", True),
             ("psgd1-all", "psgd1-all", False), ("psgd1-all", "fp16", True)]
    per_rank = spawn_local(_warning_worker, 2, cases, timeout_s=240)
    rank0, rank1 = per_rank
    assert all(not w for w in rank1)  # rank zero only
    lossless, unchecked, checked, failed, other = rank0
    assert lossless == [] and checked == []
    assert len(unchecked) == 1 and "'fp16' is lossy (fp16)" in unchecked[0]
    assert "no convergence check" in unchecked[0]
    assert "powersgd rank 1" in failed[0] and "convergence check failed" in failed[0]
    assert "another strategy ('fp16')" in other[0]


def test_lightning_strategy_takes_the_check():
    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.errors import ConfigError

    check = _check("fp16", True)
    assert AutoSyncStrategy(FP16, convergence_check=check).convergence_check is check
    with pytest.raises(ConfigError, match="convergence_check must be a ConvergenceCheck"):
        AutoSyncStrategy(FP16, convergence_check={"passed": True})
