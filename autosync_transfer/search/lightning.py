"""``AutoSyncStrategy``: Lightning's DDP strategy with gradients synchronized by an AutoSync strategy.

Lightning launches (or joins) the processes and initializes the process group exactly as its
``DDPStrategy`` does (gloo by default); instead of wrapping the ``LightningModule`` in torch's
``DistributedDataParallel``, :class:`AutoSyncStrategy` wraps it in
:class:`~autosync_transfer.runtime.ddp.DistributedModel`, which averages every gradient during
``backward()`` with the plan of a :class:`~autosync_transfer.strategies.types.Strategy`
(all-reduce buckets, compression, parameter servers, partitions).

The strategy is given (a :class:`Strategy` object, or a JSON / AutoDist file with
:meth:`AutoSyncStrategy.from_file`), or chosen at setup time, once the model is known, by a
*picker* ``picker(graph, cluster) -> Strategy`` (rank 0 calls it and broadcasts the choice, so
every rank runs the same plan). ``None`` lets a simulator pick:
:func:`~autosync_transfer.search.recommendation.recommend` with the step-time simulator, or with
``simulator=`` (an object, or one loaded from the registry by rank 0:
:meth:`AutoSyncStrategy.from_registry`). The DDP-equivalent builder (all all-reduce, 25 MB
buckets, lossless) is the picker :func:`~autosync_transfer.runtime.ddp.ddp_equivalent`.

Variable names are the ``LightningModule``'s parameter names (``model.fc.weight`` for a module
that holds its network as ``self.model``). A strategy written for the inner network
(``fc.weight``) is accepted when one common submodule prefix makes every name match
(:func:`~autosync_transfer.runtime.lightning.match_names`).

As Lightning's DDP does: rank 0's buffers are broadcast before forward passes
(``broadcast_buffers``), ``find_unused_parameters`` is DDP's option, gradient accumulation
(``accumulate_grad_batches``) synchronizes once per optimizer step (``no_sync`` on the other
micro-batches), and the process-group backend is Lightning's default for the device (gloo on
CPU, NCCL on CUDA). Checkpoints carry the strategy and every rank's compressor state under the
key ``"autosync"``; resuming restores both (on another world size the strategy is chosen again
and the compressor state starts from zero, with a warning).

Importing this module registers the strategy with Lightning as ``"autosync"``:
``Trainer(strategy="autosync")`` trains with the DDP-equivalent strategy (lossless) on the
process group's layout::

    from autosync_transfer import AutoSyncStrategy  # registers "autosync"
    Trainer(accelerator="cpu", devices=2, strategy="autosync")

This module imports Lightning; import it on demand (``autosync_transfer.AutoSyncStrategy``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule
from lightning.pytorch.strategies import DDPStrategy

from autosync_transfer.domains.cluster import Cluster
from autosync_transfer.domains.graph import ModelGraph
from autosync_transfer.errors import ConfigError, NotFittedError
from autosync_transfer.runtime.accuracy import ConvergenceCheck
from autosync_transfer.runtime.ddp import DistributedModel, as_cluster, ddp_equivalent
from autosync_transfer.runtime.torch_ddp import TORCH_DDP
from autosync_transfer.runtime.lightning import (CHECKPOINT_KEY, STRATEGY_NAME, Picker,
                                                 match_names, planned_steps)
from autosync_transfer.strategies.types import Strategy

__all__ = ["AutoSyncStrategy", "Recommender", "register"]

log = logging.getLogger(__name__)

#: sampled strategies the proposer scores per candidate the autotune budget can try (the
#: sampling is most of the proposal's time, about 0.1 ms a strategy on a small model, and the
#: job waits for it): 200 for a 300-step job, 300 at 1,000 steps, 500 at most
PROPOSAL_SAMPLES = 100

#: ``DDPStrategy`` arguments that keep their meaning here (everything about processes and devices)
_PASSED_ON = frozenset({
    "accelerator", "parallel_devices", "cluster_environment", "checkpoint_io", "precision_plugin",
    "timeout", "start_method",
})
#: options of torch's ``DistributedDataParallel`` that mean the same here
_DDP_OPTIONS = frozenset({"find_unused_parameters", "broadcast_buffers"})


class Recommender:
    """The picker of ``AutoSyncStrategy(None, ...)``: ``picker(graph, cluster)`` is
    ``recommend(graph, cluster, simulator, candidates=..., seed=..., allow_lossy=...)`` (a
    registry reference is loaded on the first call, i.e. by rank 0 at setup time; lossy
    strategies only with ``allow_lossy``, as ``recommend``)."""

    def __init__(self, simulator: Any = None, *, candidates: int = 2000, seed: int = 0,
                 allow_lossy: bool = False) -> None:
        if candidates < 0:
            raise ConfigError(f"candidates must be >= 0, got {candidates}")
        self.simulator = simulator
        self.candidates = candidates
        self.seed = seed
        self.allow_lossy = allow_lossy

    def __call__(self, graph: ModelGraph, cluster: Cluster) -> Strategy:
        from autosync_transfer.search.recommendation import recommend

        return recommend(graph, cluster, self.simulator, candidates=self.candidates,
                         seed=self.seed, allow_lossy=self.allow_lossy)


class AutoSyncStrategy(DDPStrategy):
    """Data-parallel training whose gradient synchronization follows ``strategy`` on ``cluster``.

    Use it like Lightning's DDP strategy, with one process per worker of ``cluster`` (ranks
    numbered node by node)::

        trainer = Trainer(accelerator="cpu", devices=2,
                          strategy=AutoSyncStrategy(strategy, cluster))

    Args:
        strategy: the synchronization strategy; or a picker ``picker(graph, cluster) ->
            Strategy`` called on rank 0 at setup time, once the model is known (the
            DDP-equivalent builder is the picker :func:`ddp_equivalent`); ``None``: the one
            ``simulator`` ranks fastest (:func:`~autosync_transfer.search.recommendation.recommend`).
        cluster: the cluster the strategy is for: a :class:`Cluster`, the path of an AutoDist
            resource-spec file, a catalog name such as ``"A"``, or ``None``: the process
            group's layout (derived at setup, bandwidths unknown); its number of workers must
            equal the Trainer's number of processes.
        simulator: only when ``strategy`` is ``None``: the ranker that picks the strategy — a
            :class:`~autosync_transfer.rankers.simulator.Simulator`, a registry URI or name
            (``"models:/autosync-bert-B@champion"``, loaded by rank 0), or ``None`` for the
            step-time simulator. With ``autotune`` and no candidates in it, the simulator also
            proposes the candidates the job tries.
        candidates, seed: sampled candidates scored by ``recommend`` and its sampler's seed.
        allow_lossy: let ``recommend`` choose a lossy strategy (fp16, PowerSGD) without a
            convergence check (default: lossless ones only); it trains with a warning.
        batch_size, seq_len: per-worker batch size and sequence length, which size the sparse
            traffic of embeddings in the model graph.
        find_unused_parameters, broadcast_buffers: torch DDP's options, same meaning.
        autotune: an :class:`~autosync_transfer.runtime.autotune.AutotuneConfig`: the first
            steps of the job try candidate strategies and lock in the fastest.
        process_group_backend: Lightning's default for the device unless given (gloo on CPU,
            NCCL on CUDA; parameter-server messages always travel over gloo).
        convergence_check: the :class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck`
            of the strategy; a lossy strategy without a passed check of it trains with a
            warning (logged by rank 0 at setup, by the wrapped ``DistributedModel``).
        **ddp_kwargs: the process and device arguments of ``DDPStrategy`` (``accelerator``,
            ``parallel_devices``, ``cluster_environment``, ``checkpoint_io``,
            ``precision_plugin``, ``timeout``, ``start_method``). Other options of torch's
            ``DistributedDataParallel`` (``bucket_cap_mb``, comm hooks, ...) have no meaning
            here and are refused.

    Gradient accumulation (``accumulate_grad_batches > 1``) synchronizes once per optimizer
    step, like Lightning's DDP.
    """

    strategy_name = STRATEGY_NAME

    def __init__(
        self,
        strategy: Strategy | Picker | None = None,
        cluster: Cluster | str | None = None,
        *,
        simulator: Any = None,
        candidates: int = 2000,
        seed: int = 0,
        allow_lossy: bool = False,
        batch_size: int = 1,
        seq_len: int = 1,
        find_unused_parameters: bool = False,
        broadcast_buffers: bool = True,
        autotune: Any = None,
        process_group_backend: str | None = None,
        convergence_check: ConvergenceCheck | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        unknown = sorted(set(ddp_kwargs) - _PASSED_ON)
        if unknown:
            raise ConfigError(
                f"AutoSyncStrategy does not take the DDP option {unknown[0]!r}: gradients are "
                f"synchronized by the AutoSync strategy's plan, not by DistributedDataParallel "
                f"(accepted: {', '.join(sorted(_PASSED_ON | _DDP_OPTIONS))})"
            )
        if strategy is not None and not isinstance(strategy, Strategy) and not callable(strategy):
            raise ConfigError(
                f"strategy must be an autosync_transfer Strategy, a picker(graph, cluster) "
                f"returning one, or None, got {type(strategy).__name__} (use "
                f"AutoSyncStrategy.from_file for a file)"
            )
        if strategy is not None and simulator is not None:
            raise ConfigError("give either a strategy or a simulator to choose one, not both")
        if batch_size < 1 or seq_len < 1:
            raise ConfigError(f"batch_size and seq_len must be >= 1, got {batch_size} and {seq_len}")
        if convergence_check is not None and not isinstance(convergence_check, ConvergenceCheck):
            raise ConfigError(f"convergence_check must be a ConvergenceCheck or None, got "
                              f"{type(convergence_check).__name__}")
        recommender = Recommender(simulator, candidates=candidates, seed=seed,
                                  allow_lossy=allow_lossy)
        super().__init__(process_group_backend=process_group_backend, **ddp_kwargs)
        self.cluster = as_cluster(cluster)
        self.simulator = simulator
        self.candidates = candidates
        self.seed = seed
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self.autotune = autotune
        self.convergence_check = convergence_check
        given = isinstance(strategy, Strategy)
        self._given: Strategy | None = strategy if given else None
        self._picker: Picker = (strategy if strategy is not None and not given  # type: ignore[assignment]
                                else recommender)
        self._sync_strategy: Strategy | None = strategy if given else None
        self._resume: dict[str, Any] | None = None
        #: the wrapped model of the last fit (closed), for a checkpoint saved after it
        self._finished: DistributedModel | None = None

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, cluster: Cluster | str | None = None,
                  **kwargs: Any) -> AutoSyncStrategy:
        """Use the strategy of a JSON file or an AutoDist (protobuf) strategy file."""
        return cls(Strategy.from_file(path), cluster, **kwargs)

    @classmethod
    def from_registry(cls, uri_or_name: str, cluster: Cluster | str | None = None, *,
                      candidates: int = 2000, **kwargs: Any) -> AutoSyncStrategy:
        """Choose the strategy at setup time with the registered simulator ``uri_or_name``
        (``"models:/autosync-bert-B@champion"``, or a registered model name for its champion)."""
        if not isinstance(uri_or_name, str) or not uri_or_name:
            raise ConfigError(
                f"registry URI or model name must be a non-empty string, got {uri_or_name!r}"
            )
        return cls(None, cluster, simulator=uri_or_name, candidates=candidates, **kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Register ``"autosync"`` in ``strategy_registry``: this class with the DDP-equivalent
        strategy (lossless) on the process group's layout."""
        if STRATEGY_NAME not in strategy_registry:
            strategy_registry.register(
                STRATEGY_NAME, functools.partial(cls, ddp_equivalent),
                description="gradients synchronized by an AutoSync strategy (by name: the "
                            "lossless DDP-equivalent one on the process group's layout)")

    # -- the strategy in use ------------------------------------------------------------------
    @property
    def sync_strategy(self) -> Strategy | str:
        """The strategy in use, with the ``LightningModule``'s variable names (known once the
        Trainer has set up; given strategies as given until then; with autotuning, the one
        locked in): :data:`~autosync_transfer.runtime.torch_ddp.TORCH_DDP` (``"torch_ddp"``)
        while the job runs torch's own ``DistributedDataParallel``."""
        model = self.model if isinstance(self.model, DistributedModel) else self._finished
        if model is not None and model.backend == TORCH_DDP:
            return TORCH_DDP
        if model is not None and model.strategy is not None:
            return model.strategy
        if self._sync_strategy is None:
            raise NotFittedError(
                "the strategy is chosen when the Trainer sets up (trainer.fit); it is not known yet"
            )
        return self._sync_strategy

    @property
    def autotuner(self) -> Any:
        """The :class:`~autosync_transfer.runtime.autotune.Autotuner` of the current (or last)
        fit: what was tried, the locked choice, the tuning cost; ``None`` without ``autotune``."""
        model = self.model if isinstance(self.model, DistributedModel) else self._finished
        return getattr(model, "_tuner", None)

    def _cluster(self) -> Cluster:
        if self.cluster is None:
            if not (dist.is_available() and dist.is_initialized()):
                raise NotFittedError("cluster=None is the process group's layout, known once "
                                     "the Trainer has set up the processes")
            from autosync_transfer.runtime.ddp import cluster_from_process_group

            self.cluster = cluster_from_process_group()
        return self.cluster

    def model_graph(self, module: torch.nn.Module) -> ModelGraph:
        """The graph the strategy is planned on: ``module``'s trainable parameters."""
        return ModelGraph.from_torch(module, name=type(module).__name__.lower() or "model",
                                     batch_size=self.batch_size, seq_len=self.seq_len)

    def resolve_strategy(self, module: torch.nn.Module) -> Strategy:
        """The strategy to run on ``module``: the given one (renamed to ``module``'s parameter
        names if needed, and validated), or the picked one (chosen on rank 0 and broadcast
        when a process group is running). Raises :class:`ConfigError` when it does not fit."""
        return self._resolve(module, self.model_graph(module))

    def _resolve(self, module: torch.nn.Module, graph: ModelGraph) -> Strategy:
        from autosync_transfer.domains.domain import Domain
        from autosync_transfer.strategies.validate import validate

        cluster = self._cluster()
        if self._given is not None:
            strategy = match_names(self._given, module)
        else:
            strategy = self._pick(graph)
        validate(strategy, Domain(name=f"{graph.name}-{cluster.name}", model=graph,
                                  cluster=cluster))
        return strategy

    def _pick(self, graph: ModelGraph) -> Strategy:
        distributed = dist.is_available() and dist.is_initialized()
        payload: list[Any] = [None]
        if not distributed or dist.get_rank() == 0:
            try:
                payload[0] = ("ok", self._choose(graph).to_json())
            except Exception as e:  # reported to every rank instead of leaving them waiting
                payload[0] = ("error", f"{type(e).__name__}: {e}")
        if distributed:
            dist.broadcast_object_list(payload, src=0)
        status, body = payload[0]
        if status != "ok":
            raise ConfigError(f"choosing a strategy failed on rank 0: {body}")
        return Strategy.from_json(body)

    def _choose(self, graph: ModelGraph) -> Strategy:
        cluster = self._cluster()
        strategy = self._picker(graph, cluster)
        if not isinstance(strategy, Strategy):
            raise ConfigError(f"the strategy picker must return a Strategy, got "
                              f"{type(strategy).__name__}")
        log.info("picked strategy %s (%s) for %s on cluster %s", strategy.id, strategy.kind,
                 graph.name, cluster.name)
        return strategy

    def autotune_candidates(self, graph: ModelGraph, cluster: Cluster,
                            tries: int | None = None) -> Any:
        """Autotune candidates when ``autotune`` names none: the ``simulator``'s top strategies
        (:class:`~autosync_transfer.search.autotune.SimulatorProposer`, called on rank 0),
        among :data:`PROPOSAL_SAMPLES` sampled strategies per candidate the tuning budget
        ``tries`` (``None``: as many as ``candidates`` allows, at most 500): the job waits for
        the proposal, so it samples what its budget can use."""
        from autosync_transfer.search.autotune import SimulatorProposer

        allow_lossy = bool(getattr(self.autotune, "allow_lossy", False))
        samples = min(self.candidates, 500)
        if tries is not None:
            samples = min(samples, PROPOSAL_SAMPLES * max(tries, 1))
        return SimulatorProposer(self.simulator, k=4, candidates=samples,
                                 seed=self.seed, lossless=not allow_lossy)

    # -- Lightning hooks ----------------------------------------------------------------------
    def setup_distributed(self) -> None:
        expected = self.num_nodes * self.num_processes
        if self.cluster is not None and expected != self.cluster.world_size:
            raise ConfigError(
                f"the Trainer runs {expected} processes (num_nodes={self.num_nodes} x "
                f"devices={self.num_processes}) but cluster {self.cluster.name!r} has "
                f"{self.cluster.world_size} workers"
            )
        super().setup_distributed()
        if self.cluster is not None and dist.get_world_size() != self.cluster.world_size:
            raise ConfigError(
                f"the process group has {dist.get_world_size()} ranks but cluster "
                f"{self.cluster.name!r} has {self.cluster.world_size} workers"
            )

    def _setup_model(self, model: torch.nn.Module) -> DistributedModel:  # type: ignore[override]
        """Wrap ``model`` in a :class:`DistributedModel` running the resolved strategy (rank 0's
        parameters are broadcast and the gradient hooks installed here). A checkpoint being
        resumed on the same world size brings its own strategy and compressor state."""
        graph = self.model_graph(model)
        cluster = self._cluster()
        resume, self._resume = self._resume, None
        strategy: Strategy | None
        if resume is not None and resume.get("world_size") == dist.get_world_size():
            strategy = Strategy.from_json(resume["strategy"])
        elif self.autotune is not None and self._given is None:
            strategy = None  # torch DDP starts; a simulator's picks are the candidates
        else:
            strategy = self._resolve(model, graph)
        self._sync_strategy = strategy
        if self.global_rank == 0:
            if strategy is None:
                log.info("AutoSyncStrategy: torch DDP on cluster %s, autotuning", cluster.name)
            else:
                log.info("AutoSyncStrategy: strategy %s (%s, %d variables) on cluster %s",
                         strategy.id, strategy.kind, len(strategy.nodes), cluster.name)
        autotune = self.autotune
        if autotune is not None and autotune.planned_steps is None:
            planned = planned_steps(model)
            if planned is not None:  # the tuning budget is a share of the fit's steps
                autotune = autotune.model_copy(update={"planned_steps": planned})
        if autotune is not None and autotune.candidates is None:
            fit, _, _, screen = autotune.schedule(autotune.max_candidates)
            proposed = self.autotune_candidates(graph, cluster, tries=fit + screen)
            if proposed is not None:
                autotune = autotune.model_copy(update={"candidates": proposed})
        wrapped = DistributedModel(model, strategy, cluster, graph=graph,
                                   find_unused_parameters=self.find_unused_parameters,
                                   broadcast_buffers=self.broadcast_buffers, autotune=autotune,
                                   convergence_check=self.convergence_check)
        if resume is not None:
            wrapped.load_sync_state_dict(resume)
        return wrapped.setup()

    def configure_ddp(self) -> None:
        if not isinstance(self.model, LightningModule):
            raise ConfigError(
                f"AutoSyncStrategy wraps a LightningModule, got {type(self.model).__name__}"
            )
        self.model = self._setup_model(self.model)

    @contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Gradient accumulation: micro-batches before the optimizer step do not synchronize."""
        if isinstance(self.model, DistributedModel):
            with self.model.no_sync():
                yield None
        else:
            yield None

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any,
                        storage_options: Any = None) -> None:
        """Add the synchronization state (strategy, every rank's compressor state) under
        :data:`CHECKPOINT_KEY`; collective, like Lightning's ``trainer.save_checkpoint``."""
        model = self.model if isinstance(self.model, DistributedModel) else self._finished
        if model is not None:
            checkpoint[CHECKPOINT_KEY] = model.sync_state_dict()
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        super().load_model_state_dict(checkpoint, strict=strict)
        state = checkpoint.get(CHECKPOINT_KEY)
        if state is None:
            return
        if isinstance(self.model, DistributedModel):
            self.model.load_sync_state_dict(state)
        else:  # applied when the model is wrapped (Lightning restores before setup)
            self._resume = dict(state)

    def teardown(self) -> None:
        if isinstance(self.model, DistributedModel):
            self.model.close()
            self._finished = self.model
            self.model = self.lightning_module
        super().teardown()


def register(strategy_registry: Any = None) -> None:
    """Register ``"autosync"`` with Lightning's strategy registry (done on import)."""
    if strategy_registry is None:
        from lightning.pytorch.strategies import StrategyRegistry as strategy_registry
    AutoSyncStrategy.register_strategies(strategy_registry)


register()
