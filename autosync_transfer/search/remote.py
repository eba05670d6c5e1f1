"""Deprecated: the torchrun job queue moved to :mod:`autosync_transfer.runtime.torchrun`
(:class:`~autosync_transfer.runtime.torchrun.TorchrunPool`, opened by
``TorchrunLauncher().pool(domain, protocol, state_path=store)``). :class:`TorchrunQueue` stays
for one release as a thin adapter with the old ``measure(strategy, record_id)`` interface.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.runtime.torchrun import STOP, TorchrunPool

if TYPE_CHECKING:
    from autosync_transfer.runtime.trial import Protocol, TrialResult
    from autosync_transfer.strategies.types import Strategy

__all__ = ["TorchrunQueue", "STOP"]


class TorchrunQueue:
    """``measure(strategy, record_id) -> (result, {})`` and ``stop()`` over a
    :class:`~autosync_transfer.runtime.torchrun.TorchrunPool`."""

    def __init__(self, queue: str | Path, results: str | Path, protocol: Protocol | None = None,
                 *, wait_s: float | None = None, poll_s: float = 0.2) -> None:
        self.pool = TorchrunPool(None, queue, results, protocol, wait_s=wait_s, poll_s=poll_s)

    def measure(self, strategy: Strategy | None, record_id: str) -> tuple[TrialResult, dict[str, Any]]:
        return self.pool.run(strategy, job_id=record_id), {}

    def stop(self) -> None:
        self.pool.close()
