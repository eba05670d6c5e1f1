"""Files in shared folders (autosync_transfer/_files.py and its users): side files under the
store's flock with its torn-line rules, no link followed, no predictable temporary name.

One test per security fix (docs/security.md lists them)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autosync_transfer._files import FileLock, append_line, atomic_write, complete_lines
from autosync_transfer.errors import ConfigError, SpecError


def make_record(i: int):  # noqa: ANN201
    from autosync_transfer.dataset.store import TrialRecord

    return TrialRecord(id=f"r{i}", domain="bert-A", model="bert", cluster="A",
                       model_fingerprint="m" * 16, cluster_fingerprint="c" * 16,
                       strategy_id=f"s{i}", strategy_kind="sampled", strategy=None, status="ok",
                       iteration_times_s=[0.1], median_s=0.1, protocol={}, launcher="local",
                       timestamp="2024-05-01T12:00:00.000+00:00", wall_s=1.0, machine={})


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


# -- side files: locking and torn lines -----------------------------------------------------------
def test_append_cuts_a_torn_last_line_and_readers_skip_it(tmp_path: Path) -> None:
    p = tmp_path / "q.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2')  # a writer killed mid-line
    lines, off = complete_lines(p, "queue")
    assert lines == [b'{"a": 1}'] and off == 9
    append_line(p, '{"a": 3}', "queue")
    assert p.read_bytes() == b'{"a": 1}\n{"a": 3}\n'


def test_append_waits_for_the_lock(tmp_path: Path) -> None:
    p = tmp_path / "q.jsonl"
    p.write_text("")
    fd = os.open(p, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process's writer holds it
    t = threading.Thread(target=append_line, args=(p, "x", "queue"))
    t.start()
    time.sleep(0.3)
    assert p.read_text() == ""
    os.close(fd)
    t.join(5)
    assert p.read_text() == "x\n"


def test_torchrun_pool_names_a_bad_result_line_and_ignores_a_torn_one(tmp_path: Path) -> None:
    from autosync_transfer.runtime.torchrun import TorchrunPool

    results = tmp_path / "r.jsonl"
    pool = TorchrunPool(None, tmp_path / "q.jsonl", results, wait_s=0.5, poll_s=0.05)
    results.write_text(json.dumps({"record_id": "a/1", "status": "ok",
                                   "iteration_times_s": [0.5], "wall_s": 1}) + '\n{"record_')
    assert pool.run(None, job_id="a/1").status == "ok"  # the torn line waits for its writer
    results.write_text('{"record_id": "a/1", "status": "ok"}\nnot json\n')
    pool2 = TorchrunPool(None, tmp_path / "q.jsonl", results, wait_s=0.5, poll_s=0.05)
    with pytest.raises(ConfigError, match=r"r.jsonl': line 2 is not a result"):
        pool2.run(None, job_id="a/2")
    assert "not json" in results.read_text()  # never deleted


def test_torchrun_queue_continues_after_stop_in_place(tmp_path: Path) -> None:
    from autosync_transfer.runtime.torchrun import STOP, TorchrunPool

    queue = tmp_path / "q.jsonl"
    queue.write_text(f'{{"record_id": "x"}}\n{STOP}\n{{"torn')
    ino = queue.stat().st_ino
    pool = TorchrunPool(None, queue, tmp_path / "r.jsonl", wait_s=0.2, poll_s=0.05)
    pool._open()
    assert queue.read_text() == '{"record_id": "x"}\n'
    assert queue.stat().st_ino == ino  # cut in place: no temporary file, no rename
    assert sorted(os.listdir(tmp_path)) == ["q.jsonl"]


def test_tpe_journal_is_locked_cut_and_checked(tmp_path: Path) -> None:
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.search.config import SearchConfig
    from autosync_transfer.search.loop import Searcher
    from autosync_transfer.search.proposers.tpe import journal_path

    d = get_domain("ncf-A")
    store = tmp_path / "run.jsonl"
    cfg = SearchConfig(method="tpe", budget=4, seed=1)
    s = Searcher(d, store, cfg, launcher="local")
    s._start()
    assert s.proposer.propose(0, 2, set(), [])
    journal = journal_path(store)
    good = journal.read_bytes()
    assert good.endswith(b"\n") and not Path(f"{journal}.lock").exists()  # flock, no lock file
    journal.write_bytes(good + b'{"op_code": 4, "work')  # killed mid-write
    Searcher(d, store, cfg, launcher="local")._start()
    assert journal.read_bytes().startswith(good) and journal.read_bytes().endswith(b"\n")
    lines = journal.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(ConfigError, match=r"tpe.journal': line 2 is not a journal entry"):
        Searcher(d, store, cfg, launcher="local")._start()
    assert b"garbage" in journal.read_bytes()


# -- security fixes, one test each ----------------------------------------------------------------
def test_store_path_that_is_a_link_is_refused(tmp_path: Path, cli) -> None:
    """Fix 1: a trial store (collect/search --store) that is a symbolic link is refused."""
    from autosync_transfer.dataset.store import TrialStore

    victim = _victim(tmp_path)
    link = tmp_path / "trials.jsonl"
    link.symlink_to(victim)
    with pytest.raises(SpecError, match="is a symbolic link"):
        TrialStore(link).append(make_record(1))
    with pytest.raises(SpecError, match="is a symbolic link"):
        list(TrialStore(link).records())
    res = cli("collect", "ncf-A", "--launcher", "local", "-n", "1", "--store", str(link))
    assert res.code == 2 and "is a symbolic link" in res.err
    assert victim.read_text() == "precious\n"


def test_store_metadata_has_no_predictable_temp_name_and_no_link(tmp_path: Path) -> None:
    """Fix 2: the metadata beside a store is written through a mkstemp file, never through a
    link planted at the old predictable name (``.<meta>.<pid>.tmp``) or at the metadata path."""
    from autosync_transfer.dataset.store import TrialStore

    victim = _victim(tmp_path)
    store = TrialStore(tmp_path / "s.jsonl")
    planted = tmp_path / f".s.jsonl.meta.json.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    store.write_meta({"a": 1})
    assert victim.read_text() == "precious\n" and store.read_meta() == {"a": 1}
    store.meta_path.unlink()
    store.meta_path.symlink_to(victim)
    with pytest.raises(SpecError, match="is a symbolic link"):
        store.write_meta({"a": 2})
    assert victim.read_text() == "precious\n"


def test_parquet_export_refuses_a_link_and_no_predictable_temp(tmp_path: Path) -> None:
    """Fix 3: ``datasets compact`` (TrialStore.compact) never writes through a link."""
    pytest.importorskip("pyarrow")
    from autosync_transfer.dataset.store import TrialStore

    victim = _victim(tmp_path)
    store = TrialStore(tmp_path / "s.jsonl")
    store.append(make_record(1))
    out = tmp_path / "out.parquet"
    (tmp_path / f".out.parquet.{os.getpid()}.tmp").symlink_to(victim)
    store.compact(out)
    assert victim.read_text() == "precious\n" and out.stat().st_size > 0
    out.unlink()
    out.symlink_to(victim)
    with pytest.raises(SpecError, match="is a symbolic link"):
        store.compact(out)
    assert victim.read_text() == "precious\n"


def test_strategy_exports_refuse_links(tmp_path: Path, cli) -> None:
    """Fix 4: ``--export-json`` / ``--out`` / AutoDist files: a dangling link at the path is
    refused before any work, and a link planted at the old temporary name is not followed."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.strategies.autodist import write_autodist_file
    from autosync_transfer.strategies.builders import build

    victim = _victim(tmp_path)
    dangling = tmp_path / "chosen.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    res = cli("strategies", "sample", "ncf-A", "-n", "2", "--out", str(dangling))
    assert res.code == 2 and "symbolic link" in res.err, res.err
    assert not (tmp_path / "nowhere.json").exists()
    out = tmp_path / "s.jsonl"
    (tmp_path / "s.jsonl.tmp").symlink_to(victim)
    res = cli("strategies", "sample", "ncf-A", "-n", "2", "--out", str(out))
    assert res.code == 0, res.err
    assert victim.read_text() == "precious\n" and len(out.read_text().splitlines()) == 2
    d = get_domain("ncf-A")
    link = tmp_path / "strategy.yml"
    link.symlink_to(victim)
    with pytest.raises(SpecError, match="is a symbolic link"):
        write_autodist_file(build("ps", d), d.cluster, link)
    assert victim.read_text() == "precious\n"


