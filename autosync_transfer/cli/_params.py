"""The option vocabulary shared by the commands.

One word, one meaning, in every command:

- ``DOMAIN`` (the positional argument): a catalog or stored domain, e.g. ``bert-B`` (or
  ``--model`` with ``--cluster-file``); ``--simulator``: a simulator, as a registered model
  (``models:/NAME@ALIAS``) or a domain whose registry champion it is;

- ``--store PATH``: the trial store (JSON Lines) a command writes or continues;
- ``--data PATH``: trial data a command only reads (a store, a parquet file or a folder);
- ``-n/--count N``: how many things a command makes;
- ``--export-json PATH`` / ``--export-autodist PATH``: the strategy to use, as JSON / AutoDist;
  ``--out PATH``: any other file a command writes;
- ``--warmup/--iters/--timeout``: the measurement protocol, by default the library's
  :class:`~autosync_transfer.runtime.trial.Protocol` (the same for collect, run and search);
- ``--json``: print the report as JSON; ``--cluster-file``: a resource-spec YAML as the cluster;
- ``--model SPEC`` (with ``--cluster-file``): the user's workload in place of a catalog domain.

:class:`Command` (the ``cls`` of every command) states library errors in these words and keeps
every numeric value within :data:`NUMERIC_BOUNDS`.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

__all__ = [
    "click_exceptions", "Command", "data_option", "store_option", "json_option",
    "cluster_file_option", "model_option", "MODEL_HELP", "warmup_option", "iters_option",
    "timeout_option", "protocol",
    "PROTOCOL_HELP_DEFAULTS", "LIBRARY_PARAMETERS", "in_flags", "NumericBounds",
    "NUMERIC_BOUNDS",
]


#: the library's Protocol() defaults as the help texts state them (a test keeps them equal)
PROTOCOL_HELP_DEFAULTS: dict[str, float] = {"warmup": 10, "iters": 40, "timeout_s": 300.0}


class NumericBounds:
    """The bounds every numeric option of every command keeps, besides its own ``min``/``max``:
    a float is finite; an integer is at most ``max_int`` unless its parameter is named in
    ``int_max``, a float at most ``float_max[name]`` where named. One place, so that no count,
    budget or seed reaches the library as ``inf``, ``nan`` or a thousand-digit number."""

    def __init__(self, max_int: int, int_max: dict[str, int], float_max: dict[str, float]):
        self.max_int, self.int_max, self.float_max = max_int, dict(int_max), dict(float_max)

    def check(self, name: str, value: Any) -> str | None:
        """The rule ``value`` of parameter ``name`` breaks, or None."""
        import math

        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int):
            top = self.int_max.get(name, self.max_int)
            if value > top:
                return f"must be <= {top}"
            if value < -top:
                return f"must be >= {-top}"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "must be a finite number"
            top_f = self.float_max.get(name)
            if top_f is not None and value > top_f:
                return f"must be <= {top_f:g}"
        return None


#: seeds fit numpy's and torch's generators; counts, budgets, candidates, iterations at most a
#: million; a trial's watchdog at most a week; the diversity weight at most 100; a learning rate at
#: most 10
NUMERIC_BOUNDS = NumericBounds(
    max_int=10**6,
    int_max={"seed": 2**32 - 1, "port": 65535, "seeds": 1000, "epochs": 100_000},
    float_max={"timeout_s": 7 * 24 * 3600.0, "timeout": 7 * 24 * 3600.0, "diversity": 100.0,
               "lr": 10.0},
)


def _shown(value: Any) -> str:
    """``value`` as an error line shows it (a thousand-digit number cut short)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def click_exceptions() -> Any:
    """The exceptions module of the click that Typer runs on (Typer >= 0.2x ships its own)."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - a Typer that uses click itself
        from click import exceptions
    return exceptions


#: library parameter names whose CLI option has another name (in every command that has it)
LIBRARY_PARAMETERS: dict[str, str] = {
    "max_epochs": "epochs", "trials": "data", "n": "count", "warm_start": "warm_start",
    "knob_candidates": "knob_candidates",
}


def in_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` of a library error with parameter names in the command's own words:
    ``shots=500 is more`` -> ``--shots 500 is more``, ``collect=True`` -> ``--collect``,
    ``method='zero-shot'`` -> ``--method 'zero-shot'``, ``max_epochs must`` -> ``--epochs must``.
    ``flags`` maps a library parameter name to its option (``{"shots": "--shots"}``)."""
    import re

    if not flags:
        return message
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    boolean = re.compile(rf"(?<![\w.-])({names})=True\b")
    valued = re.compile(rf"(?<![\w.-])({names})=('[^']*'|[^\s,;)]*[^\s,;:.)])")
    # a bare word only for names that cannot be an ordinary word ("n must" stays as it is)
    words = "|".join(sorted((re.escape(n) for n in flags if "_" in n or len(n) > 4), key=len,
                            reverse=True)) or "(?!)"
    bare = re.compile(rf"(?<![\w.'-])({words}) (must|are|needs)\b")
    message = boolean.sub(lambda m: flags[m.group(1)], message)
    message = valued.sub(lambda m: f"{flags[m.group(1)]} {m.group(2)}", message)
    return bare.sub(lambda m: f"{flags[m.group(1)]} {m.group(2)}", message)


