"""``autosync-transfer datasets list|show|import-autosync``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autosync_transfer.dataset.store import TrialRecord, TrialStore
from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.strategies.autodist import strategy_to_autodist
from autosync_transfer.strategies.types import AllReduce, Strategy, VarConfig


def _record(rid: str, sid: str, median: float | None, status: str = "ok",
            reference: bool = False) -> TrialRecord:
    s = Strategy(id=sid, kind="ps_lb", nodes=(VarConfig(var_name="w", synchronizer=AllReduce()),))
    return TrialRecord(
        id=rid, domain="bert-A", model="bert", cluster="A", model_fingerprint="m",
        cluster_fingerprint="c", strategy_id=sid, strategy_kind=s.kind,
        strategy=s.model_dump(mode="json"), status=status,  # type: ignore[arg-type]
        iteration_times_s=[median] if median else [], median_s=median,
        protocol={"warmup": 2, "iters": 5}, launcher="emulated", reference=reference,
        timestamp="2024-05-01T12:00:00+00:00", wall_s=2.0, machine={},
    )


@pytest.fixture
def store_path(tmp_path) -> Path:
    store = TrialStore(tmp_path / "trials.jsonl")
    store.append(_record("1", "fast", 0.1))
    store.append(_record("2", "slow", 0.5))
    store.append(_record("3", "fast", 0.12, reference=True))
    store.append(_record("4", "broken", None, status="failed"))
    return store.path


def test_surface():
    from typer.main import get_command

    from autosync_transfer.cli import app

    group = get_command(app).commands["datasets"]  # type: ignore[attr-defined]
    assert sorted(group.commands) == ["compact", "import-autosync", "list", "repair", "show"]


def test_list(cli, store_path):
    res = cli("datasets", "list", "--data", str(store_path), "--json")
    assert res.code == 0, res.err
    (row,) = json.loads(res.out)
    assert (row["domain"], row["ok"], row["failed"], row["strategies"]) == ("bert-A", 3, 1, 2)
    assert row["spread"] == pytest.approx(0.5 / 0.11)
    res = cli("datasets", "list", "--data", str(store_path))
    assert res.code == 0 and "bert-A" in res.out and "4.55x" in res.out


def test_list_empty_folder(cli, tmp_path):
    res = cli("datasets", "list", "--data", str(tmp_path))
    assert res.code == 0 and "no trials" in res.out
    assert json.loads(cli("datasets", "list", "--data", str(tmp_path), "--json").out) == []


def test_show(cli, store_path):
    res = cli("datasets", "show", "bert-A", "--data", str(store_path), "--json")
    assert res.code == 0, res.err
    info = json.loads(res.out)
    assert [f["strategy_id"] for f in info["fastest"]] == ["fast", "slow"]
    assert info["fastest"][0]["kind"] == "ps_lb"
    assert info["reference_noise"]["strategies"] == 1
    from autosync_transfer.rankers.metrics import noise_ceiling

    assert info["pairwise_ceiling"] == pytest.approx(noise_ceiling(
        info["runtimes_s"], info["reference_noise"]["median_robust_cv"]))
    assert 0.5 <= info["pairwise_ceiling"] <= 1.0
    res = cli("datasets", "show", "bert-A", "--data", str(store_path))
    assert res.code == 0, res.err
    assert "fast" in res.out and '"iters": 5' in res.out and "reference noise" in res.out
    assert "pairwise-accuracy ceiling at this noise" in res.out


def _one_line_error(res, needle: str) -> None:
    assert res.code == 2, (res.code, res.out, res.err)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.err


def test_bad_inputs(cli, store_path, tmp_path):
    _one_line_error(cli("datasets", "list", "--data", str(tmp_path / "nope")), "no trial dataset")
    _one_line_error(cli("datasets", "show", "bert-A", "--data", str(tmp_path / "nope")),
                    "no trial dataset")
    _one_line_error(cli("datasets", "show", "gpt-Z", "--data", str(store_path)),
                    "no trials for domain 'gpt-Z'")
    lines = store_path.read_text().splitlines()
    store_path.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    _one_line_error(cli("datasets", "list", "--data", str(store_path)), "line 2")
    _one_line_error(cli("datasets", "import-autosync", str(tmp_path / "nope"), "--store",
                        str(tmp_path / "o.jsonl")), "is not a folder")


def test_import_autosync(cli, tmp_path):
    cluster = Cluster(name="c", nodes=(
        Node(name="n0", address="10.0.0.1", workers=1, bandwidth_gbps=10, chief=True),))
    folder = tmp_path / "root" / "ncf" / "cluster-A"
    for d in ("strategies", "runtime", "resource_spec"):
        (folder / d).mkdir(parents=True)
    s = Strategy(id="42", nodes=(VarConfig(var_name="w", synchronizer=AllReduce()),))
    (folder / "strategies" / "42").write_bytes(strategy_to_autodist(s, cluster))
    (folder / "runtime" / "42").write_text(yaml.safe_dump({"average": 0.3, "runtime": [0.3]}))
    (folder / "resource_spec" / "42").write_text(cluster.to_yaml())
    (folder / "strategies" / "43").write_bytes(strategy_to_autodist(s, cluster))  # no runtime
    out = tmp_path / "o.jsonl"
    res = cli("datasets", "import-autosync", str(tmp_path / "root"), "--store", str(out))
    assert res.code == 0, res.err
    assert "imported 1 trials" in res.out and "1 without runtime" in res.out
    res = cli("datasets", "import-autosync", str(tmp_path / "root"), "--store", str(out), "--json")
    assert json.loads(res.out)["duplicates"] == 1
    res = cli("datasets", "show", "ncf-cluster-A", "--data", str(out), "--json")
    assert json.loads(res.out)["fastest"][0]["kind"] == "autodist"


def test_help_is_light():
    code = (
        "import sys\n"
        "from autosync_transfer.cli import main\n"
        "for argv in (['datasets', '--help'], ['datasets', 'show', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('pandas', 'pyarrow', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_compact_writes_one_parquet_per_store(cli, tmp_path):
    pytest.importorskip("pyarrow")
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.testing.synthetic import write_synthetic_store

    src = tmp_path / "trials"
    src.mkdir()
    write_synthetic_store(src / "ncf-A.jsonl", "ncf-A", 5, 0)
    res = cli("datasets", "compact", "--data", str(src), "--out", str(tmp_path / "pq"))
    assert res.code == 0, res.err
    from autosync_transfer.dataset.loader import load_trials

    df = load_trials([tmp_path / "pq" / "ncf-A.parquet"], status=None)
    assert len(df) == 5 and set(df["domain"]) == {get_domain("ncf-A").name}


def test_datasets_repair(cli, tmp_path) -> None:
    import json as _json

    path = tmp_path / "s.jsonl"
    store = TrialStore(path)
    store.append(_record("1", "fast", 0.1))
    with open(path, "ab") as f:
        f.write(b"{broken\n")
    store_bytes = path.read_bytes()
    res = cli("datasets", "show", "bert-A", "--data", str(path))
    assert res.code == 2 and "line 2" in res.err and len(res.err.strip().splitlines()) == 1
    assert path.read_bytes() == store_bytes
    res = cli("datasets", "repair", str(path), "--json")
    assert res.code == 0, res.err
    out = _json.loads(res.out)
    assert out["moved_lines"] == [2] and out["kept"] == 1
    assert out["bad_file"] == f"{path}.bad.jsonl"
    assert (tmp_path / "s.jsonl.bad.jsonl").read_bytes() == b"{broken\n"
    res = cli("datasets", "repair", str(path))
    assert res.code == 0 and "no bad lines" in res.out
    res = cli("datasets", "repair", str(tmp_path / "missing.jsonl"))
    assert res.code == 2 and "missing.jsonl" in res.err


def test_show_states_the_repeat_runs_beside_the_store(cli, tmp_path: Path) -> None:
    from autosync_transfer._files import append_line
    from autosync_transfer.dataset.repeat import repeat_path

    store = TrialStore(tmp_path / "bert-A.jsonl")
    for i, (sid, t) in enumerate((("a", 0.1), ("b", 0.2), ("c", 0.4))):
        store.append(_record(str(i), sid, t))
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert res.code == 0, res.err
    assert "repeatability: no repeat runs" in res.out
    path = repeat_path(store.path)
    for run, drift in (("r1", 1.0), ("r2", 1.3), ("r3", 0.8)):
        append_line(path, json.dumps({"kind": "plan", "run": run, "domain": "bert-A",
                                      "strategy_ids": ["a", "b", "c"],
                                      "orders": [["a", "b", "c"]] * 3,
                                      "protocol": {"warmup": 2, "iters": 5},
                                      "launcher": "emulated", "seed": 0, "created": "t"}), "t")
        for k in range(3):
            for sid, t in (("a", 0.1), ("b", 0.2), ("c", 0.4)):
                append_line(path, json.dumps({
                    "kind": "measurement", "run": run, "round": k, "strategy_id": sid,
                    "status": "ok", "median_s": t * drift * (1 + 0.01 * k), "wall_s": 10.0,
                    "cpu": {}}), "t")
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert res.code == 0, res.err
    assert "runs r1, r2, r3 (3 complete" in res.out and "3 of 3 pairs resolved" in res.out
    assert "no run orders it the other way" in res.out
    for a, b in (("r1", "r2"), ("r1", "r3"), ("r2", "r3")):  # every pair of runs
        assert f"runs {a} and {b} order alike 1.000 of the 3 pairs both resolve" in res.out
    shown = json.loads(cli("datasets", "show", "bert-A", "--data", str(store.path),
                           "--json").out)["repeatability"]
    assert shown["agreement"] == 1.0 and shown["resolved_pairs"] == 3
    assert [a["runs"] for a in shown["agreements"]] == [["r1", "r2"], ["r1", "r3"], ["r2", "r3"]]
    assert shown["machine_s"] == 270.0
    # a run on another machine type is shown on its own, never pooled with r1-r3
    append_line(path, json.dumps({"kind": "plan", "run": "x1", "domain": "bert-A",
                                  "strategy_ids": ["a", "b", "c"], "orders": [["c", "b", "a"]],
                                  "protocol": {"warmup": 2, "iters": 5}, "launcher": "emulated",
                                  "seed": 0, "created": "t",
                                  "machine": {"processor": "Other CPU"}}), "t")
    for sid, t in (("a", 0.5), ("b", 0.2), ("c", 0.4)):
        append_line(path, json.dumps({"kind": "measurement", "run": "x1", "round": 0,
                                      "strategy_id": sid, "status": "ok", "median_s": t,
                                      "wall_s": 10.0, "cpu": {}}), "t")
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert "repeatability: runs r1, r2, r3 (3 complete" in res.out
    assert "repeatability on Other CPU: runs x1 (1 complete" in res.out
    info = json.loads(cli("datasets", "show", "bert-A", "--data", str(store.path),
                          "--json").out)
    assert info["repeatability"]["machine_s"] == 270.0
    assert [r["processor"] for r in info["repeatability_other_machines"]] == ["Other CPU"]
    # a wider run beside them: the sizes are stated, and pairs count where measured together
    append_line(path, json.dumps({"kind": "plan", "run": "r4", "domain": "bert-A",
                                  "strategy_ids": ["a", "b", "c", "d"],
                                  "orders": [["d", "c", "b", "a"]] * 3,
                                  "protocol": {"warmup": 2, "iters": 5}, "launcher": "emulated",
                                  "seed": 0, "created": "t"}), "t")
    for k in range(3):
        for sid, t in (("a", 0.1), ("b", 0.2), ("c", 0.4), ("d", 0.8)):
            append_line(path, json.dumps({"kind": "measurement", "run": "r4", "round": k,
                                          "strategy_id": sid, "status": "ok",
                                          "median_s": t * (1 + 0.01 * k), "wall_s": 10.0,
                                          "cpu": {}}), "t")
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert res.code == 0, res.err
    assert "4 strategies (runs of 3, 3, 3 and 4) x 12 rounds" in res.out
    assert "6 of 6 pairs measured in 3 rounds together, resolved" in res.out


def test_show_states_the_physics_measured_with_a_repeat_run(cli, tmp_path: Path) -> None:
    from autosync_transfer._files import append_line
    from autosync_transfer.dataset.loader import find_domain
    from autosync_transfer.dataset.repeat import repeat_path, run_physics_dir
    from autosync_transfer.domains.physics import (find_calibration, find_profile,
                                                   save_calibration, save_profile)

    store = TrialStore(tmp_path / "bert-A.jsonl")
    for i, (sid, t) in enumerate((("a", 0.1), ("b", 0.2))):
        store.append(_record(str(i), sid, t))
    path = repeat_path(store.path)
    for run in ("r1", "p1"):
        append_line(path, json.dumps({"kind": "plan", "run": run, "domain": "bert-A",
                                      "strategy_ids": ["a", "b"], "orders": [["a", "b"]] * 3,
                                      "protocol": {"warmup": 2, "iters": 5},
                                      "launcher": "emulated", "seed": 0, "created": "t"}), "t")
        for k in range(3):
            for sid, t in (("a", 0.1), ("b", 0.2)):
                append_line(path, json.dumps({
                    "kind": "measurement", "run": run, "round": k, "strategy_id": sid,
                    "status": "ok", "median_s": t * (1 + 0.01 * k), "wall_s": 10.0,
                    "cpu": {}}), "t")
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert res.code == 0, res.err
    assert "physics measured" not in res.out
    # the shipped physics of bert-A, as if measured with run p1
    domain = find_domain("bert-A")
    cal = find_calibration(domain.cluster.fingerprint)
    prof = find_profile(domain.model.fingerprint)
    d = run_physics_dir(store.path, "p1")
    save_calibration(cal, folder=d / "calibrations")
    save_profile(prof, folder=d / "profiles")
    res = cli("datasets", "show", "bert-A", "--data", str(store.path))
    assert res.code == 0, res.err
    line = next(x for x in res.out.splitlines() if "physics measured" in x)
    assert line.strip().startswith(f"physics measured with run p1: calibration {cal.created_at}")
    assert f"PS piece {1e6 * cal.ps_piece_s:.0f} us" in line and str(d) in line
    assert "run r1" not in res.out.split("physics measured")[1]
    shown = json.loads(cli("datasets", "show", "bert-A", "--data", str(store.path),
                           "--json").out)["repeatability"]["run_physics"]
    assert [p["run"] for p in shown] == ["p1"] and shown[0]["profile"] == prof.created_at
