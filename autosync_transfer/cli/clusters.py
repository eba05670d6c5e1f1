"""``autosync-transfer clusters list|show`` and ``autosync-transfer cleanup``."""

from __future__ import annotations

from typing import Optional

import typer

from autosync_transfer.cli._params import Command, json_option

app = typer.Typer(help="Named clusters and AutoDist resource-spec files.", no_args_is_help=True)


@app.command("list", cls=Command)
def list_clusters(json_out: bool = json_option()) -> None:
    """List the catalog's clusters."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.domains.catalog import CLUSTERS

    if json_out:
        print_json([c.model_dump() for c in CLUSTERS.values()])
        return
    from rich.table import Table

    table = Table()
    for col in ("cluster", "nodes", "workers", "NIC Gbit/s", "description"):
        table.add_column(col)
    for c in CLUSTERS.values():
        bws = sorted({n.bandwidth_gbps for n in c.nodes})
        table.add_row(c.name, str(c.num_nodes), str(c.world_size),
                      "/".join(f"{b:g}" for b in bws), c.description)
    out().print(table)


@app.command("show", cls=Command)
def show(
    name: str = typer.Argument(..., help="A catalog cluster name (A, B, C) or a resource-spec YAML file."),
    yaml_out: bool = typer.Option(False, "--yaml", help="Print the AutoDist resource-spec YAML."),
    json_out: bool = json_option(),
) -> None:
    """Show a cluster: nodes, workers, NIC bandwidth; or convert it to resource-spec YAML."""
    from pathlib import Path

    from autosync_transfer.cli._common import cluster_table, out, print_json
    from autosync_transfer.domains.catalog import CLUSTERS, get_cluster
    from autosync_transfer.domains.cluster import Cluster

    if name not in CLUSTERS and (Path(name).suffix in (".yml", ".yaml") or Path(name).exists()):
        cluster = Cluster.from_file(name)
    else:
        cluster = get_cluster(name)
    if yaml_out:
        import sys

        sys.stdout.write(cluster.to_yaml())
        return
    if json_out:
        print_json(cluster.model_dump())
        return

    from rich.markup import escape

    out().print(f"[bold]{escape(cluster.name)}[/bold]: {escape(cluster.description)}  "
                f"({cluster.num_nodes} nodes, {cluster.world_size} workers, fingerprint "
                f"{cluster.fingerprint})")
    out().print(cluster_table(cluster))


def cleanup(
    prefix: str = typer.Option("ast", "--prefix", help="First part of the namespace names (emulated clusters are named PREFIX-RUN-n<i> and PREFIX-RUN-br)."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Only this run's namespaces (the RUN part of the names)."),
    json_out: bool = json_option("Print the removed namespaces as JSON."),
) -> None:
    """Remove the network namespaces (and their bridge) that emulated clusters of dead runs left
    behind, e.g. after a SIGKILL; a running collection's or search's are never touched (needs
    root)."""
    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.runtime.emulation import cleanup_leftovers

    removed = cleanup_leftovers(prefix, run_id=run_id)
    if json_out:
        print_json({"removed": removed})
        return
    if not removed:
        out().print("no stale namespaces", markup=False, highlight=False)
    for ns in removed:
        out().print(f"removed {ns}", markup=False, highlight=False)