class Command(TyperCommand):
    """A Typer command that states library errors in its own option names (:func:`in_flags`)
    and checks every numeric value (:data:`NUMERIC_BOUNDS`)."""

    def invoke(self, ctx: Any) -> Any:
        from autosync_transfer.errors import AutosyncError

        try:
            return super().invoke(ctx)
        except AutosyncError as e:
            e.args = (in_flags(str(e), self.flags()), *e.args[1:])
            raise

    def flags(self) -> dict[str, str]:
        """Library parameter name -> this command's option (``{"shots": "--shots"}``)."""
        opts = {p.name: max(p.opts, key=len) for p in self.params
                if p.param_type_name == "option" and p.name and p.opts}
        found = dict(opts)
        for lib, cli in LIBRARY_PARAMETERS.items():
            if cli in opts:
                found[lib] = opts[cli]
        return found

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        if not ctx.resilient_parsing:
            self._check_numbers(ctx)
        return rest

    def _check_numbers(self, ctx: Any) -> None:
        """Every numeric value within :data:`NUMERIC_BOUNDS` (a usage error naming the option)."""
        for p in self.params:
            value = ctx.params.get(p.name)
            rule = NUMERIC_BOUNDS.check(str(p.name), value)
            if rule is not None:
                name = max(p.opts, key=len) if p.param_type_name == "option" and p.opts \
                    else str(p.name).upper()
                raise click_exceptions().UsageError(f"{name} {rule}, got {_shown(value)}", ctx)


# -- options used by several commands ------------------------------------------------------------
def data_option(help: str | None = None) -> Any:  # noqa: A002
    return typer.Option(
        None, "--data", metavar="PATH",
        help=help or "Trial data to read: a trial store (.jsonl), a parquet file or a folder of "
                     "them; default: the shipped datasets ($AUTOSYNC_DATASETS overrides).")


def store_option(help: str) -> Any:  # noqa: A002
    return typer.Option(None, "--store", metavar="PATH", help=help)


def json_option(help: str = "Print JSON.") -> Any:  # noqa: A002
    return typer.Option(False, "--json", help=help)


def cluster_file_option() -> Any:
    return typer.Option(None, "--cluster-file", metavar="YAML",
                        help="Use this resource-spec YAML as the cluster.")


#: what ``--model`` takes, as every command's help states it
MODEL_HELP = ("Your workload in place of DOMAIN, run on --cluster-file: path/to/file.py or "
              "package.module with build_model(), example_batch(batch_size, generator) and "
              "loss_fn(output, targets); ...:NAME for a Workload object or factory; or a zoo "
              "model name. Its domain is <workload>-<cluster>.")


def model_option(help: str = MODEL_HELP) -> Any:  # noqa: A002
    return typer.Option(None, "--model", metavar="SPEC", help=help)


def warmup_option(extra: str = "") -> Any:
    return typer.Option(None, "--warmup", min=0, show_default=False,
                        help=f"Untimed iterations per trial (default "
                             f"{PROTOCOL_HELP_DEFAULTS['warmup']:g}, the library's protocol{extra}).")


def iters_option(extra: str = "") -> Any:
    return typer.Option(None, "--iters", min=1, show_default=False,
                        help=f"Timed iterations per trial (default "
                             f"{PROTOCOL_HELP_DEFAULTS['iters']:g}, the library's protocol{extra}).")


def timeout_option(extra: str = "") -> Any:
    return typer.Option(None, "--timeout", min=1.0, show_default=False,
                        help=f"Watchdog per trial, seconds (default "
                             f"{PROTOCOL_HELP_DEFAULTS['timeout_s']:g}, the library's protocol"
                             f"{extra}).")


def protocol(warmup: int | None, iters: int | None, timeout_s: float | None,
             base: Any | None = None) -> Any:
    """The measurement protocol: the given values over ``base`` (default: ``Protocol()``)."""
    from autosync_transfer.runtime.trial import Protocol

    given = {k: v for k, v in (("warmup", warmup), ("iters", iters), ("timeout_s", timeout_s))
             if v is not None}
    return Protocol(**{**(base or Protocol()).model_dump(), **given})
