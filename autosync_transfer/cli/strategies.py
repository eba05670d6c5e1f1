"""``autosync-transfer strategies sample|baseline|validate|show``."""

from __future__ import annotations

from typing import Optional

import typer

app = typer.Typer(help="Strategies: sample the space, build hand-optimized ones, validate files.",
                  no_args_is_help=True)

_CLUSTER_FILE = typer.Option(None, "--cluster-file", help="Use this resource-spec YAML as the cluster.")


def _summary(strategy, domain=None) -> dict:  # noqa: ANN001
    """Counts that describe a strategy at a glance (+ the analytical estimate on a domain)."""
    from autosync_transfer.strategies.types import PS

    ps = ar = parts = 0
    servers: set[str] = set()
    groups: set[int] = set()
    compressors: dict[str, int] = {}
    for cfg in strategy.nodes:
        if cfg.partition is not None:
            parts += 1
        for _, s in cfg.items():
            if isinstance(s, PS):
                ps += 1
                servers.add(s.destination)
            else:
                ar += 1
                groups.add(s.group)
                compressors[s.compressor] = compressors.get(s.compressor, 0) + 1
    row = {
        "id": strategy.id,
        "kind": strategy.kind,
        "variables": len(strategy.nodes),
        "partitioned": parts,
        "ps_items": ps,
        "ar_items": ar,
        "servers": len(servers),
        "ar_groups": len(groups),
        "compressors": compressors,
    }
    if domain is not None:
        from autosync_transfer.rankers.costmodel import estimate

        row["estimated_sync_s"] = round(estimate(strategy, domain).total_s, 6)
    return row


def _table(rows: list[dict], title: str):  # noqa: ANN202
    from rich.table import Table

    table = Table(title=title)
    cols = ["id", "kind", "partitioned", "ps_items", "ar_items", "servers", "ar_groups",
            "compressors"]
    if rows and "estimated_sync_s" in rows[0]:
        cols.append("estimated_sync_s")
    for c in cols:
        table.add_column(c.replace("_", " "))
    for r in rows:
        comp = ", ".join(f"{k}:{v}" for k, v in sorted(r["compressors"].items())) or "-"
        vals = [str(r[c]) if c != "compressors" else comp for c in cols]
        if "estimated_sync_s" in cols:
            vals[-1] = f"{r['estimated_sync_s']:.4f}"
        table.add_row(*vals)
    return table


def _check_out(path: str | None, option: str) -> None:
    """Refuse an output path that exists or whose folder does not (before any work is done)."""
    from pathlib import Path

    from autosync_transfer.errors import ConfigError

    if path is None:
        return
    p = Path(path)
    if p.exists():
        raise ConfigError(f"{option} {path!r} already exists; refusing to overwrite it")
    if not p.parent.is_dir():
        raise ConfigError(f"{option} {path!r}: folder {str(p.parent)!r} does not exist")


def export(strategy, domain, json_path: str | None, autodist_path: str | None,  # noqa: ANN001
           options: tuple[str, str] = ("--export-json", "--export-autodist")) -> None:
    """Write ``strategy`` as JSON and/or as an AutoDist strategy file (paths checked before with
    :func:`_check_out`); ``options`` name the paths in errors."""
    if json_path:
        _write_atomic(json_path, (strategy.to_json(indent=2) + "\n").encode(), options[0])
    if autodist_path:
        from autosync_transfer.strategies.autodist import strategy_to_autodist

        _write_atomic(autodist_path, strategy_to_autodist(strategy, domain.cluster, graph=domain.model),
                      options[1])


def _write_atomic(path: str, data: bytes, option: str) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place."""
    import os
    from pathlib import Path

    from autosync_transfer.errors import ConfigError

    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {option} {path!r}: {e.strerror}") from e


def _write_jsonl(path: str, strategies) -> None:  # noqa: ANN001
    _check_out(path, "--out")
    _write_atomic(path, "".join(s.to_json() + "\n" for s in strategies).encode(), "--out")


@app.command("sample")
def sample(
    domain_name: str = typer.Argument(..., metavar="DOMAIN", help="e.g. bert-large-B"),
    n: int = typer.Option(10, "-n", "--num", min=1, help="How many strategies."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed (same seed, same strategies)."),
    preset: str = typer.Option("default", "--preset", help="Sampler preset: default, product, ps_only, ar_only."),
    out_path: Optional[str] = typer.Option(None, "--out", help="Write the strategies as JSON Lines."),
    json_out: bool = typer.Option(False, "--json", help="Print the strategies as JSON Lines."),
    estimate_cost: bool = typer.Option(False, "--estimate", help="Add the analytical sync-time estimate."),
    cluster_file: Optional[str] = _CLUSTER_FILE,
) -> None:
    """Sample valid strategies from AutoSync's space with its knowledge constraints."""
    import sys

    from autosync_transfer.cli._common import out, resolve_domain
    from autosync_transfer.strategies.sampler import StrategySampler, preset as get_preset
    from autosync_transfer.strategies.validate import validate

    domain = resolve_domain(domain_name, cluster_file)
    _check_out(out_path, "--out")
    sampler = StrategySampler(domain, get_preset(preset), seed=seed)
    strategies = sampler.sample_n(n)
    for s in strategies:
        validate(s, domain)
    if out_path:
        _write_jsonl(out_path, strategies)
    if json_out:
        for s in strategies:
            sys.stdout.write(s.to_json() + "\n")
        return
    rows = [_summary(s, domain if estimate_cost else None) for s in strategies]
    shown = rows[:20]
    out().print(_table(shown, f"{n} strategies sampled for {domain.name} (seed {seed}, preset {preset})"))
    if len(rows) > len(shown):
        out().print(f"... {len(rows) - len(shown)} more (all valid)" + (f"; written to {out_path}" if out_path else ""))
    elif out_path:
        out().print(f"written to {out_path}")


