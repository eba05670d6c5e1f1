"""``autosync-transfer domains list|show``."""

from __future__ import annotations

from typing import Optional

import typer

from autosync_transfer.cli._params import Command, cluster_file_option, json_option, model_option

app = typer.Typer(help="Named domains: a model graph on a cluster (e.g. bert-A).", no_args_is_help=True)


@app.command("list", cls=Command)
def list_domains(
    json_out: bool = json_option("Print JSON instead of a table."),
) -> None:
    """List the catalog's domains (every model on every cluster)."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.domains.catalog import CLUSTERS
    from autosync_transfer.domains.zoo import MODELS

    rows = [
        {"domain": f"{m}-{c}", "model": m, "cluster": c, "runnable": spec.runnable,
         "model_description": spec.description}
        for m, spec in MODELS.items()
        for c in CLUSTERS
    ]
    if json_out:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(title="domains = <model>-<cluster>")
    table.add_column("model")
    table.add_column("domains")
    table.add_column("runs here", justify="center")
    table.add_column("model")
    for m, spec in MODELS.items():
        table.add_row(m, ", ".join(f"{m}-{c}" for c in CLUSTERS), "yes" if spec.runnable else "-",
                      spec.description)
    out().print(table)
    out().print("clusters: " + "; ".join(f"{k}: {c.description}" for k, c in CLUSTERS.items()))


@app.command("show", cls=Command)
def show(
    name: Optional[str] = typer.Argument(None, metavar="[NAME]", help="Domain name, e.g. bert-A or bert-large-B (or --model with --cluster-file)."),
    cluster_file: Optional[str] = cluster_file_option(),
    model: Optional[str] = model_option(),
    json_out: bool = json_option(),
    variables: bool = typer.Option(False, "--variables", help="Also list every variable."),
) -> None:
    """Show exactly which model (config, parameters, bytes) and which cluster a domain is."""
    from autosync_transfer.cli._common import (
        cluster_table, fmt_bytes, fmt_count, out, print_json, resolve_target,
    )

    domain, _ = resolve_target(name, cluster_file, model, argument="NAME")
    model, cluster = domain.model, domain.cluster
    summary = {
        "domain": domain.name,
        "fingerprint": domain.fingerprint,
        "model": {
            "name": model.name,
            "description": model.description,
            "config": model.config,
            "parameters": model.num_parameters,
            "bytes": model.nbytes,
            "variables": len(model.variables),
            "sparse_variables": [v.name for v in model.sparse_variables],
            "batch_size_per_worker": model.batch_size,
            "seq_len": model.seq_len,
            "fingerprint": model.fingerprint,
        },
        "cluster": {
            "name": cluster.name,
            "description": cluster.description,
            "world_size": cluster.world_size,
            "nodes": [n.model_dump() for n in cluster.nodes],
            "fingerprint": cluster.fingerprint,
        },
    }
    if variables:
        summary["model"]["variable_list"] = [v.model_dump() for v in model.variables]
    if json_out:
        print_json(summary)
        return
    from rich.table import Table

    from rich.markup import escape

    con = out()
    con.print(f"[bold]{escape(domain.name)}[/bold]  (fingerprint {domain.fingerprint})")
    con.print(f"model [bold]{escape(model.name)}[/bold]: {escape(model.description)}")
    cfg = ", ".join(f"{k}={v}" for k, v in model.config.items() if k not in ("parameters", "bytes"))
    if cfg:
        con.print(f"  config: {cfg}", markup=False)
    con.print(
        f"  {fmt_count(model.num_parameters)} parameters ({model.num_parameters:,}), "
        f"{fmt_bytes(model.nbytes)} of gradients per step, {len(model.variables)} variables "
        f"({len(model.sparse_variables)} sparse), per-worker batch {model.batch_size} x seq "
        f"{model.seq_len}"
    )
    con.print(f"cluster [bold]{escape(cluster.name)}[/bold]: "
              f"{escape(cluster.description or '(from file)')}")
    con.print(cluster_table(cluster))
    if variables:
        vt = Table(title="variables (forward order)")
        for col in ("#", "name", "shape", "dtype", "sparse", "bytes"):
            vt.add_column(col)
        for v in model.variables:
            vt.add_row(str(v.order), v.name, "x".join(map(str, v.shape)), v.dtype,
                       "yes" if v.sparse else "", fmt_bytes(v.nbytes))
        con.print(vt)
