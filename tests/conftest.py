from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(capsys):
    """Run the real console entry point in-process; returns exit code, stdout and stderr."""
    from autosync_transfer.cli import main
    from autosync_transfer.cli._common import reset_consoles

    def run(*argv: str) -> CliResult:
        reset_consoles()
        code = 0
        try:
            main(list(argv))
        except SystemExit as e:
            code = int(e.code or 0)
        captured = capsys.readouterr()
        reset_consoles()
        return CliResult(code, captured.out, captured.err)

    return run
