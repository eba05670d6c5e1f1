"""``autosync-transfer worker`` (hidden): a trial worker started by torchrun on every node.

``torchrun ... -m autosync_transfer worker --torchrun --domain D [--cluster-file F]
--strategies s.jsonl (--store trials.jsonl | --follow --results r.jsonl)``: with ``--store``
rank 0 measures the strategies of a file into a trial store (resumable); with ``--follow`` the
workers serve a search's job queue (the torchrun launcher's pool). See ``docs/torchrun.md``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

import typer

#: how long a rank other than 0 waits before exiting on an error rank 0 reports
_QUIET_RANK_GRACE_S = 5.0


def worker(
    torchrun: bool = typer.Option(False, "--torchrun", help="Run as a torchrun worker (the only mode: workers of the other launchers are started by their pools)."),
    domain_name: Optional[str] = typer.Option(None, "--domain", help="Catalog domain, or a model name with --cluster-file."),
    cluster_file: Optional[str] = typer.Option(None, "--cluster-file", help="AutoDist resource-spec YAML of this cluster."),
    model: Optional[str] = typer.Option(None, "--model", help="Workload spec (path/to/file.py, package.module, ...:NAME, zoo:NAME) measured on --cluster-file, in place of --domain."),
    strategies: str = typer.Option(..., "--strategies", help="JSON Lines of strategies (a line 'torch_ddp' measures DDP), or with --follow the job queue."),
    store: Optional[str] = typer.Option(None, "--store", help="Trial store (JSON Lines) written by rank 0."),
    follow: bool = typer.Option(False, "--follow", help="Serve a search: keep reading jobs appended to --strategies until a line 'stop', write one result per job to --results."),
    results: Optional[str] = typer.Option(None, "--results", help="With --follow: results (JSON Lines) written by rank 0."),
    warmup: int = typer.Option(10, "--warmup", min=0),
    iters: int = typer.Option(40, "--iters", min=1),
    seed: int = typer.Option(0, "--seed"),
    timeout_s: float = typer.Option(300.0, "--timeout", help="Seconds a trial may take before rank 0 records it as timed out and exits with code 124."),
) -> None:
    """A torchrun trial worker (started on every node; see docs/torchrun.md)."""
    from autosync_transfer.errors import AutosyncError, ConfigError

    try:
        if not torchrun:
            raise ConfigError("worker needs --torchrun (the other launchers start their workers "
                              "themselves)")
        if not timeout_s > 0:
            raise ConfigError(f"--timeout must be > 0, got {timeout_s:g}")
        if follow != (results is not None) or follow == (store is not None):
            raise ConfigError("worker --torchrun needs --store, or --follow with --results")
        _run(domain_name, cluster_file, model, strategies, store, follow, results, warmup, iters,
             seed, timeout_s)
    except AutosyncError:
        if os.environ.get("RANK", "0") != "0":
            # rank 0 says it, once: the others leave after it (torchrun ends the job on the
            # first exit, which would otherwise cut rank 0's line)
            time.sleep(_QUIET_RANK_GRACE_S)
            raise typer.Exit(2) from None
        raise


def _run(domain_name, cluster_file, model, strategies, store, follow, results, warmup, iters,  # noqa: ANN001
         seed, timeout_s) -> None:
    import faulthandler
    import signal

    from autosync_transfer.errors import ConfigError
    from autosync_transfer.runtime.trial import Protocol

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # SIGUSR1 dumps every thread's stack to stderr (the worker log)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    workload = None
    if model is not None:
        from autosync_transfer.domains.cluster import Cluster
        from autosync_transfer.domains.workload import load_workload

        if cluster_file is None or domain_name is not None:
            raise ConfigError("--model needs --cluster-file and no --domain")
        wl = load_workload(model).check()
        domain = wl.domain(Cluster.from_file(cluster_file))
        workload = wl.spec
    elif domain_name is None:
        raise ConfigError("give --domain (or --model with --cluster-file)")
    else:
        from autosync_transfer.cli._common import resolve_domain

        domain = resolve_domain(domain_name, cluster_file)
    proto = Protocol(warmup=warmup, iters=iters, timeout_s=timeout_s)
    if follow:
        from autosync_transfer.runtime.worker import follow_queue, torchrun_harness

        harness = torchrun_harness(domain, workload, seed=seed)
        try:
            follow_queue(harness, strategies, results, warmup=warmup, iters=iters,
                         timeout_s=timeout_s, fidelity_steps=proto.fidelity_steps,
                         on_result=lambda row: _say(f"{row['record_id']}: {row['status']}"))
        finally:
            harness.close()
        return
    from autosync_transfer.dataset.torchrun import collect_torchrun

    def on_trial(rec) -> None:  # noqa: ANN001
        what = (f"median {rec.median_s * 1000:.1f} ms/iter" if rec.status == "ok"
                else f"{rec.status}: {rec.error}")
        _say(f"{rec.strategy_id}: {what}")

    collect_torchrun(domain, strategies, store, workload=workload, protocol=proto, seed=seed,
                     on_trial=on_trial)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
