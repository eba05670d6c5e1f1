"""What several commands print and write: strategy summaries and tables, exported strategy
files (checked before any work, written atomically), number formats."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "strategy_summary", "strategy_table", "check_out", "export_strategy", "write_atomic",
    "write_jsonl", "fmt_float",
]

#: the options a strategy is exported with, named in their errors
EXPORT_OPTIONS: tuple[str, str] = ("--export-json", "--export-autodist")


def fmt_float(value: Any, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; ``-`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.{digits}f}"


def strategy_summary(strategy, domain=None) -> dict:  # noqa: ANN001
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


def strategy_table(rows: list[dict], title: str):  # noqa: ANN201 - rich Table
    """A table of :func:`strategy_summary` rows."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
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
        table.add_row(*map(escape, vals))
    return table


def check_out(path: str | None, option: str) -> None:
    """Refuse an output path that exists or whose folder does not (before any work is done)."""
    from pathlib import Path

    from autosync_transfer.errors import ConfigError

    if path is None:
        return
    p = Path(path)
    if p.is_symlink():
        raise ConfigError(f"{option} {path!r} is a symbolic link; refusing to write through it")
    if p.exists():
        raise ConfigError(f"{option} {path!r} already exists; refusing to overwrite it")
    if not p.parent.is_dir():
        raise ConfigError(f"{option} {path!r}: folder {str(p.parent)!r} does not exist")


def export_strategy(strategy, domain, json_path: str | None,  # noqa: ANN001
                    autodist_path: str | None) -> None:
    """Write ``strategy`` as JSON (``--export-json``) and/or as an AutoDist strategy file
    (``--export-autodist``); the paths are checked before with :func:`check_out`."""
    if json_path:
        write_atomic(json_path, (strategy.to_json(indent=2) + "\n").encode(), EXPORT_OPTIONS[0])
    if autodist_path:
        from autosync_transfer.strategies.autodist import strategy_to_autodist

        write_atomic(autodist_path, strategy_to_autodist(strategy, domain.cluster,
                                                         graph=domain.model), EXPORT_OPTIONS[1])


def write_atomic(path: str, data: bytes, option: str) -> None:
    """Write ``data`` to a temporary file with an unpredictable name beside ``path`` and rename
    it into place (a link at ``path`` is refused, never followed); ``option`` names the path in
    errors."""
    from autosync_transfer._files import atomic_write

    atomic_write(path, data, option)


def write_jsonl(path: str, strategies, option: str = "--out") -> None:  # noqa: ANN001
    """Write ``strategies`` as JSON Lines (the path is checked first)."""
    check_out(path, option)
    write_atomic(path, "".join(s.to_json() + "\n" for s in strategies).encode(), option)
