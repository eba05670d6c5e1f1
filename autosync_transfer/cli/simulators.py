"""``autosync-transfer train|evaluate|ui`` and ``autosync-transfer registry list|show|promote``."""

from __future__ import annotations

from typing import Any, Optional

import typer

from autosync_transfer.cli._choices import Metric, RankerKind
from autosync_transfer.cli._output import fmt_float as _fmt
from autosync_transfer.cli._params import (Command, cluster_file_option, data_option,
                                           json_option, model_option)

#: metrics shown in tables, in this order (regret: lower is better; others: higher)
TABLE_METRICS: tuple[str, ...] = tuple(m.value for m in Metric)

registry_app = typer.Typer(help="The MLflow registry of trained simulators (one model per domain).",
                           no_args_is_help=True)


def _domain_trials(domain_name: str | None, trials: str | None, model: str | None = None,
                   cluster_file: str | None = None, argument: str = "DOMAIN"
                   ) -> tuple[Any, Any]:
    """(the Domain, its ok trials): the workload ``--model`` names on ``--cluster-file``, a
    catalog domain (on ``--cluster-file``), or a domain the trial stores of ``trials`` describe
    (a workload domain measured before); no trials for the domain is an UnknownNameError."""
    from autosync_transfer.dataset.loader import default_datasets_dir, find_domain, load_trials
    from autosync_transfer.errors import UnknownNameError

    if model is not None or cluster_file is not None or domain_name is None:
        from autosync_transfer.cli._common import resolve_target

        domain, _ = resolve_target(domain_name, cluster_file, model, argument=argument)
    else:
        domain = find_domain(domain_name, trials)
    df = load_trials(trials)
    sub = df[df["domain"] == domain.name] if len(df) else df
    if not len(sub):
        known = sorted(set(df["domain"])) if len(df) else []
        where = trials or str(default_datasets_dir())
        raise UnknownNameError(f"no ok trials for domain {domain.name!r} in {where} (domains "
                               f"with trials: {', '.join(known[:20]) or 'none'})")
    return domain, sub.reset_index(drop=True)


