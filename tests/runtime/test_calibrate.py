"""Calibrating a cluster through the runtime's workers: shaped links recovered, the compute
slowdown of workers sharing cores, versions kept and the newest found, reuse by fingerprint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from autosync_transfer.domains.cluster import Cluster, Node
from autosync_transfer.domains.physics import (calibration_stem, find_calibration,
                                               find_calibrations, save_calibration)
from autosync_transfer.domains.profile import ClusterCalibration, NodeCalibration
from autosync_transfer.errors import ConfigError
from autosync_transfer.runtime.calibrate import calibrate_cluster, get_calibration
from autosync_transfer.runtime.emulation import available
from autosync_transfer.runtime.profile import processor_name

ROOT = Path(__file__).resolve().parents[2]

#: what TCP gets through a tbf-shaped link (1448 payload bytes per 1514-byte frame)
GOODPUT = 0.957


def _cluster(name: str, nodes: list[tuple[int, float]]) -> Cluster:
    return Cluster(name=name, nodes=tuple(
        Node(name=f"w{i}", address=f"10.88.0.{i + 1}", workers=w, bandwidth_gbps=bw,
             chief=(i == 0)) for i, (w, bw) in enumerate(nodes)))


def _calibration(created_at: str, bw: float = 1.0) -> ClusterCalibration:
    return ClusterCalibration(cluster="t", fingerprint="f00", launcher="emulated",
                              nodes=(NodeCalibration(name="w0", bandwidth_gbps=bw, latency_s=0),),
                              intra_bandwidth_gbps=5.0, created_at=created_at)


def test_calibrations_are_versioned_and_the_newest_wins(tmp_path) -> None:
    first = save_calibration(_calibration("2026-01-01T00:00:00+00:00", 1.0), folder=tmp_path)
    second = save_calibration(_calibration("2026-02-01T00:00:00+00:00", 2.0), folder=tmp_path)
    stem = calibration_stem("t", "f00", "emulated")
    assert (first.name, second.name) == (f"{stem}.v1.json", f"{stem}.v2.json")
    assert first.exists()  # the older version stays
    found = find_calibration("f00", "emulated", folder=tmp_path)
    assert found is not None and found.nodes[0].bandwidth_gbps == 2.0
    assert find_calibration("f00", "torchrun", folder=tmp_path) is None
    assert find_calibration("other", folder=tmp_path) is None
    assert len(find_calibrations(folder=tmp_path)) == 2
    (tmp_path / "broken.json").write_text("{not json")  # skipped, not fatal
    assert len(find_calibrations(folder=tmp_path)) == 2


def test_local_calibration_is_stored_and_reused(tmp_path) -> None:
    cluster = _cluster("loc", [(2, 1.0)])  # one node, two workers: the intra-node path
    cal, measured = get_calibration(cluster, "local", folder=tmp_path, attempts=1, reps=1)
    assert measured and cal.launcher == "local" and cal.fingerprint == cluster.fingerprint
    assert cal.nodes[0].bandwidth_gbps == 1.0  # one node: nothing crosses its NIC, spec kept
    assert cal.intra_bandwidth_gbps > 0 and cal.intra_latency_s > 0
    assert set(cal.compute_slowdown) == {1, 2} and cal.compute_slowdown[1] == 1.0
    assert cal.host_cores == (os.cpu_count() or 1) and cal.seconds > 0
    # every size a step's buckets span, each by its median over interleaved repetitions
    assert sorted(cal.allreduce_s) == [4, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20]
    assert cal.allreduce_stat == "median"
    # the executor's cost per parameter-server piece, dense and row-sparse (milliseconds here)
    assert 0 < cal.ps_piece_s < 0.05 and 0 < cal.ps_sparse_piece_s < 0.1
    # what one more all-reduce collective adds to a step bound by its PS work (0 when nothing),
    # with buckets of thousands of elements as the executor's, and how many it used
    assert cal.ar_collective_s is not None and 0 <= cal.ar_collective_s < 0.05
    assert cal.ar_collective_elements == 4096
    # the CPU a rank's ring spends per element, float32 and float16 (nanoseconds here), and
    # the machine type it was measured on
    assert 0 <= cal.ar_cpu_s_per_element < 1e-6 and 0 <= cal.ar_fp16_cpu_s_per_element < 1e-6
    assert cal.processor == processor_name()
    again, measured = get_calibration(cluster, "local", folder=tmp_path)
    assert not measured and again == cal
    # a changed cluster has another fingerprint: nothing stored is found for it
    changed = _cluster("loc", [(2, 2.0)])
    assert find_calibration(changed.fingerprint, folder=tmp_path) is None
    forced, measured = get_calibration(cluster, "local", folder=tmp_path, force=True,
                                       attempts=1, reps=1)
    assert measured and len(list(tmp_path.glob("*.json"))) == 2


def test_bad_arguments_name_the_parameter() -> None:
    cluster = _cluster("x", [(1, 1.0), (1, 1.0)])
    with pytest.raises(ConfigError, match="launcher must be one of emulated, local, got 'ssh'"):
        calibrate_cluster(cluster, "ssh")
    with pytest.raises(ConfigError, match="reps must be an int >= 1, got 0"):
        calibrate_cluster(cluster, "local", reps=0)
    with pytest.raises(ConfigError, match="cluster must be a Cluster"):
        calibrate_cluster("A", "local")  # type: ignore[arg-type]


@pytest.mark.netns
@pytest.mark.exclusive  # a rate measured on the machine: alone
def test_emulated_calibration_recovers_shaped_bandwidth() -> None:
    ok, why = available()
    if not ok:
        pytest.skip(why)
    # w0: two workers behind a 0.4 Gbit/s NIC; w1: one behind 0.2 Gbit/s
    cluster = _cluster("cal", [(2, 0.4), (1, 0.2)])
    cal = calibrate_cluster(cluster, "emulated", attempts=1, reps=2)
    bw = {n.name: n.bandwidth_gbps for n in cal.nodes}
    # the slow node's NIC is recovered within 25 %
    assert bw["w1"] == pytest.approx(0.2 * GOODPUT, rel=0.25), bw
    # the fast one can only be pushed as hard as its one peer pushes: a lower bound
    assert 0.2 * GOODPUT * 0.75 <= bw["w0"] <= 0.4 * 1.1, bw
    # the two workers of w0 talk over the namespace's loopback, unshaped
    assert cal.intra_bandwidth_gbps > 2 * 0.4, cal.intra_bandwidth_gbps
    assert all(0 < n.latency_s < 0.05 for n in cal.nodes)
    assert set(cal.compute_slowdown) == {1, 2, 3}
    assert 0 < cal.ps_piece_s < 0.05 and 0 < cal.ps_sparse_piece_s < 0.1
    assert cal.ar_collective_s is not None and 0 <= cal.ar_collective_s < 0.05
    assert cal.ar_cpu_s_per_element is not None and cal.ar_fp16_cpu_s_per_element is not None
    assert json.loads(cal.model_dump_json())["launcher"] == "emulated"


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "needle"), [
    (["clusters", "calibrate"], "give NAME"),
    (["clusters", "calibrate", "Z"], "unknown cluster 'Z'"),
    (["clusters", "calibrate", "A", "--launcher", "ssh"], "--launcher must be one of"),
    (["clusters", "calibrate", "A", "--cluster-file", "x.yml"], "not both"),
    (["clusters", "calibrate", "--cluster-file", "/nonexistent/c.yml"], "c.yml"),
    (["clusters", "show", "--cluster-file", "/nonexistent/c.yml"], "c.yml"),
    (["domains", "profile"], "give NAME"),
    (["domains", "profile", "bert-3l", "--model", "zoo:ncf"], "one of them"),
    (["domains", "profile", "nosuch"], "nosuch"),
    (["domains", "profile", "bert-large-A"], "not runnable"),
    (["domains", "profile", "--model", "/nonexistent/m.py"], "m.py"),
    (["domains", "profile", "ncf", "--threads", "0"], "--threads"),
])
def test_cli_bad_input_is_one_line(cli, argv, needle) -> None:
    from autosync_transfer.testing.cli import assert_one_line_error

    assert_one_line_error(cli(*argv), needle)


def test_cli_show_prints_a_stored_calibration(cli, tmp_path, monkeypatch) -> None:
    from autosync_transfer.domains.catalog import get_cluster

    monkeypatch.setenv("AUTOSYNC_CALIBRATIONS_DIR", str(tmp_path))
    cluster = get_cluster("A")
    cal = _calibration("2999-01-01T00:00:00+00:00").model_copy(
        update={"fingerprint": cluster.fingerprint, "cluster": "A"})
    save_calibration(cal)
    res = cli("clusters", "show", "A", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["calibration"]["created_at"] == cal.created_at
    res = cli("clusters", "calibrate", "A")  # stored: reused, nothing measured
    assert res.code == 0 and "reused" in res.out, res.out


def test_a_calibration_written_before_the_median_protocol_says_how_it_was_measured() -> None:
    # the shipped AMD calibrations v1-v3: fastest repetitions, one-element collectives
    shipped = sorted((ROOT / "datasets/calibrations").glob("B-*.v3.json"))
    assert shipped, "the shipped v3 calibration of cluster B"
    old = ClusterCalibration.model_validate_json(shipped[-1].read_text())
    assert old.allreduce_stat == "min" and old.ar_collective_elements is None
    with pytest.raises(ValidationError, match="allreduce_stat"):
        ClusterCalibration.model_validate({**old.model_dump(), "allreduce_stat": "mean"})
