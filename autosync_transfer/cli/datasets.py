"""``autosync-transfer datasets list|show|import-autosync``."""

from __future__ import annotations

import math
from typing import Any, Optional

import typer

from autosync_transfer.cli._params import Command, data_option, json_option

app = typer.Typer(help="Trial datasets: what was measured, on which domains, and how.",
                  no_args_is_help=True)


def _s(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _print_table(table) -> None:  # noqa: ANN001 - rich Table
    """Print at the table's natural width, even past the console's (no cut-off names)."""
    from rich.console import Console
    from rich.measure import Measurement

    from autosync_transfer.cli._common import out

    con = out()
    natural = Measurement.get(con, con.options.update(width=1 << 12), table).maximum
    if natural > con.width:
        con = Console(file=con.file, width=natural, soft_wrap=True)
    con.print(table)


def _nan_to_none(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


@app.command("list", cls=Command)
def list_cmd(
    path: Optional[str] = data_option(),
    json_out: bool = json_option(),
) -> None:
    """One row per domain: trials by status, median runtime, best/worst spread."""
    from rich import box
    from rich.table import Table

    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.dataset.loader import default_datasets_dir, list_datasets

    df = list_datasets(path)
    rows = [_nan_to_none(r) for r in df.to_dict(orient="records")]
    if json_out:
        print_json(rows)
        return
    where = path or str(default_datasets_dir())
    if not rows:
        out().print(f"no trials in {where}", markup=False, highlight=False)
        return
    from rich.markup import escape

    table = Table(title=escape(f"trial datasets in {where}"), box=box.SIMPLE_HEAD)
    table.add_column("domain", no_wrap=True)
    for col in ("ok", "failed", "timeout", "strategies", "refs", "median s", "best s", "worst s",
                "spread"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(escape(str(r["domain"])), str(r["ok"]), str(r["failed"]), str(r["timeout"]),
                      str(r["strategies"]), str(r["references"]), _s(r["median_s"]),
                      _s(r["best_s"]), _s(r["worst_s"]),
                      f"{_s(r['spread'], 2)}x" if r["spread"] is not None else "-")
    _print_table(table)


@app.command("show", cls=Command)
def show(
    domain: str = typer.Argument(..., metavar="DOMAIN", help="Domain name as in `datasets list`."),
    path: Optional[str] = data_option(),
    top: int = typer.Option(10, "--top", min=1, help="How many of the fastest strategies."),
    json_out: bool = json_option(),
) -> None:
    """Protocol, counts, the fastest strategies and the noise of reference re-measurements."""
    import json

    from rich import box
    from rich.table import Table

    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.dataset.loader import describe_domain

    info = describe_domain(domain, path, top=top)
    info["pairwise_ceiling"] = pairwise_ceiling(info)
    reps = _repeatability(domain, path)
    info["repeatability"] = reps[0] if reps else None
    info["repeatability_other_machines"] = reps[1:]
    if json_out:
        print_json(info)
        return
    from rich.markup import escape

    con = out()
    c = info["counts"]
    con.print(f"[bold]{escape(domain)}[/bold]: {info['trials']} trials (ok {c['ok']}, failed "
              f"{c['failed']}, timeout {c['timeout']}), {info['strategies']} strategies measured, "
              f"{info['references']} reference re-measurements", highlight=False)
    con.print(f"model {', '.join(info['models'])}; cluster {', '.join(info['clusters'])} "
              f"(fingerprint {', '.join(info['cluster_fingerprints']) or '-'}); launcher "
              f"{', '.join(info['launchers'])}", markup=False, highlight=False)
    for p in info["protocols"]:
        con.print(f"protocol {json.dumps(p['protocol'], sort_keys=True)}: {p['trials']} trials",
                  markup=False, highlight=False)
    if info["fastest"]:
        table = Table(title=f"fastest {len(info['fastest'])} strategies "
                            f"(best {_s(info['best_s'])} s, worst {_s(info['worst_s'])} s)",
                      box=box.SIMPLE_HEAD)
        table.add_column("#", justify="right")
        table.add_column("strategy", overflow="fold")
        table.add_column("kind")
        table.add_column("median s", justify="right")
        table.add_column("measurements", justify="right")
        table.add_column("grad error", justify="right")
        for i, r in enumerate(info["fastest"], 1):
            err = r.get("fidelity_rel_error")
            table.add_row(str(i), escape(str(r["strategy_id"])), escape(str(r["kind"])),
                          _s(r["median_s"]), str(r["measurements"]),
                          "-" if err is None else f"{err:.2%}")
        _print_table(table)
    noise = info["reference_noise"]
    if noise:
        con.print(f"reference noise: {noise['strategies']} strategies re-measured "
                  f"({noise['measurements']} measurements), median CV "
                  f"{noise['median_cv'] * 100:.1f}% (robust "
                  f"{noise['median_robust_cv'] * 100:.1f}%), max CV {noise['max_cv'] * 100:.1f}%, "
                  f"max range {noise['max_relative_range'] * 100:.1f}% of the median",
                  highlight=False)
        ceiling = info["pairwise_ceiling"]
        if ceiling is not None:
            con.print(f"pairwise-accuracy ceiling at this noise: {ceiling:.3f} (what a perfect "
                      "simulator can expect against these measurements)", highlight=False)
    else:
        con.print("reference noise: no reference re-measurements", highlight=False)
    rep = info["repeatability"]
    if rep is None:
        con.print("repeatability: no repeat runs (benchmarks/repeatability.py measures them)",
                  highlight=False)
        return
    for rep in [rep, *info.get("repeatability_other_machines", [])]:
        _print_repeatability(con, rep)


def _sizes(rep: dict) -> str:
    """``(runs of 20, 20 and 39) `` where the complete runs measured different numbers of
    strategies, else nothing."""
    sizes = [str(n) for n in (rep.get("run_strategies") or {}).values()]
    if len(set(sizes)) < 2:
        return ""
    return f"(runs of {', '.join(sizes[:-1])} and {sizes[-1]}) "


def _print_repeatability(con: Any, rep: dict) -> None:
    """The lines of one machine type's repeat runs."""
    import json

    from autosync_transfer.dataset.repeat import MIN_ROUNDS

    on = f" on {rep['processor']}" if rep.get("processor") else ""
    con.print(f"repeatability{on}: runs {', '.join(rep['runs'])} ({len(rep['complete_runs'])} "
              f"complete; protocol {json.dumps(rep['protocol'], sort_keys=True)}; "
              f"{rep['machine_s'] / 60:.0f} min of machine time); {rep['strategies']} strategies "
              f"{_sizes(rep)}x {rep['rounds']} rounds", markup=False, highlight=False)
    if "pairs" in rep:
        guard = ("; no run orders it the other way" if len(rep["complete_runs"]) > 1 else "")
        shared = (f"measured in {MIN_ROUNDS} rounds together, "
                  if len(set(rep["run_strategies"].values())) > 1 else "")
        con.print(f"  {rep['resolved_pairs']} of {rep['pairs']} pairs {shared}resolved (95 % "
                  f"interval of the per-round ratio excludes 1{guard})", markup=False,
                  highlight=False)
    for k, pair in enumerate(rep.get("agreements", [])):
        if pair["agreement"] is None:
            continue
        ceiling = (f"; noise ceiling (all {rep['ceiling_pairs']} pairs, run against run) "
                   f"{rep['noise_ceiling']:.3f}" if k == 0 and rep["noise_ceiling"] is not None
                   else "")
        con.print(f"  runs {pair['runs'][0]} and {pair['runs'][1]} order alike "
                  f"{pair['agreement']:.3f} of the {pair['both_resolved']} pairs both "
                  f"resolve{ceiling}", markup=False, highlight=False)
    for phys in rep.get("run_physics", []):
        costs = "".join(f", {what} {1e6 * phys[key]:.0f} us" for what, key in (
            ("PS piece", "ps_piece_s"), ("per collective", "ar_collective_s"))
            if phys[key] is not None and math.isfinite(phys[key]))
        con.print(f"  physics measured with run {phys['run']}: calibration {phys['calibration']}"
                  f"{costs}; profile {phys['profile']} ({phys['folder']})", markup=False,
                  highlight=False)


def _repeatability(domain: str, path: str | None) -> list[dict]:
    """The summaries of the repeat runs beside ``domain``'s store in ``path``, one per machine
    type (the type of the first run first); empty when there are none."""
    from autosync_transfer.dataset.loader import dataset_files
    from autosync_transfer.dataset.repeat import load_repeatability, repeat_processors

    for f in dataset_files(path):
        if f.suffix == ".jsonl" and f.stem == domain:
            reps = [load_repeatability(f, domain, processor=p)
                    for p in repeat_processors(f, domain)]
            found = [{**r.summary(), "run_physics": _run_physics(f, domain, r)}
                     for r in reps if r is not None]
            if found:
                return found
    return []


def _run_physics(store: Any, domain: str, rep: Any) -> list[dict]:
    """The physics measured with each of ``rep``'s runs (``benchmarks/repeatability.py
    --physics``): when, and the calibration's per-piece and per-collective costs; nothing where
    no run has physics or the store's domain cannot be resolved (its repeat runs still show)."""
    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.dataset.repeat import run_physics, run_physics_dir
    from autosync_transfer.errors import AutosyncError

    if not any(run_physics_dir(store, r).is_dir() for r in rep.runs):
        return []
    try:
        dom = find_domain(domain, store)
    except AutosyncError:
        return []
    out = []
    for run in rep.runs:
        phys = run_physics(store, dom, run)
        if phys is not None:
            prof, cal = phys
            out.append({"run": run, "calibration": cal.created_at, "profile": prof.created_at,
                        "ps_piece_s": cal.ps_piece_s, "ar_collective_s": cal.ar_collective_s,
                        "folder": str(run_physics_dir(store, run))})
    return out


@app.command("import-autosync", cls=Command)
def import_autosync_cmd(
    root: str = typer.Argument(..., metavar="ROOT", help="AutoSync dataset folder."),
    out_path: str = typer.Option(..., "--store", metavar="PATH", help="Trial store (.jsonl) to append to."),
    json_out: bool = json_option("Print the report as JSON."),
) -> None:
    """Import AutoSync's measured AutoDist strategies (v1 or v2 layout) into a trial store."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.dataset.autosync_import import import_autosync
    from autosync_transfer.dataset.store import TrialStore

    report = import_autosync(root, TrialStore(out_path))
    if json_out:
        print_json(report.to_dict())
        return
    con = out()
    con.print(f"imported {report.imported} trials from {report.folders} folders into {out_path} "
              f"({report.duplicates} already there, {report.skipped} skipped: "
              f"{report.missing_runtime} without runtime, {report.bad_runtime} bad runtime, "
              f"{report.bad_strategy} bad strategy, {report.bad_spec} bad resource spec)",
              markup=False, highlight=False)
    for domain, n in sorted(report.per_domain.items()):
        con.print(f"  {domain}: {n}", markup=False, highlight=False)
    for p in report.problems:
        con.print(f"  skipped {p}", markup=False, highlight=False)


@app.command("compact", cls=Command)
def compact_cmd(
    path: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Folder of trial stores (*.jsonl) to read; default: the checkout's datasets/trials, or ./autosync-runs/trials when installed ($AUTOSYNC_DATASETS/trials when set)."),
    out: Optional[str] = typer.Option(None, "--out", metavar="PATH", help="Folder for one parquet file per store; default: parquet/ beside the default --data folder."),
    json_out: bool = json_option("Print the files written as JSON."),
) -> None:
    """Write every trial store as parquet (for shipping; the loader reads both, once per trial)."""
    from pathlib import Path

    from autosync_transfer.cli._common import print_json
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.errors import SpecError
    from autosync_transfer.paths import parquet_dir, trials_dir

    src = Path(path) if path is not None else trials_dir()
    dst = Path(out) if out is not None else parquet_dir()
    stores = sorted(src.glob("*.jsonl")) if src.is_dir() else []
    if not stores:
        raise SpecError(f"--data {str(src)!r}: no trial stores (*.jsonl) in it")
    dst.mkdir(parents=True, exist_ok=True)
    written = []
    for p in stores:
        target = TrialStore(p).compact(dst / f"{p.stem}.parquet")
        written.append({"store": str(p), "parquet": str(target)})
        if not json_out:
            typer.echo(f"{p} -> {target}")
    if json_out:
        print_json(written)


@app.command("repair", cls=Command)
def repair_cmd(
    store: str = typer.Argument(..., metavar="STORE", help="The trial store (.jsonl) to repair."),
    json_out: bool = json_option("Print what was moved as JSON."),
) -> None:
    """Move the lines of STORE that are not valid trial records to STORE.bad.jsonl (the store is
    rewritten atomically, under its lock) and say which."""
    from pathlib import Path

    from autosync_transfer.cli._common import print_json
    from autosync_transfer.dataset.store import TrialStore
    from autosync_transfer.errors import SpecError

    path = Path(store)
    if not path.is_file():
        raise SpecError(f"STORE {store!r}: no such trial store")
    report = TrialStore(path).repair()
    if json_out:
        print_json({"store": str(report.path), "bad_file": str(report.bad_path),
                    "moved_lines": list(report.moved), "kept": report.kept})
        return
    if not report.moved:
        typer.echo(f"{report.path}: no bad lines ({report.kept} records)")
        return
    lines = ", ".join(str(n) for n in report.moved)
    typer.echo(f"{report.path}: moved {len(report.moved)} bad line(s) (line {lines}) to "
               f"{report.bad_path}; {report.kept} records kept")


def pairwise_ceiling(info: dict[str, Any]) -> float | None:
    """The noise ceiling of pairwise accuracy (:func:`~autosync_transfer.rankers.metrics.
    noise_ceiling`) of a :func:`describe_domain` result: its strategies' runtimes at the median
    robust CV of its reference re-measurements; None without re-measurements or two distinct
    runtimes."""
    from autosync_transfer.rankers.metrics import noise_ceiling

    noise = info.get("reference_noise")
    runtimes = info.get("runtimes_s") or []
    if not noise or len(runtimes) < 2:
        return None
    value = noise_ceiling(runtimes, float(noise["median_robust_cv"]))
    return value if math.isfinite(value) else None
