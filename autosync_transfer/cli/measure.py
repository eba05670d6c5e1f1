"""``autosync-transfer collect`` and ``autosync-transfer run``: real measurements."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Optional

import typer

DEFAULT_STORE_DIR = "datasets/trials"


def _protocol(warmup: int, iters: int, timeout_s: float):  # noqa: ANN202
    from autosync_transfer.runtime.trial import Protocol

    return Protocol(warmup=warmup, iters=iters, timeout_s=timeout_s)


def collect(
    domain_name: str = typer.Argument(..., metavar="DOMAIN", help="e.g. bert-A"),
    trials: Optional[int] = typer.Option(None, "--trials", "-n", help="Collect until the store holds this many trials of DOMAIN (required unless --remeasure)."),
    launcher: str = typer.Option("emulated", "--launcher", help="emulated (network namespaces, needs root) or local."),
    sampler: str = typer.Option("random", "--sampler", help="random (builders, DDP, then sampled) or builders."),
    seed: int = typer.Option(0, "--seed"),
    preset: str = typer.Option("dataset", "--preset", help="Sampler preset for --sampler random (see strategies sample --preset)."),
    store: Optional[str] = typer.Option(None, "--store", help=f"Trial store (JSON Lines); default {DEFAULT_STORE_DIR}/DOMAIN.jsonl."),
    warmup: int = typer.Option(10, "--warmup", min=0, help="Untimed iterations per trial."),
    iters: int = typer.Option(40, "--iters", min=1, help="Timed iterations per trial."),
    reference_every: int = typer.Option(25, "--reference-every", min=0, help="Re-measure the reference strategy every N trials (0: never)."),
    timeout_s: float = typer.Option(300.0, "--timeout", min=1.0, help="Watchdog per trial, seconds."),
    cluster_file: Optional[str] = typer.Option(None, "--cluster-file", help="Use this resource-spec YAML as the cluster."),
    max_foreign_cpu: float = typer.Option(0.05, "--max-foreign-cpu", min=0.01, max=1.0, help="Measure a trial again (when the machine is quiet) if other processes took more than this share of the CPU during it; 1 disables."),
    remeasure: Optional[str] = typer.Option(None, "--remeasure", help="First measure stored trials again: 'unchecked' (no foreign-CPU record), 'disturbed', or both comma-separated. The new records supersede the old ones."),
) -> None:
    """Measure strategies of DOMAIN for real and append them to a trial store (resumable)."""
    from pathlib import Path

    from autosync_transfer.cli._common import out, resolve_domain
    from autosync_transfer.dataset.collect import collect as run_collect
    from autosync_transfer.errors import ConfigError

    if trials is None and remeasure is None:
        raise ConfigError("--trials is required (unless --remeasure is given)")
    if trials is not None and trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {trials}")
    reasons = None
    if remeasure is not None:
        from autosync_transfer.dataset.collect import REMEASURE_REASONS

        reasons = {x.strip() for x in remeasure.split(",") if x.strip()}
        bad = sorted(reasons - set(REMEASURE_REASONS)) or ([] if reasons else [remeasure])
        if bad:
            raise ConfigError(f"--remeasure must be among {', '.join(REMEASURE_REASONS)} "
                              f"(comma-separated), got {bad[0]!r}")
    if sampler not in ("random", "builders"):
        raise ConfigError(f"--sampler must be 'random' or 'builders', got {sampler!r}")
    from autosync_transfer.strategies.sampler import preset as sampler_preset

    sampler_preset(preset)  # an unknown --preset fails before anything is measured
    domain = resolve_domain(domain_name, cluster_file)
    path = Path(store) if store else Path(DEFAULT_STORE_DIR) / f"{domain.name}.jsonl"
    proto = _protocol(warmup, iters, timeout_s)
    if reasons:
        _remeasure(domain, path, reasons, launcher, seed, proto, max_foreign_cpu)
    if trials is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with _trial_progress(f"collect {domain.name}", trials, show_best=True) as on_trial:
        result = run_collect(domain, path, trials=trials, launcher=launcher, sampler=sampler,
                             preset=preset, seed=seed,
                             protocol=proto, reference_every=reference_every, on_trial=on_trial,
                             log_dir=path.parent / "logs" / domain.name,
                             max_foreign_cpu=max_foreign_cpu)
    best = f"{result.best_s * 1000:.1f} ms" if result.best_s else "-"
    out().print(f"{domain.name}: {result.done} trials in {path} ({result.failures} failed), best {best}")


@contextlib.contextmanager
def _trial_progress(title: str, total: int | None, *, show_best: bool) -> Iterator[Callable]:
    """A progress bar on stderr; yields the ``on_trial`` callback of a collection."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosync_transfer.cli._common import err

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=err()) as bar:
        task = bar.add_task(title, total=total, status="starting workers")

        def on_trial(p) -> None:  # noqa: ANN001
            last = p.last
            lat = f"{last.median_s * 1000:.0f} ms" if last and last.median_s else (last.status if last else "-")
            best = (f"  best {p.best_s * 1000:.0f} ms" if p.best_s else "  best -") if show_best else ""
            bar.update(task, total=p.target, completed=p.done,
                       status=f"last {lat}{best}  failures {p.failures}")

        yield on_trial


