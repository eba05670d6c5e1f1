"""Convergence checks as data: an append-only JSON-lines store (:class:`CheckStore`).

Every row is one :class:`~autosync_transfer.runtime.accuracy.ConvergenceCheck` of a strategy on a
domain with its loss curves (:class:`~autosync_transfer.runtime.convergence.ConvergenceRun`),
keyed by the domain, the strategy's content (``Strategy.content_key``), the steps, the seed and
the training recipe (optimizer and learning rate; Adam at 1e-3 adds nothing to the key, so rows
stored before recipes were recorded keep their keys), so a search or a ``strategies check``
that is run again finds what was measured and does not train twice. Appends hold an exclusive
``flock`` on the file and are fsynced; a torn last line (a killed writer) is skipped when
reading.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autosync_transfer.runtime.accuracy import ConvergenceCheck

if TYPE_CHECKING:
    from autosync_transfer.runtime.convergence import ConvergenceRun
    from autosync_transfer.strategies.types import Strategy

__all__ = ["CheckStore", "checks_path"]


def checks_path(store_path: str | Path) -> Path:
    """The check store beside trial store ``store_path``."""
    return Path(f"{store_path}.convergence.jsonl")


class CheckStore:
    """Append-only convergence checks in ``path`` (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @staticmethod
    def key(domain: str, strategy: Strategy, steps: int, seed: int, *,
            optimizer: str = "adam", lr: float | None = 1e-3) -> str:
        # Adam at 1e-3 (or at a rate not recorded) adds nothing: the keys of rows stored before
        # recipes were recorded
        recipe = "" if optimizer == "adam" and lr in (1e-3, None) else f"|{optimizer}@{lr!r}"
        return f"{domain}|{strategy.content_key}|{steps}|{seed}{recipe}"

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row, in order."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            data = f.read()
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if isinstance(row, dict) and "key" in row and "check" in row:
                yield row

    def checks(self, domain: str | None = None) -> dict[str, ConvergenceCheck]:
        """The latest check per key (of ``domain`` only, when given)."""
        out: dict[str, ConvergenceCheck] = {}
        for row in self.rows():
            if domain is None or row.get("domain") == domain:
                out[row["key"]] = ConvergenceCheck.model_validate(row["check"])
        return out

    def get(self, domain: str, strategy: Strategy, steps: int, seed: int, *,
            optimizer: str = "adam", lr: float | None = 1e-3) -> ConvergenceCheck | None:
        return self.checks(domain).get(
            self.key(domain, strategy, steps, seed, optimizer=optimizer, lr=lr))

    def append(self, domain: str, strategy: Strategy, run: ConvergenceRun,
               extra: dict[str, Any] | None = None) -> None:
        """Append ``run`` of ``strategy`` on ``domain`` (fsynced, under the file's lock)."""
        from autosync_transfer.dataset.store import utc_now

        c = run.check
        row = {"key": self.key(domain, strategy, c.steps, c.seed, optimizer=c.optimizer, lr=c.lr),
               "domain": domain,
               "strategy_id": strategy.id, "strategy": json.loads(strategy.to_json()),
               "timestamp": utc_now(), **run.to_row(), **(extra or {})}
        line = (json.dumps(row) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size:  # a torn last line of a killed writer ends before this row
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