def test_side_files_refuse_links(tmp_path: Path) -> None:
    """Fix 5: the torchrun queue and results and the TPE journal are never opened through a
    link (O_NOFOLLOW)."""
    from autosync_transfer.runtime.torchrun import TorchrunPool

    victim = _victim(tmp_path)
    queue = tmp_path / "q.jsonl"
    queue.symlink_to(victim)
    pool = TorchrunPool(None, queue, tmp_path / "r.jsonl", wait_s=0.1)
    with pytest.raises(SpecError, match="torchrun job queue .* is a symbolic link"):
        pool.run(None, job_id="x")
    with pytest.raises(SpecError, match="is a symbolic link"):
        FileLock(queue, "TPE journal").acquire()
    with pytest.raises(SpecError, match="is a symbolic link"):
        atomic_write(queue, b"x", "file")
    assert victim.read_text() == "precious\n"


def _plant(folder: Path, package: str, marker: Path) -> None:
    pkg = folder / package
    pkg.mkdir()
    code = f"open({str(marker)!r}, 'w').write('imported from the working folder')\n"
    (pkg / "__init__.py").write_text(code)
    (pkg / "__main__.py").write_text(code)


def test_torchrun_worker_command_does_not_import_from_the_working_folder(tmp_path: Path) -> None:
    """Fix 6: the printed torchrun command runs ``python -m`` with PYTHONSAFEPATH: a package
    planted in the folder it is started from is not imported."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.launch import TorchrunLauncher

    cmd = TorchrunLauncher().worker_command(get_domain("ncf-A"), state_path="s.jsonl")
    assert cmd.startswith("PYTHONSAFEPATH=1 torchrun ")
    marker = tmp_path / "marker"
    _plant(tmp_path, "autosync_transfer", marker)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    run = f"PYTHONSAFEPATH=1 {torchrun} --standalone --nproc_per_node=1 -m autosync_transfer --help"
    res = subprocess.run(run, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not marker.exists()


def test_trial_workers_do_not_import_from_the_working_folder(tmp_path: Path,
                                                             monkeypatch) -> None:
    """Fix 7: trial workers (``python -m autosync_transfer.runtime.worker``, as root on the
    emulated launcher) start with PYTHONSAFEPATH: a package planted in the caller's folder is
    not imported."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.trial import Protocol, WorkerPool
    from autosync_transfer.strategies.builders import build

    marker = tmp_path / "marker"
    _plant(tmp_path, "autosync_transfer", marker)
    monkeypatch.chdir(tmp_path)
    d = get_domain("ncf-A")
    with WorkerPool(d, "local", Protocol(warmup=0, iters=1, timeout_s=60)) as pool:
        res = pool.run(build("ps", d))
    assert res.ok, res.error
    assert not marker.exists()


