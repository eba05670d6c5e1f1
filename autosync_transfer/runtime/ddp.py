"""``DistributedModel``: a DDP-like wrapper that synchronizes gradients with any strategy.

Where torch's ``DistributedDataParallel`` defines a behaviour, ``DistributedModel`` does the same:

- construction stores; the first forward (or :meth:`DistributedModel.setup`) plans the strategy,
  broadcasts rank 0's parameters *and buffers*, and installs the gradient hooks;
- ``broadcast_buffers=True``: rank 0's buffers (BatchNorm running statistics) are broadcast
  before every forward that follows a synchronizing forward, exactly when DDP does it;
- a trainable parameter without a gradient is an error (``find_unused_parameters=False``), or,
  with ``find_unused_parameters=True``, is averaged where some rank has a gradient and left
  untouched (``grad`` stays ``None``) where none has;
- :meth:`DistributedModel.no_sync`: gradients accumulate locally; the first backward after it
  synchronizes the accumulated sum (what Lightning's ``accumulate_grad_batches`` uses);
- several backward passes in one step: each synchronizing backward averages the gradient
  accumulated so far (as DDP: exact for lossless strategies, traffic per backward). To
  synchronize once per optimizer step instead, wrap all but the last backward in ``no_sync()``
  (DDP's idiom), or pass ``sync_on="step"``: backward passes only accumulate and
  ``optimizer.step()`` of an optimizer over these parameters synchronizes first (a step
  pre-hook; call :meth:`DistributedModel.sync_gradients` yourself for closure-based
  optimizers such as L-BFGS, whose closure runs the backward inside ``step``);
- :meth:`~torch.nn.Module.state_dict` keys are DDP's (``module.`` + the module's keys) and
  :meth:`~torch.nn.Module.load_state_dict` takes them;
- mixed precision: under ``torch.autocast`` the parameters (and gradients) keep their dtype;
  the synchronization works on the gradients' dtype;
- lifetime: nothing needs closing. Dropping the model, an exception in a step, the interpreter's
  exit and ``destroy_process_group()`` end the communication threads deterministically (see
  :mod:`autosync_transfer.runtime.executor`).

Backends: ``strategy=None`` runs torch's own ``DistributedDataParallel``; a strategy that DDP's
C++ reducer can run (every variable all-reduced whole, uncompressed or fp16 throughout) runs on
it with the strategy's bucket sizes (:mod:`autosync_transfer.runtime.torch_ddp`); every other
strategy runs on the :class:`~autosync_transfer.runtime.executor.StrategyExecutor`.
``use_ddp_reducer=False`` runs every strategy on the executor.

Checkpoints: :meth:`DistributedModel.sync_state_dict` holds the strategy (JSON and fingerprint)
and every rank's compressor state (error-feedback residuals, PowerSGD); restoring it with
:meth:`DistributedModel.load_sync_state_dict` on the same world size resumes both, on another
world size the strategy is planned again and the compressor state starts from zero (a warning).
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.accuracy import ConvergenceCheck
from autosync_transfer.runtime.executor import (
    UNUSED_ERROR,
    UNUSED_FIND,
    CommGroups,
    StrategyExecutor,
)
from autosync_transfer.runtime.plan import SyncPlan, make_plan
from autosync_transfer.runtime.torch_ddp import TORCH_DDP, TorchDdpBackend, ddp_bucket_caps
from autosync_transfer.strategies.types import Strategy

__all__ = ["DistributedModel", "cluster_from_process_group", "as_cluster", "SYNC_STATE_FORMAT"]

log = logging.getLogger(__name__)

#: version of :meth:`DistributedModel.sync_state_dict`
SYNC_STATE_FORMAT = 1

#: when gradients are synchronized: at the end of every backward (DDP) or at the optimizer step
_SYNC_ON = ("backward", "step")


def _local_address() -> str:
    """The address this process reaches the rendezvous host from (no packet is sent)."""
    import os
    import socket

    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((master, int(os.environ.get("MASTER_PORT") or 1)))
                return str(s.getsockname()[0])
        except (OSError, ValueError):
            pass
    return "127.0.0.1"


def as_cluster(cluster: Cluster | str | None) -> Cluster | None:
    """``cluster`` as a :class:`Cluster`: a string naming an existing file is an AutoDist
    resource spec (YAML), any other string a catalog name; ``None`` stays ``None`` (the process
    group's layout, derived at setup)."""
    import os

    if cluster is None or isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, (str, os.PathLike)):
        if os.path.isfile(cluster):
            return Cluster.from_file(cluster)
        from autosync_transfer.domains.catalog import get_cluster

        return get_cluster(str(cluster))
    raise ConfigError(f"cluster must be a Cluster, a resource-spec file, a catalog name or None, "
                      f"got {type(cluster).__name__}")