def _remeasure(domain, path, reasons, launcher, seed, proto, max_foreign_cpu) -> None:  # noqa: ANN001
    """``collect --remeasure``: measure the store's unchecked/disturbed trials again."""
    from autosync_transfer.cli._common import out
    from autosync_transfer.dataset.collect import remeasure as run_remeasure

    with _trial_progress(f"remeasure {domain.name}", None, show_best=False) as on_trial:
        result = run_remeasure(domain, path, reasons=reasons, launcher=launcher, seed=seed,
                               protocol=proto, on_trial=on_trial,
                               log_dir=path.parent / "logs" / domain.name,
                               max_foreign_cpu=max_foreign_cpu)
    skipped = (f"; {result.skipped} measured with another launcher or --warmup/--iters left as "
               f"they are" if result.skipped else "")
    out().print(f"{domain.name}: {result.done} trials measured again in {path} "
                f"({result.failures} failed{skipped})")


def run(
    domain_name: str = typer.Argument(..., metavar="DOMAIN"),
    strategy: str = typer.Option(..., "--strategy", "-s", help="A strategy file (JSON or AutoDist), a builder name, or torch_ddp."),
    launcher: str = typer.Option("emulated", "--launcher", help="emulated or local."),
    warmup: int = typer.Option(10, "--warmup", min=0),
    iters: int = typer.Option(40, "--iters", min=1),
    timeout_s: float = typer.Option(300.0, "--timeout", min=1.0, help="Watchdog per trial, seconds."),
    store: Optional[str] = typer.Option(None, "--store", help="Also append the trial to this store."),
    json_out: bool = typer.Option(False, "--json"),
    cluster_file: Optional[str] = typer.Option(None, "--cluster-file"),
) -> None:
    """Measure one strategy on DOMAIN's cluster."""
    import statistics
    from pathlib import Path

    from autosync_transfer.cli._common import out, print_json, resolve_domain
    from autosync_transfer.dataset.collect import TORCH_DDP, record_for
    from autosync_transfer.runtime.trial import WorkerPool
    from autosync_transfer.strategies.builders import BUILDERS, build
    from autosync_transfer.strategies.validate import validate

    domain = resolve_domain(domain_name, cluster_file)
    if strategy == TORCH_DDP:
        strat = None
    elif strategy in BUILDERS:
        strat = build(strategy, domain)
    else:
        from autosync_transfer.cli.strategies import _load_strategy

        strat = validate(_load_strategy(strategy, domain), domain)
    proto = _protocol(warmup, iters, timeout_s)
    with WorkerPool(domain, launcher, proto) as pool:
        res = pool.run(strat)
    rec = record_for(domain, strat, res, proto, launcher, seed=0,
                     record_id=f"{domain.name}/run/{strat.id if strat else TORCH_DDP}/{res.wall_s:.3f}")
    if store:
        from autosync_transfer.dataset.store import TrialStore

        TrialStore(Path(store)).append(rec)
    if json_out:
        print_json(rec.model_dump())
        return
    if not res.ok:
        out().print(f"[red]{res.status}[/red]: {res.error}")
        raise typer.Exit(1)
    ts = res.iteration_times_s
    cv = statistics.pstdev(ts) / statistics.mean(ts) if len(ts) > 1 else 0.0
    out().print(f"{domain.name} {rec.strategy_kind} ({rec.strategy_id}): median {res.median_s * 1000:.1f} ms/iter "
                f"over {len(ts)} iterations (cv {cv:.1%}); analytical sync estimate "
                f"{(rec.estimated_sync_s or 0) * 1000:.1f} ms")
