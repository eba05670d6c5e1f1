"""Shared pieces of the research probes: the step simulator's ablation switches as
``--sim-option NAME=VALUE`` overrides of ``StepSimConfig``, pairwise accuracy, and measuring
strategies in rounds on one pool of trial workers. Only research code imports this (the probes
run as scripts from this folder, so ``import _lab`` finds it)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

__all__ = ["pairwise", "sim_options", "interleaved_rounds", "run_on_emulated", "worker_config",
           "worker_entry"]


def pairwise(pred: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(y), 1)
    m = y[i] != y[j]
    return float(np.mean(np.sign(pred[i] - pred[j])[m] == np.sign(y[i] - y[j])[m]))


def sim_options(pairs: list[str], ap: argparse.ArgumentParser) -> dict:
    """``--sim-option NAME=VALUE`` arguments -> overrides of the simulator's constants
    (``StepSimConfig``) or of its model of the runtime (``StepSimVariant``, the ablation
    switches), as true/false or numbers; a bad one is refused in one line by ``ap.error``
    (exit 2). :func:`simulator` splits them."""
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimVariant

    fields = {**StepSimConfig.model_fields, **StepSimVariant.model_fields}
    out: dict = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        field = fields.get(name)
        if not sep or field is None or name in ("host_processes", "host_cores"):
            ap.error(f"--sim-option: {pair!r}: expected NAME=VALUE with NAME a StepSimConfig "
                     "or StepSimVariant field other than host_processes / host_cores")
        if field.annotation is bool:
            if value.lower() not in ("true", "false"):
                ap.error(f"--sim-option: {pair!r}: {name} takes true or false")
            out[name] = value.lower() == "true"
        else:
            try:
                out[name] = float(value)
            except ValueError:
                ap.error(f"--sim-option: {pair!r}: {name} takes a number")
    try:
        _split(out)
    except ValueError as e:
        ap.error(f"--sim-option: {' '.join(str(e).split())[:200]}")
    return out


def _split(options: dict, host: dict | None = None):  # noqa: ANN202
    from autosync_transfer.rankers.stepsim import StepSimConfig, StepSimVariant

    variant = {k: v for k, v in options.items() if k in StepSimVariant.model_fields}
    config = {k: v for k, v in options.items() if k not in variant}
    return StepSimConfig(**(host or {}), **config), StepSimVariant(**variant)


def simulator(domain, profile, calibration, host: dict, options: dict):  # noqa: ANN001, ANN201
    """A StepSimulator of ``domain`` on the emulated ``host`` with the ``options`` of
    :func:`sim_options`."""
    from autosync_transfer.rankers.stepsim import StepSimulator

    config, variant = _split(options, host)
    return StepSimulator(domain, profile, calibration, config, variant=variant)


def interleaved_rounds(domain, launcher: str, strategies: dict,  # noqa: ANN001
                       rounds: int, warmup: int, iters: int) -> dict[str, list[float]]:
    """Every strategy's median step (s; NaN where a trial failed) in each of ``rounds`` rounds,
    the strategies one after another within a round, all in one pool of trial workers."""
    from autosync_transfer.runtime.trial import Protocol, WorkerPool

    measured: dict[str, list[float]] = {k: [] for k in strategies}
    with WorkerPool(domain, launcher, Protocol(warmup=warmup, iters=iters)) as pool:
        for r in range(rounds):
            for name, st in strategies.items():
                res = pool.run(st)
                measured[name].append(res.median_s if res.status == "ok" else float("nan"))
            print(f"# round {r + 1} of {rounds} done", file=sys.stderr, flush=True)
    return measured


def run_on_emulated(cluster, script: str, payload: dict, reply: str,  # noqa: ANN001
                    timeout_s: float = 900.0) -> dict:
    """Run ``python SCRIPT --worker CONFIG`` on every rank of ``cluster`` emulated (one network
    namespace per node, as trial workers run), each rank's CONFIG a JSON file holding
    ``payload`` and its rendezvous (:func:`worker_config` reads it); the JSON rank 0 prints on
    the line starting with ``reply``. The namespaces and the processes are gone on return."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from autosync_transfer.runtime.launch import as_launcher, free_port
    from autosync_transfer.runtime.trial import _worker_env

    launcher = as_launcher("emulated")
    launcher.check()
    master = launcher.start(cluster)
    port = free_port()
    procs: list[subprocess.Popen] = []
    scratch = tempfile.TemporaryDirectory(prefix="probe-")
    try:
        nodes = cluster.rank_nodes()
        for rank in range(cluster.world_size):
            path = Path(scratch.name) / f"rank-{rank}.json"  # may be too long for an argv
            path.write_text(json.dumps({"rank": rank, "world_size": cluster.world_size,
                                        "master_addr": master, "master_port": port, **payload}))
            argv, env = launcher.command(nodes[rank], [sys.executable, script, "--worker",
                                                       str(path)], _worker_env(), port)
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, env=env,
                                          start_new_session=True))
        text = procs[0].communicate(timeout=timeout_s)[0].decode(errors="replace")
        for p in procs[1:]:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        launcher.stop()
        scratch.cleanup()
    for line in text.splitlines():
        if line.startswith(reply):
            return json.loads(line[len(reply):])
    raise SystemExit("rank 0 sent no result")


def worker_config(path: str) -> dict:
    """A rank's config written by :func:`run_on_emulated`."""
    import json
    from pathlib import Path

    return json.loads(Path(path).read_text())


def worker_entry(worker) -> bool:  # noqa: ANN001
    """Run ``worker`` on this rank's config when the script was started as a rank by
    :func:`run_on_emulated` (``SCRIPT --worker CONFIG``); False otherwise."""
    from pathlib import Path

    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the package's checkout
        worker(worker_config(sys.argv[2]))
        return True
    return False
