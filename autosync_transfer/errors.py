"""One exception hierarchy for autosync-transfer.

Every error a user can cause (a bad name, a malformed file, an invalid strategy) is an
:class:`AutosyncError`; the CLI prints its message on one line and exits with code 2.
Third-party errors are wrapped with ``raise ... from e``.
"""

from __future__ import annotations

__all__ = [
    "AutosyncError",
    "ConfigError",
    "UnknownNameError",
    "SpecError",
    "WorkloadError",
    "StrategyValidationError",
    "NotFittedError",
    "Interrupted",
    "interrupt_exit_code",
    "format_pydantic_error",
]


class AutosyncError(Exception):
    """Base class of every error raised on purpose by autosync-transfer."""


class ConfigError(AutosyncError, ValueError):
    """A configuration value is invalid (bad field, bad value, bad combination)."""


class UnknownNameError(ConfigError, KeyError):
    """A name (model, cluster, domain, builder, ...) is not in the catalog."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it plain
        return str(self.args[0]) if self.args else ""


class SpecError(ConfigError):
    """A cluster / resource-spec / strategy file cannot be read or parsed."""


class WorkloadError(SpecError):
    """A workload spec cannot be imported, lacks a piece, or its training step fails."""


class StrategyValidationError(ConfigError):
    """A strategy breaks a rule of its domain; ``violations`` lists every broken rule."""

    def __init__(self, violations: list[str]):
        self.violations = list(violations)
        head = self.violations[0] if self.violations else "invalid strategy"
        more = f" (and {len(self.violations) - 1} more)" if len(self.violations) > 1 else ""
        super().__init__(f"invalid strategy: {head}{more}")


class NotFittedError(AutosyncError, RuntimeError):
    """An object that needs ``fit``/``setup`` was used before it."""


class Interrupted(KeyboardInterrupt):
    """The controller was asked to stop (SIGINT, SIGTERM) while it measured.

    Not a failure of anything: the trial in flight is not recorded (it is measured again on
    resume), the workers are torn down, and the CLI exits with ``128 + signum`` (130 for SIGINT,
    143 for SIGTERM). A :class:`KeyboardInterrupt`, so that code that lets Ctrl-C through lets
    this through too; a plain ``KeyboardInterrupt`` counts as SIGINT.
    """

    def __init__(self, signum: int = 2):
        self.signum = int(signum)
        super().__init__(f"interrupted by signal {self.signum}")

    @property
    def exit_code(self) -> int:
        """The conventional exit status: ``128 + signum``."""
        return 128 + self.signum


def interrupt_exit_code(exc: BaseException) -> int:
    """``128 + signum`` of an :class:`Interrupted`; 130 (SIGINT) for a plain KeyboardInterrupt."""
    return exc.exit_code if isinstance(exc, Interrupted) else 130


def _shown(value: object) -> str:
    """``repr(value)`` for an error line; containers by type, a huge number by its size."""
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return type(value).__name__
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 192:
        return f"a {value.bit_length()}-bit integer"
    if isinstance(value, (str, bytes)) and len(value) > 60:
        value = value[:60]
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        return type(value).__name__


def format_pydantic_error(exc: Exception, what: str = "") -> str:
    """Turn a pydantic ``ValidationError`` into one line naming the field and the value."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc).splitlines()[0]
    parts = []
    for err in exc.errors()[:3]:  # type: ignore[attr-defined]
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        value = err.get("input")
        shown = _shown(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        parts.append(f"{loc}: {msg} (got {shown})" if loc else f"{msg} (got {shown})")
    prefix = f"{what}: " if what else ""
    return prefix + "; ".join(parts)
