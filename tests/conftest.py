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


def _run_lock_path(config) -> str | None:  # noqa: ANN001 - pytest's Config
    """The lock file shared by the workers of one pytest-xdist run, in the run's base temporary
    folder (xdist gives each worker a folder of its own in it; pytest keeps the last few runs'),
    ``None`` outside xdist."""
    basetemp = getattr(config.option, "basetemp", None)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(basetemp)), "exclusive.lock")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001, ANN201 - pytest's hook
    """Tests marked ``exclusive`` measure the whole machine (its foreign CPU share, a shaped
    link's rate): under pytest-xdist such a test runs while no other test does. Every test holds
    a shared lock on the run's lock file for its setup, call and teardown (module fixtures
    included); an exclusive test holds it exclusively. A turnstile lets a waiting exclusive test
    in before the other workers' next tests."""
    path = _run_lock_path(item.config)
    if path is None:
        return (yield)
    import fcntl

    exclusive = item.get_closest_marker("exclusive") is not None
    with open(path + ".turnstile", "a") as gate, open(path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)


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


@pytest.fixture
def two_emulated_hosts():  # noqa: ANN201 - a Cluster
    """Three workers on two hosts (two on the chief) for an emulated cluster; skips where
    network namespaces are not available (root and iproute2)."""
    from autosync_transfer.domains.cluster import Cluster, Node
    from autosync_transfer.runtime.emulation import available

    ok, why = available()
    if not ok:
        pytest.skip(why)
    return Cluster(name="t", nodes=(
        Node(name="a", address="10.88.0.1", workers=2, bandwidth_gbps=1, chief=True),
        Node(name="b", address="10.88.0.2", workers=1, bandwidth_gbps=1)))