def train(
    domain_name: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="e.g. bert-3l-A, a workload domain measured into --data, or --model with --cluster-file."),
    ranker: RankerKind = typer.Option(RankerKind.rnn, "--kind", help="Simulator kind to train."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Train one simulator per seed 0..N-1."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Maximum epochs (default: the trainer's, with early stopping)."),
    data: Optional[str] = data_option(),
    metric: Metric = typer.Option(Metric.pairwise_acc, "--metric", help="Test metric that picks the champion (regret: lower is better)."),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    json_out: bool = json_option(),
) -> None:
    """Train simulators of DOMAIN (one per seed), register each, promote the best if better."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosync_transfer.cli._common import err, out, print_json
    from autosync_transfer.registry import models

    kind, key = ranker.value, metric.value
    domain, df = _domain_trials(domain_name, data, model, cluster_file)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=err(),
                  transient=json_out) as bar:
        task = bar.add_task(f"train {kind} on {domain.name}", total=seeds,
                            status="featurizing trials")

        def on_seed(seed: int, info: Any, _out: Any) -> None:
            bar.update(task, completed=seed + 1,
                       status=f"seed {seed} -> version {info.version}, {key} "
                              f"{_fmt(info.metrics.get(key))}")

        report = models.train_and_register(kind, domain, df, seeds=range(seeds),
                                           max_epochs=epochs, metric=key,
                                           trials_source=data or "", on_seed=on_seed)
    if json_out:
        print_json(report.to_dict())
        return
    from rich import box
    from rich.table import Table

    table = Table(title=f"{kind} on {domain.name}: test metrics over {seeds} seed(s)",
                  box=box.SIMPLE_HEAD)
    table.add_column("metric")
    table.add_column("mean ± std", justify="right")
    summary = report.summary()
    for name in TABLE_METRICS:
        if name in summary:
            table.add_row(name, f"{summary[name]['mean']:.3f} ± {summary[name]['std']:.3f}")
    con = out()
    con.print(table)
    best = report.best.version
    verdict = ("promoted to champion" if report.promoted
               else f"champion stays version {report.champion}")
    from autosync_transfer.registry.workflows import promotion_note

    note = promotion_note(best.name, best.version)
    if note:
        verdict += f" ({note})"
    con.print(f"registered {report.name} versions "
              f"{', '.join(r.version.version for r in report.runs)}; best version {best.version} "
              f"({key} {_fmt(best.metrics.get(key))}) {verdict}",
              markup=False, highlight=False)


def evaluate(
    on: Optional[str] = typer.Argument(None, metavar="[DOMAIN]", help="Domain whose trials to score (or --model with --cluster-file)."),
    model_uri: str = typer.Option(..., "--simulator", metavar="MODEL_URI",
                                  help="models:/autosync-bert-B@champion, models:/NAME/3, a "
                                       "registered name or a domain name (its champion)."),
    data: Optional[str] = data_option(),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    json_out: bool = json_option(),
) -> None:
    """Ranking metrics of a registered --simulator on every measured strategy of DOMAIN."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.registry import models

    domain, df = _domain_trials(on, data, model, cluster_file)
    info = models.resolve(model_uri)
    metrics = models.evaluate_registered(info.model_uri, domain, df)
    from autosync_transfer.dataset.repeat import repeat_evaluation
    from autosync_transfer.registry.flavor import load_simulator

    repeat = repeat_evaluation(load_simulator(info.model_uri), domain, data)
    if repeat is not None:
        metrics.update({f"repeat_{k}": float(repeat[k]) for k in
                        ("pairs", "pairwise", "resolved_pairs", "pairwise_resolved",
                         "pairwise_resolved_low", "pairwise_resolved_high",
                         "top1_regret", "top1_regret_resolved")})
    if json_out:
        print_json({"model": info.model_uri, "on": domain.name, "metrics": metrics})
        return
    from rich import box
    from rich.table import Table

    table = Table(title=f"{info.name} version {info.version} ({info.tags.get('ranker_kind', '?')}, "
                        f"trained on {info.tags.get('domain', '?')}) on {domain.name}: "
                        f"{int(metrics['strategies'])} strategies", box=box.SIMPLE_HEAD)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in TABLE_METRICS:
        table.add_row(key, _fmt(metrics.get(key)))
    for key in ("repeat_pairwise", "repeat_pairwise_resolved", "repeat_top1_regret",
                "repeat_top1_regret_resolved"):
        if key in metrics:
            value = _fmt(metrics[key])
            if key == "repeat_pairwise_resolved":  # with its 95 % interval over strategies
                value += (f" [{_fmt(metrics.get(key + '_low'))}, "
                          f"{_fmt(metrics.get(key + '_high'))}]")
            table.add_row(key, value)
    out().print(table)
    if repeat is not None:
        out().print(f"repeat_*: on {repeat['strategies']} re-measured strategies of "
                    f"{domain.name} ({int(metrics['repeat_resolved_pairs'])} of "
                    f"{int(metrics['repeat_pairs'])} pairs resolved by the repeat runs)",
                    markup=False, highlight=False)


def ui(
    port: int = typer.Option(5000, "--port", min=1, max=65535),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command instead of running it."),
    compare: Optional[str] = typer.Option(
        None, "--compare", metavar="MODEL",
        help="Also print the addresses that compare versions of MODEL (a registered model or a "
             "domain) side by side: metrics, lineage and plots."),
    versions: Optional[str] = typer.Option(
        None, "--versions", metavar="V1,V2", help="Versions for --compare (default: the two newest)."),
) -> None:
    """Open the MLflow UI on the registry (127.0.0.1 only)."""
    import os
    import shlex
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from autosync_transfer.cli._common import out
    from autosync_transfer.registry import store

    uri = store.tracking_uri()
    if uri.startswith(("http://", "https://")):
        out().print(f"the registry is a tracking server: open {uri}", markup=False, highlight=False)
        return
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):  # relative path
        uri = f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    elif "://" not in uri and ":" not in uri.split("/")[0]:  # a local folder (file store)
        uri = str(Path(uri).resolve())
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
           "--host", "127.0.0.1", "--port", str(port)]
    root = store.artifact_root()
    if root:
        cmd += ["--default-artifact-root", root]
    links: dict[str, str] = {}
    if compare:
        from autosync_transfer.registry.models import compare_links

        chosen = [v.strip() for v in versions.split(",") if v.strip()] if versions else None
        links = compare_links(_model_name(compare), chosen, f"http://127.0.0.1:{port}")
    elif versions:
        from autosync_transfer.errors import ConfigError

        raise ConfigError(f"--versions {versions!r} needs --compare MODEL")
    if dry_run:
        out().print(shlex.join(cmd), markup=False, highlight=False, soft_wrap=True)
        for url in links.values():
            out().print(url, markup=False, highlight=False, soft_wrap=True)
        return
    store.configure()  # creates the local folders the UI expects
    if links:
        out().print(f"compare versions: {links['versions']}", markup=False, highlight=False,
                    soft_wrap=True)
        out().print(f"compare in charts (metrics and plots): {links['charts']}", markup=False,
                    highlight=False, soft_wrap=True)
    out().print(f"MLflow UI on http://127.0.0.1:{port} (store {uri}); Ctrl-C stops it",
                markup=False, highlight=False)
    # python -m (and the server's workers, which put their folder on sys.path) would import
    # modules from the caller's folder first: PYTHONSAFEPATH, and a private empty folder to run in
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONSAFEPATH": "1"}
    with tempfile.TemporaryDirectory(prefix="autosync-ui-") as home:
        code = subprocess.call(cmd, env=env, cwd=home)
    if code:
        raise typer.Exit(code)


