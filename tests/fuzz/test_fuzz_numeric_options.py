"""Every numeric option of every command: NaN, +-inf, 0, negative, huge, thousands of digits,
and text that is no number. Parsing alone (click's context, no command runs) must give a value
that is finite and within the option's bounds or a one-line usage error naming the option; the
console entry point with a value no option accepts must exit 2 with that line."""

from __future__ import annotations

import math
from functools import lru_cache

from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import CASES, check, fuzz, run_cli, workdir

#: values no numeric option accepts
REJECTED = ["nan", "NaN", "inf", "-inf", "+inf", "Infinity", "1e999", "-1e999", "9" * 5000,
            "-" + "9" * 5000, "9" * 40, "", "abc", "1,5", "0x10", "١٢", "--", "1e309"]
#: values some options accept
OTHERS = ["0", "-0", "-1", "1", "2", "0.5", "-0.5", "1e-300", "4294967295", "4294967296",
          "1000000", "1000001", "65535", "65536", "604800", "604801", " 1", "1_0", "2.0"]


@lru_cache(maxsize=1)
def _numeric_options() -> list[tuple[tuple[str, ...], str, list[str]]]:
    """(command path, option, the arguments that make the rest of the command line valid)."""
    from typer.main import get_command

    from autosync_transfer.cli import app

    found = []

    def walk(cmd, path):  # noqa: ANN001, ANN202
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for name in sorted(subs):
                walk(subs[name], (*path, name))
            return
        required: list[str] = []
        for p in cmd.params:
            if p.required and p.param_type_name == "argument":
                required.append("x")
            elif p.required:
                required += [max(p.opts, key=len), "x"]
        for p in cmd.params:
            ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if p.param_type_name == "option" and ann in (int, float) \
                    and not getattr(p, "is_flag", False):
                found.append((path, max(p.opts, key=len), required))

    walk(get_command(app), ())
    return found


def _command(path: tuple[str, ...]):  # noqa: ANN202
    from typer.main import get_command

    from autosync_transfer.cli import app

    cmd = get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def test_every_numeric_option_is_found() -> None:
    names = {(" ".join(p), o) for p, o, _ in _numeric_options()}
    assert ("strategies sample", "--count") in names and ("search", "--diversity") in names
    assert len(names) >= 30


@fuzz(400)
@given(st.data(), st.one_of(st.sampled_from(REJECTED + OTHERS), st.integers().map(str),
                            st.floats().map(repr)))
def test_parse_bounds(data: st.DataObject, value: str) -> None:
    from autosync_transfer.cli import _usage_message
    from autosync_transfer.cli._params import NUMERIC_BOUNDS, click_exceptions

    path, option, required = data.draw(st.sampled_from(_numeric_options()))
    cmd = _command(path)
    CASES["numeric CLI options"] += 1
    try:
        ctx = cmd.make_context(" ".join(path), [*required, option, value])
    except click_exceptions().UsageError as e:
        line = _usage_message(e)
        assert "\n" not in line and len(line) < 600, line
        assert option in line or option.lstrip("-") in line, line
        return
    param = next(p for p in cmd.params if p.opts and max(p.opts, key=len) == option)
    got = ctx.params[param.name]
    assert not (isinstance(got, float) and not math.isfinite(got)), (option, value, got)
    assert NUMERIC_BOUNDS.check(param.name, got) is None, (option, value, got)
    assert value not in REJECTED, (option, value, got)


@fuzz(150)
@given(st.data(), st.sampled_from(REJECTED))
def test_cli_rejects(data: st.DataObject, value: str) -> None:
    path, option, required = data.draw(st.sampled_from(_numeric_options()))
    with workdir():
        res = run_cli(*path, *required, option, value)
    check(res, "numeric CLI options")
    assert res.code == 2 and option in res.err, res
