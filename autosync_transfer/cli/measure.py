"""``autosync-transfer collect`` and ``autosync-transfer run``: real measurements."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Optional

import typer

from autosync_transfer.cli._choices import CollectSampler, Launcher, SamplerPreset, SearchLauncher
from autosync_transfer.cli._params import (cluster_file_option, iters_option, json_option,
                                           model_option, store_option, timeout_option,
                                           warmup_option)

#: where collect writes by default (autosync_transfer.paths.trials_dir)
DEFAULT_STORE_HELP = ("default: DOMAIN.jsonl in the checkout's datasets/trials, or in "
                      "./autosync-runs/trials when installed ($AUTOSYNC_DATASETS/trials when set)")


def collect(
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. bert-A (or --model with --cluster-file)."),
    count: Optional[int] = typer.Option(None, "--count", "-n", min=1, help="Collect until the store holds this many trials of DOMAIN (required unless --remeasure)."),
    launcher: SearchLauncher = typer.Option(SearchLauncher.emulated, "--launcher", help="emulated (network namespaces, needs root), local, or torchrun (real cluster: torchrun workers you start on every node follow the collection's job queue; the command is printed)."),
    sampler: CollectSampler = typer.Option(CollectSampler.random, "--sampler", help="random (builders, DDP, then sampled) or builders."),
    seed: int = typer.Option(0, "--seed"),
    preset: SamplerPreset = typer.Option(SamplerPreset.dataset, "--preset", help="Sampler preset for --sampler random (see strategies sample --preset)."),
    store: Optional[str] = store_option(f"Trial store (JSON Lines) to write or continue; {DEFAULT_STORE_HELP}."),
    warmup: Optional[int] = warmup_option(),
    iters: Optional[int] = iters_option(),
    reference_every: int = typer.Option(25, "--reference-every", min=0, help="Re-measure the reference strategy every N trials (0: never)."),
    timeout_s: Optional[float] = timeout_option(),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    max_foreign_cpu: float = typer.Option(0.05, "--max-foreign-cpu", min=0.01, max=1.0, help="Measure a trial again (when the machine is quiet) if other processes took more than this share of the CPU during it; 1 disables."),
    remeasure: Optional[str] = typer.Option(None, "--remeasure", help="First measure stored trials again: 'unchecked' (no foreign-CPU record), 'disturbed', or both comma-separated. The new records supersede the old ones."),
    json_out: bool = json_option("Print what was measured as JSON."),
) -> None:
    """Measure strategies of DOMAIN (or of your --model on --cluster-file) for real and append
    them to a trial store (resumable)."""
    from pathlib import Path

    from autosync_transfer.cli._common import err, out, print_json, resolve_target
    from autosync_transfer.cli._params import protocol
    from autosync_transfer.dataset.collect import collect as run_collect
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.paths import trials_dir
    from autosync_transfer.runtime.launch import TorchrunLauncher, get_launcher

    if count is None and remeasure is None:
        raise ConfigError("-n/--count is required (unless --remeasure is given)")
    reasons = _remeasure_reasons(remeasure)
    if reasons and launcher == SearchLauncher.torchrun:
        raise ConfigError("--remeasure runs with --launcher emulated or local, not torchrun")
    domain, workload = resolve_target(domain_name, cluster_file, model)
    get_launcher(launcher.value)().check()  # before anything is written
    path = Path(store) if store else trials_dir() / f"{domain.name}.jsonl"
    proto = protocol(warmup, iters, timeout_s)
    report: dict[str, Any] = {"domain": domain.name, "store": str(path)}
    if workload is not None:
        report["workload"] = workload
    if reasons:
        report["remeasured"] = _remeasure(domain, path, reasons, launcher.value, seed, proto,
                                          max_foreign_cpu, json_out, workload)
    if count is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if launcher == SearchLauncher.torchrun:
            command = TorchrunLauncher().worker_command(domain, proto, state_path=path,
                                                        cluster_file=cluster_file,
                                                        workload=workload, seed=seed)
            err().print(f"start the trial workers on every node (node 0 runs this "
                        f"collection):\n  {command}", markup=False, highlight=False,
                        soft_wrap=True)
        with _trial_progress(f"collect {domain.name}", count, show_best=True,
                             transient=json_out) as on_trial:
            result = run_collect(domain, path, trials=count, launcher=launcher.value,
                                 sampler=sampler.value, preset=preset.value, seed=seed,
                                 protocol=proto, reference_every=reference_every,
                                 on_trial=on_trial, log_dir=path.parent / "logs" / domain.name,
                                 max_foreign_cpu=max_foreign_cpu, workload=workload)
        report["collected"] = {"trials": result.done, "failures": result.failures,
                               "best_s": result.best_s}
        if not json_out:
            best = f"{result.best_s * 1000:.1f} ms" if result.best_s else "-"
            out().print(f"{domain.name}: {result.done} trials in {path} ({result.failures} "
                        f"failed), best {best}")
    if json_out:
        print_json({**report, "protocol": proto.model_dump()})


def _remeasure_reasons(remeasure: str | None) -> set[str] | None:
    """The reasons of ``--remeasure`` (comma-separated), checked."""
    if remeasure is None:
        return None
    from autosync_transfer.dataset.collect import REMEASURE_REASONS
    from autosync_transfer.errors import ConfigError

    reasons = {x.strip() for x in remeasure.split(",") if x.strip()}
    bad = sorted(reasons - set(REMEASURE_REASONS)) or ([] if reasons else [remeasure])
    if bad:
        raise ConfigError(f"--remeasure must be among {', '.join(REMEASURE_REASONS)} "
                          f"(comma-separated), got {bad[0]!r}")
    return reasons


@contextlib.contextmanager
def _trial_progress(title: str, total: int | None, *, show_best: bool,
                    transient: bool = False) -> Iterator[Callable]:
    """A progress bar on stderr; yields the ``on_trial`` callback of a collection."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosync_transfer.cli._common import err

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=err(),
                  transient=transient) as bar:
        task = bar.add_task(title, total=total, status="starting workers")

        def on_trial(p) -> None:  # noqa: ANN001
            last = p.last
            lat = f"{last.median_s * 1000:.0f} ms" if last and last.median_s else (last.status if last else "-")
            best = (f"  best {p.best_s * 1000:.0f} ms" if p.best_s else "  best -") if show_best else ""
            bar.update(task, total=p.target, completed=p.done,
                       status=f"last {lat}{best}  failures {p.failures}")

        yield on_trial


