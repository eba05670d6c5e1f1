"""torch's own ``DistributedDataParallel`` as a backend of :class:`DistributedModel`.

Two uses (DESIGN §14, CONVENTIONS 21):

- **torch DDP itself** (:data:`TORCH_DDP`): the real wrapper with its defaults (25 MB buckets,
  a 1 MB first bucket), the start and the fallback of every autotuned job and the baseline every
  candidate is compared with;
- **strategies DDP's reducer can run**: every variable all-reduced whole (no parameter server,
  no shards) without compression or with fp16 compression throughout. They run on the C++
  reducer with the plan's bucket sizes as its per-bucket limits (``bucket_cap_mb_list``, in
  launch order) and ``gradient_as_bucket_view=True``, fp16 through DDP's
  ``fp16_compress_hook``: DDP's per-step cost, not a Python hook per parameter. Everything else
  (parameter servers, shards, local replication, PowerSGD with the strategy's own state) keeps
  the :class:`~autosync_transfer.runtime.executor.StrategyExecutor`.

The backend speaks the executor's small interface (``syncs``, ``sync_enabled``, ``in_flight``,
``finish``, ``abandon``, ``close``, ``compressor_state``) so the model switches between the two
at step boundaries like between any strategies.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.plan import SyncPlan

__all__ = ["TORCH_DDP", "TorchDdpBackend", "ddp_bucket_caps"]

log = logging.getLogger(__name__)

#: the name of torch's DistributedDataParallel among autotune candidates and in tuning records
TORCH_DDP = "torch_ddp"

_MIB = float(1 << 20)


def ddp_bucket_caps(plan: SyncPlan) -> tuple[list[float], str] | None:
    """``(bucket limits in MiB in launch order, compressor)`` when DDP's reducer can run
    ``plan`` (every piece a whole variable in an all-reduce bucket, one compressor throughout,
    ``none`` or ``fp16``); ``None`` otherwise."""
    if plan.ps_items or not plan.buckets:
        return None
    compressors = {b.compressor for b in plan.buckets}
    if len(compressors) != 1 or not compressors <= {"none", "fp16"}:
        return None
    if any(p.shard is not None for b in plan.buckets for p in b.pieces):
        return None
    index = {b.index: b for b in plan.buckets}
    caps = [max(index[i].numel * index[i].pieces[0].itemsize / _MIB, 1e-6)
            for kind, i in plan.order if kind == "ar"]
    return caps, compressors.pop()


class TorchDdpBackend:
    """``module`` synchronized by ``torch.nn.parallel.DistributedDataParallel`` (constructed by
    :meth:`setup`, released by :meth:`close`; parameters are not broadcast again: the model
    did that once at its setup)."""

    def __init__(self, module: torch.nn.Module, group: Any, *,
                 plan: SyncPlan | None = None, bucket_caps_mb: list[float] | None = None,
                 compressor: str = "none", find_unused_parameters: bool = False,
                 broadcast_buffers: bool = True, key: str | None = None) -> None:
        self.module = module
        self.group = group
        #: the strategy's plan (``None`` for torch DDP itself)
        self.plan = plan
        self.bucket_caps_mb = bucket_caps_mb
        self.compressor = compressor
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        #: what this wrapper runs (TORCH_DDP or a plan's key), for setting it aside
        self.key = key
        self.sync_enabled = True
        self.deferred = False
        self.ddp: Any = None
        self._count = 0
        self._pending = False

    @property
    def syncs(self) -> int:
        """Synchronizing backward passes so far (a synchronizing forward counts for its
        backward)."""
        return self._count + int(self._pending)

    def setup(self) -> TorchDdpBackend:
        from torch.nn.parallel import DistributedDataParallel

        import inspect

        kwargs: dict[str, Any] = {}
        if self.bucket_caps_mb:
            params = inspect.signature(DistributedDataParallel.__init__).parameters
            if "bucket_cap_mb_list" in params:  # per-bucket limits (torch >= 2.13)
                kwargs["bucket_cap_mb_list"] = list(self.bucket_caps_mb)
            else:  # one limit: the plan's largest bucket
                kwargs["bucket_cap_mb"] = max(self.bucket_caps_mb)
        sync_buffers = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(
            DistributedDataParallel.__init__).parameters else "broadcast_buffers"
        kwargs[sync_buffers] = self.broadcast_buffers
        self.ddp = DistributedDataParallel(
            self.module, process_group=self.group, init_sync=False,
            find_unused_parameters=self.find_unused_parameters,
            gradient_as_bucket_view=True, **kwargs)
        if self.compressor == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            self.ddp.register_comm_hook(self.group, default_hooks.fp16_compress_hook)
        return self

    # -- the executor's interface ----------------------------------------------------------------
    @property
    def in_flight(self) -> bool:
        return False

    def begin_forward(self) -> None:
        """A forward starts: the synchronizing backward of the previous one (if any) is done."""
        if self._pending:
            self._count += 1
            self._pending = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        grad = torch.is_grad_enabled()
        self.ddp.require_backward_grad_sync = self.sync_enabled
        try:
            out = self.ddp(*args, **kwargs)
        except RuntimeError as e:
            if "Expected to have finished reduction" not in str(e):
                raise
            self._refuse_unused(str(e))
        self._pending = grad and self.sync_enabled
        return out

    def _refuse_unused(self, message: str) -> None:
        """DDP found, at this forward, that the previous backward left parameters without a
        gradient (``find_unused_parameters=False``): one clear error naming the first, and a
        fresh reducer so the model stays usable (as the executor's refusal does)."""
        import re

        trainable = [n for n, p in self.module.named_parameters() if p.requires_grad]
        found = re.search(r"did not receive grad for rank \d+: ([\d ]+)", message)
        idx = [int(i) for i in found.group(1).split()] if found else []
        names = [trainable[i] for i in idx if i < len(trainable)]
        self.close()
        self.setup()
        what = f"parameter {names[0]!r}" if names else "a parameter"
        count = f" ({len(names)} of {len(trainable)} parameters did not)" if names else ""
        raise ConfigError(
            f"{what} got no gradient in the previous step{count}: pass "
            f"find_unused_parameters=True to synchronize only the parameters that did, as torch "
            f"DDP does")

    def finish(self) -> None:
        """Nothing to wait for: DDP's backward returns with averaged gradients."""
        self.begin_forward()

    def abandon(self) -> None:
        """DDP resets its reducer at the next forward (or says why it cannot)."""

    def compressor_state(self) -> dict[str, Any]:
        return {}

    def load_compressor_state(self, state: dict[str, Any]) -> None:
        """fp16 compression keeps no state."""

    def close(self) -> None:
        """Release the wrapper: its reducer's autograd hooks go with it."""
        ddp, self.ddp = self.ddp, None
        if ddp is not None:
            reducer = getattr(ddp, "reducer", None)
            if reducer is not None and hasattr(reducer, "_remove_autograd_hooks"):
                reducer._remove_autograd_hooks()
            del ddp
