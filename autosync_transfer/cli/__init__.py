"""The ``autosync-transfer`` command line: one Typer sub-app per noun.

Only ``typer`` is imported here; every command imports the library (torch, ...) inside its body
so that ``autosync-transfer --help`` stays fast. Every command is a :class:`~._params.Command`
(old option names kept for one release); the shared option words are in :mod:`._params`.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from autosync_transfer.cli import (adapt, clusters, datasets, domains, measure, search, simulators,
                                   strategies, worker)
from autosync_transfer.cli._params import Command

__all__ = ["app", "main"]

app = typer.Typer(
    name="autosync-transfer",
    help="Learn, transfer and apply gradient-synchronization strategies for data-parallel training.",
    epilog="Options mean the same in every command: --store PATH the trial store a command "
           "writes or continues; --data PATH trial data it only reads (a store, a parquet file or "
           "a folder); -n/--count how many; --export-json/--export-autodist PATH the strategy to "
           "use; --out PATH any other file written; --warmup/--iters/--timeout the measurement "
           "protocol (the library's by default); --json print JSON; --cluster-file YAML a "
           "resource spec as the cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug",
                               help="Print the traceback of an unexpected error (also "
                                    "AUTOSYNC_DEBUG=1)."),
) -> None:
    """Read by main(): an error raised before any callback runs still honours it."""


app.add_typer(domains.app, name="domains")
app.add_typer(clusters.app, name="clusters")
app.add_typer(strategies.app, name="strategies")
app.add_typer(datasets.app, name="datasets")
app.command("collect", cls=Command)(measure.collect)
app.command("run", cls=Command)(measure.run)
app.command("train", cls=Command)(simulators.train)
app.command("evaluate", cls=Command)(simulators.evaluate)
app.command("ui", cls=Command)(simulators.ui)
app.add_typer(simulators.registry_app, name="registry")
app.command("adapt", cls=Command)(adapt.adapt)
app.command("search", cls=Command)(search.search)
app.command("recommend", cls=Command)(search.recommend)
app.command("cleanup", cls=Command)(clusters.cleanup)
app.command("worker", hidden=True, cls=Command)(worker.worker)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user mistakes become one red line and exit code 2.

    Library errors (:class:`AutosyncError`) and click's usage errors (a missing argument, a value
    outside an option's choices, ...) are printed here as one line, never a traceback. Any other
    exception is a bug (the parsers turn bad input into an :class:`AutosyncError`); it is still
    one line and exit code 2, unless ``--debug`` (or ``AUTOSYNC_DEBUG=1``) asks for the traceback.
    """
    from autosync_transfer.cli._params import click_exceptions
    from autosync_transfer.errors import AutosyncError, interrupt_exit_code

    ex = click_exceptions()
    received: list[int] = []  # the signals that interrupted the command
    restore = _interrupt_on_signals(received)
    try:
        code = app(args=argv, prog_name="autosync-transfer", standalone_mode=False)
    except AutosyncError as e:
        _error_line(str(e))
        sys.exit(2)
    except ex.NoArgsIsHelpError:  # the help is printed already
        sys.exit(2)
    except ex.UsageError as e:
        _error_line(_usage_message(e))
        sys.exit(e.exit_code)
    except ex.ClickException as e:
        _error_line(e.format_message())
        sys.exit(e.exit_code)
    except typer.Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            sys.stderr.write("interrupted\n")
            sys.exit(interrupt_exit_code(e.__cause__))
        sys.stderr.write("aborted\n")
        sys.exit(1)
    except KeyboardInterrupt as e:
        sys.stderr.write("interrupted\n")
        sys.exit(interrupt_exit_code(e))
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:  # the net under the parsers: a bug, said in one line
        wrapped = _wrapped_interrupt(e)
        if wrapped is not None or received:  # a signal, wrapped by Python (e.g. in __set_name__)
            sys.stderr.write("interrupted\n")
            sys.exit(interrupt_exit_code(wrapped) if wrapped is not None else 128 + received[0])
        if _debug(sys.argv[1:] if argv is None else argv):
            raise
        _error_line(f"unexpected {type(e).__name__}: {_shorten(str(e))} "
                    f"(run with --debug for the traceback)")
        sys.exit(2)
    finally:
        restore()
    if received and code == 130:  # typer turns the KeyboardInterrupt into exit code 130
        sys.stderr.write("interrupted\n")
        sys.exit(128 + received[0])
    if isinstance(code, int) and code:
        sys.exit(code)


def _debug(argv: list[str]) -> bool:
    """Whether the command line (before its command word) or ``AUTOSYNC_DEBUG`` asks for
    tracebacks."""
    import os

    if os.environ.get("AUTOSYNC_DEBUG", "").strip().lower() in ("1", "true", "yes"):
        return True
    for tok in argv:
        if not tok.startswith("-"):
            return False
        if tok == "--debug":
            return True
    return False


def _shorten(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _wrapped_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The :class:`KeyboardInterrupt` (an interrupting signal) that ``exc`` wraps, if any: Python
    re-raises what interrupts some hooks (a class's ``__set_name__`` while a module imports) as
    the cause of another exception."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _interrupt_on_signals(received: list[int]) -> Any:
    """Make SIGINT and SIGTERM raise :class:`~autosync_transfer.errors.Interrupted` (so that a
    measurement in flight is torn down, not recorded, and the exit status is 130 / 143) and
    append their number to ``received``; return a function that restores the previous
    handlers."""
    import signal
    import threading

    from autosync_transfer.errors import Interrupted

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def raise_interrupted(signum: int, frame: Any) -> None:
        received.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    return restore


def _usage_message(e: Any) -> str:
    """One line for a click usage error; a value outside an option's choices as
    :func:`~._choices.choice_error` words it."""
    from enum import Enum

    param = getattr(e, "param", None)
    choices = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    errors = getattr(e.__cause__, "errors", None)  # the validation error of the value
    if isinstance(choices, type) and issubclass(choices, Enum) and callable(errors):
        from autosync_transfer.cli._choices import choice_error

        found = errors()
        if found and "input" in found[0]:
            return choice_error(choices, _param_name(param), found[0]["input"])
    given = ""
    if callable(errors):  # the value that was refused, as given (a long one cut short)
        found = errors()
        if found and isinstance(found[0].get("input"), str):
            value = found[0]["input"]
            given = f", got {value[:40]!r}" + ("..." if len(value) > 40 else "")
    ctx = getattr(e, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"{e.format_message()}{given}{hint}"


def _param_name(param: Any) -> str:
    """``--launcher`` for an option, ``BUILDER`` for an argument."""
    if getattr(param, "param_type_name", "") == "option":
        return max(param.opts, key=len)
    return getattr(param, "metavar", None) or str(param.name).upper()


def _error_line(message: str) -> None:
    from rich.markup import escape

    from autosync_transfer.cli._common import err

    line = _shorten(message, 2000)
    err().print(f"[bold red]error:[/bold red] {escape(line)}", markup=True, highlight=False)
