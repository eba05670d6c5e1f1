"""Searching on a real cluster: trials measured by torchrun workers that follow a job queue.

The search appends one job per trial to ``<store>.queue.jsonl`` and waits for its result in
``<store>.results.jsonl``, which rank 0 of the torchrun workers
(``python -m autosync_transfer.runtime.worker --torchrun --follow``) writes. Both files are
append-only: a search started again finds the results of trials measured meanwhile, and the
workers skip jobs that already have a result. ``stop`` at the end of the queue ends the workers.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.errors import ConfigError

if TYPE_CHECKING:
    from autosync_transfer.runtime.trial import Protocol, TrialResult
    from autosync_transfer.strategies.types import Strategy

__all__ = ["TorchrunQueue", "STOP"]

STOP = "stop"


class TorchrunQueue:
    """``measure(strategy, record_id)`` through a job queue; waits at most ``wait_s`` per trial
    (default: the protocol's watchdog plus 10 minutes for the workers to start)."""

    def __init__(self, queue: str | Path, results: str | Path, protocol: Protocol | None = None,
                 *, wait_s: float | None = None, poll_s: float = 0.2) -> None:
        from autosync_transfer.runtime.trial import Protocol

        self.queue, self.results = Path(queue), Path(results)
        self.protocol = protocol or Protocol()
        self.wait_s = wait_s if wait_s is not None else self.protocol.timeout_s + 600
        self.poll_s = poll_s
        self._offset = 0
        self._seen: dict[str, dict[str, Any]] = {}
        self.queue.parent.mkdir(parents=True, exist_ok=True)
        self._drop_stop()

    def _drop_stop(self) -> None:
        """A queue that ended with ``stop`` (an earlier, finished search) is continued."""
        if self.queue.exists():
            lines = self.queue.read_text().splitlines()
            if lines and lines[-1].strip() == STOP:
                tmp = self.queue.with_name(self.queue.name + ".tmp")
                tmp.write_text("".join(f"{ln}\n" for ln in lines[:-1]))
                os.replace(tmp, self.queue)

    def _append(self, line: str) -> None:
        with open(self.queue, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _read_results(self) -> None:
        if not self.results.exists():
            return
        with open(self.results, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return
        for line in data[:end + 1].decode().splitlines():
            try:
                row = json.loads(line)
                self._seen[row["record_id"]] = row
            except (ValueError, KeyError, TypeError):
                continue
        self._offset += end + 1

    def measure(self, strategy: Strategy | None, record_id: str) -> tuple[TrialResult, dict[str, Any]]:
        from autosync_transfer.runtime.trial import TrialResult

        self._read_results()
        if record_id not in self._seen:
            job = {"record_id": record_id,
                   "strategy": "torch_ddp" if strategy is None else json.loads(strategy.to_json())}
            self._append(json.dumps(job))
        deadline = time.monotonic() + self.wait_s
        while record_id not in self._seen:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"no result for {record_id!r} from the torchrun workers within "
                    f"{self.wait_s:.0f} s: start them on every node (the search prints the "
                    f"command), then run the search again to continue")
            time.sleep(self.poll_s)
            self._read_results()
        row = self._seen[record_id]
        status = row.get("status", "failed")
        return TrialResult(status if status in ("ok", "failed", "timeout") else "failed",
                           [float(t) for t in row.get("iteration_times_s", [])],
                           error=str(row.get("error", "")), wall_s=float(row.get("wall_s", 0.0))), {}

    def stop(self) -> None:
        """End the workers' job (they exit after the jobs before it)."""
        self._append(STOP)
