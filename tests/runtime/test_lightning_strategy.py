"""AutoSyncStrategy: Lightning training with an AutoSync strategy on real gloo processes.

One pair of worker processes runs four Trainer.fit calls in one process group: a given strategy
(mixed PS / all-reduce, exact), Lightning's own DDP on the same seed and data, a strategy chosen by
``recommend`` at setup time, and a strategy that does not fit the model.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.runtime.launch import spawn_local
from autosync_transfer.strategies.types import PS, AllReduce, Partition, Strategy, VarConfig
from autosync_transfer.testing.models import TinyNet

STEPS, LR, PER_RANK = 8, 0.5, 4


def _cluster() -> Cluster:
    return Cluster(name="t", nodes=(
        Node(name="n0", address="10.9.0.1", workers=1, bandwidth_gbps=1.0, chief=True),
        Node(name="n1", address="10.9.0.2", workers=1, bandwidth_gbps=1.0)))


def _strategy(prefix: str = "") -> Strategy:
    """Exact (no compression): sharded PS embedding, PS bias, two all-reduce groups."""
    ps0, ps1 = PS(destination="n0"), PS(destination="n1")
    return Strategy(id="mixed", nodes=(
        VarConfig(var_name=f"{prefix}emb.weight",
                  partition=Partition(axis=0, shards=2, synchronizers=(ps0, ps1))),
        VarConfig(var_name=f"{prefix}fc.weight", synchronizer=AllReduce(group=0, compressor="none")),
        VarConfig(var_name=f"{prefix}fc.bias", synchronizer=ps1),
        VarConfig(var_name=f"{prefix}out.weight", synchronizer=AllReduce(group=1)),
        VarConfig(var_name=f"{prefix}out.bias", synchronizer=AllReduce(group=1)),
    ))


def _lit_module():  # noqa: ANN202 - a LightningModule (Lightning is imported lazily)
    import lightning.pytorch as pl

    class TinyLit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = TinyNet()
            self.losses: list[float] = []

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
            loss = self.model(*batch)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.SGD(self.parameters(), lr=LR)

    return TinyLit()


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable task: the tokens of class c are drawn from [16c, 16c + 16)."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (STEPS * PER_RANK * 2,), generator=g)
    return y[:, None] * 16 + torch.randint(0, 16, (len(y), 5), generator=g), y


def _loader():  # noqa: ANN202
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=PER_RANK)


def _full_loss(state: dict | None) -> float:
    torch.manual_seed(0)  # rank 0's initial weights (the ones every rank starts from)
    net = TinyNet()
    if state is not None:
        net.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    with torch.no_grad():
        return float(net(*_data()))


def _fit(rank: int, strategy) -> tuple[dict, list[float]]:  # noqa: ANN001
    import lightning.pytorch as pl

    torch.manual_seed(rank)  # different on purpose: rank 0's weights are broadcast at setup
    lit = _lit_module()
    trainer = pl.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy=strategy,
                         max_steps=STEPS, enable_model_summary=False, enable_progress_bar=False,
                         logger=False, enable_checkpointing=False, num_sanity_val_steps=0)
    trainer.fit(lit, _loader())
    return {k: v.detach().clone() for k, v in lit.state_dict().items()}, lit.losses


def _worker(rank: int, world: int) -> dict:
    from lightning.pytorch.strategies import DDPStrategy

    from autosync_transfer.search.lightning import AutoSyncStrategy

    # the process group exists already: Lightning joins it (processes created externally)
    os.environ.update({"LOCAL_RANK": str(rank), "NODE_RANK": "0", "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    out: dict = {}
    given = AutoSyncStrategy(_strategy(), _cluster())
    out["given"] = _fit(rank, given)
    out["given_ids"] = (given.sync_strategy.id, [n.var_name for n in given.sync_strategy.nodes])
    out["ddp"] = _fit(rank, DDPStrategy(process_group_backend="gloo"))
    chosen = AutoSyncStrategy(None, _cluster(), candidates=20, seed=3)
    out["recommended"] = _fit(rank, chosen)
    out["recommended_json"] = chosen.sync_strategy.to_json()
    bad = Strategy(id="bad", nodes=tuple(n.model_copy(update={"var_name": n.var_name + "_x"})
                                         for n in _strategy().nodes))
    try:
        _fit(rank, AutoSyncStrategy(bad, _cluster()))
        out["bad"] = None
    except ConfigError as e:
        out["bad"] = str(e)
    return out


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return spawn_local(_worker, 2, timeout_s=240)


def _assert_same(a: dict, b: dict, what: str, atol: float = 0.0) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol, rtol=0), (what, k, (a[k] - b[k]).abs().max())


@pytest.mark.parametrize("run", ["given", "ddp", "recommended"])
def test_parameters_identical_across_ranks(runs: list[dict], run: str) -> None:
    _assert_same(runs[0][run][0], runs[1][run][0], run)


def test_exact_strategy_matches_lightning_ddp(runs: list[dict]) -> None:
    ours, ours_losses = runs[0]["given"]
    ddp, ddp_losses = runs[0]["ddp"]
    assert len(ours_losses) == len(ddp_losses) == STEPS
    _assert_same(ours, ddp, "given vs ddp", atol=1e-5)
    # every rank's local losses match DDP's step by step, and training makes progress
    for rank in range(2):
        assert runs[rank]["given"][1] == pytest.approx(runs[rank]["ddp"][1], abs=1e-5)
    assert _full_loss(ours) < 0.9 * _full_loss(None)


def test_given_strategy_is_renamed_to_the_lightning_module(runs: list[dict]) -> None:
    sid, names = runs[0]["given_ids"]
    assert sid == "mixed"
    assert names == [f"model.{n.var_name}" for n in _strategy().nodes]


def test_recommended_strategy_is_the_same_on_every_rank(runs: list[dict]) -> None:
    assert runs[0]["recommended_json"] == runs[1]["recommended_json"]
    names = {n.var_name for n in Strategy.from_json(runs[0]["recommended_json"]).nodes}
    assert names == {f"model.{n.var_name}" for n in _strategy().nodes}
    assert _full_loss(runs[0]["recommended"][0]) < _full_loss(None)


def test_bad_strategy_is_a_clear_error_on_every_rank(runs: list[dict]) -> None:
    for r in runs:
        assert r["bad"] is not None
        assert "'emb.weight_x'" in r["bad"] and "not a trainable parameter of TinyLit" in r["bad"]


# -- without processes ------------------------------------------------------------------------------
def test_names_relative_to_a_submodule_are_matched_and_others_refused() -> None:
    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.runtime.lightning import match_names

    lit = _lit_module()
    assert match_names(_strategy("model."), lit) == _strategy("model.")
    renamed = AutoSyncStrategy(_strategy(), _cluster()).resolve_strategy(lit)
    assert [n.var_name for n in renamed.nodes] == [f"model.{n.var_name}" for n in _strategy().nodes]
    partial = Strategy(id="partial", nodes=_strategy("model.").nodes[:-1])
    with pytest.raises(ConfigError, match=r"'model\.out\.bias' has no synchronizer"):
        match_names(partial, lit)
    sparse_ar = Strategy(id="ar", nodes=tuple(
        VarConfig(var_name=n.var_name, synchronizer=AllReduce()) for n in _strategy().nodes))
    with pytest.raises(ConfigError, match="sparse variable 'model.emb.weight' must use a parameter"):
        AutoSyncStrategy(sparse_ar, _cluster()).resolve_strategy(lit)


def test_constructor_checks_and_stores() -> None:
    from autosync_transfer.search.lightning import AutoSyncStrategy

    with pytest.raises(ConfigError, match="DDP option 'bucket_cap_mb'"):
        AutoSyncStrategy(_strategy(), _cluster(), bucket_cap_mb=25)
    with pytest.raises(ConfigError, match="either a strategy or a simulator"):
        AutoSyncStrategy(_strategy(), _cluster(), simulator="models:/x@champion")
    s = AutoSyncStrategy.from_registry("models:/autosync-bert-B@champion", "B", candidates=5)
    # the backend is Lightning's default for the device (gloo on CPU, NCCL on CUDA)
    assert s.cluster.name == "B" and s.process_group_backend is None
    with pytest.raises(NotFittedError):
        s.sync_strategy  # noqa: B018
    with pytest.raises(ConfigError, match="unknown cluster 'Z'"):
        AutoSyncStrategy(None, "Z")


def test_world_size_must_match_the_cluster() -> None:
    from autosync_transfer.search.lightning import AutoSyncStrategy

    s = AutoSyncStrategy(_strategy(), _cluster(), parallel_devices=[torch.device("cpu")] * 3)
    with pytest.raises(ConfigError, match=r"runs 3 processes .* cluster 't' has 2 workers"):
        s.setup_distributed()


def test_from_registry_loads_the_simulator_and_recommends(registry, tmp_path) -> None:
    from autosync_transfer.rankers.simulator import Simulator
    from autosync_transfer.registry import models
    from autosync_transfer.search.lightning import AutoSyncStrategy

    # a real (temporary) MLflow registry holding a simulator of bert-B as its champion
    info = models.log_simulator(Simulator("analytical", {}, 1), domain="bert-B", metrics={})
    models.promote(info.name, info.version)
    s = AutoSyncStrategy.from_registry("models:/autosync-bert-B@champion", _cluster(), candidates=10)
    chosen = s.resolve_strategy(_lit_module())
    assert {n.var_name for n in chosen.nodes} == {f"model.{n.var_name}" for n in _strategy().nodes}
    with pytest.raises(Exception, match="autosync-ncf-B"):
        AutoSyncStrategy.from_registry("models:/autosync-ncf-B@champion", _cluster(),
                                       candidates=10).resolve_strategy(_lit_module())

    path = tmp_path / "s.json"
    path.write_text(chosen.to_json())
    assert AutoSyncStrategy.from_file(path, _cluster()).resolve_strategy(_lit_module()) == chosen


def test_runtime_package_does_not_import_lightning() -> None:
    code = ("import sys, autosync_transfer.runtime as r; r.DistributedModel; "
            "assert 'lightning' not in sys.modules, 'lightning imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_strategy_takes_a_picker_such_as_the_ddp_builder() -> None:
    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.runtime.ddp import ddp_equivalent

    lit = _lit_module()
    ddp = AutoSyncStrategy(ddp_equivalent, _cluster()).resolve_strategy(lit)
    assert ddp.kind == "ddp"  # lossless: all-reduce buckets, PS for the sparse embedding
    calls = []

    def picker(graph, cluster):  # noqa: ANN001, ANN202
        calls.append((graph.name, cluster.name))
        return _strategy("model.")

    picked = AutoSyncStrategy(picker, _cluster()).resolve_strategy(lit)
    assert picked == _strategy("model.") and calls == [("tinylit", "t")]
    with pytest.raises(ConfigError, match="picker must return a Strategy, got int"):
        AutoSyncStrategy(lambda g, c: 3, _cluster()).resolve_strategy(lit)
    with pytest.raises(ConfigError, match="strategy must be an autosync_transfer Strategy, a picker"):
        AutoSyncStrategy("s.json", _cluster())


def test_cluster_is_a_resource_spec_file_a_catalog_name_or_the_process_group(tmp_path) -> None:
    from autosync_transfer import AutoSyncStrategy

    spec = tmp_path / "two-nodes.yaml"
    spec.write_text(_cluster().to_yaml())
    from_file = AutoSyncStrategy(None, str(spec)).cluster
    assert from_file.world_size == 2 and from_file.name == "two-nodes"
    assert [n.bandwidth_gbps for n in from_file.nodes] == [1.0, 1.0]
    assert AutoSyncStrategy(None, "B").cluster.name == "B"
    assert AutoSyncStrategy().cluster is None  # the process group's layout, at setup
    with pytest.raises(ConfigError, match="unknown cluster 'no/such.yaml'"):
        AutoSyncStrategy(None, "no/such.yaml")


def test_trainer_knows_autosync_by_name_as_the_ddp_equivalent_strategy() -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    from autosync_transfer import AutoSyncStrategy
    from autosync_transfer.runtime.ddp import ddp_equivalent

    assert "autosync" in StrategyRegistry  # registered when the class is imported
    by_name = StrategyRegistry.get("autosync")
    assert type(by_name) is AutoSyncStrategy and by_name.cluster is None
    by_name.cluster = _cluster()  # the process group's layout, known at setup
    lit = _lit_module()
    # lossless, whatever a simulator would pick
    assert by_name.resolve_strategy(lit) == AutoSyncStrategy(ddp_equivalent, _cluster()
                                                             ).resolve_strategy(lit)