def _remeasure(domain, path, reasons, launcher, seed, proto, max_foreign_cpu,  # noqa: ANN001
               quiet: bool, workload: str | None = None) -> dict[str, int]:
    """``collect --remeasure``: measure the store's unchecked/disturbed trials again."""
    from autosync_transfer.cli._common import out
    from autosync_transfer.dataset.collect import remeasure as run_remeasure

    with _trial_progress(f"remeasure {domain.name}", None, show_best=False,
                         transient=quiet) as on_trial:
        result = run_remeasure(domain, path, reasons=reasons, launcher=launcher, seed=seed,
                               protocol=proto, on_trial=on_trial,
                               log_dir=path.parent / "logs" / domain.name,
                               max_foreign_cpu=max_foreign_cpu, workload=workload)
    if not quiet:
        skipped = (f"; {result.skipped} measured with another launcher or --warmup/--iters left "
                   f"as they are" if result.skipped else "")
        out().print(f"{domain.name}: {result.done} trials measured again in {path} "
                    f"({result.failures} failed{skipped})")
    return {"trials": result.done, "failures": result.failures, "skipped": result.skipped}


def run(
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. bert-A (or --model with --cluster-file)."),
    strategy: str = typer.Option(..., "--strategy", "-s", help="A strategy file (JSON or AutoDist), a builder name, or torch_ddp (torch's own DistributedDataParallel)."),
    launcher: Launcher = typer.Option(Launcher.emulated, "--launcher", help="emulated (network namespaces, needs root) or local."),
    warmup: Optional[int] = warmup_option(),
    iters: Optional[int] = iters_option(),
    timeout_s: Optional[float] = timeout_option(),
    store: Optional[str] = store_option("Also append the trial to this trial store."),
    json_out: bool = json_option("Print the trial record as JSON."),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
) -> None:
    """Measure one strategy on DOMAIN's cluster (or of your --model on --cluster-file)."""
    import statistics
    from pathlib import Path

    from autosync_transfer.cli._common import load_strategy, out, print_json, resolve_target
    from autosync_transfer.cli._params import protocol
    from autosync_transfer.dataset.collect import record_for
    from autosync_transfer.runtime.launch import get_launcher, open_pool
    from autosync_transfer.strategies import TORCH_DDP
    from autosync_transfer.strategies.builders import BUILDERS, build
    from autosync_transfer.strategies.validate import validate

    domain, workload = resolve_target(domain_name, cluster_file, model)
    if strategy == TORCH_DDP:
        strat = None
    elif strategy in BUILDERS:
        strat = build(strategy, domain)
    else:
        strat = validate(load_strategy(strategy, domain), domain)
    proto = protocol(warmup, iters, timeout_s)
    get_launcher(launcher.value)().check()
    with open_pool(domain, launcher.value, proto, workload=workload) as pool:
        res = pool.run(strat)
    rec = record_for(domain, strat, res, proto, launcher.value, seed=0,
                     record_id=f"{domain.name}/run/{strat.id if strat else TORCH_DDP}/{res.wall_s:.3f}")
    if store:
        from autosync_transfer.dataset.store import TrialStore

        trial_store = TrialStore(Path(store))
        trial_store.append(rec)
        trial_store.record_domain(domain)  # the domain travels with its trials
    if json_out:
        print_json(rec.model_dump())
        return
    if not res.ok:
        from rich.markup import escape

        out().print(f"[red]{res.status}[/red]: {escape(str(res.error))}")
        raise typer.Exit(1)
    ts = res.iteration_times_s
    cv = statistics.pstdev(ts) / statistics.mean(ts) if len(ts) > 1 else 0.0
    out().print(f"{domain.name} {rec.strategy_kind} ({rec.strategy_id}): median {res.median_s * 1000:.1f} ms/iter "
                f"over {len(ts)} iterations (cv {cv:.1%}); analytical sync estimate "
                f"{(rec.estimated_sync_s or 0) * 1000:.1f} ms")