@registry_app.command("list", cls=Command)
def registry_list(json_out: bool = json_option()) -> None:
    """One row per registered model: versions, champion, its ranker and test metrics."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.registry import models, store

    rows = models.list_models()
    if json_out:
        print_json(rows)
        return
    if not rows:
        out().print(f"no registered simulators in {store.tracking_uri()}", markup=False,
                    highlight=False)
        return
    from rich import box
    from rich.table import Table

    table = Table(title=f"registered simulators in {store.tracking_uri()}", box=box.SIMPLE_HEAD)
    for col in ("model", "domain", "versions", "champion", "ranker", "pairwise_acc", "kendall_tau",
                "top1"):
        table.add_column(col, no_wrap=col == "model")
    for r in rows:
        cm = r["champion_metrics"]
        table.add_row(r["name"], r["domain"], str(r["versions"]), r["champion"] or "-",
                      r["champion_kind"] or "-", _fmt(cm.get("pairwise_acc")),
                      _fmt(cm.get("kendall_tau")), _fmt(cm.get("top1")))
    out().print(table)


def _model_name(name: str) -> str:
    from autosync_transfer.registry.models import registered_name

    return name if name.startswith("autosync-") else registered_name(name)


@registry_app.command("show", cls=Command)
def registry_show(
    name: str = typer.Argument(..., metavar="NAME", help="Registered model (autosync-bert-B) or domain (bert-B)."),
    json_out: bool = json_option(),
) -> None:
    """Every version of a registered model: aliases, ranker, provenance and test metrics."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.registry import models

    info = models.describe_model(_model_name(name))
    if json_out:
        print_json(info)
        return
    from rich import box
    from rich.table import Table

    con = out()
    from rich.markup import escape

    con.print(f"[bold]{escape(str(info['name']))}[/bold]: {escape(str(info['description']))}",
              highlight=False)
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("version", "aliases", "ranker", "trials", "seed", "source", *TABLE_METRICS, "run"):
        table.add_column(col, no_wrap=True)
    for v in info["versions"]:
        t, mtr = v["tags"], v["metrics"]
        source = (f"{t['source_model']}/{t.get('source_version', '?')} {t.get('method', '')} "
                  f"{t.get('shots', '')}".strip() if t.get("source_model") else "-")
        table.add_row(v["version"], ",".join(v["aliases"]) or "-", t.get("ranker_kind", "-"),
                      t.get("trial_count") or "-", t.get("seed") or "-", source,
                      *(_fmt(mtr.get(k)) for k in TABLE_METRICS), v["run_id"][:8])
    con.print(table)


@registry_app.command("promote", cls=Command)
def registry_promote(
    name: str = typer.Argument(..., metavar="NAME", help="Registered model (autosync-bert-B) or domain (bert-B)."),
    version: str = typer.Argument(..., metavar="VERSION"),
    alias: str = typer.Option("champion", "--alias", help="The alias to point at VERSION."),
    json_out: bool = json_option(),
) -> None:
    """Point an alias (default: champion) at a version."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.registry import models

    info = models.promote(_model_name(name), version, alias)
    if json_out:
        print_json({"model": info.name, "alias": alias, "version": info.version,
                    "model_uri": f"models:/{info.name}@{alias}"})
        return
    out().print(f"{info.name}@{alias} -> version {info.version}", markup=False, highlight=False)
