from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ANN001, ANN201
    """The number of fuzz examples run per input surface."""
    from fuzz_harness import CASES

    if not CASES:
        return
    terminalreporter.write_sep("-", "fuzz examples per input surface")
    for surface, n in sorted(CASES.items()):
        terminalreporter.write_line(f"{surface:28s} {n:6d}")
    terminalreporter.write_line(f"{'total':28s} {sum(CASES.values()):6d}")
