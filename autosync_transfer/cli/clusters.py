"""``autosync-transfer clusters list|show|calibrate`` and ``autosync-transfer cleanup``."""

from __future__ import annotations

from typing import Optional

import typer

from autosync_transfer.cli._choices import Launcher
from autosync_transfer.cli._params import Command, cluster_file_option, json_option

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


def _cluster(name: Optional[str], cluster_file: Optional[str]):  # noqa: ANN202 - Cluster
    """The cluster of NAME (a catalog name or a resource-spec YAML file) or --cluster-file."""
    from pathlib import Path

    from autosync_transfer.domains.catalog import CLUSTERS, get_cluster
    from autosync_transfer.domains.cluster import Cluster
    from autosync_transfer.errors import ConfigError

    if name is not None and cluster_file is not None:
        raise ConfigError(f"give NAME or --cluster-file, not both (got {name!r} and "
                          f"{cluster_file!r})")
    if name is None and cluster_file is None:
        raise ConfigError("give NAME (a catalog cluster: " + ", ".join(CLUSTERS) +
                          ") or --cluster-file YAML")
    if cluster_file is not None:
        return Cluster.from_file(cluster_file)
    assert name is not None
    if name not in CLUSTERS and (Path(name).suffix in (".yml", ".yaml") or Path(name).exists()):
        return Cluster.from_file(name)
    return get_cluster(name)


def _calibration_lines(cal) -> list[str]:  # noqa: ANN001 - ClusterCalibration
    nodes = ", ".join(f"{n.name} {n.bandwidth_gbps:.3g} Gbit/s {n.latency_s * 1e6:.0f} us"
                      for n in cal.nodes)
    slow = ", ".join(f"{k}: {v:.2f}" for k, v in sorted(cal.compute_slowdown.items()))
    ar = ", ".join(f"{k} B {v * 1e3:.2f} ms" for k, v in sorted(cal.allreduce_s.items()))
    foreign = "-" if cal.foreign_cpu is None else f"{cal.foreign_cpu:.0%}"
    return [
        f"calibration ({cal.launcher}, {cal.created_at}"
        + ("" if cal.processor is None else f", on {cal.processor}")
        + f", took {cal.seconds:.1f} s, foreign CPU {foreign}):",
        f"  nodes: {nodes}",
        f"  intra-node: {cal.intra_bandwidth_gbps:.3g} Gbit/s {cal.intra_latency_s * 1e6:.0f} us;"
        f" collective latency {cal.collective_latency_s * 1e6:.0f} us"
        + ("" if cal.ps_piece_s is None else
           f"; parameter-server piece {cal.ps_piece_s * 1e6:.0f} us")
        + ("" if cal.ps_sparse_piece_s is None else
           f", row-sparse piece {cal.ps_sparse_piece_s * 1e6:.0f} us")
        + ("" if cal.ar_collective_s is None else
           f"; all-reduce collective beside PS work {cal.ar_collective_s * 1e6:.0f} us ("
           + (f"buckets of {cal.ar_collective_elements} elements)" if cal.ar_collective_elements
              else "one-element buckets)"))
        + ("" if cal.ar_cpu_s_per_element is None else
           f"; all-reduce CPU per element {cal.ar_cpu_s_per_element * 1e9:.2f} ns (fp32), "
           f"{(cal.ar_fp16_cpu_s_per_element or 0.0) * 1e9:.2f} ns (fp16)"),
        f"  compute slowdown by concurrent workers ({cal.host_cores} cores): {slow}",
        *([f"  all-reduce ({'medians' if cal.allreduce_stat == 'median' else 'fastest'}): {ar}"]
          if ar else []),
    ]


@app.command("show", cls=Command)
def show(
    name: Optional[str] = typer.Argument(None, metavar="[NAME]", help="A catalog cluster name (A, B, C) or a resource-spec YAML file."),
    cluster_file: Optional[str] = cluster_file_option(),
    yaml_out: bool = typer.Option(False, "--yaml", help="Print the AutoDist resource-spec YAML."),
    json_out: bool = json_option(),
) -> None:
    """Show a cluster: nodes, workers, NIC bandwidth, and its newest calibration when there is
    one; or convert it to resource-spec YAML."""
    from autosync_transfer.cli._common import cluster_table, out, print_json
    from autosync_transfer.domains.physics import find_calibration

    cluster = _cluster(name, cluster_file)
    if yaml_out:
        import sys

        sys.stdout.write(cluster.to_yaml())
        return
    cal = find_calibration(cluster.fingerprint)
    if json_out:
        data = cluster.model_dump()
        data["calibration"] = None if cal is None else cal.model_dump(mode="json")
        print_json(data)
        return

    from rich.markup import escape

    out().print(f"[bold]{escape(cluster.name)}[/bold]: {escape(cluster.description)}  "
                f"({cluster.num_nodes} nodes, {cluster.world_size} workers, fingerprint "
                f"{cluster.fingerprint})")
    out().print(cluster_table(cluster))
    lines = (_calibration_lines(cal) if cal is not None else
             ["not calibrated (autosync-transfer clusters calibrate)"])
    for line in lines:
        out().print(line, markup=False, highlight=False)


@app.command("calibrate", cls=Command)
def calibrate(
    name: Optional[str] = typer.Argument(None, metavar="[NAME]", help="A catalog cluster name (A, B, C) or a resource-spec YAML file."),
    cluster_file: Optional[str] = cluster_file_option(),
    launcher: Launcher = typer.Option(Launcher.emulated, "--launcher", help="emulated (network namespaces, needs root) or local."),
    force: bool = typer.Option(False, "--force", help="Calibrate again even when a calibration is stored (a new version; older ones stay)."),
    json_out: bool = json_option(),
) -> None:
    """Measure a cluster's links (point-to-point, incast, all-reduce) and the compute slowdown of
    workers sharing cores, through the runtime's own workers; stored with the cluster (reused
    until --force) and shown by `clusters show`."""
    import time

    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.runtime.calibrate import get_calibration
    from autosync_transfer.runtime.launch import get_launcher

    cluster = _cluster(name, cluster_file)
    t0 = time.monotonic()
    if force:
        get_launcher(launcher.value)().check()
    cal, measured = get_calibration(cluster, launcher.value, force=force)
    took = time.monotonic() - t0
    if json_out:
        print_json({"measured": measured, "seconds": round(took, 3),
                    "calibration": cal.model_dump(mode="json")})
        return
    what = (f"calibrated {cluster.name} in {took:.1f} s" if measured else
            f"{cluster.name}: stored calibration reused ({took:.2f} s; --force measures again)")
    out().print(what, markup=False, highlight=False)
    for line in _calibration_lines(cal):
        out().print(line, markup=False, highlight=False)


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
