"""``autosync-transfer adapt``: transfer a simulator to another domain, evaluate, register."""

from __future__ import annotations

from typing import Any, Optional

import typer

from autosync_transfer.cli._choices import AdaptMethod, RankerKind
from autosync_transfer.cli._params import (cluster_file_option, data_option, json_option,
                                           model_option)

_ROW_LABELS = {"zero-shot": "zero-shot", "adapted": "adapted", "from-scratch": "from scratch"}


def adapt(
    source: str = typer.Option(..., "--source", metavar="DOMAIN|MODEL_URI", help="Source domain, e.g. bert-A (its registry champion is the starting point), or a registered simulator: models:/NAME@ALIAS or models:/NAME/VERSION."),
    target: Optional[str] = typer.Option(None, "--target", metavar="DOMAIN", help="Target domain, e.g. bert-B (or --model with --cluster-file)."),
    model: Optional[str] = model_option("Your workload as the target, run on --cluster-file (its trials in --data, e.g. the store `collect --model` wrote): path/to/file.py or package.module with build_model(), example_batch(batch_size, generator) and loss_fn(output, targets); ...:NAME for a Workload object or factory; or a zoo model name."),
    cluster_file: Optional[str] = cluster_file_option(),
    method: AdaptMethod = typer.Option(AdaptMethod.auto, "--method", help="auto: finetune with target trials, zero-shot without. guarded: the source fine-tuned, or a new residual ranker on the target's physics (the step-time simulator plus a learned correction) where it orders the target trials better out of fold with 95 % confidence."),
    shots: Optional[int] = typer.Option(None, "--shots", min=0, help="Target trials to adapt on (default: 20, or all outside the held-out split when fewer)."),
    collect: bool = typer.Option(False, "--collect", help="Measure the target trials first on the emulated target cluster (needs root) and append them to its store."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shot choice and of training."),
    curve: bool = typer.Option(False, "--curve", help="Also run the learning curve (N = 0..200, 3 seeds), log its plot and print it."),
    data: Optional[str] = data_option("Trial data: a trial store (.jsonl), a parquet file or a folder of them; default: the shipped datasets ($AUTOSYNC_DATASETS overrides). With --collect the new target trials are appended to it (a .jsonl store, or DOMAIN.jsonl in the folder)."),
    epochs: Optional[int] = typer.Option(None, "--epochs", min=1, help="Maximum training epochs (adaptation, and the source when it must be trained)."),
    ranker: RankerKind = typer.Option(RankerKind.rnn, "--kind", help="Ranker trained for the source when it has no champion."),
    json_out: bool = json_option(),
) -> None:
    """Adapt the source's champion simulator to the target, compare it with zero-shot and
    from-scratch on held-out target trials, register it and promote it if it is better."""
    from autosync_transfer.adapt.workflow import adapt_and_register
    from autosync_transfer.cli._common import err, print_json, resolve_target

    if target is not None and model is None and cluster_file is None:
        tgt: Any = target  # a name: the catalog's, or described by the stores of --data
    else:
        tgt, _ = resolve_target(target, cluster_file, model, argument="--target")
    with err().status("adapting", spinner="dots") as status:
        report = adapt_and_register(
            source, tgt, trials=data, method=method.value, shots=shots, seed=seed,
            collect=collect, curve=curve, max_epochs=epochs, source_ranker=ranker.value,
            on_status=lambda line: status.update(line))
    if json_out:
        print_json(report.to_dict())
        return
    _print_result(report.result)
    if report.repeat:
        _print_repeat(report.repeat)
    if report.curve is not None:
        _print_curve(report.curve)
    _print_registration(report)


def _print_result(res: Any) -> None:
    """The held-out comparison: zero-shot, adapted, from scratch."""
    from rich import box
    from rich.table import Table

    from autosync_transfer.cli._common import out
    from autosync_transfer.cli._output import fmt_float

    table = Table(title=f"{res.source} -> {res.target}: {res.method} with {res.shots} target "
                        f"trials, seed {res.seed} (held out: {len(res.holdout_ids)} strategies)",
                  box=box.SIMPLE_HEAD)
    for col in ("simulator", "target trials", "pairwise_acc", "top1", "kendall_tau"):
        table.add_column(col, justify="left" if col == "simulator" else "right")
    for row in res.rows():
        label = _ROW_LABELS[row["row"]]
        if row["row"] == "adapted":
            label = f"adapted ({res.method})"
        table.add_row(label, str(row["trials"]), fmt_float(row["pairwise_accuracy"]),
                      fmt_float(row["top1"]), fmt_float(row["kendall_tau"]))
    out().print(table)
    judged = (res.details.get("adapted") or {}).get("shots_pairwise")
    if judged:  # guarded: which start the shots chose
        start = res.details["adapted"].get("start")
        what = ("kept the fine-tuned source" if start == "source"
                else "dropped the source's learned part: a residual ranker on the target's "
                     "physics")
        adapted = res.details["adapted"]
        out().print(f"guarded: {what} (pairwise accuracy on the shots' validation: source "
                    f"{fmt_float(judged.get('source'))}, physics {fmt_float(judged.get('physics'))}; "
                    f"the physics' gain on the held-out shots "
                    f"{fmt_float(adapted.get('physics_gain'))}, 95 % lower bound "
                    f"{fmt_float(adapted.get('physics_gain_low'))}: replaces the source only "
                    f"above 0)", markup=False, highlight=False)


def _print_repeat(repeat: dict) -> None:
    """Both simulators on the target's re-measured strategies (outside the shots)."""
    from autosync_transfer.cli._common import out
    from autosync_transfer.cli._output import fmt_float

    for who, label in (("zero_shot", "zero-shot"), ("adapted", "adapted")):
        f = repeat.get(who)
        if f:
            out().print(f"{label} on {f['strategies']} re-measured strategies: pairwise "
                        f"{fmt_float(f['pairwise'])} on {f['pairs']} pairs, "
                        f"{fmt_float(f['pairwise_resolved'])} "
                        f"[{fmt_float(f.get('pairwise_resolved_low'))}, "
                        f"{fmt_float(f.get('pairwise_resolved_high'))}] on the {f['resolved_pairs']} "
                        f"pairs the repeat runs resolve; top-1 regret "
                        f"{fmt_float(f['top1_regret'])} against the consensus-fastest, "
                        f"{fmt_float(f.get('top1_regret_resolved'))} against the "
                        f"confidently-best", markup=False, highlight=False)


def _print_curve(lc: Any) -> None:
    """The learning curve: held-out accuracy against the number of target trials."""
    from rich import box
    from rich.table import Table

    from autosync_transfer.cli._common import out
    from autosync_transfer.cli._output import fmt_float

    con = out()
    ctable = Table(title=f"learning curve on {lc.target} ({lc.method}, held-out pairwise "
                         f"accuracy, mean ± std over {len(lc.seeds)} seeds)",
                   box=box.SIMPLE_HEAD)
    for col in ("target trials", "adapted", "from scratch"):
        ctable.add_column(col, justify="right")
    for r in lc.table():
        ctable.add_row(str(r["shots"]),
                       f"{fmt_float(r['adapted_mean'])} ± {fmt_float(r['adapted_std'])}",
                       f"{fmt_float(r['scratch_mean'])} ± {fmt_float(r['scratch_std'])}")
    con.print(ctable)
    if lc.skipped:
        con.print(f"skipped N = {', '.join(map(str, lc.skipped))}: more than the "
                  f"{lc.available} target trials outside the held-out split",
                  markup=False, highlight=False)


def _print_registration(report: Any) -> None:
    """Where the adapted simulator went: its version, lineage, champion, the MLflow UI."""
    from autosync_transfer.cli._common import out

    res, v = report.result, report.version
    trained = " (trained and registered now)" if report.source_trained else ""
    verdict = ("promoted to champion" if report.promoted
               else f"champion stays version {report.champion}")
    from autosync_transfer.registry.workflows import promotion_note

    note = promotion_note(v.name, v.version)
    if note:
        verdict += f" ({note})"
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
        out().print(line, markup=False, highlight=False)
