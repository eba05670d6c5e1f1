"""The demo task as a LightningModule, trained and timed under any Lightning strategy (imports
Lightning)."""

from __future__ import annotations

import logging
import os
import statistics
import time
import warnings
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from autosync_transfer.demos.task import HIDDEN, TextClassifier, classifier_batch
from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    from autosync_transfer.domains.cluster import Cluster

__all__ = ["LitClassifier", "StepTimer", "fit_classifier", "lightning_layout", "quiet_lightning"]


class LitClassifier(pl.LightningModule):
    """:class:`~autosync_transfer.demos.task.TextClassifier` with cross-entropy and plain SGD;
    ``losses`` holds this worker's loss of every step."""

    def __init__(self, lr: float, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.model = TextClassifier(hidden)
        self.lr = lr
        self.losses: list[float] = []

    def training_step(self, b: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = b
        loss = F.cross_entropy(self.model(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class StepTimer(pl.Callback):
    """Training time (first step to last, without process start-up and setup) and the time of
    every step."""

    def __init__(self) -> None:
        self.step_s: list[float] = []
        self.train_s = 0.0
        self._t = self._t0 = 0.0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._t0 = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.train_s = time.perf_counter() - self._t0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, b: Any, batch_idx: int) -> None:
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, b: Any,
                           batch_idx: int) -> None:
        self.step_s.append(time.perf_counter() - self._t)


def fit_classifier(strategy: Any, *, devices: int, num_nodes: int, steps: int,
                   batch_size: int = 32, lr: float = 1.0, hidden: int = HIDDEN,
                   seed: int = 0) -> dict[str, Any]:
    """Train :class:`LitClassifier` for one epoch of ``steps`` steps of ``batch_size`` samples per
    worker under ``strategy`` (any Lightning strategy object or name) on the CPU, with the global
    seed set to ``seed``, the same data on every call. Collective: every worker calls it.

    Returns ``final_loss`` (the last 20 steps, averaged over workers), ``train_s`` (first step to
    last), ``fit_s`` (the whole ``Trainer.fit``: set-up, proposal and tuning included),
    ``steps``, ``median_step_ms`` (steps after the tenth), ``late_step_ms`` (the median step of
    the second half: after an autotuner's first tuning round, what the job runs at),
    ``phases_s`` (where ``fit_s`` went, in seconds: ``setup`` before the first step and after
    the last, ``early`` the first tenth of the steps, where autotuning happens, ``later`` the
    other steps, ``between`` the time between steps) and ``global_zero``."""
    torch.manual_seed(seed)
    lit = LitClassifier(lr, hidden)
    world = devices * num_nodes
    gen = torch.Generator().manual_seed(seed)
    x, y = classifier_batch(gen, steps * batch_size * world)  # one epoch = `steps` steps
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=batch_size)
    timer = StepTimer()
    trainer = pl.Trainer(accelerator="cpu", devices=devices, num_nodes=num_nodes, strategy=strategy,
                         max_steps=steps, max_epochs=1, callbacks=[timer], logger=False,
                         enable_model_summary=False, enable_progress_bar=False,
                         enable_checkpointing=False, num_sanity_val_steps=0)
    t0 = time.perf_counter()
    trainer.fit(lit, loader)
    fit_s = time.perf_counter() - t0
    tail = torch.tensor(sum(lit.losses[-20:]) / len(lit.losses[-20:]))
    final = float(trainer.strategy.reduce(tail, reduce_op="mean"))
    early = len(timer.step_s) // 10
    phases = {"setup": fit_s - timer.train_s, "early": sum(timer.step_s[:early]),
              "later": sum(timer.step_s[early:]),
              "between": timer.train_s - sum(timer.step_s)}
    return {"final_loss": final, "train_s": timer.train_s, "fit_s": fit_s,
            "steps": len(timer.step_s), "phases_s": phases,
            "median_step_ms": statistics.median(timer.step_s[10:] or timer.step_s) * 1000,
            "late_step_ms": statistics.median(timer.step_s[len(timer.step_s) // 2:]
                                              or timer.step_s) * 1000,
            "global_zero": trainer.is_global_zero}


def lightning_layout(cluster: Cluster, launcher: str) -> tuple[int, int]:
    """``(devices, num_nodes)`` of the Trainer of this worker.

    ``local``: Lightning starts every worker on this host (``GLOO_SOCKET_IFNAME`` defaults to
    ``lo``). ``emulated``: the workers were started one per rank inside their nodes' namespaces
    (:func:`~autosync_transfer.demos.task.run_emulated`); Lightning's layout is ``devices`` per
    node on every node, so a cluster whose nodes run different numbers of workers is described to
    it as one "node" per worker (global rank = node rank, set in the environment here), which
    gives every worker its own rank; the network path of every message is still its real
    node's."""
    if launcher not in ("local", "emulated"):
        raise ConfigError(f"launcher must be 'local' or 'emulated', got {launcher!r}")
    if launcher == "local":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        return cluster.world_size, 1
    per_node = {n.workers for n in cluster.nodes}
    if len(per_node) == 1:
        return per_node.pop(), cluster.num_nodes
    if "RANK" in os.environ:
        os.environ.update(NODE_RANK=os.environ["RANK"], LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    return 1, cluster.world_size


def quiet_lightning() -> None:
    """Lightning's info logs and its warnings about data-loader workers and pytrees off."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
