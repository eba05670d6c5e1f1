from __future__ import annotations

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# the step simulator finds stored profiles and calibrations by fingerprint: tests see the
# shipped ones only, never what this user measured (a test that writes some sets its own folders)
for _name in ("AUTOSYNC_PROFILES_DIR", "AUTOSYNC_CALIBRATIONS_DIR"):
    if _name not in os.environ:
        import tempfile

        os.environ[_name] = tempfile.mkdtemp(prefix=f"{_name.lower()}-")

# under pytest-xdist the workers run side by side: each one's trials, profiles and calibrations
# count the others' CPU time as their own (a sibling test is not foreign load on the machine)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("AUTOSYNC_CPUWATCH_ROOT", str(os.getppid()))

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


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """A sqlite MLflow database with its tables created (the migrations take seconds); every
    test that needs a registry gets a fresh copy of it."""
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def registry(tmp_path, monkeypatch, empty_store):
    """A temporary MLflow store: ``sqlite:///{tmp_path}/mlflow.db``, artifacts in ``tmp_path``."""
    import shutil

    shutil.copy(empty_store, tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("AUTOSYNC_REGISTRY_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return tmp_path


@pytest.fixture
def one_thread():
    """Train on one thread (the machine's cores are shared with measurements)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
