"""The ``autosync-transfer`` command line: one Typer sub-app per noun.

Only ``typer`` is imported here; every command imports the library (torch, ...) inside its body
so that ``autosync-transfer --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from autosync_transfer.cli import (adapt, clusters, datasets, domains, measure, search, simulators,
                                   strategies, worker)

__all__ = ["app", "main"]

app = typer.Typer(
    name="autosync-transfer",
    help="Learn, transfer and apply gradient-synchronization strategies for data-parallel training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(domains.app, name="domains")
app.add_typer(clusters.app, name="clusters")
app.add_typer(strategies.app, name="strategies")
app.add_typer(datasets.app, name="datasets")
app.command("collect")(measure.collect)
app.command("run")(measure.run)
app.command("train")(simulators.train)
app.command("evaluate")(simulators.evaluate)
app.command("ui")(simulators.ui)
app.add_typer(simulators.registry_app, name="registry")
app.command("adapt")(adapt.adapt)
app.command("search")(search.search)
app.command("recommend")(search.recommend)
app.command("worker", hidden=True)(worker.worker)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user mistakes become one red line and exit code 2.

    Click (inside Typer) handles its own usage errors (exit 2) and ``typer.Exit`` codes in
    standalone mode; library errors (:class:`AutosyncError`) pass through it and are printed here.
    """
    from autosync_transfer.errors import AutosyncError

    try:
        app(args=argv, prog_name="autosync-transfer", standalone_mode=True)
    except AutosyncError as e:
        _error_line(str(e))
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


def _error_line(message: str) -> None:
    from rich.markup import escape

    from autosync_transfer.cli._common import err

    line = " ".join(message.split())
    err().print(f"[bold red]error:[/bold red] {escape(line)}", markup=True, highlight=False)
