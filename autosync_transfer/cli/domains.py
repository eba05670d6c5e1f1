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


@app.command("profile", cls=Command)
def profile(
    name: Optional[str] = typer.Argument(None, metavar="[NAME]", help="A zoo model (bert-3l) or a domain (bert-3l-A: its model); or --model."),
    model: Optional[str] = typer.Option(None, "--model", metavar="SPEC", help="Your workload: path/to/file.py or package.module with build_model(), example_batch(batch_size, generator) and loss_fn(output, targets); ...:NAME for a Workload object or factory; or a zoo model name."),
    threads: int = typer.Option(1, "--threads", min=1, help="Compute threads of the worker (trial workers use 1)."),
    force: bool = typer.Option(False, "--force", help="Measure again even when a profile of this model on this worker type is stored."),
    json_out: bool = json_option(),
) -> None:
    """Profile a workload on this machine (one process, no cluster): forward, backward and
    optimizer time, when each gradient is ready, and the cost of every synchronization action vs
    tensor size. Cached by (model fingerprint, worker type); the step-time simulator's input."""
    import time

    from autosync_transfer.cli._common import out, print_json
    from autosync_transfer.domains.catalog import model_names, split_domain_name
    from autosync_transfer.domains.workload import absolute_spec, load_workload
    from autosync_transfer.errors import ConfigError

    if (name is None) == (model is None):
        raise ConfigError("give NAME (a zoo model or a domain) or --model SPEC, one of them")
    if model is not None:
        spec = absolute_spec(model.strip())
    elif name in model_names():
        spec = f"zoo:{name}"
    else:
        spec = f"zoo:{split_domain_name(name)[0]}"
    if spec.startswith("zoo:"):
        from autosync_transfer.domains.zoo import MODELS

        zoo_name = spec.removeprefix("zoo:")
        if zoo_name in MODELS and not MODELS[zoo_name].runnable:
            runnable = ", ".join(m for m, s in MODELS.items() if s.runnable)
            raise ConfigError(f"model {zoo_name!r} is not runnable on a CPU here (runnable zoo "
                              f"models: {runnable})")
    wl = load_workload(spec)
    from autosync_transfer.runtime.profile import PROFILE_MAX_FOREIGN_CPU, get_profile

    t0 = time.monotonic()
    prof, measured = get_profile(wl, threads=threads, force=force)
    took = time.monotonic() - t0
    if json_out:
        print_json({"measured": measured, "seconds": round(took, 3),
                    "profile": prof.model_dump(mode="json")})
        return
    con = out()
    head = (f"profiled {prof.workload} in {took:.1f} s" if measured else
            f"{prof.workload}: stored profile reused ({took:.2f} s; --force measures again)")
    foreign = "-" if prof.foreign_cpu is None else f"{prof.foreign_cpu:.0%}"
    lines = [
        head,
        f"  worker {prof.worker_type}, batch {prof.batch_size}, {prof.clock} clock, measured "
        f"{prof.created_at} in {prof.seconds:.1f} s (foreign CPU {foreign})"
        + ("; disturbed: other processes' load inflates its times (--force on a quiet machine "
           "measures again)" if (prof.foreign_cpu or 0.0) > PROFILE_MAX_FOREIGN_CPU else ""),
        f"  forward {prof.forward_s * 1e3:.1f} ms, backward {prof.backward_s * 1e3:.1f} ms, "
        f"optimizer {prof.optimizer_s * 1e3:.1f} ms; {len(prof.ready_s)} gradients ready "
        f"from {min(prof.ready_s.values(), default=0) * 1e3:.1f} to "
        f"{max(prof.ready_s.values(), default=0) * 1e3:.1f} ms into backward",
    ]
    for a in prof.actions.values():
        lines.append(f"  {a.action}: {a.seconds[0] * 1e6:.1f} us at {a.elements[0]} elements .. "
                     f"{a.seconds[-1] * 1e3:.2f} ms at {a.elements[-1]}")
    for line in lines:
        con.print(line, markup=False, highlight=False)
