"""What every fuzz test checks, and the values it throws at the inputs.

A fuzzed command either succeeds (exit 0) or fails as a user mistake: exit 2, one ``error:``
line, no traceback, and no file left behind in the example's folder. The catch-all net of the
CLI (``error: unexpected ...``) counts as a failure here: each crash class is fixed in its
parser, the net only catches what the fuzzer has not found yet.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["CASES", "Result", "fuzz", "run_cli", "check", "files", "workdir", "NASTY_NUMBERS",
           "NASTY_STRINGS", "nasty_values", "json_values"]

#: examples run per surface (printed at the end of the session by conftest.py)
CASES: Counter[str] = Counter()


def fuzz(max_examples: int):  # noqa: ANN201 - hypothesis settings
    """Deterministic, bounded: the same examples on every run, no example database."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out[-500:]!r}, err={self.err[-2000:]!r})"


def run_cli(*argv: str) -> Result:
    """The console entry point in-process, its stdout and stderr captured."""
    from autosync_transfer.cli import main
    from autosync_transfer.cli._common import reset_consoles

    out, err = io.StringIO(), io.StringIO()
    code = 0
    reset_consoles()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        reset_consoles()
    return Result(code, out.getvalue(), err.getvalue())


def check(res: Result, surface: str, *, written: set[Path] | None = None) -> None:
    """``res`` is a success or a one-line user error (no traceback, not the catch-all net);
    ``written`` (files that appeared) must be empty when it failed."""
    CASES[surface] += 1
    assert "Traceback" not in res.out + res.err, res
    assert res.code in (0, 2), res
    if res.code == 2:
        lines = [ln for ln in res.err.splitlines() if ln.strip() and not ln.startswith("note: ")]
        assert len(lines) == 1, res
        assert lines[0].startswith("error: "), res
        assert "error: unexpected " not in lines[0], res
        assert not written, (written, res)


def files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A fresh folder per example (hypothesis runs many examples in one test call), also the
    current directory and the default datasets folder, so nothing lands elsewhere."""
    old = os.getcwd()
    env = os.environ.get("AUTOSYNC_DATASETS")
    with tempfile.TemporaryDirectory(prefix="fuzz-") as d:
        path = Path(d)
        (path / "datasets").mkdir()
        os.environ["AUTOSYNC_DATASETS"] = str(path / "datasets")
        os.chdir(path)
        try:
            yield path
        finally:
            os.chdir(old)
            if env is None:
                os.environ.pop("AUTOSYNC_DATASETS", None)
            else:
                os.environ["AUTOSYNC_DATASETS"] = env


#: numbers as a user might type them, or an attacker
NASTY_NUMBERS: list[object] = [
    0, -1, 1, 2, -(2**31), 2**31, 2**63, 10**30, -(10**30), 10**400, 0.5, -0.0, 1e-320, 1e308,
    math.inf, -math.inf, math.nan, True, False,
]
#: strings that break naive code: markup, paths, control characters, huge, empty
NASTY_STRINGS: list[str] = [
    "", " ", "[red]x[/red]", "[/]", "[bold", "../../../etc/passwd", "/", "a/b", "a-b", "n0",
    "x\ny", "\x00", "\x1b[31m", "\u202e", "é", "🙂", "%s%n", "{0}", "${HOME}", "*", "-1",
    "nan", "inf", "1e999", "9" * 5000, "a" * 10000, "models:/x/1", "C:\\x", ".", "..",
]


def nasty_values() -> st.SearchStrategy[object]:
    """A nasty scalar, or a small container of them."""
    scalar = st.one_of(st.sampled_from(NASTY_NUMBERS), st.sampled_from(NASTY_STRINGS),
                       st.none(), st.integers(), st.floats(), st.text(max_size=20))
    return st.one_of(scalar, st.lists(scalar, max_size=3),
                     st.dictionaries(st.text(max_size=5), scalar, max_size=3))


def json_values(max_leaves: int = 20) -> st.SearchStrategy[object]:
    """Arbitrary JSON-able values (finite floats: JSON has no NaN)."""
    leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False,
                     allow_infinity=False), st.text(max_size=20), st.sampled_from(NASTY_STRINGS))
    return st.recursive(leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                  st.dictionaries(st.text(max_size=8), c,
                                                                  max_size=4)),
                        max_leaves=max_leaves)
