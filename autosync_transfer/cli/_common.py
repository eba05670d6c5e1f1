"""Shared CLI helpers: consoles, JSON output, resolving domains (a catalog domain, a catalog
model on a cluster file, or a workload on a cluster file), reading strategy files."""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = [
    "out", "err", "print_json", "resolve_domain", "resolve_target", "load_strategy", "fmt_bytes",
    "fmt_count",
    "cluster_table", "reset_consoles",
]

_OUT = None
_ERR = None


def out():  # noqa: ANN201 - rich Console, imported lazily
    global _OUT
    if _OUT is None:
        from rich.console import Console

        # wide enough for the strategy tables when not writing to a terminal
        _OUT = Console(file=sys.stdout, soft_wrap=True,
                       width=None if sys.stdout.isatty() else 160)
    return _OUT


def err():  # noqa: ANN201
    global _ERR
    if _ERR is None:
        from rich.console import Console

        _ERR = Console(file=sys.stderr, soft_wrap=True)
    return _ERR


def reset_consoles() -> None:
    """Forget cached consoles (tests swap sys.stdout between invocations)."""
    global _OUT, _ERR
    _OUT = _ERR = None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def resolve_domain(name: str, cluster_file: str | None = None):  # noqa: ANN201 - Domain
    """:func:`autosync_transfer.domains.catalog.resolve_domain` (errors name ``--cluster-file``)."""
    from autosync_transfer.domains.catalog import resolve_domain as resolve

    return resolve(name, cluster_file)


def resolve_target(domain_name: str | None, cluster_file: str | None, model: str | None,
                   *, argument: str = "DOMAIN"):  # noqa: ANN201 - (Domain, str | None)
    """``(domain, workload spec or None)`` of a command's ``DOMAIN`` argument, ``--cluster-file``
    and ``--model``: a catalog domain (optionally on a cluster file), or the workload ``--model``
    names on the cluster of ``--cluster-file``
    (:func:`~autosync_transfer.domains.workload.workload_domain`: its step runs once here, so a
    bad spec fails before any worker starts). A bad combination is a one-line ConfigError."""
    from autosync_transfer.errors import ConfigError

    if model is not None:
        if domain_name is not None:
            raise ConfigError(f"give {argument} or --model, not both ({argument} "
                              f"{domain_name!r} names a catalog domain; --model with "
                              f"--cluster-file names your workload's)")
        if cluster_file is None:
            raise ConfigError("--model needs --cluster-file (the resource-spec YAML of the "
                              "cluster the workload runs on)")
        from autosync_transfer.domains.workload import workload_domain

        return workload_domain(model, cluster_file)
    if domain_name is None:
        raise ConfigError(f"give {argument} (e.g. bert-A), or --model SPEC with --cluster-file "
                          f"YAML")
    return resolve_domain(domain_name, cluster_file), None


def load_strategy(path: str, domain=None):  # noqa: ANN001, ANN201 - Strategy
    """A strategy file: JSON, or (with ``domain``, whose cluster names its nodes) AutoDist, or
    (with ``domain``, whose graph orders its variables) the compact form a trial store records
    (its ``strategy`` field)."""
    from autosync_transfer.strategies.types import Strategy

    if domain is not None:
        from pathlib import Path

        from autosync_transfer.domains.parsing import MAX_JSON_BYTES, load_json, read_bounded
        from autosync_transfer.errors import SpecError
        from autosync_transfer.strategies.compact import decode, is_compact
        from autosync_transfer.strategies.types import looks_like_json

        try:
            raw = read_bounded(Path(path), MAX_JSON_BYTES, "strategy file")
        except OSError as e:
            raise SpecError(f"cannot read strategy file {path!r}: {e.strerror}") from e
        raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
        if not looks_like_json(raw):
            from autosync_transfer.strategies.autodist import read_autodist_file

            return read_autodist_file(path, domain.cluster)
        try:
            data = load_json(raw, "strategy")
        except SpecError:
            return Strategy.from_file(path)  # it explains the error (or reads AutoDist bytes)
        if is_compact(data):
            return decode(data, domain.model)
        return Strategy.from_dict(data)  # the bytes already read, parsed once
    return Strategy.from_file(path)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def fmt_count(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(int(n))


def cluster_table(cluster):  # noqa: ANN001, ANN201 - Cluster -> rich Table
    from rich.markup import escape
    from rich.table import Table

    table = Table()
    for col in ("node", "address", "workers", "device", "NIC Gbit/s", "latency ms", "chief"):
        table.add_column(col)
    for n in cluster.nodes:
        table.add_row(escape(n.name), escape(n.address), str(n.workers), n.device, f"{n.bandwidth_gbps:g}",
                      f"{n.latency_ms:g}", "yes" if n.chief else "")
    return table
