"""``autosync-transfer adapt``: transfer a simulator to another domain, evaluate, register."""

from __future__ import annotations

import math
from typing import Any, Optional

import typer

#: ``--method`` values (``auto``: finetune with target trials, else zero-shot)
METHOD_CHOICES: tuple[str, ...] = ("auto", "zero-shot", "finetune", "finetune-head",
                                   "multi-source")
_ROW_LABELS = {"zero-shot": "zero-shot", "adapted": "adapted", "from-scratch": "from scratch"}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.{digits}f}"


def adapt(
    source: str = typer.Option(..., "--source", metavar="DOMAIN", help="Source domain, e.g. bert-A (its registry champion is the starting point)."),
    target: str = typer.Option(..., "--target", metavar="DOMAIN", help="Target domain, e.g. bert-B."),
    method: str = typer.Option("auto", "--method", help=f"One of {', '.join(METHOD_CHOICES)}; auto: finetune with target trials, zero-shot without."),
    shots: Optional[int] = typer.Option(None, "--shots", min=0, help="Target trials to adapt on (default: 20, or all outside the held-out split when fewer)."),
    collect: bool = typer.Option(False, "--collect", help="Measure the target trials first on the emulated target cluster (needs root) and append them to its store."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shot choice and of training."),
    curve: bool = typer.Option(False, "--curve", help="Also run the learning curve (N = 0..200, 3 seeds), log its plot and print it."),
    trials: Optional[str] = typer.Option(None, "--trials", help="A trial store (.jsonl), parquet file or folder; default: the shipped datasets ($AUTOSYNC_DATASETS overrides)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Maximum training epochs (adaptation, and the source when it must be trained)."),
    ranker: str = typer.Option("rnn", "--ranker", help="Ranker trained for the source when it has no champion."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Adapt the source's champion simulator to the target, compare it with zero-shot and
    from-scratch on held-out target trials, register it and promote it if it is better."""
    from autosync_transfer.adapt.workflow import adapt_and_register
    from autosync_transfer.cli._common import err, out, print_json
    from autosync_transfer.errors import ConfigError

    if method not in METHOD_CHOICES:
        raise ConfigError(f"unknown method {method!r} (known: {', '.join(METHOD_CHOICES)})")
    with err().status("adapting", spinner="dots") as status:
        report = adapt_and_register(
            source, target, trials=trials, method=method, shots=shots, seed=seed,
            collect=collect, curve=curve, max_epochs=epochs, source_ranker=ranker,
            on_status=lambda line: status.update(line))
    if json_out:
        print_json(report.to_dict())
        return
    from rich import box
    from rich.table import Table

    res = report.result
    con = out()
    table = Table(title=f"{res.source} -> {res.target}: {res.method} with {res.shots} target "
                        f"trials, seed {res.seed} (held out: {len(res.holdout_ids)} strategies)",
                  box=box.SIMPLE_HEAD)
    for col in ("simulator", "target trials", "pairwise_acc", "top1", "kendall_tau"):
        table.add_column(col, justify="left" if col == "simulator" else "right")
    for row in res.rows():
        label = _ROW_LABELS[row["row"]]
        if row["row"] == "adapted":
            label = f"adapted ({res.method})"
        table.add_row(label, str(row["trials"]), _fmt(row["pairwise_accuracy"]),
                      _fmt(row["top1"]), _fmt(row["kendall_tau"]))
    con.print(table)
    if report.curve is not None:
        lc = report.curve
        ctable = Table(title=f"learning curve on {lc.target} ({lc.method}, held-out pairwise "
                             f"accuracy, mean ± std over {len(lc.seeds)} seeds)",
                       box=box.SIMPLE_HEAD)
        for col in ("target trials", "adapted", "from scratch"):
            ctable.add_column(col, justify="right")
        for r in lc.table():
            ctable.add_row(str(r["shots"]), f"{_fmt(r['adapted_mean'])} ± {_fmt(r['adapted_std'])}",
                           f"{_fmt(r['scratch_mean'])} ± {_fmt(r['scratch_std'])}")
        con.print(ctable)
        if lc.skipped:
            con.print(f"skipped N = {', '.join(map(str, lc.skipped))}: more than the "
                      f"{lc.available} target trials outside the held-out split",
                      markup=False, highlight=False)
    v = report.version
    trained = " (trained and registered now)" if report.source_trained else ""
    verdict = ("promoted to champion" if report.promoted
               else f"champion stays version {report.champion}")
    lines = [
        f"source {report.source_model} version {report.source_version}{trained}",
        f"registered {v.name} version {v.version} (lineage: {report.source_model}/"
        f"{report.source_version}, {res.method}, {res.shots} shots); {verdict}",
        f"MLflow UI: run `autosync-transfer ui`, then Models > {v.name} > version {v.version} "
        f"(tags: lineage and held-out metrics), or Experiments > {report.experiment} > run "
        f"{v.run_id[:8]} (artifacts: plots/{'learning_curve.png, ' if report.curve else ''}"
        f"rank_scatter_heldout.png); store {report.tracking_uri}",
    ]
    if report.collected:
        lines.insert(0, f"measured {len(report.collected)} new target trials")
    for line in lines:
        con.print(line, markup=False, highlight=False)