def test_mlflow_ui_does_not_import_from_the_working_folder(tmp_path: Path) -> None:
    """Fix 8: ``ui`` starts ``python -m mlflow`` with PYTHONSAFEPATH in a private empty folder
    (the server's workers put their folder on sys.path): an ``mlflow`` package planted in the
    caller's folder is not run."""
    marker = tmp_path / "marker"
    work = tmp_path / "work"
    work.mkdir()
    _plant(work, "mlflow", marker)
    exe = Path(sys.executable).with_name("autosync-transfer")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db",
               AUTOSYNC_REGISTRY_ARTIFACTS=str(tmp_path / "artifacts"))
    proc = subprocess.Popen([str(exe), "ui", "--port", "5999"], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        time.sleep(10)  # a planted package runs at once, or when the server's workers start
    finally:
        os.killpg(proc.pid, 15)  # the command removes its folder
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
    assert not marker.exists()


@pytest.mark.netns
def test_link_rate_helpers_do_not_import_from_the_working_folder(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """Fix 9: the helpers an emulated cluster starts as root inside its namespaces
    (``measure_link_rate``'s receiver and sender, ``python -c``) run isolated (``-I``): a
    ``json`` module planted in the caller's folder is not imported."""
    from autosync_transfer.domains.cluster import Cluster, Node
    from autosync_transfer.runtime.emulation import EmulatedCluster, available

    ok, why = available()
    if not ok:
        pytest.skip(why)
    marker = tmp_path / "marker"
    _plant(tmp_path, "json", marker)
    monkeypatch.chdir(tmp_path)
    cluster = Cluster(name="t", nodes=tuple(
        Node(name=f"w{i}", address=f"10.89.0.{i + 1}", workers=1, bandwidth_gbps=1.0,
             chief=i == 0) for i in range(2)))
    with EmulatedCluster(cluster) as ec:
        rate = ec.measure_link_rate("w0", "w1", nbytes=1 << 20)
    assert rate > 0 and not marker.exists()


def test_worker_logs_are_not_appended_through_a_link(tmp_path: Path) -> None:
    """Fix 10: the trial workers' logs (``<store folder>/logs/<run>/worker-<rank>.log``, written
    as root on the emulated launcher) are opened with O_NOFOLLOW; a planted link is refused
    before any worker starts."""
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.runtime.trial import Protocol, WorkerPool
    from autosync_transfer.strategies.builders import build

    victim = _victim(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-1.log").symlink_to(victim)
    d = get_domain("ncf-A")
    with WorkerPool(d, "local", Protocol(warmup=0, iters=1), log_dir=logs) as pool:
        res = pool.run(build("ps", d))
    # the environment's failure (a collection stops on it), never the strategy's
    assert res.infrastructure and "worker-1.log' is a symbolic link" in res.error
    assert victim.read_text() == "precious\n"
