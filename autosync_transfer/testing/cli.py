"""Assertions for command-line tests."""

from __future__ import annotations

from typing import Any

__all__ = ["assert_one_line_error"]


def assert_one_line_error(res: Any, needle: str) -> None:
    """``res`` (exit code, stdout, stderr) is a user error: exit 2, one ``error:`` line naming
    ``needle``, no traceback."""
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1, res.err
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in res.err + res.out
    assert needle in lines[0], (needle, lines[0])