def ddp_equivalent(graph: ModelGraph, cluster: Cluster) -> Strategy:
    """The strategy of ``strategy=None``: the DDP-equivalent builder (all-reduce of every
    variable in 25 MB buckets, reverse order, no compression; sparse embeddings on parameter
    servers)."""
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.strategies.builders import build

    return build("ddp", Domain(name=f"{graph.name}-{cluster.name}", model=graph, cluster=cluster))


def cluster_from_process_group(name: str = "process-group") -> Cluster:
    """The cluster the current process group runs on: one node per distinct (host name,
    address) of the ranks, named ``n0``, ``n1``, ... in rank order like the catalog's clusters,
    with as many workers as it has ranks. Collective: every rank must call it.

    Only the layout is known (which ranks share a machine), so the nodes' ``bandwidth_gbps`` is
    a placeholder 1.0: enough to plan and run a strategy, not to rank strategies with.
    Raises :class:`ConfigError` when the ranks are not numbered node by node.
    """
    import socket

    from autosync_transfer.domains.cluster import Node

    if not dist.is_initialized():
        raise ConfigError("cluster_from_process_group needs an initialized torch.distributed "
                          "process group")
    me = (socket.gethostname(), _local_address())
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, me)
    order: list[tuple[str, str]] = []
    workers: dict[tuple[str, str], int] = {}
    for rank, key in enumerate(map(tuple, hosts)):
        if key not in workers:
            order.append(key)
            workers[key] = 0
        elif order[-1] != key:
            raise ConfigError(f"rank {rank} runs on {key[0]} ({key[1]}) after ranks of another "
                              f"host: ranks must be numbered node by node; pass the cluster "
                              f"explicitly")
        workers[key] += 1
    nodes = tuple(Node(name=f"n{i}", address=key[1] if key[1] != "127.0.0.1" or len(order) == 1
                       else key[0], workers=workers[key], bandwidth_gbps=1.0, chief=i == 0)
                  for i, key in enumerate(order))
    return Cluster(name=name, nodes=nodes,
                   description="derived from the process group (bandwidths unknown)")


