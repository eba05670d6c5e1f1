"""Parity with Lightning's DDP: ``AutoSyncStrategy`` with a lossless strategy trains like
``DDPStrategy`` — BatchNorm, an unused branch (``find_unused_parameters=True``), gradient
accumulation (``accumulate_grad_batches=2``) and a checkpoint resume between two fits — and
``Trainer(strategy="autosync")`` works by name.

Lightning joins a process group the test starts (two gloo processes), as in
``test_lightning_strategy.py``.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from test_ddp_parity import ParityNet, _cluster

from autosync_transfer.runtime.launch import spawn_local

PER_RANK, ACCUM, STEPS_PER_EPOCH = 4, 2, 2


def _lit(unused_branch: bool = True):  # noqa: ANN202 - a LightningModule (Lightning imported lazily)
    import lightning.pytorch as pl

    class LitParity(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = ParityNet()
            if not unused_branch:
                self.model.aux = torch.nn.Identity()

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.AdamW(self.parameters(), lr=0.05, weight_decay=0.1)

    return LitParity()


def _loader():  # noqa: ANN202
    g = torch.Generator().manual_seed(0)
    n = 2 * PER_RANK * ACCUM * STEPS_PER_EPOCH
    data = torch.utils.data.TensorDataset(torch.randn(n, 6, generator=g) * 3 + 1,
                                          torch.randint(0, 3, (n,), generator=g))
    return torch.utils.data.DataLoader(data, batch_size=PER_RANK, shuffle=False)


def _trainer(strategy, epochs: int, syncs: list):  # noqa: ANN001, ANN202
    import lightning.pytorch as pl

    class CountSyncs(pl.Callback):
        def on_train_end(self, trainer, pl_module) -> None:  # noqa: ANN001
            ex = getattr(trainer.strategy.model, "executor", None)
            syncs.append(None if ex is None else ex.syncs)

    return pl.Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy=strategy,
                      max_epochs=epochs, accumulate_grad_batches=ACCUM, logger=False,
                      enable_model_summary=False, enable_progress_bar=False,
                      enable_checkpointing=False, num_sanity_val_steps=0,
                      callbacks=[CountSyncs()])


def _fit_with_resume(rank: int, make_strategy, ckpt: str) -> dict:  # noqa: ANN001
    """One epoch, a checkpoint, a second Trainer resuming it for a second epoch."""
    torch.manual_seed(rank)  # different on purpose: rank 0's parameters and buffers are broadcast
    syncs: list = []
    lit = _lit()
    first = _trainer(make_strategy(), 1, syncs)
    first.fit(lit, _loader())
    first.save_checkpoint(ckpt)
    torch.manual_seed(rank + 7)
    lit = _lit()
    _trainer(make_strategy(), 2, syncs).fit(lit, _loader(), ckpt_path=ckpt)
    saved = torch.load(ckpt, weights_only=False)
    return {"state": {k: v.detach().clone() for k, v in lit.state_dict().items()},
            "aux_grad": lit.model.aux.weight.grad, "syncs": syncs,
            "sync_state": saved.get("autosync")}


def _worker(rank: int, world: int, tmp: str) -> dict:
    from lightning.pytorch.strategies import DDPStrategy

    from autosync_transfer import AutoSyncStrategy  # registers "autosync"
    from autosync_transfer.runtime.ddp import ddp_equivalent

    os.environ.update({"LOCAL_RANK": str(rank), "NODE_RANK": "0", "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    out: dict = {}
    out["ddp"] = _fit_with_resume(
        rank, lambda: DDPStrategy(find_unused_parameters=True, process_group_backend="gloo"),
        f"{tmp}/ddp.ckpt")
    out["ps"] = _fit_with_resume(
        rank, lambda: AutoSyncStrategy(_ps_strategy(), _cluster(), find_unused_parameters=True),
        f"{tmp}/ps.ckpt")
    out["ddp_equivalent"] = _fit_with_resume(
        rank, lambda: AutoSyncStrategy(ddp_equivalent, find_unused_parameters=True),
        f"{tmp}/ddp_equivalent.ckpt")

    # by name, with defaults: every parameter used (find_unused_parameters=False, as "ddp")
    for name in ("ddp", "autosync"):
        torch.manual_seed(rank)
        lit = _lit(unused_branch=False)
        trainer = _trainer(name, 1, [])
        trainer.fit(lit, _loader())
        out[f"by_name_{name}"] = {k: v.detach().clone() for k, v in lit.state_dict().items()}
        out[f"by_name_{name}_strategy"] = type(trainer.strategy).__name__
    return out


def _ps_strategy():  # noqa: ANN202
    from autosync_transfer.strategies.types import PS, Strategy, VarConfig

    names = [n for n, _ in _lit().named_parameters()]
    return Strategy(id="ps-parity", nodes=tuple(
        VarConfig(var_name=n, synchronizer=PS(destination="n1" if "fc2" in n else "n0"))
        for n in names))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    return spawn_local(_worker, 2, str(tmp_path_factory.mktemp("ckpt")), timeout_s=400)


def _close(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for k in a:
        assert torch.allclose(a[k].double(), b[k].double(), atol=1e-6, rtol=1e-5), \
            (what, k, (a[k].double() - b[k].double()).abs().max())


@pytest.mark.parametrize("run", ["ps", "ddp_equivalent"])
def test_lightning_strategy_matches_lightning_ddp(runs: list[dict], run: str) -> None:
    for rank in range(2):
        _close(runs[rank][run]["state"], runs[rank]["ddp"]["state"], f"{run} rank {rank}")
        assert runs[rank][run]["aux_grad"] is None
        # accumulate_grad_batches=2: one synchronization per optimizer step, in both fits
        assert runs[rank][run]["syncs"] == [STEPS_PER_EPOCH, STEPS_PER_EPOCH]


def test_checkpoint_carries_the_strategy(runs: list[dict]) -> None:
    from autosync_transfer.strategies.types import Strategy

    state = runs[0]["ps"]["sync_state"]
    assert state is not None and state["world_size"] == 2
    assert Strategy.from_json(state["strategy"]).id == "ps-parity"
    assert runs[0]["ddp"]["sync_state"] is None


def test_trainer_strategy_autosync_by_name(runs: list[dict]) -> None:
    assert runs[0]["by_name_autosync_strategy"] == "AutoSyncStrategy"
    for rank in range(2):
        _close(runs[rank]["by_name_autosync"], runs[rank]["by_name_ddp"], "by name")
