"""The torchrun launcher's pool: trials measured by torchrun workers that follow a job queue.

:class:`TorchrunPool` appends one job per trial to a queue file and waits for its result in a
results file, which rank 0 of the torchrun workers (``autosync-transfer worker --torchrun
--follow``, :func:`autosync_transfer.runtime.worker.follow_queue`) writes. Both files follow the
trial store's rules (:mod:`autosync_transfer._files`): whole lines appended under an exclusive
``flock`` and fsynced, a torn last line cut off by the next append and skipped by readers, a
complete line that is not a job or a result an error naming it. Both files are append-only: a pool opened again finds the results of jobs measured meanwhile, and the workers
skip jobs that already have a result. :data:`STOP` at the end of the queue ends the workers.

Queue lines: ``{"record_id", "strategy", "warmup", "iters", "fidelity_steps"}`` (``strategy`` a
strategy object or :data:`~autosync_transfer.strategies.TORCH_DDP`); result lines:
``{"record_id", "status", "iteration_times_s", "wall_s", "error", "fidelity"}`` (``fidelity``
absent in rows of older workers).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer._files import append_line, complete_lines, cut_torn_tail, locked
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.launch import TorchrunLauncher
from autosync_transfer.runtime.trial import Protocol, TrialPool, TrialResult, fidelity_of
from autosync_transfer.strategies.types import TORCH_DDP

if TYPE_CHECKING:
    from autosync_transfer.domains.domain import Domain
    from autosync_transfer.strategies.types import Strategy

__all__ = ["TorchrunPool", "STOP"]

#: the line that ends the workers' job queue
STOP = "stop"
#: how the job queue and the results file are named in errors
QUEUE, RESULTS = "torchrun job queue", "torchrun results file"


class TorchrunPool(TrialPool):
    """:meth:`run` through a job queue; waits at most ``wait_s`` per trial (default: the
    protocol's watchdog plus 10 minutes for the workers to start), then raises a
    :class:`ConfigError` saying to start the workers (a missing cluster is not a failed trial).

    Leaving the ``with`` block normally appends :data:`STOP` (the workers exit); after an error
    the workers keep waiting for more, so a search started again continues with them.
    """

    def __init__(self, domain: Domain | None, queue: str | Path, results: str | Path,
                 protocol: Protocol | None = None, *, wait_s: float | None = None,
                 poll_s: float = 0.2) -> None:
        self.domain = domain
        self.launcher = TorchrunLauncher(queue, results, wait_s=wait_s, poll_s=poll_s)
        self.queue, self.results = Path(queue), Path(results)
        self.protocol = protocol or Protocol()
        self.wait_s = wait_s if wait_s is not None else self.protocol.timeout_s + 600
        self.poll_s = poll_s
        self._offset = 0
        self._line_no = 0
        self._seen: dict[str, dict[str, Any]] = {}
        self._session = uuid.uuid4().hex[:8]
        self._jobs = 0
        self._opened = False

    def _open(self) -> None:
        if self._opened:
            return
        self.queue.parent.mkdir(parents=True, exist_ok=True)
        self._drop_stop()
        self._opened = True

    def _drop_stop(self) -> None:
        """A queue that ended with ``stop`` (an earlier, finished run) is continued: the line is
        cut off in place, under the queue's lock."""
        if not self.queue.exists() and not self.queue.is_symlink():
            return
        with locked(self.queue, QUEUE) as fd:
            assert fd is not None
            cut_torn_tail(fd)
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0)
            body = data.rstrip(b"\n")
            start = body.rfind(b"\n") + 1
            if body[start:].strip() == STOP.encode():
                os.ftruncate(fd, start)

    def _append(self, line: str) -> None:
        append_line(self.queue, line, QUEUE)

    def _read_results(self) -> None:
        """Read the results added since the last call; a complete line that is not a result is
        a :class:`ConfigError` naming it (a torn last line waits for its writer)."""
        lines, self._offset = complete_lines(self.results, RESULTS, self._offset)
        for raw in lines:
            self._line_no += 1
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
                self._seen[row["record_id"]] = row
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"{RESULTS} {str(self.results)!r}: line {self._line_no} is "
                                  f"not a result; move it away and run again") from None

    def run(self, strategy: Strategy | None, protocol: Protocol | None = None, *,
            job_id: str | None = None) -> TrialResult:
        """Measure ``strategy`` on the torchrun workers. A ``job_id`` that already has a result
        (measured before a restart) returns it without measuring again; without one the job is
        named after this pool's session and its count."""
        proto = protocol or self.protocol
        self._open()
        self._jobs += 1
        prefix = f"{self.domain.name}/" if self.domain is not None else ""
        record_id = job_id or f"{prefix}{self._session}/{self._jobs}"
        self._read_results()
        if record_id not in self._seen:
            job = {"record_id": record_id,
                   "strategy": TORCH_DDP if strategy is None else json.loads(strategy.to_json()),
                   "warmup": proto.warmup, "iters": proto.iters,
                   "fidelity_steps": proto.fidelity_steps}
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
                           error=str(row.get("error", "")), wall_s=float(row.get("wall_s", 0.0)),
                           fidelity=fidelity_of(row.get("fidelity")))

    def close(self) -> None:
        """End the workers' job (they exit after the jobs before it)."""
        self._open()
        self._append(STOP)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