class DistributedModel(torch.nn.Module):
    """Wrap ``module`` for data-parallel training with ``strategy`` on ``cluster``.

    Use it like ``DistributedDataParallel`` inside a process group (one process per worker of
    ``cluster``, ranks numbered node by node): ``loss = model(x).sum(); loss.backward();
    optimizer.step()``. Communication starts from the gradient hooks during backward and is
    complete when ``backward()`` returns; every rank then holds the averaged gradients.
    On first use, rank 0's parameters and buffers are broadcast so that every replica starts
    equal. See the module docstring for what follows torch DDP.

    Args:
        module: the network.
        strategy: the synchronization strategy; ``None``: torch's ``DistributedDataParallel``
            itself (:attr:`strategy` then reads as the DDP-equivalent builder's,
            :func:`ddp_equivalent`, and :attr:`backend` as ``"torch_ddp"``).
        cluster: a :class:`Cluster`, a resource-spec file, a catalog name (``"B"``), or
            ``None``: the layout of the process group (:func:`cluster_from_process_group`; its
            nodes are ``n0``, ``n1``, ... in rank order, the names strategies found on the
            catalog's clusters use).
        graph: defaults to ``ModelGraph.from_torch(module)`` (embeddings have sparse gradients).
        groups: process groups to reuse (:meth:`CommGroups.create` by default).
        broadcast_parameters: broadcast rank 0's parameters and buffers at setup.
        broadcast_buffers: broadcast rank 0's buffers before forward passes, as DDP.
        find_unused_parameters: as DDP; ``False`` makes a parameter without a gradient an error.
        sync_on: ``"backward"`` (every synchronizing backward, as DDP) or ``"step"`` (once,
            before ``optimizer.step()``).
        seed: seeds the compressors' shared randomness (PowerSGD's initial Q).
        autotune: an :class:`~autosync_transfer.runtime.autotune.AutotuneConfig`: the first
            steps of the job try candidate strategies and lock in the fastest.
        use_ddp_reducer: run strategies that DDP's reducer can run on it (``False``: on the
            executor; torch DDP itself still runs as torch DDP).
        convergence_check: the :class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck`
            of ``strategy``. A lossy strategy (fp16, fp16_ef or PowerSGD compression) without
            a passed check of it is used, with a warning (logged by rank 0 at setup).
    """

    def __init__(self, module: torch.nn.Module, strategy: Strategy | None = None,
                 cluster: Cluster | str | None = None, *,
                 graph: ModelGraph | None = None, groups: CommGroups | None = None,
                 broadcast_parameters: bool = True, broadcast_buffers: bool = True,
                 find_unused_parameters: bool = False, sync_on: str = "backward", seed: int = 0,
                 autotune: Any = None, convergence_check: ConvergenceCheck | None = None,
                 use_ddp_reducer: bool = True):
        super().__init__()
        if sync_on not in _SYNC_ON:
            raise ConfigError(f"sync_on must be one of {', '.join(_SYNC_ON)}, got {sync_on!r}")
        if strategy is not None and not isinstance(strategy, Strategy):
            raise ConfigError(f"strategy must be an autosync_transfer Strategy or None, got "
                              f"{type(strategy).__name__}")
        if convergence_check is not None and not isinstance(convergence_check, ConvergenceCheck):
            raise ConfigError(f"convergence_check must be a ConvergenceCheck or None, got "
                              f"{type(convergence_check).__name__}")
        self.module = module
        self.convergence_check = convergence_check
        #: the strategy in use (the configured one until setup; ``None``: the DDP builder's)
        self.strategy = strategy
        self._configured = strategy
        self.cluster = as_cluster(cluster)
        self.graph = graph
        self.groups = groups
        self.broadcast_parameters = broadcast_parameters
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.sync_on = sync_on
        self.seed = seed
        self.autotune = autotune
        self.use_ddp_reducer = use_ddp_reducer
        #: what runs the synchronization: ``"torch_ddp"`` (DDP itself), ``"ddp_reducer"`` (the
        #: strategy on DDP's reducer) or ``"executor"``; ``None`` before setup
        self.backend: str | None = None
        self._tuner: Any = None
        self._executor: StrategyExecutor | TorchDdpBackend | None = None
        #: DDP wrappers set aside while autotuning switches back and forth (their reducers'
        #: hooks do nothing without their own forward): a switch back costs no new reducer
        self._parked: dict[str, TorchDdpBackend] = {}
        self._restore: dict[str, Any] | None = None
        self._autotune_state: dict[str, Any] | None = None
        self._require_backward_grad_sync = True
        self._require_forward_param_sync = True
        self._step_hook: Any = None
        self._owned_optimizers: dict[int, bool] = {}
        #: (plan, compressor state) kept by close() for a checkpoint written afterwards
        self._closed: tuple[SyncPlan | None, dict[str, Any]] | None = None

    # -- setup ----------------------------------------------------------------------------------
    def setup(self) -> DistributedModel:
        """Plan the strategy, broadcast the parameters and buffers and install the gradient
        hooks (done automatically on the first forward). Collective."""
        if self._executor is not None:
            return self
        if not dist.is_initialized():
            raise ConfigError("DistributedModel needs an initialized torch.distributed process group")
        if self.cluster is None:
            self.cluster = cluster_from_process_group()
        if self.cluster.world_size != dist.get_world_size():
            raise ConfigError(f"cluster {self.cluster.name!r} has {self.cluster.world_size} "
                              f"workers, the process group {dist.get_world_size()} ranks")
        if self.graph is None:
            self.graph = ModelGraph.from_torch(self.module, name="model")
        if self.groups is None:
            self.groups = CommGroups.create()
        if self.broadcast_parameters:
            with torch.no_grad():
                for t in [*self.module.parameters(), *self.module.buffers()]:
                    dist.broadcast(t.data, src=0)
        initial = self._initial_strategy()
        self._warn_if_unchecked_lossy(initial)
        self._install(initial)
        if self.sync_on == "step":
            self._install_step_hook()
        if self.autotune is not None:
            from autosync_transfer.runtime.autotune import Autotuner

            self._tuner = Autotuner(self, self.autotune)
        return self

    def _warn_if_unchecked_lossy(self, strategy: Strategy | str) -> None:
        """Rank 0 logs a warning for a lossy strategy without a passed convergence check."""
        from autosync_transfer.runtime.fidelity import unchecked_lossy

        if isinstance(strategy, str):
            return
        line = unchecked_lossy(strategy, self.convergence_check)
        if line is not None and dist.get_rank() == 0:
            log.warning("%s (pass a passed convergence_check to silence this)", line)

    def _initial_strategy(self) -> Strategy | str:
        state = self._restore
        if state is not None:
            if state["world_size"] == dist.get_world_size():
                if state.get("backend") == TORCH_DDP:
                    return TORCH_DDP
                strategy = Strategy.from_json(state["strategy"])
                if strategy.fingerprint != state["fingerprint"]:
                    raise ConfigError(f"sync state: strategy {strategy.id!r} does not match its "
                                      f"fingerprint {state['fingerprint']!r}")
                return strategy
            warnings.warn(
                f"the checkpoint was written by {state['world_size']} workers, this job has "
                f"{dist.get_world_size()}: the strategy is planned again and the compressor "
                f"state (error feedback, PowerSGD) starts from zero", stacklevel=3)
            self._restore = None
        return self._configured if self._configured is not None else TORCH_DDP

    def default_strategy(self) -> Strategy:
        """The configured strategy, or the DDP-equivalent builder's for ``strategy=None``."""
        if self._configured is not None:
            return self._configured
        assert self.graph is not None and self.cluster is not None
        return ddp_equivalent(self.graph, self.cluster)

    def plan_for(self, strategy: Strategy) -> SyncPlan:
        """``strategy``'s plan on this model and cluster (validated)."""
        assert self.graph is not None and self.cluster is not None
        return make_plan(strategy, self.graph, self.cluster)

    def _install(self, strategy: Strategy | str) -> None:
        """Run ``strategy`` (or :data:`TORCH_DDP`) from now on (collective: every rank installs
        the same one at the same step boundary)."""
        assert self.groups is not None
        if isinstance(strategy, str):
            if strategy != TORCH_DDP:
                raise ConfigError(f"strategy must be a Strategy or {TORCH_DDP!r}, got {strategy!r}")
            if self.sync_on == "step":
                raise ConfigError('torch DDP synchronizes every backward: it cannot run with '
                                  'sync_on="step"; pass a strategy')
            old, self._executor = self._executor, None
            self._retire(old)
            ex: StrategyExecutor | TorchDdpBackend = self._parked.pop(TORCH_DDP, None) or \
                TorchDdpBackend(self.module, self.groups.ar,
                                find_unused_parameters=self.find_unused_parameters,
                                broadcast_buffers=self.broadcast_buffers, key=TORCH_DDP).setup()
            ex.sync_enabled = True
            self._executor = ex
            self.backend = TORCH_DDP
            assert self.graph is not None and self.cluster is not None
            self.strategy = ddp_equivalent(self.graph, self.cluster)
            self._restore = None
            return
        plan = self.plan_for(strategy)
        fit = ddp_bucket_caps(plan) if self.use_ddp_reducer and self.sync_on == "backward" \
            else None
        old, self._executor = self._executor, None
        self._retire(old)
        if fit is not None:
            caps, compressor = fit
            key = f"plan:{strategy.fingerprint}"
            ex = self._parked.pop(key, None) or TorchDdpBackend(
                self.module, self.groups.ar, plan=plan, bucket_caps_mb=caps,
                compressor=compressor, find_unused_parameters=self.find_unused_parameters,
                broadcast_buffers=self.broadcast_buffers, key=key).setup()
            ex.sync_enabled = True
            self.backend = "ddp_reducer"
        else:
            ex = StrategyExecutor(self.module, plan, self.groups, seed=self.seed, auto_finish=True,
                                  unused=UNUSED_FIND if self.find_unused_parameters else UNUSED_ERROR)
            ex.setup()
            ex.deferred = self.sync_on == "step"
            self.backend = "executor"
        self._executor = ex
        self.strategy = strategy
        state, self._restore = self._restore, None
        if state is not None and state["fingerprint"] == strategy.fingerprint:
            states = state.get("compressor") or []
            if len(states) == dist.get_world_size():
                ex.load_compressor_state(states[dist.get_rank()])

    def _retire(self, old: StrategyExecutor | TorchDdpBackend | None) -> None:
        """The backend switched away from: a DDP wrapper is set aside while autotuning (at most
        a few), anything else closed."""
        if old is None:
            return
        if isinstance(old, TorchDdpBackend) and self.autotune is not None and old.key \
                and len(self._parked) < 4:
            old.begin_forward()  # its last synchronization is done: counted before it rests
            self._parked[old.key] = old
            return
        old.close()

    def release_parked(self) -> None:
        """Close the DDP wrappers set aside while autotuning (the tuner calls it at lock-in)."""
        parked, self._parked = self._parked, {}
        for b in parked.values():
            b.close()

    def switch(self, strategy: Strategy | str) -> None:
        """Synchronize with ``strategy`` from the next step on (collective; call it on every
        rank between steps: autotuning does). The compressor state starts from zero."""
        self.setup()
        if self._executor is not None and self._executor.in_flight:
            raise ConfigError("switch() must be called between steps, not during backward")
        if self._executor is not None:
            self._executor.finish()  # gradients accumulated under no_sync/sync_on="step"
        self._install(strategy)

    def _install_step_hook(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        ref = weakref.ref(self)

        def pre_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            model = ref()
            if model is not None and model._executor is not None and model._owns(optimizer):
                model.sync_gradients()

        self._step_hook = register_optimizer_step_pre_hook(pre_step)
        weakref.finalize(self, self._step_hook.remove)

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        key = id(optimizer)
        if key not in self._owned_optimizers:
            mine = {id(p) for p in self.module.parameters()}
            self._owned_optimizers[key] = any(id(p) in mine for g in optimizer.param_groups
                                              for p in g["params"])
        return self._owned_optimizers[key]

    # -- training -------------------------------------------------------------------------------
    @property
    def executor(self) -> StrategyExecutor | TorchDdpBackend | None:
        """The executor running :attr:`strategy` (``None`` before setup)."""
        return self._executor

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.setup()
        ex = self._executor
        assert ex is not None
        if ex.in_flight:  # the last step raised during backward: its communication is abandoned
            log.warning("the previous step did not finish its synchronization (an exception "
                        "during backward?): abandoning it")
            ex.abandon()
        grad = torch.is_grad_enabled()
        if isinstance(ex, TorchDdpBackend):
            ex.begin_forward()
        if grad and self._tuner is not None:
            self._tuner.before_forward()
            ex = self._executor
            assert ex is not None
        if isinstance(ex, TorchDdpBackend):  # DDP broadcasts the buffers itself
            if grad:
                ex.sync_enabled = self._require_backward_grad_sync
            out = ex.forward(*args, **kwargs)
            self._require_forward_param_sync = grad and self._require_backward_grad_sync
            return out
        if self.broadcast_buffers and self._require_forward_param_sync:
            self._sync_buffers()
        if grad:
            ex.sync_enabled = self._require_backward_grad_sync
        out = self.module(*args, **kwargs)
        self._require_forward_param_sync = grad and self._require_backward_grad_sync
        return out

    def _sync_buffers(self) -> None:
        bufs = [b for b in self.module.buffers()]
        if not bufs or dist.get_world_size() == 1:
            return
        assert self.groups is not None
        if not self.groups.alive():
            raise ConfigError("the process group was destroyed (destroy_process_group()); this "
                              "model cannot synchronize any more")
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        by_kind: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for b in bufs:
            by_kind.setdefault((b.dtype, b.device), []).append(b)
        with torch.no_grad():
            for ts in by_kind.values():
                flat = _flatten_dense_tensors([t.detach() for t in ts])
                dist.broadcast(flat, src=0, group=self.groups.ar)
                for t, v in zip(ts, _unflatten_dense_tensors(flat, ts)):
                    t.copy_(v)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forward/backward passes inside do not synchronize: gradients accumulate locally, and
        the first synchronizing backward after it averages the accumulated sum (torch DDP's
        ``no_sync``; put the forward inside too)."""
        old = self._require_backward_grad_sync
        self._require_backward_grad_sync = False
        try:
            yield
        finally:
            self._require_backward_grad_sync = old

    def sync_gradients(self) -> None:
        """Synchronize every gradient accumulated since the last synchronization now
        (collective; a no-op when none arrived). ``sync_on="step"`` calls it before
        ``optimizer.step()``."""
        if self._executor is not None:
            self._executor.finish()
            if self._tuner is not None:
                self._tuner.after_sync()

    # -- checkpoints ----------------------------------------------------------------------------
    def sync_state_dict(self) -> dict[str, Any]:
        """The synchronization state to put next to ``state_dict()`` in a checkpoint: the
        strategy (JSON and fingerprint), the world size, every rank's compressor state and the
        autotuner's state. Collective (every rank gets the whole state); after :meth:`close`,
        the state the model was closed with."""
        if self._executor is None and self._closed is not None:
            plan, mine = self._closed
        else:
            self.setup()
            assert self._executor is not None
            plan, mine = self._executor.plan, self._executor.compressor_state()
        assert self.strategy is not None and self.groups is not None
        stateful = plan is not None and any(b.compressor in ("fp16_ef", "powersgd")
                                            for b in plan.buckets)
        world = dist.get_world_size()
        states: list[Any] = [{} for _ in range(world)]
        if stateful:
            dist.all_gather_object(states, mine, group=self.groups.ctl or self.groups.ps)
        return {
            "format": SYNC_STATE_FORMAT,
            "strategy": self.strategy.to_json(),
            "fingerprint": self.strategy.fingerprint,
            "world_size": world,
            "compressor": states,
            "backend": TORCH_DDP if self.backend == TORCH_DDP else None,
            "autotune": self._tuner.state_dict() if self._tuner is not None else None,
        }

    def load_sync_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`sync_state_dict`: on the same world size the strategy and every
        rank's compressor state; on another one the strategy is planned again (a warning).
        Before setup it is applied at setup; after, from the next step on (collective)."""
        if not isinstance(state, dict) or state.get("format") != SYNC_STATE_FORMAT:
            raise ConfigError(f"sync state must be a dict of format {SYNC_STATE_FORMAT} (from "
                              f"DistributedModel.sync_state_dict()), got "
                              f"{state.get('format') if isinstance(state, dict) else type(state).__name__!r}")
        self._restore = dict(state)
        if state.get("autotune") is not None:
            self._autotune_state = state["autotune"]
        if self._executor is not None:
            self._install(self._initial_strategy())
        if self._tuner is not None and state.get("autotune") is not None:
            self._tuner.load_state_dict(state["autotune"])

    def close(self) -> None:
        """Remove the hooks: ``module`` trains locally again. Not needed at the end of training:
        dropping the model or exiting releases everything."""
        if self._executor is not None:
            self._closed = (self._executor.plan, self._executor.compressor_state())
            self._executor.close()
            self._executor = None
        self.release_parked()
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None
