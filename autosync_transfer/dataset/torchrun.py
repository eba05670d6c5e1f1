"""Collection on a real cluster under torchrun: every rank measures, rank 0 writes the store.

:func:`collect_torchrun` runs inside each torchrun worker (``autosync-transfer worker --torchrun
--store ...``, see ``docs/torchrun.md``): rank 0 reads a JSON Lines file of strategies (a line
``torch_ddp`` measures torch DDP), checks every line against the domain and drops those already
in the store (so the same command resumes), every rank measures each one through the runtime's
harness (:func:`~autosync_transfer.runtime.worker.run_jobs`), and rank 0 appends one record per
trial. A strategy that raises on a rank is stored as ``failed``; a trial past the protocol's
``timeout_s`` is stored as ``timeout`` and the worker exits with
:data:`~autosync_transfer.runtime.worker.TIMEOUT_EXIT`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autosync_transfer.dataset.collect import record_for
from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.domain import Domain
from autosync_transfer.errors import ConfigError, StrategyValidationError
from autosync_transfer.runtime.launch import TorchrunLauncher
from autosync_transfer.runtime.trial import Protocol, TrialResult
from autosync_transfer.runtime.worker import run_jobs, torchrun_harness
from autosync_transfer.strategies.types import TORCH_DDP, Strategy

__all__ = ["collect_torchrun", "read_strategies"]

def read_strategies(path: str | Path, domain: Domain, done: set[str] | frozenset[str] = frozenset()
                    ) -> list[str]:
    """The lines of ``path`` (strategies as JSON, or ``torch_ddp``) whose record id
    (``<domain>/<strategy id>``) is not in ``done``, each checked against ``domain``. A
    :class:`ConfigError` names the first bad line."""
    from autosync_transfer.domains.parsing import MAX_JSON_BYTES, read_bounded
    from autosync_transfer.strategies.validate import validate

    todo = []
    try:
        text = read_bounded(path, MAX_JSON_BYTES, "strategies file").decode()
    except OSError as e:
        raise ConfigError(f"strategies file {str(path)!r}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"strategies file {str(path)!r} is not UTF-8 text ({e.reason} at byte "
                          f"{e.start})") from e
    for no, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        if line == TORCH_DDP:
            sid = TORCH_DDP
        else:
            try:
                strategy = Strategy.from_json(line)
                validate(strategy, domain)
            except (ValueError, StrategyValidationError) as e:
                why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(f"strategies file {str(path)!r} line {no}: {why}") from None
            sid = strategy.id
        if f"{domain.name}/{sid}" not in done:
            todo.append(line)
    return todo


def collect_torchrun(domain: Domain, strategies: str | Path, store_path: str | Path, *,
                     workload: str | None = None, protocol: Protocol | None = None, seed: int = 0,
                     on_trial: Callable[[TrialRecord], None] | None = None) -> int:
    """Measure the strategies of file ``strategies`` on the torchrun job this process belongs
    to and append them to the trial store ``store_path`` (rank 0); returns the number of trials
    this rank saw measured. A bad strategies file raises :class:`ConfigError` on every rank
    before anything is measured or written."""
    protocol = protocol or Protocol()
    harness = torchrun_harness(domain, workload, seed=seed)
    store = TrialStore(store_path)
    todo: list[str] | str | None = None
    if harness.rank == 0:
        try:
            todo = read_strategies(strategies, domain, store.ids())
        except ConfigError as e:
            todo = str(e)
        else:
            Path(store_path).parent.mkdir(parents=True, exist_ok=True)
            store.record_domain(domain)  # the domain travels with its trials
    todo = harness.broadcast(todo)
    if isinstance(todo, str):  # a bad strategies file: nothing is measured or written
        harness.close()
        raise ConfigError(todo)

    def store_result(line: str, result: TrialResult) -> None:
        strategy = None if line == TORCH_DDP else Strategy.from_json(line)
        sid = TORCH_DDP if strategy is None else strategy.id
        rec = record_for(domain, strategy, result, protocol, TorchrunLauncher.name, seed=seed,
                         record_id=f"{domain.name}/{sid}")
        store.append(rec)
        if on_trial is not None:
            on_trial(rec)

    try:
        run_jobs(harness, todo, warmup=protocol.warmup, iters=protocol.iters,
                 timeout_s=protocol.timeout_s, on_result=store_result,
                 fidelity_steps=protocol.fidelity_steps)
    finally:
        harness.close()
    return len(todo)