@app.command("baseline")
def baseline(
    domain_name: str = typer.Argument(..., metavar="DOMAIN"),
    builder: Optional[str] = typer.Argument(None, help="Builder name; omit to compare all builders."),
    out_path: Optional[str] = typer.Option(None, "--out", help="Write the strategy JSON here."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    autodist_out: Optional[str] = typer.Option(None, "--autodist-out", help="Write the strategy as an AutoDist protobuf file."),
    cluster_file: Optional[str] = _CLUSTER_FILE,
) -> None:
    """Build a hand-optimized strategy (ps, ps_lb, partitioned_ps, all_reduce, partitioned_ar,
    parallax, ddp), or rank all of them with the analytical cost model."""
    import sys

    from autosync_transfer.cli._common import out, print_json, resolve_domain
    from autosync_transfer.errors import ConfigError
    from autosync_transfer.strategies.builders import BUILDERS, build

    domain = resolve_domain(domain_name, cluster_file)
    if builder is None:
        if out_path or autodist_out:
            raise ConfigError("--out/--autodist-out need a BUILDER name")
        rows = sorted((_summary(build(b, domain), domain) for b in BUILDERS),
                      key=lambda r: r["estimated_sync_s"])
        if json_out:
            print_json(rows)
            return
        out().print(_table(rows, f"hand-optimized strategies on {domain.name}, "
                                 f"ranked by the analytical cost model (sync time per step)"))
        return
    _check_out(out_path, "--out")
    _check_out(autodist_out, "--autodist-out")
    strategy = build(builder, domain)
    export(strategy, domain, out_path, autodist_out, ("--out", "--autodist-out"))
    if json_out:
        sys.stdout.write(strategy.to_json(indent=2) + "\n")
        return
    out().print(_table([_summary(strategy, domain)], f"{builder} on {domain.name}"))


def _load_strategy(path: str, domain=None):  # noqa: ANN001, ANN202
    from autosync_transfer.strategies.types import Strategy

    if domain is not None:
        from pathlib import Path

        from autosync_transfer.errors import SpecError

        from autosync_transfer.strategies.types import looks_like_json

        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise SpecError(f"cannot read strategy file {path!r}: {e.strerror}") from e
        if not looks_like_json(raw):
            from autosync_transfer.strategies.autodist import read_autodist_file

            return read_autodist_file(path, domain.cluster)
    return Strategy.from_file(path)


@app.command("validate")
def validate_cmd(
    domain_name: str = typer.Argument(..., metavar="DOMAIN"),
    path: str = typer.Argument(..., metavar="FILE", help="Strategy JSON or AutoDist protobuf file."),
    all_errors: bool = typer.Option(False, "--all", help="List every violation, not only the first."),
    cluster_file: Optional[str] = _CLUSTER_FILE,
) -> None:
    """Check a strategy file against a domain; exit 2 naming the first broken rule."""
    from autosync_transfer.cli._common import err, out, resolve_domain
    from autosync_transfer.errors import StrategyValidationError
    from autosync_transfer.strategies.validate import violations

    domain = resolve_domain(domain_name, cluster_file)
    strategy = _load_strategy(path, domain)
    found = violations(strategy, domain)
    if found:
        if all_errors:
            for v in found[1:]:
                err().print(f"  {v}", markup=False, highlight=False)
        raise StrategyValidationError(found)
    out().print(f"valid: {strategy.id} ({len(strategy.nodes)} variables) on {domain.name}")


@app.command("show")
def show(
    path: str = typer.Argument(..., metavar="FILE", help="Strategy JSON or AutoDist protobuf file."),
    domain_name: Optional[str] = typer.Option(None, "--domain", help="Validate and estimate on this domain."),
    json_out: bool = typer.Option(False, "--json", help="Print the strategy as JSON."),
    cluster_file: Optional[str] = _CLUSTER_FILE,
) -> None:
    """Summarize a strategy file (and its analytical cost on a domain)."""
    import sys

    from autosync_transfer.cli._common import out, resolve_domain
    from autosync_transfer.strategies.validate import validate

    domain = resolve_domain(domain_name, cluster_file) if domain_name else None
    strategy = _load_strategy(path, domain)
    if domain is not None:
        validate(strategy, domain)
    if json_out:
        sys.stdout.write(strategy.to_json(indent=2) + "\n")
        return
    out().print(_table([_summary(strategy, domain)], path))
